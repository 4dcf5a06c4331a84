"""Ingest: trace files -> the store, one transaction per file, links derived on the way in.

A file is parsed as a stream of Arrow batches (``kernelscope.parsers.open_trace``) written to a scratch
Parquet file next to the store; ``derive`` links the events with SQL over it (derived tables are scratch
Parquet files too), then one transaction inserts the event tables, each sorted. Memory is bounded by one
parser batch plus DuckDB's memory_limit (it spills), not by the trace's size. Any failure rolls the whole
file back: no rows of it remain in any table; the scratch folder is removed in every case.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa

from .. import __version__
from ..errors import KernelscopeError, ParseError, StoreError, UsageError
from ..parsers.schema import RAW_EVENTS, TraceMeta
from . import derivations, derive, ranks, rawfacts, staging

#: Env variables forcing an ingest connection's DuckDB memory_limit / threads (``ingest_resources``).
MEMORY_ENV = "KERNELSCOPE_MEMORY_LIMIT"
THREADS_ENV = "KERNELSCOPE_THREADS"
#: DuckDB threads per ingest connection at most, unless KERNELSCOPE_THREADS says otherwise.
MAX_THREADS = 8
#: DuckDB memory per thread while ingesting (DuckDB's own guidance: at least 125 MB per thread); it spills
#: beyond its limit. On 16 cores a 1.09 GB trace ran out of memory at 8 threads and 128 MB each (then ingested
#: through the fallback, 83 s) and took 30 s at 8 threads and 256 MB each (docs/ingest.md).
MEMORY_PER_THREAD = 256 * 10**6
#: The least memory an ingest connection gets (what 1-2 threads had before threads and memory were sized
#: together: 256 MB).
MIN_MEMORY = 256 * 10**6
#: The share of the machine's (or cgroup's) memory that ingest's DuckDB connections may take together.
RAM_SHARE = 0.25

_NUM_RE = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")


@dataclass
class IngestResult:
    path: str
    status: str  # 'ingested' | 'skipped' | 'failed'
    trace_id: str | None
    message: str
    events: int = 0
    seconds: float = 0.0


def label_number(text: str) -> float | None:
    """The numeric value of a label's text: a finite decimal number, else None ("8" -> 8.0)."""
    if not _NUM_RE.match(text):
        return None
    v = float(text)
    return v if math.isfinite(v) else None


# ---------------------------------------------------------------------------------------------- progress


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


# ------------------------------------------------------------------------------------------------ helpers


@dataclass(frozen=True)
class Resources:
    """What one ingest connection may use: DuckDB ``threads`` and ``memory_limit`` (``memory`` is the text
    DuckDB gets, ``memory_bytes`` its value when known) and a sentence saying how they were chosen."""

    threads: int
    memory: str
    memory_bytes: int | None
    rule: str


def usable_cores() -> int:
    """CPUs this process may run on: its CPU affinity (``taskset``, cgroup cpusets), not the machine's
    count (``os.cpu_count()`` ignores affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def physical_memory_bytes() -> int | None:
    """The machine's RAM, or the cgroup's memory limit when that is lower (containers); None if unknown."""
    total = None
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    for cg in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = pathlib.Path(cg).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            total = int(text) if total is None else min(total, int(text))
    return total


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def memory_bytes(text: str) -> int | None:
    """Bytes of a DuckDB memory size text ('256MB', '4GB', '1GiB'; KB/MB/GB are powers of 1000, as in
    DuckDB); None when it is not one."""
    m = _SIZE_RE.match(text or "")
    factor = _SIZE_UNITS.get(m.group(2).lower()) if m else None
    return None if factor is None else int(float(m.group(1)) * factor)


def _size_text(n: int) -> str:
    return f"{n // 10**6}MB"


def ingest_resources(processes: int = 1) -> Resources:
    """DuckDB threads and memory for one ingest connection, sized together (docs/ingest.md "Memory and
    threads"); every connection ingest opens or uses gets them (``apply_resources``).

    - threads: ``$KERNELSCOPE_THREADS`` when set, else the usable cores (CPU affinity) shared by
      ``processes`` parallel parsers, at most ``MAX_THREADS``;
    - memory: ``$KERNELSCOPE_MEMORY_LIMIT`` when set, else ``MEMORY_PER_THREAD`` per thread, at least
      ``MIN_MEMORY``, at most ``RAM_SHARE`` of the machine's (or cgroup's) memory over ``processes``;
    - when the memory (given, or capped by RAM) cannot hold ``MEMORY_PER_THREAD`` per thread, the threads
      are cut to fit it, unless ``$KERNELSCOPE_THREADS`` forces them.

    DuckDB keeps some buffers per thread that cannot spill (hash tables, sort runs and window partitions
    being worked on), so a fixed limit with a thread per core ran out of memory on many cores: 256 MB held
    2 threads on a 1.1 GB trace but not 16 threads on a 120 MB one (docs/ingest.md). What still runs out
    of memory is derived again with less (``fallback_resources``)."""
    processes = max(1, int(processes))
    env_threads = (os.environ.get(THREADS_ENV) or "").strip()
    forced_threads = None
    if env_threads:
        if not env_threads.isdigit() or not 1 <= int(env_threads) <= 1024:
            raise UsageError(f"{THREADS_ENV}={env_threads!r} is not a thread count (a whole number from 1 to 1024)")
        forced_threads = int(env_threads)
    cores = usable_cores()
    threads = forced_threads or max(1, min(MAX_THREADS, cores // processes))
    ram = physical_memory_bytes()
    cap = max(MIN_MEMORY, int(ram * RAM_SHARE) // processes) if ram else None
    env_memory = (os.environ.get(MEMORY_ENV) or "").strip()
    if env_memory:
        memory, mem_bytes = env_memory, memory_bytes(env_memory)
        how = f"{MEMORY_ENV}={env_memory}"
    else:
        mem_bytes = max(MIN_MEMORY, MEMORY_PER_THREAD * threads)
        if cap is not None and mem_bytes > cap:
            mem_bytes = cap
        memory = _size_text(mem_bytes)
        how = (f"{MEMORY_PER_THREAD // 10**6}MB per thread, at least {MIN_MEMORY // 10**6}MB"
               + (f", at most {RAM_SHARE:.0%} of RAM" + (f" over {processes} processes" if processes > 1 else "")
                  if cap is not None else ""))
    if forced_threads is None and mem_bytes is not None:
        fit = max(1, mem_bytes // MEMORY_PER_THREAD)
        threads = min(threads, fit)
    why = (f"{THREADS_ENV}={forced_threads}" if forced_threads else
           f"{cores} usable cores" + (f" over {processes} processes" if processes > 1 else "")
           + f", at most {MAX_THREADS}, at most one per {MEMORY_PER_THREAD // 10**6}MB")
    return Resources(threads, memory, mem_bytes, f"threads {threads} ({why}); memory_limit {memory} ({how})")


def apply_resources(con, res: Resources) -> None:
    """SET a connection's threads and memory_limit (and preserve_insertion_order off) for ingest."""
    try:
        con.execute(f"SET memory_limit = '{_safe_setting(res.memory)}'")
    except Exception as exc:
        raise UsageError(
            f"{MEMORY_ENV}={res.memory!r} is not a memory size DuckDB accepts (e.g. 1GB): "
            f"{str(exc).splitlines()[0]}"
        ) from None
    con.execute(f"SET threads = {int(res.threads)}")
    con.execute("SET preserve_insertion_order = false")


@contextmanager
def ingest_settings(con, res: Resources | None = None):
    """DuckDB settings for bulk loading (``ingest_resources``), restored afterwards."""
    res = res or ingest_resources()
    apply_resources(con, res)
    try:
        yield res
    finally:
        for name in ("memory_limit", "threads", "preserve_insertion_order"):
            try:
                con.execute(f"RESET {name}")
            except Exception:
                pass


def _safe_setting(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z. ]", "", text)


def _hash_file(path: pathlib.Path) -> str:
    """sha256 of the decompressed content (fallback when the parser gives no content hash)."""
    import gzip

    h = hashlib.sha256()
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _trace_name(path: pathlib.Path) -> str:
    name = path.name
    for suffix in (".json.gz", ".json", ".sqlite.gz", ".gz", ".sqlite", ".nsys-rep", ".parquet"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return name


def _new_trace_id(con, content_hash: str) -> str:
    """First 12 hex digits of the content hash, 4 more per collision with another content."""
    n = 12
    while n < len(content_hash):
        cand = content_hash[:n]
        rows = con.execute("SELECT content_hash FROM traces WHERE trace_id = ?", [cand]).fetchall()
        row = rows[0] if rows else None
        if row is None or row[0] == content_hash:
            return cand
        n += 4
    return content_hash


def _stored_id(con, content_hash: str) -> str | None:
    row = con.execute(
        "SELECT trace_id FROM traces WHERE content_hash = ? LIMIT 1", [content_hash]
    ).fetchall()
    return row[0][0] if row else None


def _json(value) -> str | None:
    if value is None:
        return None
    return json.dumps(value, default=str, allow_nan=False)


def insert_labels(con, trace_id: str, labels: dict | None) -> None:
    """Replace the given keys' labels on a trace: value_text always, value_num when numeric."""
    if not labels:
        return
    rows = []
    for key, value in labels.items():
        key = str(key).strip()
        if not key:
            raise UsageError("a label needs a non-empty key, as key=value")
        text = value if isinstance(value, str) else json.dumps(value) if value is not None else ""
        if isinstance(value, bool):
            text = "true" if value else "false"
        rows.append((trace_id, key, text, label_number(text)))
    con.executemany("DELETE FROM labels WHERE trace_id = ? AND key = ?", [r[:2] for r in rows])
    con.executemany("INSERT INTO labels VALUES (?, ?, ?, ?)", rows)


def _stage(reader, path: pathlib.Path, on_batch=None) -> int:
    """Stream every batch of ``reader`` into the Parquet file ``path`` (RAW_EVENTS); returns rows.

    A writer thread encodes Parquet (pyarrow releases the GIL) while the parser, which holds it, decodes
    the next block: the two overlap on two cores. At most two batches wait in between, so memory holds a
    few batches whatever the trace's size. A parser error stops the writer and propagates.
    """
    import queue
    import threading

    import pyarrow.parquet as pq

    pending: queue.Queue = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def write() -> None:
        try:
            with pq.ParquetWriter(str(path), RAW_EVENTS, compression="lz4") as writer:
                while (batch := pending.get()) is not None:
                    writer.write_batch(batch)
        except BaseException as exc:  # reported to the parser's thread; keep draining so it never blocks
            failure.append(exc)
            while pending.get() is not None:
                pass

    writer = threading.Thread(target=write, name="kernelscope-stage", daemon=True)
    writer.start()
    rows = 0
    try:
        for batch in reader:
            if failure:
                break
            if batch.num_rows == 0:
                continue
            if batch.schema != RAW_EVENTS:
                batch = _conform(batch)
            pending.put(batch)
            rows += batch.num_rows
            if on_batch is not None:
                on_batch(rows)
    finally:
        pending.put(None)
        writer.join()
    if failure:
        raise failure[0]
    return rows


@contextmanager
def _scratch(store):
    """A scratch folder next to the store (same disk, no /tmp quota), ``.<store name>.ingest-*``,
    removed afterwards, also on failure; DuckDB's TEMP views over its files are dropped too.

    We hold the store's write lock, so an older folder of that name was left by a killed ingest of
    this store: it is removed first.
    """
    import shutil
    import tempfile

    store_path = pathlib.Path(store.path).resolve()
    prefix = f".{store_path.name}.ingest-"
    for stale in store_path.parent.glob(prefix + "*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    try:
        folder = tempfile.mkdtemp(prefix=prefix, dir=store_path.parent)
    except OSError:
        folder = tempfile.mkdtemp(prefix="kernelscope-ingest-")
    try:
        yield pathlib.Path(folder)
    finally:
        _drop_staging(store.con)
        shutil.rmtree(folder, ignore_errors=True)


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


def _sql_path(path: pathlib.Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Reorder/cast a batch to RAW_EVENTS (missing nullable columns become null)."""
    cols = []
    for f in RAW_EVENTS:
        idx = batch.schema.get_field_index(f.name)
        if idx < 0:
            if not f.nullable:
                raise ParseError(f"parser batch lacks the required column {f.name!r}")
            cols.append(pa.nulls(batch.num_rows, f.type))
        else:
            cols.append(batch.column(idx).cast(f.type))
    return pa.RecordBatch.from_arrays(cols, schema=RAW_EVENTS)


def _drop_staging(con) -> None:
    for t in ("ks_raw", "ks_raw_in", "ks_open", "ks_links", "ks_launch"):
        try:
            con.execute(f"DROP VIEW IF EXISTS {t}")
        except Exception:
            pass


# ------------------------------------------------------------------------------------------------- ingest


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
    path = pathlib.Path(path)
    t0 = time.perf_counter()
    con = store.con
    if store.read_only:
        raise StoreError(f"store {store.path} is open read-only; cannot ingest")
    clock = _Clock()
    with _scratch(store) as scratch:
        raw = scratch / "raw.parquet"
        rows = _stage(reader, raw, on_batch)
        clock.lap("parse+stage")
        staging.raw_view(con, raw)
        meta: TraceMeta = reader.meta
        content_hash = meta.content_hash or _hash_file(path)
        existing = _stored_id(con, content_hash)
        if existing is not None:
            return IngestResult(
                str(path), "skipped", existing, f"already stored as {existing}", rows,
                time.perf_counter() - t0,
            )
        facts = rawfacts.raw_facts(con, meta)
        retried = []
        while True:
            try:
                trace_id = _derive_and_insert(
                    con, scratch, clock, meta, path, name, run_id, provenance, content_hash, rows, facts,
                    labels, extra)
                break
            except Exception as exc:  # noqa: BLE001 -- out of memory: again with fewer threads (same memory)
                nxt = _retry_settings(con, exc)
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


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryException" or "Out of Memory" in str(exc).split("\n", 1)[0]


def fallback_resources(res: Resources, memory_forced: bool) -> Resources | None:
    """What to try after DuckDB ran out of memory with ``res``: at most 2 threads and the least memory
    (``MIN_MEMORY``; a limit given in KERNELSCOPE_MEMORY_LIMIT stays), then 1 thread; None when that ran.

    Less memory, not more: DuckDB picks in-memory or spilling strategies from the limit, and a limit just
    above what it estimates it needs is the one that fails (a 1.1 GB trace: 2 threads failed at 1 GB and
    ingested at 256 MB, 512 MB and 2 GB). At 256 MB it spills from the start; that held a 2.4 GB rank trace."""
    mem = res.memory_bytes
    if res.threads > 2 or (not memory_forced and mem is not None and mem > MIN_MEMORY):
        low = res if memory_forced else dataclasses.replace(res, memory=_size_text(MIN_MEMORY), memory_bytes=MIN_MEMORY)
        return dataclasses.replace(low, threads=min(res.threads, 2), rule="fallback after out of memory")
    if res.threads > 1:
        return dataclasses.replace(res, threads=1, rule="fallback after out of memory")
    return None


def _retry_settings(con, exc: BaseException) -> Resources | None:
    """After ``exc``: when it is DuckDB running out of memory and a smaller setting is left
    (``fallback_resources``), clear what the failed attempt left, SET it on ``con`` and return it."""
    if not _is_oom(exc):
        return None
    try:
        threads = int(con.execute("SELECT current_setting('threads')").fetchone()[0])
        mem_text = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    except Exception:  # noqa: BLE001
        return None
    mem = _duckdb_bytes(mem_text)  # DuckDB shows '244.1 MiB' for the 256MB it was given: whole MB again
    now = Resources(threads, f"{round(mem / 10**6)}MB" if mem else mem_text,
                    round(mem / 10**6) * 10**6 if mem else None, "")
    nxt = fallback_resources(now, bool((os.environ.get(MEMORY_ENV) or "").strip()))
    if nxt is None:
        return None
    _clear_failed_attempt(con)
    apply_resources(con, nxt)
    return nxt


def _duckdb_bytes(text: str) -> int | None:
    """Bytes of DuckDB's own rendering of a size ('953.6 MiB', '1.8 GiB')."""
    return memory_bytes(text.replace(" ", ""))


def _clear_failed_attempt(con) -> None:
    """Drop what a failed derive may leave on the connection (its temporary tables) and checkpoint, so the
    next attempt starts from the memory a fresh one has (blocks the rolled-back transaction wrote are freed)."""
    for t in ("ks_idle_hw", "ks_idle_kept", "ks_idle_pieces", "ks_rank_map"):
        try:
            con.execute(f"DROP TABLE IF EXISTS {t}")
        except Exception:  # noqa: BLE001
            pass
    try:
        con.execute("CHECKPOINT")
    except Exception:  # noqa: BLE001 -- an in-memory worker database has nothing to checkpoint
        pass


def _derive_and_insert(con, scratch, clock, meta, path, name, run_id, provenance, content_hash, rows, facts,
                       labels, extra) -> str:
    """Derive the links of the staged trace (``ks_raw``) and insert it in one transaction; its trace id."""
    rawfacts.check_correlations(con, str(path))
    crossing = derive.derive_links(con, scratch)
    clock.lap("links")
    derive.build_launch_table(con, scratch)
    clock.lap("launch table")
    warnings = list(meta.warnings or [])
    if crossing:
        warnings.append(
            f"{crossing} operators/annotations/runtime calls are not nested in the interval that "
            "encloses their start on their thread (partial overlap); their links follow the count "
            "of intervals open at their start"
        )
    missing_ts = rawfacts.untimed_count(con)
    if missing_ts:
        warnings.append(f"{missing_ts} timed events had no timestamp; kept in other_events only")
    warnings.extend(rawfacts.facts_warnings(facts, meta))
    base = int(meta.base_time_ns or 0)
    offset, note = rawfacts.clock_offset(con, base)
    if note:
        warnings.append(note)
    start_ns, end_ns = rawfacts.trace_span(con, base)
    clock.lap("checks")
    con.execute("BEGIN TRANSACTION")
    try:
        trace_id = _new_trace_id(con, content_hash)
        derivations.run_steps(con, trace_id, base)
        clock.lap("insert")
        _insert_trace_row(
            con, trace_id, meta, path, name, run_id, provenance, content_hash, base, start_ns,
            end_ns, warnings, offset, rows, facts=facts,
        )
        insert_labels(con, trace_id, labels)
        if extra is not None:
            extra(con, trace_id)
        con.execute("COMMIT")
        clock.lap("commit")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except Exception:
            pass
        raise
    return trace_id


def _insert_trace_row(
    con, trace_id, meta, path, name, run_id, provenance, content_hash, base, start_ns, end_ns,
    warnings, offset, rows, rank=None, rank_source=None, world_size=None, facts=None,
) -> None:
    if rank is None:
        rank = meta.rank if meta.rank is not None else 0
        rank_source = "distributedInfo" if meta.rank is not None else "default"
    con.execute(
        """INSERT INTO traces (trace_id, name, source, content_hash, format, run_id, rank,
               world_size, rank_source, base_time_ns, start_ns, end_ns, device_properties,
               distributed_info, provenance, meta, warnings, dropped_notes, clock_offset_ns,
               events, ingested_ns, kernelscope_version, truncated, negative_durations, set_aside)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            trace_id,
            name or _trace_name(path),
            str(path.resolve()),
            content_hash,
            meta.format,
            run_id,
            int(rank),
            meta.world_size if world_size is None else world_size,
            rank_source,
            base,
            start_ns,
            end_ns,
            _json(meta.device_properties or []),
            _json(meta.distributed_info),
            _json(provenance),
            _json(meta.extra or {}),
            _json(warnings),
            _json(list(meta.dropped_notes or [])),
            offset,
            int(meta.events or rows),
            time.time_ns(),
            __version__,
            _json((facts or {}).get("truncated")),
            _json((facts or {}).get("negative_durations") or {}),
            _json((facts or {}).get("set_aside") or {}),
        ],
    )


def _db_error(path, exc: BaseException, rank_files: bool = False) -> StoreError:
    """A DuckDB error while deriving or inserting a trace, as one line (out of memory: what to change)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    msg = f"{path}: DuckDB failed while deriving the trace's tables: {first}"
    if "Out of Memory" in first or type(exc).__name__ == "OutOfMemoryException":
        try:
            res = ingest_resources()
            now = f"now {res.memory} for {res.threads} thread{'s' if res.threads != 1 else ''}"
        except UsageError:
            now = "now unreadable"
        msg += (f"; give ingest more memory ({MEMORY_ENV}, {now}, e.g. {MEMORY_ENV}=2GB) or fewer threads "
                f"({THREADS_ENV}=2)"
                + (" or parse fewer rank files at once (KERNELSCOPE_INGEST_WORKERS=1)" if rank_files else ""))
    return StoreError(msg)


def _fail(path, exc: BaseException, t0: float) -> IngestResult:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    src = str(path)
    if msg.startswith(src + ": "):
        msg = msg[len(src) + 2 :]
    return IngestResult(str(path), "failed", None, msg, 0, time.perf_counter() - t0)


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
    from ..parsers import open_trace

    path = pathlib.Path(path)
    t0 = time.perf_counter()
    if path.name.endswith((".csv", ".csv.gz")):  # Nsight Compute metrics: matched to a stored trace
        from .ncu import ingest_ncu

        r = ingest_ncu(store, path, name=name)
        return IngestResult(r.path, r.status, r.trace_id, r.message, r.kernels, time.perf_counter() - t0)
    with ingest_settings(store.con):
        try:
            reader = open_trace(path, python_functions=python_functions, salvage=salvage)
            return ingest_reader(
                store, reader, path, labels=labels, name=name, run_id=run_id,
                provenance=provenance, extra=_extra, on_batch=_on_batch,
            )
        except KernelscopeError as exc:
            return _fail(path, exc, t0)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return _fail(path, ParseError(f"cannot read the file: {reason}"), t0)
        except Exception as exc:  # noqa: BLE001 -- DuckDB's own errors (e.g. out of memory): one line, not a traceback
            if type(exc).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
                raise
            return _fail(path, _db_error(path, exc), t0)


def _trace_suffixes() -> tuple[str, ...]:
    try:
        from ..parsers import TRACE_SUFFIXES

        return tuple(TRACE_SUFFIXES)
    except ImportError:
        return (".json", ".json.gz")


#: The files a collector run directory holds besides telemetry: its record and its trace.
RUN_RECORD = "run.json"
RUN_TRACES = ("trace.json.gz", "trace.json")


def is_run_dir(folder) -> bool:
    """A collector run directory: run.json beside trace.json.gz or trace.json. A run.json that is there but
    is not a regular file (a FIFO, a dangling link) still makes it one, so that reading it refuses it in one
    line instead of ingesting the trace without its record."""
    folder = pathlib.Path(folder)
    return os.path.lexists(folder / RUN_RECORD) and not (folder / RUN_RECORD).is_dir() and any(
        (folder / n).is_file() for n in RUN_TRACES)


def path_problem(path) -> str | None:
    """Why a path given to ingest cannot be read, in words, or None for a regular file or a directory:
    missing, a symlink loop, or not a regular file (a FIFO would block the reader forever, a device never
    ends)."""
    import errno
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop (too many levels of symbolic links); point it at a trace file"
        if exc.errno == errno.ENOENT:
            return "no such file or directory" + (" (a dangling symlink)" if os.path.islink(path) else "")
        return f"cannot read it ({exc.strerror})"
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return f"{what}, not a regular file; give a trace file (copy the data into a file first)"


def _is_ncu_csv(path: pathlib.Path) -> bool:
    """A ``.csv``/``.csv.gz`` whose first bytes are an Nsight Compute export (other CSVs are not traces)."""
    from ..errors import KernelscopeError
    from ..parsers import NCU_SUFFIXES, _peek
    from ..parsers.ncu import looks_like_ncu

    if not path.name.endswith(NCU_SUFFIXES):
        return False
    try:
        return looks_like_ncu(_peek(path)) is True
    except (KernelscopeError, OSError):
        return False


def collect_paths(paths, empty: list | None = None) -> list[tuple[str, pathlib.Path]]:
    """What to ingest, as ('run', folder), ('file', path), ('export', folder) or ('ncu', csv), in the
    order given (walks sorted).

    A directory is walked recursively: a run directory in it (``is_run_dir``) is one 'run'; its
    run.json and trace.json(.gz) are never ingested on their own; any other file whose name ends in a
    trace suffix is a 'file' (a stray run.json is not a trace and is left out); a ``.csv``/``.csv.gz``
    whose content is an Nsight Compute export is an 'ncu' (as ``ingest FILE`` takes it; other CSVs,
    e.g. ``nsys stats`` output, are left out). Only regular files are taken in a walk (FIFOs, devices,
    dangling links and symlink loops are left out). A given run directory, or a given file inside one
    that is its run.json or trace, is that 'run'. An Nsight Systems Parquet export
    (``parsers.parquet_dir_kind`` 'nsys'; given, or met in a walk) is one ('export', folder), read by
    ``ingest_file``; a given folder of Parquet files only is one too (its reader says it is not an nsys
    export). Each item appears once. ``empty``, when given, receives each given directory in which
    nothing was found.
    """
    from ..parsers import parquet_dir_kind

    suffixes = _trace_suffixes()
    out: list[tuple[str, pathlib.Path]] = []
    seen: set[tuple[str, pathlib.Path]] = set()

    def add(kind: str, path: pathlib.Path) -> None:
        key = (kind, pathlib.Path(os.path.realpath(path)))  # realpath: no error on a symlink loop
        if key not in seen:
            seen.add(key)
            out.append((kind, path))

    for p in map(pathlib.Path, paths):
        if p.is_dir():
            if is_run_dir(p):
                add("run", p)
                continue
            if parquet_dir_kind(p) is not None:
                add("export", p)
                continue
            found = []
            for f in p.rglob("*"):
                if f.is_dir() and parquet_dir_kind(f) == "nsys":
                    found.append(("export", f))
                    continue
                if not f.is_file():
                    continue
                if not f.name.endswith(suffixes):
                    if _is_ncu_csv(f):
                        found.append(("ncu", f))
                    continue
                if is_run_dir(f.parent):
                    if f.name == RUN_RECORD or f.name in RUN_TRACES:
                        found.append(("run", f.parent))
                        continue
                elif f.name == RUN_RECORD:
                    continue
                found.append(("file", f))
            if not found and empty is not None:
                empty.append(p)
            for kind, f in sorted(set(found), key=lambda kf: (str(kf[1]), kf[0])):
                add(kind, f)
        elif (p.name == RUN_RECORD or p.name in RUN_TRACES) and is_run_dir(p.parent):
            add("run", p.parent)
        else:
            add("file", p)
    return out


def expand_paths(paths) -> list[pathlib.Path]:
    """The plain trace files ``collect_paths`` finds (run directories and their files left out)."""
    return [p for kind, p in collect_paths(paths) if kind == "file"]


def ingest_paths(
    store, paths, *, labels=None, name=None, python_functions=True, progress=None, salvage=False
) -> list[IngestResult]:
    """Ingest files, run directories and directories (recursive; see ``collect_paths``), each trace in
    its own transaction; a run directory with ``ingest_run`` (telemetry, provenance, timings, labels).

    A file that fails leaves no rows and the rest still land; content already stored (same sha256 of
    the decompressed bytes) is 'skipped'. ``progress``: None = a progress line on a terminal only,
    after one second; True/False force it on/off.
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
            f"no traces found in {d} (looked for {', '.join('*' + s for s in _trace_suffixes())}, Nsight "
            "Compute CSVs and run directories, in every subfolder)"))
    if name is not None and len(items) + len(ncu_items) > 1:
        raise UsageError("--name applies to one trace; give one file or leave --name out")
    given_dirs = [p for p in readable if p.is_dir()]
    runs = []
    if given_dirs and name is None:  # rank traces sharing a folder become one run (storage/ranks.py)
        runs, items = ranks.plan_runs(items, given_dirs)
    items += ncu_items
    bar = _Progress(progress, len(items) + len(runs))
    try:
        for folder, members in runs:
            results.extend(ingest_rank_run(store, folder, members, labels=labels,
                                           python_functions=python_functions, salvage=salvage))
        for i, (kind, p) in enumerate(items):
            on_batch = lambda n, i=i, p=p: bar.update(i, p, n)  # noqa: E731
            if kind == "run":
                res = ingest_run(store, p, name=name, labels=labels,
                                 python_functions=python_functions, salvage=salvage, _on_batch=on_batch)
            else:
                res = ingest_file(store, p, labels=labels, name=name,
                                  python_functions=python_functions, salvage=salvage, _on_batch=on_batch)
            results.append(res)
            bar.update(i, p, res.events)
    finally:
        bar.done()
    return results


# ---------------------------------------------------------------------------------------------- runs

_TELEMETRY_COLUMNS = {
    "device_uuid": pa.string(),
    "device_index": pa.int32(),
    "ts_ns": pa.int64(),
    "power_mw": pa.int64(),
    "power_instant_mw": pa.int64(),
    "energy_mj": pa.int64(),
    "sm_clock_mhz": pa.int32(),
    "mem_clock_mhz": pa.int32(),
    "gpu_util_pct": pa.int32(),
    "mem_util_pct": pa.int32(),
    "mem_used_bytes": pa.int64(),
    "temperature_c": pa.int32(),
    "throttle_reasons": pa.int64(),
}


def _read_telemetry(path: pathlib.Path) -> pa.Table:
    import pyarrow.parquet as pq

    problem = path_problem(path)
    if problem:  # a FIFO would block the Parquet reader forever
        raise ParseError(f"{path}: {problem}")
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise ParseError(f"{path}: not a readable Parquet file: {str(exc).splitlines()[0]}") from None
    if "ts_ns" not in table.column_names:
        raise ParseError(f"{path}: telemetry has no ts_ns column; it was not written by kernelscope")
    cols = {}
    for col, typ in _TELEMETRY_COLUMNS.items():
        if col in table.column_names:
            try:
                cols[col] = table.column(col).cast(typ)
            except Exception:
                raise ParseError(f"{path}: telemetry column {col} cannot be read as {typ}") from None
        else:
            cols[col] = pa.nulls(table.num_rows, typ)
    return pa.table(cols)


#: A run.json larger than this is not a collector's run record (ours are a few KB to a few MB).
RUN_JSON_MAX_BYTES = 64 << 20


def _read_run_json(path: pathlib.Path) -> dict:
    """run.json as a dict, its fields checked (``_check_run_json``); ParseError naming the file for a
    FIFO, an oversized file, invalid JSON or a field of the wrong type."""
    if not path.exists() and not path.is_symlink():
        return {}
    problem = path_problem(path)
    if problem:
        raise ParseError(f"{path}: {problem}")
    if path.stat().st_size > RUN_JSON_MAX_BYTES:
        raise ParseError(f"{path}: run.json is larger than {RUN_JSON_MAX_BYTES >> 20} MB; it is not a run record")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"{path}: not valid JSON ({str(exc).splitlines()[0]}); fix or remove run.json") from None
    except RecursionError:
        raise ParseError(f"{path}: run.json is nested too deeply to read; fix or remove it") from None
    except OSError as exc:
        raise ParseError(f"{path}: cannot read run.json ({exc.strerror or exc})") from None
    if not isinstance(data, dict):
        raise ParseError(f"{path}: run.json must hold a JSON object, not {_json_type(data)}")
    _check_run_json(path, data)
    return data


def _json_type(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _check_run_json(path, data: dict) -> None:
    """The fields ingest reads, by type: name/run_id strings, labels and provenance objects, timings a
    list of objects (``_timing_rows`` checks each). Absent or null is fine."""
    want = {"name": (str,), "run_id": (str,), "labels": (dict,), "provenance": (dict,), "timings": (list,)}
    for key, types in want.items():
        value = data.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            what = {str: "a string", dict: "an object", list: "a list"}[types[0]]
            raise ParseError(f"{path}: run.json's {key!r} must be {what}, not {_json_type(value)}; fix run.json")
    for key in ("labels", "provenance"):
        try:
            json.dumps(data.get(key), allow_nan=False)
        except ValueError:
            raise ParseError(f"{path}: run.json's {key!r} holds NaN or Infinity; fix run.json") from None
    for k in data.get("labels") or {}:
        if not str(k).strip():
            raise ParseError(f"{path}: run.json's 'labels' has an empty key; fix run.json")
    _timing_rows("", data.get("timings"), path)  # checked before the trace is parsed, not inside its transaction


def _timing_rows(trace_id: str, timings, path) -> list[tuple]:
    def number(t: dict, key: str, kind, lo: float, hi: float):
        v = t.get(key)
        if v is None:
            return None
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v < hi
        if not ok or (kind is int and not float(v).is_integer()):
            raise ParseError(
                f"{path}: timings entry {i}: {key!r} must be {'an integer' if kind is int else 'a number'} "
                f"in range, not {json.dumps(v, default=str)[:40]}; fix run.json")
        return kind(v)

    rows = []
    for i, t in enumerate(timings or []):
        if not isinstance(t, dict) or "kind" not in t:
            raise ParseError(f"{path}: each timings entry needs a 'kind'")
        rows.append(
            (
                trace_id,
                str(t["kind"]),
                number(t, "iteration", int, -(2**31), 2**31),
                number(t, "dur_ns", int, -(2**63), 2**63),
                number(t, "energy_mj", float, -math.inf, math.inf),
            )
        )
    return rows


def ingest_run(
    store, run_dir, *, name=None, labels=None, python_functions=True, salvage=False, _on_batch=None
) -> IngestResult:
    """Ingest a collector run directory (trace.json.gz [+ telemetry.parquet] [+ run.json]) as one trace,
    with its telemetry, provenance, timings and labels, in ONE transaction.

    Name: ``name``, else run.json's "name", else the folder's name. Labels: run.json's, then ``labels``.
    """
    run_dir = pathlib.Path(run_dir)
    t0 = time.perf_counter()
    trace = next(
        (run_dir / n for n in RUN_TRACES if (run_dir / n).exists()), None
    )
    if not run_dir.is_dir() or trace is None:
        return _fail(run_dir, ParseError("not a run directory: no trace.json.gz in it"), t0)
    try:
        meta = _read_run_json(run_dir / "run.json")
        telemetry_path = run_dir / "telemetry.parquet"
        telemetry = _read_telemetry(telemetry_path) if telemetry_path.exists() else None
    except KernelscopeError as exc:
        return _fail(run_dir, exc, t0)
    merged = dict(meta.get("labels") or {})
    merged.update(labels or {})

    def extra(con, trace_id):
        if telemetry is not None and telemetry.num_rows:
            tbl = telemetry.add_column(0, "trace_id", pa.array([trace_id] * telemetry.num_rows))
            con.register("ks_telemetry", tbl)
            con.execute(
                "INSERT INTO telemetry SELECT * FROM ks_telemetry ORDER BY device_index, ts_ns"
            )
            con.unregister("ks_telemetry")
        rows = _timing_rows(trace_id, meta.get("timings"), run_dir / "run.json")
        if rows:
            con.executemany("INSERT INTO timings VALUES (?, ?, ?, ?, ?)", rows)

    result = ingest_file(
        store,
        trace,
        labels=merged,
        name=name or meta.get("name") or run_dir.resolve().name,
        run_id=meta.get("run_id"),
        provenance=meta.get("provenance"),
        python_functions=python_functions,
        salvage=salvage,
        _on_batch=_on_batch,
        _extra=extra,
    )
    return result


# ------------------------------------------------------------------------------------ runs of many ranks


def _run_dir_parts(run_dir: pathlib.Path, labels) -> dict:
    """What a collector run directory adds to its trace: name, labels, provenance, host and an ``extra``
    callback inserting telemetry and timings (as ``ingest_run`` does)."""
    meta = _read_run_json(run_dir / "run.json")
    telemetry_path = run_dir / "telemetry.parquet"
    telemetry = _read_telemetry(telemetry_path) if telemetry_path.exists() else None
    merged = dict(meta.get("labels") or {})
    merged.update(labels or {})

    def extra(con, trace_id):
        if telemetry is not None and telemetry.num_rows:
            tbl = telemetry.add_column(0, "trace_id", pa.array([trace_id] * telemetry.num_rows))
            con.register("ks_telemetry", tbl)
            con.execute("INSERT INTO telemetry SELECT * FROM ks_telemetry ORDER BY device_index, ts_ns")
            con.unregister("ks_telemetry")
        rows = _timing_rows(trace_id, meta.get("timings"), run_dir / "run.json")
        if rows:
            con.executemany("INSERT INTO timings VALUES (?, ?, ?, ?, ?)", rows)

    prov = meta.get("provenance") if isinstance(meta.get("provenance"), dict) else None
    return {
        "name": meta.get("name") or run_dir.resolve().name,
        "labels": merged,
        "provenance": meta.get("provenance"),
        "host": (prov or {}).get("hostname"),
        "extra": extra,
    }


#: Rank trace files smaller than this (on disk) are loaded into an in-memory worker DuckDB.
WORKER_IN_MEMORY_BYTES = 32 << 20


def _placeholder(i: int) -> str:
    return f"__rank_job_{i}__"


def _parse_and_derive(path: str, out: str, python_functions: bool, res: Resources | None = None, job: int = 0,
                      salvage: bool = False):
    """Worker: parse one trace into ``out``/raw.parquet, derive its links and fill the event tables
    (``derivations.run_steps``: every registered step, trace_id = ``_placeholder(job)``) in a DuckDB
    file of its own in ``out`` (it spills: memory stays bounded), then write every table it filled to
    ``out``/t_<table>.parquet in its insert order. Returns (TraceMeta, rows, facts): facts holds crossing,
    untimed, clock offset/note, span and ``tables`` (the tables written). ``res``: the connection's threads and
    memory (``ingest_resources`` of the parent, which knows how many workers share the machine)."""
    import duckdb

    from ..parsers import open_trace
    from .store import connect_config, disable_bad_optimizers, migrations

    folder = pathlib.Path(out)
    reader = open_trace(pathlib.Path(path), python_functions=python_functions, salvage=salvage)
    rows = _stage(reader, folder / "raw.parquet")
    meta = reader.meta
    # a small rank stays in memory (creating the schema in a file costs ~3x more); a large one spills to a file
    small = pathlib.Path(path).stat().st_size < WORKER_IN_MEMORY_BYTES
    res = res or ingest_resources()
    retried = None
    while True:
        con = duckdb.connect(":memory:" if small else str(folder / "w.duckdb"), config=connect_config())
        try:
            con.execute("SET enable_progress_bar = false")
            disable_bad_optimizers(con)
            apply_resources(con, res)  # as the one-file path derives (bounded memory)
            for _version, _name, sql in migrations():
                con.execute(sql)
            staging.raw_view(con, folder / "raw.parquet")
            facts = rawfacts.raw_facts(con, meta)
            rawfacts.check_correlations(con, str(path))
            crossing = derive.derive_links(con, folder)
            derive.build_launch_table(con, folder)
            base = int(meta.base_time_ns or 0)
            offset, note = rawfacts.clock_offset(con, base)
            start_ns, end_ns = rawfacts.trace_span(con, base)
            facts.update({"crossing": crossing, "untimed": rawfacts.untimed_count(con), "offset": offset,
                          "note": note, "start_ns": start_ns, "end_ns": end_ns})
            derivations.run_steps(con, _placeholder(job), base)
            filled = [t for (t,) in con.execute(
                """SELECT DISTINCT c.table_name FROM information_schema.columns c
                   JOIN information_schema.tables t ON t.table_name = c.table_name AND t.table_schema = c.table_schema
                   WHERE c.table_schema = 'main' AND t.table_type = 'BASE TABLE' AND c.column_name = 'trace_id'
                   ORDER BY 1""").fetchall()
                if con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]]
            con.execute("SET preserve_insertion_order = true")  # the files keep each table's stored order
            for table in filled:
                con.execute(f"COPY \"{table}\" TO {_sql_path(folder / f't_{table}.parquet')} "
                            "(FORMAT parquet, COMPRESSION lz4)")
            break
        except Exception as exc:  # noqa: BLE001 -- out of memory: again with fewer threads, less memory
            nxt = fallback_resources(res, bool((os.environ.get(MEMORY_ENV) or "").strip())) if _is_oom(exc) else None
            if nxt is None:
                raise
            res = retried = nxt  # a fresh database each attempt: nothing of the failed one is left
        finally:
            con.close()
            for leftover in ("w.duckdb", "w.duckdb.wal"):
                (folder / leftover).unlink(missing_ok=True)
    facts["tables"] = filled
    facts["retried"] = retried
    return meta, rows, facts


def _parse_all(jobs, python_functions: bool, workers: int, salvage: bool = False) -> list:
    """Parse and derive (path, folder) jobs, in ``workers`` spawned processes when > 1; results in job order."""
    def named(path, exc) -> ParseError:  # which rank file failed, in the one line
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ParseError(msg if msg.startswith(str(path)) else f"{path}: {msg}")

    res = ingest_resources(workers)  # threads and memory of each worker's connection, sized together
    if workers <= 1:
        out = []
        for i, (p, o) in enumerate(jobs):
            try:
                out.append(_parse_and_derive(str(p), str(o), python_functions, res, i, salvage))
            except KernelscopeError as exc:
                raise named(p, exc) from None
            except Exception as exc:  # noqa: BLE001 -- DuckDB's errors: one line
                if type(exc).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
                    raise
                raise _db_error(p, exc, rank_files=True) from None
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")  # the parent holds DuckDB threads: never fork it
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(_parse_and_derive, str(p), str(o), python_functions, res, i, salvage)
                   for i, (p, o) in enumerate(jobs)]
        out = []
        for (p, _o), f in zip(jobs, futures):
            try:
                out.append(f.result())
            except KernelscopeError as exc:
                raise named(p, exc) from None
            except Exception as exc:  # noqa: BLE001 -- DuckDB's errors from a worker: one line
                if type(exc).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
                    raise
                raise _db_error(p, exc, rank_files=True) from None
        return out


def _insert_rank_tables(con, folders, tables, mapping) -> None:
    """One INSERT per event table over every rank's t_<table>.parquet (in rank order, each file in its
    own order), the placeholder trace ids replaced by the real ones. ``tables``: per folder, the tables
    its worker wrote."""
    con.execute("CREATE OR REPLACE TEMP TABLE ks_rank_map (tmp VARCHAR, trace_id VARCHAR, pos INTEGER)")
    con.executemany("INSERT INTO ks_rank_map VALUES (?, ?, ?)", mapping)
    con.execute("SET preserve_insertion_order = true")
    try:
        for table in sorted(set().union(*map(set, tables))):
            files = "[" + ", ".join(_sql_path(f / f"t_{table}.parquet") for f, ts in zip(folders, tables)
                                    if table in ts) + "]"
            con.execute(
                f"""INSERT INTO "{table}"
                    SELECT x.* EXCLUDE (file_row_number) REPLACE (m.trace_id AS trace_id)
                    FROM read_parquet({files}, file_row_number = true) x
                    JOIN ks_rank_map m ON m.tmp = x.trace_id
                    ORDER BY m.pos, x.file_row_number"""
            )
    finally:
        con.execute("SET preserve_insertion_order = false")
        con.execute("DROP TABLE IF EXISTS ks_rank_map")


def ingest_rank_run(store, folder, members, *, labels=None, python_functions=True,
                    salvage=False) -> list[IngestResult]:
    """Ingest the rank traces ``members`` (``ranks.Member``) of ``folder`` as ONE run in ONE transaction.

    Rank files are parsed, linked and turned into event tables in parallel processes
    (``ranks.parse_workers``: bounded by free cores and available memory; ``_parse_and_derive``), each
    writing Parquet files to the scratch folder; then one transaction inserts the trace rows, each event
    table once over all ranks, the run row and the per-rank clock offsets. Any failure (a bad file, a rank
    collision, mixed runs) gives one 'failed' result for the folder and leaves no rows. A partial run (ranks of
    the world size without a trace) is ingested, its missing ranks stored (``runs.missing_ranks``) and named on
    every rank's line. Already stored as this run: one 'skipped' result per rank. Results: one per rank, in
    rank order (message names the rank and its source).
    """
    folder = pathlib.Path(folder)
    t0 = time.perf_counter()
    con = store.con
    if store.read_only:
        raise StoreError(f"store {store.path} is open read-only; cannot ingest")
    try:
        ranks.check_members(folder, members)  # what the names/heads say, before any parsing
        parts = {}
        for m in members:
            parts[m.name] = _run_dir_parts(m.path, labels) if m.kind == "run" else {
                "name": m.name, "labels": dict(labels or {}), "provenance": None, "host": None,
                "extra": None}
    except KernelscopeError as exc:
        return [_fail(folder, exc, t0)]
    sizes = [ranks.trace_file(m.kind, m.path).stat().st_size for m in members]
    workers = ranks.parse_workers(len(members), sum(sizes))
    with ingest_settings(con), _scratch(store) as scratch:
        jobs = [(ranks.trace_file(m.kind, m.path), scratch / f"m{i}") for i, m in enumerate(members)]
        for _p, folder_i in jobs:
            folder_i.mkdir()
        t_parse = time.perf_counter()
        try:
            parsed = _parse_all(jobs, python_functions, workers, salvage)
        except KernelscopeError as exc:
            return [_fail(folder, exc, t0)]
        except OSError as exc:
            return [_fail(folder, ParseError(f"cannot read a rank trace: {exc.strerror or exc}"), t0)]
        for m, (meta, _rows, _facts) in zip(members, parsed):
            m.set_distributed(meta.distributed_info or ({"rank": meta.rank, "world_size": meta.world_size}
                                                        if meta.rank is not None else None))
        try:
            world, rank_source, missing = ranks.check_members(folder, members)
        except KernelscopeError as exc:
            return [_fail(folder, exc, t0)]
        hashes = [meta.content_hash or _hash_file(p) for (p, _o), (meta, _r, _f) in zip(jobs, parsed)]
        run_id = ranks.run_id_for(hashes)
        stored = {h: _stored_id(con, h) for h in hashes}
        if all(stored.values()):
            in_run = {r[0] for r in con.execute(
                "SELECT DISTINCT run_id FROM traces WHERE trace_id IN (SELECT unnest(?))",
                [list(stored.values())]).fetchall()}
            if in_run == {run_id}:
                return [IngestResult(str(m.path), "skipped", stored[h], f"already stored as {stored[h]} "
                                     f"(rank {m.rank} of run {run_id})", rows, time.perf_counter() - t0)
                        for m, h, (_meta, rows, _f) in sorted(zip(members, hashes, parsed), key=lambda x: x[0].rank)]
        clash = next(((m, stored[h]) for m, h in zip(members, hashes) if stored[h]), None)
        if clash:
            return [_fail(folder, UsageError(
                f"rank {clash[0].rank} ({clash[0].name}) is already stored as trace {clash[1]} outside this "
                f"run; remove it (`kernelscope rm {clash[1]}`) to ingest the run"), t0)]
        order = sorted(range(len(members)), key=lambda i: members[i].rank)
        partial = ranks.partial_note(world, len(members), missing)
        results: list[IngestResult] = []
        t_insert = time.perf_counter()
        t_parse = t_insert - t_parse
        con.execute("BEGIN TRANSACTION")
        try:
            hosts, mapping = {}, []
            for pos, i in enumerate(order):
                m, (meta, rows, facts), h = members[i], parsed[i], hashes[i]
                part = parts[m.name]
                trace_path = jobs[i][0]
                warnings = list(meta.warnings or [])
                if facts["crossing"]:
                    warnings.append(f"{facts['crossing']} operators/annotations/runtime calls are not nested in "
                                    "the interval that encloses their start on their thread (partial overlap)")
                if facts["untimed"]:
                    warnings.append(f"{facts['untimed']} timed events had no timestamp; kept in other_events only")
                if facts["note"]:
                    warnings.append(facts["note"])
                warnings.extend(rawfacts.facts_warnings(facts, meta))
                if partial:
                    warnings.append(partial + " (in this trace's run; communication numbers cover these ranks only)")
                base = int(meta.base_time_ns or 0)
                trace_id = _new_trace_id(con, h)
                _insert_trace_row(
                    con, trace_id, meta, trace_path, part["name"], run_id, part["provenance"], h, base,
                    facts["start_ns"], facts["end_ns"], warnings, facts["offset"], rows, rank=m.rank,
                    rank_source=m.rank_source, world_size=world, facts=facts,
                )
                insert_labels(con, trace_id, part["labels"])
                if part["extra"] is not None:
                    part["extra"](con, trace_id)
                hosts[trace_id] = part["host"]
                mapping.append((_placeholder(i), trace_id, pos))
                notes = "".join(f"; {n}" for n in ([partial] if partial else []) + rawfacts.facts_notes(facts))
                again = facts.get("retried")
                if again:
                    notes += (f"; DuckDB ran out of memory and derived the tables again with {again.threads} "
                              f"thread{'s' if again.threads != 1 else ''} and {again.memory}")
                results.append(IngestResult(
                    str(m.path), "ingested", trace_id,
                    f"rank {m.rank} of {world} (rank from {m.rank_source}) in run {run_id}{notes}", rows, 0.0))
            _insert_rank_tables(con, [jobs[i][1] for i in order], [parsed[i][2]['tables'] for i in order],
                                mapping)
            method = ranks.estimate_offsets(con, run_id, hosts)
            con.execute("""INSERT INTO runs (run_id, name, source, world_size, ranks, rank_source, offset_method,
                                             ingested_ns, missing_ranks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                        [run_id, folder.resolve().name, str(folder.resolve()), world, len(members),
                         rank_source, method, time.time_ns(), _json(missing)])
            con.execute("COMMIT")
        except BaseException as exc:
            try:
                con.execute("ROLLBACK")
            except Exception:
                pass
            if isinstance(exc, KernelscopeError):
                return [_fail(folder, exc, t0)]
            raise
    seconds = time.perf_counter() - t0
    t_insert = time.perf_counter() - t_insert
    for r in results:
        r.seconds = seconds / max(1, len(results))
        r.message += (f"; {len(members)} ranks parsed by {workers} process{'es' if workers > 1 else ''} in "
                      f"{t_parse:.1f} s, derived and inserted in {t_insert:.1f} s")
    return results
