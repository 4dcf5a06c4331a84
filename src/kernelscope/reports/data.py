"""Queries the dashboard and the report run themselves (binned series that no analysis returns). Analyses' SQL stays in
``kernelscope.analysis``; this module only bins already-derived tables for drawing."""

from __future__ import annotations

import pandas as pd

from .figures import MAX_BINS, bin_width_ns

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


def busy_bins(store, trace_id: str, max_bins: int = MAX_BINS) -> tuple[pd.DataFrame, int, int]:
    """Busy ns per (device, bin) over the trace's GPU span, binned in DuckDB.

    Returns ``(bins, span_ns, width_ns)``: ``bins`` has columns device, bin, busy_ns (bins without busy
    time are absent); the span runs from the first GPU activity start ``t0`` to the last end; bins are
    ``width_ns`` wide from ``t0`` (at most ``max_bins`` of them). A trace without GPU activity gives an
    empty frame and span 0.
    """
    span = store.query(_SQL_SPAN, {"t": trace_id})
    t0, t1 = span["t0"].iloc[0], span["t1"].iloc[0]
    if pd.isna(t0) or pd.isna(t1) or int(t1) <= int(t0):
        return pd.DataFrame({"device": [], "bin": [], "busy_ns": []}, dtype="int64"), 0, 1
    t0, span_ns = int(t0), int(t1) - int(t0)
    width = bin_width_ns(span_ns, max_bins)
    bins = store.query(_SQL_BUSY_BINS, {"t": trace_id, "t0": t0, "w": width})
    return bins, span_ns, width
