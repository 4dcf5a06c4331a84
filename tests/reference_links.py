"""Independent reference for kernel -> launch call -> leaf operator -> top-level operator links.

Standard library only (json, gzip, bisect, heapq); shares no code with kernelscope. Definitions (docs/metrics.md):
a kernel's launch call is the cuda_runtime/cuda_driver event with the same correlation id; its leaf
operator is the innermost cpu_op on the launch call's (pid, tid) open at the call's start (open at t when
start <= t < end, in exact integer ns); the top-level operator is the outermost such op.
Returns, per kernel (keyed by (device, stream, start_ns, name)), (launch name, leaf name, top name).
"""

from __future__ import annotations

import bisect
import gzip
import heapq
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
    for lst in ops.values():
        lst.sort(key=lambda o: (o[0], -o[1]))
    queries: dict[tuple, list[tuple[int, int]]] = {}  # (pid, tid) -> [(launch start, kernel index)]
    out = {}
    for k, (dev, stream, start, name, corr) in enumerate(kernels):
        link = launches.get(corr)
        if link is None:
            out[(dev, stream, start, name)] = (None, None, None)
            continue
        pid, tid, t, api = link
        queries.setdefault((pid, tid), []).append((t, k))
    for key, qs in queries.items():
        for k, enclosing in _open_at(ops.get(key, []), qs):
            dev, stream, start, name, corr = kernels[k]
            leaf = enclosing[-1][2] if enclosing else None
            top = enclosing[0][2] if enclosing else None
            out[(dev, stream, start, name)] = (launches[corr][3], leaf, top)
    return out


def _open_at(lst: list[tuple[int, int, str]], queries: list[tuple[int, int]]):
    """For each (t, k) of ``queries``: (k, the ops of ``lst`` open at t, i.e. start <= t < end, in ``lst``'s
    order). ``lst`` is sorted by (start, -end). One sweep over time: an op joins the open set at its start and
    leaves at its end (a heap by end), so each query costs the open set's size, not the thread's op count."""
    open_pos: list[int] = []  # positions in lst of the open ops, ascending (so in lst's order)
    ends: list[tuple[int, int]] = []  # heap of (end, position)
    j = 0
    for t, k in sorted(queries):
        while j < len(lst) and lst[j][0] <= t:
            open_pos.append(j)  # j only grows: open_pos stays sorted
            heapq.heappush(ends, (lst[j][1], j))
            j += 1
        while ends and ends[0][0] <= t:
            _, pos = heapq.heappop(ends)
            del open_pos[bisect.bisect_left(open_pos, pos)]
        yield k, [lst[p] for p in open_pos]
