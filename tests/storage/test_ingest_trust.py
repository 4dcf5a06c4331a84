"""What ingest stores and says about unusual traces (issue 11): negative durations (Kineto and nsys), device
events of categories kernelscope does not map, truncated traces read with --salvage. Hand-built traces
(real JSON/SQLite read by the real parsers), each named after its case."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from stores import empty

from kernelscope.analysis.summary import no_gpu_reason, summary
from kernelscope.cli import cli
from kernelscope.storage.ingest import ingest_file, ingest_paths
from kernelscope.storage.store import open_store
from storage.kineto_build import PID, kern, op, rt, write_trace, x

ROOT = Path(__file__).resolve().parents[2]
NSYS_GZ = ROOT / "sample_traces" / "nsight" / "encoder2_nvtx.sqlite.gz"
TABLES = ("traces", "cpu_ops", "launches", "gpu_activities", "annotations", "other_events", "busy_intervals")


def _counts(store) -> dict[str, int]:
    return {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def _one_trace(tmp_path, path, **kw):
    store = open_store(empty(tmp_path / "s.duckdb"))
    r = ingest_file(store, path, **kw)
    assert r.status == "ingested", r.message
    return store, r


# ------------------------------------------------------------------------------------ negative durations


def negative_kineto_events() -> list[dict]:
    """Two ops each launching a kernel; kernel k_neg has dur -154.399 us (HTA #317), op aten::neg -5 us.

    Good kernels: k_ok [40, 50) and k_ok2 [300, 320) us -> kernel_time 30 us; k_neg is stored as 0 ns."""
    return [
        op("aten::mm", 10, 100, 1),
        rt("cudaLaunchKernel", 20, 5, 11, 1),
        op("aten::neg", 200, -5, 2),  # negative CPU op: as written by a skewed clock
        rt("cudaLaunchKernel", 210, 5, 12, 2),
        op("aten::add", 250, 100, 3),
        rt("cudaLaunchKernel", 260, 5, 13, 3),
        kern("k_ok", 40, 10, 11, 1),
        kern("k_neg", 220, -154.399, 12, 2),
        kern("k_ok2", 300, 20, 13, 3),
    ]


def test_negative_durations_kineto_clamped_and_counted(tmp_path):
    path = write_trace(tmp_path / "negative_dur.json", negative_kineto_events())
    store, r = _one_trace(tmp_path, path)
    with store:
        t = r.trace_id
        assert "2 negative durations stored as 0" in r.message
        durs = dict(store.con.execute("SELECT name, dur_ns FROM gpu_activities WHERE trace_id = ?", [t]).fetchall())
        assert durs == {"k_ok": 10_000, "k_neg": 0, "k_ok2": 20_000}
        assert store.con.execute("SELECT min(dur_ns), min(end_ns - start_ns) FROM cpu_ops").fetchone() == (0, 0)
        for table in ("launches", "annotations", "other_events", "python_calls", "busy_intervals"):
            col = "end_ns - start_ns" if table == "busy_intervals" else "dur_ns"
            assert store.con.execute(f"SELECT count(*) FROM {table} WHERE {col} < 0").fetchone()[0] == 0, table
        s = summary(store, t).to_dict()
        assert s["kernel_time_ns"] == 30_000 and s["busy_ns"] == 30_000
        assert s["latency_ns"] == (320 - 10) * 1000  # first top-level op start -> last GPU end (was null)
        neg = s["trust"]["negative_durations"]
        assert neg["count"] == 2 and neg["kernels"] == 1 and neg["cpu_ops"] == 1
        assert neg["by_kind"]["kernel"] == {"count": 1, "min_ns": -154_399, "sum_ns": -154_399}
        assert neg["by_kind"]["cpu_op"] == {"count": 1, "min_ns": -5_000, "sum_ns": -5_000}
        assert any("2 events had a negative duration" in w and "-154,399 ns" in w for w in s["warnings"])
        for key in ("kernel_time_ns", "busy_ns", "gpu_span_ns", "idle_ns", "latency_ns"):
            assert s[key] >= 0, key
        raw = json.loads(store.con.execute("SELECT negative_durations FROM traces").fetchone()[0])
        assert raw["kernel"]["count"] == 1  # the raw value stays countable in the store


def test_no_negative_durations_is_an_empty_count(tmp_path):
    events = [e for e in negative_kineto_events() if e["dur"] >= 0]
    store, r = _one_trace(tmp_path, write_trace(tmp_path / "fine.json", events))
    with store:
        trust = summary(store, r.trace_id).trust
        assert trust["negative_durations"] == {"count": 0, "kernels": 0, "cpu_ops": 0, "by_kind": {}}
        assert not any("negative duration" in w for w in summary(store, r.trace_id).warnings)


def test_negative_durations_nsys_end_before_start(tmp_path):
    """nsys: a kernel whose end precedes its start (end - start = -2,500 ns): stored as 0, counted; the kernel
    time is the sum of the other kernels' end - start, read from the SQLite by hand."""
    db = tmp_path / "neg.sqlite"
    with gzip.open(NSYS_GZ, "rb") as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(db)
    (rowid,) = con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1 OFFSET 10").fetchone()
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 2500 WHERE rowid = ?', [rowid])
    (nvtx,) = con.execute('SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 AND "end" IS NOT NULL '
                          "ORDER BY start LIMIT 1 OFFSET 3").fetchone()
    con.execute('UPDATE NVTX_EVENTS SET "end" = start - 700 WHERE rowid = ?', [nvtx])  # a range too
    con.commit()
    want = con.execute('SELECT sum(max("end" - start, 0)), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    con.close()
    store, r = _one_trace(tmp_path, db)
    with store:
        s = summary(store, r.trace_id).to_dict()
        assert (s["kernel_time_ns"], s["kernels"]) == tuple(want)
        neg = s["trust"]["negative_durations"]
        assert neg["kernels"] == 1 and neg["count"] == 2 and neg["by_kind"]["kernel"]["min_ns"] == -2500
        (other,) = [v for k, v in neg["by_kind"].items() if k != "kernel"]  # the NVTX range: an op or a phase
        assert other == {"count": 1, "min_ns": -700, "sum_ns": -700}
        assert not any("never closed" in w for w in s["trust"]["parser_warnings"])
        assert store.con.execute("SELECT count(*) FROM gpu_activities WHERE dur_ns < 0").fetchone()[0] == 0


# ---------------------------------------------------------------------------- unmapped categories


def accelerator_events() -> list[dict]:
    """CUDA work plus what no kind maps: 3 MTIA device events (their own pid, no args), a CUDA profiler range on
    the GPU's row, 2 events of an unknown category on the host, and the profiler's own records (Trace span,
    overhead) that are not counted as set aside."""
    return [
        op("aten::mm", 10, 100, 1),
        rt("cudaLaunchKernel", 20, 5, 11, 1),
        kern("k", 40, 10, 11, 1),
        *[x("mtia_ccp_events", f"mtia_kernel_{i}", 50 + 10 * i, 5, pid=7, tid=1) for i in range(3)],
        x("cuda_profiler_range", "range", 30, 50, pid=0, tid=7),
        x("my_custom_cat", "host thing", 60, 5),
        x("my_custom_cat", "host thing", 70, 5),
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 0, "dur": 500, "args": {}},
        x("overhead", "Buffer Flush", 80, 2, pid=-1, tid=0),
    ]


def test_unmapped_categories_counted_per_category(tmp_path):
    path = write_trace(tmp_path / "accel.json", accelerator_events())
    store, r = _one_trace(tmp_path, path)
    with store:
        assert "6 events of unmapped categories set aside" in r.message and "4 of them device events" in r.message
        aside = json.loads(store.con.execute("SELECT set_aside FROM traces").fetchone()[0])
        assert aside == {"cuda_profiler_range": {"events": 1, "device_events": 1},
                         "mtia_ccp_events": {"events": 3, "device_events": 3},
                         "my_custom_cat": {"events": 2, "device_events": 0}}
        s = summary(store, r.trace_id)
        assert s.trust["set_aside"]["events"] == 6 and s.trust["set_aside"]["device_events"] == 4
        assert any("4 device events" in w and "mtia_ccp_events 3" in w for w in s.warnings), s.warnings
        assert any("2 host events" in w and "my_custom_cat 2" in w for w in s.warnings), s.warnings
        # still stored, never lost: other_events keeps every set-aside event
        assert store.con.execute("SELECT count(*) FROM other_events WHERE cat LIKE 'mtia%'").fetchone()[0] == 3


def test_accelerator_only_trace_is_never_called_cpu_only(tmp_path):
    """No CUDA activity, only another accelerator's device events: the summary says what it holds."""
    events = [op("aten::mm", 10, 100, 1)] + [x("mtia_ccp_events", f"m{i}", 20 + i, 1, pid=7, tid=1)
                                             for i in range(5)]
    store, r = _one_trace(tmp_path, write_trace(tmp_path / "mtia_only.json", events))
    with store:
        s = summary(store, r.trace_id)
        assert s.scalars["kernels"] == 0 and s.trust["set_aside"]["device_events"] == 5
        no_gpu = [w for w in s.warnings if "GPU spans and latency are null" in w]
        assert len(no_gpu) == 1 and "5 device events" in no_gpu[0] and "not a CPU-only" in no_gpu[0]
        assert "the trace has no GPU activity:" not in " ".join(s.warnings)
        assert no_gpu_reason(store, r.trace_id) == ("it holds 5 device events kernelscope does not analyse "
                                                    "(mtia_ccp_events): not a CPU-only trace")
        cpu = ingest_file(store, write_trace(tmp_path / "cpu.json", [op("aten::mm", 10, 100, 1)]))
        assert no_gpu_reason(store, cpu.trace_id) == "a CPU-only trace"
    res = CliRunner().invoke(cli, ["traces", "--db", str(tmp_path / "s.duckdb")])
    assert "5 device events set aside" in res.stdout


def test_device_events_found_by_args_and_device_labels(tmp_path):
    """An unknown category is a device event when it carries args.device or lies on a process the profiler
    labels as a device ("GPU 1"), not when it lies on the host."""
    events = [
        op("aten::mm", 10, 100, 1),
        x("vendor_ev", "a", 20, 1, pid=PID, tid=1, device=0),  # args.device
        x("vendor_ev", "b", 21, 1, pid=55, tid=1),  # on the labelled device process below
        x("vendor_ev", "c", 22, 1),  # host
        {"ph": "M", "name": "process_labels", "pid": 55, "tid": 0, "args": {"labels": "GPU 1"}},
        {"ph": "M", "name": "process_labels", "pid": PID, "tid": 0, "args": {"labels": "CPU"}},
    ]
    store, r = _one_trace(tmp_path, write_trace(tmp_path / "vendor.json", events))
    with store:
        assert summary(store, r.trace_id).trust["set_aside"]["by_category"] == {
            "vendor_ev": {"events": 3, "device_events": 2}}


def test_ordinary_traces_set_nothing_aside(tmp_path):
    store, r = _one_trace(tmp_path, ROOT / "sample_traces" / "llama_decode" / "trace.json.gz")
    with store:  # its Trace span and 'overhead' records are the profiler's own
        assert summary(store, r.trace_id).trust["set_aside"] == {"events": 0, "device_events": 0, "by_category": {}}


# ---------------------------------------------------------------------------------------- truncated


def many_events(n: int = 400) -> list[dict]:
    """n launches of one kernel each, under one op per 10 launches: about 170 bytes per event."""
    out = []
    for i in range(n):
        if i % 10 == 0:
            out.append(op("aten::op", 10 * i, 95, 10_000 + i))
        out.append(rt("cudaLaunchKernel", 10 * i + 1, 2, i + 1, 10_000 + i - i % 10))
        out.append(kern(f"k{i}", 10 * i + 5, 3, i + 1, 10_000 + i - i % 10))
    return out


def complete_events_before(text: bytes) -> list[dict]:
    """Independently, the complete events of a (cut) Kineto text: json.raw_decode item after item."""
    s = text.decode("utf-8", "replace")
    i = s.index("[", s.index('"traceEvents"')) + 1
    dec = json.JSONDecoder()
    out = []
    while True:
        while i < len(s) and s[i] in " \n\r\t,":
            i += 1
        try:
            obj, i = dec.raw_decode(s, i)
        except ValueError:
            return out
        out.append(obj)


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_truncated_trace_refused_then_salvaged(tmp_path, gz):
    doc_path = write_trace(tmp_path / "whole.json", many_events())
    text = doc_path.read_bytes()
    cut = tmp_path / ("cut.json.gz" if gz else "cut.json")
    if gz:  # the gzip stream itself is cut mid-way (the writer was killed): decompress what is there
        z = gzip.compress(text)
        cut.write_bytes(z[: int(len(z) * 0.55)])
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        visible = d.decompress(z[: int(len(z) * 0.55)])
    else:
        visible = text[: int(len(text) * 0.55)]
        cut.write_bytes(visible)
    kept = complete_events_before(visible)
    want = len(kept)
    assert 100 < want < 1000
    db = tmp_path / "s.duckdb"
    runner = CliRunner()
    no = runner.invoke(cli, ["ingest", str(cut), "--db", str(db)])
    assert no.exit_code == 1 and "Traceback" not in no.output
    (line,) = no.stderr.strip().splitlines()
    assert line.startswith(f"kernelscope: {cut}: ") and "truncated" in line and "--salvage" in line, line
    with open_store(db) as store:
        assert set(_counts(store).values()) == {0}
    yes = runner.invoke(cli, ["ingest", "--salvage", str(cut), "--db", str(db)])
    assert yes.exit_code == 0, yes.output
    assert f"{want} events" in yes.stdout and f"TRUNCATED at byte {len(visible):,}: kept {want:,}" in yes.stdout
    with open_store(db, read_only=True) as store:
        (tid, trunc) = store.con.execute("SELECT trace_id, truncated FROM traces").fetchone()
        trunc = json.loads(trunc)
        assert trunc["events_kept"] == want and trunc["read_bytes"] == len(visible) and trunc["gzip"] is gz
        assert trunc["at_byte"] <= len(visible) and trunc["base_time_lost"] is True  # written after the events
        assert ("before its end marker" in trunc["reason"]) is gz
        # every complete event before the cut is stored, no more: the kernels and ops among them
        assert store.con.execute("SELECT count(*) FROM gpu_activities").fetchone()[0] == sum(
            e["cat"] == "kernel" for e in kept)
        assert store.con.execute("SELECT count(*) FROM cpu_ops").fetchone()[0] == sum(e["cat"] == "cpu_op" for e in kept)
        s = summary(store, tid)
        assert s.trust["truncated"]["events_kept"] == want
        assert s.warnings[0].startswith("TRUNCATED trace")
    listing = runner.invoke(cli, ["traces", "--db", str(db), "--format", "json"])
    (row,) = json.loads(listing.stdout)
    assert row["notes"] == [f"TRUNCATED at byte {len(visible):,} ({want:,} events kept)"]


def test_salvage_of_a_whole_trace_changes_nothing(tmp_path):
    path = write_trace(tmp_path / "whole.json.gz", many_events(50), gz=True)
    store, r = _one_trace(tmp_path, path, salvage=True)
    with store:
        assert store.con.execute("SELECT truncated FROM traces").fetchone()[0] is None
        assert "TRUNCATED" not in r.message and summary(store, r.trace_id).trust["truncated"] is None


def test_salvage_refuses_a_cut_before_the_first_event(tmp_path):
    text = write_trace(tmp_path / "whole.json", many_events(5)).read_bytes()
    cut = tmp_path / "head_only.json"
    cut.write_bytes(text[: text.index(b'"traceEvents"') + 30])
    with open_store(tmp_path / "s.duckdb") as store:
        r = ingest_file(store, cut, salvage=True)
        assert r.status == "failed" and "nothing to salvage" in r.message
        assert set(_counts(store).values()) == {0}


def test_salvage_of_a_rank_run(tmp_path):
    """--salvage reaches rank files too: one cut rank of two is kept and marked, the other is whole."""
    from storage.ranks_build import AR, coll, dist
    from storage.ranks_build import write_trace as write_rank

    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        evs = [coll(AR, 100 * i, 50, i + 1, rank=r) for i in range(40)]
        write_rank(d / f"rank{r}.json", evs, distributedInfo=dist(r, 2))
    text = (d / "rank1.json").read_bytes()
    (d / "rank1.json").write_bytes(text[: len(text) // 2])
    with open_store(tmp_path / "s.duckdb") as store:
        assert [r.status for r in ingest_paths(store, [d])] == ["failed"]
        res = ingest_paths(store, [d], salvage=True)
        assert [r.status for r in res] == ["ingested", "ingested"], res
        assert "TRUNCATED" not in res[0].message and "TRUNCATED" in res[1].message
        rows = store.con.execute("SELECT rank, truncated IS NOT NULL FROM traces ORDER BY rank").fetchall()
        assert rows == [(0, False), (1, True)]
