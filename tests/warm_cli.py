"""``python -m kernelscope.cli ARGS`` as a process forked from a warm one: what a user sees, without paying
~0.7 s of CPU per invocation to start Python and import DuckDB, pandas and pyarrow again.

``run(args, input=..., env=..., cwd=..., timeout=...)`` returns a ``subprocess.CompletedProcess`` (text, as
``subprocess.run(..., capture_output=True, text=True)`` gives it) or raises ``subprocess.TimeoutExpired``.

Each pytest process (each xdist worker) starts one server on first use: ``python tests/warm_cli.py`` imports
what tests/hostile_harness.py imports (kernelscope, DuckDB, pandas, pyarrow; it never opens a database: a
process holding DuckDB threads must not fork) and then forks one child per request. The child is the process
a user would have started:

- stdin is a pipe holding the request's bytes (empty unless given), stdout and stderr are files;
- its environment is exactly the request's (``os.environ`` of the test when none is given, as subprocess
  does), its working directory the request's (the test's when none is given);
- it runs ``runpy.run_module("kernelscope.cli", run_name="__main__")``, the code ``python -m kernelscope.cli``
  runs, and ends as Python would: the exit code of a ``SystemExit`` (its message when it is not a number),
  the traceback of an uncaught exception and exit 1, atexit handlers, flushed output, a garbage collection;
  only what a module still holds is not finalised (``_run_as_main``);
- past ``timeout`` it is killed (SIGKILL) and ``TimeoutExpired`` raised, as ``subprocess.run`` does.

Use a real subprocess where the process itself is what a test checks: the ``python -m kernelscope`` entry
point, interpreter start-up, signals, peak memory of the whole process, or a command that imports torch.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "kernelscope.cli"


def _send(sock: socket.socket, obj) -> None:
    data = pickle.dumps(obj)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _recv(sock: socket.socket):
    head = _read_exact(sock, 8)
    if head is None:
        return None
    data = _read_exact(sock, struct.unpack("!Q", head)[0])
    return pickle.loads(data)


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------------------------------- the client

class _Client:
    def __init__(self) -> None:
        here, there = socket.socketpair()
        self.sock = here
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "warm_cli.py"), str(there.fileno())],
                                     pass_fds=[there.fileno()], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=None, cwd=HERE)
        there.close()
        self.lock = threading.Lock()

    def call(self, request: dict) -> dict:
        with self.lock:
            _send(self.sock, request)
            reply = _recv(self.sock)
        if reply is None:
            raise RuntimeError(f"the warm CLI server ended (exit {self.proc.poll()})")
        return reply

    def close(self) -> None:
        try:
            self.sock.close()
            self.proc.wait(timeout=10)
        except Exception:  # the session is ending: make sure it is gone
            self.proc.kill()


_CLIENT: _Client | None = None
#: CPU seconds (user + system) the children of this process's server used, and how many ran.
SPENT = {"cpu_s": 0.0, "calls": 0}


def _client() -> _Client:
    global _CLIENT
    if _CLIENT is None or _CLIENT.proc.poll() is not None:
        _CLIENT = _Client()
        atexit.register(_CLIENT.close)
    return _CLIENT


def _text(data: bytes) -> str:
    """What ``subprocess.run(text=True)`` makes of the bytes (locale encoding, universal newlines)."""
    import locale

    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def run(args, *, input: str | bytes | None = None, env: dict | None = None, cwd=None,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, "-m", "kernelscope.cli", *args], capture_output=True, text=True,
    input=input, env=env, cwd=cwd, timeout=timeout)``, in a child of the warm server."""
    args = [str(a) for a in args]
    cmd = [sys.executable, "-m", MODULE, *args]
    stdin = input.encode(sys.stdin.encoding or "utf-8") if isinstance(input, str) else (input or b"")
    reply = _client().call({"args": args, "stdin": stdin, "timeout": timeout,
                            "env": dict(os.environ if env is None else env),
                            "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd())})
    out, err = _text(reply["stdout"]), _text(reply["stderr"])
    if reply["timed_out"]:
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
    done = subprocess.CompletedProcess(cmd, reply["returncode"], out, err)
    done.cpu_s = reply["cpu_s"]  # the child's user + system CPU seconds
    SPENT["cpu_s"] += reply["cpu_s"]
    SPENT["calls"] += 1
    return done


# ------------------------------------------------------------------------------------------- the server

def _serve(sock: socket.socket, scratch: str) -> dict:
    """Answer requests until the client goes; returns only in a forked child, with its request."""
    out_path, err_path = os.path.join(scratch, "out"), os.path.join(scratch, "err")
    while True:
        request = _recv(sock)
        if request is None:  # the test process is done
            shutil.rmtree(scratch, ignore_errors=True)
            os._exit(0)
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(write_end)
            sock.close()
            import hostile_harness

            hostile_harness.redirect_stdio(read_end, out_path, err_path)
            return request
        os.close(read_end)
        writer = threading.Thread(target=_write_all, args=(write_end, request["stdin"]), daemon=True)
        writer.start()
        pidfd = os.pidfd_open(pid)
        ready, _, _ = select.select([pidfd], [], [], request["timeout"])
        timed_out = not ready
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        os.close(pidfd)
        writer.join()
        with open(out_path, "rb") as f_out, open(err_path, "rb") as f_err:
            reply = {"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
                     "stdout": f_out.read(), "stderr": f_err.read(), "cpu_s": usage.ru_utime + usage.ru_stime}
        _send(sock, reply)


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:  # the child did not read it all, as a process may
        pass
    finally:
        os.close(fd)


def _main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    import gc

    import hostile_harness  # noqa: F401 -- the warm imports: kernelscope, DuckDB, pandas, pyarrow

    gc.freeze()  # the children's collections skip the warm objects (and do not copy their pages)

    scratch = tempfile.mkdtemp(prefix="kernelscope-warm-cli-")
    request = _serve(sock, scratch)
    # the forked child: become `python -m kernelscope.cli ARGS` run from cwd with env
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # python -m puts the working directory first
    sys.argv = [sys.argv[0], *request["args"]]
    os._exit(_run_as_main() & 0xFF)


def _run_as_main() -> int:
    """Run ``python -m kernelscope.cli`` here and end as the interpreter would: the exit code of a SystemExit
    (its message on stderr when it is not a number), the traceback of an uncaught exception and exit 1, then
    atexit handlers, flushed stdout/stderr and garbage collected. What Python would still free at shutdown
    (objects a module keeps) is left to the kernel: a full interpreter teardown of the warm process costs
    ~60 ms of CPU per call."""
    import atexit
    import gc
    import runpy

    try:
        runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # Python reports a failed flush at exit and exits 120
            code = 120
    gc.collect()
    return code


if __name__ == "__main__":
    _main()
