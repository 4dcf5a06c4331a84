"""Ingest: trace files, collector run directories, runs of many ranks and folders of them -> the store
(``ingest_paths``), each trace in one transaction, its tables derived on the way in.

A file is parsed as a stream of Arrow batches (``kernelscope.parsers.open_trace``) written to a scratch
Parquet file next to the store; its tables are derived with SQL over it by the steps of one registry (derived
tables are scratch Parquet files too), then one transaction inserts them, each sorted. Memory is bounded by
one parser batch plus DuckDB's memory_limit (it spills), not by the trace's size. Any failure rolls the whole
file back: no rows of it remain in any table; the scratch folder is removed in every case.

Where each part lives (this module is the entry point and keeps the names other code imports):

- discovery.py: what the given paths hold (``collect_paths``, ``path_problem``);
- sizing.py: DuckDB threads and memory of every ingest connection, the retry after out of memory;
- staging.py: the scratch folder, the staged events and what is derived from them before the insert;
- derivations.py: the registry of derivation steps (derive.py, splits.py, idle.py, signatures.py,
  collectives.py) that every path runs;
- tracerow.py: a trace's id, ``traces`` row and labels; onetrace.py: one trace (``ingest_file``);
- rundir.py: collector run directories (``ingest_run``); rankrun.py and ranks.py: runs of many ranks.
"""

from __future__ import annotations

import pathlib
import sys
import time

from ..errors import UsageError
from . import logdir, ranks
from .discovery import (
    RUN_RECORD,
    RUN_TRACES,
    collect_paths,
    expand_paths,
    is_run_dir,
    path_problem,
    trace_suffixes,
)
from .engine import LOCAL
from .labels import label_number
from .onetrace import IngestResult, ingest_file, ingest_reader
from .rankrun import ingest_rank_run
from .rundir import RUN_JSON_MAX_BYTES, ingest_run, ingest_run_all
from .sizing import (
    MAX_THREADS,
    MEMORY_ENV,
    MEMORY_PER_THREAD,
    MIN_MEMORY,
    RAM_SHARE,
    THREADS_ENV,
    Resources,
    apply_resources,
    fallback_resources,
    ingest_resources,
    ingest_settings,
    memory_bytes,
    physical_memory_bytes,
    usable_cores,
)
from .tracerow import insert_labels

__all__ = [
    "MAX_THREADS", "MEMORY_ENV", "MEMORY_PER_THREAD", "MIN_MEMORY", "RAM_SHARE", "RUN_JSON_MAX_BYTES", "RUN_RECORD",
    "RUN_TRACES", "THREADS_ENV", "IngestResult", "Resources", "apply_resources", "collect_paths", "expand_paths",
    "fallback_resources", "ingest_file", "ingest_paths", "ingest_rank_run", "ingest_reader", "ingest_resources",
    "ingest_run", "ingest_run_all", "ingest_run_parquet", "ingest_settings", "insert_labels", "is_run_dir",
    "label_number", "memory_bytes", "path_problem", "physical_memory_bytes", "usable_cores",
]


class _Progress:
    """A one-line progress indicator on stderr: only on a terminal, only after the first second."""

    def __init__(self, enabled: bool | None, total_files: int):
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.enabled = bool(enabled)
        self.total = total_files
        self.t0 = time.monotonic()
        self.last = 0.0
        self.shown = False

    def update(self, index: int, path, events: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.t0 < 1.0 or now - self.last < 0.2:
            return
        self.last = now
        name = pathlib.Path(path).name
        sys.stderr.write(
            f"\ringesting [{index + 1}/{self.total}] {name[:40]:<40} {events:>12,} events "
            f"{now - self.t0:7.1f} s"
        )
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def ingest_paths(
    store, paths, *, labels=None, name=None, python_functions=True, progress=None, salvage=False, engine=None
) -> list[IngestResult]:
    """Ingest files, run directories and directories (recursive; see ``collect_paths``), each trace in
    its own transaction; a run directory with ``ingest_run`` (telemetry, provenance, timings, labels).

    A file that fails leaves no rows and the rest still land; content already stored (same sha256 of
    the decompressed bytes) is 'skipped'. ``progress``: None = a progress line on a terminal only,
    after one second; True/False force it on/off. ``engine``: where the rank files of a multi-rank run are
    parsed (``storage.engine.Engine``: the local process pool by default, or Ray).
    """
    items = []
    results: list[IngestResult] = []
    readable = []
    for p in map(pathlib.Path, paths):  # missing, symlink loops, FIFOs, devices: one line each, never opened
        problem = path_problem(p)
        if problem:
            results.append(IngestResult(str(p), "failed", None, problem))
        else:
            readable.append(p)
    empty: list[pathlib.Path] = []
    ncu_items = []  # Nsight Compute CSVs go last: they match the traces ingested before them
    for kind, p in collect_paths(readable, empty):
        problem = path_problem(p)
        if problem:
            results.append(IngestResult(str(p), "failed", None, problem))
        elif kind == "file" and p.is_dir():
            continue
        elif kind == "ncu" or (kind == "file" and p.name.endswith((".csv", ".csv.gz"))):
            ncu_items.append(("file", p))
        else:
            items.append((kind, p))
    for d in empty:
        results.append(IngestResult(
            str(d), "failed", None,
            f"no traces found in {d} (looked for {', '.join('*' + s for s in trace_suffixes())}, Nsight "
            "Compute CSVs and run directories, in every subfolder)"))
    if name is not None and len(items) + len(ncu_items) > 1:
        raise UsageError("--name applies to one trace; give one file or leave --name out")
    given_dirs = [p for p in readable if p.is_dir()]
    runs, handler_files = [], []
    if name is None:  # files of torch's tensorboard_trace_handler: grouped as `dashboard --logdir` does
        handler_files = [p for kind, p in items if kind == "file" and logdir.parse_name(p.name) is not None]
        items = [(kind, p) for kind, p in items if not (kind == "file" and logdir.parse_name(p.name) is not None)]
    if given_dirs and name is None:  # rank traces sharing a folder become one run (storage/ranks.py)
        runs, items = ranks.plan_runs(items, given_dirs)
    items += ncu_items
    bar = _Progress(progress, len(items) + len(runs))
    try:
        if handler_files:
            results.extend(logdir.ingest_handler_files(store, handler_files, labels=labels,
                                                       python_functions=python_functions, salvage=salvage))
        for folder, members in runs:
            results.extend(ingest_rank_run(store, folder, members, labels=labels, python_functions=python_functions,
                                           salvage=salvage, engine=engine or LOCAL))
        for i, (kind, p) in enumerate(items):
            on_batch = lambda n, i=i, p=p: bar.update(i, p, n)  # noqa: E731
            if kind == "run":  # every pass of the run: its Kineto trace, nsys export, ncu CSV (storage/rundir.py)
                parts = ingest_run_all(store, p, name=name, labels=labels,
                                       python_functions=python_functions, salvage=salvage, _on_batch=on_batch)
            else:
                parts = [ingest_file(store, p, labels=labels, name=name,
                                     python_functions=python_functions, salvage=salvage, _on_batch=on_batch)]
            results.extend(parts)
            bar.update(i, p, sum(r.events for r in parts))
    finally:
        bar.done()
    return results


def ingest_run_parquet(paths, out, *, labels=None, python_functions=True, salvage=False,
                       engine=None) -> list[IngestResult]:
    """``ingest RUN --parquet OUT``: one run of ranks written as a Parquet dataset (the layout of ``export
    --parquet``, docs/export.md) at ``out`` instead of into a store. Each rank's worker, or Ray task, writes
    that rank's partitions of every derived table itself; a scratch store beside ``out`` (``.<out>.ingest``,
    removed afterwards) holds the run's own rows (traces, labels, runs, rank clocks, telemetry), which are then
    exported next to them with the manifest. Analyse it in place with ``--db OUT``. ``out`` must be absent or
    empty; a failed ingest leaves it as it was. ``paths`` must hold exactly one run of ranks."""
    import shutil

    from .export import export_parquet
    from .store import open_store

    out = pathlib.Path(out).expanduser().resolve()  # `--parquet .`: its scratch goes beside it, not inside
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--parquet {out}: exists and is not an empty folder; choose a new folder")
    paths = [pathlib.Path(p) for p in paths]  # (counted again below: a generator would be spent)
    readable = [p for p in paths if not path_problem(p)]
    given_dirs = [p for p in readable if p.is_dir()]
    items = [(kind, p) for kind, p in collect_paths(readable, []) if not (kind == "file" and p.is_dir())]
    runs, rest = ranks.plan_runs(items, given_dirs) if given_dirs else ([], items)
    if len(runs) != 1 or rest or len(readable) != len(paths):
        raise UsageError(f"--parquet writes one run of ranks: give the folder of its rank traces (found "
                         f"{len(runs)} run(s) of ranks and {len(rest)} other trace(s) in {len(readable)} "
                         f"readable path(s))")
    folder, members = runs[0]
    created = not out.exists()
    work = out.parent / f".{out.name}.ingest"
    shutil.rmtree(work, ignore_errors=True)  # left by a killed ingest into the same folder
    work.mkdir(parents=True)
    ok = False
    try:
        out.mkdir(parents=True, exist_ok=True)
        with open_store(work / "run.duckdb") as store:
            results = ingest_rank_run(store, folder, members, labels=labels, python_functions=python_functions,
                                      salvage=salvage, engine=engine or LOCAL, publish=out)
            if results and all(r.status == "ingested" for r in results):
                run_id = store.con.execute("SELECT run_id FROM runs").fetchone()[0]
                export_parquet(store, out, run=run_id, published={p.name for p in out.iterdir()})
                ok = True
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not ok:  # nothing half-written is left
            shutil.rmtree(out, ignore_errors=True)
            if not created:
                out.mkdir(exist_ok=True)
