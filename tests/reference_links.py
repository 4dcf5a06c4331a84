"""Independent reference for kernel -> launch call -> leaf operator -> top-level operator links.

Standard library only (json, gzip, bisect); shares no code with kernelscope. Definitions (docs/metrics.md):
a kernel's launch call is the cuda_runtime/cuda_driver event with the same correlation id; its leaf
operator is the innermost cpu_op on the launch call's (pid, tid) open at the call's start (open at t when
start <= t < end, in exact integer ns); the top-level operator is the outermost such op.
Returns, per kernel (keyed by (device, stream, start_ns, name)), (launch name, leaf name, top name).
"""

from __future__ import annotations

import bisect
import gzip
import json
from decimal import Decimal
from pathlib import Path


def _ns(value, base: int) -> int:
    return base + int((Decimal(str(value)) * 1000).to_integral_value())


def load(path: Path) -> dict:
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)


def kernel_links(path: Path) -> dict[tuple, tuple]:
    doc = load(path)
    base = int(doc.get("baseTimeNanoseconds", 0) or 0)
    ops: dict[tuple, list[tuple[int, int, str]]] = {}
    launches: dict[int, tuple] = {}
    kernels = []
    for e in doc["traceEvents"]:
        cat, ph = e.get("cat"), e.get("ph")
        if ph != "X":
            continue
        if cat == "cpu_op":
            s = _ns(e["ts"], base)
            ops.setdefault((e["pid"], e["tid"]), []).append((s, s + _ns(e.get("dur", 0), 0), e["name"]))
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = (e["pid"], e["tid"], _ns(e["ts"], base), e["name"])
        elif cat == "kernel":
            a = e.get("args", {})
            kernels.append((a.get("device", e["pid"]), a.get("stream", e["tid"]), _ns(e["ts"], base), e["name"],
                            a.get("correlation")))
    starts = {}
    for key, lst in ops.items():
        lst.sort(key=lambda o: (o[0], -o[1]))
        starts[key] = [o[0] for o in lst]
    out = {}
    for dev, stream, start, name, corr in kernels:
        link = launches.get(corr)
        if link is None:
            out[(dev, stream, start, name)] = (None, None, None)
            continue
        pid, tid, t, api = link
        lst = ops.get((pid, tid), [])
        i = bisect.bisect_right(starts.get((pid, tid), []), t)
        enclosing = [o for o in lst[:i] if o[0] <= t < o[1]]
        leaf = enclosing[-1][2] if enclosing else None
        top = enclosing[0][2] if enclosing else None
        out[(dev, stream, start, name)] = (api, leaf, top)
    return out
