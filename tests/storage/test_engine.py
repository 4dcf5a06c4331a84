"""`kernelscope ingest RUN --engine ray` (storage/engine.py): the sample DDP run ingested by one Ray task per rank on a
local Ray instance stores the same rows as the local process pool, table by table, and `analyze comm` says the same;
without Ray installed the engine is refused in one line before any work."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import duckdb
from click.testing import CliRunner
from conftest import SAMPLES, ddp2_copy
from tables import dataset_diffs

from kernelscope.cli import cli
from kernelscope.storage.export import export_parquet
from kernelscope.storage.store import open_store

#: Columns that say when or how long an ingest took, not what it stored.
VOLATILE = ("ingested_ns", "applied_ns")


def _tables(db: Path) -> dict[str, list]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                                    "AND table_type = 'BASE TABLE' ORDER BY 1").fetchall():
            cols = [c for (c,) in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                                              "ORDER BY ordinal_position", [table]).fetchall() if c not in VOLATILE]
            out[table] = sorted(map(repr, con.execute(f'SELECT {", ".join(cols)} FROM "{table}"').fetchall()))
        return out
    finally:
        con.close()


def test_without_ray_the_engine_is_one_line(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    db = tmp_path / "s.duckdb"
    res = CliRunner().invoke(cli, ["ingest", str(SAMPLES / "ddp2"), "--engine", "ray", "--db", str(db)])
    assert res.exit_code != 0 and res.stdout == ""
    assert res.stderr.strip().splitlines() == ["kernelscope: --engine ray needs Ray, which is not installed: "
                                               "pip install 'kernelscope[ray]'"]
    assert not db.exists()


def test_ray_stores_the_rows_the_local_pool_stores(tmp_path):
    """Also ``--parquet``: the Ray tasks write the ranks' partitions of the export dataset themselves."""
    import ray

    local = ddp2_copy(tmp_path / "local.duckdb")  # `ingest_paths` of sample_traces/ddp2: the local pool
    ray_db = tmp_path / "ray.duckdb"
    # one local instance for both ingests (an ingest starts and stops its own only when none is running)
    ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    try:
        res = CliRunner().invoke(cli, ["ingest", str(SAMPLES / "ddp2"), "--engine", "ray", "--db", str(ray_db)])
        pq = tmp_path / "published"
        res_pq = CliRunner().invoke(cli, ["ingest", str(SAMPLES / "ddp2"), "--engine", "ray", "--parquet", str(pq)])
    finally:
        ray.shutdown()
    assert res.exit_code == 0, res.stderr
    assert res_pq.exit_code == 0 and "ranks parsed by 2 Ray tasks" in res_pq.stdout, res_pq.stderr
    assert res.stdout.count("ingested  ") == 2 and "ranks parsed by 2 Ray tasks" in res.stdout
    a, b = _tables(local), _tables(ray_db)
    assert a.keys() == b.keys()
    assert {t: len(rows) for t, rows in a.items()} == {t: len(rows) for t, rows in b.items()}
    assert sum(len(rows) for rows in a.values()) > 10_000
    assert [t for t in a if a[t] != b[t]] == []
    comm = [CliRunner().invoke(cli, ["analyze", "comm", "ddp_rank0", "--json", "--db", str(db)]) for db in (local, ray_db)]
    assert comm[0].exit_code == 0 and json.loads(comm[0].stdout) == json.loads(comm[1].stdout)
    exported = tmp_path / "exported"  # last: open_store shares one instance, _tables connects its own
    with open_store(local, read_only=True) as store:
        export_parquet(store, exported)
    assert dataset_diffs(pq, exported, VOLATILE) == {}
