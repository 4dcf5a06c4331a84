"""64 synthetic ranks tiled from a real rank trace: ingest time (and parallelism), store and Parquet sizes,
time of the comm analysis (issue 7, point 4).

Rank k (k = 0 .. N-1) is a copy of ``sample_traces/ddp2/ddp_rank{k % 2}/trace.json.gz`` with its rank set
rewritten in the text: ``distributedInfo`` (rank k, world size N, one process group of ranks 0..N-1), the
collective args ``Group size`` (N), ``Process Group Ranks`` ([0, ..., N-1]) and ``Rank`` (k). Times and ids
stay as written (each rank has its own id space; all ranks share the host clock), so the copies hash apart
only by their rank fields and every collective instance is seen on all N ranks.

    python benchmarks/ranks.py [--ranks 64] [--out .bench/ranks64] [--write]

Each ingest is a fresh ``kernelscope ingest DIR --db <new store>`` process (wall time, imports included),
once with the default worker bound and once serial (``KERNELSCOPE_INGEST_WORKERS=1``). ``--write`` writes
benchmarks/results/ranks-<date>.md.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = [ROOT / "sample_traces" / "ddp2" / f"ddp_rank{r}" / "trace.json.gz" for r in (0, 1)]
_VENV_KS = ROOT / ".venv" / "bin" / "kernelscope"
#: The CLI: the project venv's, else this interpreter's ``-m kernelscope.cli`` (with src/ on PYTHONPATH).
KS = [str(_VENV_KS)] if _VENV_KS.exists() else [sys.executable, "-m", "kernelscope.cli"]


def _dist_block(text: str) -> tuple[int, int]:
    """(start, end) of the distributedInfo object's text."""
    k = text.index('"distributedInfo"')
    i = text.index("{", k)
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return i, j + 1
    raise ValueError("unterminated distributedInfo")


def rank_copy(text: str, rank: int, world: int) -> str:
    s, e = _dist_block(text)
    info = json.loads(text[s:e])
    info.update(rank=rank, world_size=world)
    for pg in info.get("pg_config") or []:
        pg["pg_size"], pg["ranks"] = world, list(range(world))
    out = text[:s] + json.dumps(info) + text[e:]
    ranks = json.dumps(list(range(world)))
    out = re.sub(r'"Group size": \d+', f'"Group size": {world}', out)
    out = re.sub(r'"Process Group Ranks": "\[[0-9, ]*\]"', f'"Process Group Ranks": "{ranks}"', out)
    return re.sub(r'"Rank": \d+', f'"Rank": {rank}', out)


def build(out: pathlib.Path, world: int, tiles: int = 1) -> pathlib.Path:
    """Rank k's file = ddp_rank{k % 2} with its rank set rewritten; with ``tiles`` > 1, that trace tiled
    ``tiles`` times along time (benchmarks/tile.py; one period for every rank, the longest sample's, so the
    k-th collective of each rank stays in the same tile), written as plain .json (no gzip: GBs)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    texts = [gzip.open(p, "rt", encoding="utf-8").read() for p in SAMPLES]
    if tiles <= 1:
        for k in range(world):
            data = rank_copy(texts[k % 2], k, world).encode()
            (out / f"trace_rank{k}.json.gz").write_bytes(gzip.compress(data, 6))
        return out
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from tile import Tiler

    tilers = [Tiler(json.loads(rank_copy(texts[k % 2], k, world))) for k in range(world)]
    period = max(t.period for t in tilers)
    for k, t in enumerate(tilers):
        t.period = period
        t.template, t.vars = t._template()
        t.write(str(out / f"trace_rank{k}.json"), tiles)
    return out


def size(path: pathlib.Path) -> int:
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ingest(folder: pathlib.Path, db: pathlib.Path, workers: str | None, engine: str = "local") -> tuple[float, str]:
    for p in (db, pathlib.Path(str(db) + ".wal")):
        if p.exists():
            p.unlink()
    env = dict(os.environ)
    env.pop("KERNELSCOPE_INGEST_WORKERS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src")] + [x for x in [env.get("PYTHONPATH")] if x])
    if workers:
        env["KERNELSCOPE_INGEST_WORKERS"] = workers
    t0 = time.perf_counter()
    proc = subprocess.run(KS + ["ingest", str(folder), "--engine", engine, "--db", str(db)], capture_output=True,
                          text=True, env=env)
    dt = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"ingest failed: {proc.stderr.strip()}")
    m = re.search(r"parsed by (\d+ process\S*|\d+ Ray tasks) in ([0-9.]+) s, derived and inserted in ([0-9.]+) s",
                  proc.stdout)
    return dt, (f"{m.group(1)}: parse {m.group(2)} s, derive+insert {m.group(3)} s" if m else "?")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / ".bench" / "ranks64")
    ap.add_argument("--tiles", type=int, default=1,
                    help="tile each rank trace this many times along time (e.g. --ranks 2 --tiles 683: 1M kernels)")
    ap.add_argument("--once", action="store_true", help="ingest once (default worker bound), not three ways")
    ap.add_argument("--ray", action="store_true",
                    help="also ingest with --engine ray (a local Ray instance, started by the ingest: its start is "
                         "in the time) and check it stores the same rows")
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/ranks-<date><suffix>.md")
    ap.add_argument("--suffix", default="", help="appended to the results file name (e.g. -16core)")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from kernelscope.analysis.comm import comm
    from kernelscope.storage.export import export_parquet, open_parquet_store
    from kernelscope.storage.store import open_store

    traces = build(a.out / "traces", a.ranks, a.tiles)
    rows = []
    db = a.out / "s.duckdb"
    cores = len(os.sched_getaffinity(0))
    if not a.once:
        t_ser, w_ser = ingest(traces, db, "1")
        t_par, w_par = ingest(traces, db, str(cores))
        rows.append(("ingest, parse in-process", f"{t_ser:.1f} s", w_ser))
        rows.append((f"ingest, parse in {cores} processes", f"{t_par:.1f} s", w_par))
    if a.ray:
        ray_db = a.out / "ray.duckdb"
        t_ray, w_ray = ingest(traces, ray_db, None, engine="ray")
        with open_store(ray_db, read_only=True) as store:
            ray_rows = store.con.execute("SELECT count(*), sum(dur_ns) FROM gpu_activities").fetchone()
        rows.append(("ingest --engine ray (local instance)", f"{t_ray:.1f} s", w_ray))
    t_def, w_def = ingest(traces, db, None)
    rows.append(("ingest, default bound", f"{t_def:.1f} s", w_def + " (bound: free cores, memory, in-process "
                 "below 8 MiB of files)"))
    if a.ray:
        with open_store(db, read_only=True) as store:
            same = store.con.execute("SELECT count(*), sum(dur_ns) FROM gpu_activities").fetchone() == ray_rows
        rows.append(("Ray rows = local rows", str(same), "count and total duration of gpu_activities"))
    with open_store(db, read_only=True) as store:
        kernels = store.con.execute("SELECT count(*) FROM gpu_activities WHERE kind = 'kernel'").fetchone()[0]
        colls = store.con.execute("SELECT count(*) FROM collectives").fetchone()[0]
        pq = a.out / "parquet"
        if pq.exists():
            shutil.rmtree(pq)
        t0 = time.perf_counter()
        info = export_parquet(store, pq)
        t_exp = time.perf_counter() - t0
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            r = comm(store)
            times.append(time.perf_counter() - t0)
    ps = open_parquet_store(pq)
    ptimes = []
    for _ in range(3):
        t0 = time.perf_counter()
        rp = comm(ps)
        ptimes.append(time.perf_counter() - t0)
    ps.close()
    same = rp.scalars == r.scalars
    rows += [
        ("input", f"{size(traces) / 1e6:.1f} MB" + (" gz" if a.tiles <= 1 else " .json"), f"{a.ranks} rank files"),
        ("store size", f"{size(db) / 1e6:.1f} MB", f"{kernels:,} kernels, {colls:,} collective kernels"),
        ("Parquet export", f"{info.bytes / 1e6:.1f} MB", f"{t_exp:.2f} s, {info.rows:,} rows"),
        ("comm on the store", f"{times[0]:.2f} s", f"then {min(times[1:]):.2f} s; "
         f"{r.scalars['collective_instances']} instances x {a.ranks} ranks"),
        ("comm on the Parquet export", f"{ptimes[0]:.2f} s", f"then {min(ptimes[1:]):.2f} s; "
         f"scalars equal to the store's: {same}"),
    ]
    w = max(len(x[0]) for x in rows)
    table = [f"| {'what':<{w}} | value | note |", f"|{'-' * (w + 2)}|---|---|"]
    table += [f"| {x:<{w}} | {v} | {n} |" for x, v, n in rows]
    print("\n".join(table))
    if a.write:
        import duckdb
        import pyarrow

        date = datetime.date.today().isoformat()
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip()
        load = os.getloadavg()
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
        text = (f"# ranks.py: {a.ranks} synthetic ranks ({date}, git {commit or 'working tree'})\n\n"
                f"Machine: {os.cpu_count()} cores ({cpu}), load average {load[0]:.1f} at the end; duckdb "
                f"{duckdb.__version__}, pyarrow {pyarrow.__version__}, python {sys.version.split()[0]}.\n"
                f"Command: `python benchmarks/ranks.py --ranks {a.ranks}"
                + (f" --tiles {a.tiles}" if a.tiles > 1 else "") + (" --once" if a.once else "")
                + (" --ray" if a.ray else "")
                + f" --write{' --suffix ' + a.suffix if a.suffix else ''}`. Ranks made from "
                "sample_traces/ddp2 (rank k = ddp_rank{k % 2} with its rank set rewritten"
                + (f", tiled {a.tiles} times along time" if a.tiles > 1 else "") + ").\n\n"
                + "\n".join(table) + "\n")
        path = ROOT / "benchmarks" / "results" / f"ranks-{date}{a.suffix}.md"
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
