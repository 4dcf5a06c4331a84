"""Capture the real sample traces with kernelscope's own collector (run on an NVIDIA H100/H200).

    PYTHONPATH=src python3 sample_traces/capture.py --out DIR [--only NAME,...] [--smoke]

Each sample becomes a run dir DIR/<name>/ (trace.json.gz, run.json, telemetry.parquet) written by
``kernelscope.profile``/``kernelscope.sweep`` with ingest=False (no DuckDB needed here):

- llama_prefill_b{1,2,...,128}: Llama-3.2-1B-shaped model (random bf16 weights made on the GPU),
  prefill of 128 tokens under inference_mode, a sweep over batch (CPU-bound at 1, GPU-bound at 128);
- llama_decode: the same model, batch 1, 128-token prompt then 16 greedy decode steps with a KV cache;
- train_step: forward + backward + AdamW of a 4-layer transformer encoder, bf16 autocast;
- small_kernels_eager / small_kernels_graph: 200 chained elementwise kernels on 64x512, eager and
  as one CUDA graph replay;
- compiled: a torch.compile'd MLP (Triton kernels).

``--smoke`` runs everything tiny on the CPU to test this script without a GPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
import traceback
from pathlib import Path

import torch

import kernelscope
from kernelscope.collectors.profile import profile

T0 = time.time()
# Profiled steps of the short workloads: enough traced time (>= ~25 ms) for >= 1 telemetry sample per 20 ms.
ACTIVE_SMALL = 6
ACTIVE_COMPILED = 30
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def summarize(run_dir: Path) -> str:
    path = run_dir / "trace.json.gz"
    if not path.is_file():
        return f"{run_dir.name}: NO TRACE"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    run = json.loads((run_dir / "run.json").read_text())
    tel = run_dir / "telemetry.parquet"
    events = doc["traceEvents"]
    kernels = sum(1 for e in events if e.get("cat") == "kernel")
    # GPU busy share: union of kernel/memcpy/memset intervals over [first step start, last GPU end]
    gpu = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                 if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "ts" in e)
    steps = [e["ts"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")] or [
        e["ts"] for e in events if e.get("cat") == "cpu_op"]
    busy_txt = "-"
    if gpu and steps:
        busy, cur_s, cur_e = 0.0, None, None
        for a, b in gpu:
            if cur_e is None or a > cur_e:
                busy += 0 if cur_e is None else cur_e - cur_s
                cur_s, cur_e = a, b
            else:
                cur_e = max(cur_e, b)
        busy += cur_e - cur_s
        span = max(b for _, b in gpu) - min(steps)
        busy_txt = f"{busy / span:.2f}" if span > 0 else "-"
    ops = sum(1 for e in events if e.get("cat") == "cpu_op")
    walls = sorted(t["dur_ns"] for t in run["timings"] if t["kind"] == "wall")
    cev = sorted(t["dur_ns"] for t in run["timings"] if t["kind"] == "cuda_event")
    en = [t["energy_mj"] for t in run["timings"] if t["kind"] == "energy_loop"]
    med = lambda v: f"{v[len(v) // 2] / 1e6:.3f}ms" if v else "-"  # noqa: E731
    # clock offset = marker epoch_ns - marker ts in the trace's epoch time (ts us + baseTimeNanoseconds),
    # as the store's ingest computes it from the first marker; printed: first, min and max over markers
    base = int(doc.get("baseTimeNanoseconds", 0))
    offs = [int(e["name"].split()[1]) - (round(float(e["ts"]) * 1000) + base) for e in
            sorted((e for e in events if str(e.get("name", "")).startswith("kernelscope::clock_sync ")),
                   key=lambda e: float(e["ts"]))]
    clock_txt = (f"clock offset {offs[0] / 1e3:+.1f} us (min {min(offs) / 1e3:+.1f}, max {max(offs) / 1e3:+.1f}, "
                 f"{len(offs)} markers)") if offs else "clock offset - (no marker)"
    # achieved sampler period over the traced window = trace span mapped to epoch ns with that offset
    period_txt = "traced period -"
    timed_ev = [e for e in events if "ts" in e and e.get("ph") == "X"]
    if offs and timed_ev and tel.exists():
        import pyarrow.parquet as pq

        from kernelscope.collectors import nvml

        w0 = round(min(float(e["ts"]) for e in timed_ev) * 1000) + base + offs[0]
        w1 = round(max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed_ev) * 1000) + base + offs[0]
        st = nvml.interval_stats(pq.read_table(tel), (w0, w1))
        per20 = st["samples"] / (st["window_ms"] / 20) if st["window_ms"] else None
        f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        period_txt = (f"traced period median {f(st['median_ms'])} p95 {f(st['p95_ms'])} max {f(st['max_ms'])} ms "
                      f"over {f(st['window_ms'])} ms ({st['samples']} samples, {f(per20)} per 20 ms)")
    return (f"{run_dir.name}: {clock_txt}; {period_txt}; sampler {run['sampler'].get('kind')}; trace {path.stat().st_size / 1024:.0f} KiB, {len(events)} events, "
            f"{kernels} kernels, {ops} cpu_ops, gpu busy {busy_txt}; telemetry "
            f"{run['sampler'].get('samples', 0)} samples, period "
            f"{run['sampler'].get('achieved_period_ms')} ms ({tel.stat().st_size if tel.exists() else 0} B); "
            f"wall {med(walls)}, cuda_event {med(cev)}, energy/iter {en[0] if en else None} mJ")


# -- samples ---------------------------------------------------------------------------------------

def _llama(dev: str, smoke: bool):
    """Llama-3.2-1B-shaped model (random bf16 weights made on the device), eval mode; and its config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if smoke:
        cfg = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, vocab_size=1000)
    else:
        cfg = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                   intermediate_size=8192, vocab_size=128256)
    config = LlamaConfig(**cfg, max_position_embeddings=2048, rope_theta=500000.0, tie_word_embeddings=True,
                         attn_implementation="sdpa")
    dtype = torch.bfloat16
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):  # weights are created on the device, in bf16: never on the CPU
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(prev)
    p0 = next(model.parameters())
    if p0.device.type != torch.device(dev).type:  # should not happen: weights must be made on the device
        log(f"llama: WARNING weights were built on {p0.device}, moving to {dev}")
        model.to(dev)
    model.eval()
    nparams = sum(p.numel() for p in model.parameters())
    p0 = next(model.parameters())
    log(f"llama: {nparams / 1e9:.3f}e9 params, {p0.dtype} on {p0.device}, "
        f"attn={getattr(model.config, '_attn_implementation', None)}")
    return model, cfg


def llama_prefill(out: Path, dev: str, smoke: bool) -> list[Path]:
    model, cfg = _llama(dev, smoke)
    batches, seq = ([1, 4], 16) if smoke else (BATCHES, 128)
    import inspect

    params = inspect.signature(model.forward).parameters  # prefill: last-token logits only
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else (
        {"num_logits_to_keep": 1} if "num_logits_to_keep" in params else {})

    def setup(batch):
        ids = torch.randint(0, cfg["vocab_size"], (batch, seq), device=dev)
        return {"ids": ids}

    def step(ids):
        with torch.inference_mode():
            return model(input_ids=ids, use_cache=False, **keep).logits

    dirs = []
    for b in batches:  # one point per call so each prints as it finishes
        res = kernelscope.sweep(step, {"batch": [b]}, setup=setup, steps=2, name="llama_prefill",
                                run_root=out, ingest=False,
                                labels={"seq": seq, "model": "llama-3.2-1b-shape"},
                                point_name=lambda p: f"llama_prefill_b{p['batch']}",
                                timing={"energy_min_s": 0.2 if smoke else 1.5})
        dirs.append(res[0]["run_dir"])
        log(summarize(dirs[-1]))
    del model
    return []


def llama_decode(out: Path, dev: str, smoke: bool) -> list[Path]:
    """Greedy decoding with a KV cache, batch 1: a 128-token prompt (prefill range), then 16 tokens one
    forward each (decode range). The launch-bound case TKLQT is about; label tokens=16 for energy/token."""
    model, cfg = _llama(dev, smoke)
    prompt, new = (8, 4) if smoke else (128, 16)
    ids = torch.randint(0, cfg["vocab_size"], (1, prompt), device=dev)

    def step():
        with torch.inference_mode():
            with kernelscope.range("prefill"):
                o = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                nxt = o.logits[:, -1:].argmax(-1)
            pkv = o.past_key_values
            with kernelscope.range("decode"):
                for _ in range(new):
                    o = model(input_ids=nxt, past_key_values=pkv, use_cache=True)
                    pkv, nxt = o.past_key_values, o.logits[:, -1:].argmax(-1)
        return nxt

    run_dir = out / "llama_decode"
    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with profile(name="llama_decode", labels={"batch": 1, "prompt": prompt, "tokens": new,
                                              "model": "llama-3.2-1b-shape"},
                 schedule=sched, run_dir=run_dir, ingest=False,
                 unprofiled={"fn": step, "energy_min_s": 0.2 if smoke else 1.0}) as p:
        for _ in range(2):
            step()
            p.step()
    del model
    return [run_dir]


def train_step(out: Path, dev: str, smoke: bool) -> list[Path]:
    d, layers, batch, seq, vocab = (64, 2, 2, 32, 500) if smoke else (512, 4, 8, 256, 8192)
    layer = torch.nn.TransformerEncoderLayer(d, nhead=8, dim_feedforward=4 * d, batch_first=True,
                                             device=dev)
    model = torch.nn.Sequential()
    emb = torch.nn.Embedding(vocab, d, device=dev)
    enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    head = torch.nn.Linear(d, vocab, device=dev)
    model = torch.nn.ModuleDict({"emb": emb, "enc": enc, "head": head})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (batch, seq), device=dev)
    target = torch.randint(0, vocab, (batch, seq), device=dev)
    amp = torch.autocast(device_type=dev, dtype=torch.bfloat16)

    def step():
        with kernelscope.range("forward"), amp:
            logits = model["head"](model["enc"](model["emb"](ids)))
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), target.view(-1))
        with kernelscope.range("backward"):
            loss.backward()
        with kernelscope.range("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss

    run_dir = out / "train_step"
    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with profile(name="train_step", labels={"batch": batch, "seq": seq, "layers": layers, "d_model": d},
                 schedule=sched, run_dir=run_dir, ingest=False,
                 unprofiled={"fn": step, "energy_min_s": 0.2 if smoke else 1.0}) as p:
        for _ in range(2):
            step()
            p.step()
    return [run_dir]


def _chain(x, n_ops):
    y = x
    for _ in range(n_ops // 2):
        y = y * 1.0001
        y = y + 0.0001
    return y


def small_kernels(out: Path, dev: str, smoke: bool, graph: bool) -> list[Path]:
    n_ops = 200
    x = torch.randn(64, 512, device=dev)
    name = "small_kernels_graph" if graph else "small_kernels_eager"
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                _chain(x, n_ops)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y_static = _chain(x, n_ops)  # noqa: F841 - the graph's output buffer

        def step():
            g.replay()
    else:
        def step():
            return _chain(x, n_ops)

    run_dir = out / name
    sched = torch.profiler.schedule(wait=0, warmup=1, active=ACTIVE_SMALL, repeat=1)
    with profile(name=name, labels={"n_ops": n_ops, "shape": "64x512", "graph": int(graph)},
                 schedule=sched, run_dir=run_dir, ingest=False,
                 unprofiled={"fn": step, "energy_min_s": 0.2 if smoke else 1.0}) as p:
        for _ in range(1 + ACTIVE_SMALL):
            step()
            p.step()
    return [run_dir]


def compiled(out: Path, dev: str, smoke: bool) -> list[Path]:
    d, batch = (64, 8) if smoke else (512, 256)
    mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d),
                              torch.nn.LayerNorm(d)).to(dev)
    cmlp = torch.compile(mlp)
    x = torch.randn(batch, d, device=dev)

    def step():
        with torch.no_grad():
            return cmlp(x)

    t = time.time()
    step()  # compile outside the profiler
    if dev == "cuda":
        torch.cuda.synchronize()
    log(f"compiled: torch.compile took {time.time() - t:.1f}s")
    run_dir = out / "compiled"
    sched = torch.profiler.schedule(wait=0, warmup=1, active=ACTIVE_COMPILED, repeat=1)
    with profile(name="compiled", labels={"batch": batch, "d_model": d, "compiled": 1}, schedule=sched,
                 run_dir=run_dir, ingest=False,
                 unprofiled={"fn": step, "energy_min_s": 0.2 if smoke else 1.0}) as p:
        for _ in range(1 + ACTIVE_COMPILED):
            step()
            p.step()
    return [run_dir]


SAMPLES = {  # in run order: the sweep matters most, torch.compile is the slowest to start
    "llama_prefill": llama_prefill,
    "llama_decode": llama_decode,
    "small_kernels_eager": lambda o, d, s: small_kernels(o, d, s, graph=False),
    "small_kernels_graph": lambda o, d, s: small_kernels(o, d, s, graph=True),
    "train_step": train_step,
    "compiled": compiled,
}
BUDGET_S = 420  # start no new sample after this many seconds (the lead's call is <= 10 min)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", default="", help="comma-separated sample names: " + ",".join(SAMPLES))
    ap.add_argument("--smoke", action="store_true", help="tiny, on the CPU (tests this script)")
    a = ap.parse_args(argv)
    only = [s for s in a.only.split(",") if s]
    unknown = [s for s in only if s not in SAMPLES]
    if unknown:
        print(f"capture.py: unknown sample(s) {unknown}; choose from {list(SAMPLES)}", file=sys.stderr)
        return 2
    dev = "cpu" if a.smoke else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print("capture.py: no CUDA device; use --smoke to test on the CPU", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    failed = []
    for name in only or list(SAMPLES):
        if name == "small_kernels_graph" and dev == "cpu":
            log(f"{name}: skipped (CUDA graphs need a GPU)")
            continue
        if time.time() - T0 > BUDGET_S:
            log(f"{name}: SKIPPED (time budget of {BUDGET_S}s used)")
            failed.append(name)
            continue
        log(f"{name}: start")
        try:
            dirs = SAMPLES[name](a.out, dev, a.smoke)
        except Exception:
            traceback.print_exc()
            sys.stdout.flush()
            log(f"{name}: FAILED")
            failed.append(name)
            continue
        finally:
            if dev == "cuda":
                torch.cuda.empty_cache()
        for d in dirs:
            log(summarize(Path(d)))
    total = sum(f.stat().st_size for f in a.out.rglob("*") if f.is_file())
    log(f"all samples: {total / 1e6:.2f} MB in {a.out}; failed: {failed or 'none'}")
    from kernelscope.collectors import provenance

    prov = provenance.collect()
    gpu = (prov.get("gpus") or [{}])[0]
    print(f"PROVENANCE gpu={gpu.get('name')} uuid={gpu.get('uuid')} driver={prov.get('driver_version')} "
          f"cuda_runtime={prov.get('cuda_runtime')} driver_cuda={prov.get('driver_cuda_version')} "
          f"torch={prov.get('torch')} python={prov.get('python')} cpu={prov.get('cpu_model')}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
