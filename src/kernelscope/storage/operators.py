"""Per-operator tables of one trace that no analysis returns: CPU time per operator name, and the GPU
activities attributed (at ingest) to each operator name (the dashboard's Operators page)."""

from __future__ import annotations

import pandas as pd

_OP_CPU_SQL = """
SELECT name, count(*) AS count, CAST(sum(dur_ns) AS BIGINT) AS cpu_ns FROM cpu_ops
WHERE trace_id = $t AND ({level}) GROUP BY name
"""

_OP_KERNELS_SQL = """
SELECT o.name AS op, g.name, g.kind, g.device, g.stream, count(*) AS count,
       CAST(sum(g.dur_ns) AS BIGINT) AS total_ns, CAST(round(avg(g.dur_ns)) AS BIGINT) AS mean_ns
FROM gpu_activities g JOIN cpu_ops o ON o.trace_id = $t AND o.op_id = g.{col}
WHERE g.trace_id = $t
GROUP BY ALL
"""


def op_cpu_times(store, trace_id: str, level: str = "leaf") -> pd.DataFrame:
    """Per operator name: ``count`` of instances and ``cpu_ns``, the sum of their durations (wall time on
    the CPU, children included). ``level`` 'top': top-level instances only (depth 0); 'leaf': every
    instance of the name."""
    cond = "coalesce(depth, 0) = 0" if level == "top" else "TRUE"
    return store.query(_OP_CPU_SQL.format(level=cond), {"t": trace_id})


def op_kernel_groups(store, trace_id: str, level: str = "leaf") -> pd.DataFrame:
    """The GPU activities attributed (at ingest) to an operator through their leaf operator (``level``
    'leaf') or top-level operator ('top'), grouped by operator name (``op``), activity name, kind, device
    and stream: count, total_ns (sum of durations) and mean_ns; every operator of the trace, in no order."""
    col = "top_op_id" if level == "top" else "leaf_op_id"
    return store.query(_OP_KERNELS_SQL.format(col=col), {"t": trace_id})
