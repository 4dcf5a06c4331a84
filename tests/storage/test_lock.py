"""Taking turns on a store (storage/lock.py, issue 11): a writer waits for readers (short-lived dashboard
pages, `kernelscope sql`) instead of failing after 2 s, readers hold back while a writer waits, another writer
still fails fast, the messages say who holds the lock and whether it reads or writes, and opening the store
again never drops the read locks this process holds."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from stores import empty

from kernelscope.errors import StoreLockedError
from kernelscope.storage import lock as store_lock
from kernelscope.storage.store import open_store


@pytest.fixture
def db(tmp_path):
    return empty(tmp_path / "s.duckdb")  # a migrated store, as open_store(p).close() leaves it


def _hold(db, seconds: float, read_only: bool = True):
    """Another process holding the store (read-only or writing) for ``seconds``; returns once it holds it."""
    code = ("import sys, time, duckdb; c = duckdb.connect(sys.argv[1], read_only=sys.argv[3] == 'ro'); "
            "c.execute('SELECT count(*) FROM traces').fetchall(); print('ready', flush=True); "
            "time.sleep(float(sys.argv[2])); c.close(); print('done', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db), str(seconds), "ro" if read_only else "rw"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _writer_in_a_process(db, readers_wait_s: float | None = None):
    """`open_store(db)` (a writer) in a fresh process: (exit code, stderr, seconds it took)."""
    setup = f"import kernelscope.storage.lock as L; L.READERS_WAIT_S = {readers_wait_s}; " if readers_wait_s else ""
    code = (f"{setup}import sys; from kernelscope.storage.store import open_store\n"
            "try:\n    open_store(sys.argv[1]).close()\nexcept Exception as e:\n"
            "    print(e, file=sys.stderr); sys.exit(4)")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(db)], check=False, capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stderr.strip(), time.monotonic() - t0


def test_a_writer_waits_for_a_reader_to_finish(db):
    """Before: the writer gave up after 2 s and called the reader a writer."""
    reader = _hold(db, 4.0)
    try:
        t0 = time.monotonic()
        open_store(db).close()  # a writer
        waited = time.monotonic() - t0
        assert 2.5 < waited < 20, waited  # it waited for the reader's 4 s (minus start-up), not 2 s
        assert reader.stdout.readline().strip() == "done"
    finally:
        reader.kill()
        reader.wait()


def test_a_writer_gives_up_on_readers_after_the_limit_and_says_they_read(db):
    reader = _hold(db, 30.0)
    try:
        rc, err, seconds = _writer_in_a_process(db, readers_wait_s=1.5)
        assert rc == 4 and f"open for reading by PID {reader.pid}" in err and "writing" not in err, err
        assert "not free within 1.5 s" in err and "\n" not in err
        assert seconds < 20
    finally:
        reader.kill()
        reader.wait()


def test_a_second_writer_still_fails_fast_and_is_called_a_writer(db):
    writer = _hold(db, 30.0, read_only=False)
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreLockedError) as info:
            open_store(db)
        assert time.monotonic() - t0 < 5.0
        assert f"locked by PID {writer.pid}" in str(info.value) and "which is writing to it" in str(info.value)
        with pytest.raises(StoreLockedError, match="which is writing to it"):  # a reader meets it too
            open_store(db, read_only=True)
    finally:
        writer.kill()
        writer.wait()


def test_readers_hold_back_while_a_writer_waits(db):
    """A writer waiting for its turn holds the turnstile: a new reader waits (at most LOCK_WAIT_S), then says
    the store is busy; once the turnstile is free it reads."""
    side = store_lock.turnstile_path(db)
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('ready', flush=True); time.sleep(3)")
    waiting_writer = subprocess.Popen([sys.executable, "-c", code, str(side)], stdout=subprocess.PIPE, text=True)
    try:
        assert waiting_writer.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        with pytest.raises(StoreLockedError, match="about to write"):
            open_store(db, read_only=True)
        assert store_lock.LOCK_WAIT_S - 0.1 < time.monotonic() - t0 < 10
        waiting_writer.wait(timeout=30)
        open_store(db, read_only=True).close()
    finally:
        waiting_writer.kill()
        waiting_writer.wait()


def test_opening_the_store_again_keeps_this_process_read_lock(db):
    """Closing any descriptor of a file drops every POSIX lock the process holds on it: the magic-bytes
    check (read the file's first bytes before connecting) dropped the read lock of the connections already
    open here, so a writer could change the file under them. It now runs only after DuckDB refused a file."""
    with open_store(db, read_only=True) as first:
        first.con.execute("SELECT count(*) FROM traces").fetchall()
        open_store(db, read_only=True).close()  # a second page opened and closed meanwhile
        assert store_lock.holders(db) is None  # our own lock is not "another process"
        rc, err, _ = _writer_in_a_process(db, readers_wait_s=1.0)
        assert rc == 4 and f"open for reading by PID {os.getpid()}" in err, err
        assert first.con.execute("SELECT count(*) FROM traces").fetchall() == [(0,)]


def test_holders_tells_readers_from_a_writer(db):
    if not os.path.exists("/proc/locks"):
        pytest.skip("no /proc/locks")
    assert store_lock.holders(db) is None
    r = _hold(db, 30.0)
    try:
        assert store_lock.holders(db) == "readers"
    finally:
        r.kill()
        r.wait()
    w = _hold(db, 30.0, read_only=False)
    try:
        assert store_lock.holders(db) == "writer"
    finally:
        w.kill()
        w.wait()


def test_a_sql_connection_stays_locked_after_waiting_for_a_writer(db):
    """The retry loop kept `lock_configuration` only on its first try: a user-SQL connection opened after a
    wait could change settings. Now every try keeps it."""
    from kernelscope.errors import KernelscopeError
    from kernelscope.storage.queries import run_readonly_sql

    writer = _hold(db, 1.0, read_only=False)
    try:
        t0 = time.monotonic()
        with pytest.raises(KernelscopeError, match="configuration"):
            run_readonly_sql(db, "SET threads = 1")  # it waited for the writer, then refused the setting
        assert time.monotonic() - t0 > 0.3  # it did meet the writer and retry
    finally:
        writer.kill()
        writer.wait()
