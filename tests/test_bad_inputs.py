"""Every bad input through the real CLI: a non-zero exit, exactly one `kernelscope: <path>: <reason>` line on
stderr, no traceback, and every table of the store unchanged (issue 2, "Done when")."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SAMPLES, compiled_copy

from kernelscope.cli import cli
from kernelscope.storage.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parent))
import edge_traces as et
from storage.kineto_build import kern, op, rt, write_trace

ROOT = Path(__file__).resolve().parents[1]
GOOD_RUN = ROOT / "sample_traces" / "compiled"


def duplicate_correlations(tmp_path: Path) -> Path:
    """Two runtime calls sharing correlation 7: two processes' traces merged into one file."""
    return write_trace(tmp_path / "duplicate_correlations.json", [
        op("aten::add", 0, 50, 1), rt("cudaLaunchKernel", 10, 5, 7, 1), kern("k", 20, 3, 7, 1),
        op("aten::mul", 100, 50, 2), rt("cudaLaunchKernel", 110, 5, 7, 2), kern("k2", 120, 3, 7, 2),
    ])


CASES = dict(et.BAD_CASES, duplicate_correlations=duplicate_correlations)


def _counts(db: Path) -> dict[str, int]:
    with open_store(db, read_only=True) as s:
        tables = [r[0] for r in s.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()]
        return {t: s.con.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in sorted(tables)}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    # `kernelscope ingest GOOD_RUN` into a new store, made once per session (tests/conftest.py)
    assert GOOD_RUN == SAMPLES / "compiled"
    return compiled_copy(tmp_path_factory.mktemp("bad") / "seed.duckdb")


def test_at_least_25_bad_inputs():
    assert len(CASES) >= 26


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_one_line_nonzero_store_unchanged(name, seeded, tmp_path):
    db = tmp_path / "s.duckdb"
    shutil.copy(seeded, db)
    before = _counts(db)
    bad = CASES[name](tmp_path)
    res = CliRunner().invoke(cli, ["ingest", str(bad), "--db", str(db)])
    assert res.exit_code != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"kernelscope: {bad}: "), lines[0]
    assert "Traceback" not in res.stderr + res.output
    assert _counts(db) == before


def test_directory_of_mixed_good_and_bad_files(seeded, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    bad = [CASES[n](folder) for n in ("truncated_gzip", "root_string", "duplicate_correlations")
           if n in CASES]
    assert len(bad) == 3
    shutil.copytree(ROOT / "sample_traces" / "small_kernels_graph", folder / "good_run")
    db = tmp_path / "s.duckdb"
    shutil.copy(seeded, db)
    before = _counts(db)
    res = CliRunner().invoke(cli, ["ingest", str(folder), "--db", str(db)])
    assert res.exit_code != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 3 and all(ln.startswith("kernelscope: ") for ln in lines), res.stderr
    assert "ingested" in res.output
    after = _counts(db)
    assert after["traces"] == before["traces"] + 1
    assert after["gpu_activities"] == before["gpu_activities"] + 1200
