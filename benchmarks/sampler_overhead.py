"""Overhead and achieved period of the NVML sampler, thread vs process, profiler off and on.

    PYTHONPATH=src python3 benchmarks/sampler_overhead.py [--rounds 10] [--seconds 0.6]
        [--profiled-iters 6] [--synthetic] [--smoke]

Workloads: the two ends of the sample sweep -- Llama-3.2-1B-shaped prefill (seq 128, bf16, random
weights) at batch 1 (host-bound) and batch 128 (GPU-bound); with ``--synthetic`` (or without
transformers): 200 chained elementwise ops on 64x512 (host-bound) and 8192^3 bf16 matmuls (GPU-bound).

Method. One run = a fixed iteration count (from a calibration run), synchronize, wall time per
iteration. Profiler off: as many iterations as fit in ``--seconds``. Profiler on: the sampler starts,
then ``torch.profiler`` (CPU+CUDA, record_shapes, as ``kernelscope.profile``), ``--profiled-iters``
timed iterations (x2 at the CPU-bound end), profiler stop (its post-processing is not timed), then the
sampler stops -- the same order as ``kernelscope.profile``. A round runs none / thread / process in a
rotating order (drift cancels); overhead of a mode in round i = t_mode / t_none - 1. Printed per
(workload, profiler, mode): median overhead over rounds and a distribution-free 95% interval for the
median (order statistics of binomial(n, 1/2); n = 10: 2nd-smallest to 2nd-largest, 97.9% coverage),
and the achieved period: median and p95 of the sample intervals (pooled over rounds) that overlap the
timed window [first iteration start, last iteration synchronized] (an interval straddling an end
counts), and the worst interval. Sampler at its defaults (10 ms fast fields, 100 ms slow fields).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import torch

from kernelscope.collectors import nvml


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval (x_(k), x_(n-k+1)) for the median with coverage >= level."""
    xs, n = sorted(values), len(values)
    best = (xs[0], xs[-1])
    for k in range(1, n // 2 + 1):
        cover = sum(math.comb(n, i) for i in range(k, n - k + 1)) / 2**n
        if cover < level:
            break
        best = (xs[k - 1], xs[n - k])
    return best


def workloads(dev: str, synthetic: bool, smoke: bool):
    if not synthetic:
        try:
            from transformers import LlamaConfig, LlamaForCausalLM
        except ImportError:
            print("transformers missing: synthetic workloads", flush=True)
            synthetic = True
    if synthetic:
        x = torch.randn(64, 512, device=dev)
        n = 256 if smoke else 8192
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)

        def chain():
            y = x
            for _ in range(100):
                y = y * 1.0001 + 0.0001
            return y

        return {"cpu_bound (200 small ops)": chain, f"gpu_bound ({n}^3 bf16 matmul)": lambda: a @ a}
    cfg = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
               intermediate_size=8192, vocab_size=128256)
    if smoke:
        cfg = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, vocab_size=1000)
    config = LlamaConfig(**cfg, attn_implementation="sdpa", tie_word_embeddings=True)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(dev):
        model = LlamaForCausalLM(config).eval()
    torch.set_default_dtype(prev)
    out = {}
    for b in (1, 128):
        ids = torch.randint(0, cfg["vocab_size"], (b, 16 if smoke else 128), device=dev)

        def fwd(ids=ids):
            with torch.inference_mode():
                return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

        out[f"llama prefill b{b} ({'cpu' if b == 1 else 'gpu'}_bound)"] = fwd
    return out


def timed(fn, iters: int, sync) -> float:
    sync()
    t0 = time.perf_counter_ns()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter_ns() - t0) / iters


def run_once(fn, iters: int, sync, mode: str | None, profiled: bool):
    """(ns per iteration, sampler or None, its samples, timed window in epoch ns)."""
    s = nvml.make_sampler(quiet=True, mode=mode) if mode else None
    if s is not None:
        s.start()
    prof = None
    if profiled:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        prof = profile(activities=acts, record_shapes=True)
        prof.start()
    sync()
    w0 = time.time_ns()
    per = timed(fn, iters, sync)
    w1 = time.time_ns()
    if prof is not None:
        prof.stop()
    table = s.stop() if s is not None else None
    return per, s, table, (w0, w1)


def pct(x):
    return "-" if x is None else f"{x * 100:+.2f}%"


def ms(x):
    return "-" if x is None else f"{x:.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=0.6)
    ap.add_argument("--profiled-iters", type=int, default=6, help="GPU-bound end; x2 at the CPU-bound end")
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny (tests the script)")
    a = ap.parse_args(argv)
    t_start = time.time()
    dev = "cpu" if a.smoke or not torch.cuda.is_available() else "cuda"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    probe = nvml.make_sampler(quiet=True, mode="thread")
    if isinstance(probe, nvml.NullSampler):
        print(f"no sampler can run here ({probe.reason}); overheads below compare null samplers", flush=True)
    modes = ("thread", "process")
    rows = []
    for k, (name, fn) in enumerate(workloads(dev, a.synthetic, a.smoke).items()):
        for _ in range(5):
            fn()
        per = timed(fn, 3, sync)
        for profiled in (False, True):
            iters = (max(3, int(a.seconds * 1e9 / per)) if not profiled
                     else a.profiled_iters * (2 if k == 0 else 1))
            run_once(fn, iters, sync, None, profiled)  # discarded: clocks, allocator, CUPTI settle
            t = {m: [] for m in (None, *modes)}
            gaps = {m: [] for m in modes}
            samplers = {}
            for i in range(a.rounds):
                order = [None, *modes]
                order = order[i % 3:] + order[:i % 3]
                for m in order:
                    dt, smp, table, win = run_once(fn, iters, sync, m, profiled)
                    t[m].append(dt)
                    if smp is not None:
                        samplers[m] = smp
                        by_dev = {}
                        for u, x in zip(table.column("device_uuid").to_pylist(),
                                        table.column("ts_ns").to_pylist()):
                            by_dev.setdefault(u, []).append(x)
                        for xs in by_dev.values():
                            xs.sort()
                            gaps[m] += [(b - q) / 1e6 for q, b in zip(xs, xs[1:]) if b > win[0] and q < win[1]]
            for m in modes:
                ov = [tm / t0 - 1 for tm, t0 in zip(t[m], t[None])]
                lo, hi = median_ci(ov)
                g = sorted(gaps[m])
                p50 = statistics.median(g) if g else None
                p95 = g[max(0, math.ceil(0.95 * len(g)) - 1)] if g else None
                kind = getattr(samplers.get(m), "kind", "null")
                rows.append((name, "on" if profiled else "off", m if kind == m else f"{m}->{kind}",
                             statistics.median(t[None]) / 1e6, iters, statistics.median(ov), lo, hi,
                             p50, p95, g[-1] if g else None))
                print(f"done {name} profiler {'on' if profiled else 'off'} {m}: overhead "
                      f"{pct(statistics.median(ov))}, period median {ms(p50)} p95 {ms(p95)} ms "
                      f"[{time.time() - t_start:.0f}s]", flush=True)
    print(f"\n{a.rounds} rotating rounds (none/thread/process) per row; device {dev}"
          + (f" ({torch.cuda.get_device_name()})" if dev == "cuda" else "")
          + f"; sampler target 10 ms; total {time.time() - t_start:.0f} s")
    print(f"{'workload':34s} {'prof':>4s} {'mode':>8s} {'iter ms':>8s} {'iters':>5s} {'median':>8s} "
          f"{'95% interval':>20s} {'p50 ms':>6s} {'p95 ms':>6s} {'max ms':>7s}")
    for name, prof, m, it_ms, iters, med, lo, hi, p50, p95, mx in rows:
        print(f"{name:34s} {prof:>4s} {m:>8s} {it_ms:8.3f} {iters:5d} {pct(med):>8s} "
              f"[{pct(lo):>8s}, {pct(hi):>8s}] {ms(p50):>6s} {ms(p95):>6s} {ms(mx):>7s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
