"""The layer contracts in pyproject.toml ([tool.importlinter]) hold: import-linter's `lint-imports` passes; ruff
passes; reports/ and dashboard/ hold no SQL (a source scan: import-linter sees imports, not SQL text); no module
under src/ is over 600 lines."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
        check=False,  # the assertion below shows its output
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # At least the three contracts of the skeleton were checked and kept (an empty config must not pass).
    m = re.search(r"Contracts: (\d+) kept, 0 broken\.", out)
    assert m and int(m.group(1)) >= 3, out


# --- No SQL above analysis ------------------------------------------------------------------------------------
# The schema lives in storage (DESIGN.md, "Analyses"): reports and the dashboard call named query functions of
# kernelscope.storage and build figures from the frames they return. import-linter checks imports only, so this
# scans their source: a string literal that reads as SQL, or a call that runs SQL on a store or connection, is
# a finding. Docstrings are prose and not scanned; UI text in sentence case ("Select a trace from ...") does not
# match the upper-case SQL shapes below.

#: Shapes of SQL text (upper-case keywords, as kernelscope writes SQL).
_SQL_PATTERNS = (
    r"\bSELECT\b[\s\S]*?\bFROM\b",
    r"^\s*(?:SELECT|WITH|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|PRAGMA|ATTACH|COPY|DESCRIBE|SUMMARIZE)\s",
    r"\bWITH\s+(?:RECURSIVE\s+)?\w+\s+AS\s*\(",
    r"\bINSERT\s+INTO\b", r"\bDELETE\s+FROM\b", r"\bUPDATE\s+\w+\s+SET\b",
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+|TEMPORARY\s+)?(?:TABLE|VIEW|MACRO|INDEX|SEQUENCE)\b",
    r"\b(?:LEFT\s+|INNER\s+|ASOF\s+|SEMI\s+|ANTI\s+|CROSS\s+)?JOIN\s+\w+(?:\s+\w+)?\s+(?:ON|USING)\b",
    r"\bFROM\s+\w+(?:\s+\w+)?\s+WHERE\b", r"\bGROUP\s+BY\b", r"\bORDER\s+BY\b", r"\bUNION\s+ALL\b",
)
_SQL_SHAPES = re.compile("|".join(_SQL_PATTERNS), re.MULTILINE)
#: Methods that run SQL on a DuckDB connection or a kernelscope Store.
_SQL_CALLS = {"query", "query_arrow", "sql", "execute", "executemany", "fetchall", "fetchone", "fetchdf"}
#: Receivers that are a store or a connection (``urls.query(search)`` parses a URL and is fine).
_SQL_RECEIVERS = {"store", "con", "conn", "connection", "cursor", "cur", "db", "duckdb", "s"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _receiver(node: ast.AST) -> str | None:
    """The last name of a call's receiver: ``store`` in store.query, ``con`` in self.store.con.execute."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def sql_findings(source: str, filename: str = "<source>") -> list[str]:
    """'file:line: why' for every SQL text or SQL call in ``source``."""
    tree = ast.parse(source, filename)
    skip = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            m = _SQL_SHAPES.search(node.value)
            if m:
                out.append(f"{filename}:{node.lineno}: SQL text {m.group(0).strip()[:40]!r}")
        elif isinstance(node, ast.Attribute) and node.attr == "con":
            out.append(f"{filename}:{node.lineno}: a store's DuckDB connection (.con)")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _SQL_CALLS and _receiver(node.func.value) in _SQL_RECEIVERS):
            out.append(f"{filename}:{node.lineno}: SQL run through {_receiver(node.func.value)}.{node.func.attr}()")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and
                                                      node.module else [])
            if any(n == "duckdb" or n.startswith("duckdb.") for n in names):
                out.append(f"{filename}:{node.lineno}: imports duckdb")
    return out


def test_ruff_is_clean():
    """`ruff check src tests` with pyproject's [tool.ruff] rules: lint runs in CI as a test."""
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run([str(ruff) if ruff.exists() else "ruff", "check", "--no-cache", "src", "tests"], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_sql_guard_finds_sql_and_passes_prose():
    sql = '''
Q = """
SELECT name, count(*) AS n FROM traces t
GROUP BY name
"""
W = "WITH x AS (SELECT 1) SELECT * FROM x"
P = ("SELECT name " "FROM traces WHERE trace_id = $t")
SPLIT = "SELECT key " + "FROM labels"
LOWER = store.query("select name from traces")
CON = store.con.execute("x")
ROWS = self.store.query_arrow(sql_text)
J = f"x LEFT JOIN gpu_activities a ON a.trace_id = {t}"
'''
    found = sql_findings(sql)
    lines = sorted({int(f.split(":")[1]) for f in found})
    assert lines == [2, 6, 7, 8, 9, 10, 11, 12], found
    prose = '''
"""Select a trace from the list; the Timeline shows it. SELECT appears in this docstring FROM here."""
def f(search):
    """Group by name, order by time: GROUP BY in prose inside a docstring is fine."""
    params = urls.query(search)
    label = "Select a trace from the list above"
    title = "Sweep: choose the label to order by"
    note = "kernels with a launch, joined on correlation"
    df = frame.query("busy_ns > 0")
    return "SELECT_COLOR", label, title, note, params, df
'''
    assert sql_findings(prose) == []


@pytest.mark.parametrize("package", ["reports", "dashboard"])
def test_no_sql_in_reports_or_dashboard(package):
    """reports/ and dashboard/ hold no SQL text and run none: they call kernelscope.storage's query functions."""
    root = ROOT / "src" / "kernelscope" / package
    files = sorted(root.rglob("*.py"))
    assert files, root
    found = [f for p in files for f in sql_findings(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    assert found == [], "\n".join(found)


#: Issue 12: one concern per module, none over this many lines (split a module that grows past it).
MAX_LINES = 600


def test_no_module_under_src_is_over_the_line_limit():
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
             for p in (ROOT / "src").rglob("*.py")}
    assert len(sizes) > 50  # the scan found the package
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
