#!/usr/bin/env python3
"""Independent reference for ``kernelscope analyze steps``: reads a Kineto JSON file with the standard library
(json, gzip, decimal; times from tests/reference_summary.py's exact decimal conversion) and splits every
``ProfilerStep#N`` the way docs/metrics.md "Steps" defines it, by a different method than the analysis:

- spans: TensorBoard's rule, walked over the raw events (runtime calls linked to GPU activities by
  ``args.correlation``);
- categories: a sweep line over every interval boundary inside a span, with one counter of open intervals per
  category; each elementary piece goes to the first category (kernel, memcpy, memset, runtime, dataloader,
  python_gc, cpu_op) with an open interval, else ``other``. No interval union is computed.

Usage: python tests/reference_steps.py TRACE.json[.gz]   -> prints one JSON row per step.
"""

from __future__ import annotations

import json
import re
import sys

from reference_summary import _int_or_none, _ns, load

CATEGORIES = ("kernel", "memcpy", "memset", "runtime", "dataloader", "python_gc", "cpu_op", "other")
#: Python's garbage collections: kernelscope profile's range (a user_annotation) and torch's event (python_function).
_GC = {("user_annotation", "python gc: full collection"), ("python_function", "Python GC")}
_GPU = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
        "gpu_memset": "memset", "Memset": "memset"}
_CALLS = {"cuda_runtime", "cuda_driver", "Runtime"}
_HOST = {"cpu_op", "Operator", "user_annotation"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _dataloader(name: str) -> bool:
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or \
        name.startswith("enumerate(DataPipe)#")


def reference_steps(path: str) -> list[dict]:
    doc = load(path)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    steps, gpu, calls, host, gcs = [], [], [], [], []
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X" or "ts" not in ev:
            continue
        cat, name = ev.get("cat"), str(ev.get("name", ""))
        start = base + _ns(ev["ts"])
        iv = (start, start + _ns(ev.get("dur", 0)))
        corr = _int_or_none((ev.get("args") or {}).get("correlation"))
        if (cat, name) in _GC:
            gcs.append(iv)
        if cat in _GPU:
            gpu.append((_GPU[cat], *iv, corr))
        elif cat in _CALLS:
            calls.append((*iv, corr))
        elif cat in _HOST and _STEP.match(name):
            steps.append((*iv, int(_STEP.match(name).group(1))))
        elif cat in _HOST and not name.startswith("kernelscope::") and (cat, name) not in _GC:
            host.append((name, *iv, cat))
    steps.sort()
    # host events: a user annotation enclosing a whole step is not an operator
    host = [h for h in host if h[3] != "user_annotation" or
            not any(h[1] <= s and h[2] >= e for s, e, _ in steps)]

    # TensorBoard's spans
    by_corr: dict = {}
    for _kind, s, e, corr in gpu:
        by_corr.setdefault(corr, []).append((s, e))
    work = []
    matched = set()
    for hs, he, _ in steps:
        ivs = []
        for s, e, corr in calls:
            if s >= hs and e <= he and corr is not None:
                for g in by_corr.get(corr, []):
                    ivs.append(g)
                    matched.add((corr, g))
        work.append(ivs)
    spans = [(hs, he) for hs, he, _ in steps]
    if any(work):
        prev = steps[0][0]
        if work[0]:
            d0 = min(s for s, _ in work[0])
            ends = [e for kind, s, e, corr in gpu if e < d0 and (corr, (s, e)) not in matched]
            prev = max([prev, *ends])
        spans = []
        for (hs, he, _), ivs in zip(steps, work):
            start = max(prev, hs)
            end = max(he, max((e for _, e in ivs), default=he), start)
            spans.append((start, end))
            prev = end

    # the sweep: (time, +1/-1, category index)
    intervals = [(CATEGORIES.index(kind), s, e) for kind, s, e, _ in gpu]
    intervals += [(3, s, e) for s, e, _ in calls]
    intervals += [(5, s, e) for s, e in gcs]
    intervals += [(4 if _dataloader(n) else 6, s, e) for n, s, e, _ in host]
    rows = []
    for (s0, e0), (_, _, n) in zip(spans, steps):
        points = {s0, e0}
        events = []
        for c, s, e in intervals:
            s, e = max(s, s0), min(e, e0)
            if e > s:
                events.append((s, c, 1))
                events.append((e, c, -1))
                points.update((s, e))
        events.sort()
        out = dict.fromkeys(CATEGORIES, 0)
        open_ = [0] * 7
        k = 0
        ordered = sorted(points)
        for a, b in zip(ordered, ordered[1:]):
            while k < len(events) and events[k][0] <= a:
                open_[events[k][1]] += events[k][2]
                k += 1
            first = next((CATEGORIES[c] for c in range(7) if open_[c] > 0), "other")
            out[first] += b - a
        rows.append({"step": n, "start_ns": s0, "dur_ns": e0 - s0, **{f"{c}_ns": v for c, v in out.items()}})
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: reference_steps.py TRACE.json[.gz]")
    print(json.dumps(reference_steps(sys.argv[1]), indent=1))
