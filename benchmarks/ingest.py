"""Benchmark: `kernelscope ingest` vs Holistic Trace Analysis (HTA) trace loading.

What it does, in one run:

1. Builds Kineto traces of >= 250 MiB (1x) and >= 1000 MiB (4x) by tiling a real
   sample trace along time with fresh ids (benchmarks/tile.py), as .json and
   .json.gz, each alone in a directory named like HTA wants (rank_0.json[.gz]).
   Files are cached under .bench/traces/ and rebuilt when the sample or tiler changes.
2. Times `kernelscope ingest FILE --db NEW_STORE` (the CLI, a subprocess, a fresh
   store per run) and `TraceAnalysis(trace_dir=DIR)` of holistictraceanalysis
   0.5.0 (a subprocess of its own venv, .bench/hta-venv, created when missing).
3. For every run: wall time (process start to exit) and peak RSS of the whole
   process tree (the sum of RSS over the process and all its descendants, read
   from /proc every 20 ms, max kept). Median of --runs runs (default 3).
4. Checks that both tools really loaded the events: kernels stored by
   kernelscope and kernels in HTA's DataFrame must equal the number written.
5. Prints the table with the ratios (HTA time / ours, our peak RSS / HTA's) and
   the bar, and writes it to benchmarks/results/ingest-<date>.md.

Bar (issue 2, point 4): >= 5x faster than HTA and <= 0.5x its peak RSS on the 1x
.json and .json.gz; our peak RSS grows <= 15% from the 1x to the 4x file.

Workers (issue 15): ``--workers 1,2,4`` runs kernelscope once per count with KERNELSCOPE_PARSE_WORKERS set
(one trace decoded by that many processes) and adds a table: time, MB/s, MB/s per core (MB/s / workers),
peak RSS of the process tree and the speed-up over the first count. ``--scales 1`` builds only the 1x file,
``--fmt json`` keeps only the .json, ``--hta off`` skips HTA (a scaling run), ``--out`` names the results file.

Usage:
    python3 benchmarks/ingest.py            # full run (about 15-30 min on 2 cores)
    python3 benchmarks/ingest.py --quick    # 5 MiB / 20 MiB files, 1 run, nothing written
    python3 benchmarks/ingest.py --mb 1024 --scales 1 --fmt json --hta off --workers 1,2,4,8,16   # scaling
Only the standard library is needed to run this script.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tile  # noqa: E402  (benchmarks/tile.py)

HTA_VERSION = "0.5.0"
BAR_SPEED = 5.0
BAR_RSS = 0.5
BAR_GROWTH = 0.15
POLL_S = 0.02
MEM_GUARD_BYTES = 1536 * 1024 * 1024  # kill a run when MemAvailable falls below this

HTA_SCRIPT = r"""
import sys, time
t0 = time.perf_counter()
from hta.common.trace import Trace
from hta.trace_analysis import TraceAnalysis
parsed = {}
_filter = Trace._filter_irrelevant_gpu_kernels
def _count_then_filter(self, *a, **k):  # records how many events HTA parsed before its step filter
    parsed["events"] = sum(len(df) for df in self.traces.values())
    return _filter(self, *a, **k)
Trace._filter_irrelevant_gpu_kernels = _count_then_filter
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df = a.t.get_trace(0)
sym = a.t.symbol_table.get_sym_id_map()
kernels = int((df["cat"] == sym["kernel"]).sum()) if "kernel" in sym else 0
print(f"HTA_RESULT parsed={parsed.get('events', -1)} kept={len(df)} kernels={kernels} "
      f"import_s={t1 - t0:.2f} load_s={t2 - t1:.2f}")
"""

COUNT_SQL = {
    "kernels": "SELECT count(*) FROM gpu_activities WHERE kind = 'kernel'",
    "gpu_activities": "SELECT count(*) FROM gpu_activities",
    "launches": "SELECT count(*) FROM launches",
    "cpu_ops": "SELECT count(*) FROM cpu_ops",
    "annotations": "SELECT count(*) FROM annotations",
    "flows": "SELECT count(*) FROM flows",
}


def say(*a) -> None:
    print(*a, flush=True)


# ---------------------------------------------------------------- measuring

def _proc_table() -> dict:
    """pid -> (ppid, rss_bytes, cpu_ticks) for every process visible in /proc (cpu: its user + system time)."""
    page = os.sysconf("SC_PAGE_SIZE")
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        rest = data[data.rindex(b")") + 2:].split()
        out[int(name)] = (int(rest[1]), int(rest[21]) * page, int(rest[11]) + int(rest[12]))
    return out


def tree_rss(root: int, cpu_seen: dict | None = None) -> int:
    """Sum of RSS in bytes of root and all its descendants; ``cpu_seen`` (pid -> CPU ticks), when given, gets
    each one's CPU so far."""
    table = _proc_table()
    kids: dict = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid][1]
            if cpu_seen is not None:
                cpu_seen[pid] = max(cpu_seen.get(pid, 0), table[pid][2])
        todo.extend(kids.get(pid, ()))
    return total


def mem_available() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(cmd: list, log_path: str, timeout_s: float, env: dict | None = None) -> dict:
    """Run cmd; return wall seconds, peak tree RSS (bytes), exit code and its output."""
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        peak, killed, seen = 0, "", {}
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                wall = time.perf_counter() - t0
                # the process and the children it waited for; or, when larger, the CPU seen in /proc of every
                # descendant (workers forked by a fork server are its children, never waited for by the command)
                cpu = max(usage.ru_utime + usage.ru_stime, sum(seen.values()) / os.sysconf("SC_CLK_TCK"))
                break
            peak = max(peak, tree_rss(proc.pid, seen))
            if not killed and mem_available() < MEM_GUARD_BYTES:
                killed = "memory guard (MemAvailable < 1.5 GiB)"
                os.killpg(proc.pid, 9)
            elif not killed and time.perf_counter() - t0 > timeout_s:
                killed = f"timeout ({timeout_s:.0f} s)"
                os.killpg(proc.pid, 9)
            time.sleep(POLL_S)
        proc.returncode = os.waitstatus_to_exitcode(status)
    with open(log_path, "rb") as fh:
        output = fh.read().decode("utf-8", "replace")
    return {"wall": wall, "cpu": cpu, "rss": peak, "rc": proc.returncode, "killed": killed, "output": output}


# ---------------------------------------------------------------- set-up

def default_sample() -> str:
    found = glob.glob(os.path.join(ROOT, "sample_traces", "**", "trace.json.gz"), recursive=True)
    if found:
        return max(found, key=os.path.getsize)
    for rel in ("tests/data/probe_train.json.gz", ".gpu/probe/train.json"):
        if os.path.exists(os.path.join(ROOT, rel)):
            return os.path.join(ROOT, rel)
    raise SystemExit("benchmark: no sample trace found; pass --sample PATH")


def ensure_hta(venv: str) -> str:
    """Return the python of a venv with holistictraceanalysis==HTA_VERSION, creating it if needed."""
    py = os.path.join(venv, "bin", "python")
    probe = [py, "-c", "import importlib.metadata as m; print(m.version('holistictraceanalysis'))"]
    ok = os.path.exists(py) and subprocess.run(probe, capture_output=True, text=True).stdout.strip() == HTA_VERSION
    if not ok:
        say(f"[setup] creating HTA venv {venv} (python3 -m venv + pip install holistictraceanalysis=={HTA_VERSION})")
        subprocess.run(["python3", "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", f"holistictraceanalysis=={HTA_VERSION}"], check=True)
    return py


def snapshot(ref: str, work: str) -> tuple:
    """Export src/ of git commit `ref` to .bench/ks-<sha>/ and return (kernelscope command, env).

    The command runs that snapshot with the project venv's python (PYTHONPATH first on sys.path,
    ahead of the editable install), so edits others have not committed cannot change a run.
    """
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", ref], capture_output=True,
                         text=True, check=True).stdout.strip()
    dest = os.path.join(work, f"ks-{sha}")
    if not os.path.isdir(os.path.join(dest, "src", "kernelscope")):
        os.makedirs(dest, exist_ok=True)
        arch = subprocess.run(["git", "-C", ROOT, "archive", sha, "src"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=arch, check=True)
    py = os.path.join(ROOT, ".venv", "bin", "python")
    env = dict(os.environ, PYTHONPATH=os.path.join(dest, "src"))
    cmd = [py, "-c", "import sys; from kernelscope.cli import main; sys.argv[0] = 'kernelscope'; main()"]
    return cmd, env, sha


def find_kernelscope(arg: str | None) -> list:
    if arg:
        return arg.split()
    local = os.path.join(ROOT, ".venv", "bin", "kernelscope")
    if os.path.exists(local):
        return [local]
    exe = shutil.which("kernelscope")
    if exe:
        return [exe]
    raise SystemExit("benchmark: no kernelscope command; pip install -e . or pass --kernelscope CMD")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for buf in iter(lambda: fh.read(1 << 20), b""):
            h.update(buf)
    return h.hexdigest()


def build_traces(sample: str, out_dir: str, megabytes: float, scales: list) -> list:
    """Build (or reuse) the tiled files; return one dict per file."""
    key = {"sample": _sha256(sample), "tiler": _sha256(tile.__file__), "mb": megabytes}
    tiler = None
    files = []
    for scale in scales:
        base = os.path.join(out_dir, f"x{scale}")
        jpath = os.path.join(base, "json", "rank_0.json")
        gpath = os.path.join(base, "gz", "rank_0.json.gz")
        meta_path = os.path.join(base, "meta.json")
        meta = None
        if os.path.exists(meta_path) and os.path.exists(jpath) and os.path.exists(gpath):
            with open(meta_path) as fh:
                meta = json.load(fh)
            if meta.get("key") != {**key, "scale": scale}:
                meta = None
        if meta is None:
            if tiler is None:
                say(f"[build] loading sample {sample}")
                tiler = tile.Tiler(tile.load_sample(sample))
            os.makedirs(os.path.dirname(jpath), exist_ok=True)
            os.makedirs(os.path.dirname(gpath), exist_ok=True)
            n = tile.tiles_for(tiler, megabytes * scale)
            t0 = time.perf_counter()

            def progress(k, total, scale=scale):
                print(f"\r[build] x{scale}: tile {k}/{total}", end="", flush=True)

            counts = tiler.write(jpath, n, progress)
            print(flush=True)
            say(f"[build] x{scale}: gzip -> {gpath}")
            tile.gzip_file(jpath, gpath)
            meta = {"key": {**key, "scale": scale}, "counts": counts}
            with open(meta_path, "w") as fh:
                json.dump(meta, fh)
            say(f"[build] x{scale}: done in {time.perf_counter() - t0:.1f} s")
        else:
            say(f"[build] x{scale}: reusing {base}")
        for fmt, path in (("json", jpath), ("json.gz", gpath)):
            files.append({"scale": scale, "fmt": fmt, "path": path, "bytes": os.path.getsize(path),
                          "json_bytes": os.path.getsize(jpath), "counts": meta["counts"]})
    return files


# ---------------------------------------------------------------- runs

def store_counts(db: str) -> dict:
    """Row counts of a kernelscope store, read with the project venv's duckdb."""
    py = os.path.join(ROOT, ".venv", "bin", "python")
    code = ("import duckdb, json, sys; c = duckdb.connect(sys.argv[1], read_only=True); "
            "q = json.loads(sys.argv[2]); "
            "print(json.dumps({k: c.execute(v).fetchone()[0] for k, v in q.items()}))")
    r = subprocess.run([py if os.path.exists(py) else sys.executable, "-c", code, db, json.dumps(COUNT_SQL)],
                       capture_output=True, text=True)
    if r.returncode:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout)


def ours_once(ks: tuple, f: dict, work: str, timeout_s: float, count: bool, workers: int | None = None) -> dict:
    """One `kernelscope ingest` into a fresh store (KERNELSCOPE_PARSE_WORKERS=workers when given); the store's
    row counts when count is set."""
    ks, env = ks[0], ks[1]
    if workers is not None:
        env = dict(env if env is not None else os.environ, KERNELSCOPE_PARSE_WORKERS=str(workers))
    store_dir = tempfile.mkdtemp(prefix="store-", dir=work)
    db = os.path.join(store_dir, "bench.duckdb")
    r = measure(ks + ["ingest", f["path"], "--db", db], os.path.join(work, "ours.log"), timeout_s, env)
    if r["rc"] != 0 or r["killed"]:
        tail = " | ".join(r["output"].strip().splitlines()[-3:])
        r["error"] = r["killed"] or f"exit {r['rc']}: {tail[-200:]}"
    elif count:
        r["counts"] = store_counts(db)
    shutil.rmtree(store_dir, ignore_errors=True)
    return r


def hta_once(py: str, f: dict, work: str, timeout_s: float) -> dict:
    """One HTA TraceAnalysis(trace_dir=...) load in its own venv."""
    r = measure([py, "-c", HTA_SCRIPT, os.path.dirname(f["path"])], os.path.join(work, "hta.log"), timeout_s)
    line = next((ln for ln in r["output"].splitlines() if ln.startswith("HTA_RESULT")), None)
    if r["rc"] != 0 or r["killed"] or line is None:
        tail = " | ".join(r["output"].strip().splitlines()[-2:])
        r["error"] = r["killed"] or f"exit {r['rc']}: {tail[-200:]}"
    else:
        r.update({k: (float(v) if "." in v else int(v)) for k, v in (kv.split("=") for kv in line.split()[1:])})
    return r


def load_avg() -> float:
    return os.getloadavg()[0]


def show(who: str, i: int, runs: int, r: dict) -> None:
    if "error" in r:
        say(f"  {who} run {i}/{runs}: FAILED after {r['wall']:.1f} s ({r['error']}), "
            f"peak RSS {r['rss'] / 2**20:.0f} MiB")
        return
    extra = ""
    if "parsed" in r:
        extra = (f" (import {r['import_s']} s, load {r['load_s']} s; parsed {r['parsed']:,} events, "
                 f"kept {r['kept']:,}, {r['kernels']:,} kernels)")
    say(f"  {who} run {i}/{runs}: {r['wall']:.2f} s (CPU {r.get('cpu', 0):.2f} s), "
        f"peak RSS {r['rss'] / 2**20:.0f} MiB, "
        f"load avg {r['load']:.1f}{extra}")


def summarise(results: list) -> dict:
    """Median time and RSS over runs; the first failure wins."""
    bad = next((r for r in results if "error" in r), None)
    if bad is not None:
        return {"error": bad["error"], "wall": bad["wall"], "rss_at_kill": bad["rss"]}
    out = {"time": statistics.median(r["wall"] for r in results),
           "cpu": statistics.median(r.get("cpu", 0.0) for r in results),
           "rss": statistics.median(r["rss"] for r in results), "n": len(results),
           "times": [r["wall"] for r in results], "rsses": [r["rss"] for r in results],
           "loads": [r["load"] for r in results]}
    for k in ("counts", "parsed", "kept", "kernels"):
        if k in results[0]:
            out[k] = results[0][k]
    return out


def run_pair(ks, hta_py, f, runs, hta_runs, work, timeout_s) -> tuple:
    """Alternate ours and HTA run by run so both see the same machine load."""
    ours, hta = [], []
    for i in range(max(runs, hta_runs)):
        if i < runs and not any("error" in r for r in ours):
            load = load_avg()
            r = ours_once(ks, f, work, timeout_s, count=(i == 0))
            r["load"] = load
            ours.append(r)
            show("kernelscope", i + 1, runs, r)
            if "counts" in r:
                say(f"  kernelscope stored: {r['counts']}")
        if i < hta_runs and not any("error" in r for r in hta):
            load = load_avg()
            r = hta_once(hta_py, f, work, timeout_s)
            r["load"] = load
            hta.append(r)
            show("HTA", i + 1, hta_runs, r)
    return summarise(ours), (summarise(hta) if hta_runs else None)


def warm(path: str) -> None:
    """Read the file once so both tools start with it in the page cache."""
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def run_workers(ks, f, counts: list, runs: int, work: str, timeout_s: float) -> dict:
    """kernelscope alone at each worker count, the counts alternating run by run (same machine load)."""
    out: dict = {w: [] for w in counts}
    for i in range(runs):
        for w in counts:
            if any("error" in r for r in out[w]):
                continue
            load = load_avg()
            r = ours_once(ks, f, work, timeout_s, count=(i == 0), workers=w)
            r["load"] = load
            out[w].append(r)
            show(f"kernelscope workers={w}", i + 1, runs, r)
            got = (r.get("counts") or {}).get("kernels")
            if "counts" in r:
                say(f"  kernelscope stored: {r['counts']}")
            if "counts" in r and got != f["counts"]["kernels"]:
                say(f"  WARNING: kernelscope stored {got} kernels, the file has {f['counts']['kernels']}")
    return {w: summarise(rs) for w, rs in out.items()}


def workers_table(rows: list) -> list:
    """Markdown lines: one row per (file, worker count)."""
    out = ["| file | size | workers | kernelscope time | CPU time (tree) | MB/s (of the .json) | MB/s per core "
           "| peak RSS (tree) | vs first count |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r["file"]
        first = None
        for w, o in r["workers"].items():
            name = f"x{f['scale']} .{f['fmt']}"
            if "error" in o:
                out.append(f"| {name} | {_mib(f['bytes'])} | {w} | FAILED: {o['error']} | - | - | - | - | - |")
                continue
            mbs = f["json_bytes"] / 1e6 / o["time"]  # decompressed MB: a .json.gz is read as its .json
            first = first or o["time"]
            out.append(f"| {name} | {_mib(f['bytes'])} | {w} | {o['time']:.2f} s"
                       + (f" (n={o['n']})" if o["n"] != 3 else "")
                       + f" | {o['cpu']:.2f} s | {mbs:.1f} | {mbs / w:.1f} | {_mib(o['rss'])} "
                       f"| {first / o['time']:.2f}x |")
    return out


# ---------------------------------------------------------------- report

def _mib(b) -> str:
    return f"{b / 2**20:,.1f} MiB" if b < 10 * 2**20 else f"{b / 2**20:,.0f} MiB"


def table(rows: list) -> list:
    """Markdown table lines."""
    out = ["| file | size | events (kernels) in file | loaded: ours kernels / HTA events, kernels "
           "| kernelscope time | kernelscope peak RSS | HTA time | HTA peak RSS | HTA time / ours "
           "| our RSS / HTA's | bar |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, o, h = r["file"], r["ours"], r["hta"]
        c = f["counts"]
        name = f"x{f['scale']} .{f['fmt']}"
        ev = f"{c['events']:,} ({c['kernels']:,})"
        got = f"{(o.get('counts') or {}).get('kernels', '-'):,} / " if "counts" in o else "- / "
        got += f"{h['parsed']:,}, {h['kernels']:,}" if h and "parsed" in h else "-"
        if "error" in o:
            ot, orss = f"FAILED: {o['error']}", "-"
        else:
            ot, orss = f"{o['time']:.2f} s" + (f" (n={o['n']})" if o["n"] != 3 else ""), _mib(o["rss"])
        if h is None:
            ht = hr = "not run"
            speed = ratio = "-"
        elif "skipped" in h:
            ht = hr = f"skipped: {h['skipped']}"
            speed = ratio = "-"
        elif "error" in h:
            ht = f"FAILED: {h['error']} after {h['wall']:.0f} s"
            hr = f">= {_mib(h['rss_at_kill'])}"
            speed = ratio = "-"
        else:
            ht, hr = f"{h['time']:.2f} s" + (f" (n={h['n']})" if h["n"] != 3 else ""), _mib(h["rss"])
            speed = ratio = "-"
            if "error" not in o:
                speed = f"{h['time'] / o['time']:.1f}x"
                ratio = f"{o['rss'] / h['rss']:.2f}"
        out.append(f"| {name} | {_mib(f['bytes'])} | {ev} | {got} | {ot} | {orss} | {ht} | {hr} | {speed} | {ratio} "
                   f"| {r.get('verdict', '')} |")
    return out


def verdicts(rows: list) -> list:
    """Set row verdicts; return summary lines including the 1x->4x RSS growth."""
    lines, ok_all = [], True
    for r in rows:
        o, h = r["ours"], r["hta"]
        if r["file"]["scale"] != 1:
            continue
        if "error" in o or h is None or "error" in h or "skipped" in h:
            r["verdict"] = "MISS (no result)"
            ok_all = False
            continue
        speed, ratio = h["time"] / o["time"], o["rss"] / h["rss"]
        good = speed >= BAR_SPEED and ratio <= BAR_RSS
        ok_all &= good
        r["verdict"] = ("PASS" if good else "MISS") + f" (>= {BAR_SPEED:.0f}x, <= {BAR_RSS})"
    for fmt in ("json", "json.gz"):
        pair = {r["file"]["scale"]: r["ours"] for r in rows if r["file"]["fmt"] == fmt}
        if 1 in pair and 4 in pair and "error" not in pair[1] and "error" not in pair[4]:
            g = pair[4]["rss"] / pair[1]["rss"] - 1
            good = g <= BAR_GROWTH
            ok_all &= good
            lines.append(f"- kernelscope peak RSS growth x1 -> x4 (.{fmt}): {_mib(pair[1]['rss'])} -> "
                         f"{_mib(pair[4]['rss'])} = {g * 100:+.1f}% (bar <= {BAR_GROWTH * 100:.0f}%): "
                         f"{'PASS' if good else 'MISS'}")
        else:
            ok_all = False
            lines.append(f"- kernelscope peak RSS growth x1 -> x4 (.{fmt}): no result: MISS")
    lines.append(f"- overall: {'BAR MET' if ok_all else 'BAR NOT MET'}")
    return lines


def machine() -> str:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    with open("/proc/meminfo") as fh:
        mem = int(fh.readline().split()[1]) / 2**20
    return f"{os.cpu_count()} cores ({cpu or platform.machine()}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def versions(ks: tuple, hta_py: str | None) -> str:
    def out(cmd, env=None):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env).stdout.strip()
        except OSError:
            return "?"
    ours = out(ks[0] + ["--version"], ks[1])
    hta = "HTA not run" if hta_py is None else out([hta_py, "-c", "import importlib.metadata as m, pandas, numpy, sys; "
               "print(f'HTA {m.version(\"holistictraceanalysis\")}, pandas {pandas.__version__}, numpy {numpy.__version__}, "
               "python {sys.version.split()[0]}')"])
    ks_py = os.path.join(ROOT, ".venv", "bin", "python")
    deps = out([ks_py, "-c", "import duckdb, pyarrow, sys; "
                "print(f'duckdb {duckdb.__version__}, pyarrow {pyarrow.__version__}, python {sys.version.split()[0]}')"])
    return f"{ours} ({deps}; {ks[2]}); {hta} (parser backend: HTA default, stdlib json)"


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="kernelscope ingest vs HTA TraceAnalysis load")
    ap.add_argument("--sample", help="Kineto trace to tile (default: largest sample_traces/**/trace.json.gz)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 5 MiB base, 1 run, writes no results")
    ap.add_argument("--mb", type=float, help="size of the 1x file in MiB (default 250)")
    ap.add_argument("--runs", type=int, help="runs per tool and file (default 3)")
    ap.add_argument("--hta-4x", choices=("auto", "on", "off"), default="auto",
                    help="run HTA on the 4x .json too (auto: only if its 1x peak RSS x 4.5 fits in RAM)")
    ap.add_argument("--ref", default="HEAD",
                    help="git commit whose src/ is benchmarked (exported to .bench/ks-<sha>; default HEAD)")
    ap.add_argument("--kernelscope", help="kernelscope command to run instead of a --ref snapshot "
                    "(e.g. .venv/bin/kernelscope for the working tree)")
    ap.add_argument("--hta-venv", default=os.path.join(ROOT, ".bench", "hta-venv"))
    ap.add_argument("--work", default=os.path.join(ROOT, ".bench"))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run before it is killed")
    ap.add_argument("--workers", help="comma-separated KERNELSCOPE_PARSE_WORKERS counts to run kernelscope at "
                    "(e.g. 1,2): adds the workers table (MB/s, MB/s per core)")
    ap.add_argument("--scales", default="1,4", help="file sizes to build, in multiples of --mb (default 1,4)")
    ap.add_argument("--fmt", choices=("both", "json", "json.gz"), default="both", help="which files to run")
    ap.add_argument("--hta", choices=("on", "off"), default="on", help="off: kernelscope only (scaling runs)")
    ap.add_argument("--out", help="results file (default benchmarks/results/ingest-<date>.md)")
    a = ap.parse_args(argv)
    counts = [int(w) for w in a.workers.split(",")] if a.workers else []
    scales = [int(x) for x in a.scales.split(",")]
    mb = a.mb or (5.0 if a.quick else 250.0)
    runs = a.runs or (1 if a.quick else 3)

    sample = os.path.abspath(a.sample or default_sample())
    say(f"[setup] sample: {os.path.relpath(sample, ROOT)} ({os.path.getsize(sample):,} bytes)")
    if a.kernelscope:
        ks = (find_kernelscope(a.kernelscope), None, "command " + a.kernelscope)
    else:
        cmd, env, sha = snapshot(a.ref, a.work)
        ks = (cmd, env, f"git {sha}")
    hta_py = ensure_hta(a.hta_venv) if a.hta == "on" else None
    ver = versions(ks, hta_py)
    say(f"[setup] {ver}")
    say(f"[setup] machine: {machine()}")
    os.makedirs(a.work, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ingest-bench-", dir=a.work)

    trace_dir = os.path.join(a.work, "traces-quick" if a.quick else "traces")
    files = [f for f in build_traces(sample, trace_dir, mb, scales) if a.fmt in ("both", f["fmt"])]
    rows, wrows = [], []
    hta_1x = {}
    for f in files:
        label = f"x{f['scale']} .{f['fmt']}"
        c = f["counts"]
        say(f"[run] {label}: {os.path.relpath(f['path'], ROOT)}, {_mib(f['bytes'])}, "
            f"{c['events']:,} events, {c['kernels']:,} kernels")
        warm(f["path"])
        if counts:
            say(f"[run] {label}: kernelscope ingest x{runs} at workers {counts}")
            wrows.append({"file": f, "workers": run_workers(ks, f, counts, runs, work, a.timeout)})
            if a.hta == "off":
                continue
        hta_runs, skip = 0, None
        if a.hta == "off":
            skip = "--hta off"
        elif f["scale"] == 1:
            hta_runs = runs
        elif f["fmt"] == "json" and a.hta_4x != "off":
            ref = hta_1x.get("json", {})
            need = ref.get("rss", 0) * 4.5
            have = mem_available()
            if a.hta_4x == "auto" and ("rss" not in ref or need > have * 0.9):
                skip = (f"would need ~{need / 2**30:.0f} GiB (4.5x its 1x peak), {have / 2**30:.0f} GiB available"
                        if "rss" in ref else "no 1x result")
            else:
                hta_runs = 1
        else:
            skip = "not run (time)"
        say(f"[run] {label}: kernelscope ingest x{runs}, HTA TraceAnalysis x{hta_runs}"
            + (f" (HTA skipped: {skip})" if skip else ""))
        ours, hta = run_pair(ks, hta_py, f, runs, hta_runs, work, a.timeout)
        if skip:
            hta = {"skipped": skip}
        if f["scale"] == 1:
            hta_1x[f["fmt"]] = hta
        got = (ours.get("counts") or {}).get("kernels")
        if "error" not in ours and got != c["kernels"]:
            say(f"  WARNING: kernelscope stored {got} kernels, the file has {c['kernels']}")
        if hta and "parsed" in hta and hta["parsed"] != c["hta_events"]:
            say(f"  WARNING: HTA parsed {hta['parsed']} events, the file has {c['hta_events']} it should keep")
        rows.append({"file": f, "ours": ours, "hta": hta})

    summary = verdicts(rows) if rows else []
    lines = table(rows) if rows else []
    if wrows:
        lines = (lines + [""] if lines else []) + workers_table(wrows)
    say("")
    for ln in lines + [""] + summary:
        say(ln)
    shutil.rmtree(work, ignore_errors=True)

    if a.quick:
        say("\n(--quick: results not written)")
        return 0
    date = _dt.date.today().isoformat()
    path = a.out or os.path.join(HERE, "results", f"ingest-{date}.md")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rel_sample = os.path.relpath(sample, ROOT)
    with open(path, "w") as fh:
        fh.write(f"# kernelscope ingest vs HTA TraceAnalysis load ({date})\n\n")
        fh.write(f"- machine: {machine()}\n- versions: {ver}\n")
        fh.write(f"- sample tiled: `{rel_sample}`; " + ", ".join(f"{x}x = {x * mb:.0f} MiB" for x in scales) + "\n")
        fh.write(f"- median of {runs} runs; wall time of the whole command; peak RSS = max over time of "
                 f"the summed RSS of the process tree (polled every {POLL_S * 1000:.0f} ms)\n")
        fh.write(f"- command: `python3 benchmarks/ingest.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
                 + (f" (kernelscope: {ks[2]})" if not a.kernelscope else "") + "\n\n")
        fh.write("\n".join(lines + [""] + summary) + "\n\n")
        fh.write("Per-run numbers (seconds; MiB):\n\n")
        for r in wrows:
            for w, x in r["workers"].items():
                if "times" in x:
                    fh.write(f"- x{r['file']['scale']} .{r['file']['fmt']} workers={w}: "
                             f"{', '.join(f'{t:.2f}' for t in x['times'])} (CPU {x['cpu']:.2f} median); "
                             f"{', '.join(f'{b / 2**20:.0f}' for b in x['rsses'])}; load avg at start "
                             f"{', '.join(f'{v:.1f}' for v in x['loads'])}\n")
        for r in rows:
            for who in ("ours", "hta"):
                x = r[who] or {}
                if "times" in x:
                    fh.write(f"- x{r['file']['scale']} .{r['file']['fmt']} {who}: "
                             f"{', '.join(f'{t:.2f}' for t in x['times'])}; "
                             f"{', '.join(f'{b / 2**20:.0f}' for b in x['rsses'])}; load avg at start "
                             f"{', '.join(f'{v:.1f}' for v in x['loads'])}\n")
    say(f"\n[done] wrote {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
