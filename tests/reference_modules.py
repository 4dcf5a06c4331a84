#!/usr/bin/env python3
"""Independent reference for ``kernelscope analyze modules`` and ``analyze stacks``: reads a Kineto JSON file with
the standard library (times from tests/reference_summary.py's exact decimal conversion) and attributes every
kernel to Python frames and nn.Module ranges by a different method than storage/pycontext.py:

- the frame tree is the profiler's own ``Python id`` / ``Python parent id`` args (the store drops them and
  nests by time containment). The innermost frame open at t on a thread: the latest-starting frame with
  start <= t, then up its parent ids until one still open (end > t);
- a kernel -> its launch call by ``args.correlation``; a launch inside an autograd node (the innermost operator
  with a Sequence number and a Fwd thread id > 0 containing it on its thread, found by a scan) -> the start of
  the ``fwdbwd`` flow the profiler drew to a node of that number, i.e. its forward operator's start on its
  thread, is where its frames are looked up (the store finds the forward operator by an ASOF join on the
  Sequence number instead, and never reads the flows);
- modules: the ``nn.Module: X_k`` frames among a frame's ancestors; a module's path is their instance names
  outermost first, '/'-joined.

Usage: python tests/reference_modules.py TRACE.json[.gz]   -> prints the module rows and the top source lines.
"""

from __future__ import annotations

import bisect
import json
import re
import sys
from collections import defaultdict

from reference_summary import _ns, load

MODULE = "nn.Module: "


class Frames:
    """The python_function events of one trace, by thread, with their parent ids."""

    def __init__(self, events, base: int):
        self.ev = {}  # python id -> (name, start, end, parent id)
        by_thread = defaultdict(list)
        for e in events:
            if e.get("cat") != "python_function" or e.get("ph") != "X":
                continue
            a = e.get("args") or {}
            s = _ns(e["ts"]) + base
            self.ev[a["Python id"]] = (e["name"], s, s + _ns(e.get("dur", 0)), a.get("Python parent id"))
            by_thread[(e.get("pid"), e.get("tid"))].append((s, a["Python id"]))
        self.threads = {k: sorted(v) for k, v in by_thread.items()}

    def innermost(self, thread, t: int):
        """The python id of the innermost frame open at t on ``thread`` (None when none)."""
        rows = self.threads.get(thread, [])
        i = bisect.bisect_right(rows, (t, float("inf"))) - 1
        if i < 0:
            return None
        pid = rows[i][1]
        while pid is not None and not (self.ev[pid][1] <= t < self.ev[pid][2]):
            pid = self.ev[pid][3]
        return pid

    def chain(self, pid) -> list:
        """Names from the frame ``pid`` up to the thread's outermost frame."""
        out = []
        while pid is not None:
            out.append(self.ev[pid][0])
            pid = self.ev[pid][3]
        return out

    def module_path(self, pid) -> str | None:
        """The instance path of the innermost nn.Module frame at or above ``pid``."""
        mods = [n[len(MODULE):] for n in self.chain(pid) if n.startswith(MODULE)]
        return "/".join(reversed(mods)) or None


def reference(path: str) -> dict:
    doc = load(path)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    ev = doc["traceEvents"]
    frames = Frames(ev, base)
    launches = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("ph") == "X":
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launches[c] = ((e.get("pid"), e.get("tid")), _ns(e["ts"]) + base)
    flows_s, flows_f = {}, {}
    for e in ev:
        if e.get("cat") == "fwdbwd":
            (flows_s if e.get("ph") == "s" else flows_f)[e["id"]] = ((e.get("pid"), e.get("tid")), _ns(e["ts"]) + base)
    # autograd nodes: operators with a Sequence number and a Fwd thread id > 0 (evaluate_function: XBackward0 and
    # XBackward0); a node's forward operator is the start of the fwdbwd flow that ends on the node of its number
    nodes = defaultdict(list)  # thread -> (start, end, sequence number)
    seq_at = {}  # (thread, start) -> sequence number of a node starting there
    for e in ev:
        a = e.get("args") or {}
        if e.get("cat") == "cpu_op" and e.get("ph") == "X" and a.get("Sequence number") is not None \
                and (a.get("Fwd thread id") or 0) > 0:
            thread, s = (e.get("pid"), e.get("tid")), _ns(e["ts"]) + base
            nodes[thread].append((s, s + _ns(e.get("dur", 0)), a["Sequence number"]))
            seq_at[(thread, s)] = a["Sequence number"]
    forward_of = {seq_at[f]: flows_s[fid] for fid, f in flows_f.items() if fid in flows_s and f in seq_at}

    def lookup(thread, t):
        inside = [(s, q) for s, e, q in nodes.get(thread, ()) if s <= t < e and q in forward_of]
        return (forward_of[max(inside)[1]], True) if inside else ((thread, t), False)

    mods = defaultdict(lambda: {"gpu_fwd_ns": 0, "gpu_bwd_ns": 0, "kernels": 0})
    lines = defaultdict(lambda: {"gpu_ns": 0, "gpu_self_ns": 0, "gpu_line_self_ns": 0, "gpu_bwd_ns": 0, "kernels": 0,
                                 "launches": set()})
    total = in_module = with_stack = 0
    for e in ev:
        if e.get("cat") != "kernel" or e.get("ph") != "X":
            continue
        dur = _ns(e.get("dur", 0))
        total += dur
        c = (e.get("args") or {}).get("correlation")
        if c not in launches:
            continue
        (thread, t), backward = lookup(*launches[c])
        pid = frames.innermost(thread, t)
        if pid is None:
            continue
        with_stack += dur
        names = frames.chain(pid)
        for n in set(names):
            row = lines[n]
            row["gpu_ns"] += dur
            row["gpu_bwd_ns"] += dur if backward else 0
            row["kernels"] += 1
            row["launches"].add(c)
        lines[names[0]]["gpu_self_ns"] += dur
        source = next((n for n in names if re.match(r"^.*\(\d+\): ", n)), None)  # the innermost source line
        if source is not None:
            lines[source]["gpu_line_self_ns"] += dur
        p = frames.module_path(pid)
        if p is None:
            continue
        in_module += dur
        parts = p.split("/")
        for i in range(1, len(parts) + 1):
            m = mods["/".join(parts[:i])]
            m["gpu_bwd_ns" if backward else "gpu_fwd_ns"] += dur
            m["kernels"] += 1
    calls = defaultdict(lambda: [0, 0])
    for pid, (name, s, end, _parent) in frames.ev.items():
        if name.startswith(MODULE):
            c = calls[frames.module_path(pid)]
            c[0] += 1
            c[1] += end - s
    for p, (n, cpu) in calls.items():
        mods[p]["calls"], mods[p]["cpu_ns"] = n, cpu
    for name, s, end, parent in frames.ev.values():
        row = lines[name]
        row["calls"] = row.get("calls", 0) + 1
        if name not in frames.chain(parent):  # not inside a call of the same frame
            row["cpu_ns"] = row.get("cpu_ns", 0) + end - s
    for row in lines.values():
        row["launches"] = len(row["launches"])
        row.setdefault("cpu_ns", 0)
    return {"kernel_time_ns": total, "module_kernel_ns": in_module, "stack_kernel_ns": with_stack,
            "modules": {p: dict(v) for p, v in mods.items()}, "lines": {n: dict(v) for n, v in lines.items()}}


if __name__ == "__main__":
    out = reference(sys.argv[1])
    top = sorted(out["lines"].items(), key=lambda kv: -kv[1]["gpu_ns"])[:20]
    print(json.dumps({**out, "lines": dict(top)}, indent=1))
