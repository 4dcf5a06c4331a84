"""``kernelscope.sweep``: profile one step function over a grid of parameters, one run per point."""

from __future__ import annotations

import datetime as _dt
import itertools
from pathlib import Path

from .profile import profile


def _points(grid: dict) -> list[dict]:
    keys = list(grid)
    for k in keys:
        if isinstance(grid[k], (str, bytes)) or not hasattr(grid[k], "__iter__"):
            grid = {**grid, k: [grid[k]]}
    return [dict(zip(keys, vals)) for vals in itertools.product(*(list(grid[k]) for k in keys))]


def _default_point_name(name: str, point: dict) -> str:
    return "_".join([name] + [f"{k}{v}" for k, v in point.items()])


def _caller(step, inputs):
    if isinstance(inputs, dict):
        return lambda: step(**inputs)
    if isinstance(inputs, tuple):
        return lambda: step(*inputs)
    return lambda: step(inputs)


def sweep(step, grid, setup=None, steps=3, name="sweep", db=None, run_root=None, unprofiled=True,
          ingest=True, labels=None, point_name=None, timing=None, **profile_options) -> list[dict]:
    """Profile ``step`` at every point of ``grid`` (a dict of lists; the cartesian product).

    - ``setup(**point)`` runs outside the profiler and returns the step's inputs: a dict (keyword
      arguments), a tuple (positional) or one value. Without ``setup``, ``step(**point)``.
    - Each point: optional un-profiled timing (``unprofiled``; ``timing`` = extra options for
      ``timing.measure``), then a profile with ``schedule(wait=0, warmup=1, active=steps, repeat=1)``
      over ``1 + steps`` calls, labelled with the point (values kept as given, so numbers stay numbers)
      and ``sweep=<name>``.
    - Run dirs: ``run_root/<point_name(point)>`` (default name: ``<name>_<key><value>...``).

    Returns one dict per point: ``{"point", "run_dir", "trace_id", "profile"}``.
    """
    import torch

    if steps < 1:
        raise ValueError("sweep needs steps >= 1")
    root = Path(run_root) if run_root is not None else Path("runs") / (
        f"{name}-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}")
    out = []
    for point in _points(grid):
        inputs = setup(**point) if setup is not None else point
        call = _caller(step, inputs)
        pname = point_name(point) if point_name is not None else _default_point_name(name, point)
        unp = None
        if unprofiled:
            unp = {"fn": call, **(timing or {})}
        sched = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
        p = profile(name=pname, labels={**(labels or {}), **point, "sweep": name}, db=db,
                    schedule=sched, run_dir=root / pname, ingest=ingest, unprofiled=unp,
                    **profile_options)
        with p:
            for _ in range(1 + steps):
                call()
                p.step()
        p.unprofiled = None  # drop the inputs the timing closure holds
        out.append({"point": point, "run_dir": p.run_dir, "trace_id": p.trace_id, "profile": p})
        del inputs, call
    return out


def _substitute(argv: list[str], point: dict) -> list[str]:
    """``{key}`` in each argument replaced by the point's value (an unknown ``{name}`` is refused)."""
    import re

    from kernelscope.errors import UsageError

    out = []
    for arg in argv:
        def sub(m, arg=arg):
            if m.group(1) not in point:
                raise UsageError(f"sweep: {{{m.group(1)}}} in {arg!r} is not a --grid key ({', '.join(point)})")
            return str(point[m.group(1)])

        out.append(re.sub(r"\{(\w+)\}", sub, arg))
    return out


def _point_text(point: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def run_grid(grid: dict, argv: list[str], *, name=None, db=None, run_root=None, options=None, log=print):
    """``kernelscope sweep``: every point of ``grid`` through ``runner.run_passes`` (an un-profiled timing
    pass, then the profiled passes), labelled with the point and ``sweep=<name>``; a failing point is logged
    (``point batch=16 failed: exit 1``) and not ingested, the rest kept. Returns (one dict per point: ``point``,
    ``run_dir``, ``trace_id``, ``failed``; the sweep name)."""
    from kernelscope.errors import KernelscopeError

    from .runner import Options, _check_tools, _split, run_passes

    opts = options or Options()
    _check_tools(opts)  # nsys/ncu missing: one line before any point runs
    points = _points(grid)
    for point in points:  # bad commands are refused before anything runs
        _substitute(argv, point)
    name = name or Path(_split(_substitute(argv, points[0]))[0][0]).stem
    root = Path(run_root) if run_root is not None else Path("runs") / (
        f"{name}-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}")
    out = []
    for i, point in enumerate(points):
        pname = _default_point_name(name, point)
        log(f"point {i + 1}/{len(points)}: {_point_text(point)}")
        entry = {"point": point, "run_dir": root / pname, "trace_id": None, "failed": None}
        try:
            res = run_passes(_substitute(argv, point), name=pname, labels={**point, "sweep": name}, db=db,
                             run_dir=root / pname, options=opts, log=log, ingest_failed=False)
            entry["trace_id"], entry["failed"] = res.trace_id, res.failed
            if res.failed is None and res.trace_id is None:
                entry["failed"] = "no trace"
        except KernelscopeError as exc:
            entry["failed"] = str(exc)
        if entry["failed"] is not None:
            log(f"point {_point_text(point)} failed: {entry['failed']}")
        out.append(entry)
    return out, name
