"""Shared fixtures: the sample traces ingested once per test session into template stores (tests/stores.py)
that tests open or copy.

- ``session_store``: every Kineto trace file the repo ships (``*.json`` / ``*.json.gz`` under
  ``sample_traces/``, real traces from a GPU, and directly under ``tests/data/``, small real traces), mapped to
  its trace id. It starts as a copy of ``sample_runs``' store: a file README's main job stored is that job's
  trace (a run directory's, with its name, labels and telemetry), derived once per session; every other file
  is ingested on its own through the real CLI, so a file the parser refuses is recorded as a failure (tests
  decide whether that is right) and ``.json``/``.json.gz`` twins map to the same trace id. Open it read-only.
- ``sample_runs``: README's main job, ``kernelscope ingest sample_traces/``: every collector run directory
  (run.json + trace.json.gz: name, labels, telemetry, un-profiled timings) ingested as a run, and the rest of
  the folder; ``ids`` maps each run directory to its trace id. Open it read-only.

Markers (pyproject.toml): ``browser`` is put on every test that drives Chromium (``pytest -m "not browser"``
is the fast loop); ``slow`` on GPU-free tests that take many seconds on their own.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
TRACE_DIRS = [SAMPLES, ROOT / "tests" / "data"]

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Bytecode caches (gitignored __pycache__/) for this session and the processes it starts, also where the
# environment says PYTHONDONTWRITEBYTECODE=1 (this project's machines do): without them pytest rewrites the
# asserts of every test module again in each worker, and each of the ~100 CLI subprocesses compiles kernelscope.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# A suite started as a non-interactive shell's background job (`pytest &` in a script) inherits Ctrl-C ignored, and
# so would every process it starts (Python keeps an inherited ignore): the tests that stop a dashboard with Ctrl-C
# then waited out their timeouts (20 s twice in test_token, 60 s in test_logdir) and read as a dashboard that does
# not stop. Take Ctrl-C back as a terminal gives it; the processes the tests start get the default from here.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import stores  # noqa: E402  (tests/ is on sys.path from here on)


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject.toml's addopts): one worker more than the usable cores. Some tests wait rather
    than compute (a worker blocked on a template another builds, a writer waiting out a lock, Chromium drawing,
    a subprocess sleeping), and a third worker on two cores fills those waits: measured back to back on this
    project's 2-core machine (2026-11-28), 448 s against 475 s and 366 s against 410-440 s for the whole suite,
    at the same CPU time; four workers took 520 s (more CPU to contention than the waits they filled)."""
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1


@pytest.fixture(scope="session", autouse=True)
def _template_folders(tmp_path_factory):
    """Templates are built in a folder of the session (shared by pytest-xdist's workers: the parent of each
    worker's basetemp) and copied into this process's own folder."""
    base = tmp_path_factory.getbasetemp()
    stores.SHARED = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "templates"
    stores.OWN = base / "own-templates"
    stores.SHARED.mkdir(exist_ok=True)
    stores.OWN.mkdir(exist_ok=True)


_MODULE = [""]  # the module whose tests this process is running


def pytest_runtest_setup(item):
    """Before each module's first test here (the previous module's fixtures already torn down): collect, then
    ``gc.freeze()``. What is alive then (the test modules and pandas, plotly, Dash, DuckDB, pyarrow with them,
    session stores, caches) lives on, so the cyclic collector's full collections during the module's tests walk
    only what the module made, not all of that again and again. Measured over the whole suite on the 2-core
    machine (gc.callbacks in each xdist worker, the collections made here included): 34.0 s in the collector
    (28.7 s in full collections) with no freeze, 22.2 s (16.8 s) with one freeze after collection, 14.8 s
    (9.6 s) with one per module; the workers' peak RSS 736-964 MB against 741-975 MB."""
    module = item.nodeid.split("::", 1)[0]
    if module != _MODULE[0]:
        import gc

        _MODULE[0] = module
        gc.collect()
        gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Every test that drives Chromium (through the ``browser`` fixture of tests/dashboard/conftest.py) is
    marked ``browser``. The conformance matrix runs variant by variant (every check of one corpus variant, then
    the next), so the report, the pages and the diff of a variant share the analyses the process's result
    cache (analysis/cache.py, 48 entries) holds from its first use instead of recomputing them per check."""
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
    conformance = [i for i, item in enumerate(items) if item.nodeid.startswith("tests/test_conformance.py::")]
    if conformance:
        first, last = conformance[0], conformance[-1] + 1
        block = items[first:last]
        if len(block) == len(conformance):  # one contiguous module: regroup it, keep everything else in place
            variants: dict[str, int] = {}

            def key(pair):
                index, item = pair
                name = getattr(item, "callspec", None) and item.callspec.params.get("name")
                rank = variants.setdefault(name, len(variants)) if isinstance(name, str) else len(items)
                return rank, index

            items[first:last] = [item for _, item in sorted(enumerate(block), key=key)]
    # Longest modules first: pytest-xdist's worksteal gives each worker a contiguous half of this order and a
    # worker that runs dry steals from the end of the other's queue, so long modules at the front start early
    # and what is left to steal at the end is short tests (under loadscope, which hands out whole modules, a long
    # module collected last ran alone while the other worker idled). Order only; a module missing from the
    # list keeps its place after these.
    rank = {m: k for k, m in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


#: The modules that take longest (the sum of their tests' wall times, measured on this project's 2-core machine,
#: 2026-11-28), longest first, for pytest_collection_modifyitems. A stale list costs time, never correctness.
LONGEST_FIRST = [
    "tests/test_conformance.py",
    "tests/test_hostile.py",
    "tests/storage/test_ranks.py",
    "tests/storage/test_ingest_resources.py",
    "tests/collectors/test_sweep_cli.py",
    "tests/dashboard/test_browser_launch_bound.py",
    "tests/storage/test_logdir.py",
    "tests/collectors/test_profile.py",
    "tests/storage/test_engine.py",
    "tests/dashboard/test_browser_timeline.py",
    "tests/analysis/test_issue4_properties.py",
    "tests/test_cli.py",
    "tests/collectors/test_profile_options.py",
    "tests/storage/test_export.py",
    "tests/dashboard/test_url_params.py",
    "tests/test_sql.py",
    "tests/dashboard/test_browser_ranks.py",
    "tests/storage/test_store.py",
    "tests/test_summary.py",
    "tests/dashboard/test_browser_bw_power.py",
    "tests/storage/test_derivations.py",
    "tests/storage/test_lock.py",
]


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


def run_dirs() -> list[Path]:
    """Every collector run directory under sample_traces/ (a run.json beside a trace.json.gz), sorted."""
    return sorted(p.parent for p in SAMPLES.rglob("run.json") if (p.parent / "trace.json.gz").is_file())


@dataclass
class SessionStore:
    db: Path
    ids: dict[Path, str] = field(default_factory=dict)  # file -> trace id (ingested or skipped twin)
    failures: dict[Path, str] = field(default_factory=dict)  # file -> the CLI's one-line reason


_LINE = re.compile(r"^(ingested|skipped)\s+(\S+)\s+(.*?)\s+\(")


def _stored(stdout: str) -> dict[Path, str]:
    """``{path: trace id}`` of the 'ingested'/'skipped' lines of `kernelscope ingest` (a file, or a rank's
    folder)."""
    return {Path(m.group(3)): m.group(2) for m in map(_LINE.match, stdout.splitlines()) if m}


def _ingest_files(db: Path) -> tuple[dict, dict]:
    """Every trace file through `kernelscope ingest FILE`, into a copy of README's main job's store (the
    ``sample_runs`` template), except the files that job already stored (its lines name each trace's file or
    run directory): those map to the trace it stored, so each sample's tables are derived once per session."""
    from click.testing import CliRunner

    from kernelscope.cli import cli

    said, _runs = stores.copy("sample_traces", _ingest_samples, db)
    stored = _stored(said.stdout)
    ids, failures = {}, {}
    runner = CliRunner()
    for path in trace_files():
        tid = stored.get(path) or (stored.get(path.parent) if path.name.startswith("trace.json") else None)
        if tid is not None:
            ids[path] = tid
            continue
        res = runner.invoke(cli, ["ingest", str(path), "--db", str(db)])
        m = _LINE.match(res.stdout.strip()) if res.stdout.strip() else None
        if res.exit_code == 0 and m:
            ids[path] = m.group(2)
        else:
            failures[path] = (res.stderr or res.stdout or repr(res.exception)).strip()
    return ids, failures


@pytest.fixture(scope="session")
def session_store() -> SessionStore:
    db, (ids, failures) = stores.template("sample_files", _ingest_files)
    return SessionStore(db=db, ids=dict(ids), failures=dict(failures))


def session_store_copy(dst) -> SessionStore:
    """A copy of the ``session_store`` store at ``dst`` (for a module that writes to it)."""
    ids, failures = stores.copy("sample_files", _ingest_files, dst)
    return SessionStore(db=Path(dst), ids=dict(ids), failures=dict(failures))


@dataclass(frozen=True)
class Said:
    """What a CLI command said: click's Result without its traceback objects (it must pickle)."""
    exit_code: int
    stdout: str
    stderr: str


@dataclass
class SampleRuns:
    db: Path
    ids: dict[str, str]  # run directory relative to sample_traces/ (posix), in path order -> trace id
    ingest: Said  # what `kernelscope ingest sample_traces/` said


def _ingest_samples(db: Path) -> tuple[Said, dict[str, str]]:
    """README's main job, `kernelscope ingest sample_traces/`, into a new store."""
    from click.testing import CliRunner

    from kernelscope.cli import cli

    res = CliRunner().invoke(cli, ["ingest", str(SAMPLES), "--db", str(db)])
    said = Said(res.exit_code, res.stdout, res.stderr)
    stored = _stored(res.stdout)
    ids = {}
    for run in run_dirs():  # a run dir's line names the folder (a rank of a run) or its trace.json.gz
        tid = stored.get(run) or stored.get(run / "trace.json.gz")
        if tid is not None:
            ids[run.relative_to(SAMPLES).as_posix()] = tid
    return said, ids


@pytest.fixture(scope="session")
def sample_runs() -> SampleRuns:
    """README's main job (`kernelscope ingest sample_traces/`) once per session: every collector run directory
    as a run (name, labels, telemetry, un-profiled timings; ddp2's two ranks as one run), the loose trace
    files, the Nsight exports and Compute CSVs. This process's copy: open it read-only."""
    db, (said, ids) = stores.template("sample_traces", _ingest_samples)
    return SampleRuns(db=db, ids=dict(ids), ingest=said)


def _ingest_cli(path: Path) -> Callable[[Path], None]:
    def build(db: Path) -> None:
        from click.testing import CliRunner

        from kernelscope.cli import cli

        res = CliRunner().invoke(cli, ["ingest", str(path), "--db", str(db)])
        assert res.exit_code == 0, res.output
    return build


def compiled_copy(dst) -> Path:
    """A store holding sample_traces/compiled alone, ingested through the CLI, copied to ``dst``."""
    stores.copy("compiled", _ingest_cli(SAMPLES / "compiled"), dst)
    return Path(dst)


def _ingest_ddp2(db: Path) -> None:
    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.store import open_store

    with open_store(db) as store:
        for res in ingest_paths(store, [SAMPLES / "ddp2"], progress=False):
            assert res.status == "ingested", res.message


def _ingest_ddp2_ranks_alone(db: Path) -> None:
    from kernelscope.storage.ingest import ingest_run
    from kernelscope.storage.store import open_store

    with open_store(db) as store:
        for r in (0, 1):
            res = ingest_run(store, SAMPLES / "ddp2" / f"ddp_rank{r}")
            assert res.status == "ingested", res.message


def ddp2_ranks_alone_copy(dst) -> Path:
    """A store holding ddp2's two rank run dirs, each ingested on its own (ingest_run, rank 0 then 1), at ``dst``."""
    stores.copy("ddp2_ranks_alone", _ingest_ddp2_ranks_alone, dst)
    return Path(dst)


def ddp2_copy(dst) -> Path:
    """A store holding sample_traces/ddp2 as one run of two ranks (ingest_paths of the folder), at ``dst``."""
    stores.copy("ddp2", _ingest_ddp2, dst)
    return Path(dst)


def kineto_event(cat, name, ts, dur, pid=11, tid=11, **args) -> dict:
    """One Kineto 'X' event (ts/dur in us, as torch.profiler writes them)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_kineto(path: Path, events: list[dict], base_ns: int = 1_700_000_000_000_000_000) -> Path:
    """A minimal Kineto file of ``events`` relative to ``baseTimeNanoseconds = base_ns``."""
    import json

    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": base_ns, "traceEvents": events}))
    return path
