"""Hand-built minimal Kineto traces for storage link tests (written as real JSON, read by the real parser).

Times are given in microseconds relative to BASE (the trace's baseTimeNanoseconds), as Kineto >= 2.4 writes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BASE = 1_700_000_000_000_000_000
PID = 100
MAIN = 100
AUTOGRAD = 200


def x(cat, name, ts, dur, *, pid=PID, tid=MAIN, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def op(name, ts, dur, ext, tid=MAIN):
    return x("cpu_op", name, ts, dur, tid=tid, **{"External id": ext})


def rt(name, ts, dur, corr, ext, tid=MAIN, cat="cuda_runtime"):
    return x(cat, name, ts, dur, tid=tid, correlation=corr, **{"External id": ext})


def kern(name, ts, dur, corr, ext, stream=7, device=0, cat="kernel"):
    return x(cat, name, ts, dur, pid=device, tid=stream, device=device, stream=stream, correlation=corr,
             **{"External id": ext})


def write_trace(path: Path, events: list[dict], *, gz: bool = False, **top) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}], "traceEvents": events,
           "baseTimeNanoseconds": BASE, "displayTimeUnit": "ms"}
    doc.update(top)
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def links_events() -> list[dict]:
    """Nesting, phases, an autograd thread, a driver launch, a graph replay, same-stream overlap.

    GPU busy union on device 0 (us): [40,55] [115,120] [230,240] [320,330] [620,640] [650,660] = 70 us.
    """
    return [
        x("user_annotation", "ProfilerStep#3", 0, 1000, **{"External id": 90}),
        x("user_annotation", "fwd", 5, 160, **{"External id": 91}),
        op("aten::linear", 10, 90, 1),
        op("aten::addmm", 20, 60, 2),
        rt("cudaLaunchKernel", 30, 5, 11, 2),
        rt("cudaMemcpyAsync", 36, 2, 17, 2),
        op("aten::relu", 100, 50, 3),  # starts exactly at aten::linear's end: a sibling, not a child
        rt("cudaLaunchKernel", 110, 2, 12, 3),
        op("aten::sum", 190, 310, 6),  # main thread, overlapping the autograd work in time
        op("autograd::engine::evaluate_function: AddmmBackward0", 200, 200, 4, tid=AUTOGRAD),
        op("aten::mm", 210, 90, 5, tid=AUTOGRAD),
        rt("cudaLaunchKernel", 220, 5, 13, 5, tid=AUTOGRAD),
        rt("cuLaunchKernel", 310, 5, 14, 4, tid=AUTOGRAD, cat="cuda_driver"),
        rt("cudaGraphLaunch", 600, 10, 15, 0),
        rt("cudaStreamSynchronize", 700, 50, 16, 0),
        kern("k_addmm", 40, 10, 11, 2),
        kern("Memcpy HtoD (Pageable -> Device)", 45, 10, 17, 2, stream=8, cat="gpu_memcpy"),
        kern("k_relu", 115, 5, 12, 3),
        kern("k_mm_backward", 230, 10, 13, 5),
        kern("triton_poi_fused", 320, 10, 14, 4),
        kern("g_node0", 620, 10, 15, 0),
        kern("g_node1", 625, 15, 15, 0),  # overlaps g_node0 on the same stream
        kern("g_node2", 650, 10, 15, 0),
        x("cpu_op", "kernelscope::clock_sync 1700000000000900000", 800, 1, **{"External id": 92}),
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": AUTOGRAD, "args": {"name": "autograd"}},
    ]
