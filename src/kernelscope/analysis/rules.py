"""The rules recommend checks (their definitions: recommend.py's docstring and docs/metrics.md
"Recommendations"): the thresholds, one function per rule over the cited analyses' Results (name -> Result),
and ``evaluate``. A rule reads only those Results and cites every number it uses (``_ev``)."""

from __future__ import annotations

import pandas as pd

from ..units import BYTES_PER_GIB, NS_PER_US, clip_text, ns_to_ms
from .bound import CAUSE_WORDS, SLOW_CALL_NS
from .findings import _ev, _finding, _ms, _num
from .result import Result
from .rule_gemm import rule_unaligned_gemm
from .steps import is_dataloader

# 1. host-bound launches
HOST_WAIT_MIN = 0.3  # below a third of the span the GPU idles mostly for GPU-side reasons; not the first fix
TOP_IDLE_OPS = 5  # the operators that cause most idle; past the top few each adds little
LAUNCH_HEAVY_CALLS = 0.5  # an operator is launch-heavy when most of its calls spend longer launching than running
LAUNCH_HEAVY_IDLE_MIN = 0.3  # launch-heavy operators must explain a real part of the top operators' idle
# 2. GPU-bound
QUEUE_DEPTH_MIN = 1.0  # on average at least one launched activity waits: the host is ahead of the GPU
API_SHARE_MAX = 0.5  # ... unless most of that wait is the launch call itself (first-launch code loading, say)
# 3. low bandwidth
LOW_BW_PCT = 30.0  # memory-bound kernels well written reach 60-90% of peak; under 30% something is wrong
LOW_BW_TIME_SHARE = 0.05  # smaller operators are not worth a finding
# 4. short kernels
SHORT_NS_LABEL = "10 us"  # kernels' own short threshold (its short_ns scalar is cited)
SHORT_SHARE_MIN = 0.3  # a third of kernel time in sub-10-us kernels: launch and tail effects dominate them
SHORT_KERNELS_MIN = 50  # fewer launches cost too little (50 x a few us) for fusion or a graph to be the first fix
SHORT_IN_GRAPHS_MIN = 0.5  # most of that time already replayed from CUDA graphs: graphs are not the advice
# 5. sync stalls
SYNC_SHARE_MIN = 0.2  # a fifth of host wait behind syncs/.item(): removable without touching kernels
# 6. tensor cores
GEMM_SHARE_MIN = 0.3  # GEMMs must be a large part of kernel time for their precision to matter
TENSOR_CORE_MIN = 0.5  # most GEMM/attention time off tensor cores: fp32 without TF32 (or fp64)
# 7. host overhead other than launches
HOST_OVERHEAD_OPS = 3  # the operators named in the message
COMPILE_SHARE_MIN = 0.2  # torch.compile compiling holds this much of the host wait: the trace records compilation
COMPILE_PHASE = " (dynamo_timed)"  # the suffix of torch.compile's compile-phase annotations
GRAPH_KERNELS_MIN = 0.5  # most kernels replayed from CUDA graphs: launches are gone, the host wait is not
# 8. slow host calls
SLOW_CALLS_SHARE_MIN = 0.2  # a fifth of the host wait in a few slow calls: one cause (a shape, a backend) to fix
# 9. input pipeline
DATALOADER_SHARE_MIN = 0.05  # TensorBoard's profiler plugin recommended more DataLoader workers above 5% of a step
# 10. memory at the device's limit
MEMORY_SHARE_MIN = 0.9  # TensorBoard's profiler plugin: the peak above 90% of the device's memory
# 11. exposed communication
COMM_ONLY_SHARE_MIN = 0.1  # TensorBoard's profiler plugin: communication above 10% of the step time
STRAGGLER_WAIT_MIN = 0.5  # this rank's collectives waited at least half its comm-only time for a later rank
# 12. a warm-up step that holds most of the trace
WARMUP_SHARE_MIN = 0.5  # the warm-up steps hold half the recorded steps' time: whole-trace numbers describe them
# 14. garbage-collection pauses
GC_SHARE_MIN = 0.05  # a twentieth of host wait in Python's garbage collector: one line (gc.freeze) removes most of it
# 2, qualified
GPU_BOUND_HOST_NOTE = 0.2  # a fifth of the span waiting on the host: the mean depth hides it, say so

RULES = ("warmup_dominates", "host_bound_launch", "host_overhead", "slow_host_calls", "input_pipeline", "gpu_bound",
         "low_bandwidth", "unaligned_gemm", "short_kernels", "sync_stalls", "gc_pauses", "low_tensor_core",
         "memory_at_limit", "exposed_communication")
NEEDS = {"host_bound_launch": ("bound", "launch"), "host_overhead": ("bound", "launch"), "slow_host_calls": ("bound",),
         "input_pipeline": ("steps",), "warmup_dominates": ("steps",), "memory_at_limit": ("memory",),
         "exposed_communication": ("bound",),
         "gpu_bound": ("launch", "kernels"),
         "low_bandwidth": ("bandwidth",), "unaligned_gemm": ("bandwidth",), "short_kernels": ("kernels",),
         "sync_stalls": ("bound",), "gc_pauses": ("bound",),
         "low_tensor_core": ("kernels",)}



def _top_idle_ops(bound: Result, n: int) -> pd.DataFrame:
    """bound's ``idle_operators`` with an operator, the ``n`` with the most idle first."""
    ops = bound.tables["idle_operators"].dropna(subset=["operator"])
    return ops.sort_values("idle_ns", ascending=False, kind="stable").head(n)


def _launch_heavy(res: dict[str, Result]) -> tuple[list[tuple[str, int]], int, list[dict]]:
    """Among bound's top TOP_IDLE_OPS idle operators, the launch-heavy ones (launch ``per_leaf_op``:
    ``launch_bound_calls / calls`` >= LAUNCH_HEAVY_CALLS) as (operator, idle_ns), the top operators' idle total,
    and the evidence for each heavy one. Rule 1 fires on them; rule 7 stays silent when rule 1 does."""
    ops = _top_idle_ops(res["bound"], TOP_IDLE_OPS)
    per = {r.name: r for r in res["launch"].tables["per_leaf_op"].dropna(subset=["name"]).itertuples(index=False)}
    heavy, ev = [], []
    for r in ops.itertuples(index=False):
        p = per.get(r.operator)
        if p is not None and p.calls > 0 and p.launch_bound_calls / p.calls >= LAUNCH_HEAVY_CALLS:
            heavy.append((r.operator, int(r.idle_ns) - _slow_ns(r)))  # slow calls are rule 8's, not launching
            ev += [_ev("bound", "idle_operators.idle_ns", r.idle_ns, {"operator": r.operator}),
                   _ev("launch", "per_leaf_op.launch_bound_calls", p.launch_bound_calls, {"name": r.operator}),
                   _ev("launch", "per_leaf_op.calls", p.calls, {"name": r.operator})]
    return heavy, int(ops["idle_ns"].sum()), ev


def _slow_ns(r) -> int:
    """The idle of an ``idle_operators`` row's slow calls (0 when the table has no such column)."""
    v = _num(getattr(r, "slow_call_idle_ns", None))
    return int(v) if v else 0


def _launches_explain(heavy: list[tuple[str, int]], total: int) -> bool:
    return total > 0 and sum(ns for _, ns in heavy) / total >= LAUNCH_HEAVY_IDLE_MIN


def rule_host_bound_launch(res: dict[str, Result]) -> list[dict]:
    b = res["bound"]
    hw = _num(b.scalars.get("host_wait_share"))
    if hw is None or hw < HOST_WAIT_MIN:
        return []
    heavy, total, heavy_ev = _launch_heavy(res)
    if not _launches_explain(heavy, total):
        return []
    heavy_ns = sum(ns for _, ns in heavy)
    ev = [_ev("bound", "host_wait_share", b.scalars["host_wait_share"]), *heavy_ev]
    names = ", ".join(n for n, _ in heavy)
    msg = (f"{hw:.0%} of the GPU span is host wait (bound); launch-heavy operators ({names}) cause "
           f"{heavy_ns / total:.0%} of the top-{TOP_IDLE_OPS} operators' idle ({_ms(heavy_ns)}).")
    saving = None
    w = res.get("whatif")
    if w is not None:
        pred, obs = w.scalars.get("predicted_ns"), w.scalars.get("observed_ns")
        if pred is not None and obs is not None:
            ev += [_ev("whatif", "predicted_ns", pred), _ev("whatif", "observed_ns", obs)]
            saving = max(int(obs) - int(pred), 0)
            cap = b.scalars.get("host_wait_ns")  # free launches end the GPU's wait on the host, no more: a larger
            capped = cap is not None and saving > int(cap)  # gap is streams whatif took as independent overlapping
            if capped:
                saving = int(cap)
                ev.append(_ev("bound", "host_wait_ns", cap))
            msg += (f" CUDA graphs (or fusion) would remove up to {_ms(saving)} (whatif: predicted {_ms(pred)} "
                    f"vs observed {_ms(obs)}" + ("; at most the host wait, bound)." if capped else ")."))
    else:
        msg += " CUDA graphs (or fusion) would remove most of it."
    return [_finding("host_bound_launch", hw, msg, ev, saving)]


def rule_host_overhead(res: dict[str, Result]) -> list[dict]:
    """Host wait of a run whose kernels already replay from CUDA graphs (a torch.compile'd model with
    mode="reduce-overhead", say, whose GPU waits in the compiled wrapper between replays); rule 1 covers the
    launch-heavy case."""
    b, lch = res["bound"], res["launch"]
    hw = _num(b.scalars.get("host_wait_share"))
    graph, plain = _num(lch.scalars.get("graph_kernels")) or 0, _num(lch.scalars.get("kernels")) or 0
    if hw is None or hw < HOST_WAIT_MIN or not graph or graph / (graph + plain) < GRAPH_KERNELS_MIN:
        return []
    heavy, total, _ = _launch_heavy(res)
    ops = _top_idle_ops(b, HOST_OVERHEAD_OPS)
    if _launches_explain(heavy, total) or ops.empty or "share_of_host_wait" not in ops:
        return []
    names = ", ".join(f"{r.operator} ({r.share_of_host_wait:.0%})" for r in ops.itertuples(index=False))
    msg = (f"{hw:.0%} of the GPU span is host wait (bound) although {graph / (graph + plain):.0%} of the kernels "
           f"replay from CUDA graphs (launch), so it is host work between replays, which graphs do not remove: "
           f"the GPU waits most during {names} of the host wait.")
    every = b.tables["idle_operators"].dropna(subset=["operator"])
    compiling = every[every["operator"].astype(str).str.endswith(COMPILE_PHASE)]
    compile_share = float(compiling["share_of_host_wait"].sum())
    cited = ops
    if compile_share >= COMPILE_SHARE_MIN:  # torch.compile at work: a one-time cost, not the replays' own
        msg += (f" At least {compile_share:.0%} of the host wait is torch.compile compiling ({len(compiling)} of its "
                f"phases, named '...{COMPILE_PHASE}'): a one-time cost the steady state does not pay; profile "
                "after the warm-up (kernelscope profile --schedule W,U,A, or torch.profiler.schedule) to see the "
                "host work between replays.")
        cited = pd.concat([ops, compiling[~compiling["operator"].isin(ops["operator"])]])
    else:
        msg += " Cut that work or give each replay more GPU work (a larger batch)."
    ev = [_ev("bound", "host_wait_share", b.scalars["host_wait_share"]),
          _ev("launch", "graph_kernels", lch.scalars["graph_kernels"]),
          _ev("launch", "kernels", lch.scalars["kernels"])]
    for r in cited.itertuples(index=False):
        ev += [_ev("bound", "idle_operators.share_of_host_wait", r.share_of_host_wait, {"operator": r.operator})]
    return [_finding("host_overhead", hw, msg, ev)]


def rule_slow_host_calls(res: dict[str, Result]) -> list[dict]:
    """Host wait inside a few slow calls of the top idle operators (cuDNN attention building a plan for each new
    sequence length in a decode loop, 40-57 ms a call on an H200, say): not launch overhead."""
    b = res["bound"]
    hw, host = _num(b.scalars.get("host_wait_share")), _num(b.scalars.get("host_wait_ns"))
    ops = _top_idle_ops(b, TOP_IDLE_OPS)
    if hw is None or hw < HOST_WAIT_MIN or not host or "slow_calls" not in ops:
        return []
    loader = pd.Series([is_dataloader(str(n)) for n in ops["operator"]], index=ops.index, dtype=bool)
    slow = ops[(ops["slow_calls"] > 0) & ~loader]  # DataLoader ranges are rule 9's
    slow_ns = int(slow["slow_call_idle_ns"].sum())
    if slow_ns / host < SLOW_CALLS_SHARE_MIN:
        return []
    calls, new = int(slow["slow_calls"].sum()), int(slow["slow_new_shape_calls"].fillna(0).sum())
    unshaped = bool(slow["slow_new_shape_calls"].isna().all())
    names = "; ".join(f"{r.operator}: {r.slow_calls}, up to {_ms(r.max_call_idle_ns)} each"
                      for r in slow.itertuples(index=False))
    msg = (f"{slow_ns / host:.0%} of the host wait ({_ms(slow_ns)}) is inside {calls} slow operator calls ({names}; "
           f"bound): in each the GPU waited {ns_to_ms(SLOW_CALL_NS):g} ms or more, far beyond what launching costs, "
           "so it is host work inside the call, which CUDA graphs or fusing launches do not address.")
    where = _slow_calls_cause(slow, slow_ns)
    if where is not None:
        msg += (f" For the operators holding {where[1] / slow_ns:.0%} of it, the largest part of their wait is "
                f"{where[0]} ({CAUSE_WORDS[where[0]]}), not their own work.")
    if new * 2 > calls:
        msg += (f" {new} of the {calls} are the operator's first call with their input shapes in the trace: a "
                "one-time cost per shape (a library building a plan or autotuning for it, a compile), paid again "
                "whenever the shapes change (a growing KV cache, unpadded batches): keep the shapes fixed (a static "
                "cache, padding to a few sizes) or use another backend for that operator.")
    else:
        msg += " Find those calls in the timeline: a compile, a lazy load, a lock or work done on first use."
        if unshaped:
            msg += (" The trace has no input shapes (torch.profiler records them with record_shapes=True), so "
                    "whether each is the first call with new shapes (a plan built or autotuned per shape) cannot be "
                    "told.")
    ev = [_ev("bound", "host_wait_share", b.scalars["host_wait_share"]),
          _ev("bound", "host_wait_ns", b.scalars["host_wait_ns"])]
    for r in slow.itertuples(index=False):
        row = {"operator": r.operator}
        ev += [_ev("bound", f"idle_operators.{k}", getattr(r, k), row)
               for k in ("slow_calls", "slow_call_idle_ns", "max_call_idle_ns", "slow_new_shape_calls")]
        if where is not None and r.main_category == where[0]:
            ev.append(_ev("bound", "idle_operators.main_category", r.main_category, row))
    return [_finding("slow_host_calls", hw * slow_ns / host, msg, ev, slow_ns)]


def _slow_calls_cause(slow: pd.DataFrame, slow_ns: int) -> tuple[str, int] | None:
    """(category, ns) when one idle cause other than the operators' own work is the ``main_category`` of operators
    holding at least half of the slow calls' idle (HTA's alexnet benchmark: cudnn_convolution's 11.9 s in
    cudaMalloc/cudaFree, allocator); else None."""
    if "main_category" not in slow or not slow_ns:
        return None
    by = slow.groupby("main_category")["slow_call_idle_ns"].sum()
    by = by[by.index != "operator"]
    if by.empty or int(by.max()) * 2 < slow_ns:
        return None
    return str(by.idxmax()), int(by.max())


def _api_share(lch: Result) -> float:
    """The share of TKLQT spent inside the launch calls themselves (launch ``api_ns / tklqt_ns``; 0 when unknown)."""
    api, tk = _num(lch.scalars.get("api_ns")), _num(lch.scalars.get("tklqt_ns"))
    return api / tk if api is not None and tk else 0.0


def rule_gpu_bound(res: dict[str, Result]) -> list[dict]:
    lch, k = res["launch"], res["kernels"]
    depth = _num(lch.scalars.get("mean_queue_depth"))
    cats = k.tables["categories"]
    if depth is None or depth < QUEUE_DEPTH_MIN or cats.empty or _api_share(lch) >= API_SHARE_MAX:
        return []
    top = cats.sort_values("time_ns", ascending=False, kind="stable").iloc[0]
    share = _num(top["share"]) or 0.0
    if top["category"] == "communication":  # collectives spin while they transfer or wait for another rank
        msg = (f"GPU-bound: the mean queue depth is {depth:.2f} (launch), but the top category is communication at "
               f"{share:.0%} of kernel time (kernels): collective kernels, busy while they transfer or wait for other "
               "ranks, not computing, so faster compute kernels are not the first win; how much of it no compute "
               "overlaps, and whether it is waiting, is exposed_communication's (kernelscope analyze comm).")
    else:
        msg = (f"GPU-bound: the mean queue depth is {depth:.2f} (launch), so the next win is kernel efficiency; "
               f"the top category is {top['category']} at {share:.0%} of kernel time (kernels).")
    ev = [_ev("launch", "mean_queue_depth", lch.scalars["mean_queue_depth"]),
          _ev("kernels", "categories.share", top["share"], {"category": top["category"]})]
    b = res.get("bound")
    hw = None if b is None else _num(b.scalars.get("host_wait_share"))
    if hw is not None and hw >= GPU_BOUND_HOST_NOTE:
        msg += (f" Yet for {hw:.0%} of its span the GPU waits on the host (bound): the depth averages the bursts in "
                "which kernels queue deep and the waits between them, which kernel efficiency does not shorten: "
                "the Bound page's segments separate the two and its idle causes say what the host does meanwhile.")
        ev.append(_ev("bound", "host_wait_share", b.scalars["host_wait_share"]))
    return [_finding("gpu_bound", share, msg, ev)]


def rule_input_pipeline(res: dict[str, Result]) -> list[dict]:
    """The GPU idle while a DataLoader produces the next batch (TensorBoard's resnet50 sample with num_workers=0:
    23% of its steady step time)."""
    st = res["steps"]
    bd = st.tables["breakdown"]
    row = bd[bd["category"] == "dataloader"]
    share = None if row.empty else _num(row.iloc[0]["share"])
    if share is None or share <= DATALOADER_SHARE_MIN:
        return []
    mean = int(row.iloc[0]["mean_ns"])
    steady = int(st.scalars.get("steady_steps") or st.scalars.get("step_count") or 0)
    names = st.trust.get("dataloaders") or []
    msg = (f"For {share:.0%} of the step time ({_ms(mean)} of a mean step of {_ms(st.scalars['step_time_mean_ns'])}; "
           "steps) the GPU is idle while the host is inside the DataLoader's __next__, waiting for the next batch.")
    if names and all("_SingleProcessDataLoaderIter" in n for n in names):
        msg += (" The loader runs in the training process (num_workers=0): DataLoader(num_workers=N, pin_memory=True, "
                "persistent_workers=True) prepares batches in worker processes while the GPU computes.")
    elif names and any("_MultiProcessingDataLoaderIter" in n for n in names):
        msg += (" Its worker processes do not keep up: more of them (num_workers), a larger prefetch_factor, or "
                "cheaper per-item work (decoding, augmentation; on the GPU where it can run there).")
    else:
        msg += (" Load in worker processes (DataLoader num_workers > 0, pin_memory=True) so batches are ready before "
                "the GPU needs them.")
    ev = [_ev("steps", "breakdown.share", row.iloc[0]["share"], {"category": "dataloader"}),
          _ev("steps", "breakdown.mean_ns", row.iloc[0]["mean_ns"], {"category": "dataloader"}),
          _ev("steps", "step_time_mean_ns", st.scalars["step_time_mean_ns"])]
    return [_finding("input_pipeline", share, msg, ev, mean * steady if steady else None)]


def rule_warmup_dominates(res: dict[str, Result]) -> list[dict]:
    """The warm-up steps (steps analysis) hold most of the recorded steps' time: a first forward that autotuned
    cuDNN (ConvNeXt on an H100: ProfilerStep#0 4,377.5 ms against 7.06 ms per later step), so every
    whole-trace number mostly describes it."""
    st = res["steps"]
    df = st.tables.get("steps")
    if df is None or df.empty or "warmup" not in df:
        return []
    warm = df[df["warmup"].fillna(False).astype(bool)]
    total = int(df["dur_ns"].sum())
    if warm.empty or total <= 0:
        return []
    share = int(warm["dur_ns"].sum()) / total
    if share < WARMUP_SHARE_MIN:
        return []
    steady = int(st.scalars.get("steady_steps") or 0)
    what = (f"the warm-up step {warm['name'].iloc[0]}" if len(warm) == 1
            else f"the {len(warm)} warm-up steps ({', '.join(warm['name'])})")
    msg = (f"{share:.0%} of the recorded steps' time is in {what} ({_ms(warm['dur_ns'].sum())} of {_ms(total)}; "
           f"steps): the recording's start (set-up before the first step boundary, first calls that build plans, "
           f"autotune or compile), which the {steady} steady step(s) "
           f"(median {_ms(st.scalars['step_time_median_ns'])}) do not pay, so the whole-trace numbers (bound, "
           "bandwidth, kernels) and the other findings here mostly describe it; the Steps section has the steady "
           "steps. To leave it out, record after a warm-up: kernelscope profile --schedule 0,1,N "
           "(torch.profiler.schedule(wait=0, warmup=1, active=N)).")
    ev = [_ev("steps", "steps.dur_ns", int(r.dur_ns), {"step": int(r.step)}) for r in warm.itertuples(index=False)]
    ev.append(_ev("steps", "step_time_median_ns", st.scalars["step_time_median_ns"]))
    return [_finding("warmup_dominates", share, msg, ev)]


def rule_low_bandwidth(res: dict[str, Result]) -> list[dict]:
    bw = res["bandwidth"]
    total = _num(bw.scalars.get("gpu_ns"))
    sig = bw.tables["per_signature"]
    if not total or sig.empty:
        return []
    out = []
    for r in sig.sort_values("gpu_ns", ascending=False, kind="stable").itertuples(index=False):
        pct = _num(r.pct_peak_bw)
        share = r.gpu_ns / total
        if r.bound != "memory" or pct is None or pct >= LOW_BW_PCT or share < LOW_BW_TIME_SHARE:
            continue
        row = {"name": r.name, "input_dims": r.input_dims, "input_types": r.input_types}
        msg = (f"{r.name} {r.input_dims} runs at {pct:.0f}% of peak bandwidth while taking {share:.0%} of GPU "
               f"time ({_ms(r.gpu_ns)}, bandwidth): fuse it with its neighbours or use a fused kernel.")
        ev = [_ev("bandwidth", "per_signature.pct_peak_bw", r.pct_peak_bw, row),
              _ev("bandwidth", "per_signature.gpu_ns", r.gpu_ns, row),
              _ev("bandwidth", "gpu_ns", bw.scalars["gpu_ns"])]
        out.append(_finding("low_bandwidth", share, msg, ev))
    return out


def rule_short_kernels(res: dict[str, Result]) -> list[dict]:
    k = res["kernels"]
    share = _num(k.scalars.get("short_kernel_share"))
    if share is None or share < SHORT_SHARE_MIN or (_num(k.scalars.get("short_kernels")) or 0) < SHORT_KERNELS_MIN:
        return []
    s = k.scalars
    msg = f"{share:.0%} of kernel time is in {s['short_kernels']} kernels shorter than {s['short_ns'] / NS_PER_US:g} us"
    ev = [_ev("kernels", "short_kernel_share", s["short_kernel_share"]),
          _ev("kernels", "short_kernels", s["short_kernels"]), _ev("kernels", "short_ns", s["short_ns"])]
    in_graphs, short_ns = _num(s.get("short_graph_kernel_ns")) or 0, _num(s.get("short_kernel_ns"))
    if short_ns and in_graphs / short_ns >= SHORT_IN_GRAPHS_MIN:
        msg += (f" (kernels), {in_graphs / short_ns:.0%} of that time already inside CUDA graphs, which removed "
                "their launch calls: what is left is the work per kernel; fuse them further or give each more "
                "work (a larger batch).")
        ev += [_ev("kernels", "short_graph_kernel_ns", s["short_graph_kernel_ns"]),
               _ev("kernels", "short_kernel_ns", s["short_kernel_ns"])]
    else:
        msg += " (kernels): fuse them (torch.compile) or capture the loop in a CUDA graph."
    return [_finding("short_kernels", share, msg, ev)]


def rule_sync_stalls(res: dict[str, Result]) -> list[dict]:
    b = res["bound"]
    causes = b.tables["idle_causes"]
    rows = causes[causes["category"].isin(["sync", "d2h_copy"])]
    share = float(rows["share_of_host_wait"].sum()) if not rows.empty else 0.0
    if share < SYNC_SHARE_MIN:
        return []
    ns = int(rows["idle_ns"].sum())
    ev = []
    for r in rows.itertuples(index=False):
        ev += [_ev("bound", "idle_causes.share_of_host_wait", r.share_of_host_wait, {"category": r.category}),
               _ev("bound", "idle_causes.idle_ns", r.idle_ns, {"category": r.category})]
    ops = b.tables["idle_operators"]
    ops = ops[ops["main_category"].isin(["sync", "d2h_copy"])].dropna(subset=["operator"]).head(3)
    where = ""
    if not ops.empty:
        where = " (mostly in " + ", ".join(ops["operator"]) + ")"
        ev += [_ev("bound", "idle_operators.idle_ns", r.idle_ns, {"operator": r.operator})
               for r in ops.itertuples(index=False)]
    msg = (f"{share:.0%} of host wait is behind syncs and device-to-host copies{where} (bound): remove "
           f".item()/.cpu()/synchronize calls from the hot loop: {_ms(ns)}.")
    return [_finding("sync_stalls", share, msg, ev, ns)]


def rule_gc_pauses(res: dict[str, Result]) -> list[dict]:
    causes = res["bound"].tables["idle_causes"]
    rows = causes[causes["category"] == "python_gc"]
    if rows.empty or float(rows["share_of_host_wait"].iloc[0]) < GC_SHARE_MIN:
        return []
    r = rows.iloc[0]
    share, ns, gaps = float(r["share_of_host_wait"]), int(r["idle_ns"]), int(r["gaps"])
    ev = [_ev("bound", "idle_causes.share_of_host_wait", r["share_of_host_wait"], {"category": "python_gc"}),
          _ev("bound", "idle_causes.idle_ns", r["idle_ns"], {"category": "python_gc"}),
          _ev("bound", "idle_causes.gaps", r["gaps"], {"category": "python_gc"})]
    msg = (f"{share:.0%} of host wait ({_ms(ns)} in {gaps} idle gap{'s' if gaps != 1 else ''}) is Python's garbage "
           "collector running on the launching thread (bound): call gc.freeze() once the model, optimizer and data "
           "are built (the collector then no longer scans them), or gc.disable() in the loop with a gc.collect() "
           "where a pause costs nothing.")
    return [_finding("gc_pauses", share, msg, ev, ns)]


def rule_low_tensor_core(res: dict[str, Result]) -> list[dict]:
    k = res["kernels"]
    cats = k.tables["categories"]
    g = cats[cats["category"] == "gemm"]
    tc = _num(k.scalars.get("tensor_core_share_of_gemm_attention"))
    if g.empty or tc is None:
        return []
    gshare = _num(g.iloc[0]["share"]) or 0.0
    if gshare < GEMM_SHARE_MIN or tc >= TENSOR_CORE_MIN:
        return []
    ev = [_ev("kernels", "categories.share", g.iloc[0]["share"], {"category": "gemm"}),
          _ev("kernels", "tensor_core_share_of_gemm_attention", k.scalars["tensor_core_share_of_gemm_attention"])]
    msg = (f"GEMMs are {gshare:.0%} of kernel time but only {tc:.0%} of GEMM/attention time runs on tensor "
           f"cores (kernels)")
    bw = res.get("bandwidth")
    low = _low_precision(bw)
    if low is None and bw is not None and bw.trust.get("tf32_from") == "provenance" and "tf32_matmul" in bw.scalars:
        ev.append(_ev("bandwidth", "tf32_matmul", bw.scalars["tf32_matmul"]))
        msg += f"; TF32 matmul is {'on' if bw.scalars['tf32_matmul'] else 'off'} in this run (bandwidth, provenance)"
    cc = k.scalars.get("compute_capability")
    major = int(cc.split(".")[0]) if isinstance(cc, str) else None
    if major is not None and major < 7:
        return []  # no tensor cores on this GPU: nothing to enable
    if low is not None:  # already 16-bit: precision is not what keeps them off the tensor cores
        dtype, share = low
        ev.append(_ev("bandwidth", "per_signature.dtype", dtype, {"tensor_core": True}))
        top = k.tables.get("top_kernels")
        names = ""
        if top is not None and {"name", "category", "tensor_core", "share"} <= set(top.columns):
            top = top[(top["category"] == "gemm") & ~top["tensor_core"].fillna(True).astype(bool)].head(2)
            names = "; ".join(f"{clip_text(r.name, 60)} ({_num(r.share):.0%})" for r in top.itertuples(index=False))
        msg += (f"; they already run in {dtype} ({share:.0%} of the GEMM/convolution/attention operators' GPU time, "
                f"bandwidth), so precision is not what keeps them off: depthwise and grouped convolutions run on "
                f"CUDA cores in any precision, and cuDNN picks tensor-core kernels for 16-bit convolutions in "
                f"channels_last layout (model and inputs .to(memory_format=torch.channels_last))"
                + (f"; the largest such kernels: {names}." if names else "."))
        return [_finding("low_tensor_core", gshare, msg, ev)]
    if major == 7:  # Volta/Turing tensor cores take fp16 only; TF32 and bf16 need compute capability 8.0
        ev.append(_ev("kernels", "compute_capability", cc))
        msg += (f": run the GEMMs in fp16 (torch.autocast('cuda', dtype=torch.float16)); this GPU (compute "
                f"capability {cc}) has no TF32 or bf16 tensor cores.")
    elif major is None:  # an old trace without deviceProperties: the advice depends on the GPU
        msg += (": run them in reduced precision: TF32 (torch.set_float32_matmul_precision('high')) or bf16 "
                "(torch.autocast) on compute capability 8.0 and later, fp16 (torch.autocast('cuda', "
                "dtype=torch.float16)) on 7.x; the trace does not record which GPU it ran on.")
    else:
        msg += (": enable TF32 (torch.set_float32_matmul_precision('high')) or run the GEMMs in bf16 "
                "(torch.autocast).")
    return [_finding("low_tensor_core", gshare, msg, ev)]


def _low_precision(bw: Result | None) -> tuple[str, float] | None:
    """(dtype, share) when most of the GPU time of bandwidth's tensor-core operators (GEMM, convolution, attention)
    is in one 16-bit or narrower dtype; else None."""
    sig = bw.tables.get("per_signature") if bw is not None else None
    if sig is None or sig.empty or "tensor_core" not in sig:
        return None
    t = sig[sig["tensor_core"].fillna(False).astype(bool)]
    by = t.groupby("dtype")["gpu_ns"].sum()
    total = by.sum()
    if total <= 0:
        return None
    dtype = by.idxmax()
    share = float(by.max() / total)
    return (dtype, share) if dtype in ("bf16", "fp16", "fp8") and share >= 0.5 else None


def rule_memory_at_limit(res: dict[str, Result]) -> list[dict]:
    """The allocator's peak near the device's memory: the batch cannot grow, the next allocation may fail."""
    m = res["memory"]
    dm = m.tables.get("device_memory")
    if dm is None or dm.empty or "peak_share_of_device" not in dm:
        return []
    out = []
    for r in dm.itertuples(index=False):
        share = _num(r.peak_share_of_device)
        if share is None or share <= MEMORY_SHARE_MIN:
            continue
        where = ", ".join(f"{k} {v}" for k, v in (("in", r.peak_operator), ("of module", r.peak_module))
                          if isinstance(v, str) and v)
        msg = (f"{r.device}'s allocated memory peaks at {r.peak_allocated_bytes / BYTES_PER_GIB:.1f} GiB, {share:.0%} "
               f"of its {r.device_memory_bytes / BYTES_PER_GIB:.1f} GiB (memory{'; ' + where if where else ''}): a "
               "larger batch will not fit, and the caching allocator's fragmentation can make an allocation fail. "
               "Activation checkpointing (torch.utils.checkpoint) or bf16/fp16 autocast lowers the peak; the Memory "
               "page shows what is live at it.")
        row = {"device": r.device}
        ev = [_ev("memory", f"device_memory.{k}", getattr(r, k), row)
              for k in ("peak_share_of_device", "peak_allocated_bytes", "device_memory_bytes")]
        out.append(_finding("memory_at_limit", share, msg, ev))
    return out


def rule_exposed_communication(res: dict[str, Result]) -> list[dict]:
    """Time when only collective kernels run (bound's comm-only time: communication no compute overlaps). With
    the run's other ranks stored (comm over the run, read only when this fires), tells waiting for a late rank
    from the transfers themselves; ``res.trace_id`` names this rank's trace."""
    b = res["bound"]
    share, ns = _num(b.scalars.get("comm_only_share")), _num(b.scalars.get("comm_only_ns"))
    if share is None or not ns or share <= COMM_ONLY_SHARE_MIN:
        return []
    ev = [_ev("bound", k, b.scalars[k]) for k in ("comm_only_share", "comm_only_ns")]
    msg = (f"For {share:.0%} of the GPU span ({_ms(ns)}; bound) only collective kernels run: communication that no "
           "compute overlaps.")
    c = res.get("comm")
    ranks = None if c is None else c.tables.get("ranks")
    me = None if ranks is None else ranks[ranks["trace_id"] == getattr(res, "trace_id", None)]
    if me is None or me.empty or (_num(c.scalars.get("world_size")) or 0) < 2:
        return [_finding("exposed_communication", share, msg + (
            " Overlap it with compute (DDP's bucket_cap_mb, FSDP's prefetching), send fewer bytes (a gradient "
            "compression hook such as bf16_compress_hook) or communicate less often (gradient accumulation under "
            "no_sync(), a larger batch). Ingest the run's other ranks with it (kernelscope ingest RUN_DIR) to see "
            "whether the time is transfer or waiting for a slower rank (kernelscope analyze comm)."), ev)]
    rank, waited = int(me["rank"].iloc[0]), int(me["wait_ns"].iloc[0])
    late = _num(c.scalars.get("straggler_rank"))
    row = {"rank": rank}
    ev.append(_ev("comm", "ranks.wait_ns", me["wait_ns"].iloc[0], row))
    if late is not None and int(late) != rank and waited >= STRAGGLER_WAIT_MIN * ns:
        late = int(late)
        st = c.tables["stragglers"]
        times = st.loc[st["rank"] == late, "times_last"]
        n = _num(c.scalars.get("collective_instances"))
        ev += [_ev("comm", "straggler_rank", c.scalars["straggler_rank"]),
               _ev("comm", "stragglers.times_last", times.iloc[0], {"rank": late}),
               _ev("comm", "collective_instances", c.scalars["collective_instances"])]
        msg += (f" Most of it is waiting, not transfer: rank {late} arrived last at {int(times.iloc[0])} of "
                f"{int(n or 0)} collectives, and the collectives of this rank (rank {rank}) waited {_ms(waited)} for "
                f"it (comm). Make rank {late}'s work before each collective faster or even with the others' (an "
                "uneven batch, a slower GPU or host, its own data loading): the Ranks page lines the ranks' timelines "
                "up.")
    else:
        msg += (f" It is transfer more than waiting (rank {rank}'s collectives waited {_ms(waited)} for later ranks; "
                "comm): overlap it with compute (DDP's bucket_cap_mb, FSDP's prefetching), send fewer bytes (a "
                "gradient compression hook such as bf16_compress_hook) or communicate less often (gradient "
                "accumulation under no_sync(), a larger batch); comm's bus bandwidths show whether the links run "
                "at their speed.")
    return [_finding("exposed_communication", share, msg, ev)]


_RULE_FNS = {"warmup_dominates": rule_warmup_dominates,
             "host_bound_launch": rule_host_bound_launch, "host_overhead": rule_host_overhead,
             "slow_host_calls": rule_slow_host_calls, "input_pipeline": rule_input_pipeline,
             "gpu_bound": rule_gpu_bound,
             "low_bandwidth": rule_low_bandwidth, "unaligned_gemm": rule_unaligned_gemm,
             "short_kernels": rule_short_kernels,
             "sync_stalls": rule_sync_stalls, "gc_pauses": rule_gc_pauses, "low_tensor_core": rule_low_tensor_core,
             "memory_at_limit": rule_memory_at_limit, "exposed_communication": rule_exposed_communication}


def evaluate(res: dict[str, Result]) -> tuple[list[dict], list[str]]:
    """Every rule over the given results; a rule whose analyses are missing is skipped (returned)."""
    findings, skipped = [], []
    for rule in RULES:
        if any(n not in res for n in NEEDS[rule]):
            skipped.append(rule)
            continue
        findings += _RULE_FNS[rule](res)
    return findings, skipped
