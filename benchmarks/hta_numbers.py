"""The same questions asked of kernelscope and of Holistic Trace Analysis (HTA) on the same traces, with a plain
``json`` recount of each file as the referee.

A user moving from HTA asks first why the numbers differ. For each trace this prints, side by side:

- **kernels** and **kernel time**: the referee (every ``cat == "kernel"`` complete event of the file, its
  ``dur`` summed as written), ``kernelscope analyze kernels`` (``kernels``, ``kernel_time_ns``), HTA's kernel
  rows of ``TraceAnalysis.t.get_trace(rank)`` as loaded by default and again with ``HTA_DISABLE_NS_ROUNDING=1``;
- **GPU idle**: ``kernelscope analyze bound`` (``idle_ns``, ``host_wait_ns``, ``dependency_wait_ns``; the whole
  trace) and HTA's ``get_temporal_breakdown`` idle time and ``get_idle_time_breakdown`` categories (summed over
  streams), or the exception HTA raised.

Why they differ is printed under the table when it is one of the causes known from HTA 0.5.0's code: it rounds
nanosecond timestamps to whole microseconds (``ts`` up, ``ts + dur`` down: ``round_down_time_stamps`` in
``hta/common/trace_parser.py``, unless ``HTA_DISABLE_NS_ROUNDING=1``), and it keeps only the events of complete
``ProfilerStep`` iterations.

Usage:
    python3 benchmarks/hta_numbers.py                       # the shipped samples listed in SAMPLES
    python3 benchmarks/hta_numbers.py TRACE.json.gz ...     # any Kineto traces (one rank each)
    python3 benchmarks/hta_numbers.py --out benchmarks/results/hta-numbers-DATE.md
HTA runs in its own venv (.bench/hta-venv, created when missing, as benchmarks/ingest.py does).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from ingest import ensure_hta  # noqa: E402  (benchmarks/ingest.py)

SAMPLES = ("llama_decode", "llama_prefill_b1", "train_step", "qwen2_train_full", "small_kernels_eager")

HTA_SCRIPT = r"""
import json, sys, warnings, logging
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
rank = a.t.get_ranks()[0]
df = a.t.get_trace(rank)
k = df[df["cat"] == a.t.symbol_table.get_sym_id_map().get("kernel", -99)]
out = {"kernels": int(len(k)), "kernel_ns": float(k["dur"].sum()) * 1000}
try:
    tb = a.get_temporal_breakdown(visualize=False)
    out["idle_ns"] = float(tb["idle_time(us)"].iloc[0]) * 1000
except Exception as e:
    out["idle_ns"] = f"{type(e).__name__} {e}".strip()
try:
    ib = a.get_idle_time_breakdown(ranks=[rank], visualize=False, show_idle_interval_stats=False)[0]
    out["idle_by"] = {c: float(v) * 1000 for c, v in ib.groupby("idle_category")["idle_time"].sum().items()}
except Exception as e:
    out["idle_by"] = f"{type(e).__name__} {e}".strip()
print(json.dumps(out))
"""


def referee(path: str) -> dict:
    """Kernels and their summed ``dur`` as written (ns), and whether timestamps carry sub-microsecond digits."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    ks = [e for e in events if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"]
    fractional = sum(1 for e in ks if float(e.get("ts", 0)) % 1 or float(e.get("dur", 0)) % 1)
    return {"kernels": len(ks), "kernel_ns": sum(float(e.get("dur", 0)) for e in ks) * 1000,
            "fractional": fractional, "steps": sum(1 for e in events if isinstance(e, dict)
                                                   and str(e.get("name", "")).startswith("ProfilerStep#"))}


def ours(path: str, work: str) -> dict:
    db = os.path.join(work, "ks.duckdb")
    ks = [sys.executable, "-m", "kernelscope"]
    run = subprocess.run(ks + ["ingest", path, "--db", db], capture_output=True, text=True)
    if run.returncode:
        return {"error": run.stderr.strip().splitlines()[-1]}
    tid = run.stdout.split()[1]
    out = {}
    for name in ("kernels", "bound"):
        r = subprocess.run(ks + ["analyze", name, tid, "--db", db, "--format", "json"], capture_output=True, text=True)
        out[name] = json.loads(r.stdout) if r.returncode == 0 else {}
    k, b = out["kernels"], out["bound"]
    return {"kernels": k.get("kernels"), "kernel_ns": k.get("kernel_time_ns"), "idle_ns": b.get("idle_ns"),
            "host_wait_ns": b.get("host_wait_ns"), "dependency_wait_ns": b.get("dependency_wait_ns")}


def hta(py: str, path: str, work: str, rounding: bool) -> dict:
    folder = os.path.join(work, "hta")
    os.makedirs(folder, exist_ok=True)
    link = os.path.join(folder, "rank_0.json" + (".gz" if path.endswith(".gz") else ""))
    if not os.path.exists(link):
        os.symlink(os.path.abspath(path), link)
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="0" if rounding else "1")
    r = subprocess.run([py, "-c", HTA_SCRIPT, folder], capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:120]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def ms(ns) -> str:
    return f"{ns / 1e6:,.3f}" if isinstance(ns, (int, float)) else "-"


def row(name: str, ref: dict, k: dict, h: dict, h1: dict) -> tuple[str, list[str]]:
    idle_h = h.get("idle_ns")
    idle_h = ms(idle_h) if isinstance(idle_h, float) else f"fails: {str(idle_h)[:40]}" if idle_h else "-"
    by = h.get("idle_by")
    by = ", ".join(f"{c} {ms(v)}" for c, v in by.items()) if isinstance(by, dict) else f"fails: {str(by)[:40]}"
    cells = [name, f"{ref['kernels']:,} / {ms(ref['kernel_ns'])}",
             f"{k.get('kernels', 0):,} / {ms(k.get('kernel_ns'))}" if "error" not in k else k["error"],
             f"{h.get('kernels', 0):,} / {ms(h.get('kernel_ns'))}" if "error" not in h else h["error"],
             f"{h1.get('kernels', 0):,} / {ms(h1.get('kernel_ns'))}" if "error" not in h1 else h1["error"],
             f"{ms(k.get('idle_ns'))} (host {ms(k.get('host_wait_ns'))}, dependency {ms(k.get('dependency_wait_ns'))})",
             idle_h, by]
    why = []
    if "error" not in h and ref["kernel_ns"] and h.get("kernels") == ref["kernels"]:
        lost = 1 - h["kernel_ns"] / ref["kernel_ns"]
        if lost > 0.001 and ref["fractional"]:
            why.append(f"{name}: HTA's kernel time is {100 * lost:.1f}% below the file's: it rounds nanosecond "
                       "timestamps to whole microseconds (start up, end down)"
                       + (f"; with HTA_DISABLE_NS_ROUNDING=1 {100 * (1 - h1['kernel_ns'] / ref['kernel_ns']):.1f}%"
                          if "error" not in h1 else ""))
    if "error" not in h and h.get("kernels", 0) < ref["kernels"] and ref["steps"]:
        why.append(f"{name}: HTA keeps {h['kernels']:,} of the file's {ref['kernels']:,} kernels: the events of "
                   f"complete ProfilerStep iterations only ({ref['steps']} ProfilerStep ranges in the file)")
    return "| " + " | ".join(cells) + " |", why


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", help="Kineto traces (default: the shipped samples in SAMPLES)")
    ap.add_argument("--hta-venv", default=os.path.join(ROOT, ".bench", "hta-venv"))
    ap.add_argument("--out", help="also write the table here (Markdown)")
    args = ap.parse_args()
    paths = args.traces or [os.path.join(ROOT, "sample_traces", s, "trace.json.gz") for s in SAMPLES]
    py = ensure_hta(args.hta_venv)
    lines = ["| trace | file: kernels / ms | kernelscope | HTA | HTA, no ns rounding | kernelscope idle ms "
             "| HTA idle ms (temporal) | HTA idle by category, ms (summed over streams) |",
             "|---|---|---|---|---|---|---|---|"]
    notes = []
    for path in paths:
        name = os.path.basename(os.path.dirname(path)) if os.path.basename(path) == "trace.json.gz" \
            else os.path.basename(path)[:60]
        with tempfile.TemporaryDirectory() as work:
            line, why = row(name, referee(path), ours(path, work), hta(py, path, work, True),
                            hta(py, path, work, False))
        print(line, flush=True)
        lines.append(line)
        notes += why
    text = "\n".join(lines) + ("\n\nWhy they differ:\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")
    print("\n" + text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
