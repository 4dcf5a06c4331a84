"""The CLI: output formats, trace references, labels, rm, read-only sql, analyze, and exit codes for user
mistakes (one `kernelscope: ...` line on stderr, never a traceback). In-process through click's
CliRunner, and as a process where the exit code and stderr of the process matter: forked from a warm one
(tests/warm_cli.py), a new Python process for one check of each command family."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import subprocess
import sys

import pytest
import stores
import warm_cli
from click.testing import CliRunner

from kernelscope import __version__
from kernelscope.cli import cli
from kernelscope.errors import TraceNotFound, UsageError

BASE_NS = 1_700_000_000_000_000_000


def tiny_trace(variant: str = "a") -> dict:
    """Two operators, each launching one kernel on stream 7 of device 0 (times in us, 3 decimals).

    aten::mm   [10.000, 30.000]  cudaLaunchKernel [12.000, 15.000] corr 1 -> kernel [16.500, 20.750]
    aten::add  [40.000, 50.000]  cudaLaunchKernel [41.000, 43.000] corr 2 -> kernel [44.000, 45.234]
    """

    def x(cat, name, ts, dur, pid=11, tid=11, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    return {
        "schemaVersion": 1,
        "traceName": f"tiny-{variant}",
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            x("cpu_op", "aten::mm", 10.000, 20.000, **{"External id": 1}),
            x("cuda_runtime", "cudaLaunchKernel", 12.000, 3.000, correlation=1, **{"External id": 1}),
            x("kernel", "gemm_kernel", 16.500, 4.250, pid=0, tid=7, device=0, stream=7, correlation=1,
              **{"External id": 1}),
            x("cpu_op", "aten::add", 40.000, 10.000, **{"External id": 2}),
            x("cuda_runtime", "cudaLaunchKernel", 41.000, 2.000, correlation=2, **{"External id": 2}),
            x("kernel", "add_kernel", 44.000, 1.234, pid=0, tid=7, device=0, stream=7, correlation=2,
              **{"External id": 2}),
        ],
    }


def write_trace(path, doc) -> str:
    text = json.dumps(doc)
    if str(path).endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return str(path)


def invoke(*args, db=None):
    argv = [str(a) for a in args] + (["--db", str(db)] if db is not None else [])
    return CliRunner().invoke(cli, argv)


def run_cli(*args, db=None, env=None, real=False):
    """`python -m kernelscope.cli ARGS`: its exit code, stdout and stderr as a user sees them. In a child forked
    from a warm process (tests/warm_cli.py) unless ``real``: a new Python process, kept for one check of each
    command family here (test_python_dash_m_kernelscope_is_the_cli holds more)."""
    args = [*map(str, args), *(["--db", str(db)] if db is not None else [])]
    if not real:
        return warm_cli.run(args, env=env, timeout=120)
    return subprocess.run([sys.executable, "-m", "kernelscope.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, check=False)


def assert_one_line_error(proc, code=None):
    assert proc.returncode != 0
    if code is not None:
        assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("kernelscope: ")
    assert "Traceback" not in proc.stderr


def _ingest_tiny(db) -> str:
    path = write_trace(db.parent / "tiny.json", tiny_trace())
    res = invoke("ingest", path, "--label", "batch=8", "--label", "model=mlp", db=db)
    assert res.exit_code == 0, res.output + res.stderr
    fields = res.stdout.split()
    assert fields[0] == "ingested"
    return fields[1]


@pytest.fixture()
def store(tmp_path):
    """A fresh store holding the tiny trace (labelled batch=8), a copy of one ingested once per session
    (tests/stores.py), and the trace file beside it; returns (db, trace_id, trace_path)."""
    db = tmp_path / "ks.duckdb"
    trace_id = stores.copy("cli_tiny", _ingest_tiny, db)
    return db, trace_id, write_trace(tmp_path / "tiny.json", tiny_trace())


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"kernelscope {__version__}"


def test_python_dash_m_kernelscope_is_the_cli(store):
    """`python -m kernelscope` is the console script: same version line, same output, same exit codes."""
    db, _trace_id, _path = store
    proc = subprocess.run([sys.executable, "-m", "kernelscope", "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == f"kernelscope {__version__}"
    proc = subprocess.run([sys.executable, "-m", "kernelscope", "traces", "--json", "--db", str(db)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == invoke("traces", "--json", db=db).stdout
    proc = subprocess.run([sys.executable, "-m", "kernelscope", "summary", "nope", "--db", str(db)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == TraceNotFound.exit_code
    assert proc.stderr.startswith("kernelscope: ") and proc.stderr.count("\n") == 1


def test_one_version_string():
    """The package's metadata version is read from `kernelscope.__version__` (pyproject: dynamic), not a
    second literal."""
    import importlib.metadata
    import re

    from conftest import ROOT

    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project = text[text.index("[project]\n"):].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, re.MULTILINE)
    assert re.search(r'^dynamic = \["version"\]', project, re.MULTILINE)
    assert 'version = { attr = "kernelscope.__version__" }' in text.split("[tool.setuptools.dynamic]\n", 1)[1]
    assert importlib.metadata.version("kernelscope") == __version__


def test_ingest_again_is_skipped_with_the_same_id(store, tmp_path):
    db, trace_id, path = store
    res = invoke("ingest", path, db=db)
    assert res.exit_code == 0
    assert res.stdout.split()[:2] == ["skipped", trace_id]
    # the .json.gz twin of the same content is the same trace
    gz = write_trace(tmp_path / "tiny_twin.json.gz", tiny_trace())
    res = invoke("ingest", gz, db=db)
    assert res.stdout.split()[:2] == ["skipped", trace_id]


def test_summary_numbers_of_the_tiny_trace(store):
    db, trace_id, _ = store
    res = invoke("summary", trace_id, "--json", db=db)
    assert res.exit_code == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["trace_id"] == trace_id
    assert (s["kernels"], s["launches"], s["cpu_ops"], s["memcpys"]) == (2, 2, 2, 0)
    assert s["kernel_time_ns"] == 4250 + 1234
    assert s["busy_ns"] == 5484
    assert s["gpu_span_ns"] == 45234 - 16500
    assert s["idle_ns"] == 28734 - 5484
    assert s["latency_ns"] == 45234 - 10000
    assert s["exposed_host_ns"] == 35234 - 5484
    assert [(k["name"], k["count"], k["total_ns"]) for k in s["top_kernels"]] == [
        ("gemm_kernel", 1, 4250), ("add_kernel", 1, 1234)]
    assert s["top_kernels"][0]["share"] == pytest.approx(4250 / 5484)
    assert [(o["name"], o["kernel_time_ns"]) for o in s["top_operators"]] == [("aten::mm", 4250),
                                                                              ("aten::add", 1234)]
    assert s["trust"]["kernels_with_launch"] == {"count": 2, "pct": 100.0}
    assert s["trust"]["nongraph_kernels_with_leaf_op"]["pct"] == 100.0
    assert s["trust"]["negative_launch_times"] == 0
    assert s["trust"]["same_stream_overlaps"] == 0
    assert s["labels"] == {"batch": 8, "model": "mlp"}


def test_trace_reference_by_prefix_and_by_file_name(store):
    db, trace_id, _path = store
    by_prefix = invoke("summary", trace_id[:6], "--json", db=db)
    by_name = invoke("summary", "tiny.json", "--json", db=db)
    assert by_prefix.exit_code == 0 and by_name.exit_code == 0, by_prefix.stderr + by_name.stderr
    assert json.loads(by_prefix.stdout)["trace_id"] == trace_id
    assert json.loads(by_name.stdout)["trace_id"] == trace_id


def test_traces_json_and_csv(store):
    db, trace_id, _path = store
    rows = json.loads(invoke("traces", "--json", db=db).stdout)
    assert len(rows) == 1
    assert rows[0]["id"] == trace_id
    assert rows[0]["source"].endswith("tiny.json")
    assert rows[0]["labels"] == {"batch": 8, "model": "mlp"}
    # --format json is the same as --json
    assert json.loads(invoke("traces", "--format", "json", db=db).stdout) == rows
    table = list(csv.DictReader(io.StringIO(invoke("traces", "--format", "csv", db=db).stdout)))
    assert [r["id"] for r in table] == [trace_id]
    text = invoke("traces", db=db).stdout
    assert trace_id in text and "batch=8" in text
    # the table names device indices as such: "0" under "devices" read as a count of none on a GPU trace
    header, _, row = text.splitlines()[:3]
    assert header.split()[6] == "device_ids" and row.split()[row.split().index("model=mlp") + 1:][:2] == ["0", "2"]


def test_summary_csv_table_and_scalars(store):
    db, trace_id, _ = store
    res = invoke("summary", trace_id, "--format", "csv", "--table", "top_kernels", db=db)
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [(r["name"], int(r["total_ns"])) for r in rows] == [("gemm_kernel", 4250), ("add_kernel", 1234)]
    scalars = dict(csv.reader(io.StringIO(invoke("summary", trace_id, "--format", "csv", db=db).stdout)))
    assert scalars["busy_ns"] == "5484"
    assert scalars["trust.kernels_with_launch.count"] == "2"
    bad = run_cli("summary", trace_id, "--table", "nope", db=db, real=True)
    assert_one_line_error(bad)
    assert "top_kernels" in bad.stderr


def test_label_then_relabel(store):
    db, trace_id, _ = store
    res = invoke("label", trace_id, "batch=16", "phase=prefill", db=db)
    assert res.exit_code == 0, res.stderr
    rows = json.loads(invoke("traces", "--json", db=db).stdout)
    assert rows[0]["labels"] == {"batch": 16, "model": "mlp", "phase": "prefill"}


def test_rm_removes_every_row(store):
    db, trace_id, _ = store
    assert invoke("rm", trace_id, db=db).exit_code == 0
    assert json.loads(invoke("traces", "--json", db=db).stdout) == []
    n = json.loads(invoke("sql", "SELECT (SELECT count(*) FROM gpu_activities) + (SELECT count(*) FROM "
                                 "cpu_ops) + (SELECT count(*) FROM labels) AS n", "--json", db=db).stdout)
    assert n == [{"n": 0}]
    assert_one_line_error(run_cli("summary", trace_id, db=db), TraceNotFound.exit_code)


def test_a_store_of_one_trace_needs_no_trace_argument(store, tmp_path):
    """summary, analyze and report without TRACE take the store's one trace; with none or several they say in one
    line what to give (click said 'Missing argument' before)."""
    db, trace_id, path = store
    res = invoke("summary", "--json", db=db)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trace_id"] == trace_id and json.loads(res.stdout)["kernels"] == 2
    res = invoke("analyze", "launch", "--json", db=db)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["trace_id"] == trace_id and json.loads(res.stdout)["kernels"] == 2
    res = invoke("report", "--format", "md", db=db)
    assert res.exit_code == 0 and trace_id in res.stdout
    assert invoke("ingest", write_trace(tmp_path / "other.json", tiny_trace("b")), db=db).exit_code == 0
    proc = run_cli("summary", db=db)
    assert_one_line_error(proc, UsageError.exit_code)
    assert "holds 2 traces" in proc.stderr and trace_id in proc.stderr
    proc = run_cli("analyze", "launch", db=stores.empty(tmp_path / "empty.duckdb"))
    assert_one_line_error(proc, UsageError.exit_code)
    assert "holds no trace" in proc.stderr


def test_bad_trace_reference(store):
    db, _, _ = store
    proc = run_cli("summary", "doesnotexist", db=db)
    assert_one_line_error(proc, TraceNotFound.exit_code)
    assert "doesnotexist" in proc.stderr


def test_a_trace_ingested_through_a_symlink_is_found_by_the_name_ingest_printed(tmp_path):
    """`ingest latest.json` (a symlink) printed latest.json but stored the target's path, so `summary latest.json`
    found nothing (HTA's trace behind a link, a newcomer's first try). The link's name and the target's full path
    both find it now."""
    target = write_trace(tmp_path / "run_2026_11_28.pt.trace.json", tiny_trace("linked"))
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    db = tmp_path / "ks.duckdb"
    res = invoke("ingest", str(link), db=db)
    assert res.exit_code == 0 and "latest.json" in res.stdout, res.stderr
    tid = res.stdout.split()[1]
    for ref in ("latest.json", str(link), str(target)):
        got = invoke("summary", ref, "--json", db=db)
        assert got.exit_code == 0 and json.loads(got.stdout)["trace_id"] == tid, (ref, got.stderr)


def test_ambiguous_prefix(tmp_path):
    """Two traces whose ids share their first hex digit: that digit alone is ambiguous."""
    db = tmp_path / "ks.duckdb"
    seen: dict[str, str] = {}
    pair = None
    for i in range(100):
        doc = tiny_trace(f"v{i}")
        digit = hashlib.sha256(json.dumps(doc).encode()).hexdigest()[0]
        path = write_trace(tmp_path / f"v{i}.json", doc)
        if digit in seen:
            pair = (seen[digit], path)
            break
        seen[digit] = path
    res = invoke("ingest", *pair, db=db)
    assert res.exit_code == 0, res.stderr
    ids = [line.split()[1] for line in res.stdout.splitlines()]
    common = ids[0][0]
    if ids[1][0] != common:  # the store hashes something other than the file bytes: find the shared prefix
        pytest.skip(f"ids {ids} share no first digit")
    proc = run_cli("summary", common, db=db)
    assert_one_line_error(proc)
    assert "ambiguous" in proc.stderr.lower() or all(i in proc.stderr for i in ids), proc.stderr
    # a longer unique prefix resolves
    assert invoke("summary", ids[0][:12], "--json", db=db).exit_code == 0


@pytest.mark.parametrize("bad", ["batch", "=8", "batch=", ""])
def test_bad_label(store, bad):
    db, trace_id, path = store
    assert_one_line_error(run_cli("label", trace_id, bad, db=db, real=bad == "batch"))
    assert_one_line_error(run_cli("ingest", path, "--label", bad, db=db))
    # nothing changed
    rows = json.loads(invoke("traces", "--json", db=db).stdout)
    assert rows[0]["labels"] == {"batch": 8, "model": "mlp"}


@pytest.mark.parametrize("statement", [
    "DELETE FROM traces",
    "DROP TABLE cpu_ops",
    "INSERT INTO labels VALUES ('x', 'k', 'v', NULL)",
    "CREATE TABLE t AS SELECT 1",
    "COPY traces TO '/tmp/kernelscope_leak.csv'",
    "SET threads = 1",
])
def test_sql_refuses_writes_and_outside_access(store, statement):
    db, trace_id, _ = store
    assert_one_line_error(run_cli("sql", statement, db=db, real=statement.startswith("COPY")))
    rows = json.loads(invoke("sql", "SELECT trace_id FROM traces", "--json", db=db).stdout)
    assert rows == [{"trace_id": trace_id}]
    assert json.loads(invoke("sql", "SELECT count(*) AS n FROM labels", "--json", db=db).stdout) == [{"n": 2}]


def test_sql_select_formats(store):
    db, _, _ = store
    q = "SELECT name, dur_ns FROM gpu_activities ORDER BY start_ns"
    assert json.loads(invoke("sql", q, "--json", db=db).stdout) == [
        {"name": "gemm_kernel", "dur_ns": 4250}, {"name": "add_kernel", "dur_ns": 1234}]
    rows = list(csv.DictReader(io.StringIO(invoke("sql", q, "--format", "csv", db=db).stdout)))
    assert [(r["name"], r["dur_ns"]) for r in rows] == [("gemm_kernel", "4250"), ("add_kernel", "1234")]


def test_analyze_list_and_run(store):
    db, trace_id, _ = store
    listing = json.loads(invoke("analyze", "--list", "--json").stdout)
    assert {"name": "summary", "description": listing[0]["description"]} in listing
    assert all(row["description"] for row in listing)
    via_analyze = json.loads(invoke("analyze", "summary", trace_id, "--json", db=db).stdout)
    via_summary = json.loads(invoke("summary", trace_id, "--json", db=db).stdout)
    assert via_analyze == via_summary
    proc = run_cli("analyze", "nosuchanalysis", trace_id, db=db, real=True)
    assert_one_line_error(proc)
    assert "summary" in proc.stderr  # says which analyses exist


def test_ingest_failure_is_one_line_and_others_land(tmp_path):
    db = tmp_path / "ks.duckdb"
    good = write_trace(tmp_path / "good.json", tiny_trace())
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1')  # truncated
    proc = run_cli("ingest", str(bad), good, db=db, real=True)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"kernelscope: {bad}: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.split()[0] == "ingested"
    rows = json.loads(invoke("traces", "--json", db=db).stdout)
    assert [r["source"].endswith("good.json") for r in rows] == [True]


def test_missing_store_is_one_line(tmp_path):
    db = tmp_path / "nothing.duckdb"
    for args in (["traces"], ["summary", "abc"], ["sql", "SELECT 1"]):
        assert_one_line_error(run_cli(*args, db=db))
    assert not db.exists()


def test_db_from_environment(store, tmp_path):
    import os

    db, trace_id, _ = store
    proc = run_cli("traces", "--json", env={**os.environ, "KERNELSCOPE_DB": str(db)})
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in json.loads(proc.stdout)] == [trace_id]


def test_profile_needs_a_command():
    proc = run_cli("profile", "--")
    assert proc.returncode == 2  # click's usage error: the usage line and what is missing
    assert "Missing argument" in proc.stderr and "Traceback" not in proc.stderr


def test_sql_json_handles_duckdb_types(store):
    """Lists, NULLs, NaN, decimals, huge sums and timestamps all become plain JSON values."""
    db, _, _ = store
    q = ("SELECT sum(dur_ns) AS total, [1, 2] AS l, NULL::INTEGER AS n, 'nan'::DOUBLE AS f, "
         "1.5::DECIMAL(10, 2) AS d, max(start_ns) AS last_start, TIMESTAMP '2024-01-02 03:04:05' AS ts "
         "FROM gpu_activities")
    res = invoke("sql", q, "--json", db=db)
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout) == [{"total": 5484, "l": [1, 2], "n": None, "f": None, "d": 1.5,
                                       "last_start": BASE_NS + 44000, "ts": "2024-01-02T03:04:05"}]


def test_profile_runs_an_unmodified_script_and_ingests_it(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "work.py"
    script.write_text("import sys, torch\nx = torch.ones(8, 8)\n(x @ x).sum()\nsys.exit(3)\n")
    db = tmp_path / "ks.duckdb"
    proc = run_cli("profile", "--name", "work", "--label", "batch=2", "--run-dir", tmp_path / "run",
                   "--db", db, "--", "python", script, real=True)
    assert proc.returncode == 3, proc.stderr  # the script's own exit code
    rows = json.loads(invoke("traces", "--json", db=db).stdout)
    assert [(r["name"], r["labels"]["batch"]) for r in rows] == [("work", 2)]
    ops = json.loads(invoke("sql", "SELECT count(*) AS n FROM cpu_ops WHERE name = 'aten::matmul'", "--json",
                            db=db).stdout)
    assert ops[0]["n"] >= 1


def test_profile_without_torch_is_one_line(tmp_path):
    script = tmp_path / "work.py"
    script.write_text("print('hi')\n")
    code = "import sys; sys.modules['torch'] = None; from kernelscope.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", code, "profile", "--db", str(tmp_path / "ks.duckdb"),
                           "--", "python", str(script)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert_one_line_error(proc)
    assert "PyTorch" in proc.stderr


def test_ingest_a_folder_of_collector_runs(tmp_path):
    """A run directory (run.json + trace.json.gz + telemetry) is one trace with the run's name and labels;
    the run.json is not mistaken for a trace."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "sample_traces"
    if not (root / "train_step" / "run.json").exists():
        pytest.fail("sample_traces/train_step is not in this checkout")
    runs = tmp_path / "runs"
    shutil.copytree(root / "train_step", runs / "train_step")
    write_trace(tmp_path / "runs" / "loose.json", tiny_trace())
    db = tmp_path / "ks.duckdb"
    proc = run_cli("ingest", runs, db=db)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == ["ingested", "ingested"]
    rows = {r["name"]: r for r in json.loads(invoke("traces", "--json", db=db).stdout)}
    assert set(rows) == {"train_step", "loose"}
    run_meta = json.loads((root / "train_step" / "run.json").read_text())
    for key, value in (run_meta.get("labels") or {}).items():
        assert rows["train_step"]["labels"][key] == value


def test_a_long_table_is_cut_in_the_text_form_and_whole_with_table(capsys):
    """The text form of a whole result shows each table's first rows and says how many more there are and how
    to get them; ``--table NAME`` (and the csv/json forms) show every row."""
    import pandas as pd

    from kernelscope.analysis.result import Result
    from kernelscope.cli.render import TEXT_TABLE_ROWS, emit_result

    n = TEXT_TABLE_ROWS + 7
    res = Result("demo", "a demo", scalars={"x": 1}, tables={"rows": pd.DataFrame({"i": range(n)}),
                                                   "few": pd.DataFrame({"j": [1, 2]})})
    emit_result(res, "table", None)
    out = capsys.readouterr().out
    assert f"... 7 more rows of {n}: --table rows prints them all" in out
    assert f"\n{TEXT_TABLE_ROWS - 1}\n" in out.replace(" ", "") and f"\n{TEXT_TABLE_ROWS}\n" not in out.replace(" ", "")
    assert out.count("more rows") == 1  # the short table is whole
    emit_result(res, "table", "rows")
    assert f"\n{n - 1}\n" in capsys.readouterr().out.replace(" ", "")
    emit_result(res, "csv", "rows")
    assert len(capsys.readouterr().out.strip().splitlines()) == n + 1


def test_a_findings_message_is_printed_whole_under_its_row():
    """`analyze recommend`'s text form cut every finding's message at 70 characters ("GPU-bound: the mean queue
    depth is 698.31 (launch), but the top cat..."), the one thing a user reads there. A prose column now follows
    its row whole, wrapped to the width, under the other cells (which are still cut at 70)."""
    import textwrap

    import pandas as pd

    from kernelscope.cli.render import text_table

    msg = ("For 64% of the GPU span (55.29 ms; bound) only collective kernels run: communication that no compute "
           "overlaps. Overlap it with compute (DDP's bucket_cap_mb, FSDP's prefetching) or communicate less often.")
    df = pd.DataFrame({"rule": ["exposed_communication", "gpu_bound"], "message": [msg, None],
                       "evidence": ["x" * 90, "[]"]})
    lines = text_table(df, width=64).splitlines()
    assert lines[0].split() == ["rule", "evidence"] and lines[1] == "    message"
    assert lines[3].startswith("exposed_communication  " + "x" * 67 + "...")
    body = lines[4:lines.index(next(ln for ln in lines if ln.startswith("gpu_bound")))]
    assert body == ["    " + ln for ln in textwrap.wrap(msg, 60, break_on_hyphens=False)] and len(body) == 4
    assert lines[-1].startswith("gpu_bound") and all(len(ln) <= 64 for ln in body)  # no text for a null message


def test_long_names_that_share_their_start_stay_distinct_in_a_text_table():
    """TraceLens' torch.compile trace (MI300) has three hipBLASLt kernels whose names share their first ~150
    characters: `summary` showed three identical rows 'Cijk_Alik_Bljk_BBS_BH_..._MI16x16x1...'. Names cut to
    the same text are shown by their head and the stretch where each first differs from its nearest other."""
    from kernelscope.cli.render import _distinct_cells

    stem = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC1_" + "X" * 40
    names = [stem + "_LBSPPA1024_TLDS1_ULSGRO1_USL1_" + "Y" * 30, stem + "_LBSPPA512_TLDS1_ULSGRO0_USL1_" + "Y" * 30,
             stem + "_LBSPPA1024_TLDS1_ULSGRO0_USL1_" + "Y" * 30]
    other = "triton_" + "z" * 80
    cells = _distinct_cells([*names, names[0], other, 7, None])
    assert len(set(cells[:3])) == 3 and cells[3] == cells[0]  # one name, one text
    assert all(len(c) <= 70 and c.startswith(stem[:20] + "...") for c in cells[:3])
    assert "ULSGRO1" in cells[0] and "LBSPPA512" in cells[1] and "ULSGRO0" in cells[2]
    assert cells[4] == other[:67] + "..." and cells[5:] == ["7", "-"]  # no collision: cut at the end as before


def test_a_written_report_is_readable_as_any_new_file(store):
    """A report written with -o came out mode 0600 (tempfile.mkstemp's, kept by the rename): a teammate on the
    same machine, or a web server publishing it, could not read it. It now gets what the umask gives a new file."""
    import os

    db, tid, _ = store
    out = db.parent / "r.md"
    old = os.umask(0o022)
    try:
        res = invoke("report", tid, "--format", "md", "-o", out, db=db)
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.stderr
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)
