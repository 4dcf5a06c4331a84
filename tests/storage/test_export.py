"""Parquet export: hive layout by run and rank, manifest, and analyses over the dataset equal those over the
store (every registered single-trace analysis on every trace, and comm over the run)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from kernelscope.analysis.registry import ANALYSES
from kernelscope.cli import cli
from kernelscope.errors import KernelscopeError, StoreError, UsageError
from kernelscope.storage.export import MANIFEST, export_parquet, open_parquet_store
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    db = tmp / "s.duckdb"
    with open_store(db) as store:
        res = ingest_paths(store, [SAMPLES / "ddp2", SAMPLES / "small_kernels_graph", SAMPLES / "compiled"])
        assert {r.status for r in res} == {"ingested"}
        info = export_parquet(store, tmp / "pq")
    return db, tmp / "pq", info


def _same(a, b) -> bool:
    """Equal, except floats within 1e-12 relative (a float sum's order may differ: DuckDB aggregates in
    parallel); ints, strings and structure exactly."""
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _outcome(fn):
    try:
        return fn().to_dict()
    except KernelscopeError as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.slow
def test_analyses_over_the_dataset_equal_the_store(exported):
    db, pq, _ = exported
    with open_store(db, read_only=True) as store:
        ids = [r[0] for r in store.con.execute("SELECT trace_id FROM traces ORDER BY trace_id").fetchall()]
        assert len(ids) == 4
        want = {}
        for name, a in ANALYSES.items():
            if a.multi:
                continue
            for tid in ids:
                want[(name, tid)] = _outcome(lambda a=a, tid=tid: a.fn(store, tid))
        want[("comm", None)] = _outcome(lambda: ANALYSES["comm"].fn(store, None))
        tables = {t: store.query(f"SELECT * FROM {t} ORDER BY ALL") for t in ("traces", "gpu_activities",
                                                                                "collectives", "rank_clocks")}
    with open_parquet_store(pq) as ps:
        got = {}
        for name, a in ANALYSES.items():
            if a.multi:
                continue
            for tid in ids:
                got[(name, tid)] = _outcome(lambda a=a, tid=tid: a.fn(ps, tid))
        got[("comm", None)] = _outcome(lambda: ANALYSES["comm"].fn(ps, None))
        for t, df in tables.items():
            back = ps.query(f"SELECT * FROM {t} ORDER BY ALL")
            assert list(back.columns) == list(df.columns) and back.equals(df), t
    assert isinstance(want[("comm", None)], dict) and want[("comm", None)]["straggler_rank"] == 1
    assert isinstance(want[("summary", ids[0])], dict)
    for key in want:
        assert _same(got[key], want[key]), key


def _as_older(pq: Path, dst: Path, version: int, drop=()) -> Path:
    """A copy of the dataset that looks exported at schema ``version``: the tables ``drop`` (made by later
    migrations) removed, folders and manifest entries."""
    import shutil
    shutil.copytree(pq, dst)
    m = json.loads((dst / MANIFEST).read_text())
    m["schema_version"] = version
    for t in drop:
        m["tables"].pop(t)
        shutil.rmtree(dst / t, ignore_errors=True)
    (dst / MANIFEST).write_text(json.dumps(m))
    return dst


def test_a_dataset_of_an_older_schema_gets_the_newer_tables_in_memory(exported, tmp_path):
    """A dataset exported before schema 013 (no leaf_instances, no stream_overlaps): opening it derives those
    tables in memory with the registered steps, so summary and bandwidth equal the store's (they raised a
    CatalogException traceback before). One exported before a migration that ALTERs its tables, or by a newer
    kernelscope, is refused in one sentence."""
    db, pq, _ = exported
    old = _as_older(pq, tmp_path / "v12", 12, drop=("leaf_instances", "stream_overlaps"))
    with open_store(db, read_only=True) as store:
        ids = [r[0] for r in store.con.execute("SELECT trace_id FROM traces ORDER BY trace_id").fetchall()]
        want = {(n, t): _outcome(lambda n=n, t=t: ANALYSES[n].fn(store, t)) for n in ("summary", "bandwidth")
                for t in ids}
        rows = {t: store.query(f"SELECT * FROM {t} ORDER BY ALL") for t in ("leaf_instances", "stream_overlaps")}
    with open_parquet_store(old) as ps:
        assert ps.schema_version() == 12
        for t, df in rows.items():
            assert len(df) and ps.query(f"SELECT * FROM {t} ORDER BY ALL").equals(df), t
        for (n, t), w in want.items():
            assert _same(_outcome(lambda n=n, t=t: ANALYSES[n].fn(ps, t)), w), (n, t)
    with pytest.raises(StoreError, match="exported at schema 11, before 012_memory_pairs.sql changed its tables; "
                                         "export it again"):
        open_parquet_store(_as_older(pq, tmp_path / "v11", 11, drop=("leaf_instances", "stream_overlaps")))
    with pytest.raises(StoreError, match="exported at schema 99 but this kernelscope knows only up to"):
        open_parquet_store(_as_older(pq, tmp_path / "v99", 99))


def test_layout_and_manifest(exported):
    db, pq, info = exported
    manifest = json.loads((pq / MANIFEST).read_text())
    with open_store(db, read_only=True) as store:
        n = store.con.execute("SELECT count(*) FROM gpu_activities").fetchone()[0]
        run_id = store.con.execute("SELECT run_id FROM runs").fetchone()[0]
        single = store.con.execute("SELECT trace_id, run_id FROM traces WHERE name = 'compiled'").fetchone()
    assert manifest["tables"]["gpu_activities"]["rows"] == n
    assert manifest["tables"]["gpu_activities"]["partitioned_by"] == ["run", "rank"]
    assert ["start_ns", "BIGINT"] in manifest["tables"]["gpu_activities"]["columns"]
    assert (pq / "gpu_activities" / f"run={run_id}" / "rank=1" / "data_0.parquet").is_file()
    assert (pq / "gpu_activities" / f"run={single[1] or single[0]}" / "rank=0").is_dir()
    # a reader that knows nothing of kernelscope (pyarrow) sees the rows and the partition columns
    d = ds.dataset(pq / "gpu_activities", format="parquet", partitioning="hive")
    t = d.to_table(columns=["run", "rank"])
    assert t.num_rows == n and set(t.column("run").to_pylist()) >= {run_id}
    assert info.rows == sum(v["rows"] for v in manifest["tables"].values()) and info.runs == 3


def test_export_one_run_and_refusals(exported, tmp_path):
    db, _, _ = exported
    with open_store(db, read_only=True) as store:
        run_id = store.con.execute("SELECT run_id FROM runs").fetchone()[0]
        info = export_parquet(store, tmp_path / "one", run=run_id)
        assert info.runs == 1
        with pytest.raises(UsageError, match="not an empty folder"):
            export_parquet(store, tmp_path / "one")
        with pytest.raises(UsageError, match="no run or trace 'zzz'"):
            export_parquet(store, tmp_path / "two", run="zzz")
    with open_parquet_store(tmp_path / "one") as ps:
        assert ps.query("SELECT DISTINCT run_id FROM traces").run_id.tolist() == [run_id]
        assert ps.query("SELECT count(*) AS n FROM runs").n[0] == 1
    with pytest.raises(StoreError, match="not a kernelscope Parquet export"):
        open_parquet_store(tmp_path)


def test_cli_export(exported, tmp_path):
    db, _, _ = exported
    res = CliRunner().invoke(cli, ["export", "--parquet", str(tmp_path / "x"), "--db", str(db)])
    assert res.exit_code == 0 and res.stdout.startswith("exported  ")
    assert "of 3 run(s)" in res.stdout


def test_cli_reads_the_dataset_with_db_dir(exported, tmp_path):
    """`--db DIR` of an export: read-only commands answer as over the store; writes and user SQL beyond SELECT
    are refused in one line, and user SQL reads no file outside the dataset."""
    db, pq, _ = exported

    def run(*args, where):
        return CliRunner().invoke(cli, [*args, "--db", str(where)])

    for args in (["summary", "compiled", "--json"], ["analyze", "comm", "ddp_rank0", "--json"], ["traces", "--json"]):
        a, b = run(*args, where=db), run(*args, where=pq)
        assert a.exit_code == 0 and b.exit_code == 0, (args, b.stderr)
        assert json.loads(b.stdout) == json.loads(a.stdout), args
    q = "SELECT count(*) AS n, sum(dur_ns) AS t FROM gpu_activities"
    assert run("sql", q, "--json", where=pq).stdout == run("sql", q, "--json", where=db).stdout
    for bad, word in (("COPY (SELECT 1) TO 'x.csv'", "not COPY"), ("ATTACH 'y.duckdb'", "not ATTACH"),
                      ("SET enable_external_access = true", "not SET"),
                      (f"SELECT * FROM read_csv('{db}')", "Permission Error")):
        res = run("sql", bad, where=pq)
        assert res.exit_code != 0 and word in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert sorted(p.name for p in pq.iterdir() if p.is_file()) == [MANIFEST]  # nothing written beside it
    res = run("label", "compiled", "x=1", where=pq)
    assert res.exit_code != 0 and "Parquet dataset" in res.stderr and "read-only" in res.stderr


def test_dashboard_serves_the_dataset(exported):
    """`kernelscope dashboard --db DIR` over an export: the traces list and a trace's pages read the dataset
    (open_store opens a dataset folder read-only), as they read the store."""
    from kernelscope.dashboard.app import create_app

    db, pq, _ = exported
    with open_store(db, read_only=True) as store:
        tid, name = store.con.execute("SELECT trace_id, name FROM traces WHERE name = 'ddp_rank0'").fetchone()

    def page(client, pathname):
        body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
                "inputs": [{"id": "url", "property": "pathname", "value": pathname}],
                "changedPropIds": ["url.pathname"], "state": [{"id": "url", "property": "search", "value": ""}]}
        res = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
        assert res.status_code == 200, pathname
        return json.dumps(json.loads(res.get_data(as_text=True)))  # paths unescaped

    over_store, over_pq = (create_app(str(p)).server.test_client() for p in (db, pq))
    for path in ("/", f"/trace/{tid}/overview", f"/trace/{tid}/operators"):
        got = page(over_pq, path)
        assert "Cannot read the store" not in got, got[:500]
        assert got.replace(str(pq), "DB") == page(over_store, path).replace(str(db), "DB"), path
    assert name in page(over_pq, "/") and tid in page(over_pq, f"/trace/{tid}/overview")
