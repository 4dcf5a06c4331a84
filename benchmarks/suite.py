"""Where the test suite's time goes: the README's test command with a per-test CPU log and the machine's CPU.

    python3 benchmarks/suite.py [--out FILE.md] [-- PYTEST ARGS]

Runs ``pytest`` (the project venv's, from the repository root, so ``pyproject.toml``'s addopts apply: xdist
workers and all) with this file loaded as a plugin in every worker, and samples ``/proc/stat`` twice a second
while it runs. Prints (and with ``--out`` writes) a Markdown table:

- the wall time, and the CPU the whole machine spent meanwhile (busy core-seconds from ``/proc/stat``; run it on
  a quiet machine, since anything else running is counted too) against the CPU that per-process accounting
  sees (the pytest process tree's ``getrusage`` children). The difference is work no pytest process waits
  for: headless Chromium (started by Playwright's driver), Ray's daemons, forked helpers;
- the share of the run during which the machine was saturated (>= 95% of its cores busy): a run that is
  saturated throughout can only get faster by doing less work, not by more workers;
- the CPU the README's 240 s target leaves (cores x 240 s) against the busy core-seconds;
- per test module: tests, summed test wall time, the test processes' own CPU and their waited-for
  children's CPU (a test's Chromium is not among them), largest first;
- per kind of process (every process's CPU read from ``/proc/PID/stat`` at each sample): the xdist workers,
  Chromium, the profiled scripts, Ray, and the machine's own kernel threads and init (on a Firecracker VM:
  ``kdamond`` reclaiming memory, ``process_api``), which work harder while the suite runs. A process that lives
  less than a sample interval is missed, so this part is a lower bound.

Linux only (``/proc/stat``). A test's CPU is that of its xdist worker while the test ran (setup, call and
teardown, so a session fixture lands on the first test that needs it).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_ENV = "KERNELSCOPE_SUITE_LOG"
_log = None


def _cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Plugin side: one JSON line per test (id, start, end, own CPU, children's CPU) into the run's folder."""
    global _log
    folder = os.environ.get(_ENV)
    if not folder:
        yield
        return
    if _log is None:
        _log = open(Path(folder) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a")
    (own, kids), t0 = _cpu(), time.time()
    yield
    own2, kids2 = _cpu()
    _log.write(json.dumps({"id": item.nodeid, "t0": t0, "t1": time.time(), "own": own2 - own,
                           "children": kids2 - kids}) + "\n")
    _log.flush()


def pytest_sessionfinish(session, exitstatus):
    if _log is not None:
        _log.close()


def _busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle, sum(v[:8])


#: (kind, test on "comm\0cmdline") in order; the first that matches names a process. Kernel threads have no cmdline.
_KINDS = [("xdist workers", lambda c: "exec(eval(sys.stdin.readline()))" in c),
          ("Chromium", lambda c: c.startswith("chrom")),
          ("Playwright driver (node)", lambda c: c.startswith("node")),
          ("profiled scripts (kernelscope.collectors)", lambda c: "kernelscope.collectors" in c),
          ("Ray", lambda c: "ray" in c.split("\0", 1)[1] or c.startswith(("raylet", "gcs_server"))),
          ("tests/warm_cli.py and its forks", lambda c: "warm_cli" in c),
          ("other Python (CLI subprocesses, pools, hostile cases)", lambda c: "python" in c),
          ("kernel threads", lambda c: c.endswith("\0"))]


def _kind(comm: str, cmd: str) -> str:
    c = f"{comm}\0{cmd}"
    return next((k for k, test in _KINDS if test(c)), comm)


def _processes(hz: int) -> dict[tuple[str, str], tuple[str, float]]:
    """(pid, start time) -> (kind, CPU seconds so far) of every process now running."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read(300).replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue
        comm, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        kind = _kind(comm, cmd) if cmd else ("kernel threads" if comm.startswith("kworker") else comm)
        out[(pid, fields[19])] = (kind, (int(fields[11]) + int(fields[12])) / hz)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    ap.add_argument("--target", type=float, default=240.0, help="the wall-time target in seconds (README)")
    args, rest = ap.parse_known_args()
    rest = [a for a in rest if a != "--"]
    cores = len(os.sched_getaffinity(0))
    hz = os.sysconf("SC_CLK_TCK")
    pytest_bin = ROOT / ".venv" / "bin" / "pytest"
    cmd = [str(pytest_bin) if pytest_bin.exists() else "pytest", "-p", "suite", *rest]
    samples: list[tuple[float, float]] = []  # (time, busy cores over the last interval)
    stop = threading.Event()

    before = _processes(hz)  # CPU the processes already running had spent: not the suite's
    procs: dict[tuple[str, str], tuple[str, float]] = {}

    def sample():
        prev = _busy_jiffies()
        while not stop.wait(0.5):
            cur, t = _busy_jiffies(), time.time()
            samples.append((t, cores * (cur[0] - prev[0]) / max(1, cur[1] - prev[1])))
            prev = cur
            for key, (kind, cpu) in _processes(hz).items():  # a process keeps the kind it was first seen as
                procs[key] = (procs.get(key, (kind,))[0], cpu)  # (an ended one, not yet reaped, has no cmdline)

    with tempfile.TemporaryDirectory(prefix="kernelscope-suite-") as folder:
        env = {**os.environ, _ENV: folder,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
        busy0, t0 = _busy_jiffies()[0], time.time()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, busy = time.time() - t0, (_busy_jiffies()[0] - busy0) / hz
        stop.set()
        sampler.join()
        rows = [json.loads(line) for f in Path(folder).glob("*.jsonl") for line in f.read_text().splitlines()]
    accounted = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    saturated = sum(1 for _, b in samples if b >= 0.95 * cores) / max(1, len(samples))
    mods: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for r in rows:
        m = mods[r["id"].split("::")[0]]
        m[0] += 1
        m[1] += r["t1"] - r["t0"]
        m[2] += r["own"]
        m[3] += r["children"]
    lines = [
        f"# The test suite's time: `pytest {' '.join(rest)}` (pytest exit {rc})", "",
        f"- machine: {cores} cores; {len(rows)} tests; git {_git_head()}",
        f"- wall: **{wall:.1f} s** (target {args.target:.0f} s)",
        f"- machine CPU while it ran: **{busy:.0f} core-s** (busy {busy / wall:.2f} of {cores} cores on average; "
        f"saturated >= 95% for {100 * saturated:.0f}% of the run)",
        f"- CPU the pytest process tree accounts for (getrusage children): {accounted:.0f} core-s; not accounted "
        f"(Chromium, Ray daemons, forked helpers, anything else running): {busy - accounted:.0f} core-s",
        f"- at the same machine CPU per test, {args.target:.0f} s leaves {cores * args.target:.0f} core-s: "
        f"{100 * (1 - cores * args.target / busy):.0f}% of the work would have to go" if busy > cores * args.target
        else f"- the {args.target:.0f} s target leaves {cores * args.target:.0f} core-s: met on CPU",
        "", "| module | tests | test wall (sum) | own CPU | children's CPU |", "|---|---|---|---|---|",
    ]
    for name, (n, w, own, kids) in sorted(mods.items(), key=lambda kv: -(kv[1][2] + kv[1][3])):
        lines.append(f"| {name} | {n} | {w:.1f} s | {own:.1f} s | {kids:.1f} s |")
    kinds: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    for key, (kind, cpu) in procs.items():
        kinds[kind][0] += 1
        kinds[kind][1] += cpu - before.get(key, (kind, 0.0))[1]
    lines += ["", f"CPU by kind of process, as sampled (lower bounds; {busy:.0f} core-s in all):", "",
              "| process | processes | CPU | share of the machine's |", "|---|---|---|---|"]
    for kind, (n, cpu) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        if cpu >= 0.5:
            lines.append(f"| {kind} | {n} | {cpu:.1f} s | {100 * cpu / busy:.0f}% |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return rc


def _git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
