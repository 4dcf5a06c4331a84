"""`kernelscope summary --json` equals the independent stdlib reference (tests/reference_summary.py), to the
nanosecond, on every trace file the repo ships; plus the summary's own invariants."""

from __future__ import annotations

import json
import re

import pytest
import stores
from click.testing import CliRunner
from conftest import ROOT, kineto_event, trace_files, write_kineto
from reference_summary import reference_summary

from kernelscope.cli import cli

FILES = trace_files()
EXACT_KEYS = ["kernels", "memcpys", "memsets", "launches", "cpu_ops", "kernel_time_ns", "busy_ns",
              "gpu_span_ns", "idle_ns", "latency_ns", "exposed_host_ns"]
REQUIRED_KEYS = EXACT_KEYS + ["top_kernels", "top_operators", "top_leaf_operators", "trust", "phases"]


_SAID: dict = {}  # path -> what `kernelscope summary --json` printed for it (the store is read-only)


def _summary(session_store, path) -> dict:
    """`kernelscope summary ID --json` of the file's trace, run once per file for the module's tests."""
    if path not in _SAID:
        _SAID[path] = _run_summary(session_store, path)
    return json.loads(_SAID[path])


def _run_summary(session_store, path) -> str:
    if path in session_store.failures:
        try:
            reference_summary(str(path))
        except (ValueError, KeyError, EOFError, OSError) as exc:
            pytest.skip(f"not a readable trace for the reference either ({type(exc).__name__}): "
                        f"{session_store.failures[path]}")
        pytest.fail(f"ingest refused a trace the reference reads: {session_store.failures[path]}")
    res = CliRunner().invoke(cli, ["summary", session_store.ids[path], "--json", "--db", str(session_store.db)])
    assert res.exit_code == 0, res.output + (res.stderr or "")
    return res.stdout


def test_there_are_traces_to_check(session_store):
    """The comparison below must not pass by having nothing to compare."""
    assert FILES, "no .json/.json.gz traces under sample_traces/ or tests/data/"
    assert session_store.ids, f"no trace could be ingested: {session_store.failures}"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_summary_equals_reference(session_store, path):
    got = _summary(session_store, path)
    want = reference_summary(str(path))
    for key in REQUIRED_KEYS:
        assert key in got, key
    assert {k: got[k] for k in EXACT_KEYS} == {k: want[k] for k in EXACT_KEYS}
    # ints stay ints in JSON (never 1.5e+18-style floats)
    for key in EXACT_KEYS:
        assert got[key] is None or type(got[key]) is int, (key, got[key])
    assert got["trust"]["kernels_with_launch"]["count"] == want["kernels_with_launch"]
    assert [(k["name"], k["count"], k["total_ns"]) for k in got["top_kernels"]] == [
        (k["name"], k["count"], k["total_ns"]) for k in want["top_kernels"]
    ]


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_summary_invariants(session_store, path):
    got = _summary(session_store, path)
    if got["gpu_span_ns"] is not None:
        assert 0 <= got["busy_ns"] <= got["gpu_span_ns"] * max(1, len(got["devices"]))
        assert got["idle_ns"] >= 0
    # operator tables rank by kernel time and never claim more than all kernels took
    for table in ("top_operators", "top_leaf_operators", "top_kernels"):
        col = "total_ns" if table == "top_kernels" else "kernel_time_ns"
        times = [row[col] for row in got[table]]
        assert times == sorted(times, reverse=True)
        assert sum(times) <= got["kernel_time_ns"]
        assert len(times) <= 10
    trust = got["trust"]
    assert trust["kernels_with_launch"]["count"] <= got["kernels"]
    # top-level operators partition kernel time: attributed + unattributed = all kernels
    if got["trust"]["ops_with_kernels"]["top_level_ops"] <= 10:
        attributed = sum(r["kernel_time_ns"] for r in got["top_operators"])
        assert attributed + trust["kernel_time_without_operator_ns"] == got["kernel_time_ns"]


def test_every_summary_key_is_documented(session_store):
    """Each key the summary emits (top level, trust, tables' columns) is named in docs/metrics.md."""
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    path = next(iter(session_store.ids))
    got = _summary(session_store, path)
    keys = set(got) | set(got["trust"]) | {f"phases.{k}" for k in got["phases"]}
    for table in ("top_kernels", "top_operators", "top_leaf_operators", "devices"):
        for row in got[table][:1]:
            keys |= set(row)
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"undocumented summary keys: {missing}"


def _ingest_and_summarise(tmp_path, path) -> dict:
    db = str(stores.empty(tmp_path / "edge.duckdb"))
    runner = CliRunner()
    res = runner.invoke(cli, ["ingest", str(path), "--db", db])
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(cli, ["summary", path.name, "--json", "--db", db])
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_two_devices_overlap_and_skew(tmp_path):
    """Device 0 runs k1 [10, 14] us and k2 [12, 13] us on one stream (a same-stream overlap); device 1 runs
    k3 [20, 25] us, which starts 1 us before its launch call (clock skew)."""
    ev = kineto_event
    path = write_kineto(tmp_path / "two_devices.json", [
        ev("cpu_op", "aten::foo", 1.0, 29.0, **{"External id": 1}),
        ev("cuda_runtime", "cudaLaunchKernel", 2.0, 1.0, correlation=1, **{"External id": 1}),
        ev("cuda_runtime", "cudaLaunchKernel", 4.0, 1.0, correlation=2, **{"External id": 1}),
        ev("cuda_runtime", "cudaLaunchKernel", 21.0, 1.0, correlation=3, **{"External id": 1}),
        ev("kernel", "k1", 10.0, 4.0, pid=0, tid=7, device=0, stream=7, correlation=1),
        ev("kernel", "k2", 12.0, 1.0, pid=0, tid=7, device=0, stream=7, correlation=2),
        ev("kernel", "k3", 20.0, 5.0, pid=1, tid=9, device=1, stream=9, correlation=3),
    ])
    got = _ingest_and_summarise(tmp_path, path)
    want = reference_summary(str(path))
    assert {k: got[k] for k in EXACT_KEYS} == {k: want[k] for k in EXACT_KEYS}
    assert (got["kernel_time_ns"], got["busy_ns"], got["gpu_span_ns"], got["idle_ns"]) == (10000, 9000, 15000, 0)
    assert (got["latency_ns"], got["exposed_host_ns"]) == (24000, 15000)
    assert got["per_device"] == {
        "0": {"kernels": 2, "kernel_time_ns": 5000, "busy_ns": 4000, "gpu_span_ns": 4000, "idle_ns": 0},
        "1": {"kernels": 1, "kernel_time_ns": 5000, "busy_ns": 5000, "gpu_span_ns": 5000, "idle_ns": 0},
    }
    assert "sums over devices" in got["totals"]
    assert got["trust"]["same_stream_overlaps"] == 1
    assert got["trust"]["negative_launch_times"] == 1
    assert any("before their launch call" in w for w in got["warnings"])


def test_gpu_work_before_the_first_operator_is_not_subtracted(tmp_path):
    """Kernels queued before the profiler's window opened run before the first top-level operator (TraceLens'
    H100 Qwen1.5 trace: exposed_host_ns was -10.6 ms). k0 [0, 100] us has no launch; aten::foo [200, 210] us
    launches k1 [220, 230] us: latency 30 us, busy inside it 10 us, exposed host 20 us (was 30 - 110 = -80)."""
    ev = kineto_event
    path = write_kineto(tmp_path / "early.json", [
        ev("kernel", "k0", 0.0, 100.0, pid=0, tid=7, device=0, stream=7, correlation=99),
        ev("cpu_op", "aten::foo", 200.0, 10.0, **{"External id": 1}),
        ev("cuda_runtime", "cudaLaunchKernel", 201.0, 2.0, correlation=1, **{"External id": 1}),
        ev("kernel", "k1", 220.0, 10.0, pid=0, tid=7, device=0, stream=7, correlation=1),
    ])
    got = _ingest_and_summarise(tmp_path, path)
    assert (got["busy_ns"], got["latency_ns"], got["exposed_host_ns"]) == (110_000, 30_000, 20_000)
    want = reference_summary(str(path))
    assert {k: got[k] for k in EXACT_KEYS} == {k: want[k] for k in EXACT_KEYS}


def test_cpu_only_trace_has_null_spans(tmp_path):
    path = write_kineto(tmp_path / "cpu_only.json", [kineto_event("cpu_op", "aten::add", 1.0, 2.0)])
    got = _ingest_and_summarise(tmp_path, path)
    assert (got["kernels"], got["cpu_ops"], got["busy_ns"], got["kernel_time_ns"]) == (0, 1, 0, 0)
    assert got["gpu_span_ns"] is got["idle_ns"] is got["latency_ns"] is got["exposed_host_ns"] is None
    assert got["trust"]["kernels_with_launch"]["pct"] is None
    assert {k: got[k] for k in EXACT_KEYS} == {k: v for k, v in reference_summary(str(path)).items()
                                               if k in EXACT_KEYS}


def test_a_trace_with_no_pytorch_event_says_it_may_not_be_one(tmp_path):
    """A Chrome trace of another program (TensorFlow's trace-viewer demo data has only PERF/SAMPLE events)
    ingests as an empty Kineto trace: the summary says it may not be a torch.profiler trace."""
    ev = kineto_event
    path = write_kineto(tmp_path / "tf.json", [ev("PERF", "step", 1.0, 5.0), ev("SAMPLE", "x", 2.0, 1.0)])
    got = _ingest_and_summarise(tmp_path, path)
    assert any("may not be a torch.profiler trace" in w for w in got["warnings"])


def test_launches_without_kernel_and_stream_capture(tmp_path):
    """Kernel launch calls that launched nothing: counted, and those inside stream capture (the thread's last
    Begin/EndCapture call before them was a begin) said to be recorded into a graph (a vLLM capture trace)."""
    from storage.kineto_build import kern, op, rt, write_trace

    from kernelscope.analysis.summary import summary
    from kernelscope.reports.overview import trust_sentences
    from kernelscope.storage.ingest import ingest_file
    from kernelscope.storage.store import open_store

    ev = [op("aten::mm", 10, 100, 1),
          rt("cudaStreamBeginCapture", 12, 1, 90, 1),
          rt("cudaLaunchKernel", 20, 2, 2, 1), rt("cudaLaunchKernel", 30, 2, 3, 1),  # captured: no kernel
          rt("cudaLaunchKernel", 25, 2, 6, 1, tid=2),  # another thread, no capture open there
          rt("cudaStreamEndCapture", 40, 1, 91, 1),
          rt("cudaLaunchKernel", 50, 2, 4, 1), kern("k", 200, 5, 4, 1),  # ran
          rt("cudaLaunchKernel", 60, 2, 5, 1)]  # after the capture ended: not captured, no kernel
    with open_store(stores.empty(tmp_path / "s.duckdb")) as store:
        res = ingest_file(store, write_trace(tmp_path / "t.json", ev))
        s = summary(store, res.trace_id).to_dict()
    assert s["trust"]["launches_without_kernel"] == {"count": 4, "in_capture": 2}
    text = " ".join(trust_sentences(s["trust"], s))
    assert "4 kernel launch calls launched no kernel in the trace; 2 of them inside stream capture" in text
    assert "(the rest: kernels dropped by the profiler or run after it stopped)" in text
