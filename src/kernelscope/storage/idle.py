"""Idle gaps, host-wait pieces and queued intervals, derived once per trace at ingest (schema 005) and read by
the bound analysis (analysis/bound.py has the definitions; docs/metrics.md "CPU-bound vs GPU-bound") and, through
``long_idle``, whatif.

- idle_gaps: per device, every gap of the busy union (busy_intervals) inside the GPU span, with its cause:
  ``host_wait`` when no activity starting at or after the gap's end had its launch call return by the gap's
  start (nothing launched-but-not-started), else ``dependency_wait``.
- idle_pieces: each host-wait gap cut where the launching thread's state changes (the innermost runtime call
  or operator open on it, or nothing = Python), named by cause category, call and operator; the pieces of one
  gap in one state (an operator resumed after each of its children) are one row, their times summed (readers
  only sum them: 849k rows became 516k on the train_step tile of benchmarks/ingest.py).
- queued_intervals: the intervals TKLQT sums, with the queue depth of their stream just after each opened.

Every statement reads only the trace's stored rows (busy_intervals, activity_splits, gpu_activities,
launches, cpu_ops), so ``insert_idle`` (the "idle" step of storage/derivations.py) runs at ingest after the
event tables and the launch splits and, for traces stored before schema 005, as the migration's backfill.
"""

from __future__ import annotations

from ..collectors.pygc import GC_RANGE
from .collectives import COLLECTIVE_WORDS
from .intervals import union_sql

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
          SELECT device, start_ns, activity_id, NULL FROM gpu_activities
          WHERE trace_id = $trace AND launch_id IS NULL) a
),
first_after AS (  -- per gap: min launch end over activities starting at/after the gap end (suffix min)
    SELECT g.device, g.gap_start_ns, g.gap_end_ns, min(x.min_launch_end_after) AS min_launch_end_after
    FROM gaps g LEFT JOIN acts x ON x.device = g.device AND x.start_ns = g.gap_end_ns
    GROUP BY ALL
),
gap_rows AS (
    SELECT device, gap_start_ns, gap_end_ns, gap_end_ns - gap_start_ns AS gap_ns,
           CASE WHEN min_launch_end_after IS NOT NULL AND min_launch_end_after <= gap_start_ns
                THEN 'dependency_wait' ELSE 'host_wait' END AS cause
    FROM first_after
)"""

_GAPS_INSERT = "INSERT INTO idle_gaps WITH " + _GAPS_CTE + """
SELECT $trace, device, gap_start_ns, gap_end_ns, cause FROM gap_rows ORDER BY device, gap_start_ns"""

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

# Depth after every change at an instant (RANGE: all changes at t are peers), kept at each interval's start.
_QUEUED_INSERT = "INSERT INTO queued_intervals WITH " + _QUEUED_CTE + """,
q AS (SELECT device, stream, s, e FROM queued WHERE e > s),
ev AS (SELECT device, stream, s AS t, 1 AS d, e FROM q UNION ALL SELECT device, stream, e, -1, NULL FROM q),
w AS (SELECT device, stream, t, d, e,
             sum(d) OVER (PARTITION BY device, stream ORDER BY t RANGE UNBOUNDED PRECEDING) AS depth FROM ev)
SELECT $trace, device, stream, t, e, CAST(depth AS BIGINT) FROM w WHERE d = 1 ORDER BY device, stream, t, e"""

_D2H = "(name LIKE '%DtoH%' OR name LIKE '%D2H%' OR name LIKE '%Device -> Pageable%' OR name LIKE '%Device -> Pinned%')"
_COLLECTIVE = ("(regexp_matches(lower({c}), '^(nccl|c10d|gloo|record_param_comms)') OR "
               "regexp_matches(lower({c}), '" + COLLECTIVE_WORDS + "|barrier'))")
_ALLOCATOR = ("regexp_matches({c}, '^(cuda|cu|hip)(Malloc|Free|MemAlloc|MemFree|HostAlloc|MallocHost|"
              "FreeHost|MemCreate|MemRelease|MemMap|MemUnmap|MemAddressReserve|MemAddressFree|MemSetAccess|"
              "MemPool|DeviceSetLimit|HostRegister|HostUnregister)')")

# Pieces of each host-wait gap, cut where the launching thread's state changes. The thread's state is the
# innermost thing open on it: a runtime/driver call ('call'), else the innermost CPU operator ('op'), else
# nothing ('none' = Python between operators). Built as a step function from start/end events (at one
# instant, ends before starts, inner ends before outer ends, outer starts before inner starts; an op's end
# returns to its parent op, a call's end to its leaf op), then cut at each gap start (the state there
# found by an ASOF join) and each piece matched to the gap it falls in (another ASOF join).
# Pieces of each host-wait gap, in three statements whose results go to temporary tables (each spills on its
# own; as one statement a trace of a million pieces ran out of a 256 MB memory limit): the host-wait gaps with
# their launching thread (_HW_SQL), the operators and calls that can change that thread's state inside them
# (_KEPT_SQL), and the pieces (_PIECES_RAW_SQL).
_HW_SQL = """WITH gap_rows AS ({gaps})
SELECT g.device, g.gap_start_ns AS g0, g.gap_end_ns AS g1,
       arg_min(l.pid, a.activity_id) FILTER (WHERE l.launch_id IS NOT NULL) AS pid,
       arg_min(l.tid, a.activity_id) FILTER (WHERE l.launch_id IS NOT NULL) AS tid
FROM gap_rows g
JOIN gpu_activities a ON a.trace_id = $trace AND a.device = g.device AND a.start_ns = g.gap_end_ns
LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
WHERE g.cause = 'host_wait'
GROUP BY g.device, g.gap_start_ns, g.gap_end_ns
"""

_KEPT_SQL = """WITH hw AS (SELECT * FROM ks_idle_hw),
thr AS (SELECT DISTINCT pid, tid FROM hw WHERE pid IS NOT NULL),
hw_u AS (  -- per thread, the union of its host-wait gaps (gaps of several devices may overlap)
    SELECT pid, tid, g0 AS u0, g1 AS u1
    FROM (""" + union_sql("(SELECT pid, tid, g0, g1 FROM hw WHERE pid IS NOT NULL)", by=("pid", "tid"),
                          start="g0", end="g1") + """)
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
)
SELECT * FROM kept
"""

_PIECES_RAW_SQL = """WITH hw AS (SELECT * FROM ks_idle_hw), kept AS (SELECT * FROM ks_idle_kept),
ev AS (
    SELECT pid, tid, start_ns AS t, 1 AS is_start, -end_ns AS k, what AS kind, id AS ref FROM kept
    UNION ALL
    SELECT pid, tid, end_ns, 0, -start_ns, CASE WHEN up IS NULL THEN 'none' ELSE 'op' END, up FROM kept
),
tl AS (  -- the thread's state changes and the gap starts in one ordered stream per (device, thread)
    SELECT d.device, e.pid, e.tid, e.t, 0 AS is_gap, e.is_start, e.k, e.kind, e.ref, NULL::BIGINT AS g1
    FROM ev e JOIN (SELECT DISTINCT device, pid, tid FROM hw WHERE pid IS NOT NULL) d USING (pid, tid)
    UNION ALL
    SELECT device, pid, tid, g0, 1, NULL, NULL, NULL, NULL, g1 FROM hw WHERE pid IS NOT NULL
),
-- At one instant the state events are ordered so that the one deciding the state (greatest (is_start, k),
-- the ordering above) comes last: the rows before it at that instant end where they start (ns 0, dropped).
seg AS (  -- each row: the state in force from t (last change at or before t) and the gap open at t
    SELECT device, pid, tid, t,
           lead(t) OVER w AS t1,
           last_value(CASE WHEN is_gap = 0 THEN {'kind': kind, 'ref': ref} END IGNORE NULLS) OVER w0 AS state,
           last_value(CASE WHEN is_gap = 1 THEN t END IGNORE NULLS) OVER w0 AS g0,
           last_value(g1 IGNORE NULLS) OVER w0 AS g1
    FROM tl
    WINDOW w AS (PARTITION BY device, pid, tid
                 ORDER BY t, is_gap, is_start, k, kind DESC NULLS FIRST, ref DESC NULLS FIRST),
           w0 AS (w ROWS UNBOUNDED PRECEDING)
),
pieces AS (  -- t0: where the piece starts
    SELECT device, g0, pid, tid, coalesce(state.kind, 'none') AS kind, state.ref AS ref,
           least(coalesce(t1, g1), g1) - t AS ns, t AS t0
    FROM seg WHERE g0 IS NOT NULL AND t < g1
    UNION ALL
    SELECT device, g0, NULL, NULL, 'unknown', NULL, g1 - g0, g0 FROM hw WHERE pid IS NULL
)
SELECT * FROM pieces
"""

#: Python's garbage collections as traces record them: kernelscope profile's range around each full collection
#: (collectors/pygc.py, a user annotation) and torch.profiler's own events (``Python GC``, a python_function event,
#: with ``with_stack`` and the experimental ``record_python_gc_info``).
GC_ANNOTATION = GC_RANGE
GC_PYTHON_EVENT = "Python GC"


def gc_ranges_sql(where: str) -> str:
    """SQL for Python's garbage collections in a trace, from both recorders: ``pid, tid, start_ns, end_ns`` of the
    rows that match ``where`` (a condition on ``trace_id``, ``start_ns``, ``end_ns``; bound's idle cut and the
    Steps breakdown's python_gc category read the same rows)."""
    return (f"SELECT pid, tid, start_ns, end_ns FROM annotations WHERE {where} AND kind = 'user' "
            f"AND name = '{GC_ANNOTATION}' UNION ALL SELECT pid, tid, start_ns, end_ns FROM python_calls "
            f"WHERE {where} AND name = '{GC_PYTHON_EVENT}'")

# The part of each Python-time or operator piece during which the thread was in a garbage collection is cut out as
# a piece of its own (kind 'gc'): the collector, not the code around it, held the GPU waiting. A collection runs
# inside Python code, so it only ever overlaps those two kinds; overlapping ranges (both recorders) count once.
_GC_CUT_SQL = """raw AS (SELECT * FROM ({raw}) WHERE ns > 0),
gc AS (SELECT pid, tid, start_ns AS s, end_ns AS e
       FROM (""" + gc_ranges_sql("trace_id = $trace AND end_ns > start_ns") + """)),
gcu AS (""" + union_sql("gc", by=("pid", "tid"), start="s", end="e") + """),
cut AS (
    SELECT r.device, r.g0, r.pid, r.tid, r.t0, sum(least(r.t0 + r.ns, g.e) - greatest(r.t0, g.s)) AS gc_ns
    FROM raw r JOIN gcu g ON g.pid = r.pid AND g.tid = r.tid AND g.s < r.t0 + r.ns AND r.t0 < g.e
    WHERE r.kind IN ('none', 'op')
    GROUP BY ALL
),
gc_cut AS (
    SELECT r.device, r.g0, r.kind, r.ref, r.ns - coalesce(c.gc_ns, 0) AS ns
    FROM raw r LEFT JOIN cut c ON c.device = r.device AND c.g0 = r.g0 AND c.pid = r.pid AND c.tid = r.tid
                              AND c.t0 = r.t0
    UNION ALL
    SELECT device, g0, 'gc', NULL, gc_ns FROM cut
)"""


# The pieces named: cause category, call name, operator ({raw}: the pieces of _PIECES_RAW_SQL). A call's category
# depends only on its launch row and an operator's collective test only on its name: each is decided once per
# launch (pl) or distinct name (coll), not per piece.
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
    SELECT launch_id, name, leaf_op_id,
           CASE
             WHEN launch_type IN ('sync', 'memcpy') AND leaf_op_id IN (SELECT op_id FROM d2h_ops) THEN 'd2h_copy'
             WHEN launch_id IN (SELECT launch_id FROM d2h_calls) THEN 'd2h_copy'
             WHEN launch_type = 'sync' OR name ILIKE '%synchronize%' THEN 'sync'
             WHEN """ + _ALLOCATOR.format(c="name") + """ THEN 'allocator'
             WHEN """ + _COLLECTIVE.format(c="name") + """ THEN 'collective'
             WHEN launch_type IN ('kernel', 'graph', 'memcpy', 'memset') THEN 'launch'
             ELSE 'runtime_other' END AS category
    FROM launches
    WHERE trace_id = $trace AND launch_id IN (SELECT ref FROM pieces WHERE kind = 'call')
),
po AS (
    SELECT op_id, name FROM cpu_ops
    WHERE trace_id = $trace AND op_id IN (SELECT ref FROM pieces WHERE kind = 'op' UNION ALL SELECT leaf_op_id FROM pl)
),
coll AS (SELECT name, """ + _COLLECTIVE.format(c="name") + """ AS collective FROM (SELECT DISTINCT name FROM po)),
named AS (  -- op_id: the operator open (kind 'op') or around the call (kind 'call')
    SELECT p.device, p.g0, p.ns, p.kind,
           CASE p.kind WHEN 'op' THEN p.ref WHEN 'call' THEN l.leaf_op_id END AS op_id,
           CASE p.kind
             WHEN 'call' THEN coalesce(l.category, 'runtime_other')
             WHEN 'op' THEN CASE WHEN p.ref IN (SELECT op_id FROM d2h_ops) THEN 'd2h_copy' END
             WHEN 'none' THEN 'python' WHEN 'gc' THEN 'python_gc' ELSE p.kind END AS category,
           l.name AS call_name
    FROM pieces p
    LEFT JOIN pl l ON p.kind = 'call' AND l.launch_id = p.ref
    WHERE p.ns > 0
)
SELECT n.device, n.g0 AS gap_start_ns, n.ns,
       CASE WHEN n.kind = 'op' AND n.category IS NULL
            THEN CASE WHEN c.collective THEN 'collective' ELSE 'operator' END ELSE n.category END AS category,
       n.call_name, n.op_id, o.name AS operator
FROM named n LEFT JOIN po o ON o.op_id = n.op_id LEFT JOIN coll c ON c.name = o.name
"""

_PIECES_INSERT = ("INSERT INTO idle_pieces SELECT $trace, * FROM ("
                  + _NAME_SQL.replace("{raw}", "SELECT * FROM ks_idle_pieces") + ") ORDER BY device, gap_start_ns")
_STAGES = (
    ("ks_idle_hw", _HW_SQL.replace("{gaps}", "SELECT device, gap_start_ns, gap_end_ns, cause FROM idle_gaps "
                                             "WHERE trace_id = $trace")),
    ("ks_idle_kept", _KEPT_SQL),
    ("ks_idle_pieces", "WITH " + _GC_CUT_SQL.replace("{raw}", _PIECES_RAW_SQL)
     + " SELECT device, g0, kind, ref, CAST(sum(ns) AS BIGINT) AS ns FROM gc_cut GROUP BY ALL"),
)


def insert_idle(con, trace_id: str) -> None:
    """Fill idle_gaps, queued_intervals and idle_pieces for one trace whose events, busy intervals and
    activity_splits are stored (the pieces read the gaps just inserted, through three temporary tables)."""
    for sql in (_GAPS_INSERT, _QUEUED_INSERT):
        con.execute(sql, {"trace": trace_id})
    try:
        for name, sql in _STAGES:
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS " + sql,
                        {"trace": trace_id} if "$trace" in sql else None)
        con.execute(_PIECES_INSERT, {"trace": trace_id})
    finally:
        for name, _sql in _STAGES:
            try:
                con.execute(f"DROP TABLE IF EXISTS {name}")
            except Exception:
                pass


# The host-wait idle rolled up (schema 011, idle_rollup): per cause category over every piece, per operator, and
# per (operator, category); ``gaps`` counts the distinct (device, gap start) each group's pieces lie in.
_ROLLUP_INSERT = """
INSERT INTO idle_rollup
WITH g AS (  -- one row per gap, operator and category: the distinct gaps of any group are rows of it
    SELECT device, gap_start_ns, operator, category, sum(ns) AS ns
    FROM idle_pieces WHERE trace_id = $trace GROUP BY ALL
)
SELECT $trace, NULL, category, CAST(sum(ns) AS BIGINT), count(DISTINCT (device, gap_start_ns))
FROM g GROUP BY category
UNION ALL
SELECT $trace, operator, NULL, CAST(sum(ns) AS BIGINT), count(DISTINCT (device, gap_start_ns))
FROM g WHERE operator IS NOT NULL GROUP BY operator
UNION ALL
SELECT $trace, operator, category, CAST(sum(ns) AS BIGINT), count(*)
FROM g WHERE operator IS NOT NULL GROUP BY operator, category
"""


def insert_idle_rollup(con, trace_id: str) -> None:
    """Fill idle_rollup for one trace whose idle_pieces are stored."""
    con.execute(_ROLLUP_INSERT, {"trace": trace_id})


# Per device, the idle time inside [$s, $e) in gaps of at least $min ns; the device with the most.
_LONG_IDLE_SQL = """
SELECT sum(least(gap_end_ns, $e) - greatest(gap_start_ns, $s))::BIGINT AS ns, count(*) AS n
FROM idle_gaps
WHERE trace_id = $t AND gap_end_ns - gap_start_ns >= $min AND gap_end_ns > $s AND gap_start_ns < $e
GROUP BY device ORDER BY ns DESC, device LIMIT 1"""


def long_idle(store, trace_id: str, start_ns: int, end_ns: int, min_ns: int) -> tuple[int, int]:
    """(ns, gaps): the GPU-idle time inside ``[start_ns, end_ns)`` in idle gaps of at least ``min_ns`` (each
    clipped to the window), on the device with the most such time, and how many gaps that is; (0, 0) when none."""
    rows = store.con.execute(_LONG_IDLE_SQL, {"t": trace_id, "s": start_ns, "e": end_ns, "min": min_ns}).fetchall()
    return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)
