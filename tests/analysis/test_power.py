"""power analysis: an energy window from a synthetic counter (hand computed), the null case, busy/idle power."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from storage.kineto_build import BASE, kern, op, rt, write_trace
from stores import empty

from kernelscope.analysis.power import power
from kernelscope.storage.ingest import ingest_run
from kernelscope.storage.store import open_store

MS = 1_000_000


def _run(tmp_path, store, trace_ms: int, with_energy: bool = True, power_changes: bool = False):
    """A trace from 0 to ``trace_ms`` ms (an annotation ProfilerStep#1 over it), one kernel [1, 3] ms.
    Telemetry clock = trace clock + 5 ms (clock marker 'kernelscope::clock_sync <epoch>' at trace 0.5 ms
    says epoch BASE + 0.5 ms + 5 ms). Counter: samples every 10 ms from trace time -20 ms, value steps by
    100 mJ every 20 ms (changes at even samples) -> 5 W; power_mw 5000 busy-agnostic (with
    ``power_changes``: 5000 at even samples, 5001 at odd ones, so the reading changes every 10 ms)."""
    run = tmp_path / f"run{trace_ms}{with_energy}{power_changes}"
    run.mkdir()
    us = trace_ms * 1000
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100, "tid": 100, "ts": 0,
         "dur": us, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": f"kernelscope::clock_sync {BASE + 500_000 + 5 * MS}",
         "pid": 100, "tid": 100, "ts": 500, "dur": 1, "args": {}},
        op("aten::mul", 600, 10, 1), rt("cudaLaunchKernel", 601, 2, 1, 1),
        kern("elementwise_kernel", 1000, 2000, 1, 1),
        op("aten::add", us - 10, 9, 2),
    ]
    write_trace(run / "trace.json", ev)
    ts = [BASE + 5 * MS + (k * 10 - 20) * MS for k in range(trace_ms // 10 + 5)]
    energy = [1000 + 100 * (k // 2) for k in range(len(ts))]
    power_mw = [5000 + k % 2 for k in range(len(ts))] if power_changes else [5000] * len(ts)
    cols = {"device_uuid": ["GPU-x"] * len(ts), "device_index": [0] * len(ts), "ts_ns": ts,
            "power_mw": power_mw, "sm_clock_mhz": [1980] * len(ts),
            "throttle_reasons": [4] * len(ts)}
    if with_energy:
        cols["energy_mj"] = energy
    pq.write_table(pa.table(cols), run / "telemetry.parquet")
    (run / "run.json").write_text(json.dumps({
        "name": "p", "labels": {"tokens": "50"},
        "timings": [{"kind": "energy_loop", "iteration": 100, "dur_ns": 2 * MS, "energy_mj": 10.0}]}))
    res = ingest_run(store, run)
    assert res.status == "ingested", res.message
    return res.trace_id


@pytest.fixture
def store(tmp_path):
    with open_store(empty(tmp_path / "p.duckdb")) as s:
        yield s


def test_energy_window_from_counter(store, tmp_path):
    tid = _run(tmp_path, store, 400)
    d = power(store, tid).to_dict()
    # Counter changes every 20 ms by 100 mJ -> step 20 ms, 5 mJ/ms; window = trace 0..400 ms
    # (the trace's first event at 0, last end at 400 ms) = 20 steps >= 10: 400 ms x 5 mJ/ms = 2000 mJ.
    assert d["energy_source"] == "energy_counter"
    assert d["trust"]["counter_step_ns"] == 20 * MS and d["trust"]["counter_step_mj"] == 100
    assert d["trace_energy_mj"] == pytest.approx(2000.0)
    assert d["mean_power_w"] == pytest.approx(5.0)
    assert d["trust"]["sample_period_ns"]["median"] == 10 * MS
    ph = {r["name"]: r["energy_mj"] for r in d["phases"]}
    assert ph["ProfilerStep#1"] == pytest.approx(2000.0)
    # per unit: energy loop 10 mJ per iteration / 50 tokens
    assert d["unit"] == "token" and d["energy_per_unit_mj"] == pytest.approx(0.2)
    # throttle bit 0x4 (sw power cap) set on every sample
    thr = {r["reason"]: r["share"] for r in d["throttle"]}
    assert thr["sw_power_cap"] == 1.0 and thr["gpu_idle"] == 0.0


def test_short_window_is_null(store, tmp_path):
    tid = _run(tmp_path, store, 100)  # 100 ms = 5 counter steps < 10
    d = power(store, tid).to_dict()
    assert d["energy_source"] == "energy_counter"
    assert d["trace_energy_mj"] is None and d["mean_power_w"] is None
    assert any("shorter than 10 counter steps" in w for w in d["warnings"])


def test_integrated_power_fallback_and_busy_samples(store, tmp_path):
    tid = _run(tmp_path, store, 400, with_energy=False)
    d = power(store, tid).to_dict()
    # power_mw never changes -> no power step can be detected -> null even in the fallback
    assert d["energy_source"] == "integrated_power" and d["trace_energy_mj"] is None
    # samples inside the trace at trace times 0, 10, ... 400 ms; the kernel [1, 3] ms holds none -> all idle
    assert d["busy_power"]["samples"] == 0 and d["idle_power"]["samples"] == 41
    # ... and for the same reason no idle power: 41 samples of one value that never changes (stale or not,
    # nothing tells), so the mean is null with the reason, as for energy (METRICS.md window rule)
    # says that, not a step it could not measure ("shorter than 10 steps of the reading (? each)" before)
    assert d["idle_power"]["mean_w"] is None and d["idle_power"]["reason"] == (
        "the power_mw reading changed fewer than twice in the telemetry, so its refresh step cannot be measured "
        "and the trace window's (400.0 ms) samples repeat stale values")


def test_busy_idle_power_when_the_reading_moves(store, tmp_path):
    """power_mw changes every sample (10 ms steps): 400 ms = 40 steps >= 10, so idle power is the mean of
    the 41 samples in the window. Samples k = 2..42 (trace times 0..400 ms): 21 even k at 5000 mW and
    20 odd k at 5001 mW -> (21 x 5000 + 20 x 5001) / 41 = 5000.4878 mW; peak 5001 mW."""
    tid = _run(tmp_path, store, 400, with_energy=False, power_changes=True)
    d = power(store, tid).to_dict()
    assert d["idle_power"]["samples"] == 41 and d["idle_power"]["reason"] is None
    assert d["idle_power"]["mean_w"] == pytest.approx((21 * 5000 + 20 * 5001) / 41 / 1e3)
    assert d["idle_power"]["peak_w"] == pytest.approx(5.001)
    assert d["busy_power"]["mean_w"] is None and d["busy_power"]["reason"] == "no samples"
    # a 100 ms window is 10 steps of 10 ms: still enough
    d = power(store, _run(tmp_path, store, 100, with_energy=False, power_changes=True)).to_dict()
    assert d["idle_power"]["mean_w"] is not None


def test_a_trace_without_telemetry_says_how_to_record_it(session_store):
    """torch.profiler's own traces carry no telemetry: power says so and how to get it, without a warning about
    aligning telemetry clocks that do not exist."""
    from kernelscope.analysis.power import power
    from kernelscope.storage.store import open_store

    tid = next(t for p, t in session_store.ids.items() if p.name == "probe_train.json.gz")
    with open_store(session_store.db, read_only=True) as store:
        r = power(store, tid)
    assert r.trust["telemetry_samples"] == 0
    assert any("no GPU telemetry is stored with this trace" in w and "kernelscope profile" in w for w in r.warnings)
    assert not any("clock-sync marker" in w for w in r.warnings)
    # the text form says why before its tables (they were 120 lines of nulls with the reason after them)
    from click.testing import CliRunner

    from kernelscope.cli import cli

    res = CliRunner().invoke(cli, ["analyze", "power", tid, "--db", str(session_store.db)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "power" and lines[1].startswith("warning: no GPU telemetry is stored with this trace")
    assert len([x for x in lines if x.startswith("warning: ")]) == len(r.warnings)
    assert all(x.startswith("warning: ") for x in lines[1:1 + len(r.warnings)])


def test_phase_energies_too_short_are_said_once_under_the_table():
    """ConvNeXt on an H100: 12 steps of 0.1-8.5 ms each read 'n/a: the window (7.3 ms) is shorter than 10 counter
    steps (10 × 100.0 ms = 1,000.0 ms)' in its cell. Cells read n/a; one sentence under the table says why, with
    the range of durations; a phase outside the telemetry gets its own sentence."""
    import pandas as pd

    from kernelscope.analysis.result import Result
    from kernelscope.reports.power import phase_na_text, phase_rows

    ms = 1_000_000
    phases = pd.DataFrame({"name": ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2", "tail"],
                           "kind": ["step", "step", "step", "user"],
                           "dur_ns": [4377 * ms, 7251 * ms // 1000, 99 * ms // 1000, 2000 * ms],
                           "energy_mj": [588728.9, None, None, None]})
    r = Result(name="power", definition="", tables={"phases": phases},
               scalars={"energy_source": "energy_counter"},
               trust={"min_window_ns": 1000 * ms, "counter_step_ns": 100 * ms})
    assert list(phase_rows(r)["energy (mJ)"]) == ["588,728.9", "n/a", "n/a", "n/a"]
    assert phase_na_text(r) == (
        "n/a: 2 phases of 0.1-7.3 ms, shorter than 10 counter steps (10 × 100.0 ms = 1,000.0 ms), too short to read "
        "the energy counter over. n/a: 1 phase: the window is not inside the telemetry's first..last counter change.")
    phases["energy_mj"] = 1.0
    assert phase_na_text(r) is None
