"""Ingest: exact links on hand-built traces, real-trace ingest, skip/failure semantics, runs, labels, rm."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stores import empty

from kernelscope.errors import UsageError
from kernelscope.storage.ingest import expand_paths, ingest_file, ingest_paths, ingest_run
from kernelscope.storage.labels import parse_label
from kernelscope.storage.queries import (
    list_traces,
    remove_traces,
    resolve_trace,
    set_labels,
    trace_tables,
)
from kernelscope.storage.store import open_store

from .kineto_build import BASE, kern, links_events, op, rt, write_trace

DATA = Path(__file__).resolve().parents[1] / "data"


def all_counts(store) -> dict[str, int]:
    tables = [r[0] for r in store.con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema='main'").fetchall()]
    return {t: store.con.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in tables}


@pytest.fixture
def store(tmp_path):
    with open_store(empty(tmp_path / "s.duckdb")) as s:
        yield s


@pytest.fixture
def links(store, tmp_path):
    res = ingest_file(store, write_trace(tmp_path / "links.json", links_events()))
    assert res.status == "ingested", res.message
    return res.trace_id


def kernel_links(store, tid):
    return {r[0]: r[1:] for r in store.con.execute(
        """SELECT a.name, leaf.name, top.name, a.is_graph, l.name
           FROM gpu_activities a
           LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
           LEFT JOIN cpu_ops leaf ON leaf.trace_id = a.trace_id AND leaf.op_id = a.leaf_op_id
           LEFT JOIN cpu_ops top ON top.trace_id = a.trace_id AND top.op_id = a.top_op_id
           WHERE a.trace_id = ?""", [tid]).fetchall()}


def test_kernel_leaf_and_top_links(store, links):
    k = kernel_links(store, links)
    assert k["k_addmm"] == ("aten::addmm", "aten::linear", False, "cudaLaunchKernel")
    assert k["Memcpy HtoD (Pageable -> Device)"] == ("aten::addmm", "aten::linear", False, "cudaMemcpyAsync")
    # relu starts exactly where linear ends: top-level sibling, not a child
    assert k["k_relu"] == ("aten::relu", "aten::relu", False, "cudaLaunchKernel")
    # autograd thread keeps its thread: aten::sum on the main thread encloses the time but not the thread
    bw = "autograd::engine::evaluate_function: AddmmBackward0"
    assert k["k_mm_backward"] == ("aten::mm", bw, False, "cudaLaunchKernel")
    # driver API launch (Triton), after aten::mm ended
    assert k["triton_poi_fused"] == (bw, bw, False, "cuLaunchKernel")
    for node in ("g_node0", "g_node1", "g_node2"):
        assert k[node] == (None, None, True, "cudaGraphLaunch")


def test_operator_nesting_phases_and_annotations(store, links):
    ops = {r[0]: r[1:] for r in store.con.execute(
        """SELECT o.name, p.name, t.name, o.depth, ph.name FROM cpu_ops o
           LEFT JOIN cpu_ops p ON p.trace_id = o.trace_id AND p.op_id = o.parent_op_id
           LEFT JOIN cpu_ops t ON t.trace_id = o.trace_id AND t.op_id = o.top_op_id
           LEFT JOIN annotations ph ON ph.trace_id = o.trace_id AND ph.ann_id = o.phase_id
           WHERE o.trace_id = ?""", [links]).fetchall()}
    assert ops["aten::linear"] == (None, "aten::linear", 0, "fwd")
    assert ops["aten::addmm"] == ("aten::linear", "aten::linear", 1, "fwd")
    assert ops["aten::relu"] == (None, "aten::relu", 0, "fwd")
    assert ops["aten::sum"] == (None, "aten::sum", 0, "ProfilerStep#3")
    assert ops["aten::mm"][:3] == ("autograd::engine::evaluate_function: AddmmBackward0",
                                   "autograd::engine::evaluate_function: AddmmBackward0", 1)
    assert ops["aten::mm"][3] is None  # no annotation on the autograd thread
    anns = {r[0]: r[1:] for r in store.con.execute(
        """SELECT a.name, a.kind, a.step, p.name FROM annotations a
           LEFT JOIN annotations p ON p.trace_id = a.trace_id AND p.ann_id = a.parent_ann_id
           WHERE a.trace_id = ?""", [links]).fetchall()}
    assert anns["ProfilerStep#3"] == ("step", 3, None)
    assert anns["fwd"] == ("user", None, "ProfilerStep#3")


def test_launch_table(store, links):
    rows = {r[0]: r[1:] for r in store.con.execute(
        """SELECT correlation, launch_type, activities, ext_agrees, api FROM launches WHERE trace_id = ?""",
        [links]).fetchall()}
    assert rows[11] == ("kernel", 1, True, "runtime")
    assert rows[14] == ("kernel", 1, True, "driver")
    assert rows[15] == ("graph", 3, None, "runtime")  # External id 0 matches no operator
    assert rows[16] == ("sync", 0, None, "runtime")
    assert rows[17] == ("memcpy", 1, True, "runtime")
    agree = store.con.execute(
        "SELECT count(*) FILTER (ext_agrees), count(*) FILTER (NOT ext_agrees) FROM launches WHERE trace_id=?",
        [links]).fetchall()[0]
    assert agree == (5, 0)


def test_times_busy_union_and_trace_row(store, links):
    k = store.con.execute(
        "SELECT start_ns, dur_ns, end_ns FROM gpu_activities WHERE trace_id=? AND name='k_addmm'", [links]
    ).fetchall()[0]
    assert k == (BASE + 40_000, 10_000, BASE + 50_000)
    busy = store.con.execute(
        "SELECT start_ns - ?, end_ns - ? FROM busy_intervals WHERE trace_id=? AND device=0 ORDER BY 1",
        [BASE, BASE, links]).fetchall()
    assert busy == [(40_000, 55_000), (115_000, 120_000), (230_000, 240_000), (320_000, 330_000),
                    (620_000, 640_000), (650_000, 660_000)]
    t = store.con.execute(
        "SELECT rank, rank_source, base_time_ns, start_ns, end_ns, clock_offset_ns, name, format "
        "FROM traces WHERE trace_id=?", [links]).fetchall()[0]
    assert t == (0, "default", BASE, BASE, BASE + 1_000_000, 100_000, "links", "kineto")
    thr = store.con.execute("SELECT pid, tid, kind, name FROM threads WHERE trace_id=?", [links]).fetchall()
    assert thr == [(100, 200, "thread_name", "autograd")]


def test_old_external_ids_leave_ext_null(store, tmp_path):
    # pre-2.3 traces: a launch's External id is only a copy of its correlation id
    ev = [op("aten::add", 0, 50, 11), rt("cudaLaunchKernel", 10, 5, 11, 11), kern("k", 20, 5, 11, 11)]
    res = ingest_file(store, write_trace(tmp_path / "old.json", ev))
    row = store.con.execute(
        "SELECT ext_op_id, ext_agrees, leaf_op_id IS NOT NULL FROM launches WHERE trace_id=?", [res.trace_id]
    ).fetchall()
    assert row == [(None, None, True)]


def test_real_probe_trace(store, tmp_path):
    res = ingest_paths(store, [DATA / "probe_train.json.gz"])[0]
    assert res.status == "ingested", res.message
    tid = res.trace_id
    n = store.con.execute(
        """SELECT count(*), count(leaf_op_id), count(launch_id), count(*) FILTER (is_graph)
           FROM gpu_activities WHERE trace_id=? AND kind='kernel'""", [tid]).fetchall()[0]
    assert n == (28, 28, 28, 0)
    dis = store.con.execute(
        "SELECT count(*) FILTER (NOT ext_agrees), count(*) FILTER (ext_agrees) FROM launches WHERE trace_id=?",
        [tid]).fetchall()[0]
    assert dis[0] == 0 and dis[1] >= 31
    # busy union never exceeds the kernel sum and covers at least the longest activity
    busy, ksum, kmax = store.con.execute(
        """SELECT (SELECT sum(end_ns - start_ns) FROM busy_intervals WHERE trace_id=$t),
                  (SELECT sum(dur_ns) FROM gpu_activities WHERE trace_id=$t),
                  (SELECT max(dur_ns) FROM gpu_activities WHERE trace_id=$t)""", {"t": tid}).fetchall()[0]
    assert kmax <= busy <= ksum
    # exact links (checked by hand against the JSON): correlation -> (launch thread, api, leaf, top)
    got = {r[0]: r[1:] for r in store.con.execute(
        """SELECT a.correlation, l.tid, l.name, leaf.name, top.name
           FROM gpu_activities a JOIN launches l USING (trace_id, launch_id)
           JOIN cpu_ops leaf ON leaf.trace_id = a.trace_id AND leaf.op_id = a.leaf_op_id
           JOIN cpu_ops top ON top.trace_id = a.trace_id AND top.op_id = a.top_op_id
           WHERE a.trace_id=?""", [tid]).fetchall()}
    ev = "autograd::engine::evaluate_function: "
    assert got[24][1:] == ("cudaLaunchKernel", "aten::addmm", "aten::linear")
    assert got[119] == (487, "cudaLaunchKernel", "aten::div", ev + "MeanBackward0")  # autograd thread
    assert got[179] == (487, "cuLaunchKernel", "aten::mm", ev + "AddmmBackward0")  # driver launch
    assert got[401][1:] == ("cudaMemcpyAsync", "aten::_local_scalar_dense", "aten::item")
    assert got[293][1:] == ("cudaLaunchKernel", "aten::_foreach_mul_", "aten::_foreach_mul_")


def test_twin_skipped(store, tmp_path):
    shutil.copy(DATA / "probe_train.json.gz", tmp_path / "a.json.gz")
    (tmp_path / "b.json").write_bytes(gzip.decompress((DATA / "probe_train.json.gz").read_bytes()))
    res = ingest_paths(store, [tmp_path])
    assert [r.status for r in res] == ["ingested", "skipped"]
    assert res[1].message == f"already stored as {res[0].trace_id}"
    assert store.con.execute("SELECT count(*) FROM traces").fetchall()[0][0] == 1


def test_failed_files_leave_every_table_unchanged(store, tmp_path, links):
    before = all_counts(store)
    dup = [rt("cudaLaunchKernel", 10, 5, 11, 1), rt("cudaLaunchKernel", 20, 5, 11, 2), kern("k", 30, 5, 11, 1)]
    bad_dir = tmp_path / "mixed"
    bad_dir.mkdir()
    write_trace(bad_dir / "a_dup.json", dup)
    full = json.dumps({"traceEvents": links_events()[:5], "baseTimeNanoseconds": BASE})
    (bad_dir / "b_trunc.json").write_text(full[: len(full) // 2])
    (bad_dir / "c_empty.json.gz").write_bytes(b"")
    res = ingest_paths(store, [bad_dir])
    assert [r.status for r in res] == ["failed"] * 3
    assert "correlation" in res[0].message and "\n" not in res[0].message
    assert all_counts(store) == before
    # a good file alongside bad ones still lands
    write_trace(bad_dir / "d_good.json", [op("aten::x", 0, 10, 1)])
    res = ingest_paths(store, [bad_dir])
    assert [r.status for r in res] == ["failed", "failed", "failed", "ingested"]


def test_labels_numeric_typing_and_set(store, tmp_path, links):
    assert parse_label("batch=8") == ("batch", "8", 8.0)
    assert parse_label("lr=1e-3") == ("lr", "1e-3", 0.001)
    assert parse_label("model=gpt2") == ("model", "gpt2", None)
    assert parse_label("x=nan")[2] is None and parse_label("x=inf")[2] is None
    assert parse_label("x=1_000")[2] is None
    with pytest.raises(UsageError):
        parse_label("batch")
    set_labels(store, links, {"batch": "8", "model": "gpt2"})
    set_labels(store, links, {"batch": "16"})
    rows = store.con.execute(
        "SELECT key, value_text, value_num FROM labels WHERE trace_id=? ORDER BY key", [links]).fetchall()
    assert rows == [("batch", "16", 16.0), ("model", "gpt2", None)]
    df = list_traces(store)
    assert df.loc[0, "labels"] == {"batch": "16", "model": "gpt2"}
    assert df.loc[0, "kernels"] == 7 and df.loc[0, "devices"] == [0]
    assert df.loc[0, "gpu_span_ns"] == 660_000 - 40_000


def test_resolve_trace(store, tmp_path, links):
    assert resolve_trace(store, links) == links
    assert resolve_trace(store, links[:5]) == links
    assert resolve_trace(store, "links.json") == links
    assert resolve_trace(store, "links") == links
    from kernelscope.errors import TraceNotFound

    with pytest.raises(TraceNotFound):
        resolve_trace(store, "nope")
    other = ingest_file(store, write_trace(tmp_path / "other.json", [op("aten::y", 0, 10, 1)])).trace_id
    common = next(i for i in range(12) if links[i] != other[i])
    if common > 0:
        with pytest.raises(UsageError, match="ambiguous"):
            resolve_trace(store, links[:common])


def test_rm_removes_every_row(store, tmp_path, links):
    other = ingest_file(store, write_trace(tmp_path / "other.json", [op("aten::y", 0, 10, 1)])).trace_id
    set_labels(store, links, {"batch": "8"})
    assert remove_traces(store, [links]) == 1
    for t in trace_tables(store.con):
        assert store.con.execute(f'SELECT count(*) FROM "{t}" WHERE trace_id=?', [links]).fetchall()[0][0] == 0
    assert store.con.execute("SELECT count(*) FROM cpu_ops WHERE trace_id=?", [other]).fetchall()[0][0] == 1
    assert "gpu_activities" in trace_tables(store.con) and "telemetry" in trace_tables(store.con)


def test_ingest_run_directory(store, tmp_path):
    run = tmp_path / "run1"
    run.mkdir()
    shutil.copy(DATA / "probe_train.json.gz", run / "trace.json.gz")
    pq.write_table(pa.table({"device_uuid": ["GPU-1", "GPU-1"], "device_index": [0, 0],
                             "ts_ns": [BASE, BASE + 50_000_000], "power_mw": [100_000, 120_000],
                             "energy_mj": [1000, 1006]}), run / "telemetry.parquet")
    (run / "run.json").write_text(json.dumps({
        "name": "mlp", "labels": {"batch": "8"}, "provenance": {"gpu": "H200"}, "run_id": "r-1",
        "timings": [{"kind": "wall", "iteration": 0, "dur_ns": 5_000_000},
                    {"kind": "energy_loop", "iteration": None, "dur_ns": 1, "energy_mj": 2.5}]}))
    res = ingest_run(store, run, labels={"seq": "128"})
    assert res.status == "ingested", res.message
    tid = res.trace_id
    assert store.con.execute("SELECT name, run_id, provenance->>'gpu' FROM traces WHERE trace_id=?",
                             [tid]).fetchall() == [("mlp", "r-1", "H200")]
    assert store.con.execute("SELECT count(*), sum(power_mw), max(energy_mj) FROM telemetry WHERE trace_id=?",
                             [tid]).fetchall() == [(2, 220_000, 1006)]
    assert store.con.execute("SELECT kind, dur_ns, energy_mj FROM timings WHERE trace_id=? ORDER BY kind",
                             [tid]).fetchall() == [("energy_loop", 1, 2.5), ("wall", 5_000_000, None)]
    assert store.con.execute("SELECT key, value_num FROM labels WHERE trace_id=? ORDER BY key",
                             [tid]).fetchall() == [("batch", 8.0), ("seq", 128.0)]


def test_bad_run_json_stores_nothing(store, tmp_path):
    run = tmp_path / "run2"
    run.mkdir()
    shutil.copy(DATA / "probe_train.json.gz", run / "trace.json.gz")
    (run / "run.json").write_text(json.dumps({"timings": [{"iteration": 1}]}))
    before = all_counts(store)
    res = ingest_run(store, run)
    assert res.status == "failed" and "kind" in res.message
    assert all_counts(store) == before


def test_scratch_folder_removed_after_success_skip_and_failure(store, tmp_path):
    folder = store.path.parent
    good = write_trace(tmp_path / "g.json", [op("aten::x", 0, 10, 1)])
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op"')
    dup = write_trace(tmp_path / "dup.json", [rt("cudaLaunchKernel", 10, 5, 11, 1),
                                             rt("cudaLaunchKernel", 20, 5, 11, 2)])
    stale = folder / f".{store.path.name}.ingest-killed"  # left by an ingest that was killed
    (stale / "raw.parquet").parent.mkdir()
    (stale / "raw.parquet").write_bytes(b"x")
    twin = shutil.copy(good, tmp_path / "g2.json")
    res = ingest_paths(store, [good, twin, bad, dup])
    assert [r.status for r in res] == ["ingested", "skipped", "failed", "failed"]
    assert sorted(p.name for p in folder.iterdir() if "ingest" in p.name) == []


SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def test_directory_walk_ingests_run_directories_once_with_their_record(store, tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(SAMPLES / "compiled", root / "runs" / "compiled")
    shutil.copytree(SAMPLES / "small_kernels_graph", root / "runs" / "graph_no_name")
    record = json.loads((root / "runs" / "graph_no_name" / "run.json").read_text())
    record.pop("name", None)
    (root / "runs" / "graph_no_name" / "run.json").write_text(json.dumps(record))
    (root / "plain").mkdir()
    write_trace(root / "plain" / "my_trace.json.gz", [op("aten::x", 0, 10, 1)], gz=True)
    (root / "plain" / "run.json").write_text("{}")  # a stray run record without a trace: not a trace
    res = ingest_paths(store, [root])
    assert [(Path(r.path).name, r.status) for r in res] == [
        ("my_trace.json.gz", "ingested"), ("trace.json.gz", "ingested"), ("trace.json.gz", "ingested")]
    rows = store.con.execute(
        """SELECT t.name, (SELECT count(*) FROM telemetry m WHERE m.trace_id = t.trace_id),
                  (SELECT count(*) FROM labels l WHERE l.trace_id = t.trace_id), t.provenance IS NOT NULL
           FROM traces t ORDER BY t.name""").fetchall()
    want_name = json.loads((SAMPLES / "compiled" / "run.json").read_text())["name"]
    telemetry = pq.read_metadata(SAMPLES / "compiled" / "telemetry.parquet").num_rows
    assert telemetry > 0
    by_name = {r[0]: r[1:] for r in rows}
    assert set(by_name) == {want_name, "graph_no_name", "my_trace"}
    assert by_name[want_name][0] == telemetry and by_name[want_name][1] > 0 and by_name[want_name][2]
    assert by_name["my_trace"] == (0, 0, False)
    # again: everything is already stored; the run's trace is never tried on its own
    again = ingest_paths(store, [root, root / "runs" / "compiled", root / "runs" / "compiled" / "trace.json.gz",
                                 root / "runs" / "compiled" / "run.json"])
    assert [r.status for r in again] == ["skipped"] * 3
    assert store.con.execute("SELECT count(*) FROM traces").fetchall()[0][0] == 3
    assert expand_paths([root]) == [root / "plain" / "my_trace.json.gz"]


def test_plain_trace_name_drops_json_and_gz(store, tmp_path):
    a = ingest_paths(store, [write_trace(tmp_path / "step.7.json.gz", [op("aten::x", 0, 10, 1)], gz=True)])
    b = ingest_paths(store, [write_trace(tmp_path / "other.json", [op("aten::y", 0, 10, 1)])])
    names = dict(store.con.execute("SELECT trace_id, name FROM traces").fetchall())
    assert names[a[0].trace_id] == "step.7" and names[b[0].trace_id] == "other"


def test_a_generic_file_name_is_named_after_its_folder(store, tmp_path):
    """Two scripts' export_chrome_trace('trace.json') in their own folders: named after the folders, not 'trace'
    twice (which `analyze NAME` could not tell apart)."""
    (tmp_path / "bert_train").mkdir()
    (tmp_path / "gpt_infer").mkdir()
    a = ingest_paths(store, [write_trace(tmp_path / "bert_train" / "trace.json", [op("aten::x", 0, 10, 1)])])
    b = ingest_paths(store, [write_trace(tmp_path / "gpt_infer" / "trace.json.gz", [op("aten::y", 0, 10, 1)], gz=True)])
    names = dict(store.con.execute("SELECT trace_id, name FROM traces").fetchall())
    assert names[a[0].trace_id] == "bert_train" and names[b[0].trace_id] == "gpt_infer"


def test_duckdb_out_of_memory_is_one_line_and_nothing_is_stored(tmp_path, monkeypatch):
    """A memory limit too small for DuckDB: one 'failed' line naming the file and the setting to raise, exit
    code 1, no trace stored (one file and a run of rank files alike)."""
    from click.testing import CliRunner

    from kernelscope.cli import cli

    root = Path(__file__).resolve().parents[2] / "sample_traces"
    db = tmp_path / "s.duckdb"
    monkeypatch.setenv("KERNELSCOPE_MEMORY_LIMIT", "3MB")
    for path, hint in ((root / "llama_decode" / "trace.json.gz", False), (root / "ddp2", True)):
        res = CliRunner().invoke(cli, ["ingest", str(path), "--db", str(db)])
        assert res.exit_code == 1, res.output
        err = res.stderr.strip().splitlines()
        assert len(err) == 1 and "Out of Memory" in err[0] and "KERNELSCOPE_MEMORY_LIMIT" in err[0], err
        assert ("KERNELSCOPE_INGEST_WORKERS" in err[0]) == hint
        assert "Traceback" not in res.output
    monkeypatch.delenv("KERNELSCOPE_MEMORY_LIMIT")
    with open_store(db, read_only=True) as store:
        assert store.query("SELECT count(*) AS n FROM traces")["n"].iloc[0] == 0
        assert store.query("SELECT count(*) AS n FROM gpu_activities")["n"].iloc[0] == 0
