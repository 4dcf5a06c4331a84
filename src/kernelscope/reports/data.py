"""Binned series the dashboard and the report draw and no analysis returns: the bin width for a span, the
query itself in ``storage.series``."""

from __future__ import annotations

import pandas as pd

from ..storage import series
from .figures import MAX_BINS, bin_width_ns


def busy_bins(store, trace_id: str, max_bins: int = MAX_BINS) -> tuple[pd.DataFrame, int, int]:
    """Busy ns per (device, bin) over the trace's GPU span, binned in DuckDB.

    Returns ``(bins, span_ns, width_ns)``: ``bins`` has columns device, bin, busy_ns (bins without busy
    time are absent); the span runs from the first GPU activity start ``t0`` to the last end; bins are
    ``width_ns`` wide from ``t0`` (at most ``max_bins`` of them). A trace without GPU activity gives an
    empty frame and span 0.
    """
    t0, t1 = series.gpu_span(store, trace_id)
    if pd.isna(t0) or pd.isna(t1) or int(t1) <= int(t0):
        return pd.DataFrame({"device": [], "bin": [], "busy_ns": []}, dtype="int64"), 0, 1
    t0, span_ns = int(t0), int(t1) - int(t0)
    width = bin_width_ns(span_ns, max_bins)
    bins = series.busy_bins(store, trace_id, t0, width)
    return bins, span_ns, width
