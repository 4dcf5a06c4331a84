"""The Timeline's data for drawing (dashboard page, Ranks page's aligned view, Perfetto export): lanes in
drawing order with their labels, busy bins at any zoom, the selection's bins, per-process caches. Every
query is a function of ``storage.timeline``, ``storage.run_timeline``, ``storage.chrome_trace`` and
``storage.operators`` (re-exported here under the names the pages use); this module holds no SQL.

Times are int64 ns since the Unix epoch, as stored; a *window* is ``[a, b)``. The drawing's x axis is ms
since the trace's first event (``traces.start_ns``, the *origin*). Lanes are keyed ``(src, k1, k2, k3)``
(``storage.timeline`` lists them).

**Busy per bin.** For each lane, ``busy_ns`` of bin ``[a + i*w, a + (i+1)*w)`` is the summed time of the
lane's intervals inside the bin, capped at the bin's length (exact integer ns). For a lane whose intervals
do not overlap (CPU operators of one depth on one thread, a thread's API calls, a stream without
same-stream overlap) that is the length of their union; where they overlap (nested user ranges,
same-stream overlap) it can exceed the union inside a bin but never the bin. No per-lane union is taken:
on a 1M-kernel trace the window function doubled the cost of binning.

Zoomed far out the binning reads a per-process cache of ``BASE_BINS`` base bins over the whole trace
(built once per trace with the same query) and sums groups of adjacent base bins; bins are then aligned to
the base grid, and for non-overlapping lanes the sums equal the direct query's exactly. Narrower windows
are binned directly in DuckDB.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

# the per-process cache shared with the other pages and the report
from ..analysis.cache import cached
from ..analysis.comm import run_traces
from ..errors import UsageError
from ..storage import operators as _ops
from ..storage import run_timeline as _rt
from ..storage import timeline as _tl
from ..storage.chrome_trace import EXPORT_LIMIT, chrome_trace, chrome_trace_text
from ..storage.run_timeline import instance_window, run_count, run_events
from ..storage.timeline import (
    ANN_KINDS,
    LANE_COLUMNS,
    TELEMETRY_COLUMNS,
    count_events,
    event_detail,
    event_details,
    event_selection,
    events,
    find_event,
    selection,
    telemetry,
    thread_names,
    trace_info,
    window_matches,
)

__all__ = ["ANN_KINDS", "BASE_BINS", "EVENT_LIMIT", "EXPORT_LIMIT", "LANE_COLUMNS", "NAME_LIMIT", "TELEMETRY_COLUMNS",
           "bin_sql_query", "binned", "cached", "chrome_trace", "chrome_trace_text", "count_events", "event_detail",
           "event_details", "event_selection", "events", "find_event", "instance_window", "lane_label", "lanes",
           "op_cpu_times", "op_kernels", "run_binned", "run_count", "run_events", "run_info", "run_lanes",
           "selection", "selection_bins", "telemetry", "thread_label", "thread_labels", "thread_names",
           "trace_info", "window_matches"]

#: Base bins over the whole trace kept per trace and process for zoomed-out views.
BASE_BINS = 1 << 14
#: Most events drawn one by one; a window with more is drawn binned (DESIGN.md: below ~20k events).
EVENT_LIMIT = 20_000
#: Most events drawn with the full hover (``timeline_text.hover_texts``: 600-900 bytes per event in the
#: response, the text on both ends of its bar, so at most ~1.8 MB); more are drawn with a hover of the time and
#: lane only (~85 bytes per event: ~1.7 MB at EVENT_LIMIT).
NAME_LIMIT = 2_000

op_cpu_times = _ops.op_cpu_times
bin_sql_query = _tl.bins

_SRC_ORDER = {"ann": 0, "cpu": 1, "api": 1, "gpu": 3}


def lanes(store, trace_id: str, info: dict | None = None) -> pd.DataFrame:
    """Every lane of the trace in drawing order (annotations, then per thread its operator depths and its
    CUDA API calls, then GPU streams), with its event count and a ``label``. Column ``lane`` is the row
    index (0 at the top). Cached per process and trace (a stored trace never changes)."""
    info = info or trace_info(store, trace_id)
    key = ("lanes", str(getattr(store, "path", "")), trace_id, info and info["ingested_ns"])
    return cached(key, lambda: _lanes(store, trace_id))


def _lanes(store, trace_id: str) -> pd.DataFrame:
    df = _tl.lane_counts(store, trace_id)
    if df.empty:
        return pd.DataFrame(columns=LANE_COLUMNS + ["events", "label", "lane"])
    df["o"] = df["src"].map(_SRC_ORDER)
    df["k3o"] = np.where(df["src"] == "api", 1 << 30, df["k3"])  # a thread's API lane after its depths
    df = df.sort_values(["o", "k1", "k2", "k3o"]).drop(columns=["o", "k3o"]).reset_index(drop=True)
    host = df[df["src"].isin(["cpu", "api"])]
    names = thread_labels(thread_names(store, trace_id), several_processes=host["k1"].nunique() > 1)
    df["label"] = [lane_label(r.src, r.k1, r.k2, r.k3, names) for r in df.itertuples()]
    df["lane"] = range(len(df))
    return df


_KINETO_THREAD = re.compile(r"^thread (\d+) \((.*)\)$")


def thread_labels(names: pd.DataFrame, several_processes: bool = False) -> dict:
    """(pid, tid) -> the thread's name as a lane shows it, from Kineto's ``thread_name`` metadata
    (``storage.timeline.thread_names``): torch writes 'thread 742 (python3)' and, for a thread it named,
    'thread 742 (pt_autograd_0)' too; the name other than the process's wins and shows as
    'pt_autograd_0 (742)'. With ``several_processes`` the process (name and pid) goes first. Threads without
    a name are absent (:func:`thread_label` falls back to pid/tid)."""
    procs = {int(r.pid): r.name for r in names.itertuples() if r.kind == "process_name" and not pd.isna(r.pid)}
    out: dict = {}
    for (pid, tid), d in names[names["kind"] == "thread_name"].dropna(subset=["pid", "tid"]).groupby(["pid", "tid"]):
        proc = procs.get(int(pid))
        best = None
        for name in d["name"].dropna().astype(str).str.strip():
            m = _KINETO_THREAD.match(name)
            inner = m.group(2) if m else name
            if best is None or (best == proc and inner != proc):
                best = inner
        if not best:
            continue
        label = best if str(int(tid)) in best else f"{best} ({int(tid)})"
        out[(int(pid), int(tid))] = f"{proc or 'pid'} {int(pid)}: {label}" if several_processes else label
    return out


def thread_label(pid, tid, names: dict | None = None) -> str:
    """A host thread as the lanes name it: its name (:func:`thread_labels`), else 'pid/tid'."""
    return (names or {}).get((int(pid), int(tid))) or f"thread {pid}/{tid}"


def lane_label(src: str, k1, k2, k3, names: dict | None = None) -> str:
    """The text of a lane on the y axis; ``names`` from :func:`thread_labels` names the host threads."""
    if src == "ann":
        return "phases: " + (ANN_KINDS[int(k1)] if 0 <= int(k1) < len(ANN_KINDS) else "other")
    if src == "cpu":
        return f"{thread_label(k1, k2, names)} d{k3}"
    if src == "api":
        return f"{thread_label(k1, k2, names)} CUDA API"
    return f"GPU {k1} stream {k2}"


def _base(store, trace_id: str, info: dict, op: str | None = None):
    """(origin, base width, lane keys, busy matrix [lanes x BASE_BINS]) of the whole trace, cached; with
    ``op`` the one lane of that selection (:func:`selection_bins`)."""
    key = ("base", str(getattr(store, "path", "")), trace_id, info["ingested_ns"], op)
    return cached(key, lambda: _build_base(store, trace_id, info, op))


def _build_base(store, trace_id: str, info: dict, op: str | None):
    origin, span = info["start_ns"], max(1, info["end_ns"] - info["start_ns"])
    w = max(1, -(-span // BASE_BINS))
    if op is None:
        df = _tl.bins(store, trace_id, origin, origin + span, w)
    else:
        df = _tl.selection_bins(store, trace_id, op, origin, origin + span, w)
    keys = list(df.groupby(LANE_COLUMNS, sort=False).groups) if not df.empty else []
    index = {k: i for i, k in enumerate(keys)}
    mat = np.zeros((len(keys), BASE_BINS), dtype=np.int64)
    if keys:
        rows = np.fromiter((index[k] for k in zip(df["src"], df["k1"], df["k2"], df["k3"])), dtype=np.int64,
                           count=len(df))
        mat[rows, df["bin"].to_numpy(dtype=np.int64)] = df["busy_ns"].to_numpy(dtype=np.int64)
    return origin, w, keys, mat


def binned(store, trace_id: str, a: int, b: int, max_bins: int = 2000, info: dict | None = None,
           op: str | None = None):
    """Busy ns per (lane, bin) covering ``[a, b)`` with at most about ``max_bins`` bins.

    Returns ``(bins, start, width)``: ``bins`` has the lane key columns, ``bin`` and ``busy_ns`` (sparse);
    bin ``i`` is ``[start + i*width, start + (i+1)*width)``, and ``start <= a``. Windows holding at least
    ``max_bins`` base bins are summed from the per-trace cache (``start`` then lies on the base grid);
    narrower ones are binned directly with ``start = a``. With ``op``: the selection's one lane
    (src 'sel') instead of every lane (:func:`selection_bins`).
    """
    info = info or trace_info(store, trace_id)
    span = b - a
    origin, base_w = info["start_ns"], max(1, -(-max(1, info["end_ns"] - info["start_ns"]) // BASE_BINS))
    if span < max_bins * base_w:
        w = max(1, -(-span // max_bins))
        if op is not None:
            return _tl.selection_bins(store, trace_id, op, a, b, w), a, w
        return _tl.bins(store, trace_id, a, b, w), a, w
    origin, base_w, keys, mat = _base(store, trace_id, info, op)
    k = -(-span // (max_bins * base_w))
    first = max(0, (a - origin) // base_w)
    last = min(BASE_BINS, -(-(b - origin) // base_w))
    n = -(-(last - first) // k)
    sub = np.zeros((len(keys), n * k), dtype=np.int64)
    sub[:, : last - first] = mat[:, first:last]
    sums = sub.reshape(len(keys), n, k).sum(axis=2)
    li, bi = np.nonzero(sums)
    kf = pd.DataFrame(keys, columns=LANE_COLUMNS) if keys else pd.DataFrame(columns=LANE_COLUMNS)
    df = kf.iloc[li].reset_index(drop=True)
    df["bin"] = bi.astype(np.int64)
    df["busy_ns"] = sums[li, bi]
    return df, origin + first * base_w, k * base_w


def selection_bins(store, trace_id: str, op: str, a: int, b: int, max_bins: int = 2000,
                   info: dict | None = None) -> tuple[pd.DataFrame, int, int]:
    """Busy ns per bin of the selected operator's GPU activities (as in :func:`selection`), binned like
    :func:`binned` (same ``start`` and ``width`` for the same window): ``(bins[bin, busy_ns], start,
    width)``."""
    df, start, width = binned(store, trace_id, a, b, max_bins, info=info, op=op)
    return df[["bin", "busy_ns"]].sort_values("bin").reset_index(drop=True), start, width


def op_kernels(store, trace_id: str, name: str, level: str = "leaf") -> pd.DataFrame:
    """The GPU activities attributed (at ingest) to operators called ``name`` — through their leaf
    operator (``level`` 'leaf') or top-level operator ('top') — grouped by activity name, kind, device
    and stream: count, total_ns (sum of durations) and mean_ns, by total_ns descending. The grouping for
    every operator of the trace is computed once per process and trace, then filtered."""
    info = trace_info(store, trace_id)
    key = ("op_kernels", str(getattr(store, "path", "")), trace_id, info and info["ingested_ns"], level)
    allk = cached(key, lambda: _ops.op_kernel_groups(store, trace_id, level))
    out = allk[allk["op"] == name].drop(columns="op")
    return out.sort_values(["total_ns", "name"], ascending=[False, True]).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------------
# Runs of many ranks: the GPU lanes of every rank on one aligned time axis (the Ranks page's timeline view).
#
# Aligned time = stored time - rank_clocks.clock_offset_ns (the *applied* offset: 0 on one host, else the
# estimate from collective end times; storage/ranks.py). The run's origin is the earliest aligned trace
# start over its ranks. Lanes keyed like the single-trace timeline (src, k1, k2, k3):
#   ``gpu``  (rank, device, stream): GPU activities of one stream of one rank;
#   ``coll`` (rank, device, 0): that rank's collective kernels (any stream), binned views only.

def run_info(store, run: str) -> dict | None:
    """The run ``run`` names (as ``analysis.comm.run_traces`` resolves it: id, unique id prefix or name):
    ``run_id``, ``name``, ``ranks`` (frame of rank, trace_id, trace name, clock_offset_ns, aligned
    start_ns/end_ns), ``origin`` (earliest aligned trace start), ``end_ns`` (latest aligned trace end).
    None when no run or several match."""
    try:
        run_id = run_traces(store, run=str(run))[0]
    except UsageError:
        return None
    name = _rt.run_name(store, run_id)
    ranks = _rt.run_ranks(store, run_id)
    if ranks.empty or ranks["start_ns"].isna().all():
        return {"run_id": run_id, "name": name, "ranks": ranks, "origin": None, "end_ns": None}
    return {"run_id": run_id, "name": name, "ranks": ranks,
            "origin": int(ranks["start_ns"].min()), "end_ns": int(ranks["end_ns"].max())}


def run_lanes(store, run_id: str) -> pd.DataFrame:
    """The run's lanes in drawing order: per rank, its GPU streams, then its collectives lane (``coll``,
    only when it has collectives); columns src, k1 (rank), k2 (device), k3 (stream), events, label, lane."""
    df = _rt.run_lane_counts(store, run_id)
    if df.empty:
        return pd.DataFrame(columns=LANE_COLUMNS + ["events", "label", "lane"])
    df["o"] = (df["src"] == "coll").astype(int)
    df = df.sort_values(["k1", "k2", "o", "k3"]).drop(columns="o").reset_index(drop=True)
    df["label"] = [f"rank {r} · GPU {d} stream {s}" if src == "gpu" else f"rank {r} · collectives"
                   for src, r, d, s in zip(df["src"], df["k1"], df["k2"], df["k3"])]
    df["lane"] = range(len(df))
    return df


def run_binned(store, run_id: str, a: int, b: int, max_bins: int = 2000) -> tuple[pd.DataFrame, int, int]:
    """Busy ns per (lane, bin) of the run's lanes in the aligned window ``[a, b)`` (definition as for one
    trace: summed time inside the bin, capped at the bin), bins of ``width = ceil((b - a) / max_bins)`` ns
    from ``a``, straight from DuckDB. Returns ``(bins, a, width)``."""
    w = max(1, -(-(b - a) // max_bins))
    return _rt.run_bins(store, run_id, a, b, w), a, w


