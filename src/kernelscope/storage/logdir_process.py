"""``kernelscope dashboard --logdir``: a ``logdir.Watcher`` in a child process beside the dashboard (DuckDB lets
one process write or many read a store; the dashboard's pages read it from the parent). ``start`` runs it,
``stop`` ends it; what the watcher does is storage/logdir.py's docstring."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from dataclasses import dataclass

from .logdir import POLL_S, Watcher, _first_line


@dataclass
class Running:
    """A watcher in a child process (``start``); ``stop`` ends it."""

    process: object
    stop_event: object
    stage_dir: pathlib.Path


def _child(logdir: str, db_path: str, stage_dir: str, stop_event, interval: float) -> None:
    """The child's loop: poll until told to stop or the parent is gone. SIGINT is ignored (the terminal's Ctrl-C
    reaches the whole process group; the parent stops us)."""
    import multiprocessing
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    w = Watcher(pathlib.Path(logdir), pathlib.Path(db_path), stage_dir=pathlib.Path(stage_dir))
    parent, said = multiprocessing.parent_process(), None
    while not stop_event.is_set() and (parent is None or parent.is_alive()):
        try:
            w.poll()
        except Exception as exc:  # the dashboard goes on; the watcher says why once and tries again
            line = f"kernelscope: logdir: {_first_line(exc)}"
            if line != said:
                said = line
                w.say(line)
        stop_event.wait(interval)


def start(logdir, db_path, interval: float = POLL_S) -> Running:
    """Start a Watcher of ``logdir`` into ``db_path`` in a child process (spawned: the parent holds DuckDB
    threads) that ignores Ctrl-C; its stage stores go to a folder beside the store."""
    import multiprocessing
    import signal

    db_path = pathlib.Path(db_path).resolve()
    prefix = f".{db_path.name}.logdir-"
    for old in db_path.parent.glob(prefix + "*-*"):  # left by a watcher that was killed: its pid is gone
        pid = old.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    stage = pathlib.Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=db_path.parent))
    ctx = multiprocessing.get_context("spawn")
    stop_event = ctx.Event()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child starts with Ctrl-C ignored
    try:
        proc = ctx.Process(target=_child, args=(str(logdir), str(db_path), str(stage), stop_event, interval),
                           name="kernelscope-logdir", daemon=True)
        proc.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    return Running(proc, stop_event, stage)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


#: Seconds ``stop`` waits for the watcher's unit in progress, and then for the terminated child.
STOP_WAIT_S, TERMINATE_WAIT_S = 10.0, 5.0
STOP_S = STOP_WAIT_S + TERMINATE_WAIT_S  # the longest ``stop`` takes


def stop(running: Running, timeout: float = STOP_WAIT_S) -> None:
    """Tell the watcher to stop, wait for the unit it is ingesting (up to ``timeout`` s; then end it: a copy cut
    short is rolled back by DuckDB), and remove its stage folder."""
    running.stop_event.set()
    running.process.join(timeout)
    if running.process.is_alive():
        running.process.terminate()
        running.process.join(TERMINATE_WAIT_S)
    shutil.rmtree(running.stage_dir, ignore_errors=True)
