"""The script's passes run as child processes (runner.py's un-profiled and profiled runs, the nsys and ncu
passes); none may outlive kernelscope.

``kill PID`` of ``kernelscope profile`` (a scheduler, a container stop, a parent's ``proc.terminate()``) used to
end the parent at once and leave the script running on the GPU with nobody to collect it. ``profile`` and
``sweep`` turn SIGTERM into ``SystemExit(143)`` (cli.app.stop_within), and ``run_child`` stops its child on
any exception that ends the wait (that one, or Ctrl-C's KeyboardInterrupt): SIGTERM, then SIGKILL after
``STOP_GRACE_S``; a child that runs past its ``timeout`` is stopped the same way.
"""

from __future__ import annotations

import subprocess

#: Seconds a child has to exit after SIGTERM before it is killed.
STOP_GRACE_S = 5.0


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM ``proc`` (its own handlers run), SIGKILL if still alive ``STOP_GRACE_S`` later; reaped."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_child(argv: list[str], *, env: dict | None = None, timeout: float | None = None,
              on_stop=None) -> int | None:
    """Run ``argv`` to its end and return its exit code; None when it ran past ``timeout`` (it is stopped).

    When the wait ends by an exception (kernelscope told to stop), the child is stopped before the exception
    goes on, and ``on_stop(pid)`` (if given) says so."""
    proc = subprocess.Popen(argv, env=env)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        return None
    except BaseException:
        stop(proc)
        if on_stop is not None:
            on_stop(proc.pid)
        raise
