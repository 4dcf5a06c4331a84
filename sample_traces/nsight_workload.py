"""One small workload captured three ways for the Nsight fixtures: Kineto (our collector), Nsight Systems
(emit_nvtx ranges) and Nsight Compute (per-kernel metrics). Run by capture_nsight.sh on a real GPU.

    python3 nsight_workload.py --mode kineto --out DIR   # kernelscope.profile -> DIR/kineto_twin/
    python3 nsight_workload.py --mode nvtx               # under `nsys profile --capture-range=cudaProfilerApi`
    python3 nsight_workload.py --mode ncu                # under `ncu`; one profiled step
"""

from __future__ import annotations

import argparse

import torch


def build(device: str = "cuda"):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).to(device).eval()
    x = torch.randn(4, 128, 256, device=device)
    return model, x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["kineto", "nvtx", "ncu"], required=True)
    ap.add_argument("--out", default="nsight_out")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    model, x = build()
    with torch.no_grad():
        for _ in range(3):  # warm-up: cuBLAS handles, caching allocator
            model(x)
        torch.cuda.synchronize()
        if a.mode == "kineto":
            import kernelscope

            with kernelscope.profile(name="nsight_twin_kineto", run_dir=f"{a.out}/kineto_twin", ingest=False,
                                     labels={"workload": "encoder2"}) as p:
                for _ in range(a.steps):
                    model(x)
                    p.step()
                torch.cuda.synchronize()
        elif a.mode == "nvtx":
            torch.cuda.profiler.start()
            with torch.autograd.profiler.emit_nvtx(record_shapes=True):
                for _ in range(a.steps):
                    model(x)
                torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        else:
            model(x)
            torch.cuda.synchronize()


if __name__ == "__main__":
    main()
