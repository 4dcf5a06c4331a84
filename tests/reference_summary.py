#!/usr/bin/env python3
"""Independent reference for ``kernelscope summary``: reads a Kineto JSON file with the standard
library only (json, gzip, decimal) and computes the headline numbers exactly in integer ns.

Deliberately shares no code with kernelscope: it re-reads the raw file and re-derives every number from
the definitions in docs/metrics.md, so a bug in the parser, the store or the summary SQL shows up as a
mismatch in tests/test_summary.py.

Definitions (docs/metrics.md):
- times: epoch ns = baseTimeNanoseconds (0 when absent) + round(ts_us * 1000), from the decimal text;
  dur ns = round(dur_us * 1000); end = start + dur. Rounding: half away from zero.
- GPU activity: ph 'X' event of cat kernel/gpu_memcpy/gpu_memset (pre-1.12: Kernel/Memcpy/Memset).
  Device: args.device, else pid.
- cpu_ops: ph 'X' events of cat cpu_op (pre-1.12: Operator), except ProfilerStep#N (a phase).
- launches: host runtime/driver calls (cuda_runtime/cuda_driver/Runtime) whose args.correlation equals
  the correlation of at least one GPU activity.
- kernels_with_launch: kernels whose correlation equals a host runtime/driver call's correlation.
- top_kernels: the 10 kernel names with the largest summed duration (ties: by name), with count and total.
- kernel_time_ns: sum of kernel durations. busy_ns: length of the union of GPU activity intervals, per
  device, summed over devices. gpu_span_ns: first GPU activity start to last GPU activity end (overall).
  idle_ns: per device gpu_span - busy, summed over devices (= gpu_span_ns - busy_ns on one device).
  latency_ns: first cpu_op start (always a top-level operator's start) to last GPU activity end.
  exposed_host_ns: latency_ns - length of the union of GPU activity over all devices inside
  [first CPU op start, last GPU end] (both null when the GPU work ends before the first CPU op).
  Span-like numbers are null when there is no GPU activity (or, for latency, no cpu_op).

Usage: python tests/reference_summary.py TRACE.json[.gz]   -> prints the numbers as JSON.
"""

from __future__ import annotations

import decimal
import gzip
import json
import sys

_GPU_CATS = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
}
_CPU_OP_CATS = {"cpu_op", "Operator"}
_HOST_CALL_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


def _ns(value) -> int:
    """Microseconds (int or Decimal, as parsed from the text) -> integer ns, half away from zero."""
    d = decimal.Decimal(value) * 1000
    return int(d.quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))


def _int_or_none(value):
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else None
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text, 16) if text.lower().startswith("0x") else int(text)
        except ValueError:
            return None
    return None


def _union_length(intervals) -> int:
    total = 0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def load(path: str) -> dict:
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw.decode("utf-8"), parse_float=decimal.Decimal)


def reference_summary(path: str) -> dict:
    doc = load(path)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    counts = {"kernel": 0, "memcpy": 0, "memset": 0}
    kernel_time = 0
    gpu = {}  # device -> list of (start, end)
    gpu_corr = set()
    kernel_corrs = []  # correlation of every kernel
    by_name = {}  # kernel name -> [count, total_ns]
    host_calls = []  # correlations of runtime/driver calls
    cpu_op_starts = []
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        args = ev.get("args") or {}
        if cat in _GPU_CATS:
            kind = _GPU_CATS[cat]
            start = base + _ns(ev["ts"])
            dur = _ns(ev.get("dur", 0))
            counts[kind] += 1
            corr = _int_or_none(args.get("correlation"))
            if kind == "kernel":
                kernel_time += dur
                kernel_corrs.append(corr)
                agg = by_name.setdefault(ev.get("name"), [0, 0])
                agg[0] += 1
                agg[1] += dur
            device = _int_or_none(args.get("device"))
            if device is None:
                device = _int_or_none(ev.get("pid"))
            gpu.setdefault(device, []).append((start, start + dur))
            if corr is not None:
                gpu_corr.add(corr)
        elif cat in _CPU_OP_CATS:
            if str(ev.get("name", "")).startswith("ProfilerStep#"):
                continue
            cpu_op_starts.append(base + _ns(ev["ts"]))
        elif cat in _HOST_CALL_CATS:
            host_calls.append(_int_or_none(args.get("correlation")))

    launches = sum(1 for c in host_calls if c is not None and c in gpu_corr)
    host_corr = {c for c in host_calls if c is not None}
    top = sorted(by_name.items(), key=lambda kv: (-kv[1][1], kv[0]))[:10]
    per_device = {}
    for device, ivs in gpu.items():
        first = min(s for s, _ in ivs)
        last = max(e for _, e in ivs)
        busy = _union_length(ivs)
        per_device[device] = {"busy_ns": busy, "gpu_span_ns": last - first, "idle_ns": last - first - busy}
    out = {
        "kernels": counts["kernel"],
        "memcpys": counts["memcpy"],
        "memsets": counts["memset"],
        "launches": launches,
        "cpu_ops": len(cpu_op_starts),
        "kernel_time_ns": kernel_time,
        "busy_ns": sum(d["busy_ns"] for d in per_device.values()),
        "gpu_span_ns": None,
        "idle_ns": None,
        "latency_ns": None,
        "exposed_host_ns": None,
        "kernels_with_launch": sum(1 for c in kernel_corrs if c is not None and c in host_corr),
        "top_kernels": [{"name": n, "count": c, "total_ns": t} for n, (c, t) in top],
    }
    if gpu:
        all_ivs = [iv for ivs in gpu.values() for iv in ivs]
        first = min(s for s, _ in all_ivs)
        last = max(e for _, e in all_ivs)
        out["gpu_span_ns"] = last - first
        out["idle_ns"] = sum(d["idle_ns"] for d in per_device.values())
        if cpu_op_starts and last >= min(cpu_op_starts):
            t0 = min(cpu_op_starts)
            out["latency_ns"] = last - t0
            # GPU work inside the latency window only (work queued before the first operator is in neither)
            out["exposed_host_ns"] = out["latency_ns"] - _union_length([(max(a, t0), b) for a, b in all_ivs if b > t0])
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: reference_summary.py TRACE.json[.gz]")
    print(json.dumps(reference_summary(sys.argv[1]), indent=2))
