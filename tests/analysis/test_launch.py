"""launch analysis: a hand-computed minimal trace (arithmetic written out below) and properties on every sample."""

from __future__ import annotations

import json
import re

import pytest
import reference_launch
from click.testing import CliRunner
from conftest import ROOT
from storage.kineto_build import kern, op, rt, write_trace, x
from stores import empty

from kernelscope.analysis.launch import activity_splits, launch
from kernelscope.cli import cli
from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.store import open_store


def _events() -> list[dict]:
    """Times in us (ns = us * 1000). One stream (7).

    aten::a [0,30]:   L1 cudaLaunchKernel [2,6]   -> k1 [10,20]
                      L2 cudaLaunchKernel [8,11]  -> k2 [25,30]
    aten::b [40,50]:  L3 cudaLaunchKernel [41,43] -> k3 [44,45]
                      L4 cudaMemsetAsync  [46,47] -> memset [50,51]
    (no operator):    G  cudaGraphLaunch  [60,65] -> nodes [70,72] [73,75] [80,82]
    aten::c [99,104]: L5 cudaLaunchKernel [100,103] -> k4 [99.5,100.5]  (starts before its launch: skew)
    phase 'fwd' (user annotation) [0,35] encloses L1 and L2.
    """
    return [
        x("user_annotation", "fwd", 0, 35, **{"External id": 90}),
        op("aten::a", 0, 30, 1),
        rt("cudaLaunchKernel", 2, 4, 11, 1),
        rt("cudaLaunchKernel", 8, 3, 12, 1),
        op("aten::b", 40, 10, 2),
        rt("cudaLaunchKernel", 41, 2, 13, 2),
        rt("cudaMemsetAsync", 46, 1, 14, 2),
        rt("cudaGraphLaunch", 60, 5, 15, 0),
        op("aten::c", 99, 5, 3),
        rt("cudaLaunchKernel", 100, 3, 16, 3),
        kern("k1", 10, 10, 11, 1),
        kern("k2", 25, 5, 12, 1),
        kern("k3", 44, 1, 13, 2),
        kern("memset", 50, 1, 14, 2, cat="gpu_memset"),
        kern("n1", 70, 2, 15, 0),
        kern("n2", 73, 2, 15, 0),
        kern("n3", 80, 2, 15, 0),
        kern("k4", 99.5, 1, 16, 3),
    ]


# Hand computation (ns). lq = start - launch start; api = min(launch dur, lq); ready = previous activity's
# end on the stream (launch end if none); queue = clamp(ready - launch end, 0, lq - api); dispatch = rest;
# delay = max(0, start - launch end).
#   k1: lq 10000-2000=8000,  api min(4000,8000)=4000,  ready=6000 (empty stream), queue clamp(0)=0, disp 4000, delay 4000
#   k2: lq 25000-8000=17000, api 3000, ready=k1 end 20000, queue clamp(20000-11000=9000, 0, 14000)=9000,
#       disp 17000-3000-9000=5000, delay 25000-11000=14000
#   k3: lq 3000, api 2000, ready=30000, 30000-43000<0 -> queue 0, disp 1000, delay 1000
#   memset: lq 4000, api 1000, ready=45000 < 47000 -> queue 0, disp 3000, delay 3000 (not in TKLQT)
#   n1: lq 10000, api 5000, ready=memset end 51000 < 65000 -> queue 0, disp 5000, delay 5000   (the graph's term)
#   n2: lq 13000, api 5000, ready=72000 -> queue clamp(7000, 0, 8000)=7000, disp 1000
#   n3: lq 20000, api 5000, ready=75000 -> queue clamp(10000, 0, 15000)=10000, disp 5000
#   k4: lq 99500-100000=-500, api min(3000,-500)=-500, queue clamp(.., 0, 0)=0, disp 0, delay 0
WANT = {  # activity name -> (lq, api, queue, dispatch, launch_delay)
    "k1": (8000, 4000, 0, 4000, 4000),
    "k2": (17000, 3000, 9000, 5000, 14000),
    "k3": (3000, 2000, 0, 1000, 1000),
    "memset": (4000, 1000, 0, 3000, 3000),
    "n1": (10000, 5000, 0, 5000, 5000),
    "n2": (13000, 5000, 7000, 1000, 3000 + 5000),  # delay 73000-65000 = 8000
    "n3": (20000, 5000, 10000, 5000, 15000),  # delay 80000-65000 = 15000
    "k4": (-500, -500, 0, 0, 0),
}
# TKLQT = k1 + k2 + k3 + k4 + one term for the graph (n1) = 8000 + 17000 + 3000 - 500 + 10000 = 37500
# naive = 8000 + 17000 + 3000 - 500 + 10000 + 13000 + 20000 = 70500
# api = 4000+3000+2000-500+5000 = 13500; queue = 9000; dispatch = 4000+5000+1000+0+5000 = 15000 (sum 37500)
# delay = 4000+14000+1000+0+5000 = 24000; GPU span = 100500 - 10000 = 90500; q = 37500/90500


@pytest.fixture
def hand(tmp_path):
    with open_store(empty(tmp_path / "l.duckdb")) as s:
        res = ingest_file(s, write_trace(tmp_path / "launch.json", _events()))
        assert res.status == "ingested", res.message
        yield s, res.trace_id


def test_per_activity_split_by_hand(hand):
    store, t = hand
    df = activity_splits(store, t)
    got = {r.name: (r.lq_ns, r.api_ns, r.queue_ns, r.dispatch_ns, r.launch_delay_ns)
           for r in df.itertuples(index=False)}
    assert got == WANT
    assert set(df.loc[df.term, "name"]) == {"k1", "k2", "k3", "n1", "k4"}
    # the independent reference used on every sample below gives the hand numbers too
    ref = reference_launch.splits(store, t)
    names = dict(zip(df.activity_id, df.name))
    assert {names[i]: (r.lq_ns, r.api_ns, r.queue_ns, r.dispatch_ns, r.launch_delay_ns)
            for i, r in ref.iterrows()} == WANT
    assert {names[i] for i in ref.index[ref.term]} == {"k1", "k2", "k3", "n1", "k4"}


def test_totals_by_hand(hand):
    store, t = hand
    r = launch(store, t)
    s = r.scalars
    assert (s["tklqt_ns"], s["tklqt_naive_ns"]) == (37500, 70500)
    assert (s["api_ns"], s["queue_ns"], s["dispatch_ns"], s["launch_delay_ns"]) == (13500, 9000, 15000, 24000)
    assert s["gpu_span_ns"] == 90500 and s["mean_queue_depth"] == round(37500 / 90500, 6)
    assert (s["kernels"], s["graph_kernels"], s["graph_launches"], s["negative_lq"]) == (4, 3, 1, 1)
    assert any("negative lq" in w for w in r.warnings)
    kinds = {row.kind: row for row in r.table("by_kind").itertuples(index=False)}
    assert (kinds["memset"].count, kinds["memset"].lq_ns) == (1, 4000)  # memset reported apart
    assert (kinds["graph_launch"].count, kinds["graph_launch"].lq_ns) == (1, 10000)
    assert kinds["kernel"].lq_ns == 8000 + 17000 + 3000 - 500
    d = r.table("distribution").set_index("metric")
    # lq terms sorted: -500, 3000, 8000, 10000, 17000 -> median (nearest rank) 8000, max 17000
    assert (d.loc["lq_ns", "median_ns"], d.loc["lq_ns", "max_ns"], d.loc["lq_ns", "count"]) == (8000, 17000, 5)


def test_per_op_phase_and_launch_bound_by_hand(hand):
    store, t = hand
    r = launch(store, t)
    ops = {(row.name if isinstance(row.name, str) else None): row
           for row in r.table("per_op").itertuples(index=False)}
    # aten::a: k1+k2 = 25000; aten::b: k3 = 3000; aten::c: -500; graph launch outside any op: 10000
    assert {k: v.tklqt_ns for k, v in ops.items()} == {"aten::a": 25000, "aten::b": 3000, "aten::c": -500,
                                                       None: 10000}
    assert ops["aten::a"].kernels == 2 and ops["aten::a"].kernels_per_call == 2.0
    # launch-bound: aten::a: calls 4000+3000=7000 <= union [10,20]+[25,30]=15000 -> no
    #               aten::b: calls 2000+1000=3000 >  union [44,45]+[50,51]=2000 -> yes
    #               aten::c: call 3000 > union [99.5,100.5]=1000 -> yes
    assert (ops["aten::a"].launch_api_ns, ops["aten::a"].gpu_union_ns, ops["aten::a"].launch_bound_calls) == (
        7000, 15000, 0)
    assert (ops["aten::b"].launch_api_ns, ops["aten::b"].gpu_union_ns, ops["aten::b"].launch_bound_calls) == (
        3000, 2000, 1)
    assert r.scalars["launch_bound_ops"] == 2
    assert set(r.table("launch_bound")["name"]) == {"aten::b", "aten::c"}
    phases = {(row.phase if isinstance(row.phase, str) else None): row.tklqt_ns for row in r.table("per_phase").itertuples(index=False)}
    assert phases == {"fwd": 25000, None: 12500}


# ---- every sample trace -------------------------------------------------------------------------------

def _sample_ids(session_store):
    return sorted(set(session_store.ids.values()))


def test_split_equals_the_reference_and_tables_sum_on_every_sample(session_store):
    """Each activity's api/queue/dispatch (dispatch is the remainder by definition, so their sum is lq by
    construction) is checked against tests/reference_launch.py's pandas computation from the raw rows, and
    each total against the reference's sum over the TKLQT terms."""
    ids = _sample_ids(session_store)
    assert ids
    with open_store(session_store.db, read_only=True) as store:
        for t in ids:
            df = activity_splits(store, t)
            ref = reference_launch.splits(store, t)
            reference_launch.assert_matches(df, ref, t)
            assert (df.queue_ns >= 0).all() and (df.launch_delay_ns >= 0).all(), t
            r = launch(store, t)
            s = r.scalars
            want = reference_launch.totals(ref)
            assert {k: s[k] for k in want} == want, t
            d = r.table("distribution")
            got = {row.metric: (row.count, row.median_ns, row.p90_ns, row.p99_ns, row.max_ns)
                   for row in d.itertuples(index=False)}
            assert got == reference_launch.distribution(ref), t
            for table in ("per_op", "per_leaf_op", "per_phase"):
                assert int(r.table(table)["tklqt_ns"].sum()) == s["tklqt_ns"], (t, table)
            assert int(df.loc[df.term, "lq_ns"].sum()) == s["tklqt_ns"]
            if s["graph_kernels"] > s["graph_launches"]:
                assert s["tklqt_naive_ns"] > s["tklqt_ns"], t
            else:
                assert s["tklqt_naive_ns"] == s["tklqt_ns"], t
            assert s["negative_lq"] == int((df.lq_ns < 0).sum())


def test_part_of_the_tables_is_the_same_numbers(session_store):
    """launch(_tables=...) (recommend's call) computes only the named tables, each equal to the full result's,
    with every scalar; launch_bound alone still gets launch_bound_ops (from per_op, not returned)."""
    import pandas as pd

    with open_store(session_store.db, read_only=True) as store:
        for t in _sample_ids(session_store)[:6]:
            full = launch(store, t)
            for part in (("per_leaf_op",), ("launch_bound",), ()):
                r = launch(store, t, _tables=part)
                assert list(r.tables) == list(part), (t, part)
                for name in part:
                    pd.testing.assert_frame_equal(r.tables[name], full.tables[name])
                want = dict(full.scalars)
                if not part or part == ("per_leaf_op",):
                    del want["launch_bound_ops"]
                assert r.scalars == want, (t, part)
                assert r.warnings == full.warnings and r.trust == full.trust


def test_cli_json_and_keys_documented(session_store):
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    t = _sample_ids(session_store)[0]
    res = CliRunner().invoke(cli, ["analyze", "launch", t, "--format", "json", "--db", str(session_store.db)])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    for key in ("tklqt_ns", "tklqt_naive_ns", "mean_queue_depth", "kernels", "graph_kernels", "api_ns",
                "queue_ns", "dispatch_ns", "launch_delay_ns", "per_op"):
        assert key in got, key
    assert type(got["tklqt_ns"]) is int
    keys = set(got) | set(got["trust"])
    for table in ("by_kind", "distribution", "per_op", "per_leaf_op", "per_phase", "launch_bound", "devices"):
        for row in got[table][:1]:
            keys |= set(row)
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"undocumented launch keys: {missing}"
