"""The hostile-input corpus (tests/hostile_cases.py) through the real CLI, with bounds (issue 11).

Every case runs in its own forked child of ``tests/hostile_harness.py`` (one warm process, two lanes in
parallel, each lane with its own copy of a seeded store). A refused input must give: exactly one stderr line
``kernelscope: ...`` that names the input and says why, the expected exit code, no traceback, nothing on
stdout claiming an ingest, wall time under its bound, peak RSS growth under its bound (a small multiple of the
16 MB per-event cap for the 1 GiB inputs, not a multiple of the file), and the store unchanged: the row count of
every table, or the bytes of a store file that is itself the input. A ``tolerated`` input must be ingested:
exit 0, no stderr, one more trace.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import compiled_copy
from hostile_cases import CASES, Ctx

ROOT = Path(__file__).resolve().parents[1]
HARNESS = Path(__file__).resolve().parent / "hostile_harness.py"
LANES = 2
#: The whole corpus on this project's 2-core machines runs in ~40 s; this bound catches a case that hangs or
#: a harness that lost its parallelism, not noise.
SUITE_WALL_S = 150


def _counts(db: Path) -> dict[str, int]:
    from kernelscope.storage.store import open_store

    with open_store(db, read_only=True) as s:
        tables = [r[0] for r in s.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_type = 'BASE TABLE'").fetchall()]
        return {t: s.con.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in sorted(tables)}


def _snapshot(path: Path):
    """What must not change about a store file that is the input: its bytes, or its kind if not a file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISREG(st.st_mode):
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return f"mode {stat.S_IFMT(st.st_mode):o}"


@pytest.fixture(scope="module")
def hostile():
    """The whole corpus through the harness, once per session (tests/stores.py's ``once``: the first pytest-xdist
    worker to run one of these tests runs it, the others read its results)."""
    import stores

    return stores.once("hostile", _run_corpus)


def _run_corpus(root: Path) -> dict:
    seed = compiled_copy(root / "seed.duckdb")  # `kernelscope ingest sample_traces/compiled`, once per session
    lanes = []
    for i in range(LANES):
        lane_dir = root / f"lane{i}"
        lane_dir.mkdir()
        lanes.append(lane_dir / "store.duckdb")
        shutil.copy(seed, lanes[-1])
    ctx = Ctx(seed=seed)
    specs, snapshots, cases = {}, {}, []
    for i, name in enumerate(sorted(CASES)):
        tmp = root / "in" / name
        tmp.mkdir(parents=True)
        spec = CASES[name].build(tmp, ctx)
        specs[name] = spec
        if spec.own_db is not None:
            snapshots[name] = _snapshot(spec.own_db)
        cases.append({"name": name, "argv": spec.argv, "lane": i % LANES, "timeout_s": spec.timeout_s,
                      "mem_cap_mb": max(2 * spec.mem_mb, 1024), "env": spec.env, "own_db": spec.own_db is not None})
    spec_file = root / "spec.json"
    spec_file.write_text(json.dumps({"lanes": [str(p) for p in lanes], "cases": cases,
                                     "counts": {str(i): _counts(p) for i, p in enumerate(lanes)}}))
    out = root / "results.json"
    proc = subprocess.run([sys.executable, str(HARNESS), str(spec_file), str(out)], capture_output=True, text=True,
                          timeout=900, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    results = {r["name"]: r for r in data["results"]}
    print(f"\nhostile corpus: {len(results)} cases in {data['wall_s']:.1f} s")
    return {"results": results, "specs": specs, "snapshots": snapshots, "wall_s": data["wall_s"], "lanes": lanes,
            "root": root}


def test_corpus_has_at_least_100_refusals():
    specs = {n: c.family for n, c in CASES.items()}
    assert len(specs) >= 100
    assert sum(1 for n, c in CASES.items() if c.family != "tolerated") >= 100
    assert {"kineto", "size", "nesting", "duplicates", "encoding", "types", "binary", "paths", "nsys", "ncu",
            "run", "store", "tolerated"} <= set(specs.values())


@pytest.mark.slow  # the hostile fixture runs the whole corpus (~25 s of CPU)
def test_suite_wall_time_and_every_case_ran(hostile):
    assert set(hostile["results"]) == set(CASES)
    assert hostile["wall_s"] < SUITE_WALL_S, hostile["wall_s"]


@pytest.mark.slow  # the hostile fixture runs the whole corpus (~25 s of CPU)
def test_no_scratch_left_next_to_the_stores(hostile):
    """No ingest scratch folder, WAL or temporary file left beside a store after 120 refused inputs (a lock
    file the store keeps for its writers is not scratch)."""
    for lane in hostile["lanes"]:
        left = sorted(p.name for p in lane.parent.iterdir() if p.name not in ("store.duckdb", "store.duckdb.lock"))
        assert left == [], left


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_case(name, hostile):
    r, spec = hostile["results"][name], hostile["specs"][name]
    shown = f"stderr={r.get('stderr', '')[-2000:]!r} stdout={r.get('stdout', '')[-500:]!r}"
    assert not r.get("timed_out"), f"ran past {spec.timeout_s} s; {shown}"
    assert not r.get("killed_memory"), f"killed past its memory cap; {shown}"
    assert "Traceback" not in r["stderr"] + r["stdout"], shown
    grew_mb = (r["peak_kb"] - r["baseline_kb"]) / 1024
    assert grew_mb <= spec.mem_mb, f"peak RSS grew {grew_mb:.0f} MB > {spec.mem_mb} MB; {shown}"
    assert r["wall_s"] <= spec.timeout_s
    assert "counts_error" not in r, r.get("counts_error")
    if spec.tolerated:
        assert r["code"] == 0 and r["stderr"] == "", shown
        assert r["stdout"].startswith("ingested "), shown
        assert r["counts"]["traces"] == r["counts_before"]["traces"] + 1
        return
    assert r["code"] == spec.code, f"exit {r['code']} != {spec.code}; {shown}"
    lines = [ln for ln in r["stderr"].splitlines() if ln.strip()]
    assert len(lines) == 1, shown
    assert lines[0].startswith("kernelscope: "), shown
    assert spec.names in lines[0], f"the line does not name {spec.names!r}; {shown}"
    assert re.search(spec.match, lines[0]), f"the line does not match {spec.match!r}; {shown}"
    assert "ingested" not in r["stdout"], shown
    if spec.own_db is not None:
        assert _snapshot(spec.own_db) == hostile["snapshots"][name], "the store file changed"
    else:
        assert r["counts"] == r["counts_before"], "the store's row counts changed"


# ------------------------------------------------------------------ findings of issue 11 checked by value

def _cli(*args):
    from click.testing import CliRunner

    from kernelscope.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def test_ingest_dir_takes_the_ncu_csvs_that_ingest_file_takes(tmp_path):
    """sample_traces/nsight copied into a folder: the three Nsight Compute CSVs are ingested after the traces
    and matched to the nsys export of the same workload (they were skipped); nsys stats' CSV is not a trace."""
    folder = tmp_path / "nsight"
    shutil.copytree(ROOT / "sample_traces" / "nsight", folder)
    db = tmp_path / "s.duckdb"
    res = _cli("ingest", folder, "--db", db)
    assert res.exit_code == 0, res.output + res.stderr
    lines = res.stdout.strip().splitlines()
    csv_lines = [ln for ln in lines if ".csv" in ln]
    assert [ln.split()[2].rsplit("/", 1)[-1] for ln in csv_lines] == [
        "encoder2_ncu_details.csv.gz", "encoder2_ncu_dram.csv.gz", "encoder2_ncu_raw.csv.gz"]
    assert lines[-3:] == csv_lines  # after every trace of the folder
    assert all(ln.startswith("ingested") for ln in csv_lines)
    assert "matched 19/20" in csv_lines[0] and "matched 59/60" in csv_lines[1] and "matched 59/60" in csv_lines[2]
    assert "kern_sum" not in res.stdout + res.stderr
    from kernelscope.storage.store import open_store

    with open_store(db, read_only=True) as s:
        n, matched = s.con.execute("SELECT count(*), count(activity_id) FROM ncu_kernels").fetchone()
        fmt = s.con.execute("SELECT DISTINCT t.format FROM ncu_kernels k JOIN traces t USING (trace_id)").fetchall()
    assert (n, matched) == (140, 137) and fmt in ([("nsys",)], [("kineto",)])


def test_ncu_unknown_unit_is_left_out_and_said_not_read_as_factor_1(tmp_path):
    import csv
    import gzip
    import io

    text = gzip.decompress((ROOT / "sample_traces/nsight/encoder2_ncu_raw.csv.gz").read_bytes()).decode()
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines() if not ln.startswith("==")))))
    i = rows[0].index("gpu__time_duration.sum")
    assert rows[1][i] == "ns"
    rows[1][i] = "fortnight"
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    p = tmp_path / "unit_ncu.csv"
    p.write_text(out.getvalue())
    db = tmp_path / "s.duckdb"
    assert _cli("ingest", ROOT / "sample_traces/nsight/encoder2_nvtx.sqlite.gz", "--db", db).exit_code == 0
    res = _cli("ingest", p, "--db", db)
    assert res.exit_code == 0 and res.stderr == ""
    assert "matched 59/60" in res.stdout and "warning: unit 'fortnight' of gpu__time_duration.sum" in res.stdout
    from kernelscope.storage.store import open_store

    with open_store(db, read_only=True) as s:
        durations = s.con.execute("SELECT count(duration_ns) FROM ncu_kernels").fetchone()[0]
        warnings = s.con.execute("SELECT warnings FROM traces WHERE format = 'nsys'").fetchone()[0]
    assert durations == 0  # not 60 values read with factor 1
    assert "fortnight" in warnings


def test_ncu_details_without_value_columns_is_refused_not_1114_kernels(tmp_path):
    from kernelscope.errors import ParseError
    from kernelscope.parsers.ncu import read_ncu_csv

    rep = read_ncu_csv(ROOT / "sample_traces/nsight/encoder2_ncu_details.csv.gz")
    assert len(rep.kernels) == 20
    import gzip

    lines = gzip.decompress((ROOT / "sample_traces/nsight/encoder2_ncu_details.csv.gz").read_bytes()).decode()
    cut = "\n".join(ln.rsplit('","Metric Unit"', 1)[0] + '"' if '"Metric Unit"' in ln else ln
                    for ln in lines.splitlines())
    p = tmp_path / "d.csv"
    p.write_text(cut)
    with pytest.raises(ParseError, match="Metric Value"):
        read_ncu_csv(p)


def test_every_store_connection_turns_extension_autoinstall_and_autoload_off(tmp_path):
    from kernelscope.storage.export import export_parquet, open_parquet_store
    from kernelscope.storage.store import _connect, open_store

    db = tmp_path / "s.duckdb"
    assert _cli("ingest", ROOT / "sample_traces" / "compiled", "--db", db).exit_code == 0
    q = "SELECT current_setting('autoinstall_known_extensions'), current_setting('autoload_known_extensions')"
    with open_store(db) as s:
        assert s.con.execute(q).fetchone() == (False, False)
        export_parquet(s, tmp_path / "pq")
    with open_store(db, read_only=True) as s:
        assert s.con.execute(q).fetchone() == (False, False)
    con = _connect(db, True, {"autoload_known_extensions": "true"})  # a caller cannot turn it back on
    assert con.execute(q).fetchone() == (False, False)
    con.close()
    with open_parquet_store(tmp_path / "pq") as s:
        assert s.con.execute(q).fetchone() == (False, False)


def test_sqlite_file_as_db_is_refused_without_touching_the_network(tmp_path):
    import sqlite3

    p = tmp_path / "lite.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    res = _cli("traces", "--db", p)
    assert res.exit_code == 3
    assert res.stderr.strip() == f"kernelscope: {p} is an SQLite database, not a kernelscope store (a DuckDB file); " \
                                 "choose another --db"


def test_huge_event_cap_is_configurable(tmp_path, monkeypatch):
    """KERNELSCOPE_MAX_EVENT_MB raises the cap: a 20 MB name is refused by default and read with 32."""
    from kernelscope.errors import ParseError
    from kernelscope.parsers.kineto import KinetoReader

    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "' + b"a" * (20 << 20)
                  + b'", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}')
    with pytest.raises(ParseError, match="runs past 16 MB"):
        list(KinetoReader(p))
    monkeypatch.setenv("KERNELSCOPE_MAX_EVENT_MB", "32")
    batches = list(KinetoReader(p))
    assert sum(b.num_rows for b in batches) == 1 and len(batches[0].column("name")[0].as_py()) == 20 << 20
