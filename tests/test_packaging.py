"""What an installed kernelscope needs ships with it: every data file under src/kernelscope (schema SQL, CSV tables,
dashboard assets, py.typed) matches a package-data pattern of pyproject.toml, and every third-party module the
package imports at top level or in a function is a declared dependency (or an extra's)."""

from __future__ import annotations

import ast
import fnmatch
import re

from conftest import ROOT

PACKAGE = ROOT / "src" / "kernelscope"
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def _package_data() -> list[str]:
    section = PYPROJECT.split("[tool.setuptools.package-data]\n", 1)[1].split("\n[", 1)[0]
    return re.findall(r'"([^"]+)"', re.search(r"^kernelscope = \[(.*?)\]", section, re.MULTILINE | re.DOTALL).group(1))


def test_every_data_file_is_package_data():
    patterns = _package_data()
    files = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
             if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert "py.typed" in files and any(f.startswith("storage/schema/") for f in files)
    missing = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not missing, f"add these to [tool.setuptools.package-data] in pyproject.toml: {missing}"


def test_every_imported_package_is_declared():
    project = PYPROJECT.split("[project]\n", 1)[1].split("\n[project.scripts]", 1)[0]  # dependencies and extras
    declared = set(re.findall(r'"([A-Za-z][A-Za-z0-9_.-]*)(?:[<>=!~; \[]|")', project))
    import_names = {"nvidia-ml-py": "pynvml"}  # distribution name -> the module it installs
    # IPython: imported only inside notebook.Result._ipython_display_, which only IPython itself ever calls
    allowed = {import_names.get(d, d).replace("-", "_") for d in declared} | {"kernelscope", "IPython"}
    allowed |= {"_plotly_utils"} if "plotly" in allowed else set()  # installed by the plotly distribution
    imported: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    import sys

    third_party = {m for m in imported if m not in sys.stdlib_module_names}
    assert "numpy" in third_party
    assert third_party <= allowed, f"imported but not declared in pyproject.toml: {sorted(third_party - allowed)}"


def test_the_cli_starts_without_pandas(tmp_path):
    """pandas costs a process ~0.3-0.5 s of imports: `kernelscope --help` and a usage error answer without
    it (0.07 s instead of 0.7 s here); a command that reads the store does import it (pyarrow's first array
    already does)."""
    import subprocess
    import sys

    code = ("import runpy, sys\n"
            "sys.argv = ['kernelscope'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('kernelscope.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('pandas' in sys.modules)\n")
    from stores import empty

    db = str(empty(tmp_path / "s.duckdb"))
    for args, pandas in ((["--help"], False), (["analyze", "--help"], False), (["diff", "a"], False),
                         (["traces", "--db", db], True)):
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                             timeout=120)
        assert res.stdout.strip().splitlines()[-1] == str(pandas), (args, res.stdout[-300:], res.stderr[-300:])
