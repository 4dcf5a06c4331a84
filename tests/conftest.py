"""Shared fixtures: one store per test session, built by ingesting every Kineto trace the repo ships.

Trace files: ``*.json`` / ``*.json.gz`` under ``sample_traces/`` (real traces from a GPU) and directly
under ``tests/data/`` (small real traces). Each is ingested on its own through the real CLI, so a file the
parser refuses is recorded as a failure (tests decide whether that is right) and ``.json``/``.json.gz``
twins map to the same trace id.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACE_DIRS = [ROOT / "sample_traces", ROOT / "tests" / "data"]

sys.path.insert(0, str(Path(__file__).resolve().parent))


def trace_files() -> list[Path]:
    """Every .json/.json.gz trace under sample_traces/ (recursive; not the runs' run.json) and tests/data/
    (top level only: subfolders there hold deliberately broken inputs for the parser's own tests)."""
    files: list[Path] = []
    for folder in TRACE_DIRS:
        if not folder.is_dir():
            continue
        pattern = "**/*" if folder.name == "sample_traces" else "*"
        files += [p for p in folder.glob(pattern) if p.is_file() and p.name.endswith((".json", ".json.gz"))
                  and p.name != "run.json"]  # a collector run's metadata, not a trace
    return sorted(files)


@dataclass
class SessionStore:
    db: Path
    ids: dict[Path, str] = field(default_factory=dict)  # file -> trace id (ingested or skipped twin)
    failures: dict[Path, str] = field(default_factory=dict)  # file -> the CLI's one-line reason


_LINE = re.compile(r"^(ingested|skipped)\s+(\S+)\s+(.*?)\s+\(")


@pytest.fixture(scope="session")
def session_store(tmp_path_factory) -> SessionStore:
    from click.testing import CliRunner

    from kernelscope.cli import cli

    db = tmp_path_factory.mktemp("store") / "session.duckdb"
    out = SessionStore(db=db)
    runner = CliRunner()
    for path in trace_files():
        res = runner.invoke(cli, ["ingest", str(path), "--db", str(db)])
        m = _LINE.match(res.stdout.strip()) if res.stdout.strip() else None
        if res.exit_code == 0 and m:
            out.ids[path] = m.group(2)
        else:
            reason = (res.stderr or res.stdout or repr(res.exception)).strip()
            out.failures[path] = reason
    return out


def kineto_event(cat, name, ts, dur, pid=11, tid=11, **args) -> dict:
    """One Kineto 'X' event (ts/dur in us, as torch.profiler writes them)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_kineto(path: Path, events: list[dict], base_ns: int = 1_700_000_000_000_000_000) -> Path:
    """A minimal Kineto file of ``events`` relative to ``baseTimeNanoseconds = base_ns``."""
    import json

    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": base_ns, "traceEvents": events}))
    return path
