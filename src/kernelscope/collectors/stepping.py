"""Step boundaries and timed regions of an unmodified script, seen from inside its process (the runner's child).

Step rule (``Stepper``), decided while the script runs, first match wins:

- ``range``: a ``kernelscope.range("step")`` region is entered before any other boundary was taken; from then
  on the end of each outermost ``"step"`` region is a boundary.
- ``optimizer``: an ``optimizer.step()`` (global ``register_optimizer_step_post_hook``) happens before a
  second outermost module forward starts; each optimizer step is a boundary.
- ``forward``: otherwise the end of each outermost ``nn.Module`` forward (global pre-hook + hook with a depth
  counter: calls nested in another module's forward do not count). The boundary is taken when the next
  outermost forward starts (or the script ends), so that an optimizer step in between can still choose the
  ``optimizer`` rule; a step thus spans from one outermost forward's start to the next one's.
- ``none``: the script took no boundary (no module forward, optimizer step or "step" region).

``StepTimes``: the time between consecutive step boundaries, less the boundary's own work (the profiler's
``step()``, which drains the GPU queue when a recorded window opens and writes the trace when one closes), with
whether the profiler recorded that step; the un-profiled pass takes the same boundaries with no work at them, so
step ``i`` of one pass is step ``i`` of the other (the runner's ``step`` overhead basis, docs/metrics.md).

``RegionTimer``: the durations of outermost ``kernelscope.range`` regions (the ``"step"`` ones when the script
has any, else all): ``wall`` rows (``perf_counter_ns`` around the region, after a CUDA synchronize at both
ends) and on CUDA ``cuda_event`` rows (events recorded at entry and exit), in the run.json ``timings`` format.
"""

from __future__ import annotations

import sys
import time
import warnings

STEP_REGION = "step"


class Stepper:
    """Calls ``on_step()`` at each step boundary of the running script (rules in the module docstring)."""

    def __init__(self, on_step):
        self.on_step = on_step
        self.rule: str | None = None
        self.steps = 0
        self.seen = {"optimizer": 0, "forward": 0, "range": 0}
        self._depth = 0
        self._range_depth = 0
        self._pending = False
        self._handles: list = []
        self.error: str | None = None

    def _boundary(self) -> None:
        self.steps += 1
        if self.error is not None:
            return
        try:
            self.on_step()
        except Exception as exc:  # a profiler failure must not break the script: stop stepping, say why
            self.error = f"{type(exc).__name__}: {exc}"
            print(f"kernelscope: the profiler failed at step {self.steps}: {self.error}", file=sys.stderr)

    # -- hooks -----------------------------------------------------------------------------------------
    def forward_pre(self, *_):
        if self._depth == 0:
            if self._pending and self.rule in (None, "forward"):
                self.rule = "forward"
                self._pending = False
                self._boundary()
        self._depth += 1

    def forward_post(self, *_):
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            self.seen["forward"] += 1
            if self.rule in (None, "forward"):
                self._pending = True

    def optimizer_step(self, *_):
        self.seen["optimizer"] += 1
        if self.rule is None:
            self.rule = "optimizer"
            self._pending = False
        if self.rule == "optimizer":
            self._boundary()

    def range_enter(self, name: str) -> None:
        if name != STEP_REGION:
            return
        if self._range_depth == 0 and self.rule is None:
            self.rule = "range"
            self._pending = False
        self._range_depth += 1

    def range_exit(self, name: str) -> None:
        if name != STEP_REGION:
            return
        self._range_depth = max(0, self._range_depth - 1)
        if self._range_depth == 0:
            self.seen["range"] += 1
            if self.rule == "range":
                self._boundary()

    # -- lifecycle -------------------------------------------------------------------------------------
    def install(self) -> Stepper:
        import torch.optim.optimizer as optim_mod
        from torch.nn.modules import module as nn_module

        self._handles = [nn_module.register_module_forward_pre_hook(self.forward_pre),
                         nn_module.register_module_forward_hook(self.forward_post)]
        # torch.compile warns at every call of a compiled module while a global module hook (these) is installed:
        # they fire for the OptimizedModule and again for its module, one call nested in the other, which the
        # outermost-forward rule counts once. The runner's child is the only process that installs a Stepper.
        warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks",
                                category=UserWarning)
        hook = getattr(optim_mod, "register_optimizer_step_post_hook", None)
        if hook is not None:
            self._handles.append(hook(self.optimizer_step))
        from . import profile as profile_mod

        profile_mod.RANGE_HOOKS.append(self)
        return self

    def finish(self) -> dict:
        """Take a pending forward boundary, remove the hooks; returns run.json's ``step_rule``."""
        if self._pending and self.rule in (None, "forward"):
            self.rule = "forward"
            self._pending = False
            self._boundary()
        self.remove()
        out = {"rule": self.rule or "none", "steps": self.steps, "seen": dict(self.seen)}
        if self.error is not None:
            out["error"] = self.error
        return out

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        from . import profile as profile_mod

        if self in profile_mod.RANGE_HOOKS:
            profile_mod.RANGE_HOOKS.remove(self)


class StepTimes:
    """A ``Stepper``'s ``on_step``: calls ``inner()`` (the profiler's step, or nothing) and keeps, per boundary,
    the clock before and after it and whether ``recording()`` is true after it (module docstring)."""

    def __init__(self, inner=None, recording=None, clock=time.perf_counter_ns):
        self.inner, self.recording, self.clock = inner, recording, clock
        self.marks: list[tuple[int, int, bool]] = []  # (ns before inner, ns after, recording after)

    def __call__(self) -> None:
        before = self.clock()
        if self.inner is not None:
            self.inner()
        recorded = bool(self.recording()) if self.recording is not None else False
        self.marks.append((before, self.clock(), recorded))

    def doc(self, rule: str) -> dict:
        """run.json's ``step_times``: the step rule, and per step (between boundaries ``i`` and ``i + 1``) its ns
        from the end of boundary ``i``'s work to the start of boundary ``i + 1``'s and whether it was recorded."""
        pairs = list(zip(self.marks, self.marks[1:]))
        return {"rule": rule, "ns": [b[0] - a[1] for a, b in pairs], "recorded": [a[2] for a, _b in pairs]}


class RegionTimer:
    """Times outermost ``kernelscope.range`` regions (module docstring)."""

    def __init__(self, recording=None):
        import torch

        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.recording = recording  # () -> bool: whether the profiler records now (profiled pass)
        self._open: list = []
        self.regions: list[dict] = []  # {"name", "wall_ns", "events": (a, b) | None, "recorded"}

    def range_enter(self, name: str) -> None:
        if self._open:
            self._open.append(None)  # nested: not timed
            return
        if self.cuda:
            self.torch.cuda.synchronize()
        ev = None
        if self.cuda:
            ev = (self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True))
            ev[0].record()
        self._open.append((name, time.perf_counter_ns(), ev))

    def range_exit(self, name: str) -> None:
        top = self._open.pop() if self._open else None
        if top is None:
            return
        rname, t0, ev = top
        if ev is not None:
            ev[1].record()
        if self.cuda:
            self.torch.cuda.synchronize()
        rec = self.recording() if self.recording is not None else False
        self.regions.append({"name": rname, "wall_ns": time.perf_counter_ns() - t0, "events": ev, "recorded": rec})

    def install(self) -> RegionTimer:
        from . import profile as profile_mod

        profile_mod.RANGE_HOOKS.append(self)
        return self

    def remove(self) -> None:
        from . import profile as profile_mod

        if self in profile_mod.RANGE_HOOKS:
            profile_mod.RANGE_HOOKS.remove(self)

    def timed(self) -> list[dict]:
        """The regions that are timed iterations: the "step" ones when there are any, else all."""
        steps = [r for r in self.regions if r["name"] == STEP_REGION]
        return steps or list(self.regions)

    def rows(self) -> list[dict]:
        """run.json ``timings`` rows of the timed regions."""
        from ..units import NS_PER_MS

        rows = []
        for i, r in enumerate(self.timed()):
            rows.append({"kind": "wall", "iteration": i, "dur_ns": int(r["wall_ns"]), "energy_mj": None})
            if r["events"] is not None:
                a, b = r["events"]
                rows.append({"kind": "cuda_event", "iteration": i, "dur_ns": round(a.elapsed_time(b) * NS_PER_MS),
                             "energy_mj": None})
        return rows

    def names(self) -> list[str]:
        return sorted({r["name"] for r in self.timed()})
