"""Hand-built minimal multi-rank Kineto traces (real JSON read by the real parser) for run, comm and export
tests. Times in microseconds relative to BASE; each rank's GPU is device = rank."""

from __future__ import annotations

import json
from pathlib import Path

from storage.kineto_build import BASE, kern


def write_trace(path: Path, events: list[dict], **top) -> Path:
    """A Kineto JSON file laid out as torch >= 2.5 writes it: distributedInfo (in ``top``) before
    traceEvents."""
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}], **top,
           "traceEvents": events, "baseTimeNanoseconds": BASE, "displayTimeUnit": "ms"}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def coll(name, ts, dur, corr, *, rank, collective="allreduce", nelems=1_000_000, out_nelems=None,
         dtype="Float", world=2, pg="0", stream=20):
    """An NCCL kernel carrying the collective args torch records."""
    ev = kern(name, ts, dur, corr, corr, stream=stream, device=rank)
    ev["args"].update({
        "Collective name": collective, "In msg nelems": nelems,
        "Out msg nelems": nelems if out_nelems is None else out_nelems, "Group size": world,
        "dtype": dtype, "In split size": "[]", "Out split size": "[]", "Process Group Name": pg,
        "Process Group Description": "default_pg", "Process Group Ranks": str(list(range(world))),
    })
    return ev


def dist(rank: int, world: int) -> dict:
    return {"backend": "nccl", "rank": rank, "world_size": world}


AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def overlap_pair(folder: Path) -> Path:
    """Two ranks; exact per-rank numbers are written out in tests/analysis/test_comm.py.

    rank 0 (device 0): k_gemm [0,100) s7, allreduce [60,160) s20, memcpy [150,200) s8, k_add [230,250) s7,
                       allgather [300,340) s20.
    rank 1 (device 1): k_gemm [0,50) s7, allreduce [60,160) s20, allgather [300,340) s20.
    allreduce: 1,000,000 Float (4 MB); allgather: 500,000 -> 1,000,000 BFloat16 (2 MB out).
    """
    folder.mkdir(parents=True, exist_ok=True)
    r0 = [
        kern("k_gemm", 0, 100, 1, 1, stream=7, device=0),
        coll(AR, 60, 100, 2, rank=0),
        kern("Memcpy DtoD (Device -> Device)", 150, 50, 3, 3, stream=8, device=0, cat="gpu_memcpy"),
        kern("k_add", 230, 20, 4, 4, stream=7, device=0),
        coll(AG, 300, 40, 5, rank=0, collective="_allgather_base", nelems=500_000, out_nelems=1_000_000,
             dtype="BFloat16"),
    ]
    r1 = [
        kern("k_gemm", 0, 50, 1, 1, stream=7, device=1),
        coll(AR, 60, 100, 2, rank=1),
        coll(AG, 300, 40, 5, rank=1, collective="_allgather_base", nelems=500_000, out_nelems=1_000_000,
             dtype="BFloat16"),
    ]
    write_trace(folder / "rank0.json", r0, distributedInfo=dist(0, 2))
    write_trace(folder / "rank1.json", r1, distributedInfo=dist(1, 2))
    return folder


def straggler_pair(folder: Path, *, late_us: int = 2000, shift_us: int = 0) -> Path:
    """Two ranks, two allreduces. Rank 1 arrives ``late_us`` late at the second one (rank 0 waits inside
    its kernel); both leave together. ``shift_us`` moves every time of rank 1 (a clock offset)."""
    folder.mkdir(parents=True, exist_ok=True)
    r0 = [coll(AR, 0, 100, 1, rank=0), kern("k_gemm", 150, 50, 2, 2, device=0),
          coll(AR, 200, 100 + late_us, 3, rank=0)]
    r1 = [coll(AR, 0 + shift_us, 100, 1, rank=1), kern("k_gemm", 150 + shift_us, late_us, 2, 2, device=1),
          coll(AR, 200 + late_us + shift_us, 100, 3, rank=1)]
    write_trace(folder / "rank0.json", r0, distributedInfo=dist(0, 2))
    write_trace(folder / "rank1.json", r1, distributedInfo=dist(1, 2))
    return folder
