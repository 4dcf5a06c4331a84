"""Store opening, migrations, locking, and the locked-down read-only SQL connection."""

from __future__ import annotations

import subprocess
import sys
import time

import duckdb
import pandas as pd
import pytest

from kernelscope.errors import KernelscopeError, StoreError, StoreLockedError
from kernelscope.storage.queries import run_readonly_sql
from kernelscope.storage.store import code_schema_version, default_db_path, open_store


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.delenv("KERNELSCOPE_DB", raising=False)
    assert str(default_db_path()) == "kernelscope.duckdb"
    monkeypatch.setenv("KERNELSCOPE_DB", str(tmp_path / "x.duckdb"))
    assert default_db_path() == tmp_path / "x.duckdb"


def test_create_migrate_and_reopen(tmp_path):
    p = tmp_path / "s.duckdb"
    with pytest.raises(StoreError, match="no store at .*kernelscope ingest"):
        open_store(p, read_only=True)
    with open_store(p) as s:
        assert s.schema_version() == code_schema_version() >= 1
        assert s.query("SELECT count(*) AS n FROM traces").n[0] == 0
    with open_store(p, read_only=True) as s:
        assert s.read_only and s.query_arrow("SELECT count(*) AS n FROM cpu_ops").num_rows == 1
        with pytest.raises(duckdb.Error):
            s.con.execute("DELETE FROM traces")


def test_a_new_store_gets_every_migration_or_none(tmp_path, monkeypatch):
    """A new store takes every migration in one transaction: when one of them fails, the file holds no table
    of the earlier ones (a store with half a schema would open as a kernelscope store that lacks tables);
    when none fails, every version is recorded."""
    from kernelscope.storage import store as store_mod

    shipped = store_mod.migrations()
    monkeypatch.setattr(store_mod, "migrations", lambda: [*shipped, (999, "999_bad.sql", "CREATE TABLE (")])
    p = tmp_path / "s.duckdb"
    with pytest.raises(StoreError, match="cannot migrate store .* to schema 999_bad.sql"):
        open_store(p)
    con = duckdb.connect(str(p))
    assert con.execute("SELECT count(*) FROM information_schema.tables").fetchall() == [(0,)]
    con.close()
    monkeypatch.setattr(store_mod, "migrations", lambda: shipped)
    with open_store(p) as s:
        assert sorted(s.query("SELECT version FROM schema_version")["version"]) == [v for v, _, _ in shipped]


def test_not_a_store_and_newer_schema(tmp_path):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"hello" * 1000)
    with pytest.raises(StoreError, match="not a kernelscope store"):
        open_store(junk)
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE t (a INT)").close()
    with pytest.raises(StoreError, match="not a kernelscope store"):
        open_store(other)
    newer = tmp_path / "newer.duckdb"
    open_store(newer).close()
    con = duckdb.connect(str(newer))
    con.execute("INSERT INTO schema_version VALUES (999, '999_future.sql', 0)")
    con.close()
    with pytest.raises(StoreError, match="upgrade kernelscope"):
        open_store(newer)


def test_second_writer_fails_fast(tmp_path):
    p = tmp_path / "s.duckdb"
    open_store(p).close()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time, duckdb; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); time.sleep(60)",
         str(p)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        with pytest.raises(StoreLockedError) as info:
            open_store(p)
        assert time.monotonic() - t0 < 5.0
        msg = str(info.value)
        assert f"PID {holder.pid}" in msg and "locked" in msg and "\n" not in msg
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def db(tmp_path):
    p = tmp_path / "s.duckdb"
    open_store(p).close()
    return p


def test_readonly_sql_reads(db):
    df = run_readonly_sql(db, "SELECT count(*) AS n FROM traces")
    assert df.n[0] == 0
    df = run_readonly_sql(db, "SELECT range AS i FROM range(100)", max_rows=7)
    assert list(df.i) == list(range(7))


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM traces",
        "CREATE TABLE x (a INT)",
        "COPY (SELECT 1) TO '{tmp}/out.csv'",
        "SELECT * FROM read_csv('/etc/hostname')",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET threads = 1",
        "SET enable_external_access = true",
        "ATTACH '{tmp}/other.duckdb' AS o",
    ],
)
def test_readonly_sql_refuses(db, tmp_path, sql):
    with pytest.raises(KernelscopeError) as info:
        run_readonly_sql(db, sql.format(tmp=tmp_path))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "other.duckdb").exists()


def test_readonly_sql_times_out(db):
    t0 = time.monotonic()
    with pytest.raises(KernelscopeError, match="time limit"):
        run_readonly_sql(db, "SELECT count(*) FROM range(100000000000) a, range(1000) b", timeout_s=0.5)
    assert time.monotonic() - t0 < 10


def test_a_store_missing_a_lower_migration_gets_it(tmp_path):
    """A store made between two releases can have 4 applied but not 3: opening it writable applies 3
    (with its backfill), read-only names what is missing."""
    from pathlib import Path

    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.store import migrations

    p = tmp_path / "s.duckdb"
    with open_store(p) as store:
        trace = Path(__file__).resolve().parents[1] / "data" / "probe_train.json.gz"
        (res,) = ingest_paths(store, [trace], progress=False)
        assert res.status == "ingested"
        n_splits = store.query("SELECT count(*) AS n FROM activity_splits")["n"].iloc[0]
    versions = [v for v, _, _ in migrations()]
    assert 3 in versions and max(versions) > 3
    con = duckdb.connect(str(p))
    con.execute("DROP TABLE op_kernels; DROP TABLE op_launch; DROP TABLE activity_splits")
    con.execute("DELETE FROM schema_version WHERE version = 3")
    con.close()
    with pytest.raises(StoreError, match="lacks schema migration"):
        open_store(p, read_only=True)
    with open_store(p) as store:
        assert 3 in set(store.query("SELECT version FROM schema_version")["version"])
        # the migration's backfill rebuilt the derived rows of the trace already stored
        assert store.query("SELECT count(*) AS n FROM activity_splits")["n"].iloc[0] == n_splits > 0
        assert n_splits == store.query("SELECT count(*) AS n FROM gpu_activities "
                                       "WHERE launch_id IS NOT NULL")["n"].iloc[0]
    open_store(p, read_only=True).close()


def test_every_connection_turns_off_compressed_materialization(tmp_path):
    """DuckDB 2.0.0 summed wrongly with it on (store.disable_bad_optimizers); store, read-only and
    user-SQL connections all carry the setting."""
    p = tmp_path / "s.duckdb"
    open_store(p).close()
    for ro in (False, True):
        with open_store(p, read_only=ro) as store:
            got = store.con.execute("SELECT current_setting('disabled_optimizers')").fetchone()[0]
            assert "compressed_materialization" in str(got)
    df = run_readonly_sql(p, "SELECT current_setting('disabled_optimizers') AS v")
    assert "compressed_materialization" in str(df["v"].iloc[0])


def _undo_migration(path, version: int, drop_sql: str) -> None:
    """Make ``path`` a store from before schema ``version``: drop what it added and forget it was applied."""
    con = duckdb.connect(str(path))
    con.execute(drop_sql)
    con.execute("DELETE FROM schema_version WHERE version = ?", [version])
    con.close()


def test_schema_5_backfill_equals_ingest(tmp_path):
    """A store from before schema 5 gets idle_gaps, idle_pieces and queued_intervals for its traces when opened
    writable, row for row what ingest writes (the migration runs the ingest code, storage/idle.py)."""
    from pathlib import Path

    from kernelscope.storage.ingest import ingest_paths

    tables = {"idle_gaps": "device, gap_start_ns", "idle_pieces": "device, gap_start_ns, ns, category, op_id",
              "queued_intervals": "device, stream, start_ns, end_ns"}
    p = tmp_path / "s.duckdb"
    root = Path(__file__).resolve().parents[2] / "sample_traces"
    with open_store(p) as store:
        for trace in (root / "llama_decode" / "trace.json.gz", root / "small_kernels_graph" / "trace.json.gz"):
            (res,) = ingest_paths(store, [trace], progress=False)
            assert res.status == "ingested"
        before = {t: store.query(f"SELECT * FROM {t} ORDER BY trace_id, {k}") for t, k in tables.items()}
    assert all(len(df) > 0 for df in before.values())
    assert before["idle_pieces"]["category"].nunique() >= 3
    _undo_migration(p, 5, "DROP TABLE idle_gaps; DROP TABLE idle_pieces; DROP TABLE queued_intervals")
    with open_store(p) as store:
        for t, k in tables.items():
            pd.testing.assert_frame_equal(store.query(f"SELECT * FROM {t} ORDER BY trace_id, {k}"), before[t])


def test_schema_6_backfill_equals_ingest(tmp_path):
    """op_signatures and gpu_activities.leaf_sig_id are filled for stored traces by the migration as ingest
    fills them; each activity's signature is its leaf operator's (name, shapes, dtypes, strides, inputs)."""
    from pathlib import Path

    from kernelscope.storage.ingest import ingest_paths

    p = tmp_path / "s.duckdb"
    root = Path(__file__).resolve().parents[2] / "sample_traces"
    sig_sql = ("SELECT a.trace_id, a.activity_id, s.name, s.input_dims, s.input_types, s.input_strides, "
               "s.concrete_inputs FROM gpu_activities a LEFT JOIN op_signatures s "
               "ON s.trace_id = a.trace_id AND s.sig_id = a.leaf_sig_id ORDER BY 1, 2")
    with open_store(p) as store:
        for trace in (root / "train_step" / "trace.json.gz", root / "llama_prefill_b2" / "trace.json.gz"):
            (res,) = ingest_paths(store, [trace], progress=False)
            assert res.status == "ingested"
        sigs = store.query("SELECT * FROM op_signatures ORDER BY trace_id, sig_id")
        by_sig = store.query(sig_sql)
        by_op = store.query(sig_sql.replace("op_signatures s", "cpu_ops s").replace("s.sig_id = a.leaf_sig_id",
                                                                                   "s.op_id = a.leaf_op_id"))
    pd.testing.assert_frame_equal(by_sig, by_op)  # the signature id stands for the leaf operator's columns
    assert by_sig["name"].notna().sum() > 1000 and 10 < len(sigs) < 200
    _undo_migration(p, 6, "DROP TABLE op_signatures; ALTER TABLE gpu_activities DROP COLUMN leaf_sig_id")
    with open_store(p) as store:
        pd.testing.assert_frame_equal(store.query("SELECT * FROM op_signatures ORDER BY trace_id, sig_id"), sigs)
        pd.testing.assert_frame_equal(store.query(sig_sql), by_sig)


def test_schema_7_backfill_equals_ingest(tmp_path):
    """device_time is filled for stored traces by the migration as ingest fills it (the "device_time" step,
    collectives.insert_device_time), on a two-rank run with collectives; compute + exposed comm + exposed memcpy = busy on every device."""
    from conftest import ddp2_copy

    p = ddp2_copy(tmp_path / "s.duckdb")  # ingest_paths of sample_traces/ddp2 (every rank ingested), once per session
    with open_store(p) as store:
        before = store.query("SELECT * FROM device_time ORDER BY trace_id, device")
    assert len(before) == 2 and (before["comm_only_ns"] > 0).all()
    assert (before.compute_ns + before.exposed_comm_ns + before.exposed_memcpy_ns == before.busy_ns).all()
    _undo_migration(p, 7, "DROP TABLE device_time")
    with open_store(p) as store:
        pd.testing.assert_frame_equal(store.query("SELECT * FROM device_time ORDER BY trace_id, device"), before)
