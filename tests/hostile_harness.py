"""Run CLI invocations, each in a forked child of one warm process, measuring what a user would see.

Usage: ``python tests/hostile_harness.py SPEC.json RESULTS.json``. SPEC holds ``{"lanes": [store, ...],
"cases": [{"name", "argv", "lane", "timeout_s", "mem_cap_mb", "env", "own_db"}]}``; ``{db}`` in argv is the
lane's store. The parent imports kernelscope, DuckDB, pyarrow and pandas once and never opens a database
(a process holding DuckDB threads must not fork); each case then runs in a child forked from it:

- stdin from /dev/null, stdout and stderr to files: exactly what the console script prints;
- ``kernelscope.cli.main(argv)``: the console script's own entry point, its real exit code (an uncaught
  exception prints its traceback and exits 1, as Python would);
- wall time, and peak RSS from the child's own ``getrusage`` before anything else runs; the baseline is the
  child's RSS when it starts (what it maps from its parent), so the growth is what the command added;
- then, for a lane store: its sha256 (and any WAL next to it); when the bytes differ from before the case, the
  row count of every table (read-only). Identical bytes mean identical rows without opening DuckDB again.

The parent runs up to ``len(lanes)`` children at once (one per lane, so a store never has two users), kills a
child past its time limit (``timed_out``) or past ``mem_cap_mb`` of RSS (``killed_memory``, polled every 5
ms: a safety valve for the machine, the test asserts the measured peak). Results: one JSON object per case.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import sys
import time
import traceback

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.pop("KERNELSCOPE_DB", None)

import duckdb  # noqa: F401  -- imported, never connected, in the parent
import pandas  # noqa: F401
import pyarrow
import pyarrow.compute
import pyarrow.parquet  # noqa: F401

import kernelscope.analysis
import kernelscope.cli
import kernelscope.parsers.kineto
import kernelscope.parsers.ncu
import kernelscope.parsers.nsys
import kernelscope.storage.ingest
import kernelscope.storage.ncu

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _rss_kb(pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def table_counts(db: str) -> dict[str, int]:
    from kernelscope.storage.store import open_store

    with open_store(db, read_only=True) as s:
        tables = sorted(r[0] for r in s.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_type = 'BASE TABLE'").fetchall())
        row = s.con.execute("SELECT " + ", ".join(f'(SELECT count(*) FROM "{t}")' for t in tables)).fetchone()
        return dict(zip(tables, row))


def file_sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    for extra in (".wal", ".tmp"):  # a WAL left behind is a change too
        if os.path.exists(path + extra):
            h.update(extra.encode() + str(os.path.getsize(path + extra)).encode())
    return h.hexdigest()


def redirect_stdio(stdin_fd: int, out_path: str, err_path: str) -> None:
    """In a forked child: ``stdin_fd`` becomes fd 0 (and is closed), fds 1 and 2 write to new files at
    ``out_path`` and ``err_path`` (also used by tests/warm_cli.py)."""
    if stdin_fd != 0:
        os.dup2(stdin_fd, 0)
        os.close(stdin_fd)
    for fd, path in ((1, out_path), (2, err_path)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)


def _child(case: dict, db: str | None, out_dir: str, prev_sha: str | None) -> None:
    """Runs in the forked child; never returns."""
    code = 70
    try:
        base = os.path.join(out_dir, case["name"])
        redirect_stdio(os.open(os.devnull, os.O_RDONLY), base + ".out", base + ".err")
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
        sys.stderr = open(2, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
        os.environ.update(case.get("env") or {})
        argv = [a.replace("{db}", db or "") for a in case["argv"]]
        start_kb = _rss_kb()  # what the child holds from its parent before it runs anything
        t0 = time.monotonic()
        try:
            kernelscope.cli.main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what Python prints for an uncaught exception
            traceback.print_exc()
            code = 1
        wall = time.monotonic() - t0
        sys.stdout.flush()
        sys.stderr.flush()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = {"code": code, "wall_s": wall, "peak_kb": peak, "baseline_kb": start_kb}
        if db:
            try:
                result["sha"] = file_sha(db)
                if result["sha"] != prev_sha:  # identical bytes: identical rows, no need to open it
                    result["counts"] = table_counts(db)
            except BaseException as exc:  # reported, the test fails on it
                result["counts_error"] = f"{type(exc).__name__}: {exc}"
        with open(base + ".json", "w") as f:
            json.dump(result, f)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code if 0 <= code < 256 else 1)


def run(spec: dict, out_dir: str) -> list[dict]:
    lanes: list[str] = spec["lanes"]
    pending = {i: [c for c in spec["cases"] if c["lane"] == i] for i in range(len(lanes))}
    running: dict[int, tuple[int, dict, float, int, int]] = {}  # pid -> (lane, case, start, baseline, peak)
    results = []
    before = {i: spec.get("counts", {}).get(str(i)) for i in range(len(lanes))}
    sha = {i: file_sha(lanes[i]) for i in range(len(lanes))}
    while any(pending.values()) or running:
        busy = {lane for lane, *_ in running.values()}
        for lane in range(len(lanes)):
            if lane in busy or not pending[lane]:
                continue
            case = pending[lane].pop(0)
            baseline = _rss_kb()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(case, None if case.get("own_db") else lanes[lane], out_dir, sha[lane])
            running[pid] = (lane, case, time.monotonic(), baseline, 0)
        time.sleep(0.005)
        for pid in list(running):
            lane, case, start, baseline, peak = running[pid]
            done, status, usage = os.wait4(pid, os.WNOHANG)
            elapsed = time.monotonic() - start
            rss = _rss_kb(pid) if not done else 0
            running[pid] = (lane, case, start, baseline, max(peak, rss))
            killed = None
            if not done and elapsed > case["timeout_s"]:
                killed = "timed_out"
            elif not done and rss > case["mem_cap_mb"] * 1024 + baseline:
                killed = "killed_memory"
            if killed:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                done = pid
            if not done:
                continue
            del running[pid]
            base = os.path.join(out_dir, case["name"])
            res = {"name": case["name"], "lane": lane, "baseline_kb": baseline, "wall_s": elapsed,
                   "peak_kb": max(usage.ru_maxrss, peak), "counts_before": before[lane]}
            try:
                with open(base + ".json") as f:
                    res.update(json.load(f))
            except (OSError, ValueError):
                res["code"] = os.waitstatus_to_exitcode(status)
            for suffix, key in ((".out", "stdout"), (".err", "stderr")):
                try:
                    with open(base + suffix, "rb") as f:
                        res[key] = f.read(200_000).decode("utf-8", "backslashreplace")
                except OSError:
                    res[key] = ""
            if killed:
                res[killed] = True
            if "sha" in res and "counts" not in res:
                res["counts"] = before[lane]  # the store's bytes did not change
            if "counts" in res:
                before[lane] = res["counts"]
            if "sha" in res:
                sha[lane] = res["sha"]
            results.append(res)
    return results


def main() -> None:
    spec_path, results_path = sys.argv[1:3]
    with open(spec_path) as f:
        spec = json.load(f)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(results_path)), "hostile_out")
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.monotonic()
    results = run(spec, out_dir)
    with open(results_path, "w") as f:
        json.dump({"results": results, "wall_s": time.monotonic() - t0}, f)


if __name__ == "__main__":
    main()
