"""Two per-trace tables of schema 013, each the step of storage/derivations.py named after it, run at ingest and,
for traces stored before schema 013, as the migration's backfill:

- ``leaf_instances``: the GPU time of each leaf operator instance (after the signatures step);
- ``stream_overlaps``: per (device, stream), the activities that start before an earlier one has ended.

An instance is a leaf operator (``gpu_activities.leaf_op_id``) with at least one GPU activity. Its GPU time is
the union of its activity intervals: one activity, its duration; two, the sum less their overlap; more (rare),
the union by the one definition of storage/intervals.py. ``hint`` is the largest element size its kernels name
(``cat`` kernels name ``OpaqueType<N>``). The bandwidth analysis groups these rows by (signature, hint, device)
and models each group once (analysis/bandwidth.py).
"""

from __future__ import annotations

from .intervals import union_length_sql

_INSERT = """
INSERT INTO leaf_instances
WITH a AS (
  SELECT leaf_op_id AS op_id, leaf_sig_id, device, start_ns, end_ns, dur_ns, name
  FROM gpu_activities WHERE trace_id = $t AND leaf_op_id IS NOT NULL
), per AS (
  SELECT op_id, any_value(leaf_sig_id) AS sig_id, min(device) AS device, count(*) AS activities,
         CASE WHEN count(*) = 1 THEN sum(dur_ns)
              WHEN count(*) = 2 THEN sum(dur_ns) - greatest(0, min(end_ns) - max(start_ns)) END AS gpu_ns,
         max(nullif(regexp_extract(name, 'OpaqueType<(\\d+)u?>', 1), '')) FILTER (WHERE contains(name, 'OpaqueType<'))
           AS hint
  FROM a GROUP BY op_id
), many AS (
""" + union_length_sql(
    "(SELECT op_id, start_ns, end_ns FROM a WHERE op_id IN (SELECT op_id FROM per WHERE activities > 2))",
    by=("op_id",), name="gpu_ns") + """
)
SELECT $t, per.op_id, per.sig_id, per.device, per.activities,
       CAST(coalesce(per.gpu_ns, many.gpu_ns, 0) AS BIGINT), per.hint
FROM per LEFT JOIN many ON many.op_id = per.op_id
ORDER BY per.op_id
"""


# An activity overlaps its stream when it starts before an earlier-starting activity on the same (device, stream)
# has ended; one row per stream with activities.
_OVERLAPS = """
INSERT INTO stream_overlaps
SELECT $t, device, stream, count(*), count(*) FILTER (WHERE start_ns < prev_end) FROM (
  SELECT device, stream, start_ns,
         max(end_ns) OVER (PARTITION BY device, stream ORDER BY start_ns, activity_id
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM gpu_activities WHERE trace_id = $t
)
GROUP BY device, stream ORDER BY device, stream
"""


def insert_stream_overlaps(con, trace_id: str) -> None:
    """Fill stream_overlaps for one stored trace."""
    con.execute(_OVERLAPS, {"t": trace_id})


def insert_leaf_instances(con, trace_id: str) -> None:
    """Fill leaf_instances for one stored trace (its activities' leaf_sig_id set by the signatures step)."""
    con.execute(_INSERT, {"t": trace_id})
