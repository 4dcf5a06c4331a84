"""The Nsight passes of ``kernelscope profile --nsys/--ncu``, orchestrated by the runner (``runner.run_passes``);
the command lines, checks and records are ``collectors/nsight.py`` and ``nsight.py``.

CUPTI allows one profiler per process, so each collector is its own run of the script, all into one run dir:
the Kineto pass (``runner``), then the nsys pass (the runner's child in mode ``nsys`` under ``nsys profile``:
``emit_nvtx`` on, no Kineto, no sampler), then the ncu pass (mode ``ncu`` under ``ncu``: the kernels chosen from
the stored Kineto trace, no Kineto). With ``--schedule``/``--steps`` both Nsight passes capture only the active
steps of the first cycle (cudaProfilerStart/Stop driven by the same step rule as the Kineto pass).
"""

from __future__ import annotations

import json
from pathlib import Path


def _schedule(opts):
    from .runner import _schedule_for

    return _schedule_for(opts)


def run_nsys(tools: dict, opts, run_dir: Path, name: str, script, how, labels, res, log, child_cmd, child_env):
    """The nsys pass; its result line is logged and ``res.failed`` set when it failed."""
    from . import nsight

    sched = _schedule(opts)
    argv = child_cmd("nsys", run_dir, script, how, name, labels, opts)
    log(f"nsys pass: {Path(tools['nsys'])} profile ... -- {' '.join(map(str, script))}")
    out = nsight.nsys_pass(tools["nsys"], run_dir, name, argv, env=child_env(), capture_range=sched is not None)
    log(out.message)
    if not out.ok and res.failed is None:
        res.failed = out.message
    return out


def run_ncu(tools: dict, opts, run_dir: Path, name: str, script, how, labels, res, log, child_cmd, child_env, db):
    """The ncu pass over the kernels of the stored Kineto trace ``res.trace_id``."""
    from . import nsight  # re-exports the ncu side (nsight_ncu)

    if res.trace_id is None:
        msg = "ncu pass skipped: no stored Kineto trace to choose kernels from"
        log(msg)
        res.failed = res.failed or msg
        return None
    targets = nsight.ncu_targets(tools["ncu_spec"], nsight.stored_kernels(db, res.trace_id))
    log(ncu_plan_line(targets))
    argv = child_cmd("ncu", run_dir, script, how, name, labels, opts)
    out = nsight.ncu_pass(tools["ncu"], run_dir, name, argv, targets, env=child_env(),
                              capture_range=_schedule(opts) is not None)
    log(out.message)
    if not out.ok and res.failed is None:
        res.failed = out.message
    return out


def ncu_plan_line(targets) -> str:
    """What the ncu pass will profile, in one line; a capped launch count says so (on an H200, 500 launches of
    three kernels of a training step had not finished after two minutes: ncu replays every launch)."""
    names = f"{', '.join(targets.names[:5])}{', ...' if len(targets.names) > 5 else ''}"
    k = f"{len(targets.names)} kernel name{'s' if len(targets.names) != 1 else ''}"
    if targets.launch_count < targets.launches:
        return (f"ncu pass: {k}, the first {targets.launch_count:,} of their "
                f"{targets.launches:,} traced launches ({names}); ncu replays each launch, so hundreds take "
                "minutes: a regex (--ncu NAME_REGEX) or a shorter --schedule profiles fewer")
    return f"ncu pass: {k}, {targets.launch_count:,} launches ({names})"


def ingest_all(run_dir: Path, *, name, labels, db) -> list:
    """``storage.rundir.ingest_run_all`` of the run dir (every pass; parts already stored are skipped), reached
    through importlib as ``profile.ingest_run_dir`` does."""
    import importlib

    open_store = importlib.import_module("kernelscope.storage.store").open_store
    ingest_run_all = importlib.import_module("kernelscope.storage.rundir").ingest_run_all
    with open_store(db) as store:
        return ingest_run_all(store, Path(run_dir), name=name, labels=labels)


def child(o: dict, script: list[str], how: str, run_script) -> int:
    """The child of an Nsight pass: the script with the step rule driving the capture range (nsys: under
    ``emit_nvtx``); no Kineto, no sampler."""
    from . import nsight
    from .runner import Options, _schedule_for
    from .stepping import Stepper

    opts = Options(**json.loads(o["--options"]))
    sched = _schedule_for(opts)
    with nsight.child_nvtx(capture_range=sched is not None, schedule=sched, nvtx=o["--mode"] == "nsys") as rng:
        stepper = Stepper(rng.step).install()
        try:
            return run_script(script, how)
        finally:
            stepper.finish()
