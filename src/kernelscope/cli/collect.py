"""The collecting commands: ``kernelscope profile`` (one script, every pass into one run dir) and ``kernelscope
sweep`` (one profiled run per grid point, then the transition analysis). The passes themselves live in
``collectors/runner.py``; docs/profile.md says what is recorded."""

from __future__ import annotations

import sys

import click

from ..errors import UsageError
from .app import cli, db_option, db_path, label_pairs, number_or_text, open_db, stop_within
from .render import emit_result

_CMD = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def profile_options(fn):
    """The options ``profile`` and ``sweep`` share (what each pass records)."""
    opts = [
        click.option("--memory", is_flag=True, help="Record tensor allocations (torch.profiler profile_memory)."),
        click.option("--stack", is_flag=True, help="Record Python call stacks of operators (with_stack)."),
        click.option("--modules", is_flag=True,
                     help="Record the nn.Module hierarchy of operators (with_modules; with_stack too, which "
                          "records an eager model's module ranges)."),
        click.option("--no-shapes", is_flag=True, help="Do not record input shapes (record_shapes=False)."),
        click.option("--schedule", default=None, metavar="WAIT,WARMUP,ACTIVE[,REPEAT]",
                     help="Record only some steps (torch.profiler.schedule; REPEAT defaults to 1). Steps: each "
                          "optimizer.step(), else each kernelscope.range(\"step\"), else each outermost module "
                          "forward of the script (run.json step_rule)."),
        click.option("--steps", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Profile only N steps, after the script's start-up and one warm-up step (with "
                          "--schedule: stop after step N)."),
        click.option("--no-telemetry", is_flag=True, help="Do not run the NVML sampler."),
        click.option("--telemetry-period", "telemetry_period", type=click.FloatRange(min=1), default=None,
                     metavar="MS", help="The NVML sampler's period in ms [default: 10]."),
        click.option("--nsys", "nsys", is_flag=False, flag_value="", default=None, metavar="[PATH]",
                     help="Also run the script under Nsight Systems (nsys on PATH, at PATH, or in the usual "
                          "install folders); its trace is stored in the same run."),
        click.option("--ncu", "ncu", default=None, metavar="top:N|REGEX",
                     help="Also run the script under Nsight Compute for the N kernels with the most GPU time "
                          "in the stored trace (or those whose name matches REGEX)."),
        click.option("--ncu-path", "ncu_path", default=None, metavar="PATH",
                     help="The ncu executable for --ncu (default: on PATH, else the usual install folders)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _options(memory, stack, modules, no_shapes, schedule, steps, no_telemetry, telemetry_period, nsys, ncu,
             ncu_path, baseline):
    from ..collectors.runner import Options, parse_schedule

    return Options(memory=memory, stack=stack, modules=modules, shapes=not no_shapes,
                   schedule=parse_schedule(schedule) if schedule is not None else None, steps=steps,
                   telemetry=not no_telemetry, telemetry_period_ms=telemetry_period, baseline=baseline,
                   nsys=(True if nsys == "" else nsys), ncu=ncu, ncu_path=ncu_path)


def _need_torch(command: str) -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UsageError(f"`kernelscope {command}` needs PyTorch, which is not installed; install it with "
                         "`pip install 'kernelscope[collect]'` (or a torch build for your machine).")


def _argv(command) -> list[str]:
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    return argv


@cli.command(context_settings=_CMD)
@click.option("--name", default=None, help="Trace name (default: the script's name).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Label the trace (repeatable).")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Where the trace and telemetry files go (default: a new folder ./runs/<name>-<UTC time> "
                   "under the current directory).")
@profile_options
@click.option("--no-baseline", is_flag=True,
              help="Skip the un-profiled run (no un-profiled timing, no profiler overhead).")
@db_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def profile(name, labels, run_dir, memory, stack, modules, no_shapes, schedule, steps, no_telemetry,
            telemetry_period, nsys, ncu, ncu_path, no_baseline, db, command):
    """Run a Python script under the profiler and the GPU sampler, then ingest the result.

    Usage: kernelscope profile [OPTIONS] -- python script.py ARGS...  The script needs no changes. It runs
    once un-profiled (timing: its kernelscope.range regions, else its steps and the whole process) and once
    profiled; then one line gives the profiler's overhead per step and the sampler's cost (docs/profile.md).
    """
    _need_torch("profile")
    from ..collectors.runner import run_passes

    opts = _options(memory, stack, modules, no_shapes, schedule, steps, no_telemetry, telemetry_period, nsys, ncu,
                    ncu_path, baseline=not no_baseline)
    argv = _argv(command)
    if not argv:
        raise UsageError("give the command to profile after `--`, e.g. `kernelscope profile -- python s.py`.")
    if (stack or modules) and not schedule and not steps:
        click.echo(PYTHON_TRACER_NOTE, err=True)
    stop_within(STOP_S, sigterm=True)  # `kill` stops the script's run too (collectors/child.py)
    try:
        res = run_passes(argv, name=name, labels=label_pairs(labels), db=db_path(db), run_dir=run_dir, options=opts)
    except KeyboardInterrupt:  # said by collectors/child.py; the shell's code for Ctrl-C, not click's "Aborted!"
        sys.exit(130)
    sys.exit(res.rc)


#: Seconds `profile` and `sweep` may take to end after Ctrl-C or SIGTERM (the script's process gets
#: collectors/child.py's STOP_GRACE_S of them) before they exit anyway.
STOP_S = 15

#: Said before a whole-script profile with the Python tracer on (--stack, --modules): its size surprises.
PYTHON_TRACER_NOTE = ("kernelscope: --stack/--modules record every Python call of the whole run (a GPT-2 generate() "
                      "script wrote 2.4 GB of JSON on an H200); --steps N or --schedule W,U,A records only some "
                      "steps")


def _grid(texts) -> dict:
    """``--grid key=v1,v2`` texts as {key: [values]} (numbers as numbers)."""
    grid: dict = {}
    for text in texts:
        key, sep, values = text.partition("=")
        key = key.strip()
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key or not vals:
            raise UsageError(f"--grid {text!r}: write KEY=V1,V2,... e.g. --grid batch=1,2,4")
        if key in grid:
            raise UsageError(f"--grid {key} is given twice; list all its values in one --grid {key}=...")
        grid[key] = [number_or_text(v) for v in vals]
    return grid


@cli.command(context_settings=_CMD)
@click.option("--grid", "grids", multiple=True, required=True, metavar="KEY=V1,V2,...",
              help="A parameter and its values (repeatable: the points are the cartesian product); {KEY} in "
                   "the command is replaced by each value.")
@click.option("--name", default=None, help="The sweep's name: label sweep=NAME on every trace [default: the "
              "script's name].")
@click.option("--by", "by", default=None, metavar="KEY",
              help="The grid key the transition analysis orders by [default: batch if in the grid, else the "
                   "first --grid].")
@click.option("--run-root", type=click.Path(file_okay=False), default=None,
              help="Folder for the points' run dirs [default: ./runs/<name>-<UTC time>].")
@profile_options
@db_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def sweep(grids, name, by, run_root, memory, stack, modules, no_shapes, schedule, steps, no_telemetry,
          telemetry_period, nsys, ncu, ncu_path, db, command):
    """Profile a script at every point of a grid, then print the CPU->GPU-bound transition.

    Usage: kernelscope sweep --grid batch=1,2,4,8 [--grid KEY=...] [OPTIONS] -- python infer.py --batch {batch}
    Each point runs un-profiled once (timing: the script's kernelscope.range regions, else the whole process),
    then profiled as `profile` does; its trace is labelled with the point and sweep=NAME. A failing point is
    reported and the rest kept; the exit code is non-zero only when every point failed.
    """
    _need_torch("sweep")
    from ..collectors.sweep import run_grid

    grid = _grid(grids)
    argv = _argv(command)
    if not argv:
        raise UsageError("give the command after `--`, e.g. `kernelscope sweep --grid batch=1,2 -- python s.py "
                         "--batch {batch}`.")
    opts = _options(memory, stack, modules, no_shapes, schedule, steps, no_telemetry, telemetry_period, nsys, ncu,
                    ncu_path, baseline=True)
    by = by or ("batch" if "batch" in grid else next(iter(grid)))
    if by not in grid:
        raise UsageError(f"--by {by}: not a --grid key ({', '.join(grid)})")
    stop_within(STOP_S, sigterm=True)  # `kill` stops the running point's script too (collectors/child.py)
    try:
        results, sweep_name = run_grid(grid, argv, name=name, db=db_path(db), run_root=run_root, options=opts,
                                       log=lambda line: click.echo(f"kernelscope: {line}", err=True))
    except KeyboardInterrupt:  # said by collectors/child.py when a point's script was running
        sys.exit(130)
    ok = [r for r in results if r["failed"] is None]
    click.echo(f"kernelscope: sweep {sweep_name}: {len(ok)} of {len(results)} points profiled", err=True)
    if not ok:
        sys.exit(1)
    others = [k for k in grid if k != by]
    if not others:
        _print_transition(f"--sweep {sweep_name} --by {by}", by, db, sweep=sweep_name)
        return
    groups: dict = {}  # one transition per combination of the other keys' values, over the points profiled
    for r in ok:
        groups.setdefault(tuple(r["point"][k] for k in others), []).append(r["trace_id"])
    for values, ids in groups.items():
        where = " ".join(f"{k}={v}" for k, v in zip(others, values))
        _print_transition(f"--by {by} TRACE... ({where} of sweep {sweep_name})", by, db, ids=ids)


def _print_transition(what: str, by: str, db, *, sweep=None, ids=None) -> None:
    """``kernelscope analyze transition`` (its analysis function), printed as a table."""
    from ..analysis import get_analysis

    click.echo(f"\n# kernelscope analyze transition {what}")
    with open_db(db, read_only=True) as store:
        try:
            result = get_analysis("transition").fn(store, ids, by=by, sweep=sweep)
        except UsageError as exc:
            click.echo(f"kernelscope: no transition: {exc}", err=True)
            return
    emit_result(result, "table", None)
