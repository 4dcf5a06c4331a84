"""``kernelscope.profile``: torch.profiler + NVML telemetry + provenance + un-profiled timing -> run dir.

A run directory holds:

- ``trace.json.gz``: the Kineto trace, gzipped (further schedule cycles: ``trace_<k>.json.gz``);
- ``telemetry.parquet``: NVML samples (schema in ``collectors/nvml.py``), when there are any;
- ``run.json``: ``{"name", "labels", "provenance", "run_id", "timings": [{"kind", "iteration",
  "dur_ns", "energy_mj"}], "timing": {...}, "clock": {...}, "sampler": {...}, "traces": [...]}``.

``run.json["clock"]``: ``markers_epoch_ns`` (every marker emitted) and ``traced_markers_epoch_ns`` (those
emitted while the profiler was recording, i.e. the ones in the trace). ``run.json["sampler"]``: the
sampler's ``info()`` plus ``traced_period``: ``nvml.interval_stats`` over the window from the first to the
last traced marker (median/p95/max interval in ms; an interval straddling a window end counts).

Clock marker: every trace contains ``record_function`` ranges named exactly
``kernelscope::clock_sync <epoch_ns>``, where ``epoch_ns`` is ``time.time_ns()`` read immediately before
the range is entered. The store derives ``clock_offset_ns = epoch_ns - marker start (trace clock)``.
Markers are placed after the profiler starts, around every ``step()`` and before it stops, so a
scheduled trace (which keeps only its active steps) still holds some.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import gzip
import json
import os
import shutil
import sys
import time
import uuid
import warnings
from pathlib import Path

from kernelscope.errors import KernelscopeError

CLOCK_MARKER = "kernelscope::clock_sync"
# Objects with range_enter(name)/range_exit(name), called by every ``range()`` (the runner's child puts its
# step detector and region timer here; collectors/stepping.py).
RANGE_HOOKS: list = []
# torch.profiler options ``profile(**profiler_options)`` passes on, and what each records (run.json, trust).
PROFILER_OPTIONS = {"record_shapes": "shapes", "with_stack": "stacks", "profile_memory": "memory",
                    "with_modules": "modules", "with_flops": "flops"}


def _torch():
    import torch

    return torch


def _marker() -> int:
    """Emit one clock-sync range into the trace; returns the epoch ns it carries."""
    torch = _torch()
    epoch_ns = time.time_ns()
    with torch.profiler.record_function(f"{CLOCK_MARKER} {epoch_ns}"):
        pass
    return epoch_ns


@contextlib.contextmanager
def range(name: str):
    """Mark a phase: a ``record_function`` (user_annotation in the trace) and an NVTX range on CUDA."""
    torch = _torch()
    nvtx = torch.cuda.is_available()
    for h in list(RANGE_HOOKS):
        h.range_enter(name)
    if nvtx:
        torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        if nvtx:
            torch.cuda.nvtx.range_pop()
        for h in reversed(list(RANGE_HOOKS)):
            h.range_exit(name)


def _experimental_config(torch, *, cuda: bool, python_gc: bool):
    """torch.profiler's experimental switches this run wants, those this torch supports (None when none): CUDA sync
    events on a GPU, and with the Python tracer (with_stack) a ``Python GC`` event for each of Python's garbage
    collections, young ones included (storage/idle.py counts them as the ``python_gc`` idle cause)."""
    try:
        from torch._C._profiler import _ExperimentalConfig
    except ImportError:
        return None
    wanted = {"enable_cuda_sync_events": cuda, "record_python_gc_info": python_gc}
    wanted = {k: True for k, on in wanted.items() if on}
    while wanted:
        try:
            return _ExperimentalConfig(**wanted)
        except TypeError as exc:  # an older torch: drop the switch it names (or the last one) and try again
            named = [k for k in wanted if k in str(exc)]
            wanted.pop(named[0] if named else list(wanted)[-1])
    return None


def ingest_run_dir(run_dir, *, name=None, labels=None, db=None):
    """Ingest a written run dir into the store at ``db`` (the collector's one call into storage)."""
    import importlib

    from kernelscope.storage.ingest import ingest_run

    # open_store lives in storage.store; imported by name so collectors do not depend on it statically.
    open_store = importlib.import_module("kernelscope.storage.store").open_store
    with open_store(db) as store:
        result = ingest_run(store, Path(run_dir), name=name, labels=labels)
    if getattr(result, "status", None) == "failed":
        raise KernelscopeError(f"could not ingest run {run_dir}: {result.message}; the run dir is kept, "
                               "ingest it later with `kernelscope ingest`.")
    return result


@functools.cache
def _filter_acc_warning() -> None:
    """Filter torch's warning that events do not accumulate across cycles (about prof.events(), which nothing
    here reads), once per process: each change of the warning filters makes Python show again the warnings it
    had shown once (a sweep in one process printed 'no CUDA device' twice)."""
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle",
                            category=UserWarning)


def _every_step(torch):
    """The schedule used when none is given: record from the start, every step, in one cycle that ends at
    ``stop()``. torch records ``ProfilerStep#N`` ranges only under a schedule, so without one ``step()`` (and
    `kernelscope profile`'s step boundaries) left no step in the trace for the steps analysis to read."""
    import warnings

    with warnings.catch_warnings():  # "won't be using warmup": recording starts at once, as it does unscheduled
        warnings.simplefilter("ignore", UserWarning)
        return torch.profiler.schedule(wait=0, warmup=0, active=2**62, repeat=1)


def _schedule_text(schedule):
    """``{"wait", "warmup", "active", "repeat", "skip_first"}`` of a ``torch.profiler.schedule``, else None."""
    if schedule is None:
        return None
    cells = dict(zip(schedule.__code__.co_freevars, (c.cell_contents for c in schedule.__closure__ or ())))
    keys = ("wait", "warmup", "active", "repeat", "skip_first")
    return {k: cells[k] for k in keys if k in cells} or str(schedule)


def _default_run_dir(name) -> Path:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S_%fZ")
    return Path("runs") / f"{name or 'run'}-{stamp}"


class profile:
    """Profile a workload: ``with kernelscope.profile(name="x", labels={"batch": 8}): model(x)``.

    Also ``p = profile(...); p.start(); ...; p.step(); ...; p.stop()``.

    - ``schedule``: a ``torch.profiler.schedule``; call ``step()`` once per iteration.
    - ``telemetry``: run the NVML sampler while profiling (a null sampler without NVML/GPU): True
      (``nvml.DEFAULT_MODE``), ``"process"`` or ``"thread"``, or False. It starts before the profiler
      and stops after it.
    - ``unprofiled``: a callable (or ``{"fn": callable, **timing.measure options}``) timed un-profiled
      in ``start()`` before the profiler starts (``collectors/timing.py`` defines the numbers).
    - ``ingest``: on stop, put the run into the store at ``db``; ``self.result``/``self.trace_id``.
    - If the body raises, the trace and run.json are still written but nothing is ingested.
    - ``telemetry_period_ms``: the sampler's period (default 10 ms).
    - ``steps``: record only the first N ``step()`` iterations (``schedule(wait=0, warmup=0, active=N)``
      when no ``schedule`` is given; with one, recording stops after step N).
    - ``profiler_options``: ``with_stack``, ``profile_memory``, ``with_flops``, ``with_modules``,
      ``record_shapes`` (default True) -- passed to ``torch.profiler.profile``; run.json
      ``profiler_options`` records each (False when off) and the schedule. ``with_modules=True`` turns
      ``with_stack`` on too (``with_stack_for_modules`` in run.json): torch records an eager model's
      ``nn.Module`` ranges only through the Python tracer; with_modules alone gives none (torch 2.11, 2.13).
    - ``extra``: more run.json fields (the runner's ``step_rule``, ...).
    """

    def __init__(self, name=None, labels=None, db=None, schedule=None, run_dir=None, telemetry=True,
                 ingest=True, unprofiled=None, telemetry_period_ms=None, steps=None, extra=None,
                 **profiler_options):
        self.name = name
        self.labels = dict(labels or {})
        self.db = db
        self.schedule = schedule
        self.run_dir = Path(run_dir) if run_dir is not None else _default_run_dir(name)
        self.telemetry = telemetry
        self.ingest = ingest
        self.unprofiled = unprofiled
        self.profiler_options = profiler_options
        self.telemetry_period_ms = telemetry_period_ms
        self.steps = steps
        self._steps_done = 0
        self.extra = dict(extra or {})
        self.script_profiler = None  # set by yield_to(): the script started its own torch.profiler
        self._sampler_cost = {"in_process_cpu_ns": 0, "child_cpu_ns": 0}
        self.run_id = uuid.uuid4().hex
        self.result = None
        self.trace_id = None
        self.timings: list[dict] = []
        self.timing_details: dict = {}
        self.markers: list[int] = []
        self.traced_markers: list[int] = []
        self.trace_files: list[str] = []
        self._prof = None
        self._sampler = None
        self._cuda = False
        self._started = False
        self._halted = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> profile:
        from . import nvml, provenance, timing

        torch = _torch()
        if self.steps is not None:
            if int(self.steps) < 1:
                raise ValueError("profile(steps=N) needs N >= 1")
            if self.schedule is None:
                self.schedule = torch.profiler.schedule(wait=0, warmup=0, active=int(self.steps), repeat=1)
            self.extra.setdefault("profiler_options", {})["steps"] = int(self.steps)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._cuda = torch.cuda.is_available()
        provenance.warn_launch_blocking()
        if not self._cuda:
            warnings.warn("kernelscope: no CUDA device: profiling CPU ops only, no GPU telemetry",
                          stacklevel=2)
        self.provenance = provenance.collect()
        if self.unprofiled is not None:
            spec = dict(self.unprofiled) if isinstance(self.unprofiled, dict) else {"fn": self.unprofiled}
            fn = spec.pop("fn")
            energy_dev = None
            if self._cuda:
                devs, _ = nvml.open_devices([torch.cuda.current_device()])
                energy_dev = devs[0] if devs else None
            self.timings, self.timing_details = timing.measure(fn, energy_device=energy_dev, **spec)
        if self.telemetry:
            mode = self.telemetry if isinstance(self.telemetry, str) else None
            period = {} if self.telemetry_period_ms is None else {"period_ms": float(self.telemetry_period_ms)}
            with self._sampler_cpu():
                self._sampler = nvml.make_sampler(quiet=not self._cuda, mode=mode, **period)
                self._sampler.start()
        self._prof = self._make_profiler(torch)
        if self._cuda:
            torch.cuda.synchronize()
        self._prof.start()
        self._started = True
        self._mark()
        return self

    @contextlib.contextmanager
    def _sampler_cpu(self):
        """Add this process's CPU time inside the block, and that of children reaped in it (the sampler
        process, at stop), to the sampler's cost."""
        import resource

        from ..units import NS_PER_S

        c0, r0 = time.process_time_ns(), resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            yield
        finally:
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            self._sampler_cost["in_process_cpu_ns"] += time.process_time_ns() - c0
            self._sampler_cost["child_cpu_ns"] += round((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
                                                        * NS_PER_S)

    def recording(self) -> bool:
        """Whether the profiler records now (False before start, after stop and outside active steps)."""
        from torch.profiler import ProfilerAction

        if self._prof is None or not self._started or self._halted:
            return False
        return getattr(self._prof, "current_action", ProfilerAction.RECORD) in (
            ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

    def halt(self) -> None:
        """Stop recording now (the trace keeps what was recorded); later ``step()`` calls do nothing."""
        if not self._started or self._halted:
            return
        self._halted = True
        self._mark()
        self._prof.stop()

    def yield_to(self, what: str) -> None:
        """The script starts a profiler of its own (one per process): stop ours now, keeping what it has
        recorded (run.json ``script_profiler``)."""
        if self.script_profiler is None and self._started:
            self.script_profiler = {"detected": what, "epoch_ns": time.time_ns(),
                                    "note": "the script started its own torch.profiler: kernelscope's profiler "
                                            "stopped there (one profiler per process); its trace ends at that point"}
        self.halt()

    def _mark(self) -> None:
        """Emit a clock marker; remember it as traced when the profiler is recording now."""
        from torch.profiler import ProfilerAction

        epoch_ns = _marker()
        self.markers.append(epoch_ns)
        if getattr(self._prof, "current_action", ProfilerAction.RECORD) in (
                ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self.traced_markers.append(epoch_ns)

    def _make_profiler(self, torch):
        from torch.profiler import ProfilerActivity

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._cuda else [])
        opts = {"record_shapes": True}
        opts.update(self.profiler_options)
        modules_need_stack = bool(opts.get("with_modules")) and not opts.get("with_stack")
        if modules_need_stack:  # an eager model's nn.Module ranges come from the Python tracer, which with_stack
            opts["with_stack"] = True  # turns on; with_modules alone records them for TorchScript only
        self._opts_used = {k: bool(opts.get(k, False)) for k in PROFILER_OPTIONS}
        if modules_need_stack:
            self._opts_used["with_stack_for_modules"] = True
        import inspect

        params = inspect.signature(torch.profiler.profile.__init__).parameters
        schedule = self.schedule if self.schedule is not None else _every_step(torch)
        # acc_events stays off (torch's default). Each cycle's trace is exported by on_trace_ready, the same with
        # it on; on, torch parses every event into Python objects at each cycle's end, which made stop 5.7x
        # slower (2.33 s vs 0.41 s for 4 steps of a 12-layer encoder on the CPU) and, with with_stack (--stack,
        # --modules) under a schedule, failed in torch 2.13 on that encoder and on transformers' T5
        # (UnicodeDecodeError in kineto_event.name(): the run wrote no trace). Its one-time warning that events
        # do not accumulate across cycles is about prof.events(), which nothing here reads.
        if "acc_events" in params:
            _filter_acc_warning()
        if "experimental_config" not in opts:
            cfg = _experimental_config(torch, cuda=self._cuda, python_gc=bool(opts.get("with_stack")))
            if cfg is not None:
                opts["experimental_config"] = cfg
        kwargs = {"activities": acts, "on_trace_ready": self._on_trace_ready}
        return torch.profiler.profile(**kwargs, schedule=schedule, **opts)

    def _on_trace_ready(self, prof) -> None:
        k = len(self.trace_files)
        out = self.run_dir / ("trace.json.gz" if k == 0 else f"trace_{k}.json.gz")
        tmp = self.run_dir / f".trace_{k}.json"
        prof.export_chrome_trace(str(tmp))
        with open(tmp, "rb") as src, gzip.open(out, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        tmp.unlink()
        self.trace_files.append(out.name)

    def step(self) -> None:
        """Mark the end of one iteration (advances the schedule)."""
        if self._prof is None or not self._started or self._halted:
            return
        self._mark()
        if self._cuda and self._entering_record():
            # Kernels queued during warm-up would otherwise run inside the recorded window with no launch
            # call in it (seen at batch 128: 30% of kernels orphaned). Drain the queue first.
            _torch().cuda.synchronize()
        self._prof.step()
        self._mark()
        self._steps_done += 1
        if self.steps is not None and self._steps_done >= self.steps:
            self.halt()

    def _entering_record(self) -> bool:
        """Whether the next prof.step() moves the schedule from not-recording into recording."""
        from torch.profiler import ProfilerAction

        prof = self._prof
        sched = getattr(prof, "schedule", None)
        if sched is None:
            return False
        rec = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        return prof.current_action not in rec and sched(prof.step_num + 1) in rec

    def stop(self):
        if not self._started:
            return self.result
        self._started = False
        torch = _torch()
        try:
            if self._cuda:
                torch.cuda.synchronize()
            if not self._halted:
                self._mark()
                self._prof.stop()
        finally:
            telemetry = None
            if self._sampler is not None:
                with self._sampler_cpu():
                    telemetry = self._sampler.stop()
        if len(self.trace_files) > 1:
            warnings.warn(f"kernelscope: the schedule produced {len(self.trace_files)} traces in "
                          f"{self.run_dir}; only trace.json.gz is ingested (use repeat=1)", stacklevel=2)
        if telemetry is not None and telemetry.num_rows:
            import pyarrow.parquet as pq

            pq.write_table(telemetry, self.run_dir / "telemetry.parquet")
        self._write_run_json()
        if self.ingest and self.trace_files:
            self.result = ingest_run_dir(self.run_dir, name=self.name, labels=self.labels, db=self.db)
            self.trace_id = getattr(self.result, "trace_id", None) or (
                self.result if isinstance(self.result, str) else None)
        return self.result

    def _write_run_json(self) -> None:
        sampler = self._sampler.info() if self._sampler is not None else {"kind": None,
                                                                           "achieved_period_ms": None}
        if self._sampler is not None and self.traced_markers:
            sampler["traced_period"] = self._sampler.period_stats(
                (self.traced_markers[0], self.traced_markers[-1]))
        options = {**getattr(self, "_opts_used", {}), "schedule": _schedule_text(self.schedule),
                   **(self.extra.get("profiler_options") or {})}
        self.provenance["profiler_options"] = options  # stored with the trace (summary trust: not_recorded)
        torch = sys.modules.get("torch")
        if torch is not None and self.provenance.get("torch"):  # the flags the recorded work ran under
            from .provenance import torch_flags

            now = torch_flags(torch)
            start = {k: self.provenance.get(k) for k, v in now.items() if self.provenance.get(k) != v}
            if start:
                self.provenance.update(now)
                self.provenance["flags_at_start"] = start
        doc = {
            "name": self.name,
            "labels": self.labels,
            "provenance": self.provenance,
            "run_id": self.run_id,
            "timings": self.timings,
            "timing": self.timing_details,
            "clock": {"marker": CLOCK_MARKER, "host_clock": "time.time_ns", "markers_epoch_ns": self.markers,
                      "traced_markers_epoch_ns": self.traced_markers},
            "sampler": sampler,
            "traces": self.trace_files,
            "profiler_options": options,
            "telemetry": {"enabled": bool(self.telemetry), "kind": sampler.get("kind"),
                          "period_ms": sampler.get("period_ms"), "requested_period_ms": self.telemetry_period_ms},
            "overhead": {"sampler": self._sampler_overhead(sampler)},
        }
        if self.script_profiler is not None:
            doc["script_profiler"] = self.script_profiler
        for k, v in self.extra.items():  # dicts merge into the fields above (the runner adds profiler_options.steps)
            doc[k] = {**doc[k], **v} if isinstance(v, dict) and isinstance(doc.get(k), dict) else v
        tmp = self.run_dir / ".run.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        os.replace(tmp, self.run_dir / "run.json")

    def _sampler_overhead(self, sampler: dict) -> dict:
        """The sampler's own CPU cost (docs/metrics.md, Overhead)."""
        from ..units import NS_PER_MS

        kind = sampler.get("kind")
        cost = self._sampler_cost
        out = {"kind": kind, "cpu_ms": (cost["in_process_cpu_ns"] + cost["child_cpu_ns"]) / NS_PER_MS,
               "in_process_cpu_ms": cost["in_process_cpu_ns"] / NS_PER_MS,
               "process_cpu_ms": cost["child_cpu_ns"] / NS_PER_MS}
        if kind == "thread":
            out["note"] = "thread sampler: its ticks run on a thread of the profiled process and are not counted"
        elif kind in (None, "null"):
            out = {"kind": kind, "cpu_ms": None,
                   "note": "no sampler ran" if kind is None else f"no sampler: {sampler.get('reason')}"}
        return out

    # -- context manager -------------------------------------------------------------------------
    def __enter__(self) -> profile:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.ingest = self.ingest and exc_type in (SystemExit,)  # keep files, skip ingest on error
        self.stop()
        return False
