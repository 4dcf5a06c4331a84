"""Steps: the time of each training/inference step split the way TensorBoard's overview split it.

Definitions (docs/metrics.md, "Steps", is the canonical text; every time is an integer number of ns):

- **Step.** Each ``ProfilerStep#N`` range (annotations of kind ``step``; ``step`` = N). With the option
  ``phase=NAME`` the steps are instead the user annotations (``record_function`` ranges; NVTX ranges of an
  Nsight Systems trace) named exactly NAME, numbered 0, 1, ... in start order. The annotation's own interval
  is the step's **host range** ``[host_start_ns, host_start_ns + host_dur_ns)``.
- **Span** (what ``start_ns``/``dur_ns`` measure; TensorBoard's rule, so its users see the same step times).
  A step's **GPU work** is every GPU activity whose launch call (runtime or driver call, any thread) lies
  inside the host range (steps walked in start order: a call belongs to the last step starting at or before
  it, when it also ends inside that step's host range). In start order,
  ``start = max(host start, previous step's end)`` and ``end = max(host end, last end of the step's GPU
  work)`` (``end = max(host end, start)`` for a step with no GPU work): GPU work that runs past the CPU step's
  end counts in its own step, which then ends when that work ends, and the next step starts after it. Before
  the first step, GPU work not launched inside any step that ends before the first step's own GPU work starts
  moves the first step's start past its end. A trace with no GPU work launched inside any step keeps the host
  ranges. Spans never overlap, so their sum is the
  stepped time.
- **Categories** of a span, each instant counted once, by priority: ``kernel_ns`` (the union of kernels of
  every device covers it), else ``memcpy_ns`` (a GPU memcpy), else ``memset_ns`` (a GPU memset); the rest is
  GPU idle, split by what the host was doing at that instant: ``runtime_ns`` (inside a runtime/driver call:
  launches, syncs, allocations: the ``launches`` table), else ``dataloader_ns`` (inside an operator or user
  annotation named ``enumerate(DataLoader)#...__next__`` or ``enumerate(DataPipe)#...``), else ``python_gc_ns``
  (inside a Python garbage collection: kernelscope profile's ``python gc: full collection`` range or torch's
  ``Python GC`` event, storage/idle.py's two sources), else ``cpu_op_ns`` (inside another CPU operator or user
  annotation: not a step itself, not one enclosing a whole step's host range, not kernelscope's own
  ``kernelscope::`` markers), else ``other_ns`` (nothing traced on the host).
  Host events of every thread count. ``python_function`` events (``with_stack``) do not: they cover the whole
  step, so counting them (as TensorBoard did) would make the split depend on the recording options.
  Unions are storage/intervals.py's. The eight parts add up to ``dur_ns``; ``idle_ns`` = runtime +
  dataloader + python_gc + cpu_op + other.
- **Window**: a maximal run of consecutive step numbers (a schedule's active cycle; ``phase=`` steps form one).
  **Warm-up**: the first ``warmup`` steps (option, default 1) of each window that holds more steps than that:
  just after the profiler starts recording (CUPTI set-up, cold caches) a step is slower than the rest (a
  one-step recording has nothing to compare it with: not marked). The default is 0 when the trace's provenance
  records a torch.profiler schedule with ``warmup`` >= 1: the profiler ran those steps before each window
  without keeping them, so the first recorded step is already past its warm-up. **Partial**: the first or last step of
  a window whose GPU work the trace window cut: a kernel/memcpy/memset/graph launch call inside its host range
  has no GPU activity in the trace (``lost_launches``; more of them than any other step of the window has,
  since a call that never makes GPU work is lost in every step), or GPU activities with no launch call in the trace
  run during it (``unlaunched``: they overlap ``[min(host start, start), end)``; queued before recording
  started), or it launched fewer than 80% of the GPU
  activities of its neighbour in the window (TensorBoard dropped such a last step; here it is kept and
  marked). ``note`` says why a step is marked. No step is ever dropped.
- **Spread** over the **steady** steps (neither warm-up nor partial; all steps, with a warning, when none is
  steady): ``step_time_median_ns``, ``step_time_min_ns``, ``step_time_max_ns``, ``step_time_mean_ns`` and
  ``step_time_cv`` = population standard deviation / mean of their ``dur_ns`` (null for fewer than two; the
  median of an even count is the mean of the middle two, rounded to the ns). ``breakdown``: per category its
  mean ns over the steady steps and its share of their mean step time.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import pandas as pd

from ..errors import UsageError
from ..storage.idle import GC_ANNOTATION, gc_ranges_sql
from ..storage.intervals import covered_before, islands
from .result import Result
from .rows import query_row, query_rows
from .summary import trace_profiler_options

DESCRIPTION = ("Per ProfilerStep: kernel, memcpy, memset, runtime, dataloader, Python GC, CPU-op and other time "
               "(TensorBoard's overview), step-time spread, warm-up and partial steps marked.")

#: Categories in priority order (the GPU's first, then what the host did while the GPU idled).
CATEGORIES = ("kernel", "memcpy", "memset", "runtime", "dataloader", "python_gc", "cpu_op", "other")
GPU_LAUNCH_TYPES = ("kernel", "memcpy", "memset", "graph")
NEIGHBOUR_SHARE = 0.8  # TensorBoard's tail rule: fewer than 80% of the neighbour's activities

_DATALOADER = ("((starts_with(name, 'enumerate(DataLoader)#') AND ends_with(name, '.__next__')) "
               "OR starts_with(name, 'enumerate(DataPipe)#'))")


def is_dataloader(name: str) -> bool:
    """``_DATALOADER`` in Python: a DataLoader's next-batch range (recommend's rules leave it to input_pipeline)."""
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) \
        or name.startswith("enumerate(DataPipe)#")

_COLUMNS = ["step", "name", "start_ns", "dur_ns", *[f"{c}_ns" for c in CATEGORIES], "idle_ns",
            "host_start_ns", "host_dur_ns", "gpu_tail_ns", "activities", "lost_launches", "unlaunched",
            "warmup", "partial", "note"]


def _host_steps(store, trace_id: str, phase: str | None) -> list[dict[str, Any]]:
    if phase is None:
        where, params = "kind = 'step'", {"t": trace_id}
    else:
        where, params = "kind IN ('user', 'nvtx') AND name = $phase", {"t": trace_id, "phase": phase}
    rows = query_rows(store, f"""
        SELECT ann_id, step, name, start_ns, end_ns FROM annotations
        WHERE trace_id = $t AND {where} ORDER BY start_ns, end_ns, ann_id""", **params)
    for i, r in enumerate(rows):
        if phase is not None or r["step"] is None:
            r["step"] = i
    return rows


#: The most repeated ranges a trace without steps offers as ``phase=`` (trust ``phase_candidates``).
PHASE_CANDIDATES = 5


def _phase_candidates(store, trace_id: str) -> list[dict[str, Any]]:
    """The user/NVTX ranges this trace could use as steps (``phase=NAME``), the most repeated first (then the most
    time): ``[{"name", "ranges", "total_ns"}]``; kernelscope profile's garbage-collection ranges are not steps."""
    return query_rows(store, """
        SELECT name, count(*) AS ranges, CAST(sum(dur_ns) AS BIGINT) AS total_ns FROM annotations
        WHERE trace_id = $t AND kind IN ('user', 'nvtx') AND name IS NOT NULL AND name <> $gc
        GROUP BY name ORDER BY ranges DESC, total_ns DESC, name LIMIT $n""",
        t=trace_id, gc=GC_ANNOTATION, n=PHASE_CANDIDATES)


def _step_src(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    return {"i": list(range(len(rows))), "hs": [int(r["start_ns"]) for r in rows],
            "he": [int(r["end_ns"]) for r in rows]}


_HOST = "(SELECT unnest($i) AS i, unnest($hs) AS hs, unnest($he) AS he)"


def _gpu_work(store, trace_id: str, rows) -> dict[int, dict[str, Any]]:
    """Per host step: first start, last end and count of the GPU activities launched inside it, and its
    launch calls of GPU work with no activity in the trace. Steps are walked in start order, as TensorBoard
    does: a call belongs to the last step starting at or before it, when it also ends inside that step."""
    types = ", ".join(f"'{t}'" for t in GPU_LAUNCH_TYPES)
    out = query_rows(store, f"""
        WITH s AS {_HOST},
        c AS (SELECT launch_id, launch_type, activities, start_ns, end_ns FROM launches
              WHERE trace_id = $t AND start_ns >= $lo AND end_ns <= $hi),
        l AS (SELECT s.i, c.launch_id, c.launch_type, c.activities FROM c ASOF JOIN s ON c.start_ns >= s.hs
              WHERE c.end_ns <= s.he)
        SELECT l.i, min(a.start_ns) AS dev_start, max(a.end_ns) AS dev_end, count(a.activity_id) AS activities,
               count(*) FILTER (WHERE l.activities = 0 AND l.launch_type IN ({types})) AS lost_launches
        FROM l LEFT JOIN gpu_activities a ON a.trace_id = $t AND a.launch_id = l.launch_id
        GROUP BY l.i""", t=trace_id, lo=min(int(r["start_ns"]) for r in rows),
                     hi=max(int(r["end_ns"]) for r in rows), **_step_src(rows))
    return {int(r["i"]): r for r in out}


def _spans(store, trace_id: str, rows, work) -> list[tuple[int, int]]:
    """TensorBoard's step spans (module docstring, "Span")."""
    if not any(w["activities"] for w in work.values()):
        return [(int(r["start_ns"]), int(r["end_ns"])) for r in rows]
    prev_end = int(rows[0]["start_ns"])
    first = work.get(0)
    if first is not None and first["dev_start"] is not None:
        before = query_row(store, f"""
            WITH s AS {_HOST}
            SELECT max(a.end_ns) AS e FROM gpu_activities a
            LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
            WHERE a.trace_id = $t AND a.end_ns < $d0 AND NOT EXISTS (
              SELECT 1 FROM s WHERE l.start_ns >= s.hs AND l.end_ns <= s.he)""",
                           t=trace_id, d0=int(first["dev_start"]), **_step_src(rows))
        if before.get("e") is not None:
            prev_end = max(prev_end, int(before["e"]))
    spans = []
    for i, r in enumerate(rows):
        start = max(prev_end, int(r["start_ns"]))
        w = work.get(i)
        if w is None or w["dev_end"] is None:
            end = max(int(r["end_ns"]), start)
        else:
            end = max(int(r["end_ns"]), int(w["dev_end"]), start)
        spans.append((start, end))
        prev_end = end
    return spans


def _coverage(store, trace_id: str, spans, phase: str | None) -> dict[tuple[int, int], int]:
    """ns of span i covered by the union of every interval of priority level <= L (1 kernel, 2 memcpy,
    3 memset, 4 runtime call, 5 dataloader range, 6 garbage collection, 7 CPU operator/annotation): {(i, L): ns}.

    Per level the union's islands (disjoint, in start order) give ``C(x)``, the covered length before time
    ``x`` (a running sum of island lengths and the island that starts last at or before ``x``); a span's
    coverage is ``C(end) - C(start)``. The intervals are read once and each level's union is built in numpy from
    the previous level's islands and the level's own intervals (``storage.intervals.islands``).
    Operators enter through the top-level ones: a nested operator lies inside its
    top-level operator, so it adds nothing to the union."""
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    is_step = "s.kind = 'step'" if phase is None else "s.kind IN ('user', 'nvtx') AND s.name = $phase"
    win = "trace_id = $t AND end_ns > $lo AND start_ns < $hi"
    ann = f"""
      SELECT u.name, u.start_ns, u.end_ns FROM annotations u
      WHERE u.trace_id = $t AND u.end_ns > $lo AND u.start_ns < $hi AND u.kind IN ('user', 'nvtx')
        AND NOT (u.name IS NOT NULL AND starts_with(u.name, 'kernelscope::'))
        AND NOT EXISTS (SELECT 1 FROM annotations s WHERE s.trace_id = $t AND {is_step}
                        AND (s.ann_id = u.ann_id OR (u.start_ns <= s.start_ns AND u.end_ns >= s.end_ns)))"""
    raw = {
        1: f"SELECT start_ns, end_ns FROM gpu_activities WHERE {win} AND kind = 'kernel'",
        2: f"SELECT start_ns, end_ns FROM gpu_activities WHERE {win} AND kind = 'memcpy'",
        3: f"SELECT start_ns, end_ns FROM gpu_activities WHERE {win} AND kind = 'memset'",
        4: f"SELECT start_ns, end_ns FROM launches WHERE {win}",
        5: f"SELECT start_ns, end_ns FROM cpu_ops WHERE {win} AND {_DATALOADER} "
           f"UNION ALL SELECT start_ns, end_ns FROM ann WHERE {_DATALOADER}",
        6: f"SELECT start_ns, end_ns FROM ({gc_ranges_sql(win)})",
        7: f"SELECT start_ns, end_ns FROM cpu_ops WHERE {win} AND coalesce(depth, 0) = 0 "
           "UNION ALL SELECT start_ns, end_ns FROM ann",
    }
    levels = " UNION ALL ".join(f"SELECT {lvl} AS lvl, start_ns, end_ns FROM ({sql})" for lvl, sql in raw.items())
    params = {"t": trace_id, "lo": lo, "hi": hi}
    if phase is not None:
        params["phase"] = phase
    got = store.query(f"WITH ann AS ({ann}) {levels}", params)
    lv = got["lvl"].to_numpy()
    rs, re_ = got["start_ns"].to_numpy(np.int64), got["end_ns"].to_numpy(np.int64)
    xs = np.array(sorted({x for span in spans for x in span}), dtype=np.int64)
    at = {int(x): k for k, x in enumerate(xs)}
    out: dict[tuple[int, int], int] = {}
    starts = ends = np.empty(0, dtype=np.int64)
    for lvl in raw:
        mine = lv == lvl
        starts, ends = islands(np.concatenate((starts, rs[mine])), np.concatenate((ends, re_[mine])))
        c = covered_before(starts, ends, xs)
        for i, (s0, e0) in enumerate(spans):
            out[(i, lvl)] = int(c[at[e0]] - c[at[s0]])
    return out


def _unlaunched(store, trace_id: str, rows, spans) -> dict[int, int]:
    """Per step: GPU activities with no launch call in the trace that run during it (overlap
    ``[min(host start, start), end)``)."""
    lo = [min(int(r["start_ns"]), s) for r, (s, _) in zip(rows, spans)]
    got = query_rows(store, """
        WITH sp AS (SELECT unnest($i) AS i, unnest($lo) AS lo, unnest($se) AS se)
        SELECT sp.i, count(*) AS n FROM gpu_activities a JOIN sp ON a.end_ns > sp.lo AND a.start_ns < sp.se
        WHERE a.trace_id = $t AND a.launch_id IS NULL GROUP BY sp.i""",
                     t=trace_id, i=list(range(len(spans))), lo=lo, se=[e for _, e in spans])
    return {int(r["i"]): int(r["n"]) for r in got}


def _windows(numbers: list[int], phase: str | None) -> list[list[int]]:
    """Row indices grouped into windows: runs of consecutive step numbers (one window for phase steps)."""
    if phase is not None:
        return [list(range(len(numbers)))]
    out: list[list[int]] = []
    for i, n in enumerate(numbers):
        if out and n == numbers[out[-1][-1]] + 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _activities(n) -> str:
    return f"{int(n)} GPU activit{'y' if int(n) == 1 else 'ies'}"


def _mark(df: pd.DataFrame, windows: list[list[int]], warmup: int) -> None:
    notes: list[list[str]] = [[] for _ in range(len(df))]
    warm = [False] * len(df)
    partial = [False] * len(df)
    for w in windows:
        for i in (w[:warmup] if len(w) > warmup else []):  # a window of warm-up steps alone marks none
            warm[i] = True
            notes[i].append("warm-up: first step(s) of its recording window")
        edges = [(w[0], w[1] if len(w) > 1 else None, "first")]
        if len(w) > 1:
            edges.append((w[-1], w[-2], "last"))
        for i, nb, which in edges:
            why = []
            # launch calls that never make GPU work (a cudaMemsetAsync of nothing, once a step) are lost in
            # every step: only those beyond the fewest any other step of the window has were cut off
            base = min((int(df.at[j, "lost_launches"]) for j in w if j != i), default=0)
            lost = int(df.at[i, "lost_launches"]) - base
            if lost > 0:
                why.append(f"{lost} launch call(s) without their GPU activity"
                           + (f" (beyond the {base} every other step of its window has)" if base else ""))
            if df.at[i, "unlaunched"]:
                why.append(f"{_activities(df.at[i, 'unlaunched'])} launched before the trace")
            if nb is not None and df.at[i, "activities"] < NEIGHBOUR_SHARE * df.at[nb, "activities"]:
                other = "next" if which == "first" else "previous"
                why.append(f"{_activities(df.at[i, 'activities'])} against {df.at[nb, 'activities']} "
                           f"in the {other} step")
            if why:
                partial[i] = True
                notes[i].append(f"partial ({which} step of its window): " + "; ".join(why))
    df["warmup"] = warm
    df["partial"] = partial
    df["note"] = ["; ".join(n) for n in notes]


def _default_warmup(store, trace_id: str) -> tuple[int, str]:
    """(warm-up steps per window, why): 1, or 0 when the trace's provenance records a schedule that warmed up."""
    sched = trace_profiler_options(store, trace_id).get("schedule")
    n = sched.get("warmup") if isinstance(sched, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        return 0, f"0: the profiler's schedule warmed up {n} step(s) before each recording window (provenance)"
    return 1, "1 (default)"


def steps(store, trace_id: str, phase: str | None = None, warmup: int | None = None) -> Result:
    """Per step: its span (TensorBoard's rule) split into kernel, memcpy, memset and the GPU's idle time by
    what the host did (runtime, dataloader, garbage collection, CPU operators, nothing traced); warm-up and
    partial steps marked; the spread of step times. Definitions: the module docstring and docs/metrics.md "Steps"."""
    if isinstance(phase, (int, float)) and not isinstance(phase, bool):  # -o phase=1 arrives as a number
        phase = str(phase)
    if phase is not None and (not isinstance(phase, str) or not phase):
        raise UsageError("phase= takes the name of a user annotation (record_function range), "
                         "e.g. -o phase=train_step.")
    if warmup is None:
        warmup, warmup_from = _default_warmup(store, trace_id)
    elif isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise UsageError(f"warmup= takes a whole number of steps >= 0, not {warmup!r}.")
    else:
        warmup_from = f"{warmup} (-o warmup)"
    rows = _host_steps(store, trace_id, phase)
    source = "ProfilerStep" if phase is None else f"annotation {phase}"
    trust: dict[str, Any] = {"source": source, "warmup": warmup_from}
    if not rows:
        trust["phase_candidates"] = _phase_candidates(store, trace_id)
        offer = ", ".join(f"'{c['name']}' ({c['ranges']:,} range{'s' if c['ranges'] != 1 else ''})"
                          for c in trust["phase_candidates"])
        sentence = ("This trace has no ProfilerStep#N ranges: torch.profiler records them only under a "
                    "schedule (prof.step() once per iteration with schedule=torch.profiler.schedule(...); "
                    "without one prof.step() leaves none), or use kernelscope.profile's p.step(), or name a "
                    "record_function range with -o phase=NAME" + (f"; this trace has {offer}." if offer else ".")
                    if phase is None else
                    f"This trace has no user annotation named '{phase}' (record_function('{phase}')) to use as steps"
                    + (f"; it has {offer}." if offer else "."))
        empty = pd.DataFrame({c: pd.Series(dtype="object" if c in ("name", "note") else
                                           "bool" if c in ("warmup", "partial") else "int64") for c in _COLUMNS})
        return Result(name="steps", definition=__doc__.strip(),
                      scalars={"step_count": 0, "steady_steps": 0, "warmup_steps": 0, "partial_steps": 0,
                               **dict.fromkeys(("step_time_median_ns", "step_time_min_ns", "step_time_max_ns",
                                                "step_time_mean_ns", "step_time_cv"))},
                      tables={"steps": empty, "breakdown": _breakdown(empty)}, warnings=[sentence], trust=trust)
    work = _gpu_work(store, trace_id, rows)
    spans = _spans(store, trace_id, rows, work)
    cov = _coverage(store, trace_id, spans, phase)
    unl = _unlaunched(store, trace_id, rows, spans)
    out = []
    for i, (r, (s, e)) in enumerate(zip(rows, spans)):
        dur = e - s
        c = [0, *(cov.get((i, lvl), 0) for lvl in range(1, len(CATEGORIES))), dur]  # covered by levels <= L
        parts = [b - a for a, b in zip(c, c[1:])]
        w = work.get(i) or {}
        out.append({"step": int(r["step"]), "name": r["name"], "start_ns": s, "dur_ns": dur,
                    **{f"{k}_ns": v for k, v in zip(CATEGORIES, parts)}, "idle_ns": sum(parts[3:]),
                    "host_start_ns": int(r["start_ns"]), "host_dur_ns": int(r["end_ns"]) - int(r["start_ns"]),
                    "gpu_tail_ns": max(0, e - int(r["end_ns"])), "activities": int(w.get("activities") or 0),
                    "lost_launches": int(w.get("lost_launches") or 0), "unlaunched": unl.get(i, 0)})
    df = pd.DataFrame(out, columns=[c for c in _COLUMNS if c not in ("warmup", "partial", "note")])
    _mark(df, _windows([int(r["step"]) for r in rows], phase), int(warmup))
    df = df[_COLUMNS]
    steady = df[~df["warmup"] & ~df["partial"]]
    warnings = []
    if steady.empty:
        steady = df
        warnings.append(f"every one of the {len(df)} step(s) is warm-up or partial: the spread is over all of them "
                        "(-o warmup=0 marks no warm-up).")
    durs = [int(d) for d in steady["dur_ns"]]
    mean = statistics.fmean(durs)
    scalars = {
        "step_count": len(df), "steady_steps": len(steady) if not warnings else 0,
        "warmup_steps": int(df["warmup"].sum()), "partial_steps": int(df["partial"].sum()),
        "step_time_median_ns": int(round(statistics.median(durs))),
        "step_time_min_ns": min(durs), "step_time_max_ns": max(durs), "step_time_mean_ns": int(round(mean)),
        "step_time_cv": (statistics.pstdev(durs) / mean) if mean > 0 and len(durs) > 1 else None,
    }
    loaders = store.query(f"""
        SELECT DISTINCT name FROM cpu_ops WHERE trace_id = $t AND {_DATALOADER}
        UNION SELECT DISTINCT name FROM annotations WHERE trace_id = $t AND kind IN ('user', 'nvtx') AND {_DATALOADER}
        ORDER BY name""", {"t": trace_id})
    trust.update({"dataloaders": list(loaders["name"]), "gpu_tail_steps": int((df["gpu_tail_ns"] > 0).sum()),
                  "devices": int(query_row(store, "SELECT count(DISTINCT device) AS n FROM gpu_activities "
                                                  "WHERE trace_id = $t", t=trace_id).get("n") or 0)})
    return Result(name="steps", definition=__doc__.strip(), scalars=scalars,
                  tables={"steps": df, "breakdown": _breakdown(steady)}, warnings=warnings, trust=trust)


def _breakdown(steady: pd.DataFrame) -> pd.DataFrame:
    """Per category: mean ns over ``steady`` and its share of their mean step time."""
    n = len(steady)
    total = int(steady["dur_ns"].sum()) if n else 0
    rows = []
    for c in CATEGORIES:
        s = int(steady[f"{c}_ns"].sum()) if n else 0
        rows.append({"category": c, "mean_ns": int(round(s / n)) if n else None,
                     "share": (s / total) if total else None})
    return pd.DataFrame(rows, columns=["category", "mean_ns", "share"])
