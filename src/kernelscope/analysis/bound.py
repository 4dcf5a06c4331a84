"""Where one trace is CPU-bound or GPU-bound: the device idle split into host wait and dependency wait.

Definition (docs/metrics.md, "CPU-bound vs GPU-bound"): per device, every idle gap of the union of GPU
activity intervals (kernels, memcpy, memset) inside the GPU span is

* **host wait** if, when the gap opens (time ``t0``, the end of the busy interval before it), no GPU
  activity of that device is launched-but-not-started: no activity starting at or after the gap's end has
  a launch call that had returned by ``t0`` (``launch.end_ns <= t0``);
* **dependency wait** otherwise (work was queued, yet nothing ran: events, syncs, graph-node gaps, the
  launch floor).

Shares are of ``gpu_span_ns`` (first activity start to last activity end on the device). Activities with no
matched launch call cannot be waiting in this sense and are ignored for the test. Times in ns.

**Communication-only** time (``comm_only_ns``): when only collective kernels are busy on the device (no
compute kernel, no memcpy/memset on any stream; comm.comm_only_busy's value). It is busy time, not compute:
segments where it is at least half the busy time (and host wait is not more than half the span) are
``comm_bound``, a third regime beside ``cpu_bound`` and ``gpu_bound``.

The gaps with their cause, the host-wait pieces (idle causes) and the queued intervals with their depth are
derived once at ingest by these rules (storage/idle.py, schema 005); this module aggregates them.
"""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd

from ..errors import UsageError
from .result import Result

DEFINITION = __doc__

# The stored gaps (storage/idle.py derives them at ingest with the rule above).
_GAPS_SUB = """SELECT device, gap_start_ns, gap_end_ns, gap_end_ns - gap_start_ns AS gap_ns, cause
FROM idle_gaps WHERE trace_id = $trace"""
_GAPS_SQL = _GAPS_SUB + " ORDER BY device, gap_start_ns\n"

_SPAN_SQL = """
SELECT device, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
       max(end_ns) - min(start_ns) AS gpu_span_ns, sum(end_ns - start_ns) AS busy_ns
FROM busy_intervals WHERE trace_id = $trace GROUP BY device ORDER BY device
"""


def idle_gaps(store, trace_id: str) -> pd.DataFrame:
    """One row per idle gap of each device's busy union: device, gap_start_ns, gap_end_ns, gap_ns, cause."""
    return store.query(_GAPS_SQL, {"trace": trace_id})


_SPLIT_SQL = """
WITH g AS (""" + _GAPS_SUB + """), sp AS (""" + _SPAN_SQL + """)
SELECT sp.device, sp.gpu_span_ns, sp.busy_ns,
       CAST(coalesce(sum(g.gap_ns) FILTER (WHERE g.cause = 'host_wait'), 0) AS BIGINT) AS host_wait_ns,
       CAST(coalesce(sum(g.gap_ns) FILTER (WHERE g.cause = 'dependency_wait'), 0) AS BIGINT) AS dependency_wait_ns,
       count(g.gap_ns) AS gaps
FROM sp LEFT JOIN g ON g.device = sp.device
GROUP BY sp.device, sp.gpu_span_ns, sp.busy_ns ORDER BY sp.device
"""


def idle_split(store, trace_id: str) -> pd.DataFrame:
    """Per device: gpu_span_ns, busy_ns, idle_ns, host_wait_ns, dependency_wait_ns and their shares of the span
    (the gaps of ``idle_gaps`` summed per device and cause in SQL)."""
    df = store.query(_SPLIT_SQL, {"trace": trace_id})
    rows = []
    for rec in df.itertuples(index=False):
        span, host, dep = int(rec.gpu_span_ns), int(rec.host_wait_ns), int(rec.dependency_wait_ns)
        rows.append(
            {
                "device": int(rec.device),
                "gpu_span_ns": span,
                "busy_ns": int(rec.busy_ns),
                "idle_ns": span - int(rec.busy_ns),
                "host_wait_ns": host,
                "dependency_wait_ns": dep,
                "host_wait_share": host / span if span else None,
                "dependency_wait_share": dep / span if span else None,
                "gaps": int(rec.gaps),
            }
        )
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ queue depth

#: Most bins the time-binned tables may have.
MAX_BINS = 2000
DEFAULT_BINS = 200
#: One call of an operator that keeps the GPU waiting this long is slow: a launch costs microseconds, this is host
#: work of another kind inside the call (idle_operators' slow_calls).
SLOW_CALL_NS = 1_000_000

# One time grid for the binned tables: origin = earliest queued-interval start or activity start,
# end = last activity end, bin width w = ceil((end - origin) / n) (>= 1 ns). The queued intervals (what TKLQT
# sums, each with its stream's depth just after it opened) are stored at ingest (storage/idle.py).
_GRID_SQL = """
SELECT origin, greatest(1, CAST(ceil((last - origin) / $n) AS BIGINT)) AS w
FROM (SELECT least((SELECT min(start_ns) FROM queued_intervals WHERE trace_id = $trace),
                   (SELECT min(start_ns) FROM gpu_activities WHERE trace_id = $trace)) AS origin,
             (SELECT max(end_ns) FROM gpu_activities WHERE trace_id = $trace) AS last)
"""
# The grid computed once (grid()) and passed to each binned query.
_GRID_CTE = """
grid AS (SELECT CAST($origin AS BIGINT) AS origin, CAST($w AS BIGINT) AS w)"""

# Per bin: queued_ns = the overlap of every queued interval with the bin (area under the depth); max_depth =
# the larger of the depth at each interval start in the bin and the intervals open at the bin's start (those
# that started in an earlier bin): between two starts the depth only falls, so one of them is the maximum.
_QUEUE_SQL = "WITH " + _GRID_CTE[1:] + """,
qb AS (  -- first and last bin of each interval; most lie in one bin and skip the unnest
    SELECT device, stream, start_ns AS s, end_ns AS e, depth, origin, w,
           (start_ns - origin) // w AS b0, (end_ns - 1 - origin) // w AS b1
    FROM queued_intervals, grid WHERE trace_id = $trace
),
seg AS (
    SELECT device, stream, s, e, depth, origin, w, b0, b0 AS bin FROM qb WHERE b0 = b1
    UNION ALL SELECT device, stream, s, e, depth, origin, w, b0, unnest(generate_series(b0, b1)) FROM qb WHERE b0 < b1
)
SELECT device, stream, bin, origin + bin * w AS bin_start_ns, origin + (bin + 1) * w AS bin_end_ns,
       CAST(sum(least(e, origin + (bin + 1) * w) - greatest(s, origin + bin * w)) AS BIGINT) AS queued_ns,
       CAST(greatest(coalesce(max(depth) FILTER (WHERE bin = b0), 0), count(*) FILTER (WHERE bin > b0))
            AS BIGINT) AS max_depth
FROM seg GROUP BY device, stream, bin, origin, w
ORDER BY device, stream, bin
"""

# ------------------------------------------------------------------------------ regime segments

# --------------------------------------------------------------------------- communication-only time

# Stretches of each device where only collective kernels are busy: no compute kernel and no memcpy/memset
# on any stream (comm.py's C minus (K u M), the same sweep: +1/-1 per class at each activity start/end).
_COMM_ONLY_SQL = """
WITH acts AS (
    SELECT a.device, a.start_ns AS s, a.end_ns AS e,
           CASE WHEN c.activity_id IS NOT NULL THEN 2 WHEN a.kind = 'kernel' THEN 1 ELSE 3 END AS cls
    FROM gpu_activities a
    LEFT JOIN collectives c ON c.trace_id = a.trace_id AND c.activity_id = a.activity_id
    WHERE a.trace_id = $trace AND a.device IS NOT NULL AND a.end_ns > a.start_ns
), ev AS (
    SELECT device, s AS t, (cls = 1)::INT AS dk, (cls = 2)::INT AS dc, (cls = 3)::INT AS dm FROM acts
    UNION ALL SELECT device, e, -(cls = 1)::INT, -(cls = 2)::INT, -(cls = 3)::INT FROM acts
), g AS (
    SELECT device, t, sum(dk) AS dk, sum(dc) AS dc, sum(dm) AS dm FROM ev GROUP BY ALL
), w AS (
    SELECT device, t, sum(dk) OVER o AS k, sum(dc) OVER o AS c, sum(dm) OVER o AS m, lead(t) OVER o2 AS t1
    FROM g WINDOW o AS (PARTITION BY device ORDER BY t ROWS UNBOUNDED PRECEDING),
                  o2 AS (PARTITION BY device ORDER BY t)
)
SELECT device, t AS start_ns, t1 AS end_ns FROM w WHERE c > 0 AND k = 0 AND m = 0 AND t1 > t
"""
_NO_COMM = "SELECT NULL::INTEGER AS device, NULL::BIGINT AS start_ns, NULL::BIGINT AS end_ns WHERE false"


def _comm_sub(store, trace_id: str) -> str:
    """The comm-only intervals' SQL for ``trace_id``: the sweep when the trace has collectives, else an
    empty relation (a trace without collectives has no comm-only time; this skips the sweep)."""
    n = store.query("SELECT count(*) AS n FROM collectives WHERE trace_id = $trace", {"trace": trace_id})
    return _COMM_ONLY_SQL if int(n["n"].iloc[0]) else _NO_COMM


def comm_only_intervals(store, trace_id: str) -> pd.DataFrame:
    """Per device, the stretches [start_ns, end_ns) when only collective kernels are busy (the
    communication-bound time of comm.comm_only_busy, as intervals). Columns: device, start_ns, end_ns."""
    sql = _comm_sub(store, trace_id)
    return store.query(sql + " ORDER BY device, start_ns", {"trace": trace_id} if "$trace" in sql else None)


# Per bin and device: busy, host-wait and dependency-wait time (the three partition the span) and the
# comm-only part of busy. A bin is cpu_bound when host wait is more than half of the span time it holds;
# else comm_bound when comm-only time is > 0 and at least half of its busy time; else gpu_bound. Runs of
# consecutive bins with one regime form a segment.
_SEGMENTS_SQL = "WITH idle_gaps AS (" + _GAPS_SUB + "), comm_only AS ({comm})," + _GRID_CTE + """,
span AS (SELECT device, min(start_ns) AS first_ns, max(end_ns) AS last_ns
         FROM busy_intervals WHERE trace_id = $trace GROUP BY device),
parts AS (  -- the idle parts; busy time in a bin is the rest of the span there (busy + gaps tile the span)
    SELECT device, gap_start_ns AS s, gap_end_ns AS e, cause AS what FROM idle_gaps
    UNION ALL SELECT device, start_ns, end_ns, 'comm_only' FROM comm_only  -- inside busy: s, e unchanged
),
pb AS (  -- first and last bin of each part; most parts lie in one bin and skip the unnest
    SELECT device, s, e, what, origin, w, (s - origin) // w AS b0, (e - 1 - origin) // w AS b1
    FROM parts, grid WHERE e > s
),
cut AS (
    SELECT device, s, e, what, origin, w, b0 AS bin FROM pb WHERE b0 = b1
    UNION ALL SELECT device, s, e, what, origin, w, unnest(generate_series(b0, b1)) FROM pb WHERE b0 < b1
),
sums AS (
    SELECT device, bin,
           CAST(sum(least(e, origin + (bin + 1) * w) - greatest(s, origin + bin * w))
                FILTER (WHERE what = 'host_wait') AS BIGINT) AS host_wait_ns,
           CAST(sum(least(e, origin + (bin + 1) * w) - greatest(s, origin + bin * w))
                FILTER (WHERE what = 'dependency_wait') AS BIGINT) AS dependency_wait_ns,
           CAST(sum(least(e, origin + (bin + 1) * w) - greatest(s, origin + bin * w))
                FILTER (WHERE what = 'comm_only') AS BIGINT) AS comm_only_ns
    FROM cut GROUP BY device, bin
),
sb AS (  -- every bin of each device's span, clipped to the span
    SELECT device, bin, greatest(first_ns, origin + bin * w) AS s, least(last_ns, origin + (bin + 1) * w) AS e
    FROM (SELECT device, first_ns, last_ns, origin, w,
                 unnest(generate_series((first_ns - origin) // w, (last_ns - 1 - origin) // w)) AS bin
          FROM span, grid)
),
bins AS (
    SELECT sb.device, sb.bin, sb.s, sb.e, x.host_wait_ns, x.dependency_wait_ns, x.comm_only_ns,
           sb.e - sb.s - coalesce(x.host_wait_ns, 0) - coalesce(x.dependency_wait_ns, 0) AS busy_ns
    FROM sb LEFT JOIN sums x ON x.device = sb.device AND x.bin = sb.bin
),
lab AS (
    SELECT *, CASE WHEN 2 * coalesce(host_wait_ns, 0) > e - s THEN 'cpu_bound'
                   WHEN coalesce(comm_only_ns, 0) > 0 AND 2 * comm_only_ns >= coalesce(busy_ns, 0) THEN 'comm_bound'
                   ELSE 'gpu_bound' END AS regime
    FROM bins
),
isl AS (
    SELECT *, bin - row_number() OVER (PARTITION BY device, regime ORDER BY bin) AS island FROM lab
)
SELECT device, regime, min(s) AS start_ns, max(e) AS end_ns, max(e) - min(s) AS dur_ns,
       CAST(coalesce(sum(busy_ns), 0) AS BIGINT) AS busy_ns,
       CAST(coalesce(sum(host_wait_ns), 0) AS BIGINT) AS host_wait_ns,
       CAST(coalesce(sum(dependency_wait_ns), 0) AS BIGINT) AS dependency_wait_ns,
       count(*) AS bins,
       CAST(coalesce(sum(comm_only_ns), 0) AS BIGINT) AS comm_only_ns
FROM isl GROUP BY device, regime, island ORDER BY device, start_ns
"""

# --------------------------------------------------------------------------------- idle causes


# idle_rollup (schema 011) holds these sums and distinct-gap counts over idle_pieces, computed at ingest
# (storage/idle.py): operator NULL rows are the cause categories, category NULL rows the operators.
_CAUSES_SQL = """
SELECT category, idle_ns, gaps FROM idle_rollup WHERE trace_id = $trace AND operator IS NULL
ORDER BY idle_ns DESC, category
"""

# The top operators from the rollup, then their slow calls from the pieces: the instances (op_id) in whose host
# work the GPU waited SLOW_CALL_NS or more, and how many of those were the operator's first call with their input
# shapes in the trace (by start; instances without recorded shapes never count as new; null when none of its
# slow calls has recorded shapes). 0s without slow calls.
_OPERATORS_SQL = """
WITH r AS (SELECT operator, category, idle_ns, gaps FROM idle_rollup WHERE trace_id = $trace AND operator IS NOT NULL),
top AS (
    SELECT b.operator, b.idle_ns, (SELECT arg_max(c.category, c.idle_ns) FROM r c
                                   WHERE c.operator = b.operator AND c.category IS NOT NULL) AS main_category, b.gaps
    FROM r b WHERE b.category IS NULL ORDER BY b.idle_ns DESC, b.operator LIMIT $top
),
inst AS (  -- a call's idle lies inside it: only calls lasting $slow or more can be slow
    SELECT op_id, sum(ns) AS ns FROM idle_pieces
    WHERE trace_id = $trace AND op_id IN (SELECT op_id FROM cpu_ops WHERE trace_id = $trace AND dur_ns >= $slow
                                          AND name IN (SELECT operator FROM top))
    GROUP BY op_id HAVING sum(ns) >= $slow
),
shape_first AS (
    SELECT name, input_dims, min(start_ns) AS first_ns FROM cpu_ops
    WHERE trace_id = $trace AND input_dims IS NOT NULL AND name IN (SELECT operator FROM top) GROUP BY ALL
),
slow AS (
    SELECT o.name AS operator, count(*) AS slow_calls, sum(i.ns) AS slow_call_idle_ns, max(i.ns) AS max_call_idle_ns,
           CASE WHEN count(o.input_dims) > 0 THEN count(*) FILTER (WHERE o.start_ns = f.first_ns) END
               AS slow_new_shape_calls
    FROM inst i JOIN cpu_ops o ON o.trace_id = $trace AND o.op_id = i.op_id
    LEFT JOIN shape_first f ON f.name = o.name AND f.input_dims = o.input_dims
    GROUP BY o.name
)
SELECT t.operator, t.idle_ns, t.main_category, t.gaps,
       coalesce(s.slow_calls, 0) AS slow_calls, CAST(coalesce(s.slow_call_idle_ns, 0) AS BIGINT) AS slow_call_idle_ns,
       CAST(coalesce(s.max_call_idle_ns, 0) AS BIGINT) AS max_call_idle_ns,
       CASE WHEN s.operator IS NULL THEN 0 ELSE s.slow_new_shape_calls END AS slow_new_shape_calls
FROM top t LEFT JOIN slow s USING (operator) ORDER BY t.idle_ns DESC, t.operator
"""


DESCRIPTION = ("CPU- or GPU-bound within one trace: idle split (host/dependency wait), queue depth per stream, "
               "regime segments, idle causes ranked by operator.")
CAUSES = ("sync", "d2h_copy", "allocator", "collective", "launch", "runtime_other", "operator", "python", "python_gc",
          "unknown")
#: Each cause in a few words (the idle-causes chart's hover; docs/metrics.md "Idle causes" has the definitions).
CAUSE_WORDS = {
    "sync": "a synchronize call (device, stream or event)",
    "d2h_copy": "a device-to-host copy or .item(): waiting for a value from the GPU",
    "allocator": "cudaMalloc/cudaFree and the like",
    "collective": "a collective (NCCL, gloo, c10d)",
    "launch": "a kernel, graph, memcpy or memset launch call",
    "runtime_other": "another runtime or driver call",
    "operator": "a CPU operator's own work (nothing inside it open)",
    "python": "Python between operators",
    "python_gc": "Python's garbage collector",
    "unknown": "the activity has no launch call in the trace",
}


def _bins(bins) -> int:
    try:
        n = int(bins)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or n > MAX_BINS or str(n) != str(bins).strip():
        raise UsageError(f"option bins={bins!r} must be a whole number from 1 to {MAX_BINS}; e.g. `-o bins=200`.")
    return n


def grid(store, trace_id: str, bins: int = DEFAULT_BINS) -> dict:
    """The time grid of the binned tables for ``bins``: {"origin": ns, "w": bin width ns} (None without
    GPU activity)."""
    row = store.query(_GRID_SQL, {"trace": trace_id, "n": _bins(bins)})
    o, w = row["origin"].iloc[0], row["w"].iloc[0]
    return {"origin": None if pd.isna(o) else int(o), "w": None if pd.isna(w) else int(w)}


def queue_depth(store, trace_id: str, bins: int = DEFAULT_BINS, *, _grid: dict | None = None) -> pd.DataFrame:
    """Launched-but-not-started kernels per (device, stream) over time, in at most ``bins`` bins.

    A kernel not launched by a graph is queued from its launch call's start to its own start; a graph
    launch counts once, from its start to its first node's start (TKLQT's terms). Columns: device,
    stream, bin, bin_start_ns, bin_end_ns, queued_ns (area under the depth in the bin, kernel-ns),
    mean_depth (= queued_ns / bin width), max_depth. Bins with nothing queued are left out. Summed over
    all rows, queued_ns is TKLQT less any negative launch-and-queue times.
    """
    g = _grid or grid(store, trace_id, bins)
    df = store.query(_QUEUE_SQL, {"trace": trace_id, **g})
    width = (df["bin_end_ns"] - df["bin_start_ns"]) if len(df) else 1
    df.insert(len(df.columns) - 1, "mean_depth", df["queued_ns"] / width if len(df) else [])
    return df


def regime_segments(store, trace_id: str, bins: int = DEFAULT_BINS, *, _grid: dict | None = None) -> pd.DataFrame:
    """CPU-bound, communication-bound and GPU-bound stretches of each device's GPU span.

    The span is cut into the same bins as ``queue_depth``; a bin is ``cpu_bound`` when host-wait idle
    fills more than half of the span time in it; else ``comm_bound`` when only collective kernels are
    busy (``comm_only_intervals``) for a time > 0 and at least half of the bin's busy time; else
    ``gpu_bound`` (busy or waiting on queued work). Runs of bins with one regime are merged. Columns:
    device, regime, start_ns, end_ns, dur_ns, busy_ns, host_wait_ns, dependency_wait_ns, bins,
    comm_only_ns. Per device the dur_ns add up to gpu_span_ns.
    """
    g = _grid or grid(store, trace_id, bins)
    sql = _SEGMENTS_SQL.replace("{comm}", _comm_sub(store, trace_id))  # text replacement: no other braces
    return store.query(sql, {"trace": trace_id, **g})


def binned(store, trace_id: str, bins: int = DEFAULT_BINS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(queue_depth, regime_segments) for ``bins`` on one grid: what a new bin count changes."""
    g = grid(store, trace_id, bins)
    return queue_depth(store, trace_id, bins, _grid=g), regime_segments(store, trace_id, bins, _grid=g)


def idle_causes(store, trace_id: str) -> pd.DataFrame:
    """Host-wait idle by what the launching thread was doing (category, idle_ns, gaps).

    The launching thread of a host-wait gap is the thread of the launch call of the activity that ends
    the gap. Every instant of the gap is given to the innermost thing open on that thread: a sync call
    (``sync``), a device-to-host copy or the sync inside one (``d2h_copy``: ``aten::item``,
    ``aten::_local_scalar_dense``, or an operator/call that launched a DtoH memcpy), an allocator call
    (``allocator``), a collective (``collective``), a launch call (``launch``), another runtime call
    (``runtime_other``), a CPU operator (``operator``), nothing (``python``: between operators), or
    ``unknown`` (the activity has no launch call). The idle_ns add up to the host-wait time exactly.
    """
    return store.query(_CAUSES_SQL, {"trace": trace_id})


def idle_operators(store, trace_id: str, top: int = 20) -> pd.DataFrame:
    """Operators ranked by host-wait idle they cause: the gap time during which the operator was the
    innermost one open on the launching thread (directly or around a runtime call). Columns: operator,
    idle_ns, main_category (the cause category holding most of it), gaps; slow_calls and slow_call_idle_ns: its
    calls that each kept the GPU waiting SLOW_CALL_NS or more, and that idle (host work far beyond a launch's
    microseconds: a plan built or autotuned for a new shape, a compile, a lazy load), max_call_idle_ns the most
    one slow call did (0 without slow calls), slow_new_shape_calls those slow calls that were the operator's first
    with their input shapes (null when none of them has recorded shapes: it cannot be told)."""
    return store.query(_OPERATORS_SQL, {"trace": trace_id, "top": int(top), "slow": SLOW_CALL_NS})


TABLES = ("devices", "idle_causes", "idle_operators", "segments", "queue_depth")
_SCALAR_ORDER = ("gpu_span_ns", "busy_ns", "idle_ns", "host_wait_ns", "dependency_wait_ns", "host_wait_share",
                 "dependency_wait_share", "gaps", "cpu_bound_ns", "gpu_bound_ns", "comm_bound_ns", "comm_only_ns",
                 "comm_only_share", "queued_ns", "bin_ns", "devices_count")


def bound(store, trace_id: str, bins: int = DEFAULT_BINS, top: int = 20,
          _tables: Collection[str] | None = None) -> Result:
    """The ``bound`` analysis of one trace (definitions: module docstring, docs/metrics.md).

    ``_tables`` (callers that need part of the result, e.g. recommend): the binned tables ``segments`` and
    ``queue_depth`` are computed only when named here (default: all); without them their scalars
    (cpu/gpu/comm_bound_ns; queued_ns, bin_ns) are left out. The other tables are always there."""
    want = set(TABLES if _tables is None else _tables)
    n = _bins(bins)
    devices = idle_split(store, trace_id)
    causes = idle_causes(store, trace_id)
    ops = idle_operators(store, trace_id, top)
    if devices.empty:  # the same tables, empty: readers (recommend, the page, the report) need no special case
        for df in (causes, ops):
            df["share_of_host_wait"] = pd.Series(dtype="float64")
        causes["share_of_span"] = pd.Series(dtype="float64")
        return Result(name="bound", definition=DEFINITION.strip(),
                      scalars={"gpu_span_ns": None, "busy_ns": 0, "idle_ns": None, "host_wait_ns": None,
                               "dependency_wait_ns": None, "host_wait_share": None,
                               "dependency_wait_share": None, "comm_only_ns": 0, "comm_only_share": None},
                      tables={"devices": devices, "idle_causes": causes, "idle_operators": ops},
                      warnings=["the trace has no GPU activity: nothing to split."])
    g = grid(store, trace_id, n) if want & {"queue_depth", "segments"} else None
    queue = queue_depth(store, trace_id, n, _grid=g) if "queue_depth" in want else None
    segments = regime_segments(store, trace_id, n, _grid=g) if "segments" in want else None
    # per device, the comm-only total the ingest sweep stored (device_time: the same rule as the intervals)
    comm_dev = store.query("SELECT device, comm_only_ns AS ns FROM device_time WHERE trace_id = $trace",
                           {"trace": trace_id})
    span = int(devices["gpu_span_ns"].sum())
    busy = int(devices["busy_ns"].sum())
    host = int(devices["host_wait_ns"].sum())
    dep = int(devices["dependency_wait_ns"].sum())
    causes["share_of_host_wait"] = causes["idle_ns"] / host if host else float("nan")
    causes["share_of_span"] = causes["idle_ns"] / span if span else float("nan")
    ops["share_of_host_wait"] = ops["idle_ns"] / host if host else float("nan")
    per_dev = dict(zip(comm_dev["device"].astype(int), comm_dev["ns"].astype(int)))
    devices["comm_only_ns"] = [per_dev.get(int(d), 0) for d in devices["device"]]
    devices["comm_only_share"] = [x / sp if sp else None
                                  for x, sp in zip(devices["comm_only_ns"], devices["gpu_span_ns"])]
    comm_only = int(devices["comm_only_ns"].sum())
    scalars = {
        "gpu_span_ns": span,
        "busy_ns": busy,
        "idle_ns": span - busy,
        "host_wait_ns": host,
        "dependency_wait_ns": dep,
        "host_wait_share": host / span if span else None,
        "dependency_wait_share": dep / span if span else None,
        "gaps": int(devices["gaps"].sum()),
        "comm_only_ns": comm_only,
        "comm_only_share": comm_only / span if span else None,
        "devices_count": len(devices),
    }
    tables = {"devices": devices, "idle_causes": causes, "idle_operators": ops}
    if segments is not None:
        cpu_ns = int(segments.loc[segments.regime == "cpu_bound", "dur_ns"].sum())
        comm_bound = int(segments.loc[segments.regime == "comm_bound", "dur_ns"].sum())
        scalars.update({"cpu_bound_ns": cpu_ns, "gpu_bound_ns": int(segments["dur_ns"].sum()) - cpu_ns - comm_bound,
                        "comm_bound_ns": comm_bound})
        tables["segments"] = segments
    if queue is not None:
        scalars.update({"queued_ns": int(queue["queued_ns"].sum()),
                        "bin_ns": int(queue["bin_end_ns"].iloc[0] - queue["bin_start_ns"].iloc[0]) if len(queue)
                        else None})
        tables["queue_depth"] = queue
    scalars = {k: scalars[k] for k in _SCALAR_ORDER if k in scalars}
    unknown = int(causes.loc[causes.category == "unknown", "idle_ns"].sum())
    trust = {"host_wait_unknown_thread_ns": unknown,
             "multi_device": "totals are sums over devices; shares are of the summed spans"
             if len(devices) > 1 else None}
    warnings = []
    if unknown:
        warnings.append(f"{unknown} ns of host wait end at an activity with no launch call: their cause is "
                        "'unknown'.")
    return Result(
        name="bound", definition=DEFINITION.strip(), scalars=scalars,
        tables=tables, warnings=warnings, trust=trust)
