"""The bound analysis: idle split, idle causes, operators ranked by idle, queue depth, regime segments.

Exact numbers on a hand-made trace (each computed by hand below); properties on every sample trace.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from storage.kineto_build import kern, op, rt, write_trace
from stores import empty

from kernelscope.analysis import bound as B
from kernelscope.analysis.launch import launch
from kernelscope.cli import cli
from kernelscope.errors import UsageError
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.store import open_store

US = 1000


def causes_events() -> list[dict]:
    """One thread (times in us):

    aten::mm [0,10] launches k1 (cudaLaunchKernel [2,3]) -> k1 runs [5,8].
    Python (no operator) [10,20].
    aten::item [20,40] > aten::_local_scalar_dense [21,39] > cudaMemcpyAsync [22,23] (-> DtoH copy [24,25])
      then cudaStreamSynchronize [23,30].
    aten::empty [40,45] > cudaMalloc [41,44].  Python [45,50].
    aten::relu [50,60] > cudaLaunchKernel [55,57] -> k2 runs [58,60].

    Busy [5,8] [24,25] [58,60] = 6 us; span [5,60] = 55 us; idle 49 us in two gaps, both host wait (the
    activity ending each gap was launched after the gap opened):
    gap [8,24):  aten::mm 2 (operator), Python 10, item 1 + _local_scalar_dense 1 + memcpy call 1 + sync 1
                 (d2h_copy 4)                                                          = 16
    gap [25,58): sync 5 + _local_scalar_dense 9 + item 1 (d2h_copy 15), aten::empty 1 + 1 (operator 2),
                 cudaMalloc 3 (allocator), Python 5, aten::relu 5 + 1 (operator 6), launch call 2 = 33
    Causes: d2h_copy 19, python 15, operator 10, allocator 3, launch 2 (sum 49 = host wait).
    Operators (innermost operator, a call counting for its enclosing one): _local_scalar_dense 1+1+1+5+9
    = 17, relu 5+2+1 = 8, empty 1+3+1 = 5, item 1+1 = 2, mm 2.
    Queue (TKLQT terms): k1 queued [2,5), k2 [55,58): 6 us.
    """
    return [
        op("aten::mm", 0, 10, 1),
        rt("cudaLaunchKernel", 2, 1, 1, 1),
        op("aten::item", 20, 20, 2),
        op("aten::_local_scalar_dense", 21, 18, 3),
        rt("cudaMemcpyAsync", 22, 1, 2, 3),
        rt("cudaStreamSynchronize", 23, 7, 3, 3),
        op("aten::empty", 40, 5, 4),
        rt("cudaMalloc", 41, 3, 4, 4),
        op("aten::relu", 50, 10, 5),
        rt("cudaLaunchKernel", 55, 2, 5, 5),
        kern("k1", 5, 3, 1, 1),
        kern("Memcpy DtoH (Device -> Pinned)", 24, 1, 2, 3, stream=8, cat="gpu_memcpy"),
        kern("k2", 58, 2, 5, 5),
    ]


@pytest.fixture()
def hand_store(tmp_path):
    path = write_trace(tmp_path / "causes.json", causes_events())
    db = empty(tmp_path / "h.duckdb")
    with open_store(db, read_only=False) as store:
        (res,) = ingest_paths(store, [path])
    store = open_store(db, read_only=True)
    yield store, res.trace_id
    store.close()


def test_idle_split_and_causes_by_hand(hand_store):
    store, t = hand_store
    r = B.bound(store, t, bins=1)
    s = r.scalars
    assert (s["gpu_span_ns"], s["busy_ns"], s["idle_ns"]) == (55 * US, 6 * US, 49 * US)
    assert (s["host_wait_ns"], s["dependency_wait_ns"], s["gaps"]) == (49 * US, 0, 2)
    causes = dict(zip(r.tables["idle_causes"]["category"], r.tables["idle_causes"]["idle_ns"]))
    assert causes == {"d2h_copy": 19 * US, "python": 15 * US, "operator": 10 * US, "allocator": 3 * US,
                      "launch": 2 * US}
    gaps = dict(zip(r.tables["idle_causes"]["category"], r.tables["idle_causes"]["gaps"]))
    assert gaps == {"d2h_copy": 2, "python": 2, "operator": 2, "allocator": 1, "launch": 1}
    ops = r.tables["idle_operators"]
    assert list(zip(ops["operator"], ops["idle_ns"])) == [
        ("aten::_local_scalar_dense", 17 * US), ("aten::relu", 8 * US), ("aten::empty", 5 * US),
        ("aten::item", 2 * US), ("aten::mm", 2 * US)]
    assert dict(zip(ops["operator"], ops["main_category"]))["aten::empty"] == "allocator"


def test_a_gaps_pieces_in_one_state_are_one_stored_row(hand_store):
    """aten::relu is the innermost operator for 5 us before its launch call and 1 us after, aten::empty for 1 us
    either side of cudaMalloc: each is one row of idle_pieces (6 and 2 us), not two."""
    store, t = hand_store
    rows = store.query("SELECT operator, category, call_name, ns FROM idle_pieces WHERE trace_id = ? "
                       "AND category = 'operator' ORDER BY operator", [t])
    assert list(zip(rows["operator"], rows["ns"])) == [("aten::empty", 2 * US), ("aten::mm", 2 * US),
                                                       ("aten::relu", 6 * US)]
    assert store.query("SELECT count(*) AS n FROM idle_pieces WHERE trace_id = ? GROUP BY device, gap_start_ns, "
                       "category, call_name, op_id HAVING count(*) > 1", [t]).empty


def test_queue_depth_and_segments_by_hand(hand_store):
    store, t = hand_store
    q = B.queue_depth(store, t, bins=1)
    # one bin from the first queued start (2 us) to the last activity end (60 us): width 58 us
    assert list(q["queued_ns"]) == [6 * US] and list(q["max_depth"]) == [1]
    assert q["mean_depth"].iloc[0] == pytest.approx(6 / 58)
    assert int(q["queued_ns"].sum()) == launch(store, t).scalars["tklqt_ns"]
    seg = B.regime_segments(store, t, bins=1)
    # host wait 49 of the 55 us of span in the bin: more than half -> one cpu_bound segment
    assert list(seg["regime"]) == ["cpu_bound"] and list(seg["dur_ns"]) == [55 * US]
    # 58 bins of 1 us: [5,8) busy -> gpu_bound, [8,24) host wait -> cpu_bound, [24,25) gpu, [25,58) cpu,
    # [58,60) gpu
    seg = B.regime_segments(store, t, bins=58)
    assert list(zip(seg["regime"], seg["dur_ns"])) == [
        ("gpu_bound", 3 * US), ("cpu_bound", 16 * US), ("gpu_bound", 1 * US), ("cpu_bound", 33 * US),
        ("gpu_bound", 2 * US)]


def test_slow_calls_of_an_operator_by_hand(tmp_path):
    """One thread (us): aten::mm [0,10] launches k0 [5,8]; three calls of attn with the same input shapes:
    #1 [10,2010] launches k1 [2006,2008] (call [2000,2005]), #2 [2010,2020] launches k2 [2014,2016], #3 [2020,3520]
    launches k3 [3512,3514]. Host-wait gaps [8,2006) [2008,2014) [2016,3512) = 3,500 us: mm 2 ([8,10)); attn #1
    1,996 + 2 ([2008,2010)) = 1,998, #2 4 + 4 = 8, #3 1,492. Slow calls (>= 1 ms of idle each): #1 and #3,
    3,490 us, the most 1,998; only #1 is the first call with its shapes."""
    dims = {"Input Dims": [[1, 16, 1, 64], [1, 4, 66, 64]]}
    attn = [dict(op("attn", ts, dur, ext), args={**op("attn", ts, dur, ext)["args"], **dims})
            for ts, dur, ext in ((10, 2000, 2), (2010, 10, 3), (2020, 1500, 4))]
    path = write_trace(tmp_path / "slow.json", [
        op("aten::mm", 0, 10, 1), rt("cudaLaunchKernel", 1, 1, 1, 1), kern("k0", 5, 3, 1, 1),
        *attn,
        rt("cudaLaunchKernel", 2000, 5, 2, 2), kern("k1", 2006, 2, 2, 2),
        rt("cudaLaunchKernel", 2012, 1, 3, 3), kern("k2", 2014, 2, 3, 3),
        rt("cudaLaunchKernel", 3510, 1, 4, 4), kern("k3", 3512, 2, 4, 4)])
    db = empty(tmp_path / "s.duckdb")
    with open_store(db, read_only=False) as store:
        (res,) = ingest_paths(store, [path])
        r = B.bound(store, res.trace_id, bins=1)
    assert r.scalars["host_wait_ns"] == 3500 * US
    ops = r.tables["idle_operators"].set_index("operator")
    assert ops.loc["attn", "idle_ns"] == 3498 * US and ops.loc["aten::mm", "idle_ns"] == 2 * US
    assert ops.loc["attn", ["slow_calls", "slow_call_idle_ns", "max_call_idle_ns", "slow_new_shape_calls"]].tolist() \
        == [2, 3490 * US, 1998 * US, 1]
    assert ops.loc["aten::mm", ["slow_calls", "slow_call_idle_ns", "max_call_idle_ns"]].tolist() == [0, 0, 0]
    # the same trace recorded without shapes (torch.profiler's default): whether a slow call was new cannot be told
    for e in attn:
        e["args"].pop("Input Dims")
    path = write_trace(tmp_path / "slow_noshapes.json", [e for e in json.loads(path.read_text())["traceEvents"]
                                                         if e["name"] != "attn"] + attn)
    with open_store(db, read_only=False) as store:
        (res,) = ingest_paths(store, [path])
        bare = B.bound(store, res.trace_id, bins=1).tables["idle_operators"].set_index("operator")
    assert bare.loc["attn", "slow_calls"] == 2 and pd.isna(bare.loc["attn", "slow_new_shape_calls"])
    assert bare.loc["aten::mm", "slow_new_shape_calls"] == 0


def test_dependency_wait_when_work_is_queued(tmp_path):
    """k1 [5,8] and k2 [10,12] both launched by 3 us: the gap [8,10) opens with k2 queued -> dependency
    wait 2 us; no host wait, so no idle causes."""
    path = write_trace(tmp_path / "dep.json", [
        op("aten::foo", 0, 4, 1), rt("cudaLaunchKernel", 1, 1, 1, 1), rt("cudaLaunchKernel", 2, 1, 2, 1),
        kern("k1", 5, 3, 1, 1), kern("k2", 10, 2, 2, 1)])
    db = tmp_path / "d.duckdb"
    with open_store(db, read_only=False) as store:
        (res,) = ingest_paths(store, [path])
        r = B.bound(store, res.trace_id, bins=10)
    assert (r.scalars["host_wait_ns"], r.scalars["dependency_wait_ns"], r.scalars["idle_ns"]) == (0, 2 * US, 2 * US)
    assert r.tables["idle_causes"].empty
    # queued: k1 [1,5) 4 us, k2 [2,10) 8 us = 12 us = TKLQT
    assert r.scalars["queued_ns"] == 12 * US


def test_bins_option_is_checked(hand_store):
    store, t = hand_store
    for bad in (0, 2001, "x", 1.5):
        with pytest.raises(UsageError):
            B.bound(store, t, bins=bad)


def test_bound_properties_on_samples(session_store):
    with open_store(session_store.db, read_only=True) as store:
        for path, t in session_store.ids.items():
            r = B.bound(store, t)
            if r.scalars["gpu_span_ns"] is None:
                continue
            d = r.tables["devices"]
            assert ((d.host_wait_ns + d.dependency_wait_ns) == d.idle_ns).all(), path
            assert ((d.gpu_span_ns - d.busy_ns) == d.idle_ns).all(), path
            assert int(r.tables["idle_causes"]["idle_ns"].sum()) == r.scalars["host_wait_ns"], path
            seg = r.tables["segments"]
            for dev, span in zip(d.device, d.gpu_span_ns):
                assert int(seg.loc[seg.device == dev, "dur_ns"].sum()) == span, path
            q = r.tables["queue_depth"]
            assert len(q) <= B.DEFAULT_BINS * max(1, q[["device", "stream"]].drop_duplicates().shape[0])
            lr = launch(store, t).scalars
            if lr["negative_lq"] == 0:
                assert r.scalars["queued_ns"] == lr["tklqt_ns"], path
            ops = r.tables["idle_operators"]
            assert int(ops["idle_ns"].sum()) <= r.scalars["host_wait_ns"]


def test_cli_bound_json(hand_store, tmp_path):
    store, t = hand_store
    db = str(store.path)
    store.close()
    res = CliRunner().invoke(cli, ["analyze", "bound", t, "--json", "--db", db, "-o", "bins=1"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["host_wait_ns"] == 49 * US
    assert {r["category"] for r in got["idle_causes"]} == {"d2h_copy", "python", "operator", "allocator", "launch"}


def test_every_bound_key_is_documented(hand_store):
    import re

    from conftest import ROOT

    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    store, t = hand_store
    r = B.bound(store, t, bins=4)
    keys = set(r.scalars) | {c for df in r.tables.values() for c in df.columns} | set(r.tables)
    keys |= set(B.CAUSES)
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"undocumented bound keys: {missing}"


def _queue_reference(store, t, n):
    """Queue depth per (device, stream, bin) by a plain sweep over raw rows (gpu_activities + launches, not
    the stored queued_intervals): {(device, stream, bin): (queued_ns, max_depth)}."""
    rows = store.query(
        """SELECT a.device, a.stream, a.start_ns, a.end_ns, a.is_graph, a.launch_id, l.start_ns AS ls
           FROM gpu_activities a LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
           WHERE a.trace_id = $t AND a.kind = 'kernel' ORDER BY a.start_ns, a.activity_id""", {"t": t})
    iv, first_node = [], {}
    for r in rows.itertuples(index=False):
        if r.ls is None or r.ls != r.ls:
            continue
        if r.is_graph:
            first_node.setdefault(int(r.launch_id), (int(r.device), int(r.stream), int(r.ls), int(r.start_ns)))
        else:
            iv.append((int(r.device), int(r.stream), int(r.ls), int(r.start_ns)))
    iv += list(first_node.values())
    origin = min([s for _, _, s, _ in iv] + [int(rows.start_ns.min())])
    w = max(1, -(-(int(rows.end_ns.max()) - origin) // n))
    out = {}
    by_stream = {}
    for d, st, s, e in iv:
        if e > s:
            by_stream.setdefault((d, st), []).append((s, e))
    for key, ivs in by_stream.items():
        change = {}
        for s, e in ivs:
            change[s] = change.get(s, 0) + 1
            change[e] = change.get(e, 0) - 1
        times, depth = sorted(change), 0
        for t0, t1 in zip(times, times[1:]):  # the step [t0, t1) and its depth
            depth += change[t0]
            if depth == 0:
                continue
            for b in range((t0 - origin) // w, (t1 - 1 - origin) // w + 1):
                lo, hi = max(t0, origin + b * w), min(t1, origin + (b + 1) * w)
                q, m = out.get((*key, b), (0, 0))
                out[(*key, b)] = (q + depth * (hi - lo), max(m, depth))
    return out


@pytest.mark.parametrize("bins", [7, 200])
def test_queue_depth_equals_a_plain_sweep(session_store, bins):
    """queue_depth reads the stored queued intervals and takes each bin's maximum from the depths at interval
    starts and the intervals crossing into the bin; a step-by-step sweep over the raw rows agrees exactly."""
    names = ("llama_prefill_b128", "small_kernels_graph", "llama_decode", "train_step")
    with open_store(session_store.db, read_only=True) as store:
        checked = 0
        for path, t in session_store.ids.items():
            if not any(n in str(path) for n in names):
                continue
            q = B.queue_depth(store, t, bins=bins)
            got = {(int(r.device), int(r.stream), int(r.bin)): (int(r.queued_ns), int(r.max_depth))
                   for r in q.itertuples(index=False)}
            assert got == _queue_reference(store, t, bins), path
            checked += 1
        assert checked == len(names)


def test_part_of_the_tables_is_the_same_numbers(session_store):
    """bound(_tables=...) (recommend's call) skips the binned tables not named; what it returns equals the
    full result's, and the scalars of the skipped tables are left out, not filled with something else."""
    import pandas as pd

    binned = {"segments": ("cpu_bound_ns", "gpu_bound_ns", "comm_bound_ns"), "queue_depth": ("queued_ns", "bin_ns")}
    with open_store(session_store.db, read_only=True) as store:
        for path, t in list(session_store.ids.items())[:8]:
            full = B.bound(store, t)
            if full.scalars["gpu_span_ns"] is None:
                continue
            for part in ((), ("segments",), ("queue_depth",)):
                r = B.bound(store, t, _tables=("devices", "idle_causes", "idle_operators") + part)
                assert list(r.tables) == ["devices", "idle_causes", "idle_operators", *part], path
                for name, df in r.tables.items():
                    pd.testing.assert_frame_equal(df, full.tables[name])
                skipped = {k for name, keys in binned.items() if name not in part for k in keys}
                assert r.scalars == {k: v for k, v in full.scalars.items() if k not in skipped}, (path, part)
                assert r.warnings == full.warnings


def test_python_garbage_collection_is_its_own_idle_cause(tmp_path):
    """causes_events with Python's garbage collector on the launching thread: kernelscope profile's range
    [12,16] and torch's own 'Python GC' event [14,17] inside the Python time [10,20] (counted once: 5 us), torch's
    [52,54] inside aten::relu's operator time [50,55); a collection on another thread [30,40] changes nothing.
    python 15 -> 10, operator 10 -> 8 (relu 8 -> 6), python_gc 7 in both gaps; the host wait still 49."""
    from storage.kineto_build import x

    events = causes_events() + [
        x("user_annotation", "python gc: full collection", 12, 4),
        x("python_function", "Python GC", 14, 3, **{"Python id": 1, "Python parent id": None}),
        x("python_function", "Python GC", 52, 2, **{"Python id": 2, "Python parent id": None}),
        x("user_annotation", "python gc: full collection", 30, 10, tid=999),
    ]
    db = empty(tmp_path / "gc.duckdb")
    with open_store(db, read_only=False) as store:
        (res,) = ingest_paths(store, [write_trace(tmp_path / "gc.json", events)])
    with open_store(db, read_only=True) as store:
        r = B.bound(store, res.trace_id, bins=1)
    causes = dict(zip(r.tables["idle_causes"]["category"], r.tables["idle_causes"]["idle_ns"]))
    assert causes == {"d2h_copy": 19 * US, "python": 10 * US, "python_gc": 7 * US, "operator": 8 * US,
                      "allocator": 3 * US, "launch": 2 * US}
    assert dict(zip(r.tables["idle_causes"]["category"], r.tables["idle_causes"]["gaps"]))["python_gc"] == 2
    ops = dict(zip(r.tables["idle_operators"]["operator"], r.tables["idle_operators"]["idle_ns"]))
    assert ops["aten::relu"] == 6 * US and ops["aten::_local_scalar_dense"] == 17 * US
    assert r.scalars["host_wait_ns"] == 49 * US


def test_every_cause_has_words_on_the_chart(hand_store):
    """The idle-causes chart's hover says what each category means, for every category bound can give."""
    from kernelscope.reports.bound import idle_causes_figure

    assert set(B.CAUSE_WORDS) == set(B.CAUSES) and all(B.CAUSE_WORDS.values())
    store, t = hand_store
    causes = B.bound(store, t, bins=1).tables["idle_causes"]
    bar = idle_causes_figure(causes).data[0]
    said = {y: cd[3] for y, cd in zip(bar.y, bar.customdata)}
    assert said == {c: B.CAUSE_WORDS[c] for c in causes["category"]}
    assert "customdata[3]" in bar.hovertemplate
