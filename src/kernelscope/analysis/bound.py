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
"""

from __future__ import annotations

import uuid

import pandas as pd

from ..errors import UsageError
from .result import Result

DEFINITION = __doc__

_GAPS_CTE = """
b AS (
    SELECT device, start_ns, end_ns,
           lag(end_ns) OVER (PARTITION BY device ORDER BY start_ns) AS prev_end
    FROM busy_intervals WHERE trace_id = $trace
),
gaps AS (
    SELECT device, prev_end AS gap_start_ns, start_ns AS gap_end_ns
    FROM b WHERE prev_end IS NOT NULL AND start_ns > prev_end
),
acts AS (
    SELECT a.device, a.start_ns,
           min(a.launch_end_ns) OVER (PARTITION BY a.device ORDER BY a.start_ns DESC, a.activity_id DESC
                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS min_launch_end_after
    FROM (SELECT device, start_ns, activity_id, launch_end_ns FROM activity_splits WHERE trace_id = $trace
          UNION ALL  -- activity_splits holds every activity with a launch_id (launch_end_ns NULL if unmatched)
          SELECT device, start_ns, activity_id, NULL FROM gpu_activities WHERE trace_id = $trace AND launch_id IS NULL) a
),
first_after AS (  -- per gap: min launch end over activities starting at/after the gap end (suffix min)
    SELECT g.device, g.gap_start_ns, g.gap_end_ns, min(x.min_launch_end_after) AS min_launch_end_after
    FROM gaps g LEFT JOIN acts x ON x.device = g.device AND x.start_ns = g.gap_end_ns
    GROUP BY ALL
),
idle_gaps AS (
    SELECT device, gap_start_ns, gap_end_ns, gap_end_ns - gap_start_ns AS gap_ns,
           CASE WHEN min_launch_end_after IS NOT NULL AND min_launch_end_after <= gap_start_ns
                THEN 'dependency_wait' ELSE 'host_wait' END AS cause
    FROM first_after
)"""

_GAPS_SELECT = "WITH " + _GAPS_CTE + "\nSELECT * FROM idle_gaps"
_GAPS_SQL = _GAPS_SELECT + " ORDER BY device, gap_start_ns\n"

_SPAN_SQL = """
SELECT device, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
       max(end_ns) - min(start_ns) AS gpu_span_ns, sum(end_ns - start_ns) AS busy_ns
FROM busy_intervals WHERE trace_id = $trace GROUP BY device ORDER BY device
"""


def idle_gaps(store, trace_id: str) -> pd.DataFrame:
    """One row per idle gap of each device's busy union: device, gap_start_ns, gap_end_ns, gap_ns, cause."""
    return store.query(_GAPS_SQL, {"trace": trace_id})


_SPLIT_SQL = """
WITH g AS ({gaps}), sp AS (""" + _SPAN_SQL + """)
SELECT sp.device, sp.gpu_span_ns, sp.busy_ns,
       CAST(coalesce(sum(g.gap_ns) FILTER (WHERE g.cause = 'host_wait'), 0) AS BIGINT) AS host_wait_ns,
       CAST(coalesce(sum(g.gap_ns) FILTER (WHERE g.cause = 'dependency_wait'), 0) AS BIGINT) AS dependency_wait_ns,
       count(g.gap_ns) AS gaps
FROM sp LEFT JOIN g ON g.device = sp.device
GROUP BY sp.device, sp.gpu_span_ns, sp.busy_ns ORDER BY sp.device
"""


def idle_split(store, trace_id: str, *, _gaps: str | None = None) -> pd.DataFrame:
    """Per device: gpu_span_ns, busy_ns, idle_ns, host_wait_ns, dependency_wait_ns and their shares of the span
    (the gaps of ``idle_gaps`` summed per device and cause in SQL)."""
    df = store.query(_sql(_SPLIT_SQL, _gaps), {"trace": trace_id})
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

# Queued intervals: what TKLQT sums. [launch call start, kernel start) for every kernel not launched by a
# graph, and one [graph launch start, first node start) per graph launch (on the first node's stream).
_QUEUED_CTE = """
queued AS (
    SELECT device, stream, launch_start_ns AS s, start_ns AS e
    FROM activity_splits
    WHERE trace_id = $trace AND kind = 'kernel' AND NOT is_graph AND launch_start_ns IS NOT NULL
    UNION ALL
    SELECT arg_min(a.device, a.start_ns), arg_min(a.stream, a.start_ns), any_value(l.start_ns), min(a.start_ns)
    FROM gpu_activities a JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
    WHERE a.trace_id = $trace AND a.kind = 'kernel' AND a.is_graph
    GROUP BY a.launch_id
)"""

# One time grid for the binned tables: origin = earliest queued-interval start or activity start,
# end = last activity end, bin width w = ceil((end - origin) / n) (>= 1 ns).
_GRID_CTE = """
grid AS (
    SELECT origin, greatest(1, CAST(ceil((last - origin) / $n) AS BIGINT)) AS w
    FROM (SELECT least((SELECT min(s) FROM queued),
                       (SELECT min(start_ns) FROM gpu_activities WHERE trace_id = $trace)) AS origin,
                 (SELECT max(end_ns) FROM gpu_activities WHERE trace_id = $trace) AS last)
)"""

# Depth per stream as a step function (+1 at a queued interval's start, -1 at its end), cut into bins.
_QUEUE_SQL = "WITH " + _QUEUED_CTE + "," + _GRID_CTE + """,
ev AS (
    SELECT device, stream, s AS t, 1 AS d FROM queued WHERE e > s
    UNION ALL SELECT device, stream, e AS t, -1 AS d FROM queued WHERE e > s
),
st AS (  -- depth after every change at t (RANGE: all rows at t are peers); of the rows at one t only the
         -- last by lead has t1 > t, so each step is kept once (no GROUP BY over the 2M events)
    SELECT device, stream, t, sum(d) OVER (PARTITION BY device, stream ORDER BY t RANGE UNBOUNDED PRECEDING) AS depth,
           lead(t) OVER (PARTITION BY device, stream ORDER BY t) AS t1
    FROM ev
),
sb AS (  -- first and last bin of each step; most steps lie in one bin and skip the unnest
    SELECT device, stream, CAST(depth AS BIGINT) AS depth, t, t1, origin, w,
           (t - origin) // w AS b0, (t1 - 1 - origin) // w AS b1
    FROM st, grid WHERE depth > 0 AND t1 > t
),
seg AS (
    SELECT device, stream, depth, t, t1, b0 AS bin, origin, w FROM sb WHERE b0 = b1
    UNION ALL SELECT device, stream, depth, t, t1, unnest(generate_series(b0, b1)), origin, w FROM sb WHERE b0 < b1
)
SELECT device, stream, bin, origin + bin * w AS bin_start_ns, origin + (bin + 1) * w AS bin_end_ns,
       CAST(sum(depth * (least(t1, origin + (bin + 1) * w) - greatest(t, origin + bin * w))) AS BIGINT)
           AS queued_ns,
       CAST(max(depth) AS BIGINT) AS max_depth
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
_SEGMENTS_SQL = "WITH idle_gaps AS ({gaps}), comm_only AS ({comm})," + _QUEUED_CTE + "," + _GRID_CTE + """,
parts AS (
    SELECT device, start_ns AS s, end_ns AS e, 'busy' AS what FROM busy_intervals WHERE trace_id = $trace
    UNION ALL SELECT device, gap_start_ns, gap_end_ns, cause FROM idle_gaps
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
bins AS (
    SELECT device, bin, min(greatest(s, origin + bin * w)) AS s, max(least(e, origin + (bin + 1) * w)) AS e,
           CAST(sum(least(e, origin + (bin + 1) * w) - greatest(s, origin + bin * w))
                FILTER (WHERE what = 'busy') AS BIGINT) AS busy_ns,
           CAST(sum(least(e, origin + (bin + 1) * w) - greatest(s, origin + bin * w))
                FILTER (WHERE what = 'host_wait') AS BIGINT) AS host_wait_ns,
           CAST(sum(least(e, origin + (bin + 1) * w) - greatest(s, origin + bin * w))
                FILTER (WHERE what = 'dependency_wait') AS BIGINT) AS dependency_wait_ns,
           CAST(sum(least(e, origin + (bin + 1) * w) - greatest(s, origin + bin * w))
                FILTER (WHERE what = 'comm_only') AS BIGINT) AS comm_only_ns
    FROM cut GROUP BY device, bin
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

_D2H = "(name LIKE '%DtoH%' OR name LIKE '%D2H%' OR name LIKE '%Device -> Pageable%' OR name LIKE '%Device -> Pinned%')"
_COLLECTIVE = ("(regexp_matches(lower({c}), '^(nccl|c10d|gloo|record_param_comms)') OR "
               "regexp_matches(lower({c}), 'all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|barrier'))")
_ALLOCATOR = ("regexp_matches({c}, '^(cuda|cu|hip)(Malloc|Free|MemAlloc|MemFree|HostAlloc|MallocHost|"
              "FreeHost|MemCreate|MemRelease|MemMap|MemUnmap|MemAddressReserve|MemAddressFree|MemSetAccess|"
              "MemPool|DeviceSetLimit|HostRegister|HostUnregister)')")

# Pieces of each host-wait gap, cut where the launching thread's state changes. The thread's state is the
# innermost thing open on it: a runtime/driver call ('call'), else the innermost CPU operator ('op'), else
# nothing ('none' = Python between operators). Built as a step function from start/end events (at one
# instant, ends before starts, inner ends before outer ends, outer starts before inner starts; an op's end
# returns to its parent op, a call's end to its leaf op), then cut at each gap start (the state there
# found by an ASOF join) and each piece matched to the gap it falls in (another ASOF join).
_RAW_PIECES_SQL = """WITH idle_gaps AS ({gaps}),
hw AS (
    SELECT g.device, g.gap_start_ns AS g0, g.gap_end_ns AS g1,
           arg_min(l.pid, a.activity_id) FILTER (WHERE l.launch_id IS NOT NULL) AS pid,
           arg_min(l.tid, a.activity_id) FILTER (WHERE l.launch_id IS NOT NULL) AS tid
    FROM idle_gaps g
    JOIN gpu_activities a ON a.trace_id = $trace AND a.device = g.device AND a.start_ns = g.gap_end_ns
    LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
    WHERE g.cause = 'host_wait'
    GROUP BY g.device, g.gap_start_ns, g.gap_end_ns
),
thr AS (SELECT DISTINCT pid, tid FROM hw WHERE pid IS NOT NULL),
hw_u AS (  -- per thread, the union of its host-wait gaps (gaps of several devices may overlap)
    SELECT pid, tid, min(g0) AS u0, max(g1) AS u1 FROM (
        SELECT *, sum(CASE WHEN g0 > coalesce(run_end, g0 - 1) THEN 1 ELSE 0 END)
                      OVER (PARTITION BY pid, tid ORDER BY g0, g1 ROWS UNBOUNDED PRECEDING) AS grp
        FROM (SELECT pid, tid, g0, g1,
                     max(g1) OVER (PARTITION BY pid, tid ORDER BY g0, g1
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS run_end
              FROM hw WHERE pid IS NOT NULL))
    GROUP BY pid, tid, grp
),
-- Only the ops and calls overlapping a host-wait gap on their thread change the state inside a gap: on
-- nested intervals, the innermost open interval at any instant of a gap overlaps that gap, and so do
-- all its enclosing ones. Intervals and merged gaps are listed per time bucket they touch (t // 2^20 ns,
-- about 1 ms; a monotone map, so two overlapping intervals share a bucket) and matched by a hash join on
-- (thread, bucket): almost every interval lies in one bucket, so this is one pass, not intervals x gaps.
ivs AS (
    SELECT 'op' AS what, o.pid, o.tid, o.start_ns, o.end_ns, o.op_id AS id, o.parent_op_id AS up
    FROM cpu_ops o SEMI JOIN thr USING (pid, tid) WHERE o.trace_id = $trace AND o.dur_ns > 0
    UNION ALL
    SELECT 'call', l.pid, l.tid, l.start_ns, l.end_ns, l.launch_id, l.leaf_op_id
    FROM launches l SEMI JOIN thr USING (pid, tid) WHERE l.trace_id = $trace AND l.dur_ns > 0
),
ub AS (SELECT pid, tid, u0, u1, unnest(generate_series(u0 // 1048576, (u1 - 1) // 1048576)) AS b FROM hw_u),
ivr AS (SELECT *, start_ns // 1048576 AS b0, (end_ns - 1) // 1048576 AS b1 FROM ivs),
ivb AS (
    SELECT * EXCLUDE (b0, b1), b0 AS b FROM ivr WHERE b0 = b1
    UNION ALL SELECT * EXCLUDE (b0, b1), unnest(generate_series(b0, b1)) FROM ivr WHERE b0 < b1
),
kept AS (  -- DISTINCT: an interval overlapping several buckets or merged gaps matches more than once
    SELECT DISTINCT i.what, i.pid, i.tid, i.start_ns, i.end_ns, i.id, i.up
    FROM ivb i JOIN ub u ON u.pid = i.pid AND u.tid = i.tid AND u.b = i.b
    WHERE i.start_ns < u.u1 AND u.u0 < i.end_ns
),
ev AS (
    SELECT pid, tid, start_ns AS t, 1 AS is_start, -end_ns AS k, what AS kind, id AS ref FROM kept
    UNION ALL
    SELECT pid, tid, end_ns, 0, -start_ns, CASE WHEN up IS NULL THEN 'none' ELSE 'op' END, up FROM kept
),
st AS (  -- per instant, the event that decides the state: greatest (is_start, k) (ordering above)
    SELECT pid, tid, t, x.kind, x.ref FROM (
        SELECT pid, tid, t, arg_max({'kind': kind, 'ref': ref}, {'s': is_start, 'k': k}) AS x
        FROM ev GROUP BY pid, tid, t)
),
tl AS (  -- the thread's state changes and the gap starts in one ordered stream per (device, thread)
    SELECT d.device, s.pid, s.tid, s.t, 0 AS is_gap, s.kind, s.ref, NULL::BIGINT AS g1
    FROM st s JOIN (SELECT DISTINCT device, pid, tid FROM hw WHERE pid IS NOT NULL) d USING (pid, tid)
    UNION ALL
    SELECT device, pid, tid, g0, 1, NULL, NULL, g1 FROM hw WHERE pid IS NOT NULL
),
seg AS (  -- each row: the state in force from t (last change at or before t) and the gap open at t
    SELECT device, pid, tid, t,
           lead(t) OVER w AS t1,
           last_value(CASE WHEN is_gap = 0 THEN {'kind': kind, 'ref': ref} END IGNORE NULLS) OVER w0 AS state,
           last_value(CASE WHEN is_gap = 1 THEN t END IGNORE NULLS) OVER w0 AS g0,
           last_value(g1 IGNORE NULLS) OVER w0 AS g1
    FROM tl
    WINDOW w AS (PARTITION BY device, pid, tid ORDER BY t, is_gap),
           w0 AS (PARTITION BY device, pid, tid ORDER BY t, is_gap ROWS UNBOUNDED PRECEDING)
),
pieces AS (
    SELECT device, g0, pid, tid, coalesce(state.kind, 'none') AS kind, state.ref AS ref,
           least(coalesce(t1, g1), g1) - t AS ns
    FROM seg WHERE g0 IS NOT NULL AND t < g1
    UNION ALL
    SELECT device, g0, NULL, NULL, 'unknown', NULL, g1 - g0 FROM hw WHERE pid IS NULL
)
SELECT * FROM pieces
"""

# The pieces named: cause category, call name, operator. {raw} is _RAW_PIECES_SQL or a table bound() filled
# from it (a table's exact row count lets DuckDB build its hash joins on the pieces, not on cpu_ops).
_NAME_SQL = """WITH pieces AS ({raw}),
d2h_ops AS (
    SELECT leaf_op_id AS op_id FROM gpu_activities
    WHERE trace_id = $trace AND kind = 'memcpy' AND leaf_op_id IS NOT NULL AND """ + _D2H + """
    UNION SELECT op_id FROM cpu_ops
    WHERE trace_id = $trace AND name IN ('aten::item', 'aten::_local_scalar_dense')
),
d2h_calls AS (
    SELECT DISTINCT launch_id FROM gpu_activities
    WHERE trace_id = $trace AND kind = 'memcpy' AND launch_id IS NOT NULL AND """ + _D2H + """
),
pl AS (  -- only the launch calls and operators the pieces name (a semi join each, so no hash table over
          -- the whole launches or cpu_ops table is built)
    SELECT launch_id, name, launch_type, leaf_op_id FROM launches
    WHERE trace_id = $trace AND launch_id IN (SELECT ref FROM pieces WHERE kind = 'call')
),
po AS (
    SELECT op_id, name FROM cpu_ops
    WHERE trace_id = $trace AND op_id IN (SELECT ref FROM pieces WHERE kind = 'op' UNION ALL SELECT leaf_op_id FROM pl)
),
named AS (
    SELECT p.device, p.g0, p.ns, p.kind,
           CASE p.kind WHEN 'op' THEN p.ref WHEN 'call' THEN l.leaf_op_id END AS op_id,
           CASE
             WHEN p.kind = 'call' THEN CASE
               WHEN l.launch_type IN ('sync', 'memcpy') AND l.leaf_op_id IN (SELECT op_id FROM d2h_ops)
                 THEN 'd2h_copy'
               WHEN l.launch_id IN (SELECT launch_id FROM d2h_calls) THEN 'd2h_copy'
               WHEN l.launch_type = 'sync' OR l.name ILIKE '%synchronize%' THEN 'sync'
               WHEN """ + _ALLOCATOR.format(c="l.name") + """ THEN 'allocator'
               WHEN """ + _COLLECTIVE.format(c="l.name") + """ THEN 'collective'
               WHEN l.launch_type IN ('kernel', 'graph', 'memcpy', 'memset') THEN 'launch'
               ELSE 'runtime_other' END
             WHEN p.kind = 'op' THEN CASE
               WHEN p.ref IN (SELECT op_id FROM d2h_ops) THEN 'd2h_copy'
               WHEN """ + _COLLECTIVE.format(c="o.name") + """ THEN 'collective'
               ELSE 'operator' END
             WHEN p.kind = 'none' THEN 'python' ELSE p.kind END AS category,
           l.name AS call_name
    FROM pieces p
    LEFT JOIN pl l ON p.kind = 'call' AND l.launch_id = p.ref
    LEFT JOIN po o ON p.kind = 'op' AND o.op_id = p.ref
    WHERE p.ns > 0
)
SELECT n.device, n.g0 AS gap_start_ns, n.ns, n.category, n.call_name, n.op_id, o.name AS operator
FROM named n LEFT JOIN po o ON o.op_id = n.op_id
"""

_PIECES_SQL = _NAME_SQL.replace("{raw}", _RAW_PIECES_SQL)

_CAUSES_SQL = """WITH p AS ({pieces})
SELECT category, CAST(sum(ns) AS BIGINT) AS idle_ns, count(DISTINCT (device, gap_start_ns)) AS gaps
FROM p GROUP BY category ORDER BY idle_ns DESC, category
"""

_OPERATORS_SQL = """WITH p AS ({pieces}),
by_cat AS (
    SELECT operator, category, sum(ns) AS ns, count(DISTINCT (device, gap_start_ns)) AS gaps
    FROM p WHERE operator IS NOT NULL GROUP BY operator, category
),
by_op AS (
    SELECT operator, CAST(sum(ns) AS BIGINT) AS idle_ns, count(DISTINCT (device, gap_start_ns)) AS gaps
    FROM p WHERE operator IS NOT NULL GROUP BY operator
)
SELECT b.operator, b.idle_ns, (SELECT arg_max(c.category, c.ns) FROM by_cat c WHERE c.operator = b.operator)
       AS main_category, b.gaps
FROM by_op b ORDER BY b.idle_ns DESC, b.operator LIMIT $top
"""


DESCRIPTION = ("CPU- or GPU-bound within one trace: idle split (host/dependency wait), queue depth per stream, "
               "regime segments, idle causes ranked by operator.")
CAUSES = ("sync", "d2h_copy", "allocator", "collective", "launch", "runtime_other", "operator", "python",
          "unknown")


def _bins(bins) -> int:
    try:
        n = int(bins)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or n > MAX_BINS or str(n) != str(bins).strip():
        raise UsageError(f"option bins={bins!r} must be a whole number from 1 to {MAX_BINS}; e.g. `-o bins=200`.")
    return n


def queue_depth(store, trace_id: str, bins: int = DEFAULT_BINS) -> pd.DataFrame:
    """Launched-but-not-started kernels per (device, stream) over time, in at most ``bins`` bins.

    A kernel not launched by a graph is queued from its launch call's start to its own start; a graph
    launch counts once, from its start to its first node's start (TKLQT's terms). Columns: device,
    stream, bin, bin_start_ns, bin_end_ns, queued_ns (area under the depth in the bin, kernel-ns),
    mean_depth (= queued_ns / bin width), max_depth. Bins with nothing queued are left out. Summed over
    all rows, queued_ns is TKLQT less any negative launch-and-queue times.
    """
    df = store.query(_QUEUE_SQL, {"trace": trace_id, "n": _bins(bins)})
    width = (df["bin_end_ns"] - df["bin_start_ns"]) if len(df) else 1
    df.insert(len(df.columns) - 1, "mean_depth", df["queued_ns"] / width if len(df) else [])
    return df


def _gaps_sub() -> str:
    return "WITH " + _GAPS_CTE + "\nSELECT * FROM idle_gaps"


def _sql(template: str, gaps: str | None = None, pieces: str | None = None, comm: str | None = None) -> str:
    """``template`` with its {gaps} / {pieces} relation: a subquery, or a temp table bound() built once
    (plain text replacement: the SQL holds struct literals in braces, so no str.format)."""
    sql = template.replace("{gaps}", gaps or _gaps_sub()).replace("{comm}", comm or _NO_COMM)
    if "{pieces}" in sql:
        sql = sql.replace("{pieces}", pieces or _PIECES_SQL.replace("{gaps}", gaps or _gaps_sub()))
    return sql


def regime_segments(store, trace_id: str, bins: int = DEFAULT_BINS, *, _gaps: str | None = None,
                    _comm: str | None = None) -> pd.DataFrame:
    """CPU-bound, communication-bound and GPU-bound stretches of each device's GPU span.

    The span is cut into the same bins as ``queue_depth``; a bin is ``cpu_bound`` when host-wait idle
    fills more than half of the span time in it; else ``comm_bound`` when only collective kernels are
    busy (``comm_only_intervals``) for a time > 0 and at least half of the bin's busy time; else
    ``gpu_bound`` (busy or waiting on queued work). Runs of bins with one regime are merged. Columns:
    device, regime, start_ns, end_ns, dur_ns, busy_ns, host_wait_ns, dependency_wait_ns, bins,
    comm_only_ns. Per device the dur_ns add up to gpu_span_ns.
    """
    comm = _comm or _comm_sub(store, trace_id)
    return store.query(_sql(_SEGMENTS_SQL, _gaps, comm=comm), {"trace": trace_id, "n": _bins(bins)})


def idle_causes(store, trace_id: str, *, _gaps: str | None = None, _pieces: str | None = None) -> pd.DataFrame:
    """Host-wait idle by what the launching thread was doing (category, idle_ns, gaps).

    The launching thread of a host-wait gap is the thread of the launch call of the activity that ends
    the gap. Every instant of the gap is given to the innermost thing open on that thread: a sync call
    (``sync``), a device-to-host copy or the sync inside one (``d2h_copy``: ``aten::item``,
    ``aten::_local_scalar_dense``, or an operator/call that launched a DtoH memcpy), an allocator call
    (``allocator``), a collective (``collective``), a launch call (``launch``), another runtime call
    (``runtime_other``), a CPU operator (``operator``), nothing (``python``: between operators), or
    ``unknown`` (the activity has no launch call). The idle_ns add up to the host-wait time exactly.
    """
    sql = _sql(_CAUSES_SQL, _gaps, _pieces)
    return store.query(sql, {"trace": trace_id} if "$trace" in sql else None)


def idle_operators(store, trace_id: str, top: int = 20, *, _gaps: str | None = None,
                   _pieces: str | None = None) -> pd.DataFrame:
    """Operators ranked by host-wait idle they cause: the gap time during which the operator was the
    innermost one open on the launching thread (directly or around a runtime call). Columns: operator,
    idle_ns, main_category (the cause category holding most of it), gaps."""
    sql = _sql(_OPERATORS_SQL, _gaps, _pieces)
    return store.query(sql, {"trace": trace_id, "top": int(top)} if "$trace" in sql else {"top": int(top)})


def bound(store, trace_id: str, bins: int = DEFAULT_BINS, top: int = 20) -> Result:
    """The ``bound`` analysis of one trace (definitions: module docstring, docs/metrics.md)."""
    n = _bins(bins)
    # The idle gaps and the host-wait pieces are computed once into connection-local temp tables
    # (unique names, dropped on return) and every table below reads them.
    g, p, r, c = (f"bound_{what}_{uuid.uuid4().hex}" for what in ("gaps", "pieces", "raw", "comm"))
    try:
        store.query(f"CREATE TEMP TABLE {g} AS " + _gaps_sub(), {"trace": trace_id})
        gsel = f"SELECT * FROM {g}"
        devices = idle_split(store, trace_id, _gaps=gsel)
        if devices.empty:
            return Result(name="bound", definition=DEFINITION.strip(),
                          scalars={"gpu_span_ns": None, "busy_ns": 0, "idle_ns": None, "host_wait_ns": None,
                                   "dependency_wait_ns": None, "host_wait_share": None,
                                   "dependency_wait_share": None, "comm_only_ns": 0, "comm_only_share": None},
                          warnings=["the trace has no GPU activity: nothing to split."])
        store.query(f"CREATE TEMP TABLE {r} AS " + _sql(_RAW_PIECES_SQL, gsel), {"trace": trace_id})
        store.query(f"CREATE TEMP TABLE {p} AS " + _NAME_SQL.replace("{raw}", f"SELECT * FROM {r}"),
                    {"trace": trace_id})
        psel = f"SELECT * FROM {p}"
        causes = idle_causes(store, trace_id, _gaps=gsel, _pieces=psel)
        ops = idle_operators(store, trace_id, top, _gaps=gsel, _pieces=psel)
        queue = queue_depth(store, trace_id, n)
        comm_sql = _comm_sub(store, trace_id)
        store.query(f"CREATE TEMP TABLE {c} AS " + comm_sql, {"trace": trace_id} if "$trace" in comm_sql else None)
        csel = f"SELECT * FROM {c}"
        segments = regime_segments(store, trace_id, n, _gaps=gsel, _comm=csel)
        comm_dev = store.query(f"SELECT device, CAST(sum(end_ns - start_ns) AS BIGINT) AS ns FROM {c} GROUP BY device")
    finally:
        store.query(f"DROP TABLE IF EXISTS {c}")
        store.query(f"DROP TABLE IF EXISTS {p}")
        store.query(f"DROP TABLE IF EXISTS {r}")
        store.query(f"DROP TABLE IF EXISTS {g}")
    span = int(devices["gpu_span_ns"].sum())
    busy = int(devices["busy_ns"].sum())
    host = int(devices["host_wait_ns"].sum())
    dep = int(devices["dependency_wait_ns"].sum())
    causes["share_of_host_wait"] = causes["idle_ns"] / host if host else float("nan")
    causes["share_of_span"] = causes["idle_ns"] / span if span else float("nan")
    ops["share_of_host_wait"] = ops["idle_ns"] / host if host else float("nan")
    cpu_ns = int(segments.loc[segments.regime == "cpu_bound", "dur_ns"].sum())
    comm_bound = int(segments.loc[segments.regime == "comm_bound", "dur_ns"].sum())
    per_dev = dict(zip(comm_dev["device"].astype(int), comm_dev["ns"].astype(int)))
    devices["comm_only_ns"] = [per_dev.get(int(d), 0) for d in devices["device"]]
    devices["comm_only_share"] = [x / sp if sp else None for x, sp in zip(devices["comm_only_ns"], devices["gpu_span_ns"])]
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
        "cpu_bound_ns": cpu_ns,
        "gpu_bound_ns": int(segments["dur_ns"].sum()) - cpu_ns - comm_bound,
        "comm_bound_ns": comm_bound,
        "comm_only_ns": comm_only,
        "comm_only_share": comm_only / span if span else None,
        "queued_ns": int(queue["queued_ns"].sum()),
        "bin_ns": int(queue["bin_end_ns"].iloc[0] - queue["bin_start_ns"].iloc[0]) if len(queue) else None,
        "devices_count": len(devices),
    }
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
        tables={"devices": devices, "idle_causes": causes, "idle_operators": ops, "segments": segments,
                "queue_depth": queue},
        warnings=warnings, trust=trust)
