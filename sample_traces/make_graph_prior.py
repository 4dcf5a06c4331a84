"""Measure the shipped prior of the launch-free gap: src/kernelscope/data/graph_gap_prior.csv.

    python sample_traces/make_graph_prior.py            # print the table
    python sample_traces/make_graph_prior.py --write    # rewrite the CSV

The prior of a GPU family is the median node-to-node gap (start of a graph node minus the end of the previous
node of the same graph launch, clamped at 0) pooled over every CUDA-graph replay of our own captures on that
family: the same statistic ``analyze whatif`` takes from graph replays in the store (analysis/whatif.py).
Captures: ``graph_prior/`` (capture_wild.py on an H100: 200 chained elementwise ops, an 8-layer MLP at batch 1,
a 16-layer Llama-shaped one-token forward) and ``small_kernels_graph/`` (capture.py on an H200). H100 and H200
are one chip (GH100: same SMs, front end and clocks; they differ in memory), so they form one family.
tests/analysis/test_whatif_prior.py recomputes the table from these traces and compares.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSV = HERE.parent / "src" / "kernelscope" / "data" / "graph_gap_prior.csv"
FAMILIES = [  # family, regex on the device name (case-insensitive), capture run dirs
    ("GH100 (H100/H200)", r"\b(H100|H200|GH200)\b",
     ["graph_prior/prior_graph_chain", "graph_prior/prior_graph_mlp", "graph_prior/prior_graph_llama",
      "small_kernels_graph"]),
]
COLUMNS = ["family", "match", "gap_ns", "samples", "captures", "source"]


def measure() -> list[dict]:
    from kernelscope.analysis.whatif import graph_gap
    from kernelscope.storage.ingest import ingest_run
    from kernelscope.storage.store import open_store

    rows = []
    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "p.duckdb") as store:
        for family, match, runs in FAMILIES:
            ids, gpus = [], set()
            for run in runs:
                res = ingest_run(store, HERE / run)
                if res.status == "failed":
                    raise SystemExit(f"make_graph_prior: {run}: {res.message}")
                ids.append(res.trace_id)
                prov = json.loads((HERE / run / "run.json").read_text()).get("provenance", {})
                gpu = (prov.get("gpus") or [{}])[0]
                gpus.add(f"{gpu.get('name')} driver {prov.get('driver_version')} torch {prov.get('torch')}")
            found = graph_gap(store, ids)
            rows.append({"family": family, "match": match, "gap_ns": found["gap_ns"], "samples": found["samples"],
                         "captures": "; ".join(f"sample_traces/{r}" for r in runs),
                         "source": "kernelscope's own CUDA-graph replays on " + "; ".join(sorted(gpus))
                                   + " (sample_traces/make_graph_prior.py)"})
    return rows


def render(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    text = render(measure())
    if a.write:
        CSV.write_text(text)
        print(f"wrote {CSV}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
