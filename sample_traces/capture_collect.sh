#!/usr/bin/env bash
# Issue 14 samples: `kernelscope profile --nsys --ncu` and `kernelscope sweep` around a transformers model built
# from a config (sample_traces/wild_infer.py), on one NVIDIA GPU. Run from the repo root:
#   bash sample_traces/capture_collect.sh OUTDIR
# Needs kernelscope importable (PYTHONPATH=src), transformers, nsys (its SQLite export needs libdw.so.1 on
# LD_LIBRARY_PATH) and ncu.
set -uo pipefail
out=${1:?usage: capture_collect.sh OUTDIR}
mkdir -p "$out"
db="$out/collect.duckdb"
NSYS=${NSYS:-$(command -v nsys || ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | tail -1)}
ks() { python3 -m kernelscope "$@"; }
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > "$out/gpu.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" >> "$out/gpu.txt"
"$NSYS" --version >> "$out/gpu.txt" 2>&1; ncu --version >> "$out/gpu.txt" 2>&1
# 1. every collector on one unmodified script: un-profiled, Kineto, Nsight Systems, Nsight Compute (top 5 kernels)
time timeout 300 python3 -m kernelscope profile --db "$db" --run-dir "$out/qwen2_infer_nsight" --name qwen2_infer --schedule 1,1,1 \
  --nsys "$NSYS" --ncu top:5 -- python3 sample_traces/wild_infer.py --batch 8 --iters 4
# 2. the nsys trace against nsys's own statistics, and per-operator kernel counts Kineto vs nsys
"$NSYS" stats --report cuda_gpu_kern_sum --format csv --force-export=false \
  -o "$out/qwen2_infer_nsight/nsys_stats" "$out/qwen2_infer_nsight/qwen2_infer.sqlite"
python3 -m kernelscope.collectors.nsight_ncu check-kern-sum "$db" qwen2_infer-nsys \
  "$out/qwen2_infer_nsight/nsys_stats_cuda_gpu_kern_sum.csv"; echo "check-kern-sum exit $?"
python3 -m kernelscope.collectors.nsight_ncu check-collectors "$db" qwen2_infer qwen2_infer-nsys; echo "check-collectors exit $?"
# 3. a batch sweep of a wider model (d=1024, 8 layers, seq 512): 7 points, each un-profiled (kernelscope.range timing) then profiled
time timeout 235 python3 -m kernelscope sweep --db "$db" --run-root "$out/qwen2_sweep" --name qwen2_sweep --grid batch=1,2,4,8,16,32,64 \
  --schedule 1,1,2 -- python3 sample_traces/wild_infer.py --batch {batch} --iters 5 --mark --hidden 1024 --layers 8 --seq 512
ks traces --db "$db"
ks analyze transition --sweep qwen2_sweep --db "$db"
ks analyze bandwidth qwen2_infer --db "$db" | head -40
