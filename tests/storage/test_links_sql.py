"""The SQL link derivation (running open counts + ASOF joins) against the stack-sweep oracle: equal on
every sample trace and on hand-built tie cases; partial overlaps are counted in a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import session_store_copy

from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.store import open_store

from . import sweep_oracle
from .kineto_build import kern, links_events, op, rt, write_trace, x

ROOT = Path(__file__).resolve().parents[2]
TRACES = sorted(ROOT.glob("sample_traces/**/trace.json.gz")) + [ROOT / "tests/data/probe_train.json.gz"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A copy of the session's store of every sample trace file, each ingested on its own with the CLI's
    ingest (``s.ids``: file -> trace id; every trace of TRACES is there, none refused)."""
    copied = session_store_copy(tmp_path_factory.mktemp("links") / "s.duckdb")
    assert set(TRACES) <= set(copied.ids), {str(p): copied.failures.get(p) for p in TRACES if p not in copied.ids}
    with open_store(copied.db) as s:
        s.ids = copied.ids
        yield s


def ingest(store, path):
    res = ingest_file(store, path)
    assert res.status in ("ingested", "skipped"), res.message
    return res.trace_id


@pytest.mark.parametrize("path", TRACES, ids=[p.parent.name for p in TRACES])
def test_sql_links_equal_the_stack_sweep_on_sample_traces(store, path):
    tid = store.ids[path]
    want = sweep_oracle.sweep(store, tid)
    got = sweep_oracle.stored(store, tid)
    assert len(want) > 0 and got.keys() == want.keys()
    diffs = [(k, want[k], got[k]) for k in want if want[k] != got[k]]
    assert not diffs, diffs[:5]
    warnings = json.loads(store.con.execute("SELECT warnings FROM traces WHERE trace_id=?", [tid]).fetchall()[0][0])
    assert not any("not nested" in w for w in warnings)


def test_sql_links_equal_the_stack_sweep_on_the_links_trace(store, tmp_path):
    tid = ingest(store, write_trace(tmp_path / "links.json", links_events()))
    assert sweep_oracle.stored(store, tid) == sweep_oracle.sweep(store, tid)


def names(store, tid):
    """op name -> (parent name, top name, depth, phase name); launch correlation -> (leaf, top, phase)."""
    q = store.con.execute
    ops = {r[0]: r[1:] for r in q(
        """SELECT o.name, p.name, t.name, o.depth, a.name FROM cpu_ops o
           LEFT JOIN cpu_ops p ON p.trace_id = o.trace_id AND p.op_id = o.parent_op_id
           LEFT JOIN cpu_ops t ON t.trace_id = o.trace_id AND t.op_id = o.top_op_id
           LEFT JOIN annotations a ON a.trace_id = o.trace_id AND a.ann_id = o.phase_id
           WHERE o.trace_id = ?""", [tid]).fetchall()}
    launches = {r[0]: r[1:] for r in q(
        """SELECT l.correlation, p.name, t.name, a.name FROM launches l
           LEFT JOIN cpu_ops p ON p.trace_id = l.trace_id AND p.op_id = l.leaf_op_id
           LEFT JOIN cpu_ops t ON t.trace_id = l.trace_id AND t.op_id = l.top_op_id
           LEFT JOIN annotations a ON a.trace_id = l.trace_id AND a.ann_id = l.phase_id
           WHERE l.trace_id = ?""", [tid]).fetchall()}
    return ops, launches


def test_ties_zero_durations_and_touching_intervals(store, tmp_path):
    ev = [
        x("user_annotation", "phase", 0, 100),
        op("a", 0, 100, 1),  # same start and end as the annotation: the annotation sorts first
        op("b_long", 10, 50, 2),  # equal starts: the longer one encloses the shorter
        op("b_short", 10, 20, 3),
        op("zero", 10, 0, 4),  # zero length at the same start: inside b_short, encloses nothing
        rt("cudaLaunchKernel", 10, 1, 11, 3),  # at the start of b_long/b_short/zero: leaf b_short
        op("c", 30, 0, 5),  # zero length where b_short ended: child of b_long
        op("d1", 60, 10, 6),  # starts where b_long ends: sibling under a
        op("d2", 60, 10, 7),  # same interval as d1, later in the file: nested in d1
        rt("cudaLaunchKernel", 70, 1, 12, 7),  # at d1/d2's end: leaf a
        rt("cudaLaunchKernel", 100, 1, 13, 0),  # at a's end: no operator, no phase
        op("late", 200, 10, 8),
        kern("k1", 20, 5, 11, 3), kern("k2", 80, 5, 12, 7), kern("k3", 120, 5, 13, 0),
    ]
    tid = ingest(store, write_trace(tmp_path / "ties.json", ev))
    assert sweep_oracle.stored(store, tid) == sweep_oracle.sweep(store, tid)
    ops, launches = names(store, tid)
    assert ops["a"] == (None, "a", 0, "phase")
    assert ops["b_long"] == ("a", "a", 1, "phase")
    assert ops["b_short"] == ("b_long", "a", 2, "phase")
    assert ops["zero"] == ("b_short", "a", 3, "phase")
    assert ops["c"] == ("b_long", "a", 2, "phase")
    assert ops["d1"] == ("a", "a", 1, "phase")
    assert ops["d2"] == ("d1", "a", 2, "phase")
    assert ops["late"] == (None, "late", 0, None)
    assert launches[11] == ("b_short", "a", "phase")
    assert launches[12] == ("a", "a", "phase")
    assert launches[13] == (None, None, None)


def test_threads_and_gpu_annotations_stay_apart(store, tmp_path):
    ev = [
        op("main_outer", 0, 100, 1),
        op("other_thread", 10, 20, 2, tid=999),
        rt("cudaLaunchKernel", 15, 1, 11, 2, tid=999),
        x("gpu_user_annotation", "g_outer", 0, 100, pid=0, tid=7),
        x("gpu_user_annotation", "g_inner", 10, 10, pid=0, tid=7),
        x("gpu_user_annotation", "g_other_stream", 10, 10, pid=0, tid=8),
        kern("k", 20, 5, 11, 2),
    ]
    tid = ingest(store, write_trace(tmp_path / "threads.json", ev))
    assert sweep_oracle.stored(store, tid) == sweep_oracle.sweep(store, tid)
    ops, launches = names(store, tid)
    assert ops["other_thread"] == (None, "other_thread", 0, None)
    assert launches[11] == ("other_thread", "other_thread", None)
    parents = dict(store.con.execute(
        """SELECT a.name, p.name FROM annotations a LEFT JOIN annotations p
           ON p.trace_id = a.trace_id AND p.ann_id = a.parent_ann_id WHERE a.trace_id = ?""", [tid]).fetchall())
    assert parents == {"g_outer": None, "g_inner": "g_outer", "g_other_stream": None}


def test_partial_overlap_is_counted_in_a_warning(store, tmp_path):
    ev = [
        op("a", 0, 100, 1),
        op("b", 50, 100, 2),  # starts inside a, ends after it: not nested
        op("c", 120, 10, 3),  # inside b only
        op("d", 300, 10, 4),
    ]
    tid = ingest(store, write_trace(tmp_path / "overlap.json", ev))
    warnings = json.loads(store.con.execute("SELECT warnings FROM traces WHERE trace_id=?", [tid]).fetchall()[0][0])
    hits = [w for w in warnings if "not nested" in w]
    assert len(hits) == 1 and hits[0].startswith("2 ")  # b (crosses a's end) and c (its link a ended)
    ops, _ = names(store, tid)
    assert ops["b"] == ("a", "a", 1, None)
    assert ops["d"] == (None, "d", 0, None)
