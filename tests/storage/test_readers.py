"""One shared read-only DuckDB instance per store per process (storage/readers.py): read-only opens after the
first cost a cursor, not a new instance; a writer in another process still gets in at once; what it wrote is
read afterwards; a file copied over the store is read again; this process can write after reading; a forked
child can open the store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import duckdb
import pytest
from stores import empty

from kernelscope.storage import readers
from kernelscope.storage import store as store_mod
from kernelscope.storage.store import open_store


@pytest.fixture
def db(tmp_path):
    readers.release_all()
    yield empty(tmp_path / "s.duckdb")
    readers.release_all()


def _count_connects(monkeypatch) -> list:
    calls = []
    real = duckdb.connect

    def counting(*args, **kwargs):
        calls.append(args[0] if args else kwargs.get("database"))
        return real(*args, **kwargs)
    monkeypatch.setattr(duckdb, "connect", counting)
    return calls


def _in_a_process(db, code: str, readers_wait_s: float = 30.0):
    """Run ``code`` (with ``db`` as sys.argv[1]) in a fresh process: (exit code, stdout, stderr, seconds)."""
    setup = f"import kernelscope.storage.lock as L; L.READERS_WAIT_S = {readers_wait_s}\n"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", setup + code, str(db)], check=False, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip(), time.monotonic() - t0


def test_read_only_opens_share_one_instance_and_keep_their_own_temp_tables(db, monkeypatch):
    calls = _count_connects(monkeypatch)
    a = open_store(db, read_only=True)
    b = open_store(db, read_only=True)
    a.con.execute("CREATE TEMP TABLE only_a AS SELECT 1 AS x")
    assert b.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'only_a'").fetchone() == (0,)
    a.close()
    for _ in range(5):
        with open_store(db, read_only=True) as s:
            assert s.schema_version() == store_mod.code_schema_version()
    b.close()
    assert calls == [str(db)]  # one instance for seven read-only opens


def test_a_writer_in_another_process_gets_in_while_this_one_keeps_the_instance(db, monkeypatch):
    monkeypatch.setattr(readers, "IDLE_S", 600.0)  # never given up for idleness in this test
    with open_store(db, read_only=True) as s:
        s.con.execute("SELECT count(*) FROM traces").fetchall()
    assert readers._OPEN  # kept open, holding DuckDB's read lock on the file
    code = ("import sys; from kernelscope.storage.store import open_store\n"
            "with open_store(sys.argv[1]) as s:\n"
            "    s.con.execute('CREATE TABLE written_by_other AS SELECT 42 AS v')\n")
    rc, _, err, took = _in_a_process(db, code, readers_wait_s=8.0)
    assert rc == 0, err  # the writer took the turnstile, the reaper saw it and closed the idle instance
    assert took < 8.0
    assert not readers._OPEN
    deadline = time.monotonic() + 5
    while readers._REAPER is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert readers._REAPER is None  # with nothing open the reaper thread ends
    with open_store(db, read_only=True) as s:  # a new instance: the other process's write is there
        assert s.con.execute("SELECT v FROM written_by_other").fetchone() == (42,)


def test_a_file_copied_over_the_store_is_read_again(db, tmp_path):
    other = empty(tmp_path / "other.duckdb")
    with open_store(other) as s:
        s.con.execute("CREATE TABLE marker AS SELECT 'other' AS v")
    with open_store(db, read_only=True) as s:
        assert s.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'marker'").fetchone() == (0,)
    shutil.copyfile(other, db)  # a restore from a copy, behind DuckDB's back
    with open_store(db, read_only=True) as s:
        assert s.con.execute("SELECT v FROM marker").fetchone() == ("other",)


def test_this_process_writes_after_reading_and_then_reads_its_write(db):
    with open_store(db, read_only=True) as s:
        s.con.execute("SELECT count(*) FROM traces").fetchall()
    with open_store(db) as s:  # read-write: the shared read-only instance is given up first
        s.con.execute("CREATE TABLE mine AS SELECT 7 AS v")
    with open_store(db, read_only=True) as s:
        assert s.con.execute("SELECT v FROM mine").fetchone() == (7,)


def test_a_sql_connection_with_its_own_settings_opens_beside_reads(db):
    from kernelscope.storage.queries import ReadonlySql

    with open_store(db, read_only=True) as s:
        s.con.execute("SELECT 1").fetchall()
    with ReadonlySql(db, "SELECT count(*) AS n FROM traces") as q:  # its own limits: another configuration
        assert [b.to_pylist() for b in q.batches()] == [[{"n": 0}]]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_opens_the_store(db):
    with open_store(db, read_only=True) as s:
        s.con.execute("SELECT count(*) FROM traces").fetchall()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: open, query, report, leave without running the parent's cleanup
        code = 1
        try:
            with open_store(db, read_only=True) as s:
                code = 0 if s.con.execute("SELECT count(*) FROM traces").fetchone() == (0,) else 2
        finally:
            os.write(w, bytes([code]))
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung opening the store")
    assert os.read(r, 1) == b"\x00" and os.waitstatus_to_exitcode(status) == 0


def test_at_exit_the_reaper_stops_and_idle_instances_close_on_the_calling_thread(db, monkeypatch):
    """Twice in a day a pytest worker aborted as it exited ("terminate called ... FATAL: exception not
    rethrown"): a daemon thread coming back from DuckDB while the interpreter finalises is ended by pthread_exit,
    whose unwinding through DuckDB's C++ frames aborts. The reaper closes instances on a daemon thread, so the
    exit hook closes what is idle itself, on its own thread, without waiting, and the reaper ends."""
    closed_on = []
    real_close = readers._close
    monkeypatch.setattr(readers, "_close", lambda inst: (closed_on.append(threading.current_thread()),
                                                        real_close(inst)))
    monkeypatch.setattr(readers, "IDLE_S", 3600.0)  # the reaper alone would keep it open
    # the reaper starts its first 2 s sleep with the open below: an exit that waited for its next look would take
    # over a second (at 0.2 s, a loaded CI machine once took 0.21 s to close the instance: no margin to tell them
    # apart)
    readers.release_all()  # no reaper of an earlier test, still on 0.2 s sleeps: ours is the one just started
    deadline = time.monotonic() + 5
    while readers._REAPER is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    monkeypatch.setattr(readers, "POLL_S", 2.0)
    with open_store(db, read_only=True) as s:
        s.con.execute("SELECT 1").fetchall()
    reaper = readers._REAPER
    assert reaper is not None and reaper.is_alive() and readers._OPEN
    try:
        t0 = time.monotonic()
        readers._at_exit()
        assert time.monotonic() - t0 < readers.POLL_S / 2  # the exit does not wait for the reaper's next look
        assert readers._OPEN == {} and closed_on == [threading.current_thread()]
        reaper.join(timeout=3 * readers.POLL_S)
        assert not reaper.is_alive() and readers._REAPER is None and closed_on == [threading.current_thread()]
    finally:
        readers._EXITING = False
