"""What-if: how long the traced GPU work would take if every launch were free (CUDA graphs / fusion).

Definitions (docs/metrics.md "What-if" is the canonical text; every time is integer ns):

- Scope: the GPU activities (kernels, memcpy, memset) with a matched launch call; when the trace has
  ``ProfilerStep#N`` phases, only those whose launch call starts inside a step (work launched before the
  profiler's window, e.g. a warm-up step's tail, is left out and counted in ``trust``).
- Model (a replay with free launches): activities keep their observed durations and run in stream order
  on their (device, stream). Activity k starts at ``max(end of the previous activity on its stream,
  H(k)) + gap_k`` where ``H(k)`` is the host-sync barrier: a host sync (``cudaDeviceSynchronize``,
  ``cudaStreamSynchronize``, ``cudaEventSynchronize`` and driver/HIP twins; a memcpy call that returned
  only after its copy ended, e.g. a device-to-host ``.item()``) makes the host wait, so an activity
  launched after the sync returned cannot start before the predicted end of the work that sync waited
  for (activities launched before the sync that had ended when it returned). Stream-wait events are not
  visible in Kineto traces: streams of a device are independent apart from host syncs (a warning says so
  when a device has several streams). The first activity starts at ``gap``; ``predicted_ns`` is the last
  predicted end.
- Residual gap per activity ``gap_k``: a graph node keeps its observed gap to the previous node of the
  same graph launch (clamped at 0). Every other activity gets the median node-to-node gap of CUDA-graph
  replays measured on this GPU model: from this trace's own graph launches, else from the ``twin`` trace,
  else from the other stored traces whose first device has the same name, else from the shipped prior
  of the device's GPU family (``data/graph_gap_prior.csv``: the same median over kernelscope's own graph
  captures, with their provenance; ``residual_source`` says which). Reason: with launches free (graphs/fusion) what remains between kernels is the GPU's own
  node-to-node gap, which a graph replay measures. Without any graph replay or prior (an unknown GPU family), the median gap between
  back-to-back kernels on the stream (the launch had returned before the previous activity ended, so the
  gap is GPU-side) is used, else that median over the trace, else 0 (the prediction is then a lower bound
  and a warning says so).
- ``observed_ns``: the un-profiled time when the collector recorded one (median of the ``cuda_event``
  timings, which time one iteration, times ``iterations`` = the ProfilerStep phases that launched GPU work
  (storage/queries.iterations_sql), 1 when there are none), else ``traced_ns`` (``observed_source`` says which). ``traced_ns``: the traced time of
  the scope, from the first step's start (else the first top-level operator's start, else the first
  launch call's start) to the last in-scope activity's end.
- ``naive_ns``: the sum of in-scope kernel durations (no gaps, no dependencies), always beside the
  prediction. ``predicted_speedup`` = ``observed_ns / predicted_ns``; ``predicted_speedup_traced`` =
  ``traced_ns / predicted_ns`` (both sides under the profiler).
- ``twin`` option (trace id or name; e.g. the CUDA-graph capture of the same work): ``twin_observed_ns``
  (its observed time, same rules), ``observed_speedup`` = ``observed_ns / twin_observed_ns``,
  ``prediction_error`` = ``predicted_ns / twin_observed_ns - 1`` and ``naive_error`` likewise.
- ``long_idle_ns``: GPU-idle time inside the traced scope in gaps of at least 1 ms (``idle_gaps``; the device
  with the most): host work, not launch overhead, which the replay removes too. A warning says so when it is
  at least half of ``traced_ns - predicted_ns``.
"""  # noqa: E501 - the module docstring is the result's definition text, kept byte for byte

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from ..errors import TraceNotFound, UsageError
from ..storage.idle import long_idle
from ..storage.intervals import union_sql
from ..storage.queries import iterations_sql, resolve_trace
from ..units import NS_PER_MS
from .result import Result
from .rows import query_row

DESCRIPTION = "Predicted time with free launches (graphs/fusion) vs observed and the naive kernel sum."
DEFINITION = __doc__.strip()

# Activities with a launch call (activity_splits, stored at ingest) and the steps merged into islands. The scope
# test (the launch call starts inside a step island), the stream order and the shifts run in numpy over the
# plain column scan: a SQL join and sort of every row cost 10x more than the scan.
_ACTS_SQL = """
SELECT activity_id, kind = 'kernel' AS is_kernel, device, stream, start_ns, end_ns, is_graph, launch_id,
       launch_start_ns, launch_end_ns
FROM activity_splits WHERE trace_id = $t AND launch_start_ns IS NOT NULL
"""
_ISLANDS_SQL = f"""
SELECT start_ns AS s, end_ns AS e FROM (
  {union_sql("(SELECT start_ns, end_ns FROM annotations WHERE trace_id = $t AND kind = 'step')")})
ORDER BY s
"""


def _nullable(values: np.ndarray, valid: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(values.astype(np.int64), ~valid)


def _in_scope(store, t: str) -> pd.DataFrame:
    """The in-scope activities (launch call started inside a step island, or every one when the trace has no
    steps) in (device, stream, start_ns, activity_id) order, plus ``prev_end_ns`` (end of the previous
    in-scope activity on the same (device, stream)) and ``node_gap_ns`` (graph nodes: max(0, start - end of
    the previous in-scope node of the same graph launch by (start, activity_id)); null for a launch's first
    node and for non-graph activities)."""
    tab = store.query_arrow(_ACTS_SQL, {"t": t})
    col = {c: tab.column(c).to_numpy(zero_copy_only=False) for c in tab.column_names}
    dev, stream = (np.asarray((c.fill_null(-1) if c.null_count else c).to_numpy(), dtype=np.int64)
                   for c in (tab.column("device"), tab.column("stream")))
    isl = store.query(_ISLANDS_SQL, {"t": t})
    if len(isl):  # the island starting at or before the launch start must end after it
        s, e = isl["s"].to_numpy(np.int64), isl["e"].to_numpy(np.int64)
        k = np.searchsorted(s, col["launch_start_ns"], side="right") - 1
        keep = (k >= 0) & (col["launch_start_ns"] < e[np.maximum(k, 0)])
        if not keep.all():  # (copies of a million rows cost more than this test, in a fresh process most)
            col = {c: v[keep] for c, v in col.items()}
            dev, stream = dev[keep], stream[keep]
    aid, start = col["activity_id"], col["start_ns"]
    # activity_splits is stored in this order; sort only when a scan did not return it that way
    ordered = bool(np.all((dev[1:] > dev[:-1]) | ((dev[1:] == dev[:-1]) & (
        (stream[1:] > stream[:-1]) | ((stream[1:] == stream[:-1]) & (
            (start[1:] > start[:-1]) | ((start[1:] == start[:-1]) & (aid[1:] > aid[:-1])))))))) if len(aid) else True
    if not ordered:
        order = np.lexsort((aid, start, stream, dev))
        col = {c: v[order] for c, v in col.items()}
        dev, stream = dev[order], stream[order]
    acts = pd.DataFrame(col, copy=False)  # one block per column: no consolidating copy
    end = acts["end_ns"].to_numpy(np.int64)
    same = np.zeros(len(acts), dtype=bool)
    same[1:] = (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1])
    acts["dur_ns"] = end - acts["start_ns"].to_numpy(np.int64)
    acts["prev_end_ns"] = _nullable(np.concatenate(([0], end[:-1])) if len(end) else end, same)
    gap, has_gap = np.zeros(len(acts), dtype=np.int64), np.zeros(len(acts), dtype=bool)
    gi = np.flatnonzero(acts["is_graph"].to_numpy(bool))
    if len(gi):
        lid, gs = acts["launch_id"].to_numpy(np.int64)[gi], acts["start_ns"].to_numpy(np.int64)[gi]
        gi = gi[np.lexsort((acts["activity_id"].to_numpy(np.int64)[gi], gs, lid))]
        lid, gs, ge = (acts[c].to_numpy(np.int64)[gi] for c in ("launch_id", "start_ns", "end_ns"))
        prev = np.zeros(len(gi), dtype=bool)
        prev[1:] = lid[1:] == lid[:-1]
        gap[gi[1:]] = np.maximum(gs[1:] - ge[:-1], 0)
        has_gap[gi] = prev
    acts["node_gap_ns"] = _nullable(gap, has_gap)
    return acts


_SCOPE_SQL = """
SELECT
  (SELECT count(*) FROM gpu_activities WHERE trace_id = $t) AS activities,
  (SELECT count(*) FROM gpu_activities WHERE trace_id = $t AND launch_id IS NULL) AS without_launch,
  """ + iterations_sql("$t") + """ AS steps,
  (SELECT min(start_ns) FROM annotations WHERE trace_id = $t AND kind = 'step') AS first_step_ns,
  (SELECT min(start_ns) FROM cpu_ops WHERE trace_id = $t AND depth = 0) AS first_top_op_ns,
  (SELECT median(dur_ns) FROM timings WHERE trace_id = $t AND kind = 'cuda_event') AS unprofiled_median_ns,
  (SELECT count(*) FROM timings WHERE trace_id = $t AND kind = 'cuda_event') AS unprofiled_timings
"""

# Host syncs: sync calls (GPU-side stream waits excluded) and memcpy calls that returned after their copy.
_SYNCS_SQL = """
SELECT l.start_ns, l.end_ns, l.name
FROM launches l
WHERE l.trace_id = $t AND (
  (l.launch_type = 'sync' AND l.name NOT ILIKE '%WaitEvent%')
  OR (l.launch_type = 'memcpy' AND l.activities > 0 AND l.end_ns >= (
        SELECT max(g.end_ns) FROM gpu_activities g WHERE g.trace_id = l.trace_id AND g.launch_id = l.launch_id)))
ORDER BY l.end_ns, l.start_ns
"""

# Median node-to-node gap inside graph launches, over the given traces.
_GRAPH_GAPS_SQL = """
WITH n AS (
  SELECT trace_id, start_ns - lag(end_ns) OVER (PARTITION BY trace_id, launch_id ORDER BY start_ns, activity_id)
         AS gap
  FROM gpu_activities WHERE trace_id IN (SELECT unnest($ids)) AND is_graph AND launch_id IS NOT NULL
)
SELECT CAST(quantile_disc(greatest(gap, 0), 0.5) AS BIGINT) AS gap_ns, count(gap) AS samples,
       string_agg(DISTINCT trace_id, ',' ORDER BY trace_id) AS traces
FROM n WHERE gap IS NOT NULL
"""

_SAME_DEVICE_SQL = """
SELECT trace_id FROM traces
WHERE trace_id <> $t AND json_extract_string(device_properties, '$[0].name') =
      (SELECT json_extract_string(device_properties, '$[0].name') FROM traces WHERE trace_id = $t)
"""




def _twin_trace(store, ref: Any) -> str:
    """The ``twin`` option's trace: any TRACE reference (``storage.queries.resolve_trace``)."""
    missing = UsageError(f"whatif: no stored trace has the id or name '{ref}' (option twin); "
                         "see `kernelscope traces`.")
    if not str(ref).strip():
        raise missing
    try:
        return resolve_trace(store, ref)
    except TraceNotFound:
        raise missing from None


def graph_gap(store, ids: list[str]) -> dict[str, Any] | None:
    """Median node-to-node gap pooled over the graph replays of traces ``ids``: {gap_ns, samples, traces}."""
    if not ids:
        return None
    row = query_row(store, _GRAPH_GAPS_SQL, ids=ids)
    if not row.get("samples"):
        return None
    return {"gap_ns": int(row["gap_ns"]), "samples": int(row["samples"]), "traces": str(row["traces"]).split(",")}


_PRIOR_COLUMNS = ("family", "match", "gap_ns", "samples", "captures", "source")


def graph_gap_priors() -> list[dict[str, Any]]:
    """The shipped per-GPU-family priors (data/graph_gap_prior.csv, made by sample_traces/make_graph_prior.py)."""
    import csv
    import io
    from importlib import resources

    text = resources.files("kernelscope").joinpath("data", "graph_gap_prior.csv").read_text("utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    return [{**r, "gap_ns": int(r["gap_ns"]), "samples": int(r["samples"])} for r in rows]


def _prior(store, t: str) -> dict[str, Any] | None:
    """The shipped prior whose ``match`` fits the name of the trace's first device, else None."""
    import re

    name = query_row(store, "SELECT json_extract_string(device_properties, '$[0].name') AS n FROM traces "
                       "WHERE trace_id = $t", t=t).get("n")
    if not name:
        return None
    return next((p for p in graph_gap_priors() if re.search(p["match"], str(name), re.IGNORECASE)), None)


def _observed(store, t: str) -> tuple[int | None, str, int, dict[str, Any]]:
    """(observed_ns, source, iterations, scope row); observed_ns None when neither is known."""
    sc = query_row(store, _SCOPE_SQL, t=t)
    iterations = int(sc["steps"]) or 1
    if sc.get("unprofiled_timings"):
        med = int(round(sc["unprofiled_median_ns"]))
        src = (f"unprofiled: median of {sc['unprofiled_timings']} cuda_event timings ({med} ns per iteration) "
               f"x {iterations} iteration(s) (ProfilerStep phases that launched GPU work)")
        return med * iterations, src, iterations, sc
    return None, "traced", iterations, sc


def _stream_ids(key: np.ndarray) -> np.ndarray:
    """0, 1, ... per (device, stream) key of rows sorted by it (a change of key starts the next id): the ids
    np.unique would give, without its sort of a million rows."""
    if not len(key):
        return np.zeros(0, dtype=np.int64)
    if len(key) > 1 and bool((key[1:] < key[:-1]).any()):  # not sorted: fall back to the sort
        return np.unique(key, return_inverse=True)[1]
    return np.concatenate(([0], np.cumsum(key[1:] != key[:-1])))


def simulate(acts: pd.DataFrame, syncs: pd.DataFrame, gap: np.ndarray) -> np.ndarray:
    """Predicted end (ns from 0) of each activity; ``acts`` in (device, stream, start) order.

    Recurrence per stream: ``end_k = max(end_prev, H(seg_k)) + gap_k + dur_k`` where ``seg_k`` counts the
    host syncs that had returned before k's launch call started and ``H(s)`` is the predicted end of the
    work the s-th sync waited for (monotone in s).
    """
    n = len(acts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    key = acts["device"].astype("int64").to_numpy() * (1 << 40) + acts["stream"].astype("int64").to_numpy()
    sid = _stream_ids(key)
    nstreams = int(sid.max()) + 1
    lstart = acts["launch_start_ns"].to_numpy(dtype=np.int64)
    oend = acts["end_ns"].to_numpy(dtype=np.int64)
    cost = gap + acts["dur_ns"].to_numpy(dtype=np.int64)
    sync_start = syncs["start_ns"].to_numpy(dtype=np.int64)
    sync_end = syncs["end_ns"].to_numpy(dtype=np.int64)  # sorted ascending
    seg = np.searchsorted(sync_end, lstart, side="right")
    # per-stream index arrays in stream order; segments made monotone along the stream
    streams = [np.flatnonzero(sid == s) for s in range(nstreams)]
    for idx in streams:
        seg[idx] = np.maximum.accumulate(seg[idx])
    ls_cm = [np.maximum.accumulate(lstart[idx]) for idx in streams]
    oe_cm = [np.maximum.accumulate(oend[idx]) for idx in streams]
    # per stream and sync: how many of the stream's first activities that sync waited for (launched before it
    # started and ended before it returned)
    waited = [np.minimum(np.searchsorted(lc, sync_start, side="right"), np.searchsorted(oc, sync_end, side="right"))
              for lc, oc in zip(ls_cm, oe_cm)]
    order = np.lexsort((np.arange(n), sid, seg))  # by segment, then stream, then stream order
    bounds = np.searchsorted(seg[order], np.arange(len(sync_end) + 2), side="left")
    pend = np.zeros(n, dtype=np.int64)
    last_end = np.zeros(nstreams, dtype=np.int64)
    h = 0
    for s in range(len(sync_end) + 1):
        rows = order[bounds[s]:bounds[s + 1]]
        if len(rows):
            ss = sid[rows]
            cs = np.cumsum(cost[rows])
            first = np.concatenate(([True], ss[1:] != ss[:-1]))
            grp = np.cumsum(first) - 1
            offset = (cs - cost[rows])[first][grp]
            base = np.maximum(last_end[ss[first]], h)[grp]
            pend[rows] = base + cs - offset
            lastpos = np.append(np.flatnonzero(first)[1:] - 1, len(rows) - 1)
            last_end[ss[lastpos]] = pend[rows[lastpos]]
        if s < len(sync_end):  # barrier of the next sync: work launched before it that it waited for
            for si, idx in enumerate(streams):
                k = waited[si][s]
                if k:
                    h = max(h, int(pend[idx[k - 1]]))
    return pend


def _residual(store, t: str, acts: pd.DataFrame, twin: str | None) -> tuple[np.ndarray, dict[str, Any], list]:
    """Per-activity residual gap (ns) and a record of where it came from."""
    warnings: list[str] = []
    info: dict[str, Any] = {}
    found = graph_gap(store, [t])
    source = "graph replays in this trace"
    if found is None and twin:
        found, source = graph_gap(store, [twin]), f"graph replays in the twin trace {twin}"
    if found is None:
        same = [str(x) for x in store.query(_SAME_DEVICE_SQL, {"t": t})["trace_id"]]
        found = graph_gap(store, same)
        source = "graph replays in other stored traces on the same GPU model"
    if found is None:
        prior = _prior(store, t)
        if prior is not None:
            found = {"gap_ns": prior["gap_ns"], "samples": prior["samples"], "traces": []}
            source = (f"shipped prior for {prior['family']}: median node-to-node gap of {prior['samples']} "
                      f"graph-replay gaps in kernelscope's own captures (data/graph_gap_prior.csv; "
                      f"no graph replay of this GPU model in the store)")
    gap = np.zeros(len(acts), dtype=np.int64)
    if found is not None:
        gap[:] = found["gap_ns"]
        info = {"residual_gap_ns": found["gap_ns"], "residual_source": source,
                "residual_samples": found["samples"], "residual_traces": found["traces"]}
    else:
        warnings.append("no graph replay of this GPU model in the store and no shipped prior for it: the residual "
                        "gap is the median back-to-back gap of this trace, which still holds launch and queue "
                        "time (on an H100 capture it predicted 49% above the measured graph replay); store a CUDA "
                        "graph replay of this GPU (or pass twin=) for a better prediction.")
        prev = acts["prev_end_ns"].array
        pv = prev.to_numpy(dtype=np.int64, na_value=0)
        b2b = ~acts["is_graph"].to_numpy(bool) & ~prev.isna() & (acts["launch_end_ns"].to_numpy(np.int64) <= pv)
        g = np.maximum(acts["start_ns"].to_numpy(np.int64) - pv, 0)[b2b].astype(float)
        key = acts["device"].to_numpy(np.int64) * (1 << 40) + acts["stream"].to_numpy(np.int64)
        sid = _stream_ids(key)
        streams = np.arange(int(sid[-1]) + 1 if len(sid) else 0)
        if len(g):
            overall = float(np.median(g))
            gs = sid[b2b]
            per_stream = np.array([np.median(g[gs == i]) if (gs == i).any() else overall
                                   for i in range(len(streams))])
            gap[:] = np.round(per_stream[sid]).astype("int64")
            info = {"residual_gap_ns": int(round(overall)),
                    "residual_source": "back-to-back gaps in this trace (median per stream, no graph replay "
                                       "measured on this GPU model)",
                    "residual_samples": int(len(g)), "residual_traces": [t]}
        else:
            info = {"residual_gap_ns": 0, "residual_source": "none measured (0)", "residual_samples": 0,
                    "residual_traces": []}
            warnings.append("no residual gap could be measured (no graph replay on this GPU model, no "
                            "back-to-back kernels): gaps are 0 and predicted_ns is a lower bound.")
    node = acts["is_graph"] & acts["node_gap_ns"].notna()
    gap[node.to_numpy()] = acts.loc[node, "node_gap_ns"].astype("int64").to_numpy()
    return gap, info, warnings


#: A GPU-idle stretch at least this long is host work (set-up, data loading, Python, a stall), not launch overhead.
LONG_GAP_NS = NS_PER_MS
LONG_GAPS_WARNING = (
    "{ms:,.1f} ms of the traced scope ({pct:.0f}%) are {n:,} stretches of 1 ms or more with the GPU idle: host "
    "work (set-up, data loading, Python, a stall), not launch overhead. The replay removes them too, so "
    "predicted_speedup counts them as removable; record steps around the work you would capture "
    "(prof.step(), kernelscope profile --steps or --schedule), or read the launch overhead in `analyze launch`.")


def whatif(store, trace_id: str, twin: Any = None) -> Result:
    """Predicted time with free launches for one stored trace (definitions in the module docstring)."""
    t = trace_id
    twin_id = _twin_trace(store, twin) if twin is not None else None
    acts = _in_scope(store, t)
    observed, source, iterations, sc = _observed(store, t)
    warnings: list[str] = []
    if not len(acts):
        warnings.append("no GPU activity with a launch call in scope: nothing to predict.")
    gap, info, w = _residual(store, t, acts, twin_id)
    warnings += w if len(acts) else []  # how the gap would be chosen says nothing when there is nothing to predict
    syncs = store.query(_SYNCS_SQL, {"t": t})
    pend = simulate(acts, syncs, gap)
    predicted = int(pend.max()) if len(pend) else None

    scope_end = int(acts["end_ns"].max()) if len(acts) else None
    starts = [sc.get("first_step_ns"), sc.get("first_top_op_ns"),
              int(acts["launch_start_ns"].min()) if len(acts) else None]
    scope_start = next((int(x) for x in starts if x is not None), None)
    traced = scope_end - scope_start if scope_end is not None and scope_start is not None else None
    if observed is None:
        observed = traced
        source = ("traced: first ProfilerStep start (else first top-level operator, else first launch) to the "
                  "last in-scope GPU activity end")
    kernels = acts["is_kernel"].astype(bool)
    naive = int(acts.loc[kernels, "dur_ns"].sum())

    def ratio(a, b):
        return round(a / b, 4) if a is not None and b else None

    scalars: dict[str, Any] = {
        "trace_id": t,
        "predicted_ns": predicted,
        "observed_ns": observed,
        "observed_source": source,
        "traced_ns": traced,
        "naive_ns": naive,
        "gpu_work_ns": int(acts["dur_ns"].sum()),
        "iterations": iterations,
        "predicted_per_iteration_ns": None if predicted is None else predicted // iterations,
        "predicted_speedup": ratio(observed, predicted),
        "predicted_speedup_traced": ratio(traced, predicted),
        "activities": int(len(acts)),
        "kernels": int(kernels.sum()),
        "host_syncs": int(len(syncs)),
        **info,
    }
    if twin_id is not None:
        t_obs, t_src, _, _ = _observed(store, twin_id)
        if t_obs is None:
            t_obs = whatif(store, twin_id).scalars["traced_ns"]
            t_src = "traced"
        scalars.update({
            "twin": twin_id, "twin_observed_ns": t_obs, "twin_observed_source": t_src,
            "observed_speedup": ratio(observed, t_obs),
            "prediction_error": None if not t_obs or predicted is None else round(predicted / t_obs - 1, 4),
            "naive_error": None if not t_obs else round(naive / t_obs - 1, 4),
        })
    multi = acts.groupby("device")["stream"].nunique() if len(acts) else pd.Series(dtype=int)
    if (multi > 1).any():
        warnings.append("a device has several streams and stream-wait events are not in the trace: streams are "
                        "modelled as independent apart from host syncs, so predicted_ns may be low.")
    if predicted is not None and observed is not None and predicted > observed:
        warnings.append(f"predicted_ns exceeds observed_ns ({source.split(':')[0]}): the traced GPU work alone "
                        "takes longer than the observed time, so no launch-overhead speed-up is expected; "
                        "read predicted_speedup_traced for the within-trace figure.")
    long_ns, long_n = long_idle(store, t, scope_start, scope_end, LONG_GAP_NS) if traced else (0, 0)
    scalars["long_idle_ns"] = long_ns
    if predicted and traced and 2 * long_ns >= traced - predicted > 0:
        warnings.append(LONG_GAPS_WARNING.format(ms=long_ns / NS_PER_MS, pct=100 * long_ns / traced, n=long_n))
    trust = {
        "activities_in_trace": sc.get("activities"),
        "activities_without_launch": sc.get("without_launch"),
        "activities_in_scope": int(len(acts)),
        "out_of_scope": int(sc.get("activities") or 0) - int(sc.get("without_launch") or 0) - int(len(acts)),
        "scope": "activities whose launch call starts inside a ProfilerStep" if sc.get("steps")
                 else "every activity with a launch call",
        "host_sync_calls": json.loads(json.dumps(sorted(set(syncs["name"].astype(str))))),
    }
    return Result(name="whatif", definition=DEFINITION, scalars=scalars, tables={}, warnings=warnings,
                  trust=trust)
