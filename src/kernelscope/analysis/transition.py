"""Where a sweep turns from CPU-bound to GPU-bound (several traces).

Points: the traces sharing a numeric label ``by`` (default ``batch``), one trace per label value, sorted by
the value numerically. Given no trace ids, all traces with the label are used, or those labelled
``sweep=NAME`` when ``sweep`` is given. Per point (times in integer ns):

- ``tklqt_ns`` and ``mean_queue_depth`` ``q = tklqt_ns / gpu_span_ns``: the launch analysis' numbers.
- ``kernel_time_ns``, ``busy_ns``, ``gpu_span_ns``, ``idle_ns``, ``latency_ns``: as in the summary (sums
  over devices for several devices); ``host_wait_share``: host-wait idle / GPU span (the bound analysis).
- ``iterations``: the steady steps (the steps analysis': ``ProfilerStep#N`` phases neither warm-up nor
  partial) that launched GPU work; when none is, the phases that launched GPU work (every phase when none did;
  1 when there are none: storage/queries.iterations_sql). ``busy_per_iter_ns``: the length of the union of
  the GPU activities whose launch call starts inside one of those steps, divided by ``iterations`` (the whole
  ``busy_ns`` when there are no steps): GPU time per iteration, comparable to an un-profiled iteration time.
  Work still running from before the window is left out of it, and so is a warm-up step's (a first forward
  that autotunes cuDNN launched 321 ms of kernels against 1.9 ms per later step: ConvNeXt on an H100).
  ``latency_per_iter_ns``: the mean span of those steady steps (the steps analysis' ``dur_ns``), else
  ``latency_ns / iterations``.
- ``unprofiled_ns``: the median of the collector's ``cuda_event`` timings, else the numeric label
  ``unprofiled_ns``, else the median un-profiled step ``kernelscope profile`` / ``sweep`` timed with the same
  step rule (its provenance's ``profiler_overhead`` on the ``step`` basis), else null (``unprofiled_source``:
  ``cuda_event``, ``label`` or ``steps``). ``inflation`` = ``latency_per_iter_ns / unprofiled_ns`` (how much
  the profiled run is slower per iteration).

Regimes: the **trace rule** calls a point GPU-bound iff ``q >= 1``, else CPU-bound. The **un-profiled
rule** applies when some trace-rule CPU-bound point has an un-profiled time: host floor ``H`` = the median
``unprofiled_ns`` of those points; a point is GPU-bound iff ``busy_per_iter_ns >= H``. The un-profiled
rule decides when it applies, else the trace rule. A rule's bracket is ``last_cpu_bound`` (label of the
last CPU-bound point) and ``first_gpu_bound`` (the first GPU-bound one), with ``rule`` and ``points`` (the
labels); it is null with a reason when every point falls in one regime or the classes interleave.

Slow calls: ``slow_call_idle_ns`` = the host-wait idle inside calls of bound's top TOP_IDLE_OPS idle operators
that each kept the GPU waiting bound.SLOW_CALL_NS or more (bound's ``idle_operators.slow_call_idle_ns``, summed);
``slow_call_share`` = that / the host-wait idle. Such calls (a first call with new input shapes, autotuning) are
host work inside one call, not launching: a point where they hold SLOW_CALLS_SHARE_MIN of the host wait or more
reads as more CPU-bound than its steady state, and a warning names those points.

Communication: ``comm_only_ns`` = time when only collective kernels are busy (no compute kernel, no
memcpy/memset on any stream; comm.comm_only_busy, summed over devices); ``comm_only_share`` =
``comm_only_ns / busy_ns``. The ``regime`` column reads ``comm_bound`` when ``comm_only_ns > 0`` and
``comm_only_share >= 0.5`` (at least half the busy time only communicates), else the decided rule's class;
``regime_trace``, ``regime_unprofiled`` and the brackets keep the CPU/GPU classes.
"""

from __future__ import annotations

import statistics

import pandas as pd

from ..errors import UsageError
from ..storage.intervals import union_length_sql, union_sql
from ..storage.labels import label_value
from ..storage.queries import iterations_sql
from ..units import ns_to_ms
from . import bound as bound_mod
from . import cache
from . import comm as comm_mod
from . import launch as launch_mod
from .result import Result, int_or_none
from .rules import SLOW_CALLS_SHARE_MIN, TOP_IDLE_OPS
from .summary import trace_profiler_overhead

DESCRIPTION = ("Several traces: CPU->GPU-bound transition over a numeric label (--by batch), trace rule "
               "and un-profiled rule brackets.")
DEFINITION = __doc__.strip()

_LABELLED_SQL = """
SELECT t.trace_id, t.name, l.value_text, l.value_num
FROM traces t JOIN labels l ON l.trace_id = t.trace_id AND l.key = $by
WHERE $sweep IS NULL OR EXISTS (SELECT 1 FROM labels s WHERE s.trace_id = t.trace_id AND s.key = 'sweep'
                                AND s.value_text = $sweep)
ORDER BY t.trace_id
"""

_POINT_LABELS_SQL = """
SELECT t.trace_id, t.name,
       (SELECT any_value(value_num) FROM labels WHERE trace_id = t.trace_id AND key = $by) AS value_num,
       (SELECT any_value(value_text) FROM labels WHERE trace_id = t.trace_id AND key = $by) AS value_text,
       (SELECT any_value(value_num) FROM labels WHERE trace_id = t.trace_id AND key = 'unprofiled_ns')
           AS unprofiled_label
FROM traces t WHERE t.trace_id IN (SELECT unnest($ids))
"""

# Per trace: kernel time, span, busy, latency, step count, median cuda_event timing.
_METRICS_SQL = """
WITH ids AS (SELECT unnest($ids) AS trace_id),
dev AS (
    SELECT trace_id, device, max(end_ns) - min(start_ns) AS span
    FROM gpu_activities WHERE trace_id IN (SELECT trace_id FROM ids) GROUP BY ALL
)
SELECT i.trace_id,
  (SELECT CAST(coalesce(sum(dur_ns), 0) AS BIGINT) FROM gpu_activities
     WHERE trace_id = i.trace_id AND kind = 'kernel') AS kernel_time_ns,
  (SELECT CAST(sum(span) AS BIGINT) FROM dev WHERE trace_id = i.trace_id) AS gpu_span_ns,
  (SELECT CAST(coalesce(sum(end_ns - start_ns), 0) AS BIGINT) FROM busy_intervals
     WHERE trace_id = i.trace_id) AS busy_ns,
  (SELECT max(end_ns) FROM gpu_activities WHERE trace_id = i.trace_id)
    - (SELECT min(start_ns) FROM cpu_ops WHERE trace_id = i.trace_id AND depth = 0) AS latency_ns,
  """ + iterations_sql("i.trace_id") + """ AS steps,
  (SELECT median(dur_ns) FROM timings WHERE trace_id = i.trace_id AND kind = 'cuda_event') AS cuda_event_ns
FROM ids i
"""

# Union length (summed over devices) of the GPU activities whose launch call starts inside one of the host ranges
# [$starts[i], $ends[i]) of trace $t (its counted steps; unions as storage/intervals.py defines them).
_STEP_BUSY_SQL = f"""
WITH st AS (SELECT unnest($starts) AS start_ns, unnest($ends) AS end_ns),
isl AS (SELECT start_ns AS s, end_ns AS e FROM ({union_sql("st")})),  -- inside a step = inside an island
sel AS (  -- activities whose launch call starts inside a step (the island starting at or before it)
    SELECT x.device, x.start_ns, x.end_ns
    FROM activity_splits x ASOF JOIN isl ON x.launch_start_ns >= isl.s
    WHERE x.trace_id = $t AND x.launch_start_ns < isl.e
)
SELECT CAST(coalesce(sum(union_ns), 0) AS BIGINT) AS step_busy_ns
FROM ({union_length_sql("sel", by=("device",))})
"""


def _steady_steps(store, trace_id: str) -> pd.DataFrame | None:
    """The steps analysis' steady steps (neither warm-up nor partial) of a trace that launched GPU work, with
    ``host_start_ns``, ``host_dur_ns`` and ``dur_ns``; None when there are none. Through the process's cache
    (analysis/cache.py), which the Steps page, the report and recommend read too."""
    df = cache.analysis(store, "steps", trace_id).tables["steps"]
    df = df[~df["warmup"] & ~df["partial"] & (df["activities"] > 0)]
    return df if len(df) else None


def _all_steps(store, trace_id: str) -> pd.DataFrame:
    return store.query("SELECT start_ns AS host_start_ns, end_ns - start_ns AS host_dur_ns FROM annotations "
                       "WHERE trace_id = $t AND kind = 'step'", {"t": trace_id})


def _step_busy(store, trace_id: str, steps: pd.DataFrame) -> int:
    """``_STEP_BUSY_SQL`` over the host ranges of ``steps``."""
    starts = [int(x) for x in steps["host_start_ns"]]
    ends = [a + int(d) for a, d in zip(starts, steps["host_dur_ns"])]
    df = store.query(_STEP_BUSY_SQL, {"t": trace_id, "starts": starts, "ends": ends})
    return int(df["step_busy_ns"].iloc[0]) if len(df) else 0


def _unprofiled(store, trace_id: str, cuda_event_ns, label_ns) -> tuple[int | None, str | None]:
    """(un-profiled time per iteration, its source): cuda_event timings, else the label, else the median
    un-profiled step the collector timed (module docstring)."""
    if not pd.isna(cuda_event_ns):
        return int(round(float(cuda_event_ns))), "cuda_event"
    if not pd.isna(label_ns):
        return int(round(float(label_ns))), "label"
    o = trace_profiler_overhead(store, trace_id)
    if o.get("basis") == "step" and isinstance(o.get("unprofiled_median_ns"), (int, float)):
        return int(round(o["unprofiled_median_ns"])), "steps"
    return None, None


def select_traces(store, by: str = "batch", sweep: str | None = None) -> list[str]:
    """Trace ids carrying the label ``by`` (and ``sweep=NAME`` when ``sweep`` is given)."""
    df = store.query(_LABELLED_SQL, {"by": by, "sweep": sweep})
    return list(df["trace_id"])


def bracket(labels: list, gpu_bound: list[bool], rule: str) -> tuple[dict | None, str | None]:
    """(bracket, None) when the points switch once from CPU-bound to GPU-bound, else (None, reason).

    ``labels`` are sorted; ``gpu_bound[i]`` is point i's class under ``rule``."""
    if not labels:
        return None, "no points"
    if all(gpu_bound):
        return None, f"every point is GPU-bound under the {rule} rule"
    if not any(gpu_bound):
        return None, f"every point is CPU-bound under the {rule} rule"
    first = gpu_bound.index(True)
    if not all(gpu_bound[first:]):
        later_cpu = labels[first + gpu_bound[first:].index(False)]
        return None, (f"the classes interleave under the {rule} rule: {later_cpu} is CPU-bound after "
                      f"{labels[first]} is GPU-bound")
    return {"last_cpu_bound": labels[first - 1], "first_gpu_bound": labels[first], "rule": rule,
            "points": list(labels)}, None


def _points(store, trace_ids: list[str], by: str) -> pd.DataFrame:
    lab = store.query(_POINT_LABELS_SQL, {"by": by, "ids": list(trace_ids)})
    missing = lab[lab["value_num"].isna()]
    if len(missing):
        names = ", ".join(f"{r.name or r.trace_id}" for r in missing.itertuples())
        raise UsageError(f"traces {names} have no numeric label '{by}'; label them with "
                         f"`kernelscope label TRACE {by}=N` or choose another --by.")
    dup = lab[lab.duplicated("value_num", keep=False)]
    if len(dup):
        raise UsageError(f"several traces share {by}={dup['value_text'].iloc[0]} "
                         f"({', '.join(dup['trace_id'])}); give one trace per point (list the TRACEs, or "
                         "use --sweep NAME).")
    lab["label"] = [label_value(t, n) for t, n in zip(lab["value_text"], lab["value_num"])]
    return lab.sort_values("value_num").reset_index(drop=True)


def transition(store, trace_ids: list[str] | None = None, by: str = "batch", sweep: str | None = None) -> Result:
    """The ``transition`` analysis over ``trace_ids`` (definitions: module docstring, docs/metrics.md)."""
    ids = list(trace_ids) if trace_ids else select_traces(store, by, sweep)
    if not ids:
        where = f" with sweep={sweep}" if sweep else ""
        raise UsageError(f"no stored trace has a label '{by}'{where}; label traces with "
                         f"`kernelscope label TRACE {by}=N` or choose another --by.")
    pts = _points(store, ids, by)
    order = list(pts["trace_id"])
    met = store.query(_METRICS_SQL, {"ids": order}).set_index("trace_id")
    comm_only = comm_mod.comm_only_busy(store, order).groupby("trace_id")["comm_only_ns"].sum()

    rows = []
    warnings: list[str] = []
    for p in pts.itertuples(index=False):
        t = p.trace_id
        m = met.loc[t]
        lr = launch_mod.tklqt(store, t)  # launch's tklqt_ns and mean_queue_depth alone
        split = bound_mod.idle_split(store, t)
        span = int_or_none(m["gpu_span_ns"])
        busy = int(m["busy_ns"])
        latency = int_or_none(m["latency_ns"])
        steady = _steady_steps(store, t) if int(m["steps"]) else None
        if steady is not None:  # the steady steps that launched GPU work
            iters = len(steady)
            busy_iter = _step_busy(store, t, steady) // iters
            lat_iter = int(round(steady["dur_ns"].mean()))
        else:
            iters = max(1, int(m["steps"]))
            busy_iter = _step_busy(store, t, _all_steps(store, t)) // iters if int(m["steps"]) else busy
            lat_iter = latency // iters if latency is not None else None
        unp, src = _unprofiled(store, t, m["cuda_event_ns"], p.unprofiled_label)
        host = int(split["host_wait_ns"].sum()) if len(split) else 0
        slow = int(bound_mod.idle_operators(store, t, top=TOP_IDLE_OPS)["slow_call_idle_ns"].sum()) if host else 0
        rows.append({
            "label": p.label, "trace_id": t, "name": p.name, "iterations": iters,
            "tklqt_ns": lr["tklqt_ns"], "mean_queue_depth": lr["mean_queue_depth"],
            "kernel_time_ns": int(m["kernel_time_ns"]), "busy_ns": busy, "busy_per_iter_ns": busy_iter,
            "gpu_span_ns": span, "idle_ns": None if span is None else span - busy,
            "host_wait_share": host / span if span else None,
            "slow_call_idle_ns": slow, "slow_call_share": slow / host if host else None,
            "latency_ns": latency, "latency_per_iter_ns": lat_iter,
            "unprofiled_ns": unp, "unprofiled_source": src,
            "inflation": lat_iter / unp if unp and lat_iter is not None else None,
            "comm_only_ns": int(comm_only.get(t, 0)),
            "comm_only_share": int(comm_only.get(t, 0)) / busy if busy else None,
        })
        if lr["mean_queue_depth"] is None:
            warnings.append(f"{p.name or t} has no GPU activity; the trace rule calls it CPU-bound.")
    df = pd.DataFrame(rows)
    labels = list(df["label"])
    slowed = df[df["slow_call_share"].fillna(0) >= SLOW_CALLS_SHARE_MIN]
    if len(slowed):
        shares = sorted(round(100 * x) for x in slowed["slow_call_share"])
        pct = f"{shares[0]}%" if shares[0] == shares[-1] else f"{shares[0]}-{shares[-1]}%"
        warnings.append(
            f"at {by}={', '.join(str(v) for v in slowed['label'])}: {pct} of the host wait is inside slow operator "
            f"calls (each kept the GPU waiting {ns_to_ms(bound_mod.SLOW_CALL_NS):g} ms or more: host work inside "
            "the call, such as a first call with new input shapes), so those points read as more CPU-bound than "
            "their steady state; `kernelscope analyze recommend TRACE` names the calls.")
    trace_gpu = [q is not None and q >= 1 for q in df["mean_queue_depth"]]
    df["regime_trace"] = ["gpu_bound" if g else "cpu_bound" for g in trace_gpu]

    floor_pts = [u for u, g in zip(df["unprofiled_ns"], trace_gpu) if not g and u is not None and u == u]
    host_floor = int(statistics.median(floor_pts)) if floor_pts else None
    trace_b, trace_reason = bracket(labels, trace_gpu, "trace")
    if host_floor is not None:
        unp_gpu = [b >= host_floor for b in df["busy_per_iter_ns"]]
        df["regime_unprofiled"] = ["gpu_bound" if g else "cpu_bound" for g in unp_gpu]
        unp_b, unp_reason = bracket(labels, unp_gpu, "unprofiled")
        rule = "unprofiled"
    else:
        df["regime_unprofiled"] = None
        unp_b, unp_reason = None, ("no un-profiled time for any point the trace rule calls CPU-bound "
                                   "(collector timings, label unprofiled_ns or un-profiled steps)")
        rule = "trace"
    df["regime"] = df["regime_unprofiled"] if rule == "unprofiled" else df["regime_trace"]
    comm_bound = [c > 0 and 2 * c >= b for c, b in zip(df["comm_only_ns"], df["busy_ns"])]
    df["regime"] = ["comm_bound" if cb else r for cb, r in zip(comm_bound, df["regime"])]
    decided, reason = (unp_b, unp_reason) if rule == "unprofiled" else (trace_b, trace_reason)
    missing_unp = [str(lab) for lab, u in zip(labels, df["unprofiled_ns"]) if u is None or u != u]
    if missing_unp and rule == "unprofiled":
        warnings.append(f"points {', '.join(missing_unp)} have no un-profiled time; the host floor uses the "
                        "others.")
    scalars = {
        "by": by, "sweep": sweep, "n_points": len(df), "rule": rule,
        "transition": decided, "transition_reason": reason,
        "host_floor_ns": host_floor,
        "brackets": {"trace": trace_b or {"reason": trace_reason},
                     "unprofiled": unp_b or {"reason": unp_reason}},
    }
    trust = {"unprofiled_points": len(df) - len(missing_unp),
             "busy_per_iter": "union of GPU activities launched inside the steady ProfilerStep phases / steps"}
    return Result(name="transition", definition=DEFINITION, scalars=scalars, tables={"points": df},
                  warnings=warnings, trust=trust)
