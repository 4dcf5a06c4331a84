"""Where the rank files of a run are parsed and derived: the local process pool (default) or a Ray cluster.

Either way each rank file is one call of ``rankrun._parse_and_derive``, which writes that rank's derived tables
as Parquet files into its folder of the ingest's scratch directory (beside the store); the driver then inserts
them into the store in one transaction, exactly as a local ingest does. So a Ray run stores the same rows.

Ray (``pip install 'kernelscope[ray]'``): ``Engine("ray", address)`` connects to the cluster at ``address``,
else ``$RAY_ADDRESS``, else starts a local Ray instance for this ingest (and stops it afterwards). One task per
rank file, one CPU each. The scratch directory is beside the store, so on a cluster the store's folder must be on
storage every node sees (a shared filesystem), and every node needs kernelscope installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..errors import UsageError

ENGINES = ("local", "ray")
RAY_HINT = "--engine ray needs Ray, which is not installed: pip install 'kernelscope[ray]'"


@dataclass(frozen=True)
class Engine:
    kind: Literal["local", "ray"] = "local"
    address: str | None = None  # Ray only: the cluster's address ("auto", "ray://host:10001", ...)


LOCAL = Engine()


def check(engine: Engine) -> None:
    """One line before any work when the engine cannot run here (unknown kind, Ray not installed)."""
    if engine.kind not in ENGINES:
        raise UsageError(f"unknown engine {engine.kind!r}; choose one of {', '.join(ENGINES)}")
    if engine.kind == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise UsageError(RAY_HINT)


def run_ray(fn: Callable, calls: list[tuple], address: str | None = None) -> list:
    """``fn(*args)`` for each of ``calls`` as Ray tasks of one CPU; the results in call order, where a task that
    raised gives its exception (the original one, not Ray's wrapper)."""
    check(Engine("ray", address))
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 configure_logging=False)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = [task.remote(*args) for args in calls]
        out = []
        for ref in refs:
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
                out.append(cause)
        return out
    finally:
        if started:
            ray.shutdown()
