"""CUDA-graph replays attributed to operators, Triton kernels mapped to their compiled region, and
torch.compile guard / call overhead per step.

Definitions (docs/metrics.md, "Graphs and compile", is the canonical text; times are int ns):

- A **replay** is a launch call with ``launch_type = 'graph'`` (cudaGraphLaunch, ...); its kernels are the
  ``gpu_activities`` with its ``launch_id`` (``is_graph``), in start order, position ``pos`` = 0, 1, ...
- **Attribution by an eager twin** (option ``eager=TRACE``): the eager trace's kernels, in start order, are
  cut into iterations: the kernels launched inside each ``ProfilerStep`` annotation, else the whole trace.
  The reference is the first iteration with as many kernels as the replay (or, without one, the whole
  eager sequence taken modulo the replay size when it divides it). A replay kernel at ``pos`` is
  **matched** when the reference kernel at ``pos`` has the same name, grid and block; it then takes that
  kernel's leaf and top-level operator names. A replay whose kernel count fits no reference, or any
  unmatched kernel, falls back as below for its unmatched kernels.
- **Fallback attribution**: the replay's annotation (the phase enclosing the launch call), categorised by
  kernel name (kernels analysis rules).
- **Triton kernel**: name starts with ``triton_`` (Inductor prefixes poi/red/per/tem/...). Its **compiled
  region** is the ``## Call CompiledFxGraph <hash> ##`` annotation enclosing its launch call on the
  launching thread (none: ``null``).
- **Compile overhead per step** (per ``ProfilerStep`` annotation; the whole trace when there is none):
  ``guard_ns`` = summed duration of ``TorchDynamo Cache Lookup`` operators; ``compiled_call_ns`` = summed
  duration of the CompiledFxGraph annotations; ``compiled_launch_ns`` = summed duration of the launch calls
  inside them; ``compiled_call_overhead_ns`` = ``compiled_call_ns - compiled_launch_ns`` (host time of the
  region not spent in launch calls).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..errors import UsageError
from ..storage.queries import resolve_trace
from .kernels import category_case
from .result import Result

DESCRIPTION = "CUDA-graph replays attributed to operators (eager twin or annotation), Triton regions, compile overhead."

_SQL_REPLAY_KERNELS = """
SELECT l.launch_id, l.name AS launch_name, l.start_ns AS launch_start_ns, l.phase_id,
       an.name AS phase,
       a.activity_id, a.name, a.start_ns, a.dur_ns, a.grid_x, a.grid_y, a.grid_z, a.block_x, a.block_y, a.block_z,
       CAST(row_number() OVER (PARTITION BY l.launch_id ORDER BY a.start_ns, a.activity_id) - 1 AS BIGINT) AS pos,
       count(*) OVER (PARTITION BY l.launch_id) AS replay_kernels
FROM launches l
JOIN gpu_activities a ON a.trace_id = l.trace_id AND a.launch_id = l.launch_id AND a.kind = 'kernel'
LEFT JOIN annotations an ON an.trace_id = l.trace_id AND an.ann_id = l.phase_id
WHERE l.trace_id = $t AND l.launch_type = 'graph'
"""

# Eager kernels in start order with their iteration (enclosing ProfilerStep of the launch call, on the
# launching thread; -1 when none) and operator names.
_SQL_EAGER = """
SELECT a.activity_id, a.name, a.grid_x, a.grid_y, a.grid_z, a.block_x, a.block_y, a.block_z,
       lo.name AS leaf_op, tp.name AS top_op,
       coalesce((SELECT min(s.ann_id) FROM annotations s
                 WHERE s.trace_id = l.trace_id AND s.kind = 'step' AND s.pid = l.pid AND s.tid = l.tid
                   AND s.start_ns <= l.start_ns AND l.start_ns < s.end_ns), -1) AS iteration,
       a.start_ns
FROM gpu_activities a
LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
LEFT JOIN cpu_ops lo ON lo.trace_id = a.trace_id AND lo.op_id = a.leaf_op_id
LEFT JOIN cpu_ops tp ON tp.trace_id = a.trace_id AND tp.op_id = a.top_op_id
WHERE a.trace_id = $e AND a.kind = 'kernel'
ORDER BY a.start_ns, a.activity_id
"""

_SQL_TRITON = """
WITH tk AS (
  SELECT a.activity_id, a.name, a.dur_ns, l.pid, l.tid, l.start_ns AS launch_ns
  FROM gpu_activities a LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
  WHERE a.trace_id = $t AND a.kind = 'kernel' AND a.name LIKE 'triton\\_%' ESCAPE '\\'
)
SELECT r.name AS region, tk.name AS kernel, count(*) AS kernels, CAST(sum(tk.dur_ns) AS BIGINT) AS time_ns
FROM tk LEFT JOIN annotations r
  ON r.trace_id = $t AND r.kind = 'user' AND r.name LIKE '## Call CompiledFxGraph%'
 AND r.pid = tk.pid AND r.tid = tk.tid AND r.start_ns <= tk.launch_ns AND tk.launch_ns < r.end_ns
GROUP BY ALL ORDER BY time_ns DESC, kernel
"""

_SQL_OVERHEAD = """
WITH steps AS (
  SELECT ann_id, name, pid, tid, start_ns, end_ns FROM annotations WHERE trace_id = $t AND kind = 'step'
  UNION ALL
  SELECT -1, 'trace', NULL, NULL, start_ns, end_ns FROM traces
  WHERE trace_id = $t AND NOT EXISTS (SELECT 1 FROM annotations WHERE trace_id = $t AND kind = 'step')
), regions AS (
  SELECT ann_id, pid, tid, start_ns, end_ns, dur_ns FROM annotations
  WHERE trace_id = $t AND kind = 'user' AND name LIKE '## Call CompiledFxGraph%'
), region_launch AS (
  SELECT r.ann_id, CAST(coalesce(sum(l.dur_ns), 0) AS BIGINT) AS launch_ns, count(l.launch_id) AS launches
  FROM regions r LEFT JOIN launches l
    ON l.trace_id = $t AND l.pid = r.pid AND l.tid = r.tid AND l.start_ns >= r.start_ns AND l.end_ns <= r.end_ns
  GROUP BY r.ann_id
)
SELECT s.ann_id AS step_id, s.name AS step,
  (SELECT CAST(coalesce(sum(o.dur_ns), 0) AS BIGINT) FROM cpu_ops o
    WHERE o.trace_id = $t AND o.name = 'TorchDynamo Cache Lookup'
      AND (s.pid IS NULL OR (o.pid = s.pid AND o.tid = s.tid))
      AND o.start_ns >= s.start_ns AND o.start_ns < s.end_ns) AS guard_ns,
  (SELECT count(*) FROM regions r WHERE (s.pid IS NULL OR (r.pid = s.pid AND r.tid = s.tid))
      AND r.start_ns >= s.start_ns AND r.start_ns < s.end_ns) AS compiled_calls,
  (SELECT CAST(coalesce(sum(r.dur_ns), 0) AS BIGINT) FROM regions r
    WHERE (s.pid IS NULL OR (r.pid = s.pid AND r.tid = s.tid))
      AND r.start_ns >= s.start_ns AND r.start_ns < s.end_ns) AS compiled_call_ns,
  (SELECT CAST(coalesce(sum(rl.launch_ns), 0) AS BIGINT) FROM regions r JOIN region_launch rl USING (ann_id)
    WHERE (s.pid IS NULL OR (r.pid = s.pid AND r.tid = s.tid))
      AND r.start_ns >= s.start_ns AND r.start_ns < s.end_ns) AS compiled_launch_ns
FROM steps s ORDER BY s.start_ns
"""


def _sig(df: pd.DataFrame) -> pd.Series:
    cols = ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    return df[cols].astype(str).agg("|".join, axis=1)


def _reference(eager: pd.DataFrame, n: int) -> pd.DataFrame | None:
    """The eager kernels one replay of ``n`` kernels is compared with (see the module docstring)."""
    for _, grp in eager[eager.iteration >= 0].groupby("iteration", sort=True):
        if len(grp) == n:
            return grp.reset_index(drop=True)
    if n and len(eager) % n == 0:
        return eager.iloc[:n].reset_index(drop=True)
    return None


def graphs(store, trace_id: str, eager: str | None = None) -> Result:
    """Graph replays, Triton regions and compile overhead of one trace (definitions in the module docstring)."""
    t = trace_id
    warnings: list[str] = []
    rk = store.query(_SQL_REPLAY_KERNELS, {"t": t})
    rk["op"] = None
    rk["top_op"] = None
    rk["matched"] = False
    eager_id = None
    if eager is not None:
        eager_id = resolve_trace(store, eager)
        if eager_id == t:
            raise UsageError("eager= names the graph trace itself; give the eager twin's trace id or name.")
        ek = store.query(_SQL_EAGER, {"e": eager_id})
        if not len(ek):
            warnings.append(f"eager trace {eager_id} has no kernels: replays attributed to their annotation.")
        for lid, grp in rk.groupby("launch_id", sort=False):
            ref = _reference(ek, len(grp)) if len(ek) else None
            if ref is None:
                warnings.append(f"replay {lid} ({len(grp)} kernels) fits no eager iteration: attributed to "
                                "its annotation.")
                continue
            g = grp.sort_values("pos")
            rsig = _sig(g).to_numpy()
            esig = _sig(ref).to_numpy()[g["pos"].to_numpy() % len(ref)]
            ok = rsig == esig
            idx = g.index[ok]
            epos = g["pos"].to_numpy()[ok] % len(ref)
            rk.loc[idx, "matched"] = True
            rk.loc[idx, "op"] = ref["leaf_op"].to_numpy()[epos]
            rk.loc[idx, "top_op"] = ref["top_op"].to_numpy()[epos]
            if (~ok).any():
                first = int(g["pos"].to_numpy()[~ok][0])
                warnings.append(f"replay {lid}: {int((~ok).sum())} of {len(g)} kernels differ from the eager "
                                f"twin (first at position {first}): those fall back to the annotation.")
    # categories by kernel name (op rules would need the eager op: use it when matched)
    if len(rk):
        case, params = category_case("name", "op")
        store_df = rk[["activity_id", "name", "op"]].copy()
        cats = _categorise(store, store_df, case, params)
        rk = rk.merge(cats, on="activity_id", how="left")
    else:
        rk["category"] = None
    rk["attributed_to"] = rk["op"].where(rk["matched"], rk["phase"])
    rk["source"] = rk["matched"].map({True: "eager", False: "annotation"})

    graph_ops = (rk.groupby(["source", "attributed_to", "category"], dropna=False)
                 .agg(kernels=("dur_ns", "size"), kernel_time_ns=("dur_ns", "sum")).reset_index()
                 .sort_values(["kernel_time_ns", "attributed_to"], ascending=[False, True]))
    graph_ops["kernel_time_ns"] = graph_ops["kernel_time_ns"].astype("int64")
    replays = (rk.groupby("launch_id").agg(
        launch_name=("launch_name", "first"), phase=("phase", "first"), kernels=("dur_ns", "size"),
        kernel_time_ns=("dur_ns", "sum"), first_start_ns=("start_ns", "min"),
        launch_start_ns=("launch_start_ns", "first"), matched=("matched", "sum")).reset_index())
    replays["launch_to_first_kernel_ns"] = replays["first_start_ns"] - replays["launch_start_ns"]
    replays = replays.drop(columns=["first_start_ns", "launch_start_ns"])
    for c in ("kernel_time_ns", "matched", "launch_to_first_kernel_ns"):
        replays[c] = replays[c].astype("int64")

    triton = store.query(_SQL_TRITON, {"t": t})
    overhead = store.query(_SQL_OVERHEAD, {"t": t})
    overhead["compiled_call_overhead_ns"] = (overhead["compiled_call_ns"]
                                             - overhead["compiled_launch_ns"]).astype("int64")

    counts = store.query(
        """SELECT count(*) FILTER (WHERE is_graph) AS graph_kernels,
                  count(*) FILTER (WHERE is_graph AND launch_id IS NULL) AS graph_kernels_without_launch,
                  CAST(coalesce(sum(dur_ns) FILTER (WHERE is_graph), 0) AS BIGINT) AS graph_kernel_ns
           FROM gpu_activities WHERE trace_id = $t AND kind = 'kernel'""", {"t": t}).iloc[0]
    n_rk = len(rk)
    matched = int(rk["matched"].sum()) if n_rk else 0
    if int(counts["graph_kernels_without_launch"]):
        warnings.append(f"{int(counts['graph_kernels_without_launch'])} graph kernels have no launch call in the "
                        "trace (a replay launched before the profiler started): not attributed.")
    scalars: dict[str, Any] = {
        "graph_launches": int(rk["launch_id"].nunique()) if n_rk else 0,
        "graph_kernels": int(counts["graph_kernels"]),
        "graph_kernel_ns": int(counts["graph_kernel_ns"]),
        "eager_trace": eager_id,
        "matched_kernels": matched,
        "matched_share": (matched / n_rk) if n_rk else None,
        "triton_kernels": int(triton["kernels"].sum()) if len(triton) else 0,
        "triton_kernel_ns": int(triton["time_ns"].sum()) if len(triton) else 0,
        "guard_ns": int(overhead["guard_ns"].sum()) if len(overhead) else 0,
        "compiled_call_overhead_ns": int(overhead["compiled_call_overhead_ns"].sum()) if len(overhead) else 0,
    }
    trust = {
        "graph_kernels_without_launch": int(counts["graph_kernels_without_launch"]),
        "triton_kernels_without_region": (int(triton.loc[triton["region"].isna(), "kernels"].sum())
                                          if len(triton) else 0),
        "attribution": "eager twin (order, count, name, grid, block)" if eager_id else "replay annotation",
    }
    return Result(name="graphs", definition=__doc__.strip(), scalars=scalars,
                  tables={"replays": replays, "graph_ops": graph_ops, "triton_regions": triton,
                          "compile_overhead": overhead},
                  warnings=warnings, trust=trust)


def _categorise(store, df: pd.DataFrame, case: str, params: dict) -> pd.DataFrame:
    """Category of each (activity_id, name, op) row through the same SQL rules as the kernels analysis."""
    rows = [(int(a), n, o) for a, n, o in df.itertuples(index=False, name=None)]
    sql = (f"SELECT activity_id, {case} AS category FROM "
           "(SELECT unnest($ids) AS activity_id, unnest($names) AS name, unnest($ops) AS op)")
    return store.query(sql, dict(params, ids=[r[0] for r in rows], names=[r[1] for r in rows],
                                 ops=[None if pd.isna(r[2]) else r[2] for r in rows]))
