"""Overhead of the NVML telemetry sampler (background thread) on a CPU-bound and a GPU-bound workload.

    PYTHONPATH=src python3 benchmarks/sampler_overhead.py [--pairs 10] [--seconds 1.0] [--synthetic] [--smoke]

Workloads: the two ends of the sample sweep -- Llama-3.2-1B-shaped prefill (seq 128, bf16, random
weights) at batch 1 (host-bound) and batch 128 (GPU-bound); with ``--synthetic`` (or without
transformers): 200 chained elementwise ops on 64x512 (host-bound) and 8192^3 bf16 matmuls (GPU-bound).

Method: one run = as many iterations as fit in ``--seconds`` (count fixed from a calibration run),
synchronize, wall time per iteration. ``--pairs`` pairs of runs alternate the order (without/with,
then with/without, ...) so drift cancels. Overhead of pair i = t_with / t_without - 1. Printed: the
median overhead over pairs and a distribution-free 95% interval for the median (order statistics of
the binomial(n, 1/2); for n = 10 that is the 2nd-smallest to the 2nd-largest value, 97.9% coverage).
The sampler runs at its defaults (10 ms fast fields, 100 ms slow fields); its achieved period is shown.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny (tests the script)")
    a = ap.parse_args(argv)
    dev = "cpu" if a.smoke or not torch.cuda.is_available() else "cuda"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    rows = []
    for name, fn in workloads(dev, a.synthetic, a.smoke).items():
        for _ in range(5):
            fn()
        per = timed(fn, 3, sync)
        iters = max(3, int(a.seconds * 1e9 / per))
        timed(fn, iters, sync)  # one discarded run: clocks, allocator and caches settle
        overheads, periods = [], []
        for i in range(a.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            t = {}
            for with_sampler in order:
                s = nvml.make_sampler(quiet=True) if with_sampler else None
                if s is not None:
                    s.start()
                t[with_sampler] = timed(fn, iters, sync)
                if s is not None:
                    s.stop()
                    periods.append(s.achieved_period_ms)
            overheads.append(t[True] / t[False] - 1)
        lo, hi = median_ci(overheads)
        med = statistics.median(overheads)
        ok_periods = [p for p in periods if p is not None]
        rows.append((name, per / 1e6, iters, med, lo, hi,
                     statistics.median(ok_periods) if ok_periods else None))
        print(f"done {name}: median overhead {med * 100:+.2f}%", flush=True)
    probe = nvml.make_sampler(quiet=True)
    s_kind = "thread" if isinstance(probe, nvml.Sampler) else f"null ({probe.reason})"
    print(f"\nsampler: {s_kind}; {a.pairs} alternating pairs per workload; device {dev}"
          + (f" ({torch.cuda.get_device_name()})" if dev == "cuda" else ""))
    print(f"{'workload':42s} {'iter ms':>9s} {'iters':>6s} {'median':>8s} {'95% interval':>20s} {'period ms':>9s}")
    for name, ms, iters, med, lo, hi, p in rows:
        print(f"{name:42s} {ms:9.3f} {iters:6d} {med * 100:+7.2f}% [{lo * 100:+7.2f}%, {hi * 100:+7.2f}%]"
              f" {p if p is None else round(p, 2)!s:>9s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
