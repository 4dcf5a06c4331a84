"""`kernelscope sql` (issue 11): a memory bound that holds against hostile queries, a time limit that is a
finite positive number, one statement per call, every value printed in full (lists too), and the query
from a file or standard input. Processes where the exit code, stderr or peak memory matter: new Python processes
for peak memory and the time limit, the others forked from a warm process (tests/warm_cli.py)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time

import pytest
import warm_cli
from click.testing import CliRunner

from kernelscope.cli import cli
from kernelscope.storage.store import open_store

BOUND_MB = 256  # KERNELSCOPE_SQL_MEMORY_LIMIT for the memory tests: small, so the machine is not strained


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("sql") / "s.duckdb"
    open_store(path).close()
    return path


def run_sql(*args, db, stdin=None, env=None, real=False):
    """`kernelscope sql ARGS --db DB` as a process: (exit code, stdout, stderr, seconds). Forked from a warm
    process (tests/warm_cli.py) unless ``real``: a new Python process (the time limit's test; the memory
    tests measure new processes through ``measure``)."""
    args = ["sql", *map(str, args), "--db", str(db)]
    env = {**os.environ, **(env or {})}
    t0 = time.monotonic()
    if real:
        proc = subprocess.run([sys.executable, "-m", "kernelscope.cli", *args], check=False,
                              input=stdin if stdin is not None else "", capture_output=True, text=True, env=env,
                              timeout=300)
    else:
        proc = warm_cli.run(args, input=stdin if stdin is not None else "", env=env, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0


def measure(query: str, db, *extra: str, bound_mb: int = BOUND_MB):
    """Run one query in a fresh helper process (so RUSAGE_CHILDREN is that query's process alone) and
    return (exit code, stdout size, stderr, peak RSS MB, seconds)."""
    helper = (
        "import json, os, resource, subprocess, sys, time\n"
        "t0 = time.monotonic()\n"
        "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
        "n = 0\n"
        "while chunk := p.stdout.read(1 << 20):\n"
        "    n += len(chunk)\n"
        "err = p.stderr.read().decode()\n"
        "p.wait()\n"
        "print(json.dumps({'rc': p.returncode, 'out': n, 'err': err,\n"
        "  'rss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,\n"
        "  's': time.monotonic() - t0}))\n"
    )
    argv = [sys.executable, "-c", helper, sys.executable, "-m", "kernelscope.cli", "sql", query,
            "--db", str(db), *extra]
    env = {**os.environ, "KERNELSCOPE_SQL_MEMORY_LIMIT": f"{bound_mb}MB"}
    res = json.loads(subprocess.run(argv, check=False, capture_output=True, text=True, env=env,
                                    timeout=300).stdout)
    return res["rc"], res["out"], res["err"], res["rss_mb"], res["s"]


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelscope: "), err
    return lines[0]


HOSTILE = {
    # DuckDB's memory_limit: a list aggregate of 300M numbers (reached 5.7 GB before the fix)
    "list_aggregate": ("SELECT list(i) AS l FROM range(300000000) t(i)", "json"),
    # a huge string aggregate
    "string_agg": ("SELECT string_agg(repeat('y', 1000), ',') FROM range(10000000)", "csv"),
    # strings built by a function live outside DuckDB's memory_limit: only the process bound stops them
    "big_strings": ("SELECT repeat('x', 10000000) AS s FROM range(1000)", "csv"),
    "one_gib_string": ("SELECT repeat('x', 1000000000) AS s FROM range(3)", "table"),
    # a sort that cannot spill (no temp directory) and would need ~8 GB
    "sort_without_spilling": ("SELECT a.range * b.range AS x FROM range(40000) a, range(40000) b ORDER BY x",
                              "csv"),
    # a result small for DuckDB but large to print: 20M numbers in one JSON list
    "printing_a_list": ("SELECT list(i) AS l FROM range(20000000) t(i)", "json"),
}


@pytest.fixture(scope="module")
def baseline_mb(db):
    rc, _, err, rss, _ = measure("SELECT 42 AS x", db, "--format", "json")
    assert rc == 0, err
    return rss


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_query_stays_under_the_memory_bound(db, baseline_mb, name):
    query, fmt = HOSTILE[name]
    rc, _, err, rss, seconds = measure(query, db, "--format", fmt, "--timeout", "20")
    assert rc == 1, err
    line = one_line_error(err)
    assert "memory kernelscope sql allows" in line and "KERNELSCOPE_SQL_MEMORY_LIMIT" in line, line
    # the process grew at most the bound over what a one-row query needs (Python, DuckDB, pyarrow, pandas)
    print(f"\n{name}: peak RSS {rss:.0f} MB (one-row query {baseline_mb:.0f} MB), {seconds:.1f} s")
    assert rss <= baseline_mb + BOUND_MB + 24, (name, rss, baseline_mb)
    assert seconds < 60


def test_a_streaming_cross_join_prints_in_bounded_memory_until_the_time_limit(db, baseline_mb):
    """10^10 rows (reached 8.2 GB before the fix: every batch was kept until the end): rows stream out,
    memory stays flat, the time limit ends it with one line."""
    q = "SELECT a.range AS x, b.range AS y, repeat('x', 100) AS s FROM range(100000) a, range(100000) b"
    rc, out_bytes, err, rss, seconds = measure(q, db, "--format", "csv", "--timeout", "4")
    assert rc == 1 and "4 s time limit" in one_line_error(err)
    assert out_bytes > 10_000_000  # it was printing all along
    assert rss <= baseline_mb + 64, rss
    assert seconds < 30


def test_the_memory_bound_is_an_environment_setting(db):
    rc, _, err, _, _ = measure("SELECT 1", db, bound_mb=1)
    assert rc == 6 and "below the 64MB" in one_line_error(err)
    rc, out, err, _ = run_sql("SELECT current_setting('memory_limit') AS m, "
                                 "current_setting('max_temp_directory_size') AS t", "--json", db=db,
                                 env={"KERNELSCOPE_SQL_MEMORY_LIMIT": "400MB"})
    assert rc == 0, err
    row = json.loads(out)[0]
    assert row["m"] in ("286.1 MiB", "286 MiB", "286.0 MiB"), row  # three quarters of 400MB, in MiB
    assert row["t"] in ("0 bytes", "0B", "0 B"), row  # no spilling
    rc, _, err, _ = run_sql("SELECT 1", db=db, env={"KERNELSCOPE_SQL_MEMORY_LIMIT": "lots"})
    assert rc == 6 and "is not a memory size" in one_line_error(err)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", "1e309", "86401", "soon", ""])
def test_timeout_must_be_a_finite_positive_number(db, value):
    rc, out, err, _ = run_sql("SELECT 1", "--timeout", value, db=db)
    assert rc == 2 and out == ""
    assert "Invalid value for '--timeout'" in err and "above 0" in err and "Traceback" not in err, err


@pytest.mark.parametrize("value", ["2.5", "30", "86400"])
def test_timeout_accepts_seconds(db, value):
    res = CliRunner().invoke(cli, ["sql", "SELECT 7 AS x", "--timeout", value, "--json", "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"x": 7}]


def test_the_time_limit_stops_a_slow_query(db):
    t0 = time.monotonic()
    rc, _, err, _ = run_sql("SELECT count(*) FROM range(100000000000) a, range(1000) b", "--timeout", "0.5",
                            db=db, real=True)
    assert rc == 1 and "0.5 s time limit" in one_line_error(err)
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("query, n", [
    ("SELECT 1; SELECT 2", 2),
    ("SELECT 1 AS a; SELECT count(*) FROM range(100000000000) a, range(1000) b", 2),
    ("SELECT 1;;SELECT 2;SELECT 3", 3),
])
def test_more_than_one_statement_is_refused_before_any_runs(db, query, n):
    t0 = time.monotonic()
    rc, out, err, _ = run_sql(query, "--timeout", "20", db=db)
    assert rc == 6 and out == ""
    assert f"holds {n} statements" in one_line_error(err)
    assert time.monotonic() - t0 < 15  # the slow second statement never ran


@pytest.mark.parametrize("query", ["", "   ", "/* only a comment */", ";"])
def test_an_empty_query_is_refused(db, query):
    rc, _, err, _ = run_sql(query, db=db)
    assert rc == 6 and "the query is empty" in one_line_error(err)


def test_one_statement_with_a_trailing_semicolon_runs(db):
    res = CliRunner().invoke(cli, ["sql", "SELECT 3 AS x;", "--json", "--db", str(db)])
    assert res.exit_code == 0 and json.loads(res.stdout) == [{"x": 3}]


LISTS = ("SELECT range(2000) AS l, [[1, 2], [3]] AS nested, {'a': [1, 2], 'b': 'x'} AS st, "
         "'k' AS name, [NULL, 1.5] AS with_null")


def test_csv_prints_whole_lists_as_json_text(db):
    """Before: `[0 1 2 ... 1999]` (numpy's summary of a long array)."""
    res = CliRunner().invoke(cli, ["sql", LISTS, "--format", "csv", "--db", str(db)])
    assert res.exit_code == 0, res.output
    (row,) = list(csv.DictReader(io.StringIO(res.stdout)))
    assert json.loads(row["l"]) == list(range(2000))
    assert json.loads(row["nested"]) == [[1, 2], [3]]
    assert json.loads(row["st"]) == {"a": [1, 2], "b": "x"}
    assert json.loads(row["with_null"]) == [None, 1.5]
    assert row["name"] == "k"


def test_json_and_table_print_whole_lists(db):
    res = CliRunner().invoke(cli, ["sql", LISTS, "--json", "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"l": list(range(2000)), "nested": [[1, 2], [3]],
                                       "st": {"a": [1, 2], "b": "x"}, "name": "k", "with_null": [None, 1.5]}]
    res = CliRunner().invoke(cli, ["sql", LISTS, "--db", str(db)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["l", "nested", "st", "name", "with_null"]
    assert json.dumps(list(range(2000))) in lines[2]  # the whole list, never cut at a column width
    assert '{"a": [1, 2], "b": "x"}' in lines[2] and "[null, 1.5]" in lines[2]


def test_many_rows_stream_in_every_format(db):
    q = "SELECT i, i * 2 AS j, 'r' || i AS s FROM range(50000) t(i)"
    for fmt in ("csv", "json", "table"):
        res = CliRunner().invoke(cli, ["sql", q, "--format", fmt, "--db", str(db)])
        assert res.exit_code == 0, res.output
        if fmt == "csv":
            rows = list(csv.DictReader(io.StringIO(res.stdout)))
            assert len(rows) == 50000 and rows[-1] == {"i": "49999", "j": "99998", "s": "r49999"}
        elif fmt == "json":
            rows = json.loads(res.stdout)
            assert len(rows) == 50000 and rows[12345] == {"i": 12345, "j": 24690, "s": "r12345"}
        else:
            lines = res.stdout.splitlines()
            assert len(lines) == 50002 and lines[-1].split() == ["49999", "99998", "r49999"]


def test_an_empty_result_in_every_format(db):
    q = "SELECT range AS i FROM range(0)"
    out = {fmt: CliRunner().invoke(cli, ["sql", q, "--format", fmt, "--db", str(db)]).stdout
           for fmt in ("csv", "json", "table")}
    assert out == {"csv": "i\n", "json": "[]\n", "table": "(no rows)\n"}


def test_query_from_a_file_or_standard_input(db, tmp_path):
    qfile = tmp_path / "q.sql"
    qfile.write_text("-- the answer\nSELECT 6 * 7 AS answer\n")
    for args, stdin in ((["--file", qfile], None), (["-f", qfile], None),
                        (["--file", "-"], "SELECT 6 * 7 AS answer"), (["-"], "SELECT 6 * 7 AS answer;\n")):
        rc, out, err, _ = run_sql(*args, "--json", db=db, stdin=stdin)
        assert rc == 0, (args, err)
        assert json.loads(out) == [{"answer": 42}]


def test_bad_query_sources_are_one_line(db, tmp_path):
    qfile = tmp_path / "q.sql"
    qfile.write_text("SELECT 1")
    big = tmp_path / "big.sql"
    big.write_text("SELECT 1 -- " + "x" * (1 << 20))
    latin = tmp_path / "latin.sql"
    latin.write_bytes(b"SELECT '\xe9'")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [
        (["SELECT 1", "--file", qfile], "not both"),
        ([], "give a query"),
        (["--file", tmp_path / "missing.sql"], "missing.sql: cannot read the query"),
        (["--file", tmp_path], "not a regular file"),
        (["--file", fifo], "not a regular file"),  # never blocks waiting for a writer
        (["--file", big], "longer than 1 MB"),
        (["--file", latin], "not UTF-8 text"),
    ]
    for args, text in cases:
        rc, out, err, seconds = run_sql(*args, db=db)
        assert rc == 6 and out == "", (args, err)
        assert text in one_line_error(err), (args, err)
        assert seconds < 30
