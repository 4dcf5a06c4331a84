"""The launch-and-queue split (schema 003), a derivation step of storage/derivations.py: per GPU activity with
a launch call its split (``activity_splits``), the same summed per operator instance (``op_launch``, top-level
and leaf) and kernels per operator instance (``op_kernels``). Definitions: docs/metrics.md "Launch overhead"
and analysis/launch.py; every statement reads only the trace's stored rows (gpu_activities, launches,
cpu_ops), so the step runs at ingest after the event tables and, for traces stored before schema 003, as the
migration's backfill (the same function).
"""

from __future__ import annotations

from .intervals import union_length_sql

# The split of every GPU activity with a launch call (launch analysis, docs/metrics.md "Launch overhead"):
# lq = start - launch start; api = min(launch dur, lq); ready = end of the previous activity on the
# (device, stream) by (start, activity_id), else the launch end; queue = clamp(ready - launch end, 0, lq - api);
# dispatch = lq - api - queue; launch_delay = max(0, start - launch end); term = a kernel not launched by a
# graph, or a graph launch's first node (by start, then activity_id). {where} filters every table read.
_SPLITS_SQL = """INSERT INTO activity_splits
WITH a AS (
  SELECT trace_id, activity_id, kind, device, stream, start_ns, end_ns, is_graph, launch_id, leaf_op_id, top_op_id,
         lag(end_ns) OVER (PARTITION BY trace_id, device, stream ORDER BY start_ns, activity_id) AS prev_end
  FROM gpu_activities WHERE {where}
), graph_launch AS (
  SELECT DISTINCT trace_id, launch_id FROM gpu_activities WHERE {where} AND is_graph
), first_node AS (
  SELECT g.trace_id, min({{'s': g.start_ns, 'a': g.activity_id}}).a AS activity_id
  FROM gpu_activities g SEMI JOIN graph_launch USING (trace_id, launch_id)
  WHERE {where_g}
  GROUP BY g.trace_id, g.launch_id
), s AS (
  SELECT a.*, l.start_ns AS launch_start_ns, l.end_ns AS launch_end_ns, l.dur_ns AS launch_dur_ns, l.phase_id,
         l.top_op_id AS launch_top_op_id, l.leaf_op_id AS launch_leaf_op_id,
         a.start_ns - l.start_ns AS lq_ns, least(l.dur_ns, a.start_ns - l.start_ns) AS api_ns,
         coalesce(a.prev_end, l.end_ns) AS ready_ns, f.activity_id IS NOT NULL AS first_node
  FROM a
  LEFT JOIN (SELECT * FROM launches WHERE {where}) l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
  LEFT JOIN first_node f ON f.trace_id = a.trace_id AND f.activity_id = a.activity_id
  WHERE a.launch_id IS NOT NULL
)
SELECT trace_id, activity_id, kind, device, stream, start_ns, end_ns, is_graph, launch_id,
       launch_start_ns, launch_end_ns, prev_end,
       coalesce(top_op_id, launch_top_op_id), coalesce(leaf_op_id, launch_leaf_op_id), phase_id,
       lq_ns, api_ns,
       greatest(0, least(ready_ns - launch_end_ns, lq_ns - api_ns)),
       lq_ns - api_ns - greatest(0, least(ready_ns - launch_end_ns, lq_ns - api_ns)),
       greatest(0, start_ns - launch_end_ns),
       (kind = 'kernel' AND (NOT is_graph OR first_node))
FROM s ORDER BY trace_id, device, stream, start_ns, activity_id"""

# Per operator instance ({link} = top_op_id or leaf_op_id) with at least one TKLQT term, plus one row with
# a null op_id for the terms outside every operator: the terms' sums, graph kernels, the summed duration of
# the instance's launch calls that launched GPU work, and the length of the union of its activities.
_OP_LAUNCH_LINK_SQL = """
SELECT t.trace_id, '{name}' AS link, t.op_id, op.name, t.kernels, t.graph_launches, t.graph_kernels,
       t.tklqt_ns, t.api_ns, t.queue_ns, t.dispatch_ns, t.launch_delay_ns,
       coalesce(c.launch_api_ns, 0) AS launch_api_ns,
       CASE WHEN t.op_id IS NULL THEN 0 WHEN t.acts = 1 THEN t.lone_union_ns
            ELSE coalesce(un.gpu_union_ns, 0) END AS gpu_union_ns
FROM (
  SELECT trace_id, {link} AS op_id,
         count(*) FILTER (WHERE term AND kind = 'kernel' AND NOT is_graph) AS kernels,
         count(*) FILTER (WHERE term AND is_graph) AS graph_launches,
         count(*) FILTER (WHERE is_graph AND kind = 'kernel') AS graph_kernels,
         count(*) FILTER (WHERE term) AS terms,
         sum(lq_ns) FILTER (WHERE term) AS tklqt_ns, sum(api_ns) FILTER (WHERE term) AS api_ns,
         sum(queue_ns) FILTER (WHERE term) AS queue_ns, sum(dispatch_ns) FILTER (WHERE term) AS dispatch_ns,
         sum(launch_delay_ns) FILTER (WHERE term) AS launch_delay_ns,
         count(*) AS acts, max(greatest(0, end_ns - start_ns)) AS lone_union_ns
  FROM x GROUP BY 1, 2
) t
LEFT JOIN (
  SELECT trace_id, {link} AS op_id, sum(dur_ns) AS launch_api_ns
  FROM launches WHERE {where} AND activities > 0 AND {link} IS NOT NULL GROUP BY 1, 2
) c ON c.trace_id = t.trace_id AND c.op_id = t.op_id
LEFT JOIN (
  """ + union_length_sql("""(
    SELECT x.trace_id, x.{link} AS op_id, x.start_ns, x.end_ns
    FROM x SEMI JOIN (SELECT trace_id, {link} FROM x WHERE {link} IS NOT NULL
                      GROUP BY 1, 2 HAVING count(*) > 1 AND count(*) FILTER (WHERE term) > 0) m
      ON m.trace_id = x.trace_id AND m.{link} = x.{link})""", by=("trace_id", "op_id"), name="gpu_union_ns") + """
) un ON un.trace_id = t.trace_id AND un.op_id = t.op_id
LEFT JOIN (SELECT trace_id, op_id, name FROM cpu_ops WHERE {where}) op
  ON op.trace_id = t.trace_id AND op.op_id = t.op_id
WHERE t.terms > 0"""


# Kernels per operator instance ({link} = top_op_id or leaf_op_id; instances with at least one kernel):
# count and summed duration, with the operator's name; has_op is false when no cpu_ops row has that id.
_OP_KERNELS_LINK_SQL = """
SELECT i.trace_id, '{name}' AS link, i.op_id, o.name, o.op_id IS NOT NULL AS has_op, i.kernels, i.kernel_time_ns
FROM (
  SELECT trace_id, {link} AS op_id, count(*) AS kernels, sum(dur_ns) AS kernel_time_ns
  FROM gpu_activities WHERE {where} AND kind = 'kernel' AND {link} IS NOT NULL GROUP BY 1, 2
) i
LEFT JOIN (SELECT trace_id, op_id, name FROM cpu_ops WHERE {where}) o
  ON o.trace_id = i.trace_id AND o.op_id = i.op_id"""


_LINKS = (("top", "top_op_id"), ("leaf", "leaf_op_id"))
#: Every statement reads one trace's rows.
_WHERE = "trace_id = $tid"


def _op_launch_sql(links=_LINKS) -> str:
    return ("INSERT INTO op_launch\nWITH x AS (SELECT * FROM activity_splits WHERE " + _WHERE + ")"
            + "\nUNION ALL".join(_OP_LAUNCH_LINK_SQL.format(name=n, link=c, where=_WHERE) for n, c in links))


def _statements() -> list[str]:
    """activity_splits, then op_launch one link at a time (the two links in one statement ran out of a 256 MB
    memory limit on a 0.5M-kernel DDP rank; the rows are the same), then op_kernels."""
    splits = _SPLITS_SQL.format(where=_WHERE, where_g=_WHERE.replace("trace_id", "g.trace_id"))
    kernels = "INSERT INTO op_kernels" + "\nUNION ALL".join(
        _OP_KERNELS_LINK_SQL.format(name=n, link=c, where=_WHERE) for n, c in _LINKS)
    return [splits] + [_op_launch_sql((link,)) for link in _LINKS] + [kernels]


_STATEMENTS = _statements()


def insert_launch_splits(con, trace_id: str) -> None:
    """Fill activity_splits, op_launch and op_kernels for one trace whose events are stored."""
    for sql in _STATEMENTS:
        con.execute(sql, {"tid": trace_id})
