"""Taking turns on a store between one writer and many readers (separate processes).

DuckDB lets one process write a database file *or* many read it, through POSIX locks on the file, and a
connection that meets a conflicting lock fails at once. The dashboard reads through short-lived cursors (one
per page drawn) of a read-only instance it gives up as soon as a writer waits at the turnstile below
(storage/readers.py), so an ingest started while it is open only needs a moment with no reader. Under load there
is none: four clients browsing keep the store open for reading ~99% of the time, and an ingest polling for a
gap gave up after 2 s (issue 11). Two rules make the writer's turn come:

- **A turnstile.** Beside the store, ``<store>.lock`` (an empty file, created by the first writer). A writer
  holds it exclusively (``flock``) while it waits for DuckDB's lock; a reader passes it (shared, released at
  once) before it connects. So no new reader starts while a writer waits, the readers in flight finish, and
  the writer gets in within about one page's time. A reader that meets a waiting writer waits for it up to
  ``LOCK_WAIT_S`` (then the page says the store is busy, as it does while the ingest writes).
- **Who holds the lock.** On Linux ``/proc/locks`` tells a writer (a WRITE lock on the store file) from
  readers (READ locks). A writer waits up to ``READERS_WAIT_S`` for readers, which are short-lived, but fails
  after ``LOCK_WAIT_S`` against another writer (one writer at a time; the message names the process).

Elsewhere (no ``fcntl.flock`` or no ``/proc/locks``) the turnstile or the distinction is skipped and a
writer waits ``LOCK_WAIT_S`` as before. Never open and close the store file itself here: closing any
descriptor of a file drops every POSIX lock this process holds on it, DuckDB's included.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import time

from ..errors import StoreLockedError

#: Seconds a writer waits for another writer, and a reader for a writer about to write.
LOCK_WAIT_S = 2.0
#: Seconds a writer waits for readers (dashboard pages, `kernelscope sql`) to finish.
READERS_WAIT_S = 30.0

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None


def turnstile_path(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def turn(path: pathlib.Path, writer: bool):
    """A writer holds the turnstile for the block (waiting up to READERS_WAIT_S for another writer that
    waits for readers); a reader passes it before the block. Yields nothing; raises StoreLockedError."""
    if fcntl is None or str(path) == ":memory:":
        yield
        return
    side = turnstile_path(path)
    try:
        fd = os.open(side, os.O_RDWR | os.O_CREAT, 0o644) if writer else os.open(side, os.O_RDONLY)
    except OSError:  # a reader before any writer made it, or a folder we may not write: no turnstile
        yield
        return
    try:
        mode = fcntl.LOCK_EX if writer else fcntl.LOCK_SH
        deadline = time.monotonic() + (READERS_WAIT_S + LOCK_WAIT_S if writer else LOCK_WAIT_S)
        delay = 0.01
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreLockedError(
                        f"store {path} is busy: another process is about to write to it (an ingest); "
                        "try again in a moment") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
            except OSError:  # a file system without flock: no turnstile
                break
        if not writer:
            fcntl.flock(fd, fcntl.LOCK_UN)
        yield
    finally:
        os.close(fd)  # releases the flock; the turnstile is another file, so DuckDB's locks stay


def holders(path: pathlib.Path) -> str | None:
    """'writer' when another process holds a write lock on the store file, 'readers' when others hold only
    read locks, None when unknown (no /proc/locks, or no lock seen at this instant)."""
    try:
        st = os.stat(path)
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except (OSError, ValueError):
        return None
    me, kinds = os.getpid(), set()
    for line in lines:
        parts = line.split()
        if "->" in parts or len(parts) < 6:  # a process waiting for a lock, not holding one
            continue
        try:
            i = parts.index("ADVISORY") if "ADVISORY" in parts else parts.index("MANDATORY")
            kind, pid, where = parts[i + 1], int(parts[i + 2]), parts[i + 3]
        except (ValueError, IndexError):
            continue
        if where == key and pid != me:
            kinds.add(kind)
    if "WRITE" in kinds:
        return "writer"
    return "readers" if "READ" in kinds else None


def wait_limit(read_only: bool, kind: str | None) -> float:
    """Seconds a connection may keep retrying against a lock held by ``kind``."""
    return READERS_WAIT_S if not read_only and kind == "readers" else LOCK_WAIT_S


def locked_message(path, read_only: bool, kind: str | None, holder: str) -> str:
    """The one line for a lock that did not come free in time (``holder``: 'PID N (program)')."""
    if read_only or kind == "writer":
        return f"store {path} is locked by {holder}, which is writing to it; wait for it to finish or use another --db"
    if kind == "readers":
        return (f"store {path} is open for reading by {holder} (a dashboard page, `kernelscope sql` or another "
                f"reader) and was not free within {READERS_WAIT_S:g} s; try again when it is")
    return f"store {path} is locked by {holder}; wait for it to finish or use another --db"
