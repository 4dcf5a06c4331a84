"""``kernelscope profile -- python script.py args``: profile a script that never imports kernelscope.

The parent (``run_passes``) runs the script once per pass, each in a child ``python -m
kernelscope.collectors.runner --mode MODE --run-dir D --options JSON -- script.py args`` that runs the script
with ``runpy`` (as ``__main__``, ``sys.argv`` = script and its args) and exits with its exit code:

1. ``time`` (unless ``baseline=False``): un-profiled, no sampler; the durations of the script's outermost
   ``kernelscope.range`` regions (``collectors/stepping.py`` RegionTimer) go to ``D/.timing.json``; a script
   without such regions is timed as a whole process by the parent (``timing.kind`` = ``range`` | ``process``).
2. ``profile``: ``profile(ingest=False)`` with the options, steps detected on the unmodified script
   (``stepping.Stepper``; run.json ``step_rule``); writes the trace, telemetry and run.json.
3. Nsight passes (``--nsys``, ``--ncu``), through ``collectors/nsight.py``.

The parent then merges the un-profiled timings and the overhead (docs/metrics.md, Overhead) into run.json
(atomic replace) and ingests the run dir.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

from kernelscope.errors import UsageError
from kernelscope.units import NS_PER_S

from .pygc import FullCollections, gc_line

TIMING_FILE = ".timing.json"


def _split(argv: list[str]) -> tuple[list[str], str]:
    """(script argv, how to run it: 'path' | 'module') from ``python s.py args`` or ``s.py args``."""
    if not argv:
        raise UsageError("no command given; write `kernelscope profile -- python script.py`.")
    args = list(argv)
    if Path(args[0]).name.startswith("python"):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] != "-m":
            args = args[1:]  # interpreter flags (-u, -O) are not kept
    if not args:
        raise UsageError("no script given after python; write `-- python script.py`.")
    if args[0] == "-m":
        if len(args) < 2:
            raise UsageError("`-m` needs a module name.")
        return args[1:], "module"
    if not args[0].endswith(".py") and not Path(args[0]).is_file():
        raise UsageError(f"{args[0]!r} is not a Python script; "
                         "write `kernelscope profile -- python script.py args`.")
    if not Path(args[0]).is_file():
        raise UsageError(f"script {args[0]!r} not found.")
    return args, "path"


@dataclasses.dataclass
class Options:
    """What ``kernelscope profile`` records (each maps to a CLI option; docs/profile.md)."""

    memory: bool = False  # profile_memory
    stack: bool = False  # with_stack
    modules: bool = False  # with_modules
    shapes: bool = True  # record_shapes
    schedule: tuple | None = None  # (wait, warmup, active, repeat)
    steps: int | None = None  # profile only the first N steps
    telemetry: bool = True
    telemetry_period_ms: float | None = None
    baseline: bool = True  # the un-profiled timing pass
    nsys: str | bool | None = None  # True: find nsys; a str: its path
    ncu: str | None = None  # "top:N" or a regex
    ncu_path: str | None = None  # the ncu executable (else PATH, else the usual install folders)

    def profiler_kwargs(self) -> dict:
        return {"profile_memory": self.memory, "with_stack": self.stack, "with_modules": self.modules,
                "record_shapes": self.shapes}


def parse_schedule(text: str) -> tuple:
    """``WAIT,WARMUP,ACTIVE[,REPEAT]`` -> a 4-tuple (REPEAT defaults to 1: one cycle, one trace)."""
    try:
        parts = [int(p) for p in str(text).split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (3, 4) or min(parts) < 0 or parts[2] < 1:
        raise UsageError(f"--schedule {text!r}: write WAIT,WARMUP,ACTIVE[,REPEAT] as whole numbers, ACTIVE >= 1 "
                         "(e.g. --schedule 1,1,3)")
    return tuple(parts) if len(parts) == 4 else (*parts, 1)


def _schedule_for(opts: Options) -> tuple | None:
    """The torch schedule (wait, warmup, active, repeat) of the options. ``--steps N`` alone waits one step:
    torch's step 0 runs from the profiler's start, before the script, to its first step boundary (imports, model
    building), and a script's steps come after it. Recorded as the first of N steps, that start-up held 99.5%
    of the Python calls of a Mamba generate() under `--modules --steps 4` (2.77M of 2.78M; 859 MB of JSON, the
    profiled run 25x the un-profiled one) and left 3 real steps. Then one warm-up step, as torch.profiler's
    documentation advises (tracing starts there and is discarded: the overhead at the beginning of profiling
    is high and skews the first step). On a CPU it did not remove the one slow step BERT's profiled runs show
    (~+140 ms in one of the recorded steps, with or without it), so the choice rests on torch's advice for CUPTI."""
    if opts.schedule is not None:
        return tuple(opts.schedule)
    if opts.steps is not None:
        return (1, 1, int(opts.steps), 1)
    return None


def recording_words(opts: Options) -> str:
    """What the profiled run records, in words (the line said as it starts: a long profiled run then says
    which pass it is in)."""
    sched = _schedule_for(opts)
    if sched is None:
        return "every step from the script's start"
    if opts.schedule is None:
        return (f"{opts.steps} step{'s' if opts.steps != 1 else ''} of the script after its start-up and one "
                "warm-up step")
    w, u, a, r = sched
    return (f"torch.profiler.schedule(wait={w}, warmup={u}, active={a}, repeat={r})"
            + (f", stopping after step {opts.steps}" if opts.steps is not None else ""))


def _halt_after(opts: Options) -> int | None:
    """After how many step boundaries the profiler stops: ``--steps N`` with ``--schedule``, at torch's step N;
    alone, once its N steps after the start-up and the warm-up step have ended (``_schedule_for``)."""
    if opts.steps is None:
        return None
    return int(opts.steps) + (2 if opts.schedule is None else 0)


def torch_schedule(torch, sched: tuple):
    """``torch.profiler.schedule(wait, warmup, active, repeat)``. Without warmup (a ``--schedule`` with WARMUP 0)
    torch warns "Profiler won't be using warmup", pointing at this file: a user of `--steps 4`, then without
    warm-up (Mamba's generate() on an H200), read it as kernelscope's own trouble. WARMUP 0 is the user's choice
    there, said in docs/profile.md, so that warning is not shown."""
    import warnings

    with warnings.catch_warnings():
        if sched[1] == 0:
            warnings.filterwarnings("ignore", message=".*won't be using warmup", category=UserWarning)
        return torch.profiler.schedule(wait=sched[0], warmup=sched[1], active=sched[2], repeat=sched[3])


@dataclasses.dataclass
class RunResult:
    rc: int  # the profiled pass's exit code (else the first failing pass's)
    run_dir: Path
    trace_id: str | None = None
    failed: str | None = None  # "un-profiled run failed: exit 1", ...
    overhead: dict | None = None
    timing: dict | None = None


def _child_cmd(mode: str, run_dir: Path, script: list[str], how: str, name: str, labels, opts: Options) -> list:
    return [sys.executable, "-m", "kernelscope.collectors.runner", "--mode", mode, "--run-dir", str(run_dir),
            "--name", name, "--labels", json.dumps(labels or {}), "--how", how,
            "--options", json.dumps(dataclasses.asdict(opts)), "--", *script]


def _child_env() -> dict:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # make kernelscope importable in the child
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(mode: str, run_dir: Path, *child) -> tuple[int, int]:
    """(exit code, wall ns) of the ``mode`` pass's child (``_child_cmd(mode, run_dir, *child)``); stopped with
    kernelscope (collectors/child.py)."""
    from .child import run_child

    def said(pid: int) -> None:
        what = "un-profiled" if mode == "time" else "profiled"
        print(f"kernelscope: stopped during the {what} run of the script; its process ({pid}) was stopped too and "
              f"nothing was ingested; {run_dir} keeps what it wrote", file=sys.stderr, flush=True)

    t0 = time.perf_counter_ns()
    rc = run_child(_child_cmd(mode, run_dir, *child), env=_child_env(), on_stop=said)
    return rc, time.perf_counter_ns() - t0


def run_passes(argv: list[str], *, name=None, labels=None, db=None, run_dir=None, ingest=True,
               options: Options | None = None, log=None, ingest_failed=True) -> RunResult:
    """Run every pass of ``argv`` (``python script.py args``) into one run dir; merge, ingest, report.

    ``ingest_failed=False``: a run whose script failed in some pass is not ingested (``sweep``)."""
    opts = options or Options(baseline=False)
    script, how = _split(argv)
    from .profile import _default_run_dir, ingest_run_dir

    log = log or (lambda line: print(f"kernelscope: {line}", file=sys.stderr))
    tools = _check_tools(opts)  # before the script runs
    name = name or Path(script[0]).stem
    run_dir = Path(run_dir) if run_dir is not None else _default_run_dir(name)
    run_dir.mkdir(parents=True, exist_ok=True)
    res = RunResult(rc=0, run_dir=run_dir)
    base = gc_base = None
    if opts.baseline:
        log(f"un-profiled run: {' '.join(map(str, script))} (timing only; the profiled run follows)")
        rc, wall = _run("time", run_dir, script, how, name, labels, opts)
        base, gc_base = _read_timing(run_dir, wall)
        if rc != 0:
            res.failed = f"exit {rc} (un-profiled run)"
            log(f"the un-profiled run of the script exited with {rc}")
            if not ingest_failed:
                res.rc = rc
                return res
    log(f"profiled run: recording {recording_words(opts)} into {run_dir}")
    rc, wall = _run("profile", run_dir, script, how, name, labels, opts)
    res.rc = rc
    if rc != 0 and res.failed is None:
        res.failed = f"exit {rc}" if not opts.baseline else f"exit {rc} (profiled run)"
    if rc != 0:  # said before the lines about the run, which would otherwise read as a success
        log(f"the profiled run of the script exited with {rc}; its trace holds what it recorded until then")
    gc_profiled = None
    if (run_dir / "run.json").is_file():
        res.overhead, res.timing, gc_profiled = _merge_run_json(run_dir, base, wall, failed=res.failed,
                                                                base_gc=gc_base)
    if res.failed is not None and not ingest_failed:
        return res
    passes = (run_dir, name, script, how, labels, res, log, _child_cmd, _child_env)
    if "nsys" in tools:
        from . import nsight_passes

        nsight_passes.run_nsys(tools, opts, *passes)
    if tools and ingest:
        _ingest_all(run_dir, name, labels, db, res, log)
        if "ncu" in tools:
            nsight_passes.run_ncu(tools, opts, *passes, db=db)
            _ingest_all(run_dir, name, labels, db, res, log)
    elif ingest and (run_dir / "trace.json.gz").is_file():
        ingested = ingest_run_dir(run_dir, name=name, labels=labels, db=db)
        res.trace_id = ingested.trace_id
        log(f"run {run_dir} {ingested.status} as trace {ingested.trace_id} "
            f"(`kernelscope summary {ingested.trace_id}`)")
    elif ingest:
        log(f"the script wrote no trace in {run_dir}; nothing ingested")
    if res.timing is not None:
        log(timing_line(res.timing))
    if res.overhead is not None:
        log(overhead_line(res.overhead))
    if line := gc_line(gc_profiled, gc_base):
        log(line)
    return res


def _ingest_all(run_dir: Path, name, labels, db, res: RunResult, log) -> None:
    """Every pass of the run dir into the store (parts stored already are skipped), one line each."""
    from .nsight_passes import ingest_all

    results = ingest_all(run_dir, name=name, labels=labels, db=db)
    if results and (run_dir / "trace.json.gz").is_file() and results[0].status != "failed":
        res.trace_id = res.trace_id or results[0].trace_id  # the Kineto trace comes first
    for r in results:
        if r.status == "skipped":
            continue
        if r.status == "failed":
            log(f"{r.path}: {r.message}")
            res.failed = res.failed or f"ingest of {Path(r.path).name} failed"
            continue
        log(f"{Path(r.path).name} {r.status} as trace {r.trace_id}" + (f" ({r.notes})" if r.notes else ""))


def run_script(argv: list[str], *, name=None, labels=None, db=None, run_dir=None, ingest=True,
               options: Options | None = None) -> int:
    """Run ``argv`` (``python script.py args``) under the profiler and sampler; ingest; return its code."""
    return run_passes(argv, name=name, labels=labels, db=db, run_dir=run_dir, ingest=ingest, options=options).rc


def _check_tools(opts: Options) -> dict:
    """Nsight tools asked for, found (UsageError in one line when absent: before any pass runs)."""
    if not opts.nsys and not opts.ncu:
        return {}
    from . import nsight

    tools = {}
    if opts.nsys:
        tools["nsys"] = nsight.find_tool("nsys", None if opts.nsys is True else opts.nsys)
        nsight.check_nsys_importer(tools["nsys"])
    if opts.ncu:
        tools["ncu_spec"] = nsight.parse_ncu_spec(opts.ncu)
        tools["ncu"] = nsight.find_tool("ncu", opts.ncu_path)
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--ncu needs a CUDA GPU (Nsight Compute profiles GPU kernels) and torch sees none "
                             "here (torch.cuda.is_available() is False); run it on a GPU machine.")
    return tools


# -- timing and overhead ---------------------------------------------------------------------------------------
def _read_timing(run_dir: Path, wall_ns: int) -> tuple[dict, dict | None]:
    """The un-profiled pass: range rows from the child's file, else one whole-process row; and its full garbage
    collections (``FullCollections.doc``; None when the child wrote no file)."""
    path = run_dir / TIMING_FILE
    data = json.loads(path.read_text()) if path.is_file() else {}
    path.unlink(missing_ok=True)
    steps = {"step_times": data["steps"]} if data.get("steps") else {}
    if data.get("rows"):
        base = {"kind": "range", "regions": data["names"], "iterations": data["iterations"], "rows": data["rows"],
                "process_wall_ns": wall_ns, **steps}
    else:
        base = {"kind": "process", "iterations": 1, "process_wall_ns": wall_ns, **steps,
                "rows": [{"kind": "process_wall", "iteration": 0, "dur_ns": wall_ns, "energy_mj": None}]}
    return base, data.get("python_gc")


def _merge_run_json(run_dir: Path, base: dict | None, profiled_wall_ns: int, failed=None,
                    base_gc: dict | None = None) -> tuple[dict, dict | None, dict | None]:
    """run.json with the un-profiled pass merged in: (overhead, timing, the profiled pass's full collections).
    The provenance keeps both passes' full collections (``python_gc``: recommend tells the script's own pauses from
    those the profiler brought on)."""
    path = run_dir / "run.json"
    doc = json.loads(path.read_text())
    overhead = dict(doc.get("overhead") or {})
    timing = None
    if base is None:
        overhead["profiler"] = {"basis": None, "note": "no un-profiled run (--no-baseline)"}
    elif failed is not None:  # a run that failed is no baseline: its timings are not kept either
        overhead["profiler"] = {"basis": None, "note": f"the script failed: {failed}"}
    else:
        timing = {k: v for k, v in base.items() if k != "rows"}
        doc["timings"] = list(doc.get("timings") or []) + base["rows"]
        doc["timing"] = {**(doc.get("timing") or {}), **timing}
        overhead["profiler"] = _profiler_overhead(base, doc.get("profiled_regions") or [], profiled_wall_ns,
                                                  doc.get("step_times"))
    doc["overhead"] = overhead
    if isinstance(doc.get("provenance"), dict):  # stored with the trace: the report's profiler inflation
        doc["provenance"]["profiler_overhead"] = overhead["profiler"]
        doc["provenance"]["python_gc"] = {"profiled": doc.get("python_gc"),
                                          "unprofiled": base_gc if timing is not None else None}
    tmp = run_dir / ".run.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)
    return overhead, timing, doc.get("python_gc")


def _profiler_overhead(base: dict, regions: list[dict], profiled_wall_ns: int, step_times: dict | None = None) -> dict:
    """Profiled vs un-profiled time (docs/metrics.md, Collector overhead): the script's kernelscope.range regions,
    else its steps (the same iterations of both passes), else the whole processes."""
    if base["kind"] == "range":
        names = set(base["regions"])
        timed = [r for r in regions if r["name"] in names]
        used = [r for r in timed if r.get("recorded")] or timed
        un = [r["dur_ns"] for r in base["rows"] if r["kind"] == "wall"]
        if used and un:
            p, u = statistics.median(r["wall_ns"] for r in used), statistics.median(un)
            return {"basis": "range", "n": len(used), "profiled_median_ns": int(p), "unprofiled_median_ns": int(u),
                    "pct": (p / u - 1) * 100 if u else None,
                    "recorded_only": any(r.get("recorded") for r in timed)}
    by_step = _step_overhead(base.get("step_times"), step_times)
    if by_step is not None:
        return by_step
    u = base["process_wall_ns"]
    return {"basis": "process", "n": 1, "profiled_wall_ns": profiled_wall_ns, "unprofiled_wall_ns": u,
            "pct": (profiled_wall_ns / u - 1) * 100 if u else None}


def _step_overhead(unprofiled: dict | None, profiled: dict | None) -> dict | None:
    """The ``step`` basis: the profiled pass's recorded steps against the same steps (by index) of the
    un-profiled pass, when both passes took their boundaries by the same rule; None when that cannot be had."""
    if not unprofiled or not profiled or profiled.get("rule") in (None, "none") or \
            profiled["rule"] != unprofiled.get("rule"):
        return None
    un = unprofiled["ns"]
    used = [i for i, rec in enumerate(profiled["recorded"]) if rec and i < len(un)]
    if not used:
        return None
    p = statistics.median(profiled["ns"][i] for i in used)
    u = statistics.median(un[i] for i in used)
    return {"basis": "step", "rule": profiled["rule"], "n": len(used), "profiled_median_ns": int(p),
            "unprofiled_median_ns": int(u), "pct": (p / u - 1) * 100 if u else None}


#: How each step rule takes its boundaries, for the overhead line.
_RULE_WORDS = {"optimizer": "taken at each optimizer.step()", "forward": "taken at each outermost module forward",
               "range": 'the kernelscope.range("step") regions'}


def overhead_line(overhead: dict) -> str:
    prof = overhead.get("profiler") or {}
    pct = prof.get("pct")
    if prof.get("basis") in ("range", "step") and pct is not None:
        detail = (f"median of {prof['n']}" if prof["basis"] == "range" else
                  f"median of {prof['n']} recorded step{'s' if prof['n'] != 1 else ''} against the same steps "
                  f"un-profiled; steps {_RULE_WORDS.get(prof.get('rule'), prof.get('rule'))}")
        # A step is not faster for being profiled: below 0 the steps varied more than the profiler cost (a 6-step
        # CPU script under --steps 2 read -79.0% one run and +48.0% the next)
        head = (f"profiler {pct:+.1f}% per step ({detail})" if pct >= 0 else
                f"profiler under the noise: {pct:+.1f}% per step ({detail}); a step is not faster for being "
                "profiled, so these steps vary more than the profiler costs")
    elif prof.get("basis") == "process" and pct is not None and pct < 0:
        # One run each, the un-profiled one first: it also paid the start-up the second run found done (file
        # caches, CUDA and library initialisation), so a faster profiled run says nothing about the profiler.
        head = (f"profiler not measured: the profiled run ({prof['profiled_wall_ns'] / NS_PER_S:.2f} s) was "
                f"{-pct:.1f}% faster than the un-profiled one ({prof['unprofiled_wall_ns'] / NS_PER_S:.2f} s), "
                "which ran first and paid the start-up (file caches, CUDA initialisation); mark the loop with "
                'kernelscope.range("step") to compare steps')
    elif prof.get("basis") == "process" and pct is not None:
        head = f"profiler {pct:+.1f}% process wall time (one run each)"
    else:
        head = f"profiler not measured ({prof.get('note') or 'no un-profiled run'})"
    samp = overhead.get("sampler") or {}
    if samp.get("kind") in (None, "null"):
        tail = "no sampler ran" if samp.get("kind") is None else "no sampler (no NVML device)"
    else:
        tail = f"sampler {samp.get('cpu_ms', 0):.1f} ms CPU"
    return f"overhead: {head}, {tail}"


def timing_line(timing: dict) -> str:
    if timing["kind"] == "range":
        regions = ", ".join(f'"{n}"' for n in timing["regions"])
        return (f"un-profiled timing: {timing['iterations']} kernelscope.range regions ({regions}), "
                "one timed iteration each")
    steps = timing.get("step_times") or {}
    if steps.get("rule") not in (None, "none") and steps.get("ns"):
        return (f"un-profiled timing: the whole process and its {len(steps['ns'])} step"
                f"{'s' if len(steps['ns']) != 1 else ''} ({_RULE_WORDS.get(steps['rule'], steps['rule'])}; the "
                "script marks no kernelscope.range region)")
    return "un-profiled timing: the whole process (the script marks no kernelscope.range region)"


# -- the child ------------------------------------------------------------------------------------------------
def _run_script(script: list[str], how: str) -> int:
    import runpy

    sys.argv = list(script)
    try:
        if how == "module":
            runpy.run_module(script[0], run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, str(Path(script[0]).resolve().parent))
            runpy.run_path(script[0], run_name="__main__")
    except SystemExit as e:
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    return 0


def _child_time(opts: dict, script: list[str], how: str) -> int:
    from .stepping import RegionTimer, Stepper, StepTimes

    timer = RegionTimer().install()
    clock = StepTimes()  # the profiled pass's step boundaries, with no profiler step at them
    stepper = Stepper(clock).install()
    collections = FullCollections().install()
    try:
        code = _run_script(script, how)
    finally:
        collections.remove()
        timer.remove()
        steps = clock.doc(stepper.finish()["rule"])
    if timer.cuda:
        timer.torch.cuda.synchronize()
    rows = timer.rows()
    out = Path(opts["--run-dir"]) / TIMING_FILE
    out.write_text(json.dumps({"rows": rows, "names": timer.names(), "iterations": len(timer.timed()),
                               "steps": steps, "python_gc": collections.doc()}))
    return code


def _guard_script_profiler(prof) -> list:
    """A script that starts its own torch.profiler makes ours stop first (``profile.yield_to``)."""
    import torch

    undo = []
    for cls, meth in ((torch.profiler.profile, "start"), (torch.autograd.profiler.profile, "__enter__")):
        orig = getattr(cls, meth)

        def patched(self, *a, _orig=orig, _what=f"{cls.__module__}.{cls.__qualname__}.{meth}", **k):
            if self is not prof._prof:
                prof.yield_to(_what)
            return _orig(self, *a, **k)

        setattr(cls, meth, patched)
        undo.append((cls, meth, orig))
    return undo


def _child_profile(o: dict, script: list[str], how: str) -> int:
    import torch

    from .profile import profile

    opts = Options(**json.loads(o["--options"]))
    sched = _schedule_for(opts)
    prof = profile(name=o.get("--name"), labels=json.loads(o.get("--labels", "{}")), run_dir=o["--run-dir"],
                   ingest=False, telemetry=opts.telemetry, telemetry_period_ms=opts.telemetry_period_ms,
                   schedule=None if sched is None else torch_schedule(torch, sched),
                   steps=_halt_after(opts), **opts.profiler_kwargs())
    try:
        return _profiled(prof, opts, script, how)
    except Exception as exc:  # the profiler itself failed (not the script): one line, no half-written run dir
        print(f"kernelscope: the profiler failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _profiled(prof, opts: Options, script: list[str], how: str) -> int:
    import torch

    from .stepping import RegionTimer, Stepper, StepTimes

    code = 0
    with prof:
        clock = StepTimes(prof.step, prof.recording)
        stepper = Stepper(clock).install()  # profile(steps=N) halts after step N
        timer = RegionTimer(prof.recording).install()
        undo = _guard_script_profiler(prof)
        collections = FullCollections(torch.profiler.record_function).install()
        try:
            code = _run_script(script, how)
        finally:
            collections.remove()
            prof.extra["python_gc"] = collections.doc()
            for cls, meth, orig in undo:
                setattr(cls, meth, orig)
            timer.remove()
            prof.extra["step_rule"] = stepper.finish()
            prof.extra["step_times"] = clock.doc(prof.extra["step_rule"]["rule"])
            prof.extra.setdefault("profiler_options", {})["steps"] = opts.steps
            prof.extra["profiled_regions"] = [{"name": r["name"], "wall_ns": r["wall_ns"], "recorded": r["recorded"]}
                                              for r in timer.regions]
    return code


def _plain_own_warnings() -> None:
    """In a pass's child, kernelscope's own warnings (text starting "kernelscope: ") print as that one line, as
    the runner's lines do, not as Python shows a warning (a CPU-only run printed "/.../collectors/profile.py:450:
    UserWarning: kernelscope: no CUDA device: ..." and the source line under it); the script's warnings are
    shown as Python shows them."""
    import warnings

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if str(message).startswith("kernelscope: "):
            print(str(message), file=sys.stderr if file is None else file)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def _child(args: list[str]) -> int:
    _plain_own_warnings()
    opts = {}
    while args and args[0] != "--":
        opts[args[0]] = args[1]
        args = args[2:]
    script = args[1:]
    how = opts.get("--how", "path")
    if opts.get("--mode") == "time":
        return _child_time(opts, script, how)
    if opts.get("--mode") in ("nsys", "ncu"):
        from . import nsight_passes

        return nsight_passes.child(opts, script, how, _run_script)
    if "--options" not in opts:
        opts["--options"] = json.dumps(dataclasses.asdict(Options(baseline=False)))
    return _child_profile(opts, script, how)


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
