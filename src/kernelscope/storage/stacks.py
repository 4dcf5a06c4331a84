"""Python frame paths of one trace with the CPU and GPU time attributed to them, from the columns the
"python_context" step stores (storage/pycontext.py: python_calls.stack_id, python_stacks, launches.py_call_id
and fwd_op_id). Definitions: analysis/stacks.py and docs/metrics.md "Call stacks".

``stack_nodes``: one row per distinct frame path (a flame graph's nodes) with inclusive and self numbers;
``frame_lines``: one row per frame (``file.py(123): function``) with each kernel, launch and call counted once
however often the frame recurs on a path; ``stack_totals``: the trace's kernel time with and without a stack.
"""

from __future__ import annotations

import pandas as pd

# Kernels per Python frame path of their launch call (the forward operator's for backward operators).
_KERNELS = """
SELECT c.stack_id, l.fwd_op_id IS NOT NULL AS bwd, count(*) AS kernels, sum(a.dur_ns) AS ns,
       count(DISTINCT l.launch_id) AS launches
FROM gpu_activities a
JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
JOIN python_calls c ON c.trace_id = l.trace_id AND c.call_id = l.py_call_id
WHERE a.trace_id = $t AND a.kind = 'kernel'
GROUP BY ALL"""

# Each distinct path once (one row per stack_id), its own numbers, and its ancestors-or-self (anc): the
# parent must be one level up, so a broken chain (crossing events) ends the walk instead of looping.
_BASE = f"""
WITH RECURSIVE s AS (
    SELECT stack_id, any_value(parent_stack_id) AS parent_stack_id, any_value(name) AS name,
           min(depth) AS depth
    FROM python_stacks WHERE trace_id = $t GROUP BY stack_id
), calls AS (
    SELECT stack_id, count(*) AS calls, sum(dur_ns) AS cpu_ns FROM python_calls
    WHERE trace_id = $t AND stack_id IS NOT NULL GROUP BY 1
), k AS ({_KERNELS}
), own AS (
    SELECT s.stack_id, s.parent_stack_id, s.name, s.depth,
           coalesce(any_value(c.calls), 0) AS calls, coalesce(any_value(c.cpu_ns), 0) AS cpu_ns,
           coalesce(sum(k.ns) FILTER (WHERE NOT k.bwd), 0) AS gpu_fwd_self_ns,
           coalesce(sum(k.ns) FILTER (WHERE k.bwd), 0) AS gpu_bwd_self_ns,
           coalesce(sum(k.kernels), 0) AS kernels_self, coalesce(sum(k.launches), 0) AS launches_self
    FROM s LEFT JOIN calls c ON c.stack_id = s.stack_id LEFT JOIN k ON k.stack_id = s.stack_id
    GROUP BY s.stack_id, s.parent_stack_id, s.name, s.depth
), anc(stack_id, anc_id, anc_name, anc_depth) AS (
    SELECT stack_id, stack_id, name, depth FROM s
    UNION ALL
    SELECT a.stack_id, p.stack_id, p.name, p.depth
    FROM anc a JOIN s x ON x.stack_id = a.anc_id JOIN s p ON p.stack_id = x.parent_stack_id AND p.depth = x.depth - 1
)"""

_SQL_NODES = _BASE + """
, incl AS (
    SELECT a.anc_id AS stack_id, sum(o.gpu_fwd_self_ns) AS gpu_fwd_ns, sum(o.gpu_bwd_self_ns) AS gpu_bwd_ns,
           sum(o.kernels_self) AS kernels, sum(o.launches_self) AS launches
    FROM anc a JOIN own o ON o.stack_id = a.stack_id GROUP BY 1
), kids AS (
    SELECT parent_stack_id AS stack_id, sum(cpu_ns) AS child_cpu_ns FROM own
    WHERE parent_stack_id IS NOT NULL GROUP BY 1
)
SELECT o.stack_id, CASE WHEN o.parent_stack_id IN (SELECT stack_id FROM s) THEN o.parent_stack_id END
           AS parent_stack_id,
       o.name, o.depth::INTEGER AS depth, o.calls,
       CAST(o.cpu_ns AS BIGINT) AS cpu_ns, CAST(o.cpu_ns - coalesce(kd.child_cpu_ns, 0) AS BIGINT) AS cpu_self_ns,
       CAST(i.gpu_fwd_ns + i.gpu_bwd_ns AS BIGINT) AS gpu_ns,
       CAST(o.gpu_fwd_self_ns + o.gpu_bwd_self_ns AS BIGINT) AS gpu_self_ns,
       CAST(i.gpu_bwd_ns AS BIGINT) AS gpu_bwd_ns,
       CAST(i.kernels AS BIGINT) AS kernels, CAST(o.kernels_self AS BIGINT) AS kernels_self,
       CAST(i.launches AS BIGINT) AS launches
FROM own o JOIN incl i USING (stack_id) LEFT JOIN kids kd USING (stack_id)
ORDER BY o.depth, o.stack_id"""

# Per frame name: a path counts once for every distinct name on it; CPU time from the paths where the name
# is outermost (its calls' time already holds any recursive call of the same frame).
_SQL_LINES = _BASE + """
, names AS (SELECT DISTINCT stack_id, anc_name AS name FROM anc),
outer_paths AS (
    SELECT o.stack_id FROM own o
    WHERE NOT EXISTS (SELECT 1 FROM anc a WHERE a.stack_id = o.stack_id AND a.anc_id <> o.stack_id
                                          AND a.anc_name IS NOT DISTINCT FROM o.name)
), g AS (
    SELECT n.name, sum(o.gpu_fwd_self_ns + o.gpu_bwd_self_ns) AS gpu_ns, sum(o.gpu_bwd_self_ns) AS gpu_bwd_ns,
           sum(o.kernels_self) AS kernels, sum(o.launches_self) AS launches
    FROM names n JOIN own o ON o.stack_id = n.stack_id GROUP BY 1
), c AS (
    SELECT name, sum(calls) AS calls, sum(gpu_fwd_self_ns + gpu_bwd_self_ns) AS gpu_self_ns,
           sum(cpu_ns) FILTER (WHERE stack_id IN (SELECT stack_id FROM outer_paths)) AS cpu_ns
    FROM own GROUP BY 1
)
SELECT c.name AS frame, CAST(c.calls AS BIGINT) AS calls, CAST(coalesce(c.cpu_ns, 0) AS BIGINT) AS cpu_ns,
       CAST(g.gpu_ns AS BIGINT) AS gpu_ns, CAST(c.gpu_self_ns AS BIGINT) AS gpu_self_ns,
       CAST(g.gpu_bwd_ns AS BIGINT) AS gpu_bwd_ns, CAST(g.kernels AS BIGINT) AS kernels,
       CAST(g.launches AS BIGINT) AS launches
FROM c JOIN g ON g.name IS NOT DISTINCT FROM c.name
ORDER BY gpu_ns DESC, cpu_ns DESC, frame"""

_SQL_TOTALS = """
SELECT (SELECT count(*) FROM python_calls WHERE trace_id = $t) AS python_calls,
       (SELECT count(DISTINCT stack_id) FROM python_stacks WHERE trace_id = $t) AS stacks,
       (SELECT CAST(coalesce(sum(dur_ns), 0) AS BIGINT) FROM python_calls WHERE trace_id = $t AND depth = 0)
           AS python_cpu_ns,
       CAST(coalesce(sum(a.dur_ns), 0) AS BIGINT) AS kernel_time_ns, count(a.activity_id) AS kernels,
       CAST(coalesce(sum(a.dur_ns) FILTER (WHERE l.py_call_id IS NOT NULL), 0) AS BIGINT) AS stack_kernel_ns,
       CAST(coalesce(sum(a.dur_ns) FILTER (WHERE l.py_call_id IS NOT NULL AND l.fwd_op_id IS NOT NULL), 0)
            AS BIGINT) AS bwd_kernel_ns,
       CAST(coalesce(sum(a.dur_ns) FILTER (WHERE l.launch_id IS NULL), 0) AS BIGINT) AS no_launch_kernel_ns
FROM gpu_activities a LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
WHERE a.trace_id = $t AND a.kind = 'kernel'"""


def python_call_count(store, trace_id: str) -> int:
    """How many python_function events the trace recorded (0: it was not recorded with with_stack=True)."""
    return int(store.query("SELECT count(*) AS n FROM python_calls WHERE trace_id = $t", {"t": trace_id})["n"].iloc[0])


def stack_nodes(store, trace_id: str) -> pd.DataFrame:
    """One row per distinct frame path: stack_id, parent_stack_id (null at the root, or when the parent path is
    missing), name (the path's last frame), depth, calls, cpu_ns (its calls' time), cpu_self_ns (minus the
    calls one level down), gpu_ns / gpu_bwd_ns / kernels / launches (kernels launched on this path or below;
    of them, through a backward operator's forward operator), gpu_self_ns and kernels_self (on this path
    exactly); by depth."""
    return store.query(_SQL_NODES, {"t": trace_id})


def frame_lines(store, trace_id: str) -> pd.DataFrame:
    """One row per frame name: frame, calls, cpu_ns (calls not inside a call of the same frame), gpu_ns,
    gpu_bwd_ns, kernels, launches (kernels whose launch had the frame on its path, each once), gpu_self_ns
    (the frame innermost); most GPU time first."""
    return store.query(_SQL_LINES, {"t": trace_id})


def stack_totals(store, trace_id: str) -> dict:
    """python_calls, stacks (distinct paths), python_cpu_ns (outermost calls' time), kernel_time_ns and kernels
    (every kernel), stack_kernel_ns (launched with a Python path), bwd_kernel_ns (of them through a backward
    operator), no_launch_kernel_ns (kernels without a launch call)."""
    row = store.query(_SQL_TOTALS, {"t": trace_id}).iloc[0]
    return {k: int(v) for k, v in row.items()}
