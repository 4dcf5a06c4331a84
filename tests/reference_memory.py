"""An independent reference for the memory analysis: plain Python (standard library only) over the raw JSON of a
Kineto trace, sharing no code or SQL with kernelscope. Definitions (docs/metrics.md "Memory"):

- a memory event is a ``[memory]`` instant; its device is ``cuda:<Device Id>`` (Device Type 1) or ``cpu`` (0);
- peak allocated / reserved = the max ``Total Allocated`` / ``Total Reserved`` over the device's events;
- an event's operator is the innermost cpu_op (not a ``ProfilerStep#N``) on its (pid, tid) holding it,
  ``start <= ts < start + dur``: found here by a stack sweep over the thread's ops and events in time order
  (the store uses an ASOF join and a walk up parent links);
- per (device, operator): allocations (count, bytes of positive ``Bytes``) and frees (count, bytes of negative);
- live at end: allocations whose next event at the same (device, address) is not a free.

Times are read as Decimal microseconds and turned into integer ns, as the store keeps them.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path


def _ns(us) -> int:
    return int((Decimal(str(us)) * 1000).to_integral_value())


def load_events(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f, parse_float=Decimal)["traceEvents"]


def device_label(args: dict) -> str:
    return f"cuda:{args['Device Id']}" if args["Device Type"] == 1 else "cpu" if args["Device Type"] == 0 else "other"


def memory_reference(path: Path) -> dict:
    """``peaks`` {device: (peak allocated, peak reserved)}, ``ops`` {(device, operator or None): [allocs,
    alloc_bytes, frees, freed_bytes]}, ``live`` {device: (blocks, bytes)}, ``events`` per device,
    ``first_before`` {device: Total Allocated - Bytes of its first event in time}."""
    evs = load_events(path)
    mem = [(i, e) for i, e in enumerate(evs) if e.get("ph") in ("i", "I") and e.get("name") == "[memory]"]
    ops_by_thread = defaultdict(list)
    for i, e in enumerate(evs):
        if (e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator")
                and not str(e.get("name", "")).startswith("ProfilerStep#")):
            s = _ns(e["ts"])
            ops_by_thread[(e["pid"], e["tid"])].append((s, s + _ns(e.get("dur", 0)), i, e["name"]))
    mem_by_thread = defaultdict(list)
    for i, e in mem:
        mem_by_thread[(e["pid"], e["tid"])].append((_ns(e["ts"]), i))
    op_of: dict[int, str | None] = {}
    for thread, items in mem_by_thread.items():
        ops = sorted(ops_by_thread.get(thread, []), key=lambda o: (o[0], -o[1], o[2]))
        stack: list[tuple] = []
        k = 0
        for t, i in sorted(items):
            while k < len(ops) and ops[k][0] <= t:  # every op starting at or before t, in nesting order
                while stack and stack[-1][1] <= ops[k][0]:
                    stack.pop()
                stack.append(ops[k])
                k += 1
            while stack and stack[-1][1] <= t:
                stack.pop()
            op_of[i] = stack[-1][3] if stack else None
    peaks: dict[str, list] = {}
    ops: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, 0])
    by_addr = defaultdict(list)
    first: dict[str, tuple] = {}
    count: dict[str, int] = defaultdict(int)
    for i, e in mem:
        a = e["args"]
        dev, b = device_label(a), int(a["Bytes"])
        count[dev] += 1
        p = peaks.setdefault(dev, [a["Total Allocated"], a["Total Reserved"]])
        p[0], p[1] = max(p[0], a["Total Allocated"]), max(p[1], a["Total Reserved"])
        key = (_ns(e["ts"]), i)
        if dev not in first or key < first[dev][0]:
            first[dev] = (key, a["Total Allocated"] - b)
        row = ops[(dev, op_of[i])]
        if b > 0:
            row[0] += 1
            row[1] += b
        elif b < 0:
            row[2] += 1
            row[3] -= b
        if b:
            by_addr[(dev, a["Addr"])].append((key, b))
    live: dict[str, list] = defaultdict(lambda: [0, 0])
    for (dev, _addr), seq in by_addr.items():
        seq.sort()
        for j, (_key, b) in enumerate(seq):
            if b > 0 and (j + 1 == len(seq) or seq[j + 1][1] > 0):
                live[dev][0] += 1
                live[dev][1] += b
    return {"peaks": {d: tuple(v) for d, v in peaks.items()}, "ops": {k: list(v) for k, v in ops.items()},
            "live": {d: tuple(v) for d, v in live.items()}, "events": dict(count),
            "first_before": {d: v[1] for d, v in first.items()}}
