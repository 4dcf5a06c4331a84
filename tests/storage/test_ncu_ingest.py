"""ncu CSV -> ncu_kernels: matching to the nsys capture of the same workload, standalone storage,
capture settings, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from stores import empty

from kernelscope.parsers.ncu import kernel_name_key
from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.ncu import ingest_ncu
from kernelscope.storage.store import open_store

NSIGHT = Path(__file__).resolve().parents[2] / "sample_traces" / "nsight"
RAW = NSIGHT / "encoder2_ncu_raw.csv.gz"
DETAILS = NSIGHT / "encoder2_ncu_details.csv.gz"


@pytest.fixture
def store(tmp_path):
    with open_store(empty(tmp_path / "s.duckdb")) as st:
        yield st


def test_match_to_nsys_trace(store):
    tid = ingest_file(store, NSIGHT / "encoder2_nvtx.sqlite.gz").trace_id
    r = ingest_ncu(store, RAW)
    # ncu profiled launches 0..59 of the process: 1 randn init kernel + 59 forward kernels (22 per forward),
    # and the trace holds 3 forwards of 22 kernels: every forward kernel has a partner, the init kernel none.
    assert (r.status, r.trace_id, r.kernels, r.matched) == ("ingested", tid, 60, 59)
    assert r.match_rate == pytest.approx(59 / 60) and "59/60" in r.message
    rows = store.con.execute(
        """SELECT n.name, n.launch_index, a.name, n.grid_x, a.grid_x, n.grid_y, a.grid_y, n.block_x, a.block_x,
                  n.duration_ns, a.dur_ns
           FROM ncu_kernels n LEFT JOIN gpu_activities a ON a.trace_id = n.trace_id AND a.activity_id = n.activity_id
           ORDER BY n.launch_index"""
    ).fetchall()
    unmatched = [r for r in rows if r[2] is None]
    assert len(unmatched) == 1 and unmatched[0][1] == 0 and "distribution_elementwise" in unmatched[0][0]
    for ncu_name, _i, name, gx, ax, gy, ay, bx, bxa, ncu_ns, trace_ns in rows[1:]:
        assert kernel_name_key(ncu_name) == kernel_name_key(name) and (gx, gy, bx) == (ax, ay, bxa)
        assert ncu_ns > trace_ns  # base clocks + cache flush: ncu's durations are longer
    # each trace kernel is used at most once, and pairing follows launch order: the first forward's 22
    # ncu launches pair with the trace's first 22 kernels
    ids = [r[0] for r in store.con.execute("SELECT activity_id FROM ncu_kernels WHERE activity_id IS NOT NULL").fetchall()]
    assert len(ids) == len(set(ids)) == 59
    first = store.con.execute(
        """SELECT count(*) FROM ncu_kernels n JOIN (SELECT activity_id, row_number() OVER (ORDER BY start_ns) AS k
           FROM gpu_activities WHERE trace_id = ? AND kind = 'kernel') a USING (activity_id)
           WHERE n.launch_index BETWEEN 1 AND 22 AND a.k <= 22""", [tid]).fetchone()[0]
    assert first == 22
    cache, clock, note = store.con.execute(
        "SELECT DISTINCT cache_control, clock_control, settings_note FROM ncu_kernels").fetchone()
    assert (cache, clock) == ("all", "base") and "defaults assumed" in note


def test_explicit_match_and_given_settings(store):
    tid = ingest_file(store, NSIGHT / "encoder2_nvtx.sqlite.gz").trace_id
    r = ingest_ncu(store, DETAILS, match=tid[:6], cache_control="none", clock_control="none")
    assert (r.trace_id, r.kernels, r.matched) == (tid, 20, 19)
    assert store.con.execute("SELECT DISTINCT cache_control, clock_control, page FROM ncu_kernels").fetchall() == [
        ("none", "none", "details")]
    again = ingest_ncu(store, DETAILS)
    assert again.status == "skipped"
    assert store.con.execute("SELECT count(*) FROM ncu_kernels").fetchone()[0] == 20


def test_standalone_when_nothing_matches(store):
    r = ingest_ncu(store, RAW)
    assert r.status == "ingested" and r.matched == 0 and "standalone" in r.message
    fmt, events = store.con.execute("SELECT format, events FROM traces WHERE trace_id = ?", [r.trace_id]).fetchone()
    assert (fmt, events) == ("ncu", 60)
    assert store.con.execute(
        "SELECT count(*), count(activity_id) FROM ncu_kernels WHERE trace_id = ?", [r.trace_id]).fetchone() == (60, 0)


def test_not_ncu_csv_one_line_nothing_stored(store, tmp_path):
    r = ingest_ncu(store, NSIGHT / "encoder2_nvtx_cuda_gpu_kern_sum.csv")
    assert r.status == "failed" and "not an Nsight Compute export" in r.message and "\n" not in r.message
    p = tmp_path / "cut.csv.gz"
    p.write_bytes(RAW.read_bytes()[:5000])
    r2 = ingest_ncu(store, p)
    assert r2.status == "failed" and "truncated" in r2.message
    assert store.con.execute("SELECT count(*) FROM ncu_kernels").fetchone()[0] == 0
    assert store.con.execute("SELECT count(*) FROM traces").fetchone()[0] == 0


def test_unknown_match_trace(store):
    r = ingest_ncu(store, RAW, match="nope")
    assert r.status == "failed" and "no trace matches 'nope'" in r.message


def test_ingest_file_dispatches_ncu_csv(store):
    tid = ingest_file(store, NSIGHT / "encoder2_nvtx.sqlite.gz").trace_id
    r = ingest_file(store, RAW)
    assert (r.status, r.trace_id, r.events) == ("ingested", tid, 60) and "59/60" in r.message
    bad = ingest_file(store, NSIGHT / "encoder2_nvtx_cuda_gpu_kern_sum.csv")
    assert bad.status == "failed" and "not an Nsight Compute export" in bad.message
