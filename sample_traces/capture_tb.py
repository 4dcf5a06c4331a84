"""Capture the TensorBoard-style samples of issue 13 (run on an NVIDIA H100/H200).

    PYTHONPATH=src python3 sample_traces/capture_tb.py --out DIR [--only NAME,...] [--smoke]

A transformers ``Qwen2ForCausalLM`` built from a config (random weights, **6 decoder layers**, d=256) trained
with AdamW under bf16 autocast on batches from a real ``torch.utils.data.DataLoader`` (pinned host tensors,
copied with ``non_blocking=True``), the way users record it:

- ``tb_qwen2/``: plain ``torch.profiler.profile`` with ``record_shapes``, ``profile_memory``, ``with_stack``
  and ``with_modules`` under ``schedule(wait=1, warmup=1, active=2, repeat=2)`` and
  ``tensorboard_trace_handler(dir, use_gzip=True)``: two files ``<host>_<pid>.<ns>.pt.trace.json.gz``, one per
  cycle, two ``ProfilerStep``s each. ``oracle.txt`` (JSON; not .json, which ingest would read as a trace) holds per training step (by ``ProfilerStep`` number):
  ``torch.cuda.max_memory_allocated()`` over the step (peak stats reset at its start), the allocated bytes at
  its start and end, and the step's GPU time between two CUDA events recorded at its start and end.
- ``tb_ddp/``: two processes (``gloo``, both on GPU 0: one GPU is lent) training a 2-layer copy under DDP, one
  profiled step each through ``tensorboard_trace_handler``: two worker files of ONE step, ranks 0 and 1.
- ``qwen2_train_mem/``: kernelscope's own collector (``kernelscope.profile``, NVML telemetry, un-profiled
  timing) around the same 6-layer step with every profiler option on; ``oracle.txt`` as above.

``--smoke`` runs on the CPU, tiny, to test the script without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

import torch

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def qwen2(dev: str, layers: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = dict(hidden_size=256, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=704, vocab_size=4096)
    config = Qwen2Config(**cfg, max_position_embeddings=1024, tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(dev):
        model = Qwen2ForCausalLM(config)
    return model, cfg


def loader(dev: str, vocab: int, batch: int = 4, seq: int = 128, n: int = 64):
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, vocab, (n, seq), generator=g)
    ds = torch.utils.data.TensorDataset(data)
    return torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, generator=g,
                                       pin_memory=dev == "cuda", drop_last=True)


class Trainer:
    """One training step per call; records the oracles of each step when on CUDA."""

    def __init__(self, model, dev: str, ddp=None):
        self.model, self.dev = model, dev
        self.net = ddp or model
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.oracle: list[dict] = []

    def step(self, batch, step_num: int | None = None) -> None:
        cuda = self.dev == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            alloc0 = torch.cuda.memory_allocated()
            start.record()
        ids = batch.to(self.dev, non_blocking=True)
        with torch.autocast(self.dev, dtype=torch.bfloat16, enabled=cuda):
            loss = self.net(input_ids=ids, labels=ids).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if cuda:
            end.record()
            self.oracle.append({"step": step_num, "max_memory_allocated_bytes": int(torch.cuda.max_memory_allocated()),
                                "memory_allocated_start_bytes": int(alloc0),
                                "memory_allocated_end_bytes": int(torch.cuda.memory_allocated()),
                                "_events": (start, end)})

    def oracle_json(self) -> list[dict]:
        torch.cuda.synchronize() if self.dev == "cuda" else None
        out = []
        for o in self.oracle:
            s, e = o.pop("_events")
            out.append({**o, "cuda_event_ms": s.elapsed_time(e)})
        return out


def _batches(dl):
    while True:
        for (ids,) in dl:
            yield ids


def _info(extra: dict) -> dict:
    info = {"torch": torch.__version__, "host": socket.gethostname(), **extra}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["driver"] = torch.version.cuda
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


OPTS = dict(record_shapes=True, profile_memory=True, with_stack=True, with_modules=True)


def tb_qwen2(out: Path, dev: str, smoke: bool) -> list[Path]:
    folder = out / "tb_qwen2"
    folder.mkdir(parents=True, exist_ok=True)
    model, cfg = qwen2(dev, 2 if smoke else 6)
    model.train()
    tr, batches = Trainer(model, dev), _batches(loader(dev, cfg["vocab_size"]))
    for _ in range(3):  # warm the allocator and the kernels before the profiler starts
        tr.step(next(batches))
    tr.oracle.clear()
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2)
    with torch.profiler.profile(activities=acts, schedule=sched, **OPTS,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(folder), use_gzip=True)
                                ) as prof:
        for _ in range(8):
            tr.step(next(batches), prof.step_num)
            prof.step()
    oracle = tr.oracle_json() if dev == "cuda" else []
    (folder / "oracle.txt").write_text(json.dumps(
        _info({"config": cfg, "profiler_options": OPTS, "schedule": "wait=1, warmup=1, active=2, repeat=2",
               "batch": [4, 128], "steps": oracle}), indent=1))
    return [folder]


def _ddp_worker(rank: int, folder: str, dev: str, port: int) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model, cfg = qwen2(dev, 2)
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if dev == "cuda" else None)
    tr = Trainer(model, dev, ddp)
    batches = _batches(loader(dev, cfg["vocab_size"]))
    for _ in range(2):
        tr.step(next(batches))
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(folder, use_gzip=True)
                                ) as prof:
        for _ in range(2):
            tr.step(next(batches), prof.step_num)
            prof.step()
    if dev == "cuda":
        torch.cuda.synchronize()
    dist.destroy_process_group()


def tb_ddp(out: Path, dev: str, smoke: bool) -> list[Path]:
    import torch.multiprocessing as mp

    folder = out / "tb_ddp"
    folder.mkdir(parents=True, exist_ok=True)
    mp.spawn(_ddp_worker, args=(str(folder), dev, 29500 + os.getpid() % 1000), nprocs=2, join=True)
    (folder / "oracle.txt").write_text(json.dumps(_info({"world_size": 2, "backend": "gloo, both ranks on GPU 0",
                                                          "layers": 2, "profiler_options": {"record_shapes": True}}),
                                                   indent=1))
    return [folder]


def qwen2_train_mem(out: Path, dev: str, smoke: bool) -> list[Path]:
    from kernelscope.collectors.profile import profile

    run_dir = out / "qwen2_train_mem"
    model, cfg = qwen2(dev, 2 if smoke else 6)
    model.train()
    tr, batches = Trainer(model, dev), _batches(loader(dev, cfg["vocab_size"]))
    for _ in range(3):
        tr.step(next(batches))
    tr.oracle.clear()
    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    fixed = next(batches)
    with profile(name="qwen2_train_mem", labels={"model": "qwen2-6l", "batch": 4}, schedule=sched, run_dir=run_dir,
                 ingest=False, unprofiled={"fn": lambda: tr.step(fixed), "energy_min_s": 0.2 if smoke else 1.0},
                 **OPTS) as p:
        tr.oracle.clear()  # the un-profiled timing ran steps before the profiled ones
        for i in range(2):
            tr.step(next(batches), i)
            p.step()
    oracle = tr.oracle_json() if dev == "cuda" else []
    (run_dir / "oracle.txt").write_text(json.dumps(_info({"config": cfg, "profiler_options": OPTS,
                                                           "steps": oracle}), indent=1))
    return [run_dir]


WORKLOADS = {"tb_qwen2": tb_qwen2, "tb_ddp": tb_ddp, "qwen2_train_mem": qwen2_train_mem}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--smoke", action="store_true", help="on the CPU, tiny")
    a = ap.parse_args(argv)
    dev = "cpu" if a.smoke else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print("capture_tb.py: no CUDA device; use --smoke on the CPU", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in [s for s in a.only.split(",") if s] or list(WORKLOADS):
        t = time.time()
        try:
            for d in WORKLOADS[name](a.out, dev, a.smoke):
                sizes = {p.name: p.stat().st_size for p in Path(d).iterdir()}
                log(f"{name}: ok in {time.time() - t:.1f}s: {d} {sizes}")
        except Exception:  # noqa: BLE001 - report and go on with the next workload
            failed.append(name)
            log(f"{name}: FAILED\n{traceback.format_exc()}")
    log(f"done; failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
