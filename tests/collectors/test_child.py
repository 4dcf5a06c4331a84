"""collectors/child.py: a pass's child process never outlives kernelscope, nor its own time limit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kernelscope.collectors import child

# A child that says it is up, then sleeps; with "ignore" it ignores SIGTERM (only SIGKILL ends it).
SLEEPER = ("import signal, sys, time\n"
           "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "open(sys.argv[2], 'w').write('up')\n"
           "time.sleep(60)\n")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_up(path, limit_s=30.0):
    end = time.monotonic() + limit_s
    while not path.exists():
        assert time.monotonic() < end, "the child never started"
        time.sleep(0.02)


def test_a_child_past_its_time_limit_is_stopped_and_reaped(tmp_path):
    t0 = time.monotonic()
    assert child.run_child([sys.executable, "-c", SLEEPER, "obey", str(tmp_path / "up")], timeout=1.0) is None
    assert time.monotonic() - t0 < 10  # SIGTERM ended it at once, not the 60 s sleep


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(child, "STOP_GRACE_S", 0.5)
    up = tmp_path / "up"
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, "ignore", str(up)])
    _wait_up(up)
    t0 = time.monotonic()
    child.stop(proc)
    assert proc.returncode == -signal.SIGKILL and 0.4 < time.monotonic() - t0 < 10


def test_when_kernelscope_is_stopped_its_child_is_stopped_and_said(tmp_path):
    """The wait ends by an exception (SIGTERM as SystemExit(143) in `profile`, or Ctrl-C): the child goes first."""
    up = tmp_path / "up"
    said = []

    def interrupt():
        _wait_up(up)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def on_usr1(_signum, _frame):
        raise SystemExit(143)

    old = signal.signal(signal.SIGUSR1, on_usr1)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(SystemExit):
            child.run_child([sys.executable, "-c", SLEEPER, "obey", str(up)], on_stop=said.append)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert len(said) == 1 and _gone(said[0])
