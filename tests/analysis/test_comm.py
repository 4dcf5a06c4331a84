"""comm analysis: exact numbers on hand-built two-rank traces, a 2 ms straggler, and the real 2-GPU fixture
against tests/reference_comm.py (stdlib, raw JSON, a different interval method)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import stores
from stores import empty

from kernelscope.analysis import comm as comm_mod
from kernelscope.analysis.registry import get_analysis
from kernelscope.analysis.summary import summary
from kernelscope.errors import UsageError
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import ddp2_copy  # noqa: E402
from reference_comm import instances, load, rank_numbers  # noqa: E402
from storage.ranks_build import overlap_pair, straggler_pair  # noqa: E402

DDP2 = ROOT / "sample_traces" / "ddp2"


@pytest.fixture
def store(tmp_path):
    with open_store(empty(tmp_path / "s.duckdb")) as s:
        yield s


def _ingest_two_runs(db: Path) -> None:
    """Two runs of two ranks: the overlap pair, then the straggler pair (ingested in that order)."""
    with open_store(empty(db)) as s:
        ingest_paths(s, [overlap_pair(db.parent / "a")])
        ingest_paths(s, [straggler_pair(db.parent / "b")])


@pytest.fixture
def two_runs(tmp_path):
    """A store holding the overlap pair and then the straggler pair, a copy of one built once per session."""
    stores.copy("comm_two_runs", _ingest_two_runs, tmp_path / "two.duckdb")
    with open_store(tmp_path / "two.duckdb") as s:
        yield s


def test_overlap_pair_exact(store, tmp_path):
    ingest_paths(store, [overlap_pair(tmp_path / "pair")])
    r = get_analysis("comm").fn(store, None)
    ranks = r.tables["ranks"].set_index("rank")
    # rank 0 (us): K = [0,100) u [230,250) = 120; C = [60,160) u [300,340) = 140; M = [150,200) = 50
    #   C\K = [100,160) u [300,340) = 100; overlap = 40/140; C\(K u M) = [100,150) u [300,340) = 90
    #   M\(K u C) = [160,200) = 40; busy = [0,200) u [230,250) u [300,340) = 260; span 340; idle 80
    r0 = ranks.loc[0]
    assert (r0.compute_ns, r0.comm_ns, r0.exposed_comm_ns, r0.comm_only_ns) == (120_000, 140_000, 100_000, 90_000)
    assert (r0.memcpy_ns, r0.exposed_memcpy_ns, r0.busy_ns, r0.gpu_span_ns, r0.idle_ns) == (
        50_000, 40_000, 260_000, 340_000, 80_000)
    assert r0.overlap_pct == pytest.approx(100 * 40 / 140)
    # rank 1: K = [0,50); C = 140, none under K; busy 190; span 340; idle 150
    r1 = ranks.loc[1]
    assert (r1.compute_ns, r1.comm_ns, r1.exposed_comm_ns, r1.comm_only_ns) == (50_000, 140_000, 140_000, 140_000)
    assert (r1.memcpy_ns, r1.exposed_memcpy_ns, r1.busy_ns, r1.idle_ns) == (0, 0, 190_000, 150_000)
    assert r1.overlap_pct == 0.0
    c = r.tables["collectives"]
    ar, ag = c.iloc[0], c.iloc[1]
    # allreduce 1e6 Float = 4e6 B in 100 us: 40 GB/s; bus factor 2(n-1)/n = 1 at n = 2
    assert (ar.collective, ar.bytes, ar.time_ns, ar.start_skew_ns, ar.end_skew_ns) == ("allreduce", 4_000_000,
                                                                                      100_000, 0, 0)
    assert ar.algbw_gbps == pytest.approx(40.0) and ar.busbw_gbps == pytest.approx(40.0)
    # allgather 5e5 -> 1e6 BFloat16: S = 2e6 B out in 40 us: 50 GB/s; bus (n-1)/n = 1/2: 25 GB/s
    assert (ag.collective, ag.bytes, ag.time_ns) == ("allgather", 2_000_000, 40_000)
    assert ag.algbw_gbps == pytest.approx(50.0) and ag.busbw_gbps == pytest.approx(25.0)
    assert r.scalars["straggler_rank"] is None and r.scalars["max_start_skew_ns"] == 0
    # the function the bound-ness analysis can use
    only = comm_mod.comm_only_busy(store, list(r.tables["ranks"].trace_id))
    assert sorted(only.comm_only_ns) == [90_000, 140_000]


@pytest.mark.parametrize("shift_us", [0, 500])
def test_two_ms_straggler_found(store, tmp_path, shift_us):
    ingest_paths(store, [straggler_pair(tmp_path / f"s{shift_us}", late_us=2000, shift_us=shift_us)])
    r = comm_mod.comm(store)
    c = r.tables["collectives"]
    late = c[c.pg_seq == 1].iloc[0]
    assert late.straggler_rank == 1 and late.start_skew_ns == 2_000_000 and late.end_skew_ns == 0
    assert c[c.pg_seq == 0].iloc[0].start_skew_ns == 0
    assert r.scalars["straggler_rank"] == 1 and r.scalars["straggler_skew_caused_ns"] == 2_000_000
    assert r.scalars["max_start_skew_ns"] == 2_000_000
    s = r.tables["stragglers"].set_index("rank")
    assert s.loc[1].times_last == 1 and s.loc[0].times_last == 0
    a = r.tables["arrivals"]
    assert a[(a.pg_seq == 1) & (a["rank"] == 0)].wait_ns.iloc[0] == 2_000_000
    # rank 0 waits 2 ms inside the collective: its transfer time is the straggler's kernel, 100 us
    assert late.time_ns == 100_000
    assert r.trust["clock_offsets_applied"] == {0: 0, 1: shift_us * 1000}


def test_ddp2_fixture_against_reference_script(tmp_path):
    with open_store(ddp2_copy(tmp_path / "s.duckdb")) as store:  # ingest_paths of DDP2, once per session
        _check_ddp2_against_reference(store)


def _check_ddp2_against_reference(store):
    r = comm_mod.comm(store)
    ref = [rank_numbers(load(str(DDP2 / f"ddp_rank{k}" / "trace.json.gz"))) for k in (0, 1)]
    ranks = r.tables["ranks"].set_index("rank")
    for k in (0, 1):
        for key in ("compute_ns", "comm_ns", "exposed_comm_ns", "comm_only_ns", "memcpy_ns",
                    "exposed_memcpy_ns", "busy_ns", "gpu_span_ns", "idle_ns"):
            assert ranks.loc[k][key] == ref[k][key], (k, key)
        assert ranks.loc[k].overlap_pct == pytest.approx(ref[k]["overlap_pct"])
        # busy equals the summary analysis' busy_ns (busy_intervals), a third way
        assert ranks.loc[k].busy_ns == summary(store, ranks.loc[k].trace_id).scalars["busy_ns"]
    # recorded golden numbers of the fixture (sample_traces/README.md busy_ns; ours checked above)
    assert (ranks.loc[0].busy_ns, ranks.loc[1].busy_ns) == (24_114_256, 14_373_340)
    assert (ranks.loc[0].exposed_comm_ns, ranks.loc[1].exposed_comm_ns) == (10_186_659, 1_281_284)
    inst = instances(ref)
    c = r.tables["collectives"]
    assert len(c) == len(inst) == 14
    for (_, row), want in zip(c.iterrows(), inst):
        assert (row.process_group, row.pg_seq) == (want["pg"], want["seq"])
        for key in ("straggler_rank", "start_skew_ns", "end_skew_ns", "bytes", "time_ns"):
            assert row[key] == want[key], key
    assert r.scalars["straggler_rank"] == 1
    assert r.scalars["straggler_skew_caused_ns"] == sum(i["start_skew_ns"] for i in inst)


def test_run_choice_errors(store, two_runs):
    with pytest.raises(UsageError, match="no multi-rank run in the store"):
        comm_mod.comm(store)
    store = two_runs  # the overlap pair and the straggler pair ingested
    with pytest.raises(UsageError, match="several runs"):
        comm_mod.comm(store)
    run_id = store.con.execute("SELECT run_id FROM runs ORDER BY ingested_ns LIMIT 1").fetchone()[0]
    r = comm_mod.comm(store, run=run_id[:8])
    assert r.scalars["run_id"] == run_id
    one = store.con.execute("SELECT trace_id FROM traces WHERE run_id = ? AND rank = 1", [run_id]).fetchone()[0]
    assert comm_mod.comm(store, [one]).scalars["world_size"] == 2  # one rank named: its whole run
    with pytest.raises(UsageError, match="no single run matches"):
        comm_mod.comm(store, run="nope")


def test_cli_analyze_comm(tmp_path):
    import json

    from click.testing import CliRunner

    from kernelscope.cli import cli

    db = tmp_path / "s.duckdb"
    runner = CliRunner()
    res = runner.invoke(cli, ["ingest", str(straggler_pair(tmp_path / "pair")), "--db", str(db)])
    assert res.exit_code == 0 and "(rank from distributedInfo)" in res.stdout
    out = runner.invoke(cli, ["analyze", "comm", "--format", "json", "--db", str(db)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["straggler_rank"] == 1 and data["max_start_skew_ns"] == 2_000_000
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    bad = runner.invoke(cli, ["analyze", "comm", "-o", "run=zzz", "--db", str(db)])
    assert bad.exit_code != 0 and "no single run matches 'zzz'" in bad.stderr


def test_removed_run_is_not_offered(two_runs):
    from kernelscope.storage.queries import remove_traces

    store = two_runs  # the overlap pair and the straggler pair ingested
    gone = store.con.execute("SELECT run_id FROM runs ORDER BY ingested_ns LIMIT 1").fetchone()[0]
    ids = [r[0] for r in store.con.execute("SELECT trace_id FROM traces WHERE run_id = ?", [gone]).fetchall()]
    assert remove_traces(store, ids) == 2
    r = comm_mod.comm(store)  # the one run left, although the removed run's row remains
    assert r.scalars["run_id"] != gone and r.scalars["straggler_rank"] == 1
    with pytest.raises(UsageError, match="no single run matches"):
        comm_mod.comm(store, run=gone)


def test_run_by_name(tmp_path):
    from kernelscope.analysis.comm import run_traces
    from kernelscope.storage.store import open_store

    with open_store(ddp2_copy(tmp_path / "s.duckdb")) as store:  # ingest_paths of sample_traces/ddp2
        run_id = store.query("SELECT run_id FROM runs")["run_id"].iloc[0]
        assert run_traces(store, run="ddp2")[0] == run_id == run_traces(store, run=run_id[:8])[0]
        assert len(run_traces(store, run="ddp2")[1]) == 2


def test_a_partial_run_says_its_world_and_missing_ranks(tmp_path):
    """2 ranks of a world of 128 (issue 11): world_size is the run's, the missing ranks are named, and the
    incomplete instances are not blamed on dropped records."""
    import corpus
    from click.testing import CliRunner

    from kernelscope.analysis.comm import comm
    from kernelscope.cli import cli
    from kernelscope.storage.store import open_store

    db = tmp_path / "p.duckdb"
    res = CliRunner().invoke(cli, ["ingest", str(corpus.partial_ranks(tmp_path)), "--db", str(db)])
    assert res.exit_code == 0, res.stderr
    with open_store(db, read_only=True) as store:
        r = comm(store)
    assert r.scalars["world_size"] == 128
    assert r.trust["missing_ranks"] == "1-63, 65-127"
    assert any("2 of 128 ranks present" in w for w in r.warnings)
    assert not any("dropped records" in w for w in r.warnings)
