"""Capture traces of models we did not write, the way users record them (run on an NVIDIA H100/H200).

    PYTHONPATH=src python3 sample_traces/capture_wild.py --out DIR [--only NAME,...] [--smoke]

- qwen2_train_default: a transformers Qwen2ForCausalLM built from a small config (random weights), one
  forward + backward + AdamW step, recorded with torch.profiler's **defaults** (CPU + CUDA activities, no
  shapes, no stacks, no memory) and ``export_chrome_trace``: what most users' traces look like.
- qwen2_train_full: the same step with every option on (shapes, memory, stacks, modules); ``extra.json``
  holds ``torch.cuda.max_memory_allocated()`` over the profiled step (reset before it).
- qwen2_fwd_eager / qwen2_fwd_graph: a Qwen2-0.5B-shaped model (24 layers, bf16, random weights), a
  one-token forward (batch 1, no KV cache), eager and as one ``torch.cuda.graph`` replay, each through
  kernelscope's collector with un-profiled timing: the A/B that checks ``analyze whatif`` on an eager trace.
- prior_graph_chain / prior_graph_mlp / prior_graph_llama: CUDA-graph replays of our own workloads (200
  chained elementwise ops; an 8-layer MLP at batch 1; a 16-layer Llama-shaped one-token forward), from which
  the shipped per-GPU-family prior of the launch-free gap is measured (analysis/whatif.py, data/).

``--smoke`` runs what it can on the CPU (no graphs) to test this script without a GPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch

from kernelscope.collectors.profile import profile

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def _qwen2(dev: str, smoke: bool, size: str, attn: str = "sdpa", dtype=torch.bfloat16):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if smoke or size == "small":
        cfg = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=704, vocab_size=4096)
    else:  # the shape of Qwen2-0.5B
        cfg = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                   intermediate_size=4864, vocab_size=151936)
    config = Qwen2Config(**cfg, max_position_embeddings=4096, tie_word_embeddings=True, attn_implementation=attn)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(prev)
    return model, cfg


def _gz_chrome_trace(prof, path: Path) -> None:
    raw = path.with_suffix("")  # x.json.gz -> x.json
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as f, gzip.open(path, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()


def qwen2_train(out: Path, dev: str, smoke: bool, full: bool) -> list[Path]:
    model, cfg = _qwen2(dev, smoke, "small", dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg["vocab_size"], (4, 128), device=dev)

    def step():
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    name = "qwen2_train_full" if full else "qwen2_train_default"
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
    opts = dict(record_shapes=True, profile_memory=True, with_stack=True, with_modules=True) if full else {}
    with torch.profiler.profile(activities=acts, **opts) as prof:
        step()
        if dev == "cuda":
            torch.cuda.synchronize()
    extra = {"config": cfg, "profiler_options": opts, "torch": torch.__version__}
    if dev == "cuda":
        extra["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        extra["gpu"] = torch.cuda.get_device_name()
    try:
        import transformers
        extra["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        pass
    _gz_chrome_trace(prof, folder / "trace.json.gz")
    (folder / "extra.json").write_text(json.dumps(extra, indent=1))
    return [folder]


def _graphed(fn):
    """Capture ``fn()`` into one CUDA graph (after a warm-up on a side stream); returns replay()."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def _profiled(out: Path, name: str, labels: dict, step, active: int, smoke: bool) -> Path:
    run_dir = out / name
    sched = torch.profiler.schedule(wait=0, warmup=1, active=active, repeat=1)
    with profile(name=name, labels=labels, schedule=sched, run_dir=run_dir, ingest=False,
                 unprofiled={"fn": step, "energy_min_s": 0.2 if smoke else 1.0}) as p:
        for _ in range(1 + active):
            step()
            p.step()
    return run_dir


def qwen2_fwd(out: Path, dev: str, smoke: bool, graph: bool) -> list[Path]:
    # Under stream capture transformers takes its tracing path (a materialised causal mask: ~160 more kernels
    # per forward than eager, which skips the mask for one token). The eager run takes the same path, so the A/B
    # compares the same kernels launched two ways.
    from transformers.utils import import_utils

    import_utils.is_cuda_stream_capturing = lambda: True
    model, cfg = _qwen2(dev, smoke, "0.5b")
    model.eval()
    ids = torch.randint(0, cfg["vocab_size"], (1, 1), device=dev)

    def fwd():
        with torch.inference_mode():
            return model(input_ids=ids, use_cache=False).logits

    step = _graphed(fwd) if graph else fwd
    labels = {"model": "qwen2-0.5b-shape", "tokens": 1, "graph": int(graph)}
    return [_profiled(out, "qwen2_fwd_graph" if graph else "qwen2_fwd_eager", labels, step, 3, smoke)]


def _chain(x, n_ops=200):
    y = x
    for _ in range(n_ops // 2):
        y = y * 1.0001
        y = y + 0.0001
    return y


def prior_chain(out: Path, dev: str, smoke: bool) -> list[Path]:
    x = torch.randn(64, 512, device=dev)
    step = _graphed(lambda: _chain(x))
    return [_profiled(out, "prior_graph_chain", {"workload": "chain200", "graph": 1}, step, 4, smoke)]


def prior_mlp(out: Path, dev: str, smoke: bool) -> list[Path]:
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024), torch.nn.LayerNorm(1024)]
    mlp = torch.nn.Sequential(*layers).to(dev).to(torch.bfloat16).eval()
    x = torch.randn(1, 1024, device=dev, dtype=torch.bfloat16)

    def fwd():
        with torch.inference_mode():
            return mlp(x)

    step = _graphed(fwd)
    return [_profiled(out, "prior_graph_mlp", {"workload": "mlp8_b1", "graph": 1}, step, 4, smoke)]


def prior_llama(out: Path, dev: str, smoke: bool) -> list[Path]:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
               intermediate_size=8192, vocab_size=128256)
    config = LlamaConfig(**cfg, max_position_embeddings=2048, tie_word_embeddings=True, attn_implementation="sdpa")
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(dev):
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(prev)
    ids = torch.randint(0, cfg["vocab_size"], (1, 1), device=dev)

    def fwd():
        with torch.inference_mode():
            return model(input_ids=ids, use_cache=False).logits

    step = _graphed(fwd)
    return [_profiled(out, "prior_graph_llama", {"workload": "llama16_1tok", "graph": 1}, step, 3, smoke)]


WORKLOADS = {
    "qwen2_train_default": lambda o, d, s: qwen2_train(o, d, s, full=False),
    "qwen2_train_full": lambda o, d, s: qwen2_train(o, d, s, full=True),
    "qwen2_fwd_eager": lambda o, d, s: qwen2_fwd(o, d, s, graph=False),
    "qwen2_fwd_graph": lambda o, d, s: qwen2_fwd(o, d, s, graph=True),
    "prior_graph_chain": prior_chain,
    "prior_graph_mlp": prior_mlp,
    "prior_graph_llama": prior_llama,
}
GRAPH_ONLY = {"qwen2_fwd_graph", "prior_graph_chain", "prior_graph_mlp", "prior_graph_llama"}
BUDGET_S = 400


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--smoke", action="store_true", help="what runs on the CPU, tiny")
    a = ap.parse_args(argv)
    dev = "cpu" if a.smoke else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print("capture_wild.py: no CUDA device; use --smoke on the CPU", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    failed = []
    for name in [s for s in a.only.split(",") if s] or list(WORKLOADS):
        if dev == "cpu" and (name in GRAPH_ONLY or name == "qwen2_fwd_eager"):
            log(f"{name}: skipped on the CPU")
            continue
        if time.time() - T0 > BUDGET_S:
            log(f"{name}: SKIPPED (time budget)")
            failed.append(name)
            continue
        t = time.time()
        try:
            dirs = WORKLOADS[name](a.out, dev, a.smoke)
            for d in dirs:
                sizes = {p.name: p.stat().st_size for p in Path(d).iterdir()}
                log(f"{name}: ok in {time.time() - t:.1f}s: {d} {sizes}")
        except Exception:  # noqa: BLE001 - report and go on with the next workload
            failed.append(name)
            log(f"{name}: FAILED\n{traceback.format_exc()}")
        if dev == "cuda":
            torch.cuda.empty_cache()
    log(f"done; failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
