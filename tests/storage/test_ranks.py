"""Runs of many ranks: one run per folder of rank traces, ranks, refusals, one transaction, clock offsets."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ddp2_copy, ddp2_ranks_alone_copy

from kernelscope.cli import cli
from kernelscope.storage import ranks
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.store import open_store
from storage.kineto_build import kern
from storage.kineto_build import write_trace as write_trace_events_first
from storage.ranks_build import AR, coll, dist, overlap_pair, straggler_pair, write_trace

ROOT = Path(__file__).resolve().parents[2]
DDP2 = ROOT / "sample_traces" / "ddp2"


def _count(store, table):
    return store.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_ddp2_fixture_is_one_run(tmp_path):
    with open_store(tmp_path / "s.duckdb") as store:
        res = ingest_paths(store, [DDP2])
        assert [r.status for r in res] == ["ingested", "ingested"]
        assert "rank 0 of 2 (rank from distributedInfo)" in res[0].message
        run = store.query("SELECT * FROM runs")
        assert len(run) == 1 and run.world_size[0] == 2 and run.ranks[0] == 2
        assert run.rank_source[0] == "distributedInfo" and run.name[0] == "ddp2"
        tr = store.query("SELECT name, rank, world_size, rank_source, run_id FROM traces ORDER BY rank")
        assert list(tr["name"]) == ["ddp_rank0", "ddp_rank1"] and list(tr["rank"]) == [0, 1]
        assert set(tr.run_id) == {run.run_id[0]} and set(tr.world_size) == {2}
        # collectives: every NCCL kernel of the raw JSON, with its args; bytes = nelems x 4 (Float)
        raw = {}
        for r in (0, 1):
            doc = json.load(gzip.open(DDP2 / f"ddp_rank{r}" / "trace.json.gz"))
            raw[r] = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                             and e["name"].startswith("ncclDevKernel")), key=lambda e: float(e["ts"]))
        assert len(raw[0]) == len(raw[1]) == 14
        c = store.query("""SELECT t.rank, c.* FROM collectives c JOIN traces t USING (trace_id)
                           ORDER BY t.rank, c.pg_seq""")
        assert len(c) == 28 and set(c.collective) == {"allreduce"} and set(c.pg_name) == {"0"}
        for r in (0, 1):
            cr = c[c["rank"] == r]
            assert list(cr.pg_seq) == list(range(14))
            assert list(cr.in_nelems) == [e["args"]["In msg nelems"] for e in raw[r]]
            assert list(cr.in_bytes) == [4 * e["args"]["In msg nelems"] for e in raw[r]]
        # clock estimate: lower median of the end differences (raw JSON, exact ns from the decimal text)
        def end_ns(e):
            return round(float(e["ts"]) * 1000) + round(float(e["dur"]) * 1000)
        d = sorted(end_ns(b) - end_ns(a) for a, b in zip(raw[0], raw[1]))
        lower_median = d[(len(d) - 1) // 2]
        clocks = store.query("SELECT * FROM rank_clocks ORDER BY rank")
        assert abs(clocks.estimate_ns[1] - lower_median) <= 2  # float parse of ts here vs exact decimal there
        assert clocks.estimate_n[1] == 14
        # one host (run.json provenance): offsets applied are 0, estimates kept
        assert list(clocks.host) == ["vm", "vm"] and list(clocks.clock_offset_ns) == [0, 0]
        assert "same host" in run.offset_method[0]
        # again: skipped, nothing added
        again = ingest_paths(store, [DDP2])
        assert [r.status for r in again] == ["skipped", "skipped"] and _count(store, "traces") == 2


def test_single_trace_ingest_unchanged_but_collectives_kept(tmp_path):
    with open_store(tmp_path / "s.duckdb") as store:
        res = ingest_paths(store, [DDP2 / "ddp_rank1"])
        assert [r.status for r in res] == ["ingested"]
        assert _count(store, "runs") == 0
        row = store.con.execute("SELECT rank, rank_source, run_id FROM traces").fetchone()
        assert row[0] == 1 and row[1] == "distributedInfo" and row[2] != ranks.run_id_for([])
        assert _count(store, "collectives") == 14


def test_rank_from_file_name(tmp_path):
    d = tmp_path / "byname"
    d.mkdir()
    for r in (0, 1):
        write_trace(d / f"trace_rank{r}.json", [coll(AR, 0, 10, 1, rank=r)])
    with open_store(tmp_path / "s.duckdb") as store:
        res = ingest_paths(store, [d])
        assert [r.status for r in res] == ["ingested", "ingested"]
        assert "rank from filename" in res[1].message
        assert store.con.execute("SELECT rank_source, world_size FROM runs").fetchone() == ("filename", 2)
        assert store.query("SELECT rank FROM traces ORDER BY rank")["rank"].tolist() == [0, 1]


def _refused(tmp_path, folder):
    runner = CliRunner()
    db = tmp_path / "s.duckdb"
    res = runner.invoke(cli, ["ingest", str(folder), "--db", str(db)])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output
    with open_store(db) as store:  # nothing of the run was written
        for t in ("traces", "gpu_activities", "collectives", "runs", "rank_clocks", "cpu_ops"):
            assert _count(store, t) == 0
    return lines[0]


def test_rank_collision_refused(tmp_path):
    d = tmp_path / "clash"
    d.mkdir()
    write_trace(d / "a.json", [coll(AR, 0, 10, 1, rank=0)], distributedInfo=dist(0, 2))
    write_trace(d / "b.json", [coll(AR, 0, 12, 1, rank=0)], distributedInfo=dist(0, 2))
    line = _refused(tmp_path, d)
    assert "rank 0 is claimed by both a and b" in line


def test_missing_rank_is_a_partial_run(tmp_path):
    """Ranks 0, 1, 3 of a world of 4 (was refused): one partial run; every line and the stored run name rank 2
    as missing; world size stays 4; comm still runs over the three ranks."""
    d = tmp_path / "gap"
    d.mkdir()
    for r in (0, 1, 3):
        write_trace(d / f"r{r}.json", [coll(AR, 0, 10 + r, 1, rank=r, world=4)], distributedInfo=dist(r, 4))
    db = tmp_path / "s.duckdb"
    res = CliRunner().invoke(cli, ["ingest", str(d), "--db", str(db)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 3 and all("partial run: 3 of 4 ranks present, missing rank 2" in x for x in lines), lines
    with open_store(db) as store:
        run = store.query("SELECT world_size, ranks, missing_ranks FROM runs")
        assert (run.world_size[0], run.ranks[0], json.loads(run.missing_ranks[0])) == (4, 3, [2])
        assert store.query("SELECT rank FROM traces ORDER BY rank")["rank"].tolist() == [0, 1, 3]
    comm = CliRunner().invoke(cli, ["analyze", "comm", "--db", str(db), "--format", "json"])
    assert comm.exit_code == 0, comm.output
    assert sorted(r["rank"] for r in json.loads(comm.stdout)["ranks"]) == [0, 1, 3]


def test_sample_of_ranks_of_a_large_world(tmp_path):
    """2 of a world of 128 (what HTA users analyse): accepted, the 126 missing ranks said as ranges."""
    d = tmp_path / "sample"
    d.mkdir()
    for r in (0, 64):
        write_trace(d / f"trace_rank{r}.json", [coll(AR, 0, 10 + r, 1, rank=r, world=128)],
                    distributedInfo=dist(r, 128))
    with open_store(tmp_path / "s.duckdb") as store:
        res = ingest_paths(store, [d])
        assert [r.status for r in res] == ["ingested", "ingested"], res
        assert all("2 of 128 ranks present, missing ranks 1-63, 65-127" in r.message for r in res)
        (missing,) = store.con.execute("SELECT missing_ranks FROM runs").fetchone()
        assert json.loads(missing) == [r for r in range(128) if r not in (0, 64)]
    assert ranks.rank_ranges([5, 1, 2, 3, 9, 10]) == "1-3, 5, 9-10"
    assert ranks.partial_note(4, 4, []) is None


def test_mixed_runs_refused(tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    write_trace(d / "a0.json", [coll(AR, 0, 10, 1, rank=0)], distributedInfo=dist(0, 2))
    write_trace(d / "b0.json", [coll(AR, 0, 11, 1, rank=0, world=4)], distributedInfo=dist(0, 4))
    line = _refused(tmp_path, d)
    assert "mixes traces of different runs (world size 2: a0; world size 4: b0)" in line


@pytest.mark.parametrize("workers", ["1", "2"])
def test_bad_rank_file_rolls_back_the_whole_run(tmp_path, monkeypatch, workers):
    monkeypatch.setenv("KERNELSCOPE_INGEST_WORKERS", workers)  # the error also crosses a process boundary
    d = overlap_pair(tmp_path / "run")
    (d / "rank1.json").write_text('{"traceEvents": [ {"ph": "X", "cat": "kernel", "ts": ', encoding="utf-8")
    # rank from the name: the broken file's head has no distributedInfo
    line = _refused(tmp_path, d)
    assert line.startswith(f"kernelscope: {d}: {d / 'rank1.json'}: ") and "truncated" in line


def test_clock_offset_estimated_and_applied_without_a_shared_host(tmp_path):
    d = straggler_pair(tmp_path / "shifted", shift_us=500)
    with open_store(tmp_path / "s.duckdb") as store:
        ingest_paths(store, [d])
        c = store.query("SELECT * FROM rank_clocks ORDER BY rank")
        # both collectives end exactly 500 us later on rank 1's clock: d = [500000, 500000]
        assert list(c.estimate_ns) == [0, 500_000] and list(c.estimate_mad_ns) == [0, 0]
        assert list(c.clock_offset_ns) == [0, 500_000] and list(c.estimate_n) == [2, 2]
        assert "median of collective end differences" in store.query("SELECT offset_method FROM runs").iloc[0, 0]


def test_parse_workers_bounded(monkeypatch):
    monkeypatch.delenv("KERNELSCOPE_INGEST_WORKERS", raising=False)
    cores = len(__import__("os").sched_getaffinity(0))
    monkeypatch.setattr(ranks, "_load", lambda: 0)
    monkeypatch.setattr(ranks, "_available_bytes", lambda: 3 * ranks.WORKER_BYTES + 1)
    assert ranks.parse_workers(64) == min(3, cores)
    monkeypatch.setattr(ranks, "_available_bytes", lambda: 1 << 50)
    assert ranks.parse_workers(64) == cores  # bounded by the cores
    monkeypatch.setattr(ranks, "_load", lambda: cores + 5)
    assert ranks.parse_workers(64) == 1  # every core busy with other jobs
    monkeypatch.setattr(ranks, "_load", lambda: 0)
    monkeypatch.setattr(ranks, "_available_bytes", lambda: 3 * ranks.WORKER_BYTES + 1)
    assert ranks.parse_workers(1) == 1
    assert ranks.parse_workers(64, ranks.PARALLEL_MIN_BYTES - 1) == 1  # small files: in-process
    monkeypatch.setattr(ranks, "_available_bytes", lambda: 0)
    assert ranks.parse_workers(64) == 1
    monkeypatch.setenv("KERNELSCOPE_INGEST_WORKERS", "5")
    assert ranks.parse_workers(64) == 5 and ranks.parse_workers(2) == 2


def test_parallel_and_serial_parse_store_the_same_rows(tmp_path, monkeypatch):
    out = {}
    for workers in ("1", "2"):
        monkeypatch.setenv("KERNELSCOPE_INGEST_WORKERS", workers)
        with open_store(tmp_path / f"s{workers}.duckdb") as store:
            res = ingest_paths(store, [overlap_pair(tmp_path / "pair")])
            assert f"parsed by {workers} process" in res[0].message
            out[workers] = store.query("""SELECT trace_id, activity_id, kind, name, device, stream, start_ns,
                                          end_ns FROM gpu_activities ORDER BY ALL""")
    assert out["1"].equals(out["2"]) and len(out["1"]) == 8


def test_name_rank_and_peek(tmp_path):
    assert ranks.name_rank("ddp_rank0") == 0 and ranks.name_rank("trace_rank-12.json") == 12
    assert ranks.name_rank("llama_prefill_b8") is None and ranks.name_rank("frank3") is None
    assert ranks.name_rank("Rank7") == 7
    p = write_trace_events_first(tmp_path / "t.json.gz", [kern("k", 0, 1, 1, 1)], gz=True,
                                 distributedInfo={"distributedInfo": 1})
    assert ranks.peek_distributed(p) is None  # after traceEvents: left to the full parse
    import gzip as gz
    q = write_trace(tmp_path / "u.json", [kern("k", 0, 1, 1, 1)], distributedInfo=dist(3, 8))
    (tmp_path / "u.json.gz").write_bytes(gz.compress(q.read_bytes()))
    for f in (q, tmp_path / "u.json.gz"):
        assert ranks.peek_distributed(f) == {"backend": "nccl", "rank": 3, "world_size": 8}


@pytest.mark.parametrize("workers,file_db", [("1", False), ("2", False), ("1", True)])
def test_run_rows_equal_single_trace_ingest(tmp_path, monkeypatch, workers, file_db):
    """The run path (workers fill their own DuckDB, one INSERT per table) stores exactly the rows the
    single-trace path stores for each rank in every table that has a trace_id, and in the same physical
    order in the tables whose inserts are totally ordered."""
    from kernelscope.storage import rankrun

    monkeypatch.setenv("KERNELSCOPE_INGEST_WORKERS", workers)
    if file_db:  # the worker's DuckDB in a file, as for rank traces of 32 MiB and more
        monkeypatch.setattr(rankrun, "WORKER_IN_MEMORY_BYTES", 0)
    # one: each rank's run dir through ingest_run (the single-trace path), built once per session
    one_db = ddp2_ranks_alone_copy(tmp_path / "one.duckdb")
    with open_store(tmp_path / "run.duckdb") as run, open_store(one_db) as one:
        ingest_paths(run, [DDP2])
        tables = [t for (t,) in one.con.execute(
            """SELECT DISTINCT table_name FROM information_schema.columns
               WHERE column_name = 'trace_id' AND table_name NOT IN ('traces', 'rank_clocks')""").fetchall()]
        assert {"gpu_activities", "cpu_ops", "collectives", "busy_intervals", "telemetry"} <= set(tables)
        for t in tables:
            q = f'SELECT * FROM "{t}"'
            a, b = one.con.execute(q).fetchall(), run.con.execute(q).fetchall()
            if t not in ("gpu_activities", "cpu_ops", "launches", "busy_intervals", "collectives"):
                a, b = sorted(a, key=repr), sorted(b, key=repr)  # inserts without a total ORDER BY
            assert a == b, t
        cols = "trace_id, name, content_hash, base_time_ns, start_ns, end_ns, warnings, clock_offset_ns, events"
        assert one.query(f"SELECT {cols} FROM traces ORDER BY 1").equals(run.query(f"SELECT {cols} FROM traces ORDER BY 1"))


def test_rm_of_every_rank_removes_the_run(tmp_path):
    from kernelscope.storage.queries import remove_traces

    with open_store(ddp2_copy(tmp_path / "s.duckdb")) as store:  # ddp2 ingested (ingest_paths) once per session
        ids = [t for (t,) in store.con.execute("SELECT trace_id FROM traces ORDER BY rank").fetchall()]
        assert len(ids) == 2
        remove_traces(store, ids[:1])
        assert _count(store, "runs") == 1  # one rank left: the run stays
        remove_traces(store, ids[1:])
        assert _count(store, "runs") == 0 and _count(store, "rank_clocks") == 0
        assert _count(store, "collectives") == 0


def test_one_file_of_a_stored_run_ingested_again_is_skipped(tmp_path):
    """README's main job stored tb_ddp's two worker files as one run; `ingest` of one of those files again says
    'skipped' with the trace it is, exit 0, and stores nothing (it said 'rank 0 is already stored outside this
    run; remove it', exit 1: the file alone made a run of its own, a partial one with another run id)."""
    import stores
    from conftest import _LINE, SAMPLES, _ingest_samples

    db = tmp_path / "s.duckdb"
    stores.copy("sample_traces", _ingest_samples, db)
    (one,) = sorted((SAMPLES / "tb_ddp").glob("vm_534.*.pt.trace.json.gz"))
    with open_store(db, read_only=True) as store:
        (tid, run), = store.con.execute("SELECT trace_id, run_id FROM traces WHERE source = ?", [str(one)]).fetchall()
        before = _count(store, "traces"), _count(store, "gpu_activities")
    res = CliRunner().invoke(cli, ["ingest", str(one), "--db", str(db)])
    assert res.exit_code == 0 and not res.stderr, res.output
    m = _LINE.match(res.stdout)
    assert m and m.group(1) == "skipped" and m.group(2) == tid, res.stdout
    assert f"(rank 0 of run {run})" in res.stdout
    with open_store(db, read_only=True) as store:
        assert (_count(store, "traces"), _count(store, "gpu_activities")) == before
