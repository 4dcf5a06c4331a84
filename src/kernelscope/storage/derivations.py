"""The derivation registry: every table derived from a trace's events, the one step that fills it, what it needs.

A step has a name, the tables it fills (``table.column`` for a column it sets in another step's table), the
steps it needs, the schema migration that creates what it fills, and one function. Steps are of two kinds:

- ``staged``: reads the trace's staged events (the TEMP VIEWs ``ks_raw``, ``ks_links`` and ``ks_launch`` that
  ingest builds over a scratch Parquet file: storage/staging.py, storage/derive.py); ``fill(con, trace_id,
  base)``, ``base`` being the trace's time base. Only an ingest can run it: the staged events are not kept,
  so a trace stored before such a step's migration keeps no rows of it.
- ``stored``: reads only the trace's stored rows; ``fill(con, trace_id)``. Ingest runs it after the steps it
  needs, and a migration's backfill runs it for every trace already stored.

One file (storage/onetrace.py) and each rank worker (storage/rankrun.py) run ``run_steps``: every step, in
dependency order, inside the ingest. A migration (schema/NNN_*.sql) changes the schema only; storage/store.py
then calls ``backfill(con, NNN)``, which runs the stored steps whose tables that migration created, with the
functions ingest runs. Nothing derived is filled as a side effect of another step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from . import collectives, derive, idle, instances, memory, pycontext, signatures, splits

Source = Literal["staged", "stored"]


@dataclass(frozen=True)
class Step:
    """One derivation step (see the module docstring)."""

    name: str
    fills: tuple[str, ...]
    needs: tuple[str, ...]
    source: Source
    schema: int
    fill: Callable[..., None]

    @property
    def tables(self) -> tuple[str, ...]:
        """The tables it creates rows in (not those it only sets a column of)."""
        return tuple(f for f in self.fills if "." not in f)


_STEPS = (
    Step("events", ("cpu_ops", "python_calls", "launches", "gpu_activities", "annotations", "other_events",
                    "flows", "threads", "busy_intervals"), (), "staged", 1, derive.insert_events),
    Step("launch_splits", ("activity_splits", "op_launch", "op_kernels"), ("events",), "stored", 3,
         splits.insert_launch_splits),
    Step("idle", ("idle_gaps", "idle_pieces", "queued_intervals"), ("events", "launch_splits"), "stored", 5,
         idle.insert_idle),
    Step("idle_rollup", ("idle_rollup",), ("idle",), "stored", 11, idle.insert_idle_rollup),
    Step("signatures", ("op_signatures", "gpu_activities.leaf_sig_id"), ("events",), "stored", 6,
         signatures.insert_signatures),
    Step("leaf_instances", ("leaf_instances",), ("events", "signatures"), "stored", 13,
         instances.insert_leaf_instances),
    Step("stream_overlaps", ("stream_overlaps",), ("events",), "stored", 13, instances.insert_stream_overlaps),
    Step("collectives", ("collectives",), (), "staged", 4, collectives.insert_collectives),
    Step("device_time", ("device_time",), ("events", "collectives"), "stored", 7, collectives.insert_device_time),
    Step("memory", ("memory_events",), ("events",), "staged", 9, memory.insert_memory),
    Step("memory_pairs", ("memory_events.pair_ns",), ("memory",), "stored", 12, memory.insert_memory_pairs),
    Step("python_context", ("python_stacks", "python_calls.parent_call_id", "python_calls.depth",
                            "python_calls.stack_id", "python_calls.module_call_id", "cpu_ops.fwd_op_id",
                            "cpu_ops.py_call_id", "cpu_ops.module_call_id", "launches.fwd_op_id",
                            "launches.py_call_id", "launches.module_call_id"), ("events",), "stored", 10,
         pycontext.insert_python_context),
)

#: The registry, by name, in the order ingest runs the steps (each after the steps it needs).
STEPS: dict[str, Step] = {s.name: s for s in _STEPS}


def ordered(names=None) -> list[Step]:
    """The steps named (all when None) in dependency order: each after every registered step it needs; ties
    keep the registry's order. ValueError for an unknown name or need, or a cycle."""
    wanted = list(STEPS) if names is None else list(names)
    for name in wanted:
        if name not in STEPS:
            raise ValueError(f"no derivation step {name!r}")
    out: list[Step] = []
    done: set[str] = set()
    pending = [STEPS[n] for n in STEPS if n in wanted]
    while pending:
        ready = next((s for s in pending if all(n in done or n not in wanted for n in s.needs)), None)
        if ready is None:
            raise ValueError("derivation steps need each other: " + ", ".join(s.name for s in pending))
        for need in ready.needs:
            if need not in STEPS:
                raise ValueError(f"step {ready.name!r} needs an unknown step {need!r}")
        out.append(ready)
        done.add(ready.name)
        pending.remove(ready)
    return out


def run_steps(con, trace_id: str, base: int, lap=None) -> None:
    """Fill every derived table of one trace staged on ``con`` (ingest: one file, or a rank worker), each step
    after the steps it needs; ``lap(name)``, when given, is called after each step (ingest timings)."""
    for step in ordered():
        if step.source == "staged":
            step.fill(con, trace_id, base)
        else:
            step.fill(con, trace_id)
        if lap is not None:
            lap(step.name)


def backfill_steps(version: int) -> list[Step]:
    """The stored steps whose tables migration ``version`` creates, in dependency order."""
    return ordered(s.name for s in STEPS.values() if s.schema == version and s.source == "stored")


def backfill(con, version: int) -> None:
    """After migration ``version`` was applied: fill what it created for every trace already stored, with the
    steps ingest runs (staged steps cannot be: those traces keep no rows of them)."""
    steps = backfill_steps(version)
    if not steps:
        return
    for (trace_id,) in con.execute("SELECT trace_id FROM traces ORDER BY trace_id").fetchall():
        for step in steps:
            step.fill(con, trace_id)
