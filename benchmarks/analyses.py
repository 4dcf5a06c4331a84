"""Time every registered analysis on a store holding one trace of >= 1,000,000 kernels (issue 4).

Bar: each analysis answers in <= 1 s, cold and warm.

Steps: tile a real sample trace along time (benchmarks/tile.py) into one Kineto .json with >= --kernels
kernels (cached in .bench/analyses/), ingest it once into .bench/analyses-1m.duckdb (reused when it
already holds that trace with the expected kernel count), then for each analysis in
kernelscope.analysis.registry.ANALYSES:

- cold: a fresh Python process imports kernelscope, opens the store read-only, resolves the trace
  (none of that is timed), then times the first call fn(store, trace_id). DuckDB's buffer pool is empty;
  the OS page cache is not dropped (it holds the store file from earlier runs).
- warm: the same process calls it --warm more times (default 2); warm = their median.
- CLI: wall time of `kernelscope analyze NAME TRACE --format json --db STORE` (for diff: `kernelscope
  diff TRACE TRACE ...`) minus the median wall time of `kernelscope --version`: what a user waits for
  beyond start-up (it includes import of the analysis modules, opening the store and writing JSON).

Multi-trace analyses: diff runs on the 1M trace against itself (both sides full size; the matching and
deltas do the same work as for two different traces of that size); transition runs on a copy of the
store (``<db>-sweep.duckdb``) where the 1M-kernel trace is one more point of the samples' llama_prefill
sweep (the 8 sample traces ingested beside it; it is labelled batch=100480, 785 steps of batch 128), so the
sweep holds ~1.01M kernels; comm needs a run of several ranks and is timed by benchmarks/ranks.py.

Usage: python3 benchmarks/analyses.py [--quick] [--kernels N] [--sample PATH] [--only A,B] [--db STORE] [--tag T]
(--quick: 20 tiles, its own store, prints the table, writes nothing to benchmarks/results/;
--db: time on that store, e.g. a migrated copy of the 1M store, instead of .bench/analyses-1m.duckdb;
--tag: suffix of the results file).
Times are wall-clock seconds from time.perf_counter(); cpu columns are the process's user + system time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / ".bench"
VENV_PY = ROOT / ".venv" / "bin" / "python"
VENV_KS = ROOT / ".venv" / "bin" / "kernelscope"
DEFAULT_SAMPLE = ROOT / "sample_traces" / "llama_prefill_b128" / "trace.json.gz"
BAR_S = 1.0

SWEEP = "llama_prefill"
SWEEP_BATCH = 100480  # the tiled trace: 785 steps of batch 128, labelled as one point past the samples' 1..128

# Runs in a fresh process: open the store read-only, time the analysis calls, print JSON.
CHILD = f"SWEEP = {SWEEP!r}\n" + r"""
import json, resource, statistics, sys, time
from kernelscope.analysis.registry import ANALYSES
from kernelscope.storage.store import open_store
from kernelscope.storage.queries import resolve_trace
db, name, ref, warm = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
a = ANALYSES[name]
t = time.perf_counter()
store = open_store(db, read_only=True)
tid = resolve_trace(store, ref)
open_s = time.perf_counter() - t
if name == "transition":  # over the sweep the benchmark labelled (sweep_store)
    call = lambda: a.fn(store, None, by="batch", sweep=SWEEP)
else:
    call = (lambda: a.fn(store, [tid, tid])) if a.multi else (lambda: a.fn(store, tid))
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
times, cpus = [], []
for i in range(1 + warm):
    c = cpu()
    t = time.perf_counter()
    r = call()
    times.append(time.perf_counter() - t)
    cpus.append(cpu() - c)
    if times[0] > 5 and i >= 1:  # slow analysis: one warm call is enough to show it
        break
rows = {k: len(df) for k, df in r.tables.items()}
print("@@RESULT " + json.dumps({"open_s": open_s, "times": times, "cpus": cpus, "rows": rows}))
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_tiler(sample: pathlib.Path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tile  # benchmarks/tile.py

    return tile.Tiler(tile.load_sample(str(sample)))


def build_trace(sample: pathlib.Path, kernels: int, tag: str) -> tuple[pathlib.Path, dict]:
    """The tiled trace with >= `kernels` kernels, built unless a matching one is cached."""
    tiler = load_tiler(sample)
    per_tile = tiler.counts(1)["kernels"]
    if per_tile == 0:
        sys.exit(f"sample {sample} has no kernels; pick another with --sample")
    n = -(-kernels // per_tile)
    out = BENCH / "analyses" / f"{tag}-{n}tiles.json"
    meta_path = out.with_suffix(".meta.json")
    key = {
        "sample": str(sample),
        "sample_mtime": sample.stat().st_mtime,
        "tile_py_mtime": (ROOT / "benchmarks" / "tile.py").stat().st_mtime,
        "tiles": n,
    }
    if out.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("key") == key:
            log(f"reusing {out} ({meta['counts']['kernels']:,} kernels)")
            return out, meta["counts"]
    out.parent.mkdir(parents=True, exist_ok=True)
    log(f"writing {out}: {n} tiles x {per_tile} kernels ...")
    t = time.perf_counter()
    counts = tiler.write(str(out), n)
    counts["bytes"] = out.stat().st_size
    log(f"  {counts['bytes'] / 2**20:,.0f} MiB, {counts['kernels']:,} kernels in {time.perf_counter() - t:.0f} s")
    meta_path.write_text(json.dumps({"key": key, "counts": counts}))
    return out, counts


def stored_trace(db: pathlib.Path, trace: pathlib.Path) -> tuple[str, int] | None:
    """(trace_id, kernels stored) for the trace ingested from `trace`, or None."""
    if not db.exists():
        return None
    code = (
        "import json,sys\n"
        "from kernelscope.storage.store import open_store\n"
        "s = open_store(sys.argv[1], read_only=True)\n"
        "r = s.con.execute(\"SELECT t.trace_id, (SELECT count(*) FROM gpu_activities g WHERE g.trace_id = "
        "t.trace_id AND g.kind = 'kernel') FROM traces t WHERE t.source = ?\", [sys.argv[2]]).fetchall()\n"
        "print(json.dumps(r))\n"
    )
    p = subprocess.run([str(VENV_PY), "-c", code, str(db), str(trace.resolve())],
                       capture_output=True, text=True)
    if p.returncode != 0:
        log(f"cannot read {db}: {p.stderr.strip().splitlines()[-1:]}")
        return None
    rows = json.loads(p.stdout)
    return (rows[0][0], rows[0][1]) if rows else None


def ingest(db: pathlib.Path, trace: pathlib.Path, kernels: int) -> str:
    found = stored_trace(db, trace)
    if found and found[1] == kernels:
        log(f"reusing store {db} (trace {found[0]}, {found[1]:,} kernels)")
        return found[0]
    if found or db.exists():
        log(f"store {db} lacks the trace or holds another kernel count; rebuilding it")
        db.unlink(missing_ok=True)
        pathlib.Path(str(db) + ".wal").unlink(missing_ok=True)
    log(f"ingesting {trace} into {db} ...")
    t = time.perf_counter()
    subprocess.run([str(VENV_KS), "ingest", str(trace), "--db", str(db)], check=True,
                   stdout=subprocess.DEVNULL)
    log(f"  ingest took {time.perf_counter() - t:.0f} s")
    found = stored_trace(db, trace)
    if not found or found[1] != kernels:
        sys.exit(f"store holds {found and found[1]} kernels, the file {kernels}; stopping")
    return found[0]


def sweep_store(db: pathlib.Path, trace_id: str) -> pathlib.Path:
    """A copy of ``db`` where the 1M-kernel trace is one point of the samples' llama_prefill sweep (the 8
    sample traces ingested beside it with their own labels; the tiled trace labelled sweep=llama_prefill,
    batch=SWEEP_BATCH): the store transition runs on. Rebuilt when ``db`` is newer."""
    out = db.with_name(db.stem + "-sweep.duckdb")
    if out.exists() and out.stat().st_mtime >= db.stat().st_mtime:
        return out
    shutil.copyfile(db, out)
    dirs = sorted(str(p) for p in (ROOT / "sample_traces").glob("llama_prefill_b*") if p.is_dir())
    subprocess.run([str(VENV_KS), "ingest", *dirs, "--db", str(out)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([str(VENV_KS), "label", trace_id, f"sweep={SWEEP}", f"batch={SWEEP_BATCH}", "--db", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def wall(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t, p


def machine() -> str:
    cores = os.cpu_count()
    mem = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 2**20
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{cores} cores ({cpu}), {mem:.0f} GiB"


def versions() -> str:
    code = ("import duckdb, pyarrow, pandas, sys, kernelscope; print(f'kernelscope {kernelscope.__version__}, "
            "duckdb {duckdb.__version__}, pyarrow {pyarrow.__version__}, pandas {pandas.__version__}, "
            "python {sys.version.split()[0]}')")
    return subprocess.run([str(VENV_PY), "-c", code], capture_output=True, text=True).stdout.strip()


def git_rev() -> str:
    p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 tiles, own store, write nothing to results/")
    ap.add_argument("--kernels", type=int, default=1_000_000, help="minimum kernels in the trace")
    ap.add_argument("--sample", type=pathlib.Path, default=DEFAULT_SAMPLE)
    ap.add_argument("--warm", type=int, default=2, help="warm calls per analysis (median)")
    ap.add_argument("--only", default=None, help="comma-separated analysis names (default: all)")
    ap.add_argument("--db", type=pathlib.Path, default=None,
                    help="use this store (it must hold the tiled trace; migrated first when its schema is older)")
    ap.add_argument("--tag", default="", help="suffix of the results file name (analyses-<date>-TAG.md)")
    a = ap.parse_args(argv)
    sample = a.sample.resolve()
    if a.quick:
        per_tile = load_tiler(sample).counts(1)["kernels"]
        trace, counts = build_trace(sample, 20 * per_tile, "quick")
        db = BENCH / "analyses-quick.duckdb"
    else:
        trace, counts = build_trace(sample, a.kernels, "full")
        db = BENCH / "analyses-1m.duckdb"
    if a.db is not None:
        db = a.db.resolve()
        t = time.perf_counter()
        subprocess.run([str(VENV_PY), "-c", "import sys; from kernelscope.storage.store import open_store; "
                        "open_store(sys.argv[1]).close()", str(db)], check=True)
        log(f"store {db} opened writable once (schema migration, if any): {time.perf_counter() - t:.1f} s")
        found = stored_trace(db, trace)
        if not found or found[1] != counts["kernels"]:
            sys.exit(f"{db} does not hold {trace} with {counts['kernels']:,} kernels; not rebuilding a --db store")
    trace_id = ingest(db, trace, counts["kernels"])

    code = ("import json; from kernelscope.analysis.registry import ANALYSES; "
            "print(json.dumps({n: x.multi for n, x in ANALYSES.items()}))")
    multi = json.loads(subprocess.run([str(VENV_PY), "-c", code], capture_output=True, text=True,
                                      check=True).stdout)
    names = a.only.split(",") if a.only else list(multi)
    startups = [wall([str(VENV_KS), "--version"])[0] for _ in range(3)]
    startup = statistics.median(startups)
    log(f"`kernelscope --version` start-up: {startup:.2f} s (median of {', '.join(f'{s:.2f}' for s in startups)})")

    rows, loads = [], []
    for name in names:
        if multi[name] and name not in ("diff", "transition"):
            rows.append({"name": name, "skip": "multi-rank: needs a run of several ranks (benchmarks/ranks.py "
                                               "times it on 64 ranks)"})
            log(f"{name}: skipped")
            continue
        loads.append(os.getloadavg()[0])
        run_db = sweep_store(db, trace_id) if name == "transition" else db
        _, p = wall([str(VENV_PY), "-c", CHILD, str(run_db), name, trace_id, str(a.warm)])
        if p.returncode != 0:
            err = (p.stderr.strip().splitlines() or ["?"])[-1]
            rows.append({"name": name, "skip": f"error: {err}"})
            log(f"{name}: ERROR {err}")
            continue
        # DuckDB may draw a progress bar on stdout for slow queries: take the text after the marker
        out = json.loads(p.stdout[p.stdout.rindex("@@RESULT ") + 9:].splitlines()[0])
        cold, warm = out["times"][0], statistics.median(out["times"][1:])
        cold_cpu, warm_cpu = out["cpus"][0], statistics.median(out["cpus"][1:])
        cmd = ([str(VENV_KS), "diff", trace_id, trace_id] if name == "diff"
               else [str(VENV_KS), "analyze", name, "--by", "batch", "--sweep", SWEEP] if name == "transition"
               else [str(VENV_KS), "analyze", name, trace_id])
        cli_s, q = wall(cmd + ["--format", "json", "--db", str(run_db)])
        cli = cli_s - startup if q.returncode == 0 else None
        row = {"name": name, "cold": cold, "warm": warm, "warm_all": out["times"][1:], "open": out["open_s"],
               "cli": cli, "cli_rc": q.returncode, "load": loads[-1], "rows": out["rows"],
               "cold_cpu": cold_cpu, "warm_cpu": warm_cpu}
        rows.append(row)
        log(f"{name}: cold {cold:.3f} s (cpu {cold_cpu:.2f}), warm {warm:.3f} s (cpu {warm_cpu:.2f}), "
            f"CLI {cli_s:.2f} s - start-up "
            f"(rc {q.returncode}), load {loads[-1]:.2f}")

    now = datetime.date.today().isoformat()
    head = [
        f"Analyses on one trace of {counts['kernels']:,} kernels ({counts['tiles']} tiles of "
        f"`{sample.relative_to(ROOT) if sample.is_relative_to(ROOT) else sample}`, "
        f"{counts['bytes'] / 2**20:,.0f} MiB .json), store `{db.relative_to(ROOT)}` "
        f"({db.stat().st_size / 2**20:,.0f} MiB), trace {trace_id}.",
        f"Date {now}, git {git_rev()}; machine: {machine()}; {versions()}.",
        f"Load average (1 min) at the start of each analysis: {min(loads):.2f}-{max(loads):.2f}; "
        f"`kernelscope --version` start-up {startup:.2f} s." if loads else "",
        "",
        "cold = first call in a fresh process (store opened read-only beforehand, not timed; OS page cache "
        f"not dropped); warm = median of the next {a.warm} calls in that process (1 call when cold > 5 s); CLI = wall time of the "
        "`kernelscope analyze NAME TRACE --format json` process minus the start-up time (`--version` "
        "imports almost nothing, so CLI also counts importing pandas/duckdb/the analyses, ~0.6 s). "
        "cpu = the process's CPU time (user + system, all DuckDB threads) during the same call: the work "
        "done, which a loaded machine does not inflate the way it inflates wall time.",
        "",
        "| analysis | cold s | warm s | <= 1 s? | cold cpu s | warm cpu s | CLI s (less start-up) | output rows per table |",
        "|---|---|---|---|---|---|---|---|",
    ]
    body = []
    for r in rows:
        if "skip" in r:
            body.append(f"| {r['name']} | - | - | not run | - | - | - | {r['skip']} |")
            continue
        ok = "yes" if max(r["cold"], r["warm"]) <= BAR_S else "**NO**"
        cli = f"{r['cli']:.2f}" if r["cli"] is not None else f"failed (rc {r['cli_rc']})"
        tabs = ", ".join(f"{k} {v}" for k, v in r["rows"].items())
        label = r["name"] + (" (A = B = this trace)" if r["name"] == "diff" else
                             f" (sweep {SWEEP}: the 8 samples + this trace, in a copy of the store)"
                             if r["name"] == "transition" else "")
        body.append(f"| {label} | {r['cold']:.3f} | {r['warm']:.3f} | {ok} | {r['cold_cpu']:.2f} | "
                    f"{r['warm_cpu']:.2f} | {cli} | {tabs} |")
    misses = [r["name"] for r in rows if "skip" not in r and max(r["cold"], r["warm"]) > BAR_S]
    tail = ["", f"Over 1 s (cold or warm): {', '.join(misses) if misses else 'none'}."]
    text = "\n".join(head + body + tail) + "\n"
    print(text)
    if not a.quick:
        res = ROOT / "benchmarks" / "results" / f"analyses-{now}{'-' + a.tag if a.tag else ''}.md"
        cmd = "python3 benchmarks/analyses.py" + (f" --db {a.db}" if a.db else "") + (f" --tag {a.tag}" if a.tag else "")
        res.write_text(f"# `benchmarks/analyses.py`\n\nCommand: `{cmd}`\n\n{text}")
        log(f"wrote {res}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
