"""whatif analysis: hand-computed minimal traces (arithmetic written out) and the done-when checks on the samples."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from conftest import ROOT
from storage.kineto_build import kern, rt, write_trace, x
from stores import empty

from kernelscope.analysis.whatif import whatif
from kernelscope.cli import cli
from kernelscope.errors import UsageError
from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.store import open_store


@pytest.fixture
def store(tmp_path):
    with open_store(empty(tmp_path / "w.duckdb")) as s:
        yield s


def _ingest(store, tmp_path, name, events):
    res = ingest_file(store, write_trace(tmp_path / f"{name}.json", events), name=name)
    assert res.status == "ingested", res.message
    return res.trace_id


def _timings(store, t, durations):
    for i, d in enumerate(durations):
        store.con.execute("INSERT INTO timings (trace_id, kind, iteration, dur_ns) VALUES (?, 'cuda_event', ?, ?)",
                          [t, i, d])


def sync_events():
    """Times in us. No steps, no operators, no graph anywhere in the store.

    stream 7: L1 [0,2] -> k1 [10,20];  L2 [3,5] -> k2 [21,25];  L3 [6,8] -> k3 [28,30]
              cudaDeviceSynchronize [9,31]
              L4 [40,42] -> k4 [50,55]
    stream 8: L5 [45,46] -> k5 [60,70]   (launched after the sync returned)
    """
    return [
        rt("cudaLaunchKernel", 0, 2, 1, 0), rt("cudaLaunchKernel", 3, 2, 2, 0), rt("cudaLaunchKernel", 6, 2, 3, 0),
        rt("cudaDeviceSynchronize", 9, 22, 6, 0),
        rt("cudaLaunchKernel", 40, 2, 4, 0), rt("cudaLaunchKernel", 45, 1, 5, 0),
        kern("k1", 10, 10, 1, 0), kern("k2", 21, 4, 2, 0), kern("k3", 28, 2, 3, 0), kern("k4", 50, 5, 4, 0),
        kern("k5", 60, 10, 5, 0, stream=8),
    ]


def test_host_sync_barrier_and_back_to_back_gap_by_hand(store, tmp_path):
    t = _ingest(store, tmp_path, "syncs", sync_events())
    r = whatif(store, t)
    s = r.scalars
    # Residual: no graph replay in the store -> back-to-back gaps. k2: launch end 5 <= k1 end 20 -> gap 21-20 =
    # 1 us; k3: launch end 8 <= k2 end 25 -> gap 28-25 = 3 us; k4 (launch end 42 > 30) and k1/k5 (first on
    # their streams) are not back-to-back. Median of {1000, 3000} = 2000 ns (stream 8 has none: trace median).
    assert (s["residual_gap_ns"], s["residual_samples"]) == (2000, 2)
    assert s["residual_source"].startswith("back-to-back")
    # Replay: stream 7: k1 ends 0+2000+10000 = 12000; k2 12000+2000+4000 = 18000; k3 18000+2000+2000 = 22000.
    # The sync [9,31] waited for k1..k3 (launched before 9, ended by 31): H = 22000.
    # k4 (launched at 40 > 31): max(22000, 22000) + 2000 + 5000 = 29000.
    # k5 on stream 8, launched after the sync: max(0, H=22000) + 2000 + 10000 = 34000 (12000 without the sync).
    assert s["predicted_ns"] == 34000
    assert s["host_syncs"] == 1
    # naive = 10+4+2+5+10 us = 31000; traced = first launch 0 -> last end 70 us = 70000 (no timings: observed)
    assert (s["naive_ns"], s["traced_ns"], s["observed_ns"]) == (31000, 70000, 70000)
    assert s["observed_source"].startswith("traced")
    assert s["predicted_speedup"] == round(70000 / 34000, 4)
    assert any("several streams" in w for w in r.warnings)


def graph_events():
    """ProfilerStep#1 [0,100]; one graph launch [5,10] -> nodes [20,22] [23,25] [27,29] (node gaps 1 and 2 us)."""
    return [
        x("user_annotation", "ProfilerStep#1", 0, 100, **{"External id": 90}),
        rt("cudaGraphLaunch", 5, 5, 1, 0),
        kern("n1", 20, 2, 1, 0), kern("n2", 23, 2, 1, 0), kern("n3", 27, 2, 1, 0),
    ]


def eager_events():
    """A kernel launched before the step (out of scope), then ProfilerStep#1 [4,104] with three host-bound
    launches: [5,8] -> [10,12], [15,18] -> [20,22], [25,28] -> [30,32]."""
    return [
        rt("cudaLaunchKernel", 1, 1, 9, 0), kern("pre", 3, 1, 9, 0),
        x("user_annotation", "ProfilerStep#1", 4, 100, **{"External id": 90}),
        rt("cudaLaunchKernel", 5, 3, 1, 0), rt("cudaLaunchKernel", 15, 3, 2, 0), rt("cudaLaunchKernel", 25, 3, 3, 0),
        kern("e1", 10, 2, 1, 0), kern("e2", 20, 2, 2, 0), kern("e3", 30, 2, 3, 0),
    ]


def test_graph_gaps_twin_and_unprofiled_by_hand(store, tmp_path):
    g = _ingest(store, tmp_path, "graph", graph_events())
    e = _ingest(store, tmp_path, "eager", eager_events())
    _timings(store, g, [30000, 31000, 50000])  # median 31000 x 1 step
    _timings(store, e, [80000, 90000, 95000])  # median 90000 x 1 step

    rg = whatif(store, g).scalars
    # graph node gaps 23-22 = 1 us and 27-25 = 2 us; median (nearest rank, lower) = 1000 ns.
    assert (rg["residual_gap_ns"], rg["residual_source"]) == (1000, "graph replays in this trace")
    # first node gets the residual 1000, the others keep their own gaps: 1000+2000 + 1000+2000 + 2000+2000 = 10000
    assert rg["predicted_ns"] == 10000
    assert (rg["observed_ns"], rg["naive_ns"]) == (31000, 6000)

    r = whatif(store, e, twin="graph")  # twin by name
    s = r.scalars
    assert s["residual_source"] == f"graph replays in the twin trace {g}"
    # scope: 'pre' was launched before the step -> 3 activities; 3 x (1000 + 2000) = 9000
    assert (s["activities"], r.trust["out_of_scope"]) == (3, 1)
    assert s["predicted_ns"] == 9000 and s["naive_ns"] == 6000
    assert s["observed_ns"] == 90000 and s["observed_source"].startswith("unprofiled")
    assert s["traced_ns"] == 32000 - 4000  # step start 4 us -> last in-scope end 32 us
    assert (s["twin_observed_ns"], s["observed_speedup"]) == (31000, round(90000 / 31000, 4))
    assert s["prediction_error"] == round(9000 / 31000 - 1, 4)
    assert s["naive_error"] == round(6000 / 31000 - 1, 4)
    assert s["predicted_speedup"] == 10.0
    # without the twin the same GPU model's graph replays in the store are used
    s2 = whatif(store, e).scalars
    assert s2["residual_source"].startswith("graph replays in other stored traces") and s2["residual_gap_ns"] == 1000


def test_unknown_twin_is_a_usage_error(store, tmp_path):
    t = _ingest(store, tmp_path, "graph", graph_events())
    with pytest.raises(UsageError, match="no stored trace"):
        whatif(store, t, twin="nope")


# ---- samples: the done-when checks -------------------------------------------------------------------

SAMPLES = ROOT / "sample_traces"
RUNS = ("small_kernels_eager", "small_kernels_graph", "llama_prefill_b128")


@pytest.fixture(scope="module")
def runs(sample_runs):
    """The sample run directories ingested as runs (trace + run.json: name, labels, un-profiled timings): the
    session's store of every sample run (the twin is named; the graph-gap prior plays no part with a twin)."""
    if not all((SAMPLES / r / "run.json").is_file() for r in RUNS):
        pytest.fail("sample run directories are missing")
    assert set(RUNS) <= set(sample_runs.ids)
    return sample_runs.db


def _by_name(store, name):
    df = store.query("SELECT trace_id FROM traces WHERE name = $n", {"n": name})
    assert len(df) == 1, name
    return str(df["trace_id"].iloc[0])


def test_eager_prediction_matches_unprofiled_graph(runs):
    with open_store(runs, read_only=True) as store:
        s = whatif(store, _by_name(store, "small_kernels_eager"), twin="small_kernels_graph").scalars
    assert s["twin_observed_source"].startswith("unprofiled")
    measured = s["twin_observed_ns"]
    assert abs(s["predicted_ns"] - measured) <= 0.15 * measured, s
    assert abs(s["predicted_ns"] - measured) < abs(s["naive_ns"] - measured), s
    assert s["predicted_ns"] >= s["gpu_work_ns"]  # one stream: gaps only add


def test_largest_batch_predicts_no_speedup(runs):
    with open_store(runs, read_only=True) as store:
        s = whatif(store, _by_name(store, "llama_prefill_b128")).scalars
    assert s["observed_source"].startswith("unprofiled")
    assert s["predicted_speedup"] <= 1.05, s
    assert s["predicted_ns"] >= s["gpu_work_ns"]


def test_cli_json_and_keys_documented(runs):
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    res = CliRunner().invoke(cli, ["analyze", "whatif", "small_kernels_eager", "-o", "twin=small_kernels_graph",
                                   "--format", "json", "--db", str(runs)])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert type(got["predicted_ns"]) is int and type(got["naive_ns"]) is int
    missing = sorted(k for k in set(got) | set(got["trust"]) if k not in documented)
    assert not missing, f"undocumented whatif keys: {missing}"


def test_long_gpu_idle_stretches_are_counted_and_said(store, tmp_path):
    """Times in us. Three 10 us kernels launched 5 ms apart (host work between them, as in a whole script
    profiled without steps): the GPU idles [20, 5010] and [5020, 10010], 4,990 us each, both >= 1 ms, so
    long_idle_ns = 9,980,000 of traced_ns = 0 -> 10,020 us, which the free-launch replay removes; a warning says
    so. The same kernels launched 20 us apart leave only short gaps: 0 and no warning."""
    def events(step_us):
        return [e for i in range(3) for e in (rt("cudaLaunchKernel", i * step_us, 2, i + 1, 0),
                                             kern(f"k{i}", i * step_us + 10, 10, i + 1, 0))]
    s_far = whatif(store, _ingest(store, tmp_path, "far", events(5000)))
    assert (s_far.scalars["long_idle_ns"], s_far.scalars["traced_ns"]) == (9_980_000, 10_020_000)
    (said,) = [w for w in s_far.warnings if "stretches of 1 ms or more" in w]
    assert said.startswith("10.0 ms of the traced scope (100%) are 2 stretches")
    near = whatif(store, _ingest(store, tmp_path, "near", events(20)))
    assert near.scalars["long_idle_ns"] == 0
    assert not any("stretches of 1 ms" in w for w in near.warnings)


def test_a_cpu_only_trace_gets_one_warning(tmp_path):
    """torch.profiler's defaults on a CPU: 'nothing to predict', and not also how the residual gap would have been
    chosen (the no-prior warning, which told a CPU-only trace to store a CUDA graph replay of its GPU)."""
    import edge_traces

    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.store import open_store

    with open_store(empty(tmp_path / "c.duckdb")) as store:
        (res,) = ingest_paths(store, [edge_traces.cpu_only(tmp_path)])
        assert res.status == "ingested", res.message
        r = whatif(store, res.trace_id)
    assert r.warnings == ["no GPU activity with a launch call in scope: nothing to predict."]
