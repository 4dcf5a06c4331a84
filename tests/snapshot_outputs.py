"""Write every user-visible output of kernelscope over the shipped samples into one folder, to diff two versions.

    python tests/snapshot_outputs.py OUT_DIR [--samples sample_traces]

Ingests every sample into a fresh store through the CLI, then writes, per trace: `summary` (table and JSON),
every single-trace analysis (JSON and table), the Markdown report and the HTML report's text (plotly's random div
ids and the bundled plotly.js removed); over the store: `traces`, `transition --sweep llama_prefill`, `diff` of two traces,
`comm` of the DDP run and a two-trace report. Volatile fields (wall times of ingest, store paths) are masked.

Used for issue 12 (a redesign with behaviour unchanged): run it on the old and the new tree and `diff -r` the
folders. Run it with the tree to snapshot first on sys.path (e.g. `PYTHONPATH=/old/src python ...`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import tempfile

from click.testing import CliRunner

# Values that legitimately change run to run.
_VOLATILE = [
    (re.compile(r'"ingested_ns": \d+'), '"ingested_ns": 0'),
    (re.compile(r'"ingest_ns": \d+'), '"ingest_ns": 0'),
    (re.compile(r"\bin \d+(\.\d+)? ?(ms|s)\b"), "in T"),
    (re.compile(r"events, \d+\.\d+ s\b"), "events, T s"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"), "DATE UTC"),
    (re.compile(r'id="[0-9a-f-]{36}"'), 'id="UUID"'),
    (re.compile(r'"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"'), '"UUID"'),
    (re.compile(r"<script[^>]*>/\*\*\s*\* plotly\.js.*?</script>", re.S), "<script>PLOTLY</script>"),
]


def _mask(text: str, db: str) -> str:
    text = text.replace(db, "STORE").replace(str(pathlib.Path(db).parent), "TMP").replace(str(pathlib.Path.cwd()), "ROOT")
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--samples", default="sample_traces")
    args = ap.parse_args()
    import kernelscope
    from kernelscope.cli import cli  # the click group

    args.out.mkdir(parents=True, exist_ok=True)
    print(f"kernelscope from {pathlib.Path(kernelscope.__file__).parent}", file=sys.stderr)
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(pathlib.Path(tmp) / "snap.duckdb")

        def run(name: str, *argv: str) -> str:
            r = runner.invoke(cli, [*argv, "--db", db], catch_exceptions=True)
            text = r.output if r.exception is None or isinstance(r.exception, SystemExit) else (
                r.output + f"\nEXCEPTION {type(r.exception).__name__}: {r.exception}\n")
            text = _mask(f"exit={r.exit_code}\n{text}", db)
            (args.out / name).write_text(text)
            return text

        run("00_ingest.txt", "ingest", args.samples)
        traces = json.loads(run("01_traces.json", "traces", "--json").split("\n", 1)[1])
        run("01_traces.txt", "traces")
        analyses = [line.split()[0] for line in runner.invoke(cli, ["analyze", "--list"]).output.splitlines() if line]
        multi = {"transition", "diff", "comm"}
        for t in traces:
            tid, name = t["id"], re.sub(r"[^A-Za-z0-9_.-]", "_", t["name"])
            key = f"{name}_{tid[:8]}"
            run(f"{key}_summary.txt", "summary", tid)
            run(f"{key}_summary.json", "summary", tid, "--json")
            for a in analyses:
                if a in multi:
                    continue
                run(f"{key}_{a}.json", "analyze", a, tid, "--json")
                run(f"{key}_{a}.txt", "analyze", a, tid)
            run(f"{key}_report.md", "report", tid, "--format", "md")
            html = pathlib.Path(tmp) / "r.html"
            run(f"{key}_report_html.log", "report", tid, "-o", str(html))
            if html.exists():
                (args.out / f"{key}_report.html").write_text(_mask(html.read_text(), db))
                html.unlink()
        ids = [t["id"] for t in traces]
        run("90_transition.json", "analyze", "transition", "--sweep", "llama_prefill", "--json")
        run("90_transition.txt", "analyze", "transition", "--sweep", "llama_prefill")
        if len(ids) >= 2:
            run("91_diff.json", "diff", ids[0], ids[1], "--json")
            run("91_diff.txt", "diff", ids[0], ids[1])
            run("93_report2.md", "report", ids[0], ids[1], "--format", "md")
        ranked = [t["id"] for t in traces if (t.get("labels") or {}).get("run") == "ddp2"]
        if ranked:
            run("92_comm.json", "analyze", "comm", *ranked, "--json")
            run("92_comm.txt", "analyze", "comm", *ranked)
        run("94_report_sweep.md", "report", "--sweep", "llama_prefill", "--format", "md")
    print(f"{len(list(args.out.iterdir()))} files in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
