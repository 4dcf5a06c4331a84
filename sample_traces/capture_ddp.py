"""Capture a data-parallel (DDP) training step on several GPUs of one host, one Kineto run dir per rank, with
kernelscope's own collector (the multi-rank fixture of issue 7).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    PYTHONPATH=src python3 sample_traces/capture_ddp.py --out DIR [--world 2]

Writes DIR/ddp_rank<r>/ (trace.json.gz, run.json, telemetry.parquet). NVLink multicast stays off (the
variables above are forced here too). The model: a 4-layer transformer encoder (d=1024, bf16 autocast), batch
8 x seq 512 per rank, AdamW; 2 warm-up steps outside the profiler, then schedule(warmup=1, active=2).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _k, _v in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ[_k] = _v


def worker(rank: int, world: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import kernelscope

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    torch.manual_seed(0)
    d, layers, batch, seq = 1024, 4, 8, 512
    layer = torch.nn.TransformerEncoderLayer(d, nhead=16, dim_feedforward=4 * d, batch_first=True)
    model = DDP(torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).cuda(),
                device_ids=[rank], bucket_cap_mb=25)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d, device="cuda")

    def step():
        with kernelscope.range("forward"), torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        with kernelscope.range("backward"):
            loss.backward()
        with kernelscope.range("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
    with kernelscope.profile(name=f"ddp_rank{rank}", labels={"rank": rank, "world_size": world, "run": "ddp2",
                                                              "batch": batch, "seq": seq, "d_model": d},
                             schedule=sched, run_dir=f"{out}/ddp_rank{rank}", ingest=False) as p:
        for _ in range(3):
            step()
            p.step()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: done", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < a.world:
        print(f"capture_ddp.py: needs {a.world} GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    mp.spawn(worker, args=(a.world, str(a.out)), nprocs=a.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
