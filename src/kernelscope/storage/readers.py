"""One read-only DuckDB instance per store file per process, shared by every read-only ``Store`` opened there.

Creating a DuckDB instance costs ~25 ms of CPU (its catalog of built-in functions) before a query runs, and a
new instance starts with an empty buffer cache. The dashboard opens the store once per page drawn, a CLI
command once per question; so ``open_store(path, read_only=True)`` hands out a cursor (its own transaction and
temp tables, ~10 us) of an instance kept open here, and opens a new instance only when none is open.

Keeping a read-only instance open holds DuckDB's read lock on the file, which no writer can pass. Writes stay
possible because the instance is given up:

- **when a writer waits.** A writer (another process) holds the turnstile beside the store (storage/lock.py)
  while it waits; every ``POLL_S`` a reaper thread looks at it and closes each idle instance it finds taken, and
  a ``Store`` closing as the last user of its instance looks too. New readers wait at the turnstile meanwhile.
- **when idle for ``IDLE_S``** (a writer that does not use the turnstile still gets in then).
- **before this process opens the file any other way** (read-write, or with other settings): ``release(path)``.
- **before this process forks** (a child inheriting an open instance without its threads would hang on it).
- **when this process exits** (atexit: the reaper is stopped and idle instances are closed on the main thread; a
  DuckDB call the daemon reaper was in when the interpreter finalised would end in C++'s ``terminate``).

While an instance is open nobody can write the file, so its data stays current; a file replaced or changed
behind DuckDB's back (copied over, restored) is noticed by its inode, size and mtime, and opened again.
Without ``fcntl`` (no turnstile to watch) nothing is shared.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import threading
import time
from collections.abc import Callable

from . import lock as store_lock

#: Seconds an instance with no open Store stays open for the next one.
IDLE_S = 10.0
#: Seconds between the reaper's looks at idle instances (and at writers waiting for them).
POLL_S = 0.2


class _Instance:
    def __init__(self, key: str, con, stamp: tuple):
        self.key, self.con, self.stamp = key, con, stamp
        self.users = 0
        self.idle_since = time.monotonic()


_GUARD = threading.RLock()
_OPEN: dict[str, _Instance] = {}
_REAPER: threading.Thread | None = None


def _key(path: pathlib.Path) -> str:
    return os.path.realpath(path)


def _stamp(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _writer_waits(path: str) -> bool:
    """Whether another process holds the store's turnstile (a writer waiting for readers to go)."""
    fcntl = store_lock.fcntl
    try:
        fd = os.open(store_lock.turnstile_path(pathlib.Path(path)), os.O_RDONLY)
    except OSError:
        return False  # no turnstile: no writer used one yet
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # the turnstile, never the store file: DuckDB's locks on that stay


def _close(inst: _Instance) -> None:
    if _OPEN.get(inst.key) is inst:
        del _OPEN[inst.key]
    with contextlib.suppress(Exception):
        inst.con.close()


def enabled() -> bool:
    return store_lock.fcntl is not None


def cursor(path: pathlib.Path) -> tuple[object, Callable[[], None]] | None:
    """A cursor of the open instance of ``path`` and the function that gives it back, or None (no instance,
    or it is stale: then it is closed when idle). The caller has passed the turnstile."""
    key = _key(path)
    with _GUARD:
        inst = _OPEN.get(key)
        if inst is None:
            return None
        if inst.stamp != _stamp(key):  # the file changed outside DuckDB: never read it through the old instance
            if inst.users == 0:
                _close(inst)
            else:
                del _OPEN[key]  # closed by its last user
            return None
        con = inst.con.cursor()
        inst.users += 1
    return con, _giver(inst)


def adopt(path: pathlib.Path, con) -> tuple[object, Callable[[], None]]:
    """Keep ``con`` (a read-only connection this process just opened and checked) as the instance of ``path``;
    returns a cursor of it for the caller and the function that gives that back."""
    key = _key(path)
    with _GUARD:
        if key in _OPEN:  # another thread opened one meanwhile: DuckDB shares it anyway
            inst = _OPEN[key]
        else:
            inst = _OPEN[key] = _Instance(key, con, _stamp(key))
            _start_reaper()
        cur = inst.con.cursor()
        inst.users += 1
    if inst.con is not con:
        con.close()
    return cur, _giver(inst)


def _giver(inst: _Instance) -> Callable[[], None]:
    done = []

    def give_back() -> None:
        if done:
            return
        done.append(True)
        with _GUARD:
            inst.users -= 1
            if inst.users:
                return
            inst.idle_since = time.monotonic()
            if _OPEN.get(inst.key) is not inst or _writer_waits(inst.key):
                _close(inst)
    return give_back


def release(path) -> None:
    """Close the shared instance of ``path`` (if idle; a busy one closes with its last user) before this
    process opens the file another way: DuckDB refuses a second instance of one file with other settings."""
    key = _key(pathlib.Path(path))
    with _GUARD:
        inst = _OPEN.get(key)
        if inst is None:
            return
        if inst.users == 0:
            _close(inst)
        else:
            del _OPEN[key]


def release_all() -> None:
    """Close every idle instance (busy ones close with their last user)."""
    with _GUARD:
        for inst in list(_OPEN.values()):
            if inst.users == 0:
                _close(inst)
            else:
                del _OPEN[inst.key]


def _reap() -> None:
    """Close idle instances a writer waits for or that were idle IDLE_S; ends when none is open or the
    process exits."""
    global _REAPER
    while True:
        time.sleep(POLL_S)
        with _GUARD:
            if _EXITING:
                _REAPER = None
                return
            now = time.monotonic()
            for inst in list(_OPEN.values()):
                if inst.users == 0 and (now - inst.idle_since >= IDLE_S or _writer_waits(inst.key)):
                    _close(inst)
            if not _OPEN:
                _REAPER = None
                return


def _start_reaper() -> None:
    global _REAPER
    if _REAPER is None:  # (called under _GUARD, as _reap clears it)
        _REAPER = threading.Thread(target=_reap, name="kernelscope-store-reaper", daemon=True)
        _REAPER.start()


_INHERITED: list[_Instance] = []
_EXITING = False


@atexit.register
def _at_exit() -> None:
    """Stop the reaper and close the idle instances here, before the interpreter finalises: a daemon thread that
    comes back from DuckDB after that is ended by pthread_exit, whose unwinding through DuckDB's C++ frames aborts
    the process ("FATAL: exception not rethrown"). The reaper closes only while it holds ``_GUARD``, so once this
    holds it the reaper is in no close, and it ends the next time it takes it (no waiting for it here: a CLI
    command would otherwise wait up to ``POLL_S`` on exit)."""
    global _EXITING
    with _GUARD:
        _EXITING = True
        release_all()


def _after_fork_in_child() -> None:
    global _REAPER, _GUARD
    _GUARD = threading.RLock()
    _REAPER = None
    _INHERITED.extend(_OPEN.values())  # busy in the parent's threads: never closed (or freed) by the child
    _OPEN.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=release_all, after_in_child=_after_fork_in_child)
