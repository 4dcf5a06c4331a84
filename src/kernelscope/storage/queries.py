"""Store-level queries shared by the CLI and the dashboard: listing, resolving, labelling, removing,
and user SQL in a locked-down read-only connection."""

from __future__ import annotations

import contextlib
import math
import os
import pathlib
import threading

from ..errors import KernelscopeError, StoreError, TraceNotFound, UsageError
from ..units import BYTES_PER_GB, BYTES_PER_MB
from .ingest import insert_labels, memory_bytes
from .store import damaged_store_error


def list_traces(store):
    """One row per trace, in ingest order.

    Columns: trace_id, name, source, format, rank, labels (dict key -> text), devices (sorted list of
    devices with GPU activities), kernels (kernel count), gpu_span_ns (first GPU activity start to last
    GPU activity end over all devices; null without activities), ingested_ns, notes (``trace_notes``: a
    truncated trace, a partial run, negative durations, device events set aside; [] when none).
    """
    df = store.query(
        """
        WITH g AS (
            SELECT trace_id, list(DISTINCT device ORDER BY device) FILTER (WHERE device IS NOT NULL)
                       AS devices,
                   count(*) FILTER (WHERE kind = 'kernel') AS kernels,
                   max(end_ns) - min(start_ns) AS gpu_span_ns
            FROM gpu_activities GROUP BY trace_id
        )
        SELECT t.trace_id, t.name, t.source, t.format, t.rank, t.ingested_ns,
               coalesce(g.devices, []) AS devices, coalesce(g.kernels, 0) AS kernels, g.gpu_span_ns,
               t.truncated, t.negative_durations, t.set_aside, r.world_size AS run_world, r.ranks AS run_ranks,
               r.missing_ranks
        FROM traces t LEFT JOIN g USING (trace_id) LEFT JOIN runs r ON r.run_id = t.run_id
        ORDER BY t.ingested_ns, t.trace_id
        """
    )
    df["notes"] = [trace_notes(*row) for row in zip(
        df["truncated"], df["negative_durations"], df["set_aside"], df["run_world"], df["run_ranks"],
        df["missing_ranks"])]
    labels = store.con.execute(
        "SELECT trace_id, key, value_text FROM labels ORDER BY trace_id, key"
    ).fetchall()
    by_trace: dict[str, dict[str, str]] = {}
    for tid, key, value in labels:
        by_trace.setdefault(tid, {})[key] = value
    df["labels"] = [by_trace.get(t, {}) for t in df["trace_id"]]
    df["devices"] = [list(d) if d is not None else [] for d in df["devices"]]
    return df[
        ["trace_id", "name", "source", "format", "rank", "labels", "devices", "kernels",
         "gpu_span_ns", "ingested_ns", "notes"]
    ]


def trace_notes(truncated, negative_durations, set_aside, run_world=None, run_ranks=None,
                missing_ranks=None) -> list[str]:
    """Short notes on what ingest found about a trace (the ``traces`` columns of schema 008 as stored, JSON
    text or None): 'TRUNCATED at byte N (K events kept)', 'partial run: R of W ranks', 'N negative durations
    stored as 0', 'N device events set aside'. The summary's trust section has the details."""
    import json

    def load(v):
        if v is None or pd_isna(v):
            return None
        try:
            return json.loads(v) if isinstance(v, str) else v
        except ValueError:
            return None

    out = []
    cut = load(truncated)
    if isinstance(cut, dict):
        out.append(f"TRUNCATED at byte {int(cut.get('read_bytes', 0)):,} ({int(cut.get('events_kept', 0)):,} events "
                   "kept)")
    missing = load(missing_ranks)
    if isinstance(missing, list) and missing and run_world is not None and not pd_isna(run_world):
        out.append(f"partial run: {int(run_ranks or 0)} of {int(run_world)} ranks")
    neg = load(negative_durations)
    if isinstance(neg, dict) and neg:
        out.append(f"{sum(int(v.get('count', 0)) for v in neg.values()):,} negative durations stored as 0")
    aside = load(set_aside)
    if isinstance(aside, dict) and aside:
        dev = sum(int(v.get("device_events", 0)) for v in aside.values())
        n = sum(int(v.get("events", 0)) for v in aside.values())
        out.append(f"{dev:,} device events set aside" if dev else f"{n:,} events of unmapped categories set aside")
    return out


def pd_isna(v) -> bool:
    """True for NaN (how pandas fills a missing number)."""
    return isinstance(v, float) and math.isnan(v)


def _unique_match(ref: str, level: str, ids: list[str]) -> str | None:
    """The one trace id ``ref`` matches at this level; None when none; ambiguity is a UsageError."""
    uniq = sorted(set(ids))
    if len(uniq) == 1:
        return uniq[0]
    if len(uniq) > 1:
        shown = ", ".join(uniq[:5]) + (" ..." if len(uniq) > 5 else "")
        raise UsageError(f"ambiguous: {ref!r} ({level}) matches {shown}; give more of the trace id")
    return None


def resolve_trace(store, ref, *, exclude_format: str | None = None) -> str:
    """The trace id for ``ref``: a full id, a unique id prefix, a source file name or path, or a name.

    Tried in that order; the first kind that matches decides (ambiguity there is an error). The one
    resolution of a user's trace reference: TRACE arguments, the dashboard's ``?trace=``, whatif's ``twin``
    and an ncu CSV's ``match`` (``exclude_format='ncu'``: never a trace holding only ncu rows).
    """
    ref = str(ref).strip()
    if not ref:
        raise UsageError("empty trace reference; give a trace id, id prefix or file name")
    if exclude_format is None:
        rows = store.con.execute("SELECT trace_id, source, name FROM traces").fetchall()
    else:
        rows = store.con.execute("SELECT trace_id, source, name FROM traces WHERE format <> ?",
                                 [exclude_format]).fetchall()
    if any(r[0] == ref for r in rows):
        return ref
    for level, ids in (
        ("id prefix", [r[0] for r in rows if r[0].startswith(ref.lower())]),
        ("source file", [r[0] for r in rows if r[1] == ref or pathlib.Path(r[1]).name == ref]),
        ("source path", [r[0] for r in rows if _same_path(r[1], ref)]),
        ("name", [r[0] for r in rows if r[2] == ref]),
    ):
        found = _unique_match(ref, level, ids)
        if found:
            return found
    raise TraceNotFound(
        f"no trace matches {ref!r} in store {store.path}; list them with `kernelscope traces`"
    )


def only_trace(store, command: str) -> str:
    """The id of the store's one trace, for a command given no TRACE (``kernelscope summary`` right after ingesting
    one file); a UsageError that says what to give when the store holds none or several."""
    rows = store.con.execute("SELECT trace_id, name FROM traces ORDER BY trace_id").fetchall()
    if len(rows) == 1:
        return rows[0][0]
    if not rows:
        raise UsageError(f"store {store.path} holds no trace; ingest one first (`kernelscope ingest FILE`)")
    shown = ", ".join(f"{t} ({n})" for t, n in rows[:3]) + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")
    raise UsageError(f"store {store.path} holds {len(rows)} traces; give one to `kernelscope {command}`: {shown} "
                     "(`kernelscope traces` lists them)")


def _same_path(source: str, ref: str) -> bool:
    """Both name one file: the source is stored as given (a symlink keeps its name), so both are resolved."""
    try:
        return pathlib.Path(ref).expanduser().resolve() == pathlib.Path(source).resolve()
    except (OSError, RuntimeError):
        return False


def iterations_sql(trace: str) -> str:
    """A scalar subquery: the iterations of the trace ``trace`` (an SQL expression: ``$t``, ``i.trace_id``), the
    ProfilerStep phases inside which a launch call of GPU work starts, or every phase when none does (a trace
    without GPU launches); 0 without phases. A phase that launched nothing is not an iteration: ``kernelscope
    profile`` without a schedule leaves one after the last boundary (Whisper on an H200: 4 phases, 3 regions)."""
    return f"""(SELECT coalesce(nullif(count(*) FILTER (WHERE gpu), 0), count(*))
   FROM (SELECT EXISTS (SELECT 1 FROM launches l WHERE l.trace_id = a.trace_id AND l.activities > 0
                        AND l.start_ns >= a.start_ns AND l.start_ns < a.end_ns) AS gpu
         FROM annotations a WHERE a.trace_id = {trace} AND a.kind = 'step'))"""


def set_labels(store, trace_id: str, labels: dict) -> None:
    """Set (replace) labels on a stored trace: value_text as given, value_num when numeric."""
    if not store.con.execute("SELECT 1 FROM traces WHERE trace_id = ?", [trace_id]).fetchall():
        raise TraceNotFound(f"no trace {trace_id!r} in store {store.path}")
    store.con.execute("BEGIN TRANSACTION")
    try:
        insert_labels(store.con, trace_id, labels)
        store.con.execute("COMMIT")
    except BaseException:
        store.con.execute("ROLLBACK")
        raise


def trace_tables(con) -> list[str]:
    """Every table of the store that has a trace_id column (so removal covers future tables too)."""
    rows = con.execute(
        """SELECT DISTINCT table_name FROM information_schema.columns
           WHERE table_schema = 'main' AND column_name = 'trace_id' ORDER BY table_name"""
    ).fetchall()
    return [r[0] for r in rows]


def remove_traces(store, trace_ids) -> int:
    """Delete every row of the given traces from every table, and runs left without traces, in one
    transaction; returns traces removed."""
    ids = sorted(set(trace_ids))
    if not ids:
        return 0
    con = store.con
    con.execute("BEGIN TRANSACTION")
    try:
        n = con.execute(
            "SELECT count(*) FROM traces WHERE list_contains(?, trace_id)", [ids]
        ).fetchall()[0][0]
        for table in trace_tables(con):
            con.execute(f'DELETE FROM "{table}" WHERE list_contains(?, trace_id)', [ids])
        # a multi-rank run without any trace left goes too (its ranks are what it describes)
        con.execute("DELETE FROM runs WHERE run_id NOT IN "
                    "(SELECT run_id FROM traces WHERE run_id IS NOT NULL)")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return int(n)


READONLY_CONFIG = {
    "enable_external_access": "false",
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "lock_configuration": "true",
    "max_temp_directory_size": "0GB",  # never spill to disk: memory_limit is a hard bound
}

#: The memory one ``kernelscope sql`` query may add to its process (env KERNELSCOPE_SQL_MEMORY_LIMIT).
SQL_MEMORY_ENV = "KERNELSCOPE_SQL_MEMORY_LIMIT"
DEFAULT_SQL_MEMORY = "1GB"
#: Longest ``--timeout`` (seconds): one day.
MAX_SQL_TIMEOUT_S = 86_400.0
#: Largest query text read from a file or stdin.
MAX_SQL_TEXT_BYTES = 1 << 20


def sql_memory_bound() -> int:
    """Bytes a ``kernelscope sql`` query may add to its process: ``$KERNELSCOPE_SQL_MEMORY_LIMIT`` (e.g.
    ``512MB``, ``2GB``, ``1GiB``) or 1GB. DuckDB gets three quarters of it as its ``memory_limit`` (no
    spilling to disk), the rows being printed the rest."""
    text = os.environ.get(SQL_MEMORY_ENV) or DEFAULT_SQL_MEMORY
    n = memory_bytes(text)  # the sizes ingest's KERNELSCOPE_MEMORY_LIMIT takes
    if n is None:
        raise UsageError(f"{SQL_MEMORY_ENV}={text!r} is not a memory size (e.g. 512MB or 2GB)")
    if n < 64 * BYTES_PER_MB:
        raise UsageError(f"{SQL_MEMORY_ENV}={text!r} is below the 64MB a query needs at least")
    return n


def _size_text(n: int) -> str:
    return f"{n / BYTES_PER_GB:g}GB" if n >= BYTES_PER_GB else f"{n / BYTES_PER_MB:g}MB"


def check_sql_timeout(timeout_s) -> float:
    """``timeout_s`` as a float when it is a finite number of seconds in (0, MAX_SQL_TIMEOUT_S]."""
    try:
        t = float(timeout_s)
    except (TypeError, ValueError):
        t = math.nan
    if not (0 < t <= MAX_SQL_TIMEOUT_S):  # also refuses nan and inf
        raise UsageError(f"the time limit must be a number of seconds above 0 and at most "
                         f"{MAX_SQL_TIMEOUT_S:g} (one day), not {timeout_s!r}")
    return t


def _vm_data_bytes() -> int | None:
    """This process's data segment size (Linux: VmData of /proc/self/status), what RLIMIT_DATA bounds."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextlib.contextmanager
def _process_memory_bound(extra: int):
    """Cap the data this process may still allocate at ``extra`` bytes (Linux RLIMIT_DATA, soft limit;
    restored on exit). DuckDB's memory_limit does not cover every allocation (strings built by a function,
    Arrow result buffers), so this is the backstop: past it, allocations fail and come back as errors."""
    try:
        import resource
    except ImportError:  # not POSIX
        yield
        return
    now = _vm_data_bytes()
    if now is None:  # no /proc (macOS and others): DuckDB's memory_limit only
        yield
        return
    old_soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    soft = now + extra
    if old_soft != resource.RLIM_INFINITY:
        soft = min(soft, old_soft)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (old_soft, hard))


def _is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, MemoryError) or "Out of Memory" in text or "failed to allocate" in text \
        or "bad_alloc" in text


class ReadonlySql:
    """One user query on a locked-down read-only connection, as a context manager.

    ``with ReadonlySql(path, sql, timeout_s=30) as q:`` then ``q.columns`` (names) and ``q.batches()``
    (pyarrow RecordBatches of at most ``slice_bytes`` each, or one row) stream the result. While it is
    open the query is interrupted after ``timeout_s`` seconds, DuckDB may use three quarters of
    ``memory`` (default ``sql_memory_bound()``) and never spills to disk, and with ``bound_process`` the
    whole process may allocate at most ``memory`` more (Linux; the CLI sets it, a library caller may
    not want its process capped). More than one statement, an empty query, a write, file or network
    access, an extension or a setting change are refused. Every failure is a KernelscopeError of one line.
    """

    def __init__(self, path, sql: str, *, timeout_s: float = 30.0, memory: int | None = None,
                 bound_process: bool = False, batch_rows: int = 2048, slice_bytes: int = 4 << 20):
        self.path = pathlib.Path(path)
        self.sql = sql
        self.timeout_s = check_sql_timeout(timeout_s)
        self.memory = sql_memory_bound() if memory is None else int(memory)
        self.bound_process = bound_process
        self.batch_rows = batch_rows
        self.slice_bytes = slice_bytes
        self.columns: list[str] = []
        self.schema = None  # pyarrow schema of the result; None for a statement without rows
        self._stack = contextlib.ExitStack()
        self._timed_out = threading.Event()

    # errors ---------------------------------------------------------------------------------------
    def error(self, exc: BaseException) -> KernelscopeError:
        """The one-line error for anything the query, its fetching or its printing raised."""
        if self._timed_out.is_set():
            return KernelscopeError(
                f"query stopped after the {self.timeout_s:g} s time limit; narrow it or raise --timeout")
        if _is_out_of_memory(exc):
            return KernelscopeError(
                f"query needs more than the {_size_text(self.memory)} of memory kernelscope sql allows; "
                f"narrow it (filter, aggregate, LIMIT) or raise {SQL_MEMORY_ENV}")
        damaged = damaged_store_error(exc, self.path)
        if damaged is not None:  # the store itself, not the query: the StoreError every other command gives
            return damaged
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        return KernelscopeError(f"SQL error: {first}")

    # lifecycle ------------------------------------------------------------------------------------
    def __enter__(self):
        import duckdb
        import pyarrow  # noqa: F401  (imported before the process bound is measured)

        from .export import is_parquet_export, open_parquet_store
        from .store import _connect

        if not self.path.exists():
            raise StoreError(f"no store at {self.path}; run `kernelscope ingest` first")
        config = dict(READONLY_CONFIG, memory_limit=f"{max(self.memory * 3 // 4 // 2**20, 32)}MiB")
        dataset = is_parquet_export(self.path)
        if dataset:  # views over the dataset's files in an in-memory database: only SELECT may run (below)
            config = {k: v for k, v in config.items() if k not in ("enable_external_access", "lock_configuration")}
            con = open_parquet_store(self.path, config=config, locked=True).con
        else:
            con = _connect(self.path, True, config)
        self._stack.callback(con.close)
        self._con = con
        try:
            try:
                statements = con.extract_statements(self.sql)
            except duckdb.Error as exc:
                raise self.error(exc) from None
            if not statements:
                raise UsageError("the query is empty; give one SQL statement")
            if len(statements) > 1:
                raise UsageError(f"the query holds {len(statements)} statements; kernelscope sql runs one "
                                 "at a time")
            if dataset and statements[0].type not in (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN):
                raise UsageError(f"{self.path} is a Parquet dataset, read-only: kernelscope sql runs SELECT "
                                 f"(or EXPLAIN) on it, not {statements[0].type.name}")
            timer = threading.Timer(self.timeout_s, self._stop)
            timer.daemon = True
            timer.start()
            self._stack.callback(timer.cancel)
            if self.bound_process:
                self._stack.enter_context(_process_memory_bound(self.memory))
            try:
                rel = con.sql(self.sql)
                if rel is None:  # a statement without a result (e.g. CHECKPOINT is refused earlier)
                    self._reader = None
                else:
                    self._reader = rel.to_arrow_reader(self.batch_rows)
                    self.schema = self._reader.schema
                    self.columns = list(self.schema.names)
            except (duckdb.Error, MemoryError, OSError) as exc:
                raise self.error(exc) from None
        except BaseException:
            self._stack.close()
            raise
        return self

    def _stop(self) -> None:
        self._timed_out.set()
        self._con.interrupt()

    def __exit__(self, *exc) -> None:
        self._stack.close()

    # rows -----------------------------------------------------------------------------------------
    def batches(self):
        """The result as pyarrow RecordBatches, each at most ``slice_bytes`` (or a single row)."""
        import duckdb
        import pyarrow as pa

        if self._reader is None:
            return
        try:
            for batch in self._reader:
                yield from _slices(batch, self.slice_bytes)
        except (duckdb.Error, MemoryError, OSError, pa.ArrowException) as exc:
            raise self.error(exc) from None


def _slices(batch, limit: int):
    """``batch`` cut into row ranges of at most ``limit`` bytes (a single larger row stays whole)."""
    if batch.num_rows <= 1 or batch.nbytes <= limit:
        yield batch
        return
    half = batch.num_rows // 2
    yield from _slices(batch.slice(0, half), limit)
    yield from _slices(batch.slice(half), limit)


def run_readonly_sql(path, sql: str, *, timeout_s: float = 30.0, max_rows: int | None = None):
    """Run user SQL (one statement) on a separate read-only connection with external access, extension
    install/load, spilling and configuration changes disabled; interrupted after ``timeout_s`` seconds;
    DuckDB memory bounded by ``sql_memory_bound()``.

    Returns a pandas DataFrame (at most ``max_rows`` rows when given). Errors -> KernelscopeError
    carrying DuckDB's first line.
    """
    import pandas as pd
    import pyarrow as pa

    with ReadonlySql(path, sql, timeout_s=timeout_s) as q:
        batches, rows = [], 0
        for b in q.batches():
            if max_rows is not None and rows + b.num_rows >= max_rows:
                batches.append(b.slice(0, max_rows - rows))
                break
            batches.append(b)
            rows += b.num_rows
        if q.schema is None:
            return pd.DataFrame()
        return pa.Table.from_batches(batches, schema=q.schema).to_pandas()
