"""One trace into the store: parse it into staged events, derive its tables with the registry's steps
(storage/derivations.py) and insert them with its ``traces`` row and labels in ONE transaction
(``ingest_reader``, ``ingest_file``). Any failure rolls the trace back: no rows of it remain in any table; the
scratch folder is removed in every case. DuckDB running out of memory derives the tables again with fewer
threads and less memory (storage/sizing.py).
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from dataclasses import dataclass
from typing import Literal

from ..errors import KernelscopeError, ParseError, StoreError
from ..parsers.schema import TraceMeta
from . import derivations, rawfacts, sizing, staging
from .tracerow import (
    TraceInput,
    TraceRecord,
    hash_file,
    insert_labels,
    new_trace_id,
    stored_id,
)

Status = Literal["ingested", "skipped", "failed"]


@dataclass
class IngestResult:
    """What ingest did with one path: its status, the trace id (stored or already stored), one line saying
    why or how, the events read and the seconds it took."""

    path: str
    status: Status
    trace_id: str | None
    message: str
    events: int = 0
    seconds: float = 0.0

    @property
    def notes(self) -> str:
        """The message less its leading ``ingested as <id>`` (for lines that print the id already)."""
        head, _, rest = self.message.partition("; ")
        return rest if head == f"ingested as {self.trace_id}" else self.message


def failed(path, exc: BaseException, t0: float) -> IngestResult:
    """A 'failed' result whose message is the error's first line, less a leading ``path: ``."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    src = str(path)
    if msg.startswith(src + ": "):
        msg = msg[len(src) + 2 :]
    return IngestResult(str(path), "failed", None, msg, 0, time.perf_counter() - t0)


class _Clock:
    """Seconds per ingest stage, written to stderr when KERNELSCOPE_TIMINGS is set (profiling aid)."""

    def __init__(self):
        self.enabled = bool(os.environ.get("KERNELSCOPE_TIMINGS"))
        self.last = time.perf_counter()
        self.laps: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        rss = ""
        if self.enabled:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            rss = f" (peak {peak} MB)"
        self.laps.append((name + rss, now - self.last))
        self.last = now

    def report(self, path) -> None:
        if self.enabled:
            laps = ", ".join(f"{n} {s:.2f}" for n, s in self.laps)
            sys.stderr.write(f"kernelscope: timings {pathlib.Path(path).name}: {laps} s\n")


def ingest_reader(
    store,
    reader,
    path,
    *,
    labels=None,
    name=None,
    run_id=None,
    provenance=None,
    extra=None,
    on_batch=None,
) -> IngestResult:
    """Ingest one parsed trace (an iterable of RAW_EVENTS batches with ``.meta``) in one transaction.

    ``extra(con, trace_id)``, when given, runs inside the same transaction (telemetry, timings).
    """
    given = TraceInput(name=name, run_id=run_id, provenance=provenance, labels=labels, extra=extra)
    path = pathlib.Path(path)
    t0 = time.perf_counter()
    con = store.con
    if store.read_only:
        raise StoreError(f"store {store.path} is open read-only; cannot ingest")
    clock = _Clock()
    with staging.scratch(store) as scratch:
        raw = scratch / "raw.parquet"
        staged_files = staging.stage(reader, raw, on_batch)
        rows = staged_files.rows
        clock.lap("parse+stage")
        staging.raw_view(con, staged_files)
        meta: TraceMeta = reader.meta
        content_hash = meta.content_hash or hash_file(path)
        existing = stored_id(con, content_hash)
        if existing is not None:
            return IngestResult(
                str(path), "skipped", existing, f"already stored as {existing}", rows,
                time.perf_counter() - t0,
            )
        sizing.small_trace_threads(con, rows)
        facts = rawfacts.raw_facts(con, meta)
        retried = []
        while True:
            try:
                staged = staging.derive_staged(con, scratch, meta, path, facts, clock)
                trace_id = _insert(con, clock, meta, path, content_hash, rows, staged, given)
                break
            except Exception as exc:
                nxt = sizing.retry_settings(con, exc)
                if nxt is None:
                    raise
                retried.append(nxt)
                clock.lap(f"out of memory, again with {nxt.threads} threads and {nxt.memory}")
    clock.lap("cleanup")
    clock.report(path)
    msg = f"ingested as {trace_id}"
    if retried:
        msg += (f"; DuckDB ran out of memory and derived the tables again with {retried[-1].threads} "
                f"thread{'s' if retried[-1].threads != 1 else ''} and {retried[-1].memory}")
    for note in rawfacts.facts_notes(facts):
        msg += f"; {note}"
    return IngestResult(str(path), "ingested", trace_id, msg, rows, time.perf_counter() - t0)


def _insert(con, clock: _Clock, meta: TraceMeta, path: pathlib.Path, content_hash: str, rows: int,
            staged: staging.Staged, given: TraceInput) -> str:
    """Insert the trace derived from the staged events in one transaction: every registered derivation step,
    its ``traces`` row, its labels and ``given.extra``; returns its trace id."""
    warnings = staging.trace_warnings(meta, staged)
    con.execute("BEGIN TRANSACTION")
    try:
        trace_id = new_trace_id(con, content_hash)
        derivations.run_steps(con, trace_id, staged.base, clock.lap)
        clock.lap("insert")
        TraceRecord.build(trace_id, path, content_hash, meta, staged, rows, warnings, given).insert(con)
        insert_labels(con, trace_id, given.labels)
        if given.extra is not None:
            given.extra(con, trace_id)
        con.execute("COMMIT")
        clock.lap("commit")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except Exception:
            pass
        raise
    return trace_id


def ingest_file(
    store,
    path,
    *,
    labels=None,
    name=None,
    run_id=None,
    provenance=None,
    python_functions=True,
    salvage=False,
    _on_batch=None,
    _extra=None,
) -> IngestResult:
    """Parse and ingest one trace file; failures come back as a 'failed' result, never half-stored.
    ``salvage``: a Kineto trace cut short (a job killed while writing it) keeps every complete event before
    the cut and is marked truncated (``traces.truncated``); without it such a file is refused."""
    path = pathlib.Path(path)
    t0 = time.perf_counter()
    if path.name.endswith((".csv", ".csv.gz")):  # Nsight Compute metrics: matched to a stored trace
        from .ncu import ingest_ncu

        r = ingest_ncu(store, path, name=name)
        return IngestResult(r.path, r.status, r.trace_id, r.message, r.kernels, time.perf_counter() - t0)
    with sizing.ingest_settings(store.con):
        try:
            reader = trace_reader(path, python_functions=python_functions, salvage=salvage)
            return ingest_reader(
                store, reader, path, labels=labels, name=name, run_id=run_id,
                provenance=provenance, extra=_extra, on_batch=_on_batch,
            )
        except KernelscopeError as exc:
            return failed(path, exc, t0)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return failed(path, ParseError(f"cannot read the file: {reason}"), t0)
        except Exception as exc:
            if type(exc).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
                raise
            return failed(path, sizing.db_error(path, exc), t0)


def trace_reader(path: pathlib.Path, *, python_functions: bool = True, salvage: bool = False):
    """The reader of one trace (``parsers.open_trace``); a Kineto trace is decoded by worker processes, one per
    usable core but one (``$KERNELSCOPE_PARSE_WORKERS`` forces the count; 1 is the one-process reader), rows
    identical (parsers/kineto/parallel.py)."""
    from ..parsers import open_trace
    from ..parsers.kineto import KinetoReader
    from ..parsers.kineto.parallel import ParallelKinetoReader, parse_workers

    reader = open_trace(path, python_functions=python_functions, salvage=salvage)
    workers = parse_workers(sizing.usable_cores())
    if workers > 1 and type(reader) is KinetoReader:
        return ParallelKinetoReader(path, workers=workers, python_functions=python_functions, salvage=salvage)
    return reader
