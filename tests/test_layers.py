"""The layer contracts in pyproject.toml ([tool.importlinter]) hold: import-linter's `lint-imports` passes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    here = Path(sys.executable).parent / "lint-imports"
    return str(here) if here.exists() else (shutil.which("lint-imports") or "lint-imports")


def test_import_contracts_hold():
    proc = subprocess.run(
        [_lint_imports(), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # At least the three contracts of the skeleton were checked and kept (an empty config must not pass).
    m = re.search(r"Contracts: (\d+) kept, 0 broken\.", out)
    assert m and int(m.group(1)) >= 3, out
