"""The transition analysis: brackets by the trace rule and the un-profiled rule.

A synthetic sweep built from hand-made traces (knee exactly at batch 32, computed below), a sweep that is
GPU-bound throughout (null), and the done-when property on the real llama prefill sweep.
"""

from __future__ import annotations

import json
import statistics

import pytest
import stores
from click.testing import CliRunner
from conftest import ROOT
from storage.kineto_build import kern, op, rt, write_trace

from kernelscope.analysis.transition import bracket, transition
from kernelscope.cli import cli
from kernelscope.errors import UsageError
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.store import open_store

US = 1000


def sweep_events(d: float) -> list[dict]:
    """One operator [0,40] us launching 4 kernels of d us: launch calls at 0, 10, 20, 30 us (2 us each);
    kernel i starts at max(10 i + 5, end of kernel i-1).

    d <= 10: every kernel starts 5 us after its launch: TKLQT = 4 * 5 = 20 us, span = 30 + d, q < 1.
    d > 10: kernel i starts at 5 + i d, lq_i = 5 + i (d - 10): TKLQT = 20 + 6 (d - 10), span = 4 d,
    so q = (6 d - 40) / (4 d) >= 1 iff d >= 20 (d = 16: 56/64 = 0.875; d = 32: 152/128 = 1.1875).
    busy = 4 d (no steps, so busy per iteration = busy).
    """
    ev = [op("aten::foo", 0, 40, 1)]
    start = None
    for i in range(4):
        ev.append(rt("cudaLaunchKernel", 10 * i, 2, i + 1, 1))
        start = 10 * i + 5 if start is None else max(10 * i + 5, start + d)
        ev.append(kern(f"k{i}", start, d, i + 1, 1))
    return ev


# batch -> kernel duration batch/8 us and un-profiled time (label unprofiled_ns): a host floor of 12 us
# until the GPU work (4 d) exceeds it.
SWEEP = {4: 12000, 8: 12000, 16: 12000, 32: 16000, 64: 32000, 128: 64000, 256: 128000}


def _store(tmp_path, points: dict[int, int | None], sweep="syn"):
    """A store of the synthetic sweep ``points`` (batch -> un-profiled ns or None), each trace a file
    syn_b{batch}.json ingested with its labels: a copy of one built once per session for these points."""

    def build(db):
        with open_store(db, read_only=False) as store:
            for b, unp in points.items():
                path = write_trace(db.parent / f"syn_b{b}.json", sweep_events(b / 8))
                labels = {"batch": str(b), "sweep": sweep}
                if unp is not None:
                    labels["unprofiled_ns"] = str(unp)
                (res,) = ingest_paths(store, [path], labels=labels)
                assert res.status == "ingested", res.message

    db = tmp_path / "s.duckdb"
    stores.copy("transition_" + "_".join(f"{b}-{u}" for b, u in points.items()) + "_" + sweep, build, db)
    return db


def test_synthetic_knee_at_32(tmp_path):
    """Trace rule: q < 1 up to batch 128 (d = 16), q = 1.1875 at 256 -> bracket (128, 256).
    Host floor H = median un-profiled time of the trace-rule CPU-bound points (batch 4..128)
    = median(12, 12, 12, 16, 32, 64) us = 14 us. busy = 4 d = batch/2 us: 8 us at 16 < 14 <= 16 us at 32,
    so the un-profiled rule gives (16, 32) and decides."""
    db = _store(tmp_path, SWEEP)
    with open_store(db, read_only=True) as store:
        r = transition(store, by="batch", sweep="syn")
    s = r.scalars
    assert s["rule"] == "unprofiled"
    assert s["host_floor_ns"] == 14 * US
    assert s["transition"]["first_gpu_bound"] == 32 and s["transition"]["last_cpu_bound"] == 16
    assert s["transition"]["points"] == [4, 8, 16, 32, 64, 128, 256]
    assert s["brackets"]["trace"]["last_cpu_bound"] == 128 and s["brackets"]["trace"]["first_gpu_bound"] == 256
    pts = r.tables["points"].set_index("label")
    assert pts.loc[128, "tklqt_ns"] == 56 * US and pts.loc[128, "mean_queue_depth"] == pytest.approx(0.875)
    assert pts.loc[256, "tklqt_ns"] == 152 * US and pts.loc[256, "mean_queue_depth"] == pytest.approx(1.1875)
    assert pts.loc[4, "tklqt_ns"] == 20 * US and pts.loc[4, "gpu_span_ns"] == 30500
    assert list(pts["busy_per_iter_ns"]) == [b * US // 2 for b in SWEEP]
    assert list(pts["unprofiled_source"]) == ["label"] * len(SWEEP)
    # latency: operator start 0 to last kernel end; batch 4: 35 + 0.5 = 35.5 us; inflation 35.5 / 12
    assert pts.loc[4, "latency_ns"] == 35500 and pts.loc[4, "inflation"] == pytest.approx(35.5 / 12)
    assert list(pts["regime"]) == ["cpu_bound"] * 3 + ["gpu_bound"] * 4


def test_labels_sorted_numerically_and_trace_rule_without_unprofiled(tmp_path):
    """Without un-profiled times the trace rule decides: (128, 256). Labels 16 < 128 < 256 numerically
    (as text '128' < '16' < '256')."""
    db = _store(tmp_path, {256: None, 16: None, 128: None})
    with open_store(db, read_only=True) as store:
        r = transition(store)
    assert r.scalars["rule"] == "trace"
    assert r.scalars["transition"] == {"last_cpu_bound": 128, "first_gpu_bound": 256, "rule": "trace",
                                       "points": [16, 128, 256]}
    assert r.scalars["brackets"]["unprofiled"]["reason"]


def test_gpu_bound_throughout_is_null(tmp_path):
    """d = 32 and 40 us (batch 256, 320): q = 1.1875 and (240 - 40)/160 = 1.25, both GPU-bound; no
    trace-rule CPU-bound point, so no host floor: null with a reason."""
    db = _store(tmp_path, {256: 128000, 320: 160000})
    with open_store(db, read_only=True) as store:
        r = transition(store, sweep="syn")
    assert r.scalars["transition"] is None
    assert "GPU-bound" in r.scalars["transition_reason"]


def test_bracket_rules():
    assert bracket([1, 2, 3], [False, True, True], "x")[0]["last_cpu_bound"] == 1
    b, reason = bracket([1, 2, 3, 4], [False, True, False, True], "x")
    assert b is None and "interleave" in reason
    assert bracket([1, 2], [False, False], "x") == (None, "every point is CPU-bound under the x rule")


def test_errors(tmp_path):
    db = _store(tmp_path, {4: None, 8: None})
    with open_store(db, read_only=True) as store:
        with pytest.raises(UsageError):
            transition(store, by="nolabel")
        with pytest.raises(UsageError):
            transition(store, sweep="other")


def test_cli_transition(tmp_path):
    db = str(_store(tmp_path, SWEEP))
    run = CliRunner()
    res = run.invoke(cli, ["analyze", "transition", "--by", "batch", "--sweep", "syn", "--json", "--db", db])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["transition"]["first_gpu_bound"] == 32 and len(got["points"]) == 7
    res = run.invoke(cli, ["analyze", "transition", "syn_b4.json", "syn_b256.json", "--json", "--db", db])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["transition"]["points"] == [4, 256]
    res = run.invoke(cli, ["analyze", "bound", "syn_b4.json", "--sweep", "syn", "--db", db])
    assert res.exit_code != 0 and "multi-trace" in res.stderr


@pytest.fixture(scope="module")
def sweep_db(sample_runs):
    """The llama prefill sample sweep ingested as collector run directories (labels + un-profiled timings):
    the session's store of every sample run (transition reads the sweep's traces alone)."""
    runs = sorted((ROOT / "sample_traces").glob("llama_prefill_b*"))
    if not runs:
        pytest.fail("no llama_prefill sample runs")
    assert {r.name for r in runs} <= set(sample_runs.ids)
    return str(sample_runs.db)


def test_sample_sweep_bracket_contains_knee(sweep_db):
    """Done-when: the bracket contains the batch where the un-profiled time first exceeds 1.25x its
    small-batch median (median of the three smallest batches)."""
    with open_store(sweep_db, read_only=True) as store:
        r = transition(store, by="batch", sweep="llama_prefill")
        pts = r.tables["points"]
        assert list(pts["label"]) == sorted(pts["label"])
        unp = list(pts["unprofiled_ns"])
        small = statistics.median(unp[:3])
        knee = next(lab for lab, u in zip(pts["label"], unp) if u > 1.25 * small)
        t = r.scalars["transition"]
        assert t is not None, r.scalars["transition_reason"]
        assert t["last_cpu_bound"] <= knee <= t["first_gpu_bound"]
        assert r.scalars["rule"] == "unprofiled"
        # the GPU-bound tail alone (trace rule) never changes regime: null
        gpu_ids = list(pts.loc[pts["regime_trace"] == "gpu_bound", "trace_id"])
        tail = transition(store, gpu_ids)
        assert tail.scalars["transition"] is None


def test_every_transition_key_is_documented(tmp_path):
    import re

    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    db = _store(tmp_path, SWEEP)
    with open_store(db, read_only=True) as store:
        r = transition(store, sweep="syn")
    keys = set(r.scalars) | set(r.tables) | set(r.tables["points"].columns) | set(r.scalars["transition"])
    keys |= {f"brackets.{k}" for k in r.scalars["brackets"]}
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"undocumented transition keys: {missing}"


def test_a_point_whose_host_wait_is_in_slow_calls_is_named(tmp_path):
    """batch=1: test_bound's slow-call trace (host wait 3,500 us, of which 3,490 us inside two attn calls that
    each kept the GPU waiting 1 ms or more); batch=2: the synthetic sweep's d = 0.25 us point (no call waits
    1 ms). The warning names batch=1 alone, with 3,490 / 3,500 = 100% (rounded)."""
    attn = [op("attn", ts, dur, ext) for ts, dur, ext in ((10, 2000, 2), (2010, 10, 3), (2020, 1500, 4))]
    slow = write_trace(tmp_path / "slow.json", [
        op("aten::mm", 0, 10, 1), rt("cudaLaunchKernel", 1, 1, 1, 1), kern("k0", 5, 3, 1, 1), *attn,
        rt("cudaLaunchKernel", 2000, 5, 2, 2), kern("k1", 2006, 2, 2, 2),
        rt("cudaLaunchKernel", 2012, 1, 3, 3), kern("k2", 2014, 2, 3, 3),
        rt("cudaLaunchKernel", 3510, 1, 4, 4), kern("k3", 3512, 2, 4, 4)])
    fast = write_trace(tmp_path / "fast.json", sweep_events(0.25))
    with open_store(stores.empty(tmp_path / "s.duckdb"), read_only=False) as store:
        for path, b in ((slow, 1), (fast, 2)):
            (res,) = ingest_paths(store, [path], labels={"batch": str(b)})
            assert res.status == "ingested", res.message
        r = transition(store)
    pts = r.tables["points"].set_index("label")
    assert pts.loc[1, "slow_call_idle_ns"] == 3490 * US and pts.loc[2, "slow_call_idle_ns"] == 0
    assert pts.loc[1, "slow_call_share"] == pytest.approx(3490 / 3500) and pts.loc[2, "slow_call_share"] == 0
    (warning,) = [w for w in r.warnings if "slow operator calls" in w]
    assert warning.startswith("at batch=1: 100% of the host wait")


def _stepped_run(root, batch: int, unprofiled_step_ns: int, kernel_us: float):
    """A `kernelscope profile` run of 4 ProfilerSteps, each an operator launching one kernel 5 us after the
    call: step 0 (the warm-up, 1000 us: a first call that autotunes on the host) a 900 us kernel, steps 1-3
    (100 us each) one of ``kernel_us``; its provenance has the runner's un-profiled step median (basis step),
    as `kernelscope sweep` leaves it."""
    from storage.kineto_build import x

    ev = []
    for i in range(4):
        t0, dur = (0, 1000) if i == 0 else (1000 + 100 * (i - 1), 100)
        ev += [x("user_annotation", f"ProfilerStep#{i}", t0, dur), op("aten::conv", t0 + 10, 30, i + 1),
               rt("cudaLaunchKernel", t0 + 20, 2, i + 1, i + 1), kern("k", t0 + 25, 900 if i == 0 else kernel_us,
                                                                  i + 1, i + 1)]
    run = root / f"b{batch}"
    run.mkdir()
    write_trace(run / "trace.json", ev)
    (run / "run.json").write_text(json.dumps({
        "name": f"conv_b{batch}", "labels": {"batch": batch, "sweep": "conv"},
        "provenance": {"profiler_overhead": {"basis": "step", "rule": "forward", "n": 3, "pct": 10.0,
                                             "profiled_median_ns": 100 * US,
                                             "unprofiled_median_ns": unprofiled_step_ns}}}))
    return run


def test_warm_up_steps_left_out_and_unprofiled_steps_used(tmp_path):
    """A sweep whose first step autotunes (900 us of kernels in step 0, then 5 or 80 us per step): busy per
    iteration counts the 3 steady steps alone (5 us, not (900 + 15) / 4 = 228.75 us), latency per iteration is
    their mean span, and the collector's un-profiled step median (50 us) is the un-profiled time (source
    'steps'), so the un-profiled rule decides: 5 us < 50 us CPU-bound, 80 us >= 50 us GPU-bound."""
    from kernelscope.storage.ingest import ingest_run

    db = stores.empty(tmp_path / "w.duckdb")
    with open_store(db) as store:
        for batch, k in ((1, 5), (64, 80)):
            res = ingest_run(store, _stepped_run(tmp_path, batch, 50 * US, k))
            assert res.status == "ingested", res.message
        r = transition(store, sweep="conv")
    pts = r.tables["points"].set_index("label")
    assert list(pts["iterations"]) == [3, 3]
    assert pts.loc[1, "busy_per_iter_ns"] == 5 * US and pts.loc[64, "busy_per_iter_ns"] == 80 * US
    assert list(pts["unprofiled_source"]) == ["steps", "steps"] and list(pts["unprofiled_ns"]) == [50 * US] * 2
    assert r.scalars["rule"] == "unprofiled" and r.scalars["host_floor_ns"] == 50 * US
    assert r.scalars["transition"]["last_cpu_bound"] == 1 and r.scalars["transition"]["first_gpu_bound"] == 64
    with open_store(db, read_only=True) as store:
        from kernelscope.analysis.steps import steps

        for t, lab in zip(pts["trace_id"], pts.index):
            st = steps(store, t).tables["steps"]
            steady = st[~st["warmup"] & ~st["partial"]]
            assert len(steady) == 3 and pts.loc[lab, "latency_per_iter_ns"] == round(steady["dur_ns"].mean())
