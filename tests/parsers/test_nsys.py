"""nsys SQLite export: the real H200 fixture (sample_traces/nsight/) against nsys's own stats, an
independent SQL query over the SQLite, and the same workload captured by our Kineto collector."""

from __future__ import annotations

import csv
import gzip
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from kernelscope.errors import KernelscopeError, ParseError
from kernelscope.parsers import TRACE_SUFFIXES, detect_format, open_trace
from kernelscope.parsers.nsys import NsysReader, parse_emit_nvtx

NSIGHT = Path(__file__).resolve().parents[2] / "sample_traces" / "nsight"
SQLITE_GZ = NSIGHT / "encoder2_nvtx.sqlite.gz"
KERN_SUM = NSIGHT / "encoder2_nvtx_cuda_gpu_kern_sum.csv"
KINETO_RUN = NSIGHT / "encoder2_kineto"


@pytest.fixture(scope="module")
def sqlite_path(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nsys") / "encoder2_nvtx.sqlite"
    with gzip.open(SQLITE_GZ, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from kernelscope.storage.ingest import ingest_file, ingest_run
    from kernelscope.storage.store import open_store

    st = open_store(tmp_path_factory.mktemp("nsys_store") / "s.duckdb")
    r = ingest_file(st, SQLITE_GZ, labels={"batch": 4})
    assert r.status == "ingested", r.message
    k = ingest_run(st, KINETO_RUN, labels={"batch": 4})
    assert k.status == "ingested", k.message
    st.ids = {"nsys": r.trace_id, "kineto": k.trace_id}
    yield st
    st.close()


def read_all(path) -> tuple[pa.Table, object]:
    r = open_trace(path)
    return pa.Table.from_batches(list(r)), r.meta


def test_detect_and_suffixes(sqlite_path):
    assert detect_format(SQLITE_GZ) == "nsys" and detect_format(sqlite_path) == "nsys"
    assert {".sqlite", ".sqlite.gz", ".nsys-rep"} <= set(TRACE_SUFFIXES)


def test_meta_devices_and_time_base(sqlite_path):
    table, meta = read_all(SQLITE_GZ)
    con = sqlite3.connect(sqlite_path)
    assert meta.format == "nsys"
    assert meta.base_time_ns == con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    (dev,) = meta.device_properties
    assert dev["name"] == "NVIDIA H200" and dev["numSms"] == 132 and dev["id"] == 0
    assert dev["memoryBandwidth"] == 4814304000000 and dev["uuid"] == "0dcd4cd3-039b-172f-ab7b-a0a55b0cffae"
    assert meta.warnings == []  # every core table and column is present in this export
    assert meta.extra["nsys_tables_absent"] == ["CUPTI_ACTIVITY_KIND_MEMCPY"]
    # the .sqlite and its .gz twin hash alike (sha256 of the decompressed bytes)
    _t2, meta2 = read_all(sqlite_path)
    assert meta2.content_hash == meta.content_hash
    kinds = dict(zip(*[c.to_pylist() for c in table.group_by("kind").aggregate([("seq", "count")]).columns]))
    assert kinds["kernel"] == con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] == 66
    assert kinds["runtime"] + kinds["driver"] == con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    assert kinds["cpu_op"] == 552 and kinds["memset"] == 6 and kinds["sync"] == 1 and kinds["other"] == 5


def test_kernel_counts_and_times_equal_nsys_stats(store):
    with open(KERN_SUM, newline="") as f:
        stats = {r["Name"]: r for r in csv.DictReader(f)}
    got = store.con.execute(
        """SELECT name, count(*), sum(dur_ns), min(dur_ns), max(dur_ns) FROM gpu_activities
           WHERE trace_id = ? AND kind = 'kernel' GROUP BY name""", [store.ids["nsys"]]
    ).fetchall()
    assert len(got) == len(stats) == 8
    for name, n, total, lo, hi in got:
        s = stats[name]
        assert (n, total, lo, hi) == (int(s["Instances"]), int(s["Total Time (ns)"]), int(s["Min (ns)"]),
                                      int(s["Max (ns)"])), name


def test_tklqt_equals_independent_sql(store, sqlite_path):
    from kernelscope.analysis.launch import launch

    con = sqlite3.connect(sqlite_path)
    # launch-and-queue time of every kernel: kernel start - start of the runtime call with the same
    # correlation id in the same process (no CUDA graphs in this capture).
    expected, n = con.execute(
        """SELECT sum(k.start - r.start), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
             ON r.correlationId = k.correlationId AND k.globalPid = (r.globalTid & -16777216)"""
    ).fetchone()
    assert n == 66
    res = launch(store, store.ids["nsys"])
    assert res.scalars["tklqt_ns"] == expected
    assert res.scalars["graph_launches"] == 0


def test_emit_nvtx_kernels_map_to_parsed_operators(store, sqlite_path):
    con = sqlite3.connect(sqlite_path)
    # kernels whose launch call lies inside an NVTX range on the launching thread (independent of kernelscope)
    inside = con.execute(
        """SELECT count(DISTINCT k.rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL k
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
           JOIN NVTX_EVENTS n ON n.globalTid = r.globalTid AND n.start <= r.start AND r.start < n."end"
           WHERE n.eventType = 59"""
    ).fetchone()[0]
    mapped = store.con.execute(
        """SELECT count(*) FROM gpu_activities a JOIN cpu_ops o ON o.trace_id = a.trace_id AND o.op_id = a.leaf_op_id
           WHERE a.trace_id = ? AND a.kind = 'kernel' AND o.name LIKE 'aten::%' AND o.name NOT LIKE '%op_id%'
             AND o.input_dims LIKE '[[%'""", [store.ids["nsys"]]
    ).fetchone()[0]
    assert inside == 66
    assert mapped / inside >= 0.95
    assert mapped == 66


def test_same_workload_kineto_vs_nsys(store):
    """Per-operator kernel counts (leaf operator name) and total kernel time per step, both captures."""
    q = """SELECT o.name, count(*), sum(a.dur_ns) FROM gpu_activities a
           LEFT JOIN cpu_ops o ON o.trace_id = a.trace_id AND o.op_id = a.leaf_op_id
           WHERE a.trace_id = ? AND a.kind = 'kernel' GROUP BY 1"""
    nsys = {r[0]: r[1:] for r in store.con.execute(q, [store.ids["nsys"]]).fetchall()}
    kin = {r[0]: r[1:] for r in store.con.execute(q, [store.ids["kineto"]]).fetchall()}
    steps_nsys, steps_kineto = 3, 3  # nsight_workload.py --steps 3 both ways (Kineto: 3 warm-up excluded)
    ops = set(nsys) | set(kin)
    agree = sum(1 for op in ops if op in nsys and op in kin and nsys[op][0] / steps_nsys == kin[op][0] / steps_kineto)
    assert None not in ops and len(ops) == 5
    assert agree / len(ops) >= 0.98
    t_nsys = sum(v[1] for v in nsys.values()) / steps_nsys
    t_kin = sum(v[1] for v in kin.values()) / steps_kineto
    assert abs(t_nsys - t_kin) / t_kin <= 0.02


def test_every_registered_analysis_runs_on_the_nsys_trace(store):
    from kernelscope.analysis.registry import ANALYSES

    for name, a in ANALYSES.items():
        outcome = {}
        for fmt in ("nsys", "kineto"):
            tid = store.ids[fmt]
            try:
                res = a.fn(store, [tid]) if a.multi else a.fn(store, tid)
                outcome[fmt] = type(res).__name__
            except KernelscopeError as exc:  # a user-level refusal must be the same for both captures
                outcome[fmt] = type(exc).__name__
        assert outcome["nsys"] == outcome["kineto"], name
        if not a.multi:
            assert outcome["nsys"] == "Result", name


def test_overhead_and_sync_are_not_gpu_activity(store):
    tid = store.ids["nsys"]
    kinds = dict(store.con.execute(
        "SELECT kind, count(*) FROM other_events WHERE trace_id = ? GROUP BY kind", [tid]).fetchall())
    assert kinds == {"other": 5, "sync": 1}
    assert store.con.execute(
        "SELECT count(*) FROM gpu_activities WHERE trace_id = ? AND kind NOT IN ('kernel', 'memset')", [tid]
    ).fetchone()[0] == 0


def test_parse_emit_nvtx():
    p = parse_emit_nvtx("aten::addmm, seq = 7, op_id = 12, sizes = [[8], [8, 16], []], input_op_ids = [(0,-1), (3,0)]")
    assert p == {"name": "aten::addmm", "seq": 7, "op_id": 12, "sizes": "[[8], [8, 16], []]",
                 "input_op_ids": "[(0,-1), (3,0)]"}
    assert parse_emit_nvtx("aten::view, op_id = 3")["sizes"] is None
    assert parse_emit_nvtx("my user range") is None
    assert parse_emit_nvtx("a, b, sizes = [[1, 2]]") == {"name": "a, b", "seq": None, "op_id": None,
                                                         "sizes": "[[1, 2]]", "input_op_ids": None}


def _copy(sqlite_path, tmp_path, name="x.sqlite") -> Path:
    out = tmp_path / name
    shutil.copy(sqlite_path, out)
    return out


def test_missing_tables_and_columns_are_reported(sqlite_path, tmp_path):
    p = _copy(sqlite_path, tmp_path)
    con = sqlite3.connect(p)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET")
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN registersPerThread")
    con.commit()
    con.close()
    table, meta = read_all(p)
    kinds = table.column("kind").to_pylist()
    assert kinds.count("kernel") == 66 and "memset" not in kinds and "runtime" not in kinds
    assert any("CUPTI_ACTIVITY_KIND_RUNTIME" in w for w in meta.warnings)
    assert any("registersPerThread" in w for w in meta.warnings)
    assert "CUPTI_ACTIVITY_KIND_MEMSET" in meta.extra["nsys_tables_absent"]
    regs = table.filter(pa.compute.equal(table.column("kind"), "kernel")).column("registers_per_thread")
    assert regs.null_count == 66


def test_graph_level_trace_warns_with_node_option(sqlite_path, tmp_path):
    p = _copy(sqlite_path, tmp_path)
    con = sqlite3.connect(p)
    con.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, "end" INTEGER, deviceId INTEGER,
                   streamId INTEGER, correlationId INTEGER, globalPid INTEGER, graphId INTEGER)""")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (100, 600, 0, 7, 999999, 281486183890944, 3)")
    con.commit()
    con.close()
    table, meta = read_all(p)
    assert any("--cuda-graph-trace=node" in w for w in meta.warnings)
    names = table.filter(pa.compute.equal(table.column("kind"), "kernel")).column("name").to_pylist()
    assert "CUDA graph 3 (graph-level trace)" in names and len(names) == 67


def test_multi_process_correlations_made_unique(sqlite_path, tmp_path):
    p = _copy(sqlite_path, tmp_path)
    con = sqlite3.connect(p)
    other = (777 << 24) | (1 << 56)
    con.execute(f"""INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", eventClass, globalTid, correlationId, nameId, returnValue)
                    SELECT start, "end", eventClass, {other} | 777, correlationId, nameId, 0
                    FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = 125""")
    con.commit()
    con.close()
    table, meta = read_all(p)
    assert any("correlationId + (pid << 32)" in w for w in meta.warnings)
    corr = [c for c in table.column("correlation").to_pylist() if c is not None and c % (1 << 32) == 125]
    assert sorted(corr) == [125 + (668 << 32), 125 + (668 << 32), 125 + (777 << 32)]  # kernel+launch, other launch


@pytest.mark.parametrize("case", ["not_nsys", "truncated", "truncated_gz"])
def test_bad_input_one_line_nothing_stored(case, sqlite_path, tmp_path):
    from kernelscope.storage.ingest import ingest_file
    from kernelscope.storage.store import open_store

    if case == "not_nsys":
        p = tmp_path / "other.sqlite"
        c = sqlite3.connect(p)
        c.execute("CREATE TABLE people (name TEXT)")
        c.commit()
        c.close()
    elif case == "truncated":
        p = tmp_path / "cut.sqlite"
        p.write_bytes(sqlite_path.read_bytes()[: 200_000])
    else:
        p = tmp_path / "cut.sqlite.gz"
        p.write_bytes(SQLITE_GZ.read_bytes()[:30_000])
    with open_store(tmp_path / "s.duckdb") as st:
        r = ingest_file(st, p)
        assert r.status == "failed" and "\n" not in r.message
        assert st.con.execute("SELECT count(*) FROM traces").fetchone()[0] == 0
        assert st.con.execute("SELECT count(*) FROM gpu_activities").fetchone()[0] == 0
    with pytest.raises(ParseError):
        list(NsysReader(p))


def test_nsys_rep_without_nsys_says_how(tmp_path, monkeypatch):
    p = tmp_path / "report.nsys-rep"
    p.write_bytes(b"\x00binary report")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ParseError, match="nsys export --type sqlite"):
        list(open_trace(p))


# ------------------------------------------------------------------ Parquet export of the same report

PARQUET_DIR = NSIGHT / "encoder2_nvtx_pq"


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("kind", "ascending"), ("ts_ns", "ascending"), ("name", "ascending"),
                          ("tid", "ascending")])


def test_parquetdir_yields_the_sqlite_rows_and_meta(sqlite_path):
    from kernelscope.parsers import parquet_dir_kind

    assert parquet_dir_kind(PARQUET_DIR) == "nsys" and detect_format(PARQUET_DIR) == "nsys"
    sq, msq = read_all(SQLITE_GZ)
    pq_, mpq = read_all(PARQUET_DIR)
    assert pq_.num_rows == sq.num_rows == 800 == mpq.events
    assert _sorted(pq_).drop_columns(["seq"]).equals(_sorted(sq).drop_columns(["seq"]))
    assert pq_.equals(sq)  # same tables in the same order: the same seq numbering too
    con = sqlite3.connect(sqlite_path)
    assert mpq.base_time_ns == msq.base_time_ns == con.execute(
        "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    assert mpq.device_properties == msq.device_properties
    assert mpq.device_properties[0]["numSms"] == 132 and mpq.device_properties[0]["memoryBandwidth"] == 4814304000000
    assert mpq.warnings == msq.warnings == [] and mpq.extra == msq.extra
    assert mpq.dropped_notes == msq.dropped_notes
    assert mpq.content_hash and mpq.content_hash != msq.content_hash  # the directory's own bytes


def test_parquet_uint64_wraps_like_sqlite_integer(sqlite_path):
    """DIAGNOSTIC_EVENT.globalPid holds a uint64 above 2**63: loaded as SQLite's signed INTEGER holds it."""
    from kernelscope.parsers.nsys.source import ParquetSource

    src = ParquetSource(PARQUET_DIR)
    got = sorted(r[0] for r in src.con.execute("SELECT globalPid FROM DIAGNOSTIC_EVENT"))
    want = sorted(r[0] for r in sqlite3.connect(sqlite_path).execute("SELECT globalPid FROM DIAGNOSTIC_EVENT"))
    assert got == want and min(got) < 0
    assert "ANALYSIS_FILE" in src.tables() and "ANALYSIS_FILE" not in {
        r[0] for r in src.con.execute("SELECT name FROM sqlite_master")}  # listed, not loaded: not read
    src.close()


def test_cli_ingest_parquetdir_summary_equals_sqlite(tmp_path):
    from click.testing import CliRunner

    from kernelscope.analysis.launch import launch
    from kernelscope.analysis.summary import summary
    from kernelscope.cli import cli
    from kernelscope.storage.store import open_store

    db = tmp_path / "s.duckdb"
    for p in (PARQUET_DIR, SQLITE_GZ):
        res = CliRunner().invoke(cli, ["ingest", str(p), "--db", str(db)])
        assert res.exit_code == 0, res.output
        assert res.output.count("ingested ") == 1
    with open_store(db, read_only=True) as st:
        ids = dict(st.con.execute("SELECT name, trace_id FROM traces").fetchall())
        assert set(ids) == {"encoder2_nvtx_pq", "encoder2_nvtx"}
        keys = ("kernels", "kernel_time_ns", "busy_ns", "gpu_span_ns", "launches", "cpu_ops", "memsets")
        a, b = (summary(st, ids[n]).scalars for n in ("encoder2_nvtx_pq", "encoder2_nvtx"))
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
        assert (a["kernels"], a["kernel_time_ns"]) == (66, 511421)
        la, lb = (launch(st, ids[n]).scalars["tklqt_ns"] for n in ("encoder2_nvtx_pq", "encoder2_nvtx"))
        assert la == lb and la > 0
    # a second ingest of the same directory is recognised by its content hash
    res = CliRunner().invoke(cli, ["ingest", str(PARQUET_DIR), "--db", str(db)])
    assert res.exit_code == 0 and res.output.startswith("skipped")


def test_walk_finds_parquetdir_as_one_trace(tmp_path):
    from kernelscope.storage.ingest import collect_paths

    root = tmp_path / "root"
    shutil.copytree(PARQUET_DIR, root / "a" / "export_pq")
    shutil.copy(SQLITE_GZ, root / "b.sqlite.gz")
    assert collect_paths([root]) == [("export", root / "a" / "export_pq"), ("file", root / "b.sqlite.gz")]
    assert collect_paths([root / "a" / "export_pq"]) == [("export", root / "a" / "export_pq")]


def _partial_copy(tmp_path, keep) -> Path:
    out = tmp_path / "pq"
    out.mkdir()
    for f in PARQUET_DIR.glob("*.parquet"):
        if keep(f.stem):
            shutil.copy(f, out / f.name)
    return out


def test_parquetdir_missing_tables_and_columns_warn(tmp_path):
    import pyarrow.parquet as pq

    d = _partial_copy(tmp_path, lambda n: n not in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMSET"))
    k = pq.read_table(d / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").drop_columns(["registersPerThread"])
    pq.write_table(k, d / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    table, meta = read_all(d)
    kinds = table.column("kind").to_pylist()
    assert kinds.count("kernel") == 66 and "memset" not in kinds and "runtime" not in kinds
    assert any("CUPTI_ACTIVITY_KIND_RUNTIME" in w for w in meta.warnings)
    assert any("registersPerThread" in w for w in meta.warnings)
    regs = table.filter(pa.compute.equal(table.column("kind"), "kernel")).column("registers_per_thread")
    assert regs.null_count == 66


def test_parquetdir_with_dictionary_columns_reads_the_same(tmp_path):
    """Column types may differ between exports: dictionary-encoded strings and narrower ints read alike."""
    import pyarrow.parquet as pq

    d = _partial_copy(tmp_path, lambda n: True)
    s = pq.read_table(d / "StringIds.parquet")
    s = s.set_column(1, "value", s.column("value").dictionary_encode())
    pq.write_table(s, d / "StringIds.parquet")
    assert pa.types.is_dictionary(pq.read_schema(d / "StringIds.parquet").field("value").type)
    assert read_all(d)[0].equals(read_all(PARQUET_DIR)[0])


@pytest.mark.parametrize("case", ["not_nsys", "no_stringids", "damaged"])
def test_bad_parquetdir_one_line(case, tmp_path):
    from click.testing import CliRunner

    from kernelscope.cli import cli

    if case == "not_nsys":
        d = tmp_path / "other_pq"
        d.mkdir()
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"x": [1, 2]}), d / "people.parquet")
        want = "not an Nsight Systems export"
    elif case == "no_stringids":
        d = _partial_copy(tmp_path, lambda n: n != "StringIds")
        want = "no StringIds table"
    else:
        d = _partial_copy(tmp_path, lambda n: True)
        (d / "NVTX_EVENTS.parquet").write_bytes((d / "NVTX_EVENTS.parquet").read_bytes()[:5000])
        want = "cannot read NVTX_EVENTS.parquet"
    with pytest.raises(ParseError, match=want):
        list(open_trace(d))
    db = tmp_path / "s.duckdb"
    res = CliRunner().invoke(cli, ["ingest", str(d), "--db", str(db)])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kernelscope: {d}: ") and want in lines[0], res.stderr
    assert "Traceback" not in res.output
