"""The DuckDB store: opening, locking, versioned schema migrations.

This module (with ``ingest`` and ``queries``) is the only code that calls ``duckdb.connect``.

Read-only opens share one DuckDB instance per store file per process (``readers.py``: a cursor each, the
instance given up when a writer waits or after ``readers.IDLE_S`` idle).

One process may write *or* many may read. A writer waits for readers (up to 30 s; new readers hold back
meanwhile: ``lock.py``); a second writer fails within a few seconds with ``StoreLockedError`` naming the
process that holds the lock (DuckDB's own lock message carries it).

Schema: ``schema/NNN_name.sql`` files applied in order; ``schema_version`` records each applied number.
A store whose newest version is higher than the newest file here was written by a newer kernelscope.
"""

from __future__ import annotations

import os
import pathlib
import re
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

from ..errors import StoreError, StoreLockedError, UsageError
from . import derivations, readers
from . import lock as store_lock

#: Seconds a writer keeps retrying while another writer holds the lock (readers: storage/lock.py, 30 s).
LOCK_WAIT_S = store_lock.LOCK_WAIT_S

_MIGRATION_RE = re.compile(r"^(\d{3})_[A-Za-z0-9_]+\.sql$")


def default_db_path() -> pathlib.Path:
    """``$KERNELSCOPE_DB`` when set and non-empty, else ``./kernelscope.duckdb``."""
    env = os.environ.get("KERNELSCOPE_DB")
    return pathlib.Path(env) if env else pathlib.Path("kernelscope.duckdb")


def migrations() -> list[tuple[int, str, str]]:
    """(version, file name, SQL text) of every migration shipped with this package, in order."""
    out = []
    for entry in resources.files("kernelscope.storage").joinpath("schema").iterdir():
        m = _MIGRATION_RE.match(entry.name)
        if m:
            out.append((int(m.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    out.sort()
    return out


def code_schema_version() -> int:
    return migrations()[-1][0]


def _lock_holder(message: str) -> str:
    """'PID 123 (/usr/bin/python3)' from DuckDB's 'Conflicting lock is held in X (PID N)' text."""
    m = re.search(r"held in (.*?) \(PID (\d+)\)", message)
    if m:
        return f"PID {m.group(2)} ({m.group(1)})"
    return "another process"


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "Conflicting lock" in text


def disable_bad_optimizers(con) -> None:
    """Turn off DuckDB's compressed_materialization optimizer on a connection.

    DuckDB 2.0.0 returned wrong sums with it on: a trace-filtered, sorted aggregate over activity_splits
    in a store of several traces narrowed sums to TINYINT from wrong statistics (queue_ns 122 instead of
    225,658, a negative dispatch_ns; seen on the DDP sample). The optimizer only saves memory in sorts
    and aggregates, so turning it off costs speed at most. Every store connection gets this."""
    con.execute("SET disabled_optimizers = 'compressed_materialization'")


#: Settings every DuckDB connection of kernelscope gets: never download or load an extension on its own
#: (given an SQLite file DuckDB otherwise fetched sqlite_scanner from the network to open it).
SAFE_CONFIG = {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}

#: The first bytes of files that are not DuckDB stores but that DuckDB would try to open through an extension.
_FOREIGN_MAGIC = {b"SQLite format 3\x00": "an SQLite database"}

#: Stores opened by this process, newest last (``damaged_store_error`` names the one a failure came from).
_OPENED: list[pathlib.Path] = []

#: DuckDB's words for a store file it cannot read back (a checksum mismatch, a short read, a bad header).
_DAMAGE_RE = re.compile(
    r"Corrupt database file|checksum .*does not match|Could not read enough bytes|not a valid DuckDB database|"
    r"replaying WAL|WAL file",
    re.IGNORECASE)


def connect_config(config: dict | None = None) -> dict:
    """``config`` with SAFE_CONFIG forced on (for every ``duckdb.connect`` of kernelscope)."""
    return {**(config or {}), **SAFE_CONFIG}


def _foreign_file(path: pathlib.Path) -> str | None:
    """What a non-DuckDB file is, by its magic bytes (None: empty, missing, or not one we know)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    for magic, what in _FOREIGN_MAGIC.items():
        if head.startswith(magic):
            return what
    return None


def damaged_store_error(exc: BaseException, path=None) -> StoreError | None:
    """A StoreError saying the store is damaged, for a DuckDB error that says it could not read the file
    back (raised by any query, since DuckDB reads blocks lazily); None for any other error."""
    if type(exc).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
        return None
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if not _DAMAGE_RE.search(text):
        return None
    where = path if path is not None else (_OPENED[-1] if _OPENED else "file")
    return StoreError(
        f"the store {where} is damaged or not readable: {first[:200]}; restore it from a copy, or ingest "
        "the traces again into a new --db"
    )


def _check_store_path(path: pathlib.Path) -> None:
    """StoreError for a store path that is a directory, a FIFO, a device, a socket or a symlink loop (a FIFO
    would block the open forever); a missing path is fine (the callers decide)."""
    import errno
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(f"{path} is a symlink loop, not a store file; give a file path with --db") from None
        raise StoreError(f"cannot open store {path}: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise StoreError(f"{path} is a directory, not a store file; give a file path with --db")
    if not stat.S_ISREG(mode):
        what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise StoreError(f"{path} is {what}, not a regular file: not a store; give a file path with --db")


def _connect(path: pathlib.Path, read_only: bool, config: dict | None = None):
    import duckdb

    if str(path) != ":memory:":
        _check_store_path(path)
        if not read_only or config:
            readers.release(path)  # DuckDB refuses a second instance of one file with other settings
    # Taking turns with other processes (storage/lock.py): a writer waits for readers (short-lived) up to
    # 30 s, for another writer 2 s. The file's magic bytes are read only after DuckDB refused it: closing
    # any descriptor of the store file would drop the read locks of this process's open connections.
    started, delay, kind = time.monotonic(), 0.02, None
    config = connect_config(config)
    lock = config.pop("lock_configuration", None)  # once: a retry must keep it (user SQL stays locked)
    with store_lock.turn(path, writer=not read_only):
        while True:
            try:
                con = duckdb.connect(str(path), read_only=read_only, config=config)
                # No progress bar: DuckDB draws it on stdout for slow queries, corrupting --format json output.
                con.execute("SET enable_progress_bar = false")
                disable_bad_optimizers(con)
                if lock is not None:  # locked last, so the line above may still run on user-SQL connections
                    con.execute(f"SET lock_configuration = {'true' if lock in (True, 'true') else 'false'}")
                return con
            except duckdb.Error as exc:
                if _is_lock_error(exc):
                    kind = store_lock.holders(path) or kind  # none seen: the holder just let go
                    if time.monotonic() - started < store_lock.wait_limit(read_only, kind):
                        time.sleep(delay)
                        delay = min(delay * 2, 0.2)
                        continue
                    raise StoreLockedError(
                        store_lock.locked_message(path, read_only, kind, _lock_holder(str(exc)))) from None
                error = exc
                break
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    # not when another connection of this process has the file open: closing our descriptor drops its locks
    foreign = None if "same database file" in str(error) else _foreign_file(path)
    if foreign:
        raise StoreError(f"{path} is {foreign}, not a kernelscope store (a DuckDB file); choose another --db")
    if "not a valid DuckDB database file" in first:
        raise StoreError(
            f"{path} is not a kernelscope store (not a DuckDB file); choose another --db"
        ) from None
    damaged = damaged_store_error(error, path)
    if damaged is not None:
        raise damaged from None
    raise StoreError(f"cannot open store {path}: {first}") from None


class Store:
    """An open store. Use as a context manager; ``.con`` is the DuckDB connection."""

    def __init__(self, path: pathlib.Path, con, read_only: bool, give_back=None):
        self.path = path
        self.con = con
        self.read_only = read_only
        self._give_back = give_back  # a cursor of a shared read-only instance (storage/readers.py)

    def cursor(self) -> Store:
        """Another connection to the same open database (DuckDB's cursor: its own transaction and temp tables,
        the same settings), for running queries in another thread; close it when done."""
        return Store(self.path, self.con.cursor(), self.read_only)

    def map_cursors(self, fn, items) -> list:
        """``[fn(cursor, item) for item in items]``, the items at once in threads (one per core), each on its own
        cursor of this store: DuckDB runs queries outside the GIL, so the SQL of one overlaps the Python of
        another. In item order; ``fn`` handles its own errors (one that escapes is raised here)."""
        items = list(items)

        def run(item):
            sub = self.cursor()
            try:
                return fn(sub, item)
            finally:
                sub.close()
        with ThreadPoolExecutor(max_workers=max(1, min(len(items), os.cpu_count() or 1)),
                                thread_name_prefix="ks-cursor") as pool:
            return list(pool.map(run, items))

    def query(self, sql: str, params=None):
        """Run SQL and return a pandas DataFrame."""
        return self.con.execute(sql, params or []).df()

    def query_arrow(self, sql: str, params=None):
        """Run SQL and return a pyarrow Table."""
        rel = self.con.sql(sql, params=params) if params else self.con.sql(sql)
        return rel.to_arrow_table()

    def schema_version(self) -> int:
        return int(self.con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0])

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None
            if self._give_back is not None:
                self._give_back()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, read_only={self.read_only})"


def _table_names(con) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
    ).fetchall()
    return {r[0] for r in rows}


def _applied_versions(con, path) -> set[int] | None:
    """Migration numbers applied to this store; None for an empty database; StoreError when the file is
    not a kernelscope store. The version table is read first (every open of a store asks: 0.3 ms, where
    listing the tables took 2 ms); the tables are listed only when it is missing."""
    import duckdb

    try:
        return {int(r[0]) for r in con.execute("SELECT version FROM schema_version").fetchall()}
    except duckdb.CatalogException:
        pass
    if not _table_names(con):
        return None
    raise StoreError(
        f"{path} is a DuckDB file but not a kernelscope store (no schema_version table); "
        "choose another --db"
    )


def _migrate(con, path, applied: set[int] | None) -> None:
    """Apply every shipped migration not yet applied, in number order, each in its own transaction (a
    store made between two releases may miss a lower number). A migration changes the schema; what it
    created is then filled for the traces already stored by the derivation steps ingest runs
    (``derivations.backfill``), in the same transaction."""
    todo = [m for m in migrations() if applied is None or m[0] not in applied]
    # A new store (nothing applied, nothing to backfill) takes them all in one transaction: one commit
    # instead of one per migration (a third of the time a new store took to open).
    for batch in ([todo] if applied is None else [[m] for m in todo]):
        if not batch:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            for version, name, sql in batch:
                fname = name  # the one the error names
                if version == 1:
                    con.execute(
                        "CREATE TABLE IF NOT EXISTS schema_version "
                        "(version INTEGER NOT NULL, name VARCHAR, applied_ns BIGINT)"
                    )
                con.execute(sql)
                if applied is not None:
                    derivations.backfill(con, version)
            now = time.time_ns()
            con.executemany("INSERT INTO schema_version VALUES (?, ?, ?)", [[v, f, now] for v, f, _ in batch])
            con.execute("COMMIT")
        except Exception as exc:
            con.execute("ROLLBACK")
            raise StoreError(f"cannot migrate store {path} to schema {fname}: {exc}") from None


def _opened(path: pathlib.Path) -> None:
    _OPENED.append(path)
    del _OPENED[:-8]


def open_store(path=None, read_only: bool = False) -> Store:
    """Open (and, when writable, create and migrate) the store at ``path`` (default: default_db_path()).
    A folder holding a Parquet dataset of ``export --parquet`` opens read-only (``export.open_parquet_store``).

    Raises StoreError for a missing store in read-only mode, a file that is not a kernelscope store,
    or a store written by a newer kernelscope; StoreLockedError when another process is writing it.
    """
    path = pathlib.Path(path) if path is not None else default_db_path()
    path = path.expanduser()
    from .export import is_parquet_export, open_parquet_store

    if path.is_dir() and is_parquet_export(path):  # a dataset `export --parquet` or `ingest --parquet` wrote
        if not read_only:
            raise UsageError(f"--db {path} is a Parquet dataset (kernelscope export), which is read-only; "
                             "give a store file to write to")
        return open_parquet_store(path)
    _check_store_path(path)
    if read_only and not path.exists():
        raise StoreError(f"no store at {path}; run `kernelscope ingest` first")
    if not read_only and not path.parent.exists():
        raise StoreError(f"cannot create store {path}: folder {path.parent} does not exist")
    shared = read_only and readers.enabled()
    if shared:
        with store_lock.turn(path, writer=False):  # a writer waiting goes first, as for a new connection
            got = readers.cursor(path)
        if got is not None:
            _opened(path)
            return Store(path, got[0], True, got[1])
    con = _connect(path, read_only)
    _opened(path)
    try:
        applied = _applied_versions(con, path)
        current = max(applied, default=0) if applied is not None else None
        newest = code_schema_version()
        if current is not None and current > newest:
            raise StoreError(
                f"store {path} has schema version {current} but this kernelscope knows only up to "
                f"{newest}; upgrade kernelscope"
            )
        missing = sorted({v for v, _, _ in migrations()} - (applied or set()))
        if missing:
            if read_only:
                raise StoreError(
                    f"store {path} lacks schema migration(s) {', '.join(map(str, missing))}; open it once "
                    "without read-only (e.g. `kernelscope ingest` or `kernelscope dashboard`) to migrate it"
                )
            _migrate(con, path, applied)
    except BaseException as exc:
        con.close()
        damaged = damaged_store_error(exc, path)
        if damaged is not None:
            raise damaged from None
        raise
    if shared:
        cur, give_back = readers.adopt(path, con)
        return Store(path, cur, True, give_back)
    return Store(path, con, read_only)
