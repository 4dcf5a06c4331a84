"""Binned time series of one trace that figures draw and no analysis returns: GPU busy time per device and
bin (from the stored busy union, ``busy_intervals``) and the NVML telemetry per device and bin.

The bin width is the caller's (``reports.figures.bin_width_ns`` picks it from the span these functions
return); bins are counted from a given start ``t0`` and computed in DuckDB, in exact integer ns.
"""

from __future__ import annotations

import pandas as pd

# Busy intervals are a union per device (disjoint), so an interval that spans several bins is split with
# generate_series and the rows produced are at most intervals + bins. Overlap of an interval with bin b:
# min(end, t0 + (b+1)*w) - max(start, t0 + b*w), exact integer ns.
_SQL_BUSY_BINS = """
WITH i AS (
  SELECT device, start_ns, end_ns,
         (start_ns - $t0) // $w AS b0,
         (end_ns - 1 - $t0) // $w AS b1
  FROM busy_intervals WHERE trace_id = $t AND end_ns > start_ns
), x AS (
  SELECT device, start_ns, end_ns, unnest(generate_series(b0, b1)) AS bin FROM i
)
SELECT device, bin,
       CAST(sum(least(end_ns, $t0 + (bin + 1) * $w) - greatest(start_ns, $t0 + bin * $w)) AS BIGINT)
         AS busy_ns
FROM x GROUP BY device, bin ORDER BY device, bin
"""

_SQL_SPAN = """
SELECT min(start_ns) AS t0, max(end_ns) AS t1 FROM gpu_activities WHERE trace_id = $t
"""

# Telemetry per (device, bin of width $w from the first sample $t0), time relative to the trace start:
# t_ns = mean sample time in the bin; power/clock/temperature means over the bin's non-null samples;
# energy = the counter's last value in the bin minus the device's first value (mJ since the first sample).
_SQL_TEL_SPAN = """
SELECT count(*) AS n, min(m.ts_ns - coalesce(t.clock_offset_ns, 0) - t.start_ns) AS t0,
       max(m.ts_ns - coalesce(t.clock_offset_ns, 0) - t.start_ns) AS t1
FROM telemetry m JOIN traces t ON t.trace_id = m.trace_id WHERE m.trace_id = $t
"""
_SQL_TEL_BINS = """
WITH s AS (
  SELECT coalesce(m.device_index, 0) AS device, m.ts_ns - coalesce(t.clock_offset_ns, 0) - t.start_ns AS t_ns,
         m.power_mw, m.power_instant_mw, m.energy_mj, m.sm_clock_mhz, m.mem_clock_mhz, m.temperature_c
  FROM telemetry m JOIN traces t ON t.trace_id = m.trace_id WHERE m.trace_id = $t
), b AS (
  SELECT *, (t_ns - $t0) // $w AS bin, min(energy_mj) OVER (PARTITION BY device) AS e0 FROM s
)
SELECT device, bin, count(*) AS samples, CAST(round(avg(t_ns)) AS BIGINT) AS t_ns,
       avg(power_mw) / 1000.0 AS power_w, avg(power_instant_mw) / 1000.0 AS power_instant_w,
       (max(energy_mj) - max(e0)) / 1000.0 AS energy_j,
       avg(sm_clock_mhz) AS sm_clock_mhz, avg(mem_clock_mhz) AS mem_clock_mhz, avg(temperature_c) AS temperature_c
FROM b GROUP BY device, bin ORDER BY device, bin
"""
_SQL_TRACE = """
SELECT t.start_ns, t.end_ns, (SELECT min(start_ns) FROM gpu_activities a WHERE a.trace_id = $t) AS gpu_t0
FROM traces t WHERE t.trace_id = $t
"""


def gpu_span(store, trace_id: str) -> tuple:
    """``(t0, t1)``: the first GPU activity start and the last end of the trace (NaN/None without any)."""
    span = store.query(_SQL_SPAN, {"t": trace_id})
    return span["t0"].iloc[0], span["t1"].iloc[0]


def busy_bins(store, trace_id: str, t0: int, width: int) -> pd.DataFrame:
    """Busy ns per (device, bin) of the trace's busy union, bins of ``width`` ns from ``t0``: columns device,
    bin, busy_ns (bins without busy time are absent), by device and bin."""
    return store.query(_SQL_BUSY_BINS, {"t": trace_id, "t0": t0, "w": width})


def has_telemetry(store, trace_id: str) -> bool:
    """Whether the trace has any telemetry sample."""
    return bool(int(store.query("SELECT count(*) AS n FROM (SELECT 1 FROM telemetry WHERE trace_id = $t "
                                "LIMIT 1)", {"t": trace_id})["n"].iloc[0]))


def telemetry_span(store, trace_id: str) -> pd.Series:
    """``n`` (telemetry samples of the trace), ``t0`` and ``t1`` (first and last sample time, ns since
    ``traces.start_ns`` on the trace's clock: ``ts_ns - clock_offset_ns``, offset 0 when unknown)."""
    return store.query(_SQL_TEL_SPAN, {"t": trace_id}).iloc[0]


def telemetry_bins(store, trace_id: str, t0: int, width: int) -> pd.DataFrame:
    """The trace's telemetry per (device, bin of ``width`` ns from ``t0``), times as in
    :func:`telemetry_span`: device, bin, samples, t_ns (mean sample time), power_w, power_instant_w,
    energy_j (counter at the bin's last sample minus the device's first reading, J), sm_clock_mhz,
    mem_clock_mhz, temperature_c (means of the non-null samples); by device and bin."""
    return store.query(_SQL_TEL_BINS, {"t": trace_id, "t0": t0, "w": width})


def trace_starts(store, trace_id: str) -> pd.Series:
    """The trace's ``start_ns`` and ``end_ns`` and ``gpu_t0`` (its first GPU activity start; NaN/None
    without any)."""
    return store.query(_SQL_TRACE, {"t": trace_id}).iloc[0]
