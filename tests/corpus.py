"""The conformance corpus: the traces users have, built from our own real GPU captures (issue 11).

Each entry is ``Variant(name, build, ingest_args, note)``: ``build(folder) -> Path`` writes a file or folder
under ``folder`` and returns what ``kernelscope ingest`` is given. Variants are made from the real captures in
sample_traces/ by removing or renaming what other profilers and settings leave out or name differently, so every
event still comes from a real GPU run; three entries are new captures of models we did not write, as
torch.profiler records them (sample_traces/capture_wild.py). Small edge traces of tests/edge_traces.py join as
they are.

tests/test_conformance.py runs every registered analysis, report, diff, export and dashboard page over every
entry. A new variant joins by being added to ``VARIANTS``.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import edge_traces

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
ENCODER = SAMPLES / "nsight" / "encoder2_kineto" / "trace.json.gz"  # 66 kernels, 552 ops, H200
TRAIN = SAMPLES / "train_step" / "trace.json.gz"  # fwd+bwd+AdamW, 321 kernels, H200
QWEN_FULL = SAMPLES / "qwen2_train_full" / "trace.json.gz"  # every profiler option, H100

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_runtime", "cuda_driver", "ac2g",
            "cuda_sync", "overhead"}
SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs", "Ev Idx")


@dataclass(frozen=True)
class Variant:
    name: str
    build: Callable[[Path], Path]
    ingest_args: tuple[str, ...] = ()
    note: str = ""
    tags: frozenset[str] = field(default_factory=frozenset)


def _load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _dump(doc: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _rewrite(src: Path, name: str, fn: Callable[[dict], dict]) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        return _dump(fn(_load(src)), folder / f"{name}.json.gz")
    return build


def _copy(src: Path, name: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        dst = folder / name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            dst.mkdir(parents=True)
            dst = dst / src.name
            shutil.copy(src, dst)
        return dst
    return build


# -- the variants -----------------------------------------------------------------------------------------

def no_shapes(doc: dict) -> dict:
    """record_shapes=False: no Input Dims/type/Strides/Concrete Inputs on any operator."""
    doc.pop("record_shapes", None)
    for e in doc["traceEvents"]:
        for k in SHAPE_ARGS:
            (e.get("args") or {}).pop(k, None)
    return doc


def no_stacks(doc: dict) -> dict:
    """with_stack=False on a trace that had stacks: python_function events gone."""
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    return doc


def cpu_only(doc: dict) -> dict:
    """ProfilerActivity.CPU only: operators and annotations, no runtime calls, no GPU events."""
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in GPU_CATS]
    return doc


def empty(doc: dict) -> dict:
    """A profiler window that caught nothing: the header, no events."""
    doc["traceEvents"] = []
    return doc


def negative_durations(doc: dict) -> dict:
    """Clock trouble (HTA #317, nsys end < start): three kernels and two operators with dur < 0."""
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    for e in kernels[:3] + ops[5:7]:
        e["dur"] = -abs(float(e["dur"])) - 1.5
    return doc


def other_accelerator(doc: dict) -> dict:
    """Device events the parser does not map: an MTIA-style category and a profiler range on the GPU row."""
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    extra = []
    for i, k in enumerate(kernels[:10]):
        extra.append({**k, "cat": "mtia_ccp_events", "name": f"mtia_op_{i}", "pid": 100, "tid": 1})
    k0, k1 = kernels[0], kernels[-1]
    extra.append({"ph": "X", "cat": "cuda_profiler_range", "name": "range", "pid": k0["pid"], "tid": k0["tid"],
                  "ts": k0["ts"], "dur": float(k1["ts"]) - float(k0["ts"]), "args": {}})
    doc["traceEvents"] += extra
    return doc


def accelerator_only(doc: dict) -> dict:
    """A trace whose only device events are another accelerator's: never 'CPU-only'."""
    doc = cpu_only(doc)
    doc["traceEvents"] += [
        {"ph": "X", "cat": "mtia_ccp_events", "name": f"mtia_op_{i}", "pid": 100, "tid": 1,
         "ts": float(e["ts"]) + 1.0, "dur": 2.0, "args": {}}
        for i, e in enumerate(x for x in doc["traceEvents"] if x.get("cat") == "cpu_op") if i < 20]
    return doc


_HIP = {"cudaLaunchKernel": "hipLaunchKernel", "cudaMemsetAsync": "hipMemsetAsync",
        "cudaMemcpyAsync": "hipMemcpyAsync", "cudaStreamSynchronize": "hipStreamSynchronize",
        "cudaDeviceSynchronize": "hipDeviceSynchronize", "cudaStreamIsCapturing": "hipStreamIsCapturing",
        "cudaGetDevice": "hipGetDevice", "cudaSetDevice": "hipSetDevice", "cudaMalloc": "hipMalloc",
        "cudaFree": "hipFree", "cudaEventRecord": "hipEventRecord", "cudaFuncGetAttributes": "hipFuncGetAttributes"}


def amd_names(doc: dict) -> dict:
    """A ROCm-style trace: hip* runtime names, an MI300X device, rocm/hip versions instead of CUDA's."""
    for e in doc["traceEvents"]:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            e["name"] = _HIP.get(e["name"], e["name"].replace("cuda", "hip", 1))
    for k in ("cuda_driver_version", "cuda_runtime_version", "cupti_version"):
        doc.pop(k, None)
    doc["roctracer_version"] = 4
    for d in doc.get("deviceProperties", []):
        d.update(name="AMD Instinct MI300X", computeMajor=9, computeMinor=4, totalGlobalMem=206141652992,
                 numSms=304)
    return doc


def truncated(folder: Path) -> Path:
    """The job was killed while writing: the JSON text of a real trace cut at 60% of its bytes."""
    raw = gzip.decompress(TRAIN.read_bytes())
    path = folder / "truncated.json.gz"
    path.write_bytes(gzip.compress(raw[: int(len(raw) * 0.6)]))
    return path


def partial_ranks(folder: Path) -> Path:
    """Two rank traces of a world of 128 (what HTA users analyse): the ddp2 ranks relabelled 0 and 64."""
    out = folder / "partial_ranks"
    for src_rank, new_rank in ((0, 0), (1, 64)):
        doc = _load(SAMPLES / "ddp2" / f"ddp_rank{src_rank}" / "trace.json.gz")
        info = doc["distributedInfo"]
        info.update(rank=new_rank, world_size=128)
        for pg in info.get("pg_config", []):
            pg.update(pg_size=128, ranks=list(range(128)))
        _dump(doc, out / f"rank{new_rank}.pt.trace.json.gz")
    return out


def ncu_in_folder(folder: Path) -> Path:
    """A folder holding a Kineto run and the Nsight Compute CSV of the same workload."""
    out = folder / "ncu_folder"
    shutil.copytree(SAMPLES / "nsight" / "encoder2_kineto", out / "encoder2_kineto")
    shutil.copy(SAMPLES / "nsight" / "encoder2_ncu_raw.csv.gz", out / "encoder2_ncu_raw.csv.gz")
    return out


def _edge(name: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        sub = folder / f"edge_{name}"
        sub.mkdir(parents=True, exist_ok=True)
        return edge_traces.EDGE_CASES[name](sub)
    return build


VARIANTS: list[Variant] = [
    Variant("qwen2_defaults", _copy(SAMPLES / "qwen2_train_default" / "trace.json.gz", "qwen2_defaults"),
            note="new H100 capture, transformers Qwen2 train step, torch.profiler defaults", tags=frozenset({"gpu"})),
    Variant("qwen2_full", _copy(QWEN_FULL, "qwen2_full"),
            note="new H100 capture, every profiler option (shapes, memory, stacks, modules)", tags=frozenset({"gpu"})),
    Variant("qwen2_eager_run", _copy(SAMPLES / "qwen2_fwd_eager", "qwen2_eager_run"),
            note="new H100 collector run of a Qwen2-0.5B-shape forward", tags=frozenset({"gpu"})),
    Variant("no_shapes", _rewrite(ENCODER, "no_shapes", no_shapes), tags=frozenset({"gpu"})),
    Variant("no_stacks", _rewrite(QWEN_FULL, "no_stacks", no_stacks), tags=frozenset({"gpu"})),
    Variant("cpu_only", _rewrite(ENCODER, "cpu_only", cpu_only)),
    Variant("empty", _rewrite(ENCODER, "empty", empty)),
    Variant("graph_only", _copy(SAMPLES / "small_kernels_graph" / "trace.json.gz", "graph_only"),
            tags=frozenset({"gpu"})),
    Variant("truncated", truncated, ("--salvage",), tags=frozenset({"gpu"})),
    Variant("negative_durations", _rewrite(ENCODER, "negative_durations", negative_durations),
            tags=frozenset({"gpu"})),
    Variant("other_accelerator", _rewrite(ENCODER, "other_accelerator", other_accelerator),
            tags=frozenset({"gpu"})),
    Variant("accelerator_only", _rewrite(ENCODER, "accelerator_only", accelerator_only)),
    Variant("amd_names", _rewrite(ENCODER, "amd_names", amd_names), tags=frozenset({"gpu"})),
    Variant("partial_ranks", partial_ranks, tags=frozenset({"gpu", "ranks"})),
    Variant("ncu_in_folder", ncu_in_folder, tags=frozenset({"gpu"})),
    Variant("nsys_sqlite", _copy(SAMPLES / "nsight" / "encoder2_nvtx.sqlite.gz", "nsys_sqlite"),
            tags=frozenset({"gpu"})),
    *[Variant(f"edge_{n}", _edge(n)) for n in ("int_us_ts", "rocm_hip", "pre_1_12_categories",
                                                  "multi_stream_multi_device", "collectives", "profiler_steps",
                                                  "zero_dur_and_missing_dur", "dropped_records", "string_pids",
                                                  "inf_na_null_args", "cuda_graph", "python_functions")],
]
