"""Launch overhead: launch-and-queue time split into api + queue + dispatch, TKLQT, mean queue depth.

Definitions (docs/metrics.md "Launch overhead" is the canonical text; every time is integer ns):

- GPU activity k (kernel, memcpy or memset) with a launch call L (the host runtime/driver call with the
  same correlation id, linked at ingest as ``gpu_activities.launch_id``):
  ``lq = start(k) - start(L)``; ``api = min(dur(L), lq)``; ``ready`` = end of the previous GPU activity
  on k's (device, stream) ordered by start (the end of L when the stream had none before);
  ``queue = clamp(ready - end(L), 0, lq - api)``; ``dispatch = lq - api - queue`` (so
  ``api + queue + dispatch = lq`` exactly); ``launch_delay = max(0, start(k) - end(L))``.
  Host overhead is api + dispatch; queue is the GPU-bound signal.
- ``tklqt_ns`` (total kernel launch-and-queue time): the sum of ``lq`` over kernels not launched by a
  graph, plus one ``lq`` per graph launch (its first node's start - the graph launch's start).
  ``api_ns``, ``queue_ns``, ``dispatch_ns`` and ``launch_delay_ns`` are summed over the same terms (a
  graph launch contributes its first node's split), so ``api_ns + queue_ns + dispatch_ns = tklqt_ns``.
- ``tklqt_naive_ns``: the per-node sum of ``lq`` over every kernel, graph nodes included. It grows with
  the square of a graph's size and is NOT a launch cost; it is kept for comparison only.
- memcpy and memset launches are left out of TKLQT and reported apart (``by_kind`` table).
- Negative ``lq`` (the activity starts before its launch call: host/GPU clock skew) is counted in
  ``negative_lq`` and flagged, never clamped.
- ``mean_queue_depth`` = ``tklqt_ns / gpu_span_ns`` (Little's law: TKLQT is the area under the number of
  launched-but-not-started kernels; ``gpu_span_ns`` = first GPU activity start to last end).
- ``per_op`` / ``per_leaf_op``: TKLQT and its split per top-level / leaf operator name (instances summed,
  ``calls`` counts them); a graph launch's term goes to its launch call's operator; terms whose launch
  lies outside every operator form the row with a null name, so the column sums to ``tklqt_ns``.
  ``per_phase``: the same per annotation instance enclosing the launch call (innermost phase).
- A launch-bound operator instance: the summed duration of its launch calls (``launch_api_ns``) exceeds
  the length of the union of its GPU activities' intervals (``gpu_union_ns``).
- Distributions (median, p90, p99, max; nearest-rank) over the TKLQT terms' kernels.

Activities without a matched launch call are left out of every number here and counted in ``trust``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

from .result import Result
from .result import py_scalar as _py
from .rows import query_row

DESCRIPTION = "Launch-and-queue time (api/queue/dispatch), TKLQT, mean queue depth, per operator and phase."
DEFINITION = __doc__.strip()

# One row per GPU activity of the trace with a launch call: the split stored at ingest (activity_splits, the
# "launch_splits" step of storage/derivations.py, the one text of these definitions) with the activity's name
# and duration and its launch call's type and duration; ready_ns = prev_end_ns, else the launch call's end.
# 'term' says whether the row is a TKLQT term.
_ACTIVITIES_SQL = """
SELECT s.activity_id, s.kind, g.name, s.device, s.stream, s.start_ns, s.end_ns, g.dur_ns, s.is_graph, s.launch_id,
       l.launch_type, s.launch_start_ns, s.launch_end_ns, l.dur_ns AS launch_dur_ns,
       coalesce(s.prev_end_ns, s.launch_end_ns) AS ready_ns, s.top_op_id, s.leaf_op_id, s.phase_id, s.lq_ns,
       s.api_ns, s.queue_ns, s.dispatch_ns, s.launch_delay_ns, s.term
FROM activity_splits s
JOIN gpu_activities g ON g.trace_id = s.trace_id AND g.activity_id = s.activity_id
LEFT JOIN launches l ON l.trace_id = s.trace_id AND l.launch_id = s.launch_id
WHERE s.trace_id = $t
ORDER BY s.start_ns, s.activity_id
"""

_TOTALS_SQL = """
SELECT
  CAST(coalesce(sum(lq_ns) FILTER (WHERE term), 0) AS BIGINT) AS tklqt_ns,
  CAST(coalesce(sum(lq_ns) FILTER (WHERE kind = 'kernel'), 0) AS BIGINT) AS tklqt_naive_ns,
  CAST(coalesce(sum(api_ns) FILTER (WHERE term), 0) AS BIGINT) AS api_ns,
  CAST(coalesce(sum(queue_ns) FILTER (WHERE term), 0) AS BIGINT) AS queue_ns,
  CAST(coalesce(sum(dispatch_ns) FILTER (WHERE term), 0) AS BIGINT) AS dispatch_ns,
  CAST(coalesce(sum(launch_delay_ns) FILTER (WHERE term), 0) AS BIGINT) AS launch_delay_ns,
  count(*) FILTER (WHERE kind = 'kernel' AND NOT is_graph) AS kernels,
  count(*) FILTER (WHERE kind = 'kernel' AND is_graph) AS graph_kernels,
  (SELECT count(DISTINCT launch_id) FROM {x} g WHERE is_graph) AS graph_launches,  -- not a FILTER: 20x slower
  count(*) FILTER (WHERE lq_ns < 0) AS negative_lq,
  count(*) FILTER (WHERE lq_ns < 0 AND term) AS negative_lq_terms
FROM {x} x
"""

_SPAN_SQL = """
SELECT
  (SELECT CAST(max(end_ns) - min(start_ns) AS BIGINT) FROM gpu_activities WHERE trace_id = $t) AS gpu_span_ns,
  (SELECT count(*) FROM gpu_activities WHERE trace_id = $t) AS activities,
  (SELECT count(*) FROM gpu_activities WHERE trace_id = $t AND launch_id IS NULL) AS without_launch,
  (SELECT count(*) FROM gpu_activities WHERE trace_id = $t AND kind = 'kernel' AND launch_id IS NULL)
     AS kernels_without_launch,
  (SELECT count(DISTINCT device) FROM gpu_activities WHERE trace_id = $t) AS devices
"""

# memcpy/memset launches apart; graph launches as one row each (their first node's split).
_BY_KIND_SQL = """
SELECT CASE WHEN kind = 'kernel' AND is_graph THEN 'graph_launch' ELSE kind END AS kind,
       count(*) AS count,
       CAST(sum(lq_ns) AS BIGINT) AS lq_ns, CAST(sum(api_ns) AS BIGINT) AS api_ns,
       CAST(sum(queue_ns) AS BIGINT) AS queue_ns, CAST(sum(dispatch_ns) AS BIGINT) AS dispatch_ns,
       CAST(sum(launch_delay_ns) AS BIGINT) AS launch_delay_ns
FROM {x} x WHERE term OR kind <> 'kernel'
GROUP BY 1 ORDER BY 1
"""

# The TKLQT terms' values of each metric, for the distribution (nearest-rank quantiles in numpy: one scan and a
# partition per column instead of a sort per column, 0.14 s at 1M kernels).
_DIST_METRICS = ("lq_ns", "api_ns", "queue_ns", "dispatch_ns", "launch_delay_ns")
_DIST_SQL = "SELECT " + ", ".join(_DIST_METRICS) + " FROM {x} x WHERE term"
#: The distribution's quantiles, in percent: p-th value = the ceil(n * p / 100)-th smallest (nearest rank, as
#: DuckDB's quantile_disc), n the metric's non-null values.
_QUANTILES = (50, 90, 99)

# Per operator instance: TKLQT terms, launch-call time and the union of its activities' intervals;
# then summed per operator name. {link} is 'top_op_id' or 'leaf_op_id' (chosen here, never user input).
# Per operator name from the per-instance rows stored at ingest (op_launch; {link} is 'top' or 'leaf').
_PER_OP_SQL = """
SELECT name, count(*) FILTER (WHERE op_id IS NOT NULL) AS calls,
       CAST(sum(kernels) AS BIGINT) AS kernels, CAST(sum(graph_kernels) AS BIGINT) AS graph_kernels,
       CAST(sum(graph_launches) AS BIGINT) AS graph_launches,
       CAST(sum(tklqt_ns) AS BIGINT) AS tklqt_ns, CAST(sum(api_ns) AS BIGINT) AS api_ns,
       CAST(sum(queue_ns) AS BIGINT) AS queue_ns, CAST(sum(dispatch_ns) AS BIGINT) AS dispatch_ns,
       CAST(sum(launch_delay_ns) AS BIGINT) AS launch_delay_ns,
       CAST(sum(launch_api_ns) AS BIGINT) AS launch_api_ns, CAST(sum(gpu_union_ns) AS BIGINT) AS gpu_union_ns,
       count(*) FILTER (WHERE op_id IS NOT NULL AND launch_api_ns > gpu_union_ns) AS launch_bound_calls
FROM op_launch WHERE trace_id = $t AND link = '{link}'
GROUP BY name
ORDER BY tklqt_ns DESC, name NULLS LAST
"""

_PER_PHASE_SQL = """
SELECT x.phase_id, an.kind AS phase_kind, an.name AS phase,
       count(*) FILTER (WHERE x.kind = 'kernel' AND NOT x.is_graph) AS kernels,
       count(*) FILTER (WHERE x.is_graph) AS graph_launches,
       CAST(sum(lq_ns) AS BIGINT) AS tklqt_ns, CAST(sum(api_ns) AS BIGINT) AS api_ns,
       CAST(sum(queue_ns) AS BIGINT) AS queue_ns, CAST(sum(dispatch_ns) AS BIGINT) AS dispatch_ns,
       CAST(sum(launch_delay_ns) AS BIGINT) AS launch_delay_ns
FROM {x} x LEFT JOIN annotations an ON an.trace_id = $t AND an.ann_id = x.phase_id
WHERE term
GROUP BY x.phase_id, an.kind, an.name, an.start_ns
ORDER BY an.start_ns NULLS LAST
"""

_DEVICES_SQL = """
WITH sp AS (SELECT device, CAST(max(end_ns) - min(start_ns) AS BIGINT) AS gpu_span_ns
       FROM gpu_activities WHERE trace_id = $t GROUP BY device)
SELECT sp.device, sp.gpu_span_ns, CAST(coalesce(sum(x.lq_ns), 0) AS BIGINT) AS tklqt_ns
FROM sp LEFT JOIN {x} x ON x.device = sp.device AND x.term
GROUP BY sp.device, sp.gpu_span_ns ORDER BY sp.device
"""


def activity_splits(store, trace_id: str) -> pd.DataFrame:
    """Per GPU activity with a matched launch call: lq_ns, api_ns, queue_ns, dispatch_ns, launch_delay_ns,
    ready_ns, the links, and ``term`` (whether the row is a TKLQT term), as stored at ingest. Ordered by start."""
    return store.query(_ACTIVITIES_SQL, {"t": trace_id})




_TKLQT_SQL = """
SELECT CAST(coalesce(sum(lq_ns) FILTER (WHERE term), 0) AS BIGINT) AS tklqt_ns
FROM activity_splits WHERE trace_id = $t
"""


def tklqt(store, trace_id: str) -> dict[str, Any]:
    """launch's scalars tklqt_ns, gpu_span_ns and mean_queue_depth alone (same definitions and values),
    from the stored split without the tables: what diff compares."""
    tk = int(query_row(store, _TKLQT_SQL, t=trace_id)["tklqt_ns"])
    span = query_row(store, "SELECT CAST(max(end_ns) - min(start_ns) AS BIGINT) AS s FROM gpu_activities "
                            "WHERE trace_id = $t", t=trace_id)["s"]
    return {"tklqt_ns": tk, "gpu_span_ns": span, "mean_queue_depth": round(tk / span, 6) if span else None}


def _distribution(terms) -> pd.DataFrame:
    """One row per metric (count, median, p90, p99, max; nearest-rank) from the TKLQT terms' values (an Arrow
    table of _DIST_SQL); no rows when there is no TKLQT term. ``count`` is the number of terms."""
    n = terms.num_rows
    recs = []
    for m in _DIST_METRICS if n else ():
        v = terms.column(m).drop_null().to_numpy()
        if not len(v):  # every value null (a term always has them): no quantile to give
            continue
        ranks = [max(0, -(-len(v) * p // 100) - 1) for p in _QUANTILES]  # ceil(len * p / 100) - 1, exact
        part = np.partition(v, ranks + [len(v) - 1])
        recs.append({"metric": m, "count": n, "median_ns": int(part[ranks[0]]), "p90_ns": int(part[ranks[1]]),
                     "p99_ns": int(part[ranks[2]]), "max_ns": int(part[-1])})
    df = pd.DataFrame(recs, columns=["metric", "count", "median_ns", "p90_ns", "p99_ns", "max_ns"])
    return df.astype({"count": "int64", "median_ns": "int64", "p90_ns": "int64", "p99_ns": "int64",
                      "max_ns": "int64"})


TABLES = ("by_kind", "distribution", "per_op", "per_leaf_op", "per_phase", "launch_bound", "devices")


def launch(store, trace_id: str, _tables: Collection[str] | None = None) -> Result:
    """Launch overhead of one stored trace (definitions in this module's docstring and docs/metrics.md).

    The per-activity split and its per-operator-instance sums are computed once at ingest
    (storage/splits.py: tables activity_splits and op_launch, schema 003; ``activity_splits`` here reads the
    former); every scalar and table is aggregated from them in SQL.

    ``_tables`` (callers that need part of the result, e.g. recommend): compute only these tables; the
    scalars are all there except ``launch_bound_ops`` when neither per_op nor launch_bound is asked for."""
    return _launch(store, trace_id, "(SELECT * FROM activity_splits WHERE trace_id = $t)",
                   set(TABLES if _tables is None else _tables))


def _launch(store, t: str, x: str, want: set[str]) -> Result:
    def sq(sql: str, **fmt) -> pd.DataFrame:
        sql = sql.format(x=x, **fmt)
        return store.query(sql, {"t": t} if "$t" in sql else None)

    tot = sq(_TOTALS_SQL)
    tot = {c: _py(tot[c].iloc[0]) for c in tot.columns}
    span = query_row(store, _SPAN_SQL, t=t)
    gpu_span = span.get("gpu_span_ns")
    tklqt = int(tot["tklqt_ns"])
    q = round(tklqt / gpu_span, 6) if gpu_span else None

    scalars: dict[str, Any] = {
        "trace_id": t,
        "tklqt_ns": tklqt,
        "tklqt_naive_ns": int(tot["tklqt_naive_ns"]),
        "mean_queue_depth": q,
        "gpu_span_ns": gpu_span,
        "kernels": int(tot["kernels"]),
        "graph_kernels": int(tot["graph_kernels"]),
        "graph_launches": int(tot["graph_launches"]),
        "api_ns": int(tot["api_ns"]),
        "queue_ns": int(tot["queue_ns"]),
        "dispatch_ns": int(tot["dispatch_ns"]),
        "host_overhead_ns": int(tot["api_ns"]) + int(tot["dispatch_ns"]),
        "launch_delay_ns": int(tot["launch_delay_ns"]),
        "negative_lq": int(tot["negative_lq"]),
    }
    tables: dict[str, pd.DataFrame] = {}
    if "by_kind" in want:
        tables["by_kind"] = sq(_BY_KIND_SQL)
    if "distribution" in want:
        tables["distribution"] = _distribution(store.query_arrow(_DIST_SQL.format(x=x), {"t": t}))
    for name, link in (("per_op", "top"), ("per_leaf_op", "leaf")):
        if name in want or (name == "per_op" and "launch_bound" in want):
            df = tables[name] = sq(_PER_OP_SQL, link=link)
            df["kernels_per_call"] = (df["kernels"] + df["graph_kernels"]) / df["calls"].where(df["calls"] > 0)
    if "per_phase" in want:
        tables["per_phase"] = sq(_PER_PHASE_SQL)
    if "devices" in want:
        devices = tables["devices"] = sq(_DEVICES_SQL)
        devices["mean_queue_depth"] = devices["tklqt_ns"] / devices["gpu_span_ns"].where(devices["gpu_span_ns"] > 0)
    if "per_op" in tables:
        per_op = tables["per_op"]
        if "launch_bound" in want:
            tables["launch_bound"] = per_op.loc[per_op["launch_bound_calls"] > 0,
                                                ["name", "calls", "launch_bound_calls", "launch_api_ns",
                                                 "gpu_union_ns"]].reset_index(drop=True)
        scalars["launch_bound_ops"] = int(per_op["launch_bound_calls"].sum()) if len(per_op) else 0
        if "per_op" not in want:
            del tables["per_op"]

    trust = {
        "activities": span.get("activities"),
        "activities_without_launch": span.get("without_launch"),
        "kernels_without_launch": span.get("kernels_without_launch"),
        "negative_lq_terms": int(tot["negative_lq_terms"]),
        "split_adds_up": scalars["api_ns"] + scalars["queue_ns"] + scalars["dispatch_ns"] == tklqt,
    }
    warnings: list[str] = []
    if span.get("kernels_without_launch"):
        warnings.append(f"{span['kernels_without_launch']} kernels have no matched launch call (e.g. launched "
                        "before the profiler started); they are left out of TKLQT.")
    if tot["negative_lq"]:
        warnings.append(f"{tot['negative_lq']} GPU activities start before their launch call (negative lq: "
                        "host/GPU clock skew); they are counted as they are, never clamped.")
    if tot["graph_kernels"]:
        warnings.append("graph replays count one lq per graph launch in tklqt_ns; tklqt_naive_ns sums every "
                        "node and is not a launch cost.")
    if not gpu_span:
        warnings.append("the trace has no GPU activity: mean_queue_depth is null.")
    if span.get("devices", 0) > 1:
        scalars["totals"] = "tklqt_ns sums all devices; mean_queue_depth divides by the overall GPU span"

    return Result(
        name="launch",
        definition=DEFINITION,
        scalars=scalars,
        tables={k: tables[k] for k in TABLES if k in tables},
        warnings=warnings,
        trust=trust,
    )
