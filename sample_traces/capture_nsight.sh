#!/usr/bin/env bash
# Capture the Nsight fixtures on a real NVIDIA GPU (run from the repo root; PYTHONPATH=src).
#   bash sample_traces/capture_nsight.sh OUTDIR
# Needs nsys (its importer needs libdw.so.1 on LD_LIBRARY_PATH) and ncu on PATH or at NSYS/NCU.
set -uo pipefail
out=${1:?usage: capture_nsight.sh OUTDIR}
mkdir -p "$out"
NSYS=${NSYS:-nsys}
NCU=${NCU:-ncu}
here=$(dirname "$0")
python3 "$here/nsight_workload.py" --mode kineto --out "$out" || echo "kineto twin failed"
"$NSYS" profile --trace=cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop \
    --sample=none --cpuctxsw=none --force-overwrite=true -o "$out/encoder2_nvtx" \
    python3 "$here/nsight_workload.py" --mode nvtx || echo "nsys profile failed"
"$NSYS" export --type sqlite --force-overwrite=true -o "$out/encoder2_nvtx.sqlite" "$out/encoder2_nvtx.nsys-rep" \
    || echo "nsys export failed"
"$NSYS" stats --report cuda_gpu_kern_sum --format csv --force-export=false -o "$out/encoder2_nvtx" \
    "$out/encoder2_nvtx.sqlite" || echo "nsys stats failed"
"$NCU" --csv --page raw --print-units base --launch-skip 0 --launch-count 60 \
    python3 "$here/nsight_workload.py" --mode ncu > "$out/encoder2_ncu_raw.csv" 2> "$out/ncu_raw.err" || echo "ncu raw failed"
"$NCU" --csv --page details --launch-count 20 \
    python3 "$here/nsight_workload.py" --mode ncu > "$out/encoder2_ncu_details.csv" 2> "$out/ncu_details.err" || echo "ncu details failed"
# DRAM bytes (measured traffic beside the bandwidth model's minimum bytes): the default set lacks them.
"$NCU" --csv --page raw --print-units base --set basic --metrics dram__bytes_read.sum,dram__bytes_write.sum \
    --launch-count 60 python3 "$here/nsight_workload.py" --mode ncu > "$out/encoder2_ncu_dram.csv" \
    2> "$out/ncu_dram.err" || echo "ncu dram failed"
"$NSYS" --version > "$out/nsight_versions.txt" 2>&1; "$NCU" --version >> "$out/nsight_versions.txt" 2>&1
ls -la "$out"
