"""Python's garbage collections during a profiled script: kernelscope profile's ranges around the full ones and the
runner's count of them in each pass (collectors/runner.py)."""

from __future__ import annotations

import gc
import time

from kernelscope.units import NS_PER_MS

GC_RANGE = "python gc: full collection"


class FullCollections:
    """Python's full garbage collections (generation 2) while installed in ``gc.callbacks``: how many and how long
    (``doc()``), and with ``record_function`` (torch.profiler's) a range named ``GC_RANGE`` around each. A full
    collection stops the Python thread that triggered it: BERT trained on a CPU under the profiler had one of
    130 ms (over 350k objects) in a recorded step, 50% of that step, shown as time outside any operator; it now has
    a name in the trace, and both passes count theirs (the profiler's own objects bring them on). The cheap
    young-generation collections are left out."""

    def __init__(self, record_function=None):
        self.count, self.ns = 0, 0
        self._rf = record_function
        self._open: list = []

    def __call__(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            rf = None
            if self._rf is not None:
                rf = self._rf(GC_RANGE)
                rf.__enter__()
            self._open.append((time.perf_counter_ns(), rf))
        elif self._open:
            t0, rf = self._open.pop()
            if rf is not None:
                rf.__exit__(None, None, None)
            self.count += 1
            self.ns += time.perf_counter_ns() - t0

    def install(self) -> FullCollections:
        gc.callbacks.append(self)
        return self

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)

    def doc(self) -> dict:
        return {"full_collections": self.count, "ns": self.ns}


def gc_line(profiled: dict | None, unprofiled: dict | None) -> str | None:
    """The runner's line on Python's full garbage collections, when the profiled run had any: how many and how
    long in each pass (the un-profiled one when it ran)."""
    if not profiled or not profiled.get("full_collections"):
        return None

    def said(d: dict) -> str:
        n = int(d.get("full_collections") or 0)
        ms = int(d.get("ns") or 0) / NS_PER_MS
        return f"{n} full collection{'s' if n != 1 else ''} ({ms:,.1f} ms)" if n else "none"
    text = f"python gc: {said(profiled)} in the profiled run"
    if unprofiled is not None:
        text += f", {said(unprofiled)} in the un-profiled run"
    return text + ("; those in recorded steps are 'python gc: full collection' ranges in the trace, and the GPU's "
                   "wait on one counts as bound's python_gc")
