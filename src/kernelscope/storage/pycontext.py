"""Python context of every operator and launch (schema 010): the nesting of ``python_function`` events, the
nn.Module ranges among them, and backward operators mapped to the forward operator that made their autograd
node. ``insert_python_context`` is the "python_context" step of storage/derivations.py; it reads stored rows
only, so a migration's backfill runs it as ingest does.

Definitions (docs/metrics.md, "Modules" and "Call stacks"):

- A **Python call** is a ``python_function`` event (``python_calls``); an **nn.Module call** is one named
  ``nn.Module: <Class>_<k>`` (torch.profiler's with_modules range: class name and per-class instance index).
  Python calls of one host thread (pid, tid) nest strictly; a call is open at t when start <= t < end. Nesting
  is a sweep per thread in the order (start asc, end desc, id): ``depth`` = calls open at its start before it,
  ``parent_call_id`` = the innermost of them, ``module_call_id`` = the innermost open nn.Module call (for an
  nn.Module call: the module that called it). The profiler's own 'Python id'/'Python parent id' are not kept;
  time containment gives the same tree on strictly nested events.
- ``stack_id`` names the call's frame path (the names of the open calls from the thread's outermost to the call,
  with their depths): the sum modulo 2^63-25 of ``hash(name, depth)`` over the path, a running sum in the same
  sweep. ``python_stacks`` holds each distinct path once: (stack_id, parent_stack_id, name, depth).
- A **backward node** is a cpu_op with a ``Sequence number`` and a ``Fwd thread id`` > 0 (autograd's
  ``evaluate_function: XBackward0`` and ``XBackward0``). Its **forward operator** is the latest-starting cpu_op
  of the same process with the same sequence number, no forward thread id (0 or none) and a start at or before
  the node's: the rule by which torch.profiler draws its ``fwdbwd`` flows (one per node, to the last forward
  operator of that number). ``cpu_ops.fwd_op_id`` of any operator = the forward operator of the innermost
  backward node enclosing it (itself included) on its thread; null outside backward.
- ``cpu_ops.py_call_id`` / ``module_call_id``: the innermost Python call / nn.Module call open at the operator's
  start on its thread; for a backward operator (fwd_op_id set) those of its forward operator instead (the
  autograd thread runs no Python).
- ``launches.py_call_id`` / ``module_call_id`` / ``fwd_op_id``: for a launch call whose leaf operator is a
  backward operator, the leaf operator's (so the forward operator's); otherwise the innermost Python call /
  nn.Module call open at the call's start on its thread, and no forward operator.

All of it is set-based SQL (window sums and ASOF joins), as storage/derive.py computes operator nesting.
"""

from __future__ import annotations

#: Stand-in for a null pid/tid, so threads compare equal in joins.
_NULL_KEY = -(2**62)
#: Modulus of the stack hash sum (a prime below 2^63, so stack ids are non-negative BIGINTs).
STACK_MOD = 2**63 - 25
MODULE_PREFIX = "nn.Module: "

_TEMPS = ("ks_py_open", "ks_py_inner", "ks_py_calls", "ks_py_points", "ks_bw_open", "ks_bw_node")

# Python calls (k = 0) and the points looked up among them on the threads that have Python calls: operator
# starts (k = 1), launch starts (k = 2). hn: the hash of a call's name (its frame hash also takes its depth).
_ITEMS = f"""
WITH c AS (
    SELECT call_id, coalesce(pid, {_NULL_KEY}) AS p, coalesce(tid, {_NULL_KEY}) AS t, start_ns, end_ns, name
    FROM python_calls WHERE trace_id = $trace
), threads AS (SELECT DISTINCT p, t FROM c)
SELECT 0 AS k, call_id AS id, p, t, start_ns AS s, greatest(end_ns, start_ns) AS e,
       starts_with(coalesce(name, ''), '{MODULE_PREFIX}')::INTEGER AS m, hash(coalesce(name, '')) AS hn
FROM c
UNION ALL
SELECT 1, o.op_id, h.p, h.t, o.start_ns, o.start_ns, 0, NULL
FROM cpu_ops o JOIN threads h ON h.p = coalesce(o.pid, {_NULL_KEY}) AND h.t = coalesce(o.tid, {_NULL_KEY})
WHERE o.trace_id = $trace
UNION ALL
SELECT 2, l.launch_id, h.p, h.t, l.start_ns, l.start_ns, 0, NULL
FROM launches l JOIN threads h ON h.p = coalesce(l.pid, {_NULL_KEY}) AND h.t = coalesce(l.tid, {_NULL_KEY})
WHERE l.trace_id = $trace"""


def _open_sql(items: str) -> str:
    """Per item of ``items`` (columns k, id, p, t, s, e, m, hn; k = 0: an interval, else a point at s), its
    columns and:
    ``pos`` (its rank in the sweep order (s asc, e desc, k, id) of its thread p, t), ``od`` = intervals open
    just before it, ``om`` = those of them with m = 1. An interval adds at its start and removes at its end;
    at one time, ends of positive-length intervals come before starts, and an interval's start before its
    own end (a zero-length interval contains nothing)."""
    return f"""
WITH it AS (
    SELECT *, row_number() OVER (PARTITION BY p, t ORDER BY s, e DESC, k, id) AS pos FROM ({items})
), stream AS (
    SELECT p, t, s AS time, 1 AS ph, pos, 0 AS sub, k, id, s, e, m, hn,
           (k = 0)::INTEGER AS dc, CASE WHEN k = 0 THEN m ELSE 0 END AS dm
    FROM it
    UNION ALL
    SELECT p, t, e, CASE WHEN e > s THEN 0 ELSE 1 END, pos, 1, k, NULL, NULL, NULL, NULL, NULL, -1, -m
    FROM it WHERE k = 0
)
SELECT p, t, pos, k, id, s, e, m, hn, sum(dc) OVER w - dc AS od, sum(dm) OVER w - dm AS om
FROM stream
WINDOW w AS (PARTITION BY p, t ORDER BY time, ph, pos, sub ROWS UNBOUNDED PRECEDING)
QUALIFY sub = 0"""


def _innermost_sql(opened: str, flag: str = "") -> str:
    """Per item of ``opened`` (rows of ``_open_sql``): ``inner`` = the innermost interval open before it
    (the latest-placed interval of depth od - 1 before it) and ``inner_m`` = the innermost open interval among
    those counted by ``om`` (the latest of those with om-depth om - 1). On strictly nested intervals the open
    ones form a chain, so these ASOF joins equal a stack sweep."""
    return f"""
WITH iv AS (SELECT p, t, pos, id, od AS d FROM {opened} WHERE k = 0),
ivm AS (SELECT p, t, pos, id, om AS d FROM {opened} WHERE k = 0 {flag}),
x AS (SELECT *, od - 1 AS up_d, om - 1 AS up_m FROM {opened})
SELECT x.k, x.id, x.od, x.om, u.id AS inner_id, v.id AS inner_m
FROM x
ASOF LEFT JOIN iv u ON u.p = x.p AND u.t = x.t AND u.d = x.up_d AND x.pos > u.pos
ASOF LEFT JOIN ivm v ON v.p = x.p AND v.t = x.t AND v.d = x.up_m AND x.pos > v.pos"""


# Backward nodes (k = 0) and every operator of a thread that has any (k = 1).
_BW_ITEMS = f"""
WITH nodes AS (
    SELECT op_id, coalesce(pid, {_NULL_KEY}) AS p, coalesce(tid, {_NULL_KEY}) AS t, start_ns, end_ns FROM cpu_ops
    WHERE trace_id = $trace AND seq_number >= 0 AND fwd_thread_id > 0
), threads AS (SELECT DISTINCT p, t FROM nodes)
SELECT 0 AS k, op_id AS id, p, t, start_ns AS s, greatest(end_ns, start_ns) AS e, 1 AS m, NULL::UBIGINT AS hn
FROM nodes
UNION ALL
SELECT 1, o.op_id, h.p, h.t, o.start_ns, o.start_ns, 0, NULL
FROM cpu_ops o JOIN threads h ON h.p = coalesce(o.pid, {_NULL_KEY}) AND h.t = coalesce(o.tid, {_NULL_KEY})
WHERE o.trace_id = $trace"""

# node op -> its forward operator (ASOF: the latest forward op of the same number starting at or before it)
_BW_NODE = f"""
WITH nodes AS (
    SELECT op_id, coalesce(pid, {_NULL_KEY}) AS p, seq_number, start_ns FROM cpu_ops
    WHERE trace_id = $trace AND seq_number >= 0 AND fwd_thread_id > 0
), fwd AS (
    SELECT op_id, coalesce(pid, {_NULL_KEY}) AS p, seq_number, start_ns FROM cpu_ops
    WHERE trace_id = $trace AND seq_number >= 0 AND coalesce(fwd_thread_id, 0) = 0
)
SELECT n.op_id, f.op_id AS fwd_op_id
FROM nodes n ASOF LEFT JOIN fwd f ON f.p = n.p AND f.seq_number = n.seq_number AND f.start_ns <= n.start_ns"""


def _stack_sql() -> str:
    """Per Python call (rows of ks_py_open): its depth, stack_id and its parent's (the running sum of
    hash(name, depth) over the calls open at its start, plus its own; see the module docstring)."""
    return f"""
WITH c AS (
    SELECT p, t, pos, s, e, id, od AS depth, hash(hn, od)::HUGEINT AS h FROM ks_py_open WHERE k = 0
), stream AS (
    SELECT p, t, s AS time, 1 AS ph, pos, 0 AS sub, h AS dh, id, depth FROM c
    UNION ALL
    SELECT p, t, e, CASE WHEN e > s THEN 0 ELSE 1 END, pos, 1, -h, NULL, NULL FROM c
)
SELECT id, depth,
       CAST((sum(dh) OVER w - dh) % {STACK_MOD} AS BIGINT) AS parent_stack_id,
       CAST(sum(dh) OVER w % {STACK_MOD} AS BIGINT) AS stack_id
FROM stream
WINDOW w AS (PARTITION BY p, t ORDER BY time, ph, pos, sub ROWS UNBOUNDED PRECEDING)
QUALIFY sub = 0"""


def _has(con, sql: str, trace_id: str) -> bool:
    return con.execute(sql, {"trace": trace_id}).fetchone()[0] > 0


def _temp(con, name: str, sql: str, trace_id: str | None = None) -> None:
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}", {"trace": trace_id} if "$trace" in sql else None)


def _python(con, trace_id: str) -> None:
    """Nesting, stacks and modules of the Python calls; the innermost call and module of each operator and
    launch start (temp table ks_py_points: k, id, py_call_id, module_call_id)."""
    _temp(con, "ks_py_open", _open_sql(_ITEMS), trace_id)
    _temp(con, "ks_py_inner", _innermost_sql("ks_py_open", "AND m = 1"))
    _temp(con, "ks_py_calls", f"SELECT * FROM ({_stack_sql()})")
    con.execute("""
        UPDATE python_calls SET parent_call_id = n.inner_id, depth = n.od::INTEGER, module_call_id = n.inner_m,
                                stack_id = s.stack_id
        FROM ks_py_inner n JOIN ks_py_calls s ON s.id = n.id
        WHERE python_calls.trace_id = $trace AND n.k = 0 AND python_calls.call_id = n.id""", {"trace": trace_id})
    con.execute("""
        INSERT INTO python_stacks
        SELECT $trace, s.stack_id, any_value(CASE WHEN s.depth > 0 THEN s.parent_stack_id END), any_value(c.name),
               min(s.depth)::INTEGER
        FROM ks_py_calls s JOIN python_calls c ON c.trace_id = $trace AND c.call_id = s.id
        GROUP BY s.stack_id ORDER BY 5, 2""", {"trace": trace_id})
    _temp(con, "ks_py_points", "SELECT k, id, inner_id AS py_call_id, inner_m AS module_call_id "
                               "FROM ks_py_inner WHERE k > 0")


def insert_python_context(con, trace_id: str) -> None:
    """Set the Python/module context columns of one stored trace's python_calls, cpu_ops and launches and
    fill its python_stacks (definitions in the module docstring)."""
    t = {"trace": trace_id}
    has_py = _has(con, "SELECT count(*) FROM python_calls WHERE trace_id = $trace", trace_id)
    has_bw = _has(con, "SELECT count(*) FROM cpu_ops WHERE trace_id = $trace AND seq_number >= 0 "
                       "AND fwd_thread_id > 0", trace_id)
    if not has_py and not has_bw:
        return
    try:
        if has_py:
            _python(con, trace_id)
        else:
            _temp(con, "ks_py_points", "SELECT 0 AS k, 0::BIGINT AS id, NULL::BIGINT AS py_call_id, "
                                       "NULL::BIGINT AS module_call_id WHERE false")
        if has_bw:
            _temp(con, "ks_bw_open", _open_sql(_BW_ITEMS), trace_id)
            _temp(con, "ks_bw_node", f"""
                SELECT n.id AS op_id, coalesce(CASE WHEN n.k = 0 THEN n.id END, n.inner_id) AS node,
                       f.fwd_op_id
                FROM ({_innermost_sql('ks_bw_open')}) n
                LEFT JOIN ({_BW_NODE}) f ON f.op_id = coalesce(CASE WHEN n.k = 0 THEN n.id END, n.inner_id)
                QUALIFY row_number() OVER (PARTITION BY n.id ORDER BY n.k) = 1""", trace_id)
        else:
            _temp(con, "ks_bw_node", "SELECT 0::BIGINT AS op_id, NULL::BIGINT AS node, NULL::BIGINT AS fwd_op_id "
                                     "WHERE false")
        con.execute("""
            UPDATE cpu_ops SET fwd_op_id = m.fwd_op_id, py_call_id = m.py_call_id, module_call_id = m.module_call_id
            FROM (SELECT o.op_id, b.fwd_op_id,
                         CASE WHEN b.fwd_op_id IS NULL THEN own.py_call_id ELSE fp.py_call_id END AS py_call_id,
                         CASE WHEN b.fwd_op_id IS NULL THEN own.module_call_id ELSE fp.module_call_id END
                             AS module_call_id
                  FROM (SELECT op_id FROM cpu_ops WHERE trace_id = $trace) o
                  LEFT JOIN ks_bw_node b ON b.op_id = o.op_id
                  LEFT JOIN ks_py_points own ON own.k = 1 AND own.id = o.op_id
                  LEFT JOIN ks_py_points fp ON fp.k = 1 AND fp.id = b.fwd_op_id) m
            WHERE cpu_ops.trace_id = $trace AND cpu_ops.op_id = m.op_id
              AND (m.fwd_op_id IS NOT NULL OR m.py_call_id IS NOT NULL OR m.module_call_id IS NOT NULL)""", t)
        con.execute("""
            UPDATE launches SET fwd_op_id = m.fwd_op_id, py_call_id = m.py_call_id, module_call_id = m.module_call_id
            FROM (SELECT l.launch_id, o.fwd_op_id,
                         CASE WHEN o.fwd_op_id IS NULL THEN own.py_call_id ELSE o.py_call_id END AS py_call_id,
                         CASE WHEN o.fwd_op_id IS NULL THEN own.module_call_id ELSE o.module_call_id END
                             AS module_call_id
                  FROM (SELECT launch_id, leaf_op_id FROM launches WHERE trace_id = $trace) l
                  LEFT JOIN (SELECT op_id, fwd_op_id, py_call_id, module_call_id FROM cpu_ops
                             WHERE trace_id = $trace) o ON o.op_id = l.leaf_op_id
                  LEFT JOIN ks_py_points own ON own.k = 2 AND own.id = l.launch_id) m
            WHERE launches.trace_id = $trace AND launches.launch_id = m.launch_id
              AND (m.fwd_op_id IS NOT NULL OR m.py_call_id IS NOT NULL OR m.module_call_id IS NOT NULL)""", t)
    finally:
        for name in _TEMPS:
            try:
                con.execute(f"DROP TABLE IF EXISTS {name}")
            except Exception:
                pass
