"""Recommendations: rules over the other analyses' results, each finding citing the numbers it rests on.

recommend reads bound, launch, kernels, bandwidth, steps, memory, whatif and comm on one trace and checks fourteen
rules. A finding
has a ``rule`` id, a ``severity`` (from the rule's main share: >= 0.5 high, >= 0.2 medium, else low), a
``message`` with the numbers, ``evidence`` (a list of ``{"analysis", "key", "value"}`` plus ``"row"`` for
a table cell: the cited analysis' own output, unchanged) and ``saving_ns`` (estimated time saved, null
when it cannot be computed). No number is re-derived here: every input is read from another Result.

Rules (thresholds below):
1. ``host_bound_launch``: bound ``host_wait_share`` >= HOST_WAIT_MIN and, among bound's top TOP_IDLE_OPS
   ``idle_operators``, the launch-heavy ones (launch ``per_leaf_op``: ``launch_bound_calls / calls`` >=
   LAUNCH_HEAVY_CALLS) cause >= LAUNCH_HEAVY_IDLE_MIN of those operators' idle. Saving: whatif
   ``observed_ns - predicted_ns``.
2. ``gpu_bound``: launch ``mean_queue_depth`` >= QUEUE_DEPTH_MIN, unless the launch calls' own time is
   API_SHARE_MAX or more of TKLQT (then the depth is host time, not work queued on the GPU; a warning says so);
   names kernels' top category.
3. ``low_bandwidth``: per bandwidth ``per_signature`` row with ``bound = memory``, ``pct_peak_bw`` <
   LOW_BW_PCT and ``gpu_ns / gpu_ns(total)`` >= LOW_BW_TIME_SHARE (one finding per signature).
4. ``short_kernels``: kernels ``short_kernel_share`` >= SHORT_SHARE_MIN over at least SHORT_KERNELS_MIN short
   kernels. When most of that time (``short_graph_kernel_ns`` >= SHORT_IN_GRAPHS_MIN of it) already ran inside
   CUDA graphs, the advice is fusion or more work per kernel, not graphs.
5. ``sync_stalls``: bound ``idle_causes`` rows ``sync`` + ``d2h_copy``: summed ``share_of_host_wait`` >=
   SYNC_SHARE_MIN. Saving: their summed ``idle_ns``.
6. ``low_tensor_core``: kernels ``categories`` gemm ``share`` >= GEMM_SHARE_MIN and
   ``tensor_core_share_of_gemm_attention`` < TENSOR_CORE_MIN; cites bandwidth ``tf32_matmul`` when it
   came from the trace's provenance; advises no precision when bandwidth's tensor-core operators already run
   mostly in 16 bits (rules._low_precision).
7. ``host_overhead``: bound ``host_wait_share`` >= HOST_WAIT_MIN where rule 1 does not fire, although at least
   GRAPH_KERNELS_MIN of the kernels replay from CUDA graphs (launch ``graph_kernels`` over it plus
   ``kernels``): the host work between replays, which graphs do not remove. Names bound's top
   HOST_OVERHEAD_OPS ``idle_operators`` with their ``share_of_host_wait``; when torch.compile's compile phases
   (operators named ``... (dynamo_timed)``) hold COMPILE_SHARE_MIN of the host wait, says the trace records
   compilation and to profile after the warm-up.
8. ``slow_host_calls``: bound ``host_wait_share`` >= HOST_WAIT_MIN and, among bound's top TOP_IDLE_OPS
   ``idle_operators``, the slow calls (each kept the GPU waiting bound.SLOW_CALL_NS or more: host work inside the
   call, not launching; DataLoader ranges left to rule 9) hold >= SLOW_CALLS_SHARE_MIN of the host wait. When
   most of them are the operator's first call with their input shapes, says it is a per-shape one-time cost and
   to fix the shapes; when one cause other than the operators' own work is the main_category of operators holding
   half of it or more, names it. Rule 1 does not count slow calls' idle as launch-heavy. Saving: their summed
   ``slow_call_idle_ns``.
9. ``input_pipeline``: steps ``breakdown`` row ``dataloader``: ``share`` > DATALOADER_SHARE_MIN (the GPU idle
   while the host is inside a DataLoader's ``__next__``, over the steady steps: TensorBoard's overview category
   and its recommendation's threshold). The advice follows the loader steps' ``trust.dataloaders`` names: a
   single-process iterator (``num_workers=0``) or worker processes that do not keep up. Saving: ``mean_ns`` x the
   steady steps.
10. ``memory_at_limit``: memory ``device_memory`` ``peak_share_of_device`` > MEMORY_SHARE_MIN on a device (the
   allocator's peak against the device's memory: TensorBoard's recommendation and its threshold); names the
   peak's operator and module. No saving: it costs no time, it caps the batch and risks an out-of-memory.

11. ``exposed_communication``: bound ``comm_only_share`` > COMM_ONLY_SHARE_MIN (only collective kernels run:
   TensorBoard's recommendation on communication and its threshold). When the trace is a rank of a stored run
   (comm over the run, read only then) and another rank is comm's ``straggler_rank`` and this rank's
   ``ranks.wait_ns`` is at least STRAGGLER_WAIT_MIN of the comm-only time, it says the time is waiting for that
   rank and to even out its work; else it advises overlap, compression or fewer collectives. No saving.

12. ``warmup_dominates``: the steps analysis' warm-up steps hold >= WARMUP_SHARE_MIN of the recorded steps' time
   (summed ``dur_ns``): first calls that autotune, build plans or compile, so every whole-trace number mostly
   describes them; names the steady steps' median and the schedule that records after a warm-up. It frames the
   others, so it is listed first. No saving: a one-time cost.

13. ``unaligned_gemm`` (rule_gemm.py): bandwidth ``per_signature`` compute-bound GEMM rows in fp16/bf16 (fp8) with
   a leading dimension (rule_gemm.leading_dims, from ``input_strides``) not a multiple of 8 (16), at
   ``pct_peak_flops`` < UNALIGNED_PCT_MAX, together
   >= UNALIGNED_SHARE_MIN of GPU time; advises padding to a multiple of 64. Saving: each one's time at the median
   ``pct_peak_flops`` of the trace's other GEMMs of its dtype.

14. ``gc_pauses``: bound ``idle_causes`` row ``python_gc`` (Python's garbage collector on the launching thread):
   ``share_of_host_wait`` >= GC_SHARE_MIN; advises gc.freeze() after set-up, or gc.disable() in the loop with
   collections where a pause costs nothing. Saving: its ``idle_ns``. A host-side rule: the profiler's own objects
   bring collections on, which the inflation warning below says, unless kernelscope profile's un-profiled pass
   paused at least ``GC_OWN_SHARE`` as long (provenance ``python_gc``): then the message says the pauses are the
   script's own and the warning leaves the rule out.

Rule 2 adds, when bound's ``host_wait_share`` >= GPU_BOUND_HOST_NOTE, that the GPU also waits on the host for that
share of its span: the mean queue depth averages the bursts in which kernels queue deep and the waits between.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pandas as pd

from ..errors import KernelscopeError
from ..units import NS_PER_MS
from . import cache
from .result import Result
from .rules import API_SHARE_MAX, NEEDS, QUEUE_DEPTH_MIN, RULES, _api_share, _num, evaluate
from .summary import launches_without_kernel, trace_profiler_inflation, trace_profiler_options, trace_python_gc

DESCRIPTION = ("Rules over bound/launch/whatif/kernels/bandwidth/steps/memory/comm: findings with cited evidence "
               "and savings.")


#: The analyses the rules read whole.
WHOLE = ("whatif", "kernels", "bandwidth", "steps", "memory")
#: launch's and bound's tables the rules read (launch computes only these; bound skips its binned tables).
LAUNCH_TABLES = ("per_leaf_op",)
BOUND_TABLES = ("devices", "idle_causes", "idle_operators")


def _sources() -> dict[str, Callable[..., Result]]:
    """The analyses recommend reads, through the process's cache (analysis/cache.py: each once per trace and
    process, shared with the pages and the report; bound and launch as the parts the rules read unless whole
    ones are cached); looked up at call time (tests replace them with fakes)."""
    return {"bound": lambda s, t: cache.analysis_part(s, "bound", t, BOUND_TABLES),
            "launch": lambda s, t: cache.analysis_part(s, "launch", t, LAUNCH_TABLES),
            "comm": lambda s, t: cache.analysis(s, "comm", [t]),  # the trace's run (or the trace alone)
            **{n: (lambda s, t, n=n: cache.analysis(s, n, t)) for n in WHOLE}}


class _Results(dict):
    """name -> Result, each analysis run on first use (once): ``res[name]`` runs it, ``name in res`` and
    ``res.get(name)`` too; a failed one (KernelscopeError) becomes a warning and reads as missing. So an
    analysis runs only when a rule reaches it: whatif only for a host_bound_launch finding's saving."""

    def __init__(self, store, trace_id: str, given: dict[str, Result], warnings: list[str]):
        super().__init__(given)
        self._store, self._trace, self._warnings, self._failed = store, trace_id, warnings, set()
        self.trace_id = trace_id  # for a rule that finds this trace among a run's ranks (exposed_communication)
        self._fns = _sources()

    def __missing__(self, name: str) -> Result:
        if name in self._failed or name not in self._fns:
            raise KeyError(name)
        try:
            self[name] = self._fns[name](self._store, self._trace)
        except KernelscopeError as e:
            self._failed.add(name)
            self._warnings.append(f"analysis '{name}' failed, its rules are skipped: {e}")
            raise KeyError(name) from None
        return dict.__getitem__(self, name)

    def prefetch(self, names) -> None:
        """Run the named analyses that every evaluation needs at once, each in a thread on its own connection
        (DuckDB runs queries outside the GIL, so the SQL of one overlaps the Python of another)."""
        todo = [n for n in names if n in self._fns and n not in self._failed and not dict.__contains__(self, n)]
        if len(todo) < 2 or (os.cpu_count() or 1) < 2 or not hasattr(self._store, "map_cursors"):
            return

        def run(sub, name):
            try:
                return self._fns[name](sub, self._trace), None
            except KernelscopeError as e:
                return None, e
        done = self._store.map_cursors(run, todo)
        for name, (res, err) in zip(todo, done):  # in name order: warnings do not depend on timing
            if err is None:
                self[name] = res
            else:
                self._failed.add(name)
                self._warnings.append(f"analysis '{name}' failed, its rules are skipped: {err}")

    def __contains__(self, name) -> bool:
        try:
            self[name]
        except KeyError:
            return False
        return True

    def get(self, name, default=None):
        return self[name] if name in self else default


#: Rules whose findings read host-side time (host wait, launch and sync calls, host work inside slow calls), which
#: a profiler recording Python stacks or allocations inflates.
HOST_RULES = frozenset({"host_bound_launch", "host_overhead", "sync_stalls", "slow_host_calls", "gc_pauses"})
#: Profiled steps this many times their un-profiled time (as ``kernelscope profile`` measured them): a third of the
#: host-side time or more is the profiler's, whatever its options.
INFLATION_WARN = 1.5


#: The torch.profiler options that slow the host: what they add, and the ``kernelscope profile`` flag that sets them.
_SLOWING = {"with_stack": ("Python tracing", "--stack"), "with_modules": ("module records", "--modules"),
            "profile_memory": ("allocation records", "--memory")}


def _and(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _slowing_options(store, trace_id: str) -> list[str]:
    """The torch.profiler options that slow the host which the trace's collector run had on (with_stack,
    profile_memory), from its provenance; [] when off or not recorded (not a kernelscope collector run)."""
    opts = trace_profiler_options(store, trace_id)
    return [k for k in _SLOWING if opts.get(k) is True]


def _measured_inflation(store, trace_id: str) -> tuple[float, str] | None:
    """(profiled / un-profiled time, how it was measured) per step or kernelscope.range region, as
    ``kernelscope profile`` measured it when it recorded the trace (provenance ``profiler_overhead``); else None."""
    measured = trace_profiler_inflation(store, trace_id)
    if measured is None:
        return None
    ratio, o = measured
    what = "steps" if o["basis"] == "step" else "kernelscope.range regions"
    return ratio, (f"kernelscope profile measured its recorded {what} at {ratio:.2f}x their un-profiled time "
                   f"(median of {o.get('n')})")


#: The un-profiled run's full collections took at least this share of the profiled run's: the pauses are the script's.
GC_OWN_SHARE = 0.5


def _own_gc_pauses(store, trace_id: str, findings: list[dict]) -> bool:
    """When ``gc_pauses`` fired and kernelscope profile's un-profiled pass spent at least ``GC_OWN_SHARE`` of the
    profiled pass's time in full collections (provenance ``python_gc``), say so in its message and return True: the
    pauses are the script's own, not the profiler's (whose objects can bring collections on), so the profiler-
    inflation warning does not cast doubt on that finding."""
    gc_find = next((f for f in findings if f["rule"] == "gc_pauses"), None)
    if gc_find is None:
        return False
    g = trace_python_gc(store, trace_id)
    prof, base = g.get("profiled") or {}, g.get("unprofiled") or {}
    p_ns, b_ns = prof.get("ns"), base.get("ns")
    if not isinstance(p_ns, int) or not isinstance(b_ns, int) or p_ns <= 0 or b_ns < GC_OWN_SHARE * p_ns:
        return False
    n = base.get("full_collections")
    gc_find["message"] += (f" The un-profiled run paused as much ({n} full collection{'s' if n != 1 else ''}, "
                           f"{b_ns / NS_PER_MS:,.1f} ms, against {prof.get('full_collections')} and "
                           f"{p_ns / NS_PER_MS:,.1f} ms profiled): these pauses are the script's own, not the "
                           "profiler's.")
    return True


def _captured(store, trace_id: str) -> int:
    """Kernel launch calls recorded into a graph by stream capture in the profiled window (summary's trust)."""
    return launches_without_kernel(store, trace_id)["in_capture"]


def recommend(store, trace_id: str, results: dict[str, Result] | None = None) -> Result:
    """Run the cited analyses on ``trace_id`` and check every rule (module docstring). An analysis that
    fails (a KernelscopeError) becomes a warning and the rules needing it are skipped.

    ``results``: analyses already run on this trace by the caller (name -> Result), reused as they are; a
    missing one is read through the process's cache (``_sources``) when a rule first needs it (whatif only for a
    host_bound_launch finding's saving)."""
    warnings: list[str] = []
    res = _Results(store, trace_id, dict(results or {}), warnings)
    res.prefetch(sorted({n for rule in RULES for n in NEEDS[rule]}))  # whatif stays lazy
    findings, skipped = evaluate(res)
    own = {"gc_pauses"} if _own_gc_pauses(store, trace_id, findings) else set()
    host = sorted({f["rule"] for f in findings if f["rule"] in HOST_RULES} - own)
    slow = _slowing_options(store, trace_id) if host else []
    measured = _measured_inflation(store, trace_id) if host else None
    measured = measured if measured is not None and measured[0] >= INFLATION_WARN else None
    if slow or measured:  # (a torch.compile'd ViT step with --modules --memory: 5.95x, slow_host_calls fired)
        one = len(slow) == 1
        why = [f"the trace was recorded with {_and(slow)}, which {'slows' if one else 'slow'} the host side ("
               + ", ".join(_SLOWING[k][0] for k in slow) + ")"] if slow else []
        why += [measured[1]] if measured else []
        advice = (f"profile again without {'it' if one else 'them'} (kernelscope profile without "
                  + _and([_SLOWING[k][1] for k in slow]) + ")" if slow else
                  "compare them with the un-profiled run (the Overview's profiler inflation)")
        warnings.append("; ".join(why) + f": the host-side findings ({', '.join(host)}) may be the profiler's own; "
                        f"{advice} before acting on them.")
    b = dict.get(res, "bound")
    fired = {f["rule"] for f in findings}
    lch = dict.get(res, "launch")
    depth = None if lch is None else _num(lch.scalars.get("mean_queue_depth"))
    api_share = 0.0 if lch is None else _api_share(lch)
    if depth is not None and depth >= QUEUE_DEPTH_MIN and api_share >= API_SHARE_MAX:
        warnings.append(
            f"the mean queue depth is {depth:.2f} (launch) but {api_share:.0%} of TKLQT is the launch calls' "
            "own duration (api_ns), host time rather than work queued on the GPU, so gpu_bound does not fire; the "
            "slowest launch calls (Timeline, Launch page) are the ones to look at (first launches that load code, "
            "say).")
    if {"host_bound_launch", "gpu_bound"} <= fired:  # they read as opposite verdicts
        warnings.append(
            "host_bound_launch and gpu_bound both fired: they describe different stretches of the run, the GPU "
            "waiting on the host between bursts in which kernels queue deep; the Bound page's CPU-bound and "
            "GPU-bound segments (kernelscope analyze bound) show which stretch is which and how long each is.")
    if findings:
        captured = _captured(store, trace_id)
        kernels = dict.get(res, "kernels")
        ran = None if kernels is None else _num(kernels.scalars.get("kernels"))
        if captured and ran is not None and captured >= ran:
            warnings.append(
                f"{captured:,} kernel launch calls in this trace were recorded into a CUDA graph by stream capture "
                f"and did not run in it, against {int(ran):,} kernels that ran: the trace shows a graph capture, "
                "so the findings describe the capture, not the work it replays; profile the replays for those.")
    if b is not None and b.scalars.get("gpu_span_ns") is None:  # every rule reads GPU time
        warnings.append("the trace has no GPU activity that kernelscope analyses, so no rule can fire: record "
                        "with ProfilerActivity.CUDA (torch.profiler's default on a GPU machine) for findings.")
    order = {"high": 0, "medium": 1, "low": 2}
    findings.sort(key=lambda f: (f["rule"] != "warmup_dominates", order[f["severity"]], -(f["saving_ns"] or 0)))
    cols = ["rule", "severity", "message", "saving_ns", "evidence"]
    table = pd.DataFrame(findings, columns=cols)
    table["saving_ns"] = table["saving_ns"].astype("Int64")
    ev_rows = [{"rule": f["rule"], "analysis": e["analysis"], "key": e["key"],
                "row": e.get("row"), "value": e["value"]} for f in findings for e in f["evidence"]]
    evidence = pd.DataFrame(ev_rows, columns=["rule", "analysis", "key", "row", "value"])
    evidence["value"] = pd.Series([e["value"] for e in ev_rows], dtype=object)  # ints stay ints
    return Result(
        name="recommend",
        definition=__doc__.strip(),
        scalars={"trace_id": trace_id, "findings_count": len(findings),
                 "rules_fired": sorted({f["rule"] for f in findings})},
        tables={"findings": table, "evidence": evidence},
        warnings=warnings,
        trust={"analyses_run": sorted(dict.keys(res)), "rules_skipped": skipped},
    )
