"""Energy and power of one trace from its NVML telemetry (docs/metrics.md, "Energy", is the canonical text).

- Time: a telemetry sample at host time ``ts_ns`` lies at trace time ``ts_ns - traces.clock_offset_ns``
  (the offset is telemetry clock minus trace clock, measured at ingest; unknown offset: 0, with a warning).
- **Change points** of the cumulative energy counter (``energy_mj``): samples whose value differs from the
  previous sample. The counter ``E(t)`` is linear between consecutive change points. **Counter step**
  ``counter_step_ns`` = median time between change points. Energy of a window ``[a, b]`` (mJ) =
  ``E(b) - E(a)``; ``null`` when the window is shorter than ``MIN_STEPS`` (10) counter steps or not inside
  the first..last change point. ``energy_source`` = ``energy_counter``.
- **Fallback** (fewer than 2 counter change points): integrated power, trapezoids over ``power_mw``
  samples; the step is then the median time between changes of ``power_mw``; ``energy_source`` =
  ``integrated_power``.
- Windows: the trace (``traces.start_ns..end_ns``), each phase (step and user annotations). Per labelled
  unit: ``tokens`` label, else ``batch`` x ``seq``; ``energy_per_unit_mj`` = ``energy_per_iteration_mj`` /
  units, where ``energy_per_iteration_mj`` comes from the un-profiled energy loop (``timings`` kind
  ``energy_loop``), one iteration being the call that the labels describe.
- ``j_per_tflop``: joules per 10^12 FLOPs, energy per iteration / FLOPs per iteration, FLOPs per iteration
  = the bandwidth analysis' FLOP total / the trace's iterations (``ProfilerStep`` phases that launched GPU
  work: storage/queries.iterations_sql; 1 when none); null without
  either, with a warning.
- Power while busy / idle: telemetry samples inside the trace window whose trace time falls inside /
  outside a busy interval of the device; power = ``power_instant_mw`` when present, else ``power_mw``;
  mean and peak in W; null (with ``reason``) when the window is shorter than ``MIN_STEPS`` steps of that
  reading (the median time between its changes), as for energy: the samples would repeat stale values.
- ``energy_time_share`` (per leaf operator): kernel time of the operator x mean power over the busy
  samples (else all samples), in mJ. It is a time share, not the operator's energy.
- Clocks: min/median/max SM and memory clock (MHz) over samples in the window (all samples when none);
  ``throttle`` table: share of those samples with each NVML clock-event reason bit set.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..errors import KernelscopeError
from ..storage.queries import iterations_sql
from ..units import FLOP_PER_TFLOP, MJ_PER_J, MW_PER_W, NS_PER_S, mw_to_w, ns_to_ms, ns_to_s
from . import cache
from .result import Result, int_or_none

DESCRIPTION = "Energy per trace/phase/unit (counter or integrated power), J/TFLOP, busy/idle power, clocks, throttling."
MIN_STEPS = 10

THROTTLE_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}

_SQL_TEL = """
SELECT coalesce(device_index, 0) AS device, ts_ns - $off AS t_ns, power_mw, power_instant_mw, energy_mj,
       sm_clock_mhz, mem_clock_mhz, throttle_reasons
FROM telemetry WHERE trace_id = $t ORDER BY device, ts_ns
"""

# Change points of a column per device: rows whose value differs from the previous non-null value.
_SQL_CHANGES = """
WITH s AS (
  SELECT coalesce(device_index, 0) AS device, ts_ns - $off AS t_ns, {col} AS v,
         lag({col}) OVER (PARTITION BY coalesce(device_index, 0) ORDER BY ts_ns) AS prev
  FROM telemetry WHERE trace_id = $t AND {col} IS NOT NULL
)
SELECT device, t_ns, v FROM s WHERE prev IS NOT NULL AND v <> prev ORDER BY device, t_ns
"""

_SQL_BUSY_SAMPLES = """
WITH s AS (
  SELECT coalesce(device_index, 0) AS device, ts_ns - $off AS t_ns,
         coalesce(power_instant_mw, power_mw) AS p_mw
  FROM telemetry WHERE trace_id = $t AND coalesce(power_instant_mw, power_mw) IS NOT NULL
)
-- a device's busy intervals are disjoint (their union), so the one starting last at or before the sample
-- (an ASOF join) is the only one that can hold it
SELECT s.device, s.t_ns, s.p_mw, coalesce(s.t_ns < b.end_ns, false) AS busy
FROM s ASOF LEFT JOIN (SELECT device, start_ns, end_ns FROM busy_intervals WHERE trace_id = $t) b
  ON b.device = s.device AND s.t_ns >= b.start_ns
WHERE s.t_ns >= $a AND s.t_ns <= $b
"""

_SQL_OPS = """
SELECT name, CAST(sum(kernel_time_ns) AS BIGINT) AS kernel_time_ns
FROM op_kernels WHERE trace_id = $t AND link = 'leaf' AND has_op  -- per leaf instance, stored at ingest
GROUP BY name ORDER BY kernel_time_ns DESC, name
"""


def _median_step(ch: pd.DataFrame) -> int | None:
    if len(ch) < 2:
        return None
    return int(ch["t_ns"].diff().dropna().median())


def _counter_at(ch: pd.DataFrame, t: int) -> float | None:
    """E(t) by linear interpolation between change points; None outside them."""
    ts, vs = ch["t_ns"].to_numpy(), ch["v"].to_numpy(dtype="float64")
    if not len(ts) or t < ts[0] or t > ts[-1]:
        return None
    i = int(ts.searchsorted(t, side="right")) - 1
    if i >= len(ts) - 1:
        return float(vs[-1])
    return float(vs[i] + (vs[i + 1] - vs[i]) * (t - ts[i]) / (ts[i + 1] - ts[i]))


def _integrated_mj(samples: pd.DataFrame, a: int, b: int) -> float | None:
    """Trapezoid integral of power (mW) over [a, b] from samples covering it; mJ. None when not covered."""
    s = samples.dropna(subset=["power_mw"])
    ts, ps = s["t_ns"].to_numpy(), s["power_mw"].to_numpy(dtype="float64")
    if len(ts) < 2 or a < ts[0] or b > ts[-1]:
        return None
    import numpy as np

    grid = np.unique(np.concatenate([[a, b], ts[(ts > a) & (ts < b)]]))
    p = np.interp(grid, ts, ps)
    return float(np.sum((p[1:] + p[:-1]) / 2 * np.diff(grid)) / NS_PER_S)  # mW x s = mJ


def power(store, trace_id: str) -> Result:
    """Energy and power of one trace (definitions in the module docstring)."""
    t = trace_id
    warnings: list[str] = []
    tr = store.query("SELECT start_ns, end_ns, clock_offset_ns FROM traces WHERE trace_id = $t", {"t": t})
    no_window = pd.isna(tr["start_ns"].iloc[0]) or pd.isna(tr["end_ns"].iloc[0])  # no timed event at all
    if no_window:
        a = b = 0  # an empty window: no sample falls in it
        warnings.append("the trace has no timed events: no trace window, so no trace energy.")
    else:
        a, b = int(tr["start_ns"].iloc[0]), int(tr["end_ns"].iloc[0])
    off = tr["clock_offset_ns"].iloc[0]
    p = {"t": t, "off": 0 if pd.isna(off) else int(off)}
    tel = store.query(_SQL_TEL, p)
    if pd.isna(off) and len(tel):  # (without telemetry there are no clocks to align)
        warnings.append("the trace has no clock-sync marker: telemetry and trace clocks taken as equal.")
    off = p["off"]
    devices = sorted(tel["device"].unique().tolist())
    if len(devices) > 1:
        warnings.append(f"telemetry from {len(devices)} devices; energy is reported for device {devices[0]}.")
    dev = devices[0] if devices else 0
    tel = tel[tel.device == dev]
    ech = store.query(_SQL_CHANGES.format(col="energy_mj"), p)
    ech = ech[ech.device == dev]
    pch = store.query(_SQL_CHANGES.format(col="power_mw"), p)
    pch = pch[pch.device == dev]
    if len(ech) >= 2:
        source, step = "energy_counter", _median_step(ech)

        def energy(x, y):
            if step is None or y - x < MIN_STEPS * step:
                return None
            ea, eb = _counter_at(ech, x), _counter_at(ech, y)
            return None if ea is None or eb is None else eb - ea
    elif tel["power_mw"].notna().sum() >= 2:
        source, step = "integrated_power", _median_step(pch)

        def energy(x, y):
            if step is None or y - x < MIN_STEPS * step:
                return None
            return _integrated_mj(tel, x, y)
    else:
        source, step = None, None

        def energy(x, y):
            return None
        warnings.append("no energy counter or power samples: energies are null." if len(tel) else
                        "no GPU telemetry is stored with this trace (torch.profiler records none): energies are "
                        "null; profile with `kernelscope profile`, which samples NVML power, energy and clocks "
                        "on the trace's clock.")

    trace_mj = energy(a, b) if not no_window else None
    if source and trace_mj is None and not no_window:
        warnings.append(f"the trace window ({ns_to_ms(b - a):.1f} ms) is shorter than {MIN_STEPS} counter steps "
                        f"({'?' if step is None else f'{ns_to_ms(step):.1f} ms'} each) or not covered by telemetry: "
                        "trace energy is null.")
    phases = store.query("SELECT ann_id, kind, name, start_ns, end_ns, dur_ns FROM annotations "
                         "WHERE trace_id = $t AND kind IN ('step', 'user') AND name NOT LIKE 'kernelscope::%' "
                         "ORDER BY start_ns", {"t": t})
    phases["energy_mj"] = [energy(int(x), int(y)) for x, y in zip(phases["start_ns"], phases["end_ns"])]

    # un-profiled energy loop, units, FLOPs
    loop = store.query("SELECT iteration, dur_ns, energy_mj FROM timings WHERE trace_id = $t "
                       "AND kind = 'energy_loop' AND energy_mj IS NOT NULL", {"t": t})
    per_iter = float(loop["energy_mj"].iloc[0]) if len(loop) else None
    labels = store.query("SELECT key, value_num FROM labels WHERE trace_id = $t AND value_num IS NOT NULL",
                         {"t": t})
    lab = dict(zip(labels["key"], labels["value_num"]))
    unit, units = None, None
    if "tokens" in lab:
        unit, units = "token", lab["tokens"]
    elif "batch" in lab and "seq" in lab:
        unit, units = "batch*seq", lab["batch"] * lab["seq"]
    per_unit = per_iter / units if per_iter is not None and units else None
    flops, j_tflop = _flops(store, t, warnings), None
    steps = int(store.query(f"SELECT {iterations_sql('$t')} AS n", {"t": t})["n"].iloc[0])
    if flops and per_iter is not None:
        j_tflop = (per_iter / MJ_PER_J) / (flops / max(steps, 1) / FLOP_PER_TFLOP)

    # busy / idle power
    bs = store.query(_SQL_BUSY_SAMPLES, dict(p, a=a, b=b))
    bs = bs[bs.device == dev]

    # NVML power readings are refreshed in steps too (about 100 ms on H100/H200, instant power included):
    # a window shorter than MIN_STEPS of them holds one or two stale values, not busy vs idle power.
    pcol = "power_instant_mw" if tel["power_instant_mw"].notna().any() else "power_mw"
    pstep = _median_step(store.query(_SQL_CHANGES.format(col=pcol), p).query("device == @dev"))
    if no_window:
        p_reason = "the trace has no timed events"
    elif pstep is None:
        p_reason = (f"the {pcol} reading changed fewer than twice in the telemetry, so its refresh step cannot "
                    f"be measured and the trace window's ({ns_to_ms(b - a):.1f} ms) samples repeat stale values")
    elif b - a < MIN_STEPS * pstep:
        p_reason = (f"the trace window ({ns_to_ms(b - a):.1f} ms) is shorter than {MIN_STEPS} steps of the "
                    f"{pcol} reading ({ns_to_ms(pstep):.1f} ms each): its samples repeat a few stale values")
    else:
        p_reason = None

    def stats(df):
        if not len(df):
            return {"samples": 0, "mean_w": None, "peak_w": None, "reason": "no samples"}
        if p_reason:
            return {"samples": int(len(df)), "mean_w": None, "peak_w": None, "reason": p_reason}
        return {"samples": int(len(df)), "mean_w": mw_to_w(float(df["p_mw"].mean())),
                "peak_w": mw_to_w(float(df["p_mw"].max())), "reason": None}
    busy_p, idle_p = stats(bs[bs.busy]), stats(bs[~bs.busy])
    if p_reason and len(bs):
        warnings.append(f"busy/idle power is null: {p_reason}.")
    mean_w = (busy_p["mean_w"] if busy_p["mean_w"] is not None else
              (mw_to_w(float(tel["power_mw"].mean())) if tel["power_mw"].notna().any() else None))
    ops = store.query(_SQL_OPS, {"t": t})
    ops["energy_time_share_mj"] = ((ops["kernel_time_ns"] * (mean_w * MW_PER_W) / NS_PER_S) if mean_w is not None
                                   else None)  # ns x mW / 1e9 = mJ

    # clocks and throttling over samples in the window (all when none)
    win = tel[(tel.t_ns >= a) & (tel.t_ns <= b)]
    if not win[["sm_clock_mhz", "throttle_reasons"]].notna().any().any():
        win = tel
        if len(tel):
            warnings.append("no clock samples inside the trace window: clocks and throttling use all samples.")
    clocks = {}
    for col in ("sm_clock_mhz", "mem_clock_mhz"):
        v = win[col].dropna()
        clocks[col] = None if not len(v) else {"min": int(v.min()), "median": float(v.median()), "max": int(v.max())}
    thr = win["throttle_reasons"].dropna().astype("int64")
    throttle = pd.DataFrame([{"reason": name, "bit": bit, "samples": int(((thr & bit) != 0).sum()),
                              "share": (float(((thr & bit) != 0).mean()) if len(thr) else None)}
                             for bit, name in THROTTLE_BITS.items()])

    intervals = tel["t_ns"].diff().dropna()
    scalars: dict[str, Any] = {
        "energy_source": source,
        "trace_energy_mj": trace_mj,
        "trace_window_ns": None if no_window else b - a,
        "mean_power_w": mw_to_w(trace_mj / ns_to_s(b - a)) if trace_mj is not None else None,  # mJ/s = mW
        "energy_per_iteration_mj": per_iter,
        "unit": unit,
        "units_per_iteration": units,
        "energy_per_unit_mj": per_unit,
        "flops": flops,
        "j_per_tflop": j_tflop,
        "busy_power": busy_p,
        "idle_power": idle_p,
        "clocks": clocks,
    }
    trust = {
        "telemetry_samples": int(len(tel)),
        "sample_period_ns": {"median": None if not len(intervals) else int(intervals.median()),
                             "p95": None if not len(intervals) else int(intervals.quantile(0.95)),
                             "max": None if not len(intervals) else int(intervals.max())},
        "counter_step_ns": step,
        "counter_step_mj": (float(ech["v"].diff().dropna().median()) if len(ech) >= 2 else None),
        "counter_change_points": int(len(ech)),
        "min_window_ns": None if step is None else MIN_STEPS * step,
        "clock_offset_ns": off,
        "energy_loop_iterations": None if not len(loop) else int_or_none(loop["iteration"].iloc[0]),
    }
    if per_iter is None:
        warnings.append("no un-profiled energy loop recorded: energy per iteration and per unit are null.")
    return Result(name="power", definition=__doc__.strip(), scalars=scalars,
                  tables={"phases": phases, "energy_time_share": ops, "throttle": throttle},
                  warnings=warnings, trust=trust)


def _flops(store, trace_id: str, warnings: list[str]) -> float | None:
    """The bandwidth analysis' FLOP total for the trace, read through the process's cache (analysis/cache.py:
    bandwidth runs once per trace and process, whoever asks first), or None (with a warning)."""
    try:
        res = cache.analysis(store, "bandwidth", trace_id)
    except KernelscopeError as e:
        warnings.append(f"FLOPs unknown (the bandwidth analysis failed: {e}): j_per_tflop is null.")
        return None
    v = res.scalars.get("flops")
    if v is None:
        warnings.append("the bandwidth analysis gave no FLOP total: j_per_tflop is null.")
        return None
    return float(v)
