"""Ingest with the default settings on a many-core machine: does it work, how long, how much memory?

    python benchmarks/ingest_cores.py [--sample sample_traces/train_step/trace.json.gz] [--mb 274 1090]
                                      [--configs default,taskset4,threads16,threads64] [--out results.md]

Issue 11: on the GPU host's 16 cores, ingest of a 274 MB and a 1.09 GB trace failed with DuckDB "Out of Memory"
under the fixed 256 MB limit, with or without taskset. This script tiles a real sample trace (benchmarks/tile.py)
to each size, then runs ``kernelscope ingest`` in a fresh child process per configuration and prints one row per
(size, configuration): exit code, wall seconds, the child's peak RSS (``wait4`` rusage) and the resources line
ingest reports (threads and memory_limit chosen). Configurations: ``default`` (no environment), ``tasksetN``
(pinned to N cores), ``threadsN`` (KERNELSCOPE_THREADS=N: forced DuckDB threads, more than the cores here).
Each configuration runs ``--repeat`` times; the table gives medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_child(cmd: list[str], env: dict) -> tuple[int, float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out = (p.stdout.read() + p.stderr.read()).decode(errors="replace").strip()
    rc = os.waitstatus_to_exitcode(status)
    return rc, wall, usage.ru_maxrss * 1024, out.splitlines()[-1] if out else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", default=str(HERE.parent / "sample_traces" / "train_step" / "trace.json.gz"))
    ap.add_argument("--mb", type=float, nargs="+", default=[274, 1090])
    ap.add_argument("--configs", default="default,taskset4,threads16,threads64")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None, help="also write the table to this Markdown file")
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="ks_cores_"))
    work.mkdir(parents=True, exist_ok=True)
    rows = [f"cores: {len(os.sched_getaffinity(0))} usable, {os.cpu_count()} online; python {sys.version.split()[0]}",
            "", "| trace MB | config | exit | wall s (median) | peak RSS MB (median) | last line |",
            "|---:|---|---:|---:|---:|---|"]
    print("\n".join(rows), flush=True)
    for mb in a.mb:
        trace = work / f"tile_{int(mb)}.json"
        if not trace.exists():
            subprocess.run([sys.executable, str(HERE / "tile.py"), a.sample, str(trace), "--mb", str(mb)], check=True,
                           stdout=subprocess.DEVNULL)
        size = trace.stat().st_size / 1e6
        for config in a.configs.split(","):
            env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELSCOPE_")}
            prefix: list[str] = []
            if config.startswith("taskset"):
                prefix = ["taskset", "-c", f"0-{int(config[7:]) - 1}"]
            elif config.startswith("threads"):
                env["KERNELSCOPE_THREADS"] = config[7:]
            runs = []
            for i in range(a.repeat):
                db = work / f"s_{int(mb)}_{config}_{i}.duckdb"
                db.unlink(missing_ok=True)
                cmd = prefix + [sys.executable, "-m", "kernelscope.cli", "ingest", str(trace), "--db", str(db)]
                runs.append(run_child(cmd, env))
                db.unlink(missing_ok=True)
            rc = max(r[0] for r in runs)
            line = (f"| {size:,.0f} | {config} | {rc} | {statistics.median(r[1] for r in runs):.1f} | "
                    f"{statistics.median(r[2] for r in runs) / 1e6:,.0f} | {runs[-1][3][:160]} |")
            rows.append(line)
            print(line, flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
