"""nn.Module calls of one trace with the CPU and GPU time attributed to them, from the columns the
"python_context" step stores (storage/pycontext.py: python_calls.module_call_id, launches.module_call_id and
fwd_op_id, cpu_ops.fwd_op_id). Definitions: analysis/modules.py and docs/metrics.md "Modules".

``module_calls`` returns one row per ``nn.Module: <Class>_<k>`` call with its instance path and its own
(``*_self``) and inclusive numbers; ``module_totals`` the trace's kernel time inside and outside modules.
"""

from __future__ import annotations

import pandas as pd

from .pycontext import MODULE_PREFIX

_N = len(MODULE_PREFIX)

# Kernels per launch context: module call (innermost), backward (through a forward operator) or not.
_KERNELS = """
SELECT l.module_call_id, l.fwd_op_id IS NOT NULL AS bwd, count(*) AS kernels, sum(a.dur_ns) AS ns,
       count(DISTINCT l.launch_id) AS launches
FROM gpu_activities a JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
WHERE a.trace_id = $t AND a.kind = 'kernel'
GROUP BY ALL"""

_SQL_CALLS = f"""
WITH RECURSIVE mc AS (
    SELECT call_id, module_call_id AS parent_id, substr(name, {_N + 1}) AS module,
           regexp_replace(substr(name, {_N + 1}), '_[0-9]+$', '') AS class,
           pid, tid, start_ns, dur_ns
    FROM python_calls WHERE trace_id = $t AND starts_with(name, '{MODULE_PREFIX}')
), paths(call_id, path, depth) AS (
    SELECT call_id, module, 0 FROM mc WHERE parent_id IS NULL
    UNION ALL
    SELECT c.call_id, p.path || '/' || c.module, p.depth + 1 FROM mc c JOIN paths p ON c.parent_id = p.call_id
), anc(call_id, anc_id) AS (
    SELECT call_id, call_id FROM mc
    UNION ALL
    SELECT a.call_id, m.parent_id FROM anc a JOIN mc m ON m.call_id = a.anc_id WHERE m.parent_id IS NOT NULL
), k AS ({_KERNELS}
), cb AS (
    SELECT o.module_call_id, sum(o.dur_ns) AS ns
    FROM cpu_ops o LEFT JOIN cpu_ops p ON p.trace_id = o.trace_id AND p.op_id = o.parent_op_id
    WHERE o.trace_id = $t AND o.fwd_op_id IS NOT NULL AND p.fwd_op_id IS NULL AND o.module_call_id IS NOT NULL
    GROUP BY 1
), own AS (
    SELECT mc.call_id,
           coalesce(sum(k.ns) FILTER (WHERE NOT k.bwd), 0) AS gpu_fwd_self_ns,
           coalesce(sum(k.ns) FILTER (WHERE k.bwd), 0) AS gpu_bwd_self_ns,
           coalesce(sum(k.kernels), 0) AS kernels_self,
           coalesce(sum(k.launches), 0) AS launches_self,
           coalesce(any_value(cb.ns), 0) AS cpu_bwd_self_ns,
           coalesce((SELECT sum(c.dur_ns) FROM mc c WHERE c.parent_id = mc.call_id), 0) AS child_cpu_ns
    FROM mc LEFT JOIN k ON k.module_call_id = mc.call_id LEFT JOIN cb ON cb.module_call_id = mc.call_id
    GROUP BY mc.call_id
), incl AS (
    SELECT a.anc_id AS call_id, sum(o.gpu_fwd_self_ns) AS gpu_fwd_ns, sum(o.gpu_bwd_self_ns) AS gpu_bwd_ns,
           sum(o.kernels_self) AS kernels, sum(o.launches_self) AS launches, sum(o.cpu_bwd_self_ns) AS cpu_bwd_ns
    FROM anc a JOIN own o ON o.call_id = a.call_id GROUP BY 1
), same AS (
    SELECT DISTINCT a.call_id FROM anc a JOIN mc m ON m.call_id = a.call_id JOIN mc x ON x.call_id = a.anc_id
    WHERE a.anc_id <> a.call_id AND x.class = m.class
)
SELECT mc.call_id, mc.parent_id AS parent_call_id, mc.module, mc.class, p.path, p.depth, mc.pid, mc.tid,
       mc.start_ns, mc.dur_ns AS cpu_ns, CAST(mc.dur_ns - o.child_cpu_ns AS BIGINT) AS cpu_self_ns,
       CAST(i.cpu_bwd_ns AS BIGINT) AS cpu_bwd_ns,
       CAST(i.gpu_fwd_ns AS BIGINT) AS gpu_fwd_ns, CAST(i.gpu_bwd_ns AS BIGINT) AS gpu_bwd_ns,
       CAST(i.gpu_fwd_ns + i.gpu_bwd_ns AS BIGINT) AS gpu_ns,
       CAST(o.gpu_fwd_self_ns + o.gpu_bwd_self_ns AS BIGINT) AS gpu_self_ns,
       CAST(i.kernels AS BIGINT) AS kernels, CAST(o.kernels_self AS BIGINT) AS kernels_self,
       CAST(i.launches AS BIGINT) AS launches,
       mc.call_id IN (SELECT call_id FROM same) AS nested_in_same_class
FROM mc JOIN own o USING (call_id) JOIN incl i USING (call_id) LEFT JOIN paths p USING (call_id)
ORDER BY mc.start_ns, mc.call_id"""

_SQL_TOTALS = f"""
WITH k AS ({_KERNELS})
SELECT (SELECT CAST(coalesce(sum(dur_ns), 0) AS BIGINT) FROM gpu_activities WHERE trace_id = $t AND kind = 'kernel')
           AS kernel_time_ns,
       (SELECT count(*) FROM gpu_activities WHERE trace_id = $t AND kind = 'kernel') AS kernels,
       CAST(coalesce(sum(ns) FILTER (WHERE module_call_id IS NOT NULL), 0) AS BIGINT) AS module_kernel_ns,
       CAST(coalesce(sum(ns) FILTER (WHERE module_call_id IS NULL), 0) AS BIGINT) AS outside_kernel_ns,
       CAST(coalesce(sum(ns) FILTER (WHERE bwd), 0) AS BIGINT) AS bwd_kernel_ns,
       (SELECT CAST(coalesce(sum(a.dur_ns), 0) AS BIGINT) FROM gpu_activities a
        WHERE a.trace_id = $t AND a.kind = 'kernel' AND a.launch_id IS NULL) AS no_launch_kernel_ns
FROM k"""

_SQL_COUNT = f"""
SELECT count(*) AS n FROM python_calls WHERE trace_id = $t AND starts_with(name, '{MODULE_PREFIX}')"""

# Kernels outside every module, by the top-level operator their launch ran under.
_SQL_OUTSIDE = """
SELECT coalesce(t.name, '(no operator)') AS top_op, l.fwd_op_id IS NOT NULL AS backward, count(*) AS kernels,
       CAST(sum(a.dur_ns) AS BIGINT) AS gpu_ns
FROM gpu_activities a
JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
LEFT JOIN cpu_ops t ON t.trace_id = l.trace_id AND t.op_id = l.top_op_id
WHERE a.trace_id = $t AND a.kind = 'kernel' AND l.module_call_id IS NULL
GROUP BY ALL ORDER BY gpu_ns DESC, top_op"""


def module_call_count(store, trace_id: str) -> int:
    """How many nn.Module calls the trace recorded (0: it was not recorded with with_modules=True)."""
    return int(store.query(_SQL_COUNT, {"t": trace_id})["n"].iloc[0])


def module_calls(store, trace_id: str) -> pd.DataFrame:
    """One row per nn.Module call: call_id, parent_call_id (the enclosing module call), module (instance name,
    e.g. Qwen2DecoderLayer_3), class, path (instance names from the outermost module, '/'-joined), depth,
    pid, tid, start_ns, cpu_ns (its range), cpu_self_ns (minus its child module calls' ranges), cpu_bwd_ns
    (outermost backward operators mapped into it or its children), gpu_fwd_ns, gpu_bwd_ns, gpu_ns
    (kernels launched inside it, or by backward operators of forward operators inside it), gpu_self_ns and
    kernels_self (innermost module only), kernels, launches, nested_in_same_class (an enclosing call is of the
    same class)."""
    return store.query(_SQL_CALLS, {"t": trace_id})


def module_totals(store, trace_id: str) -> dict:
    """The trace's kernel time split by module context: kernel_time_ns, kernels (every kernel),
    module_kernel_ns (inside some module, forward or rolled-up backward), outside_kernel_ns (the rest: launched
    outside every module, or backward kernels whose forward operator was, or that have none), bwd_kernel_ns
    (kernels of backward operators with a forward operator), no_launch_kernel_ns (kernels without a launch
    call: in no module). module + outside + no_launch = kernel_time_ns."""
    row = store.query(_SQL_TOTALS, {"t": trace_id}).iloc[0]
    return {k: int(v) for k, v in row.items()}


def outside_modules(store, trace_id: str) -> pd.DataFrame:
    """Kernels with a launch call outside every module, by top-level operator (top_op, '(no operator)' when
    the launch had none) and whether they ran in backward: kernels, gpu_ns; largest first."""
    return store.query(_SQL_OUTSIDE, {"t": trace_id})
