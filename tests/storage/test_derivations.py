"""The derivation registry (storage/derivations.py): every derived table is filled by exactly one registered step,
and a backfilled store equals a fresh ingest, table by table, for every step.

One store is ingested fresh (a run of two ranks through the rank workers, two collector run directories and a
file through the one-file path). Then, on copies of it:

- per stored step, its migration is undone (its tables dropped, its version forgotten) and the store opened
  again: the migration re-creates the tables and its backfill fills them with the step ingest runs;
- per step (stored or staged), its rows are deleted and that step alone is run again (a staged step on the
  trace staged again from its file), with the steps that fill columns of its tables;
- a store at schema 2 (every later migration undone) is migrated to now.

Each time every derived table must hold exactly the fresh store's rows (tests/tables.py compares them). A step missing from the
registry leaves a table no step claims; a step that fills other rows, or another step's rows as a side effect,
makes some table differ.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import duckdb
import pytest
from tables import table_diffs

from kernelscope.parsers import open_trace
from kernelscope.storage import derivations, staging
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.queries import remove_traces
from kernelscope.storage.store import migrations, open_store

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
#: A run of two ranks with collectives (rank workers), two collector run directories with telemetry (one of
#: CUDA graphs) and a plain file with Python calls (the one-file path).
INPUTS = [SAMPLES / "ddp2", SAMPLES / "train_step", SAMPLES / "small_kernels_graph",
          SAMPLES / "qwen2_train_full" / "trace.json.gz"]
#: Tables with a trace_id that hold what a trace brought or its run, not rows derived from its events.
RECORDED = {"traces", "labels", "telemetry", "timings", "rank_clocks", "ncu_kernels"}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("derivations") / "fresh.duckdb"
    with open_store(db) as store:
        res = ingest_paths(store, INPUTS, progress=False)
        assert [r.status for r in res] == ["ingested"] * 5, [(r.path, r.message) for r in res]
    return db


def _copy(fresh: Path, tmp_path: Path) -> Path:
    db = tmp_path / "copy.duckdb"
    shutil.copy(fresh, db)
    return db


def _derived_tables() -> list[str]:
    return sorted({t for s in derivations.STEPS.values() for t in s.tables})


def _assert_same(db: Path, fresh: Path, traces: set[str] | None = None) -> None:
    """Every derived table of ``db`` holds exactly the fresh store's rows (optionally of ``traces`` only)."""
    assert table_diffs(db, fresh, _derived_tables(), traces) == {}


def _created(version: int) -> list[tuple[str, str | None]]:
    """What migration ``version`` creates: (table, None) per CREATE TABLE, (table, column) per ADD COLUMN."""
    sql = next(s for v, _name, s in migrations() if v == version)
    return ([(t, None) for t in re.findall(r"^CREATE TABLE (\w+)", sql, re.M)]
            + re.findall(r"^ALTER TABLE (\w+) ADD COLUMN (\w+)", sql, re.M))


def _undo(db: Path, versions) -> None:
    """Make ``db`` a store from before ``versions``: drop what they created (newest first), forget them."""
    con = duckdb.connect(str(db))
    for version in sorted(versions, reverse=True):
        for table, column in reversed(_created(version)):
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}" if column else f"DROP TABLE {table}")
        con.execute("DELETE FROM schema_version WHERE version = ?", [version])
    con.close()


def _fills(step) -> set[tuple[str, str | None]]:
    return {tuple(f.split(".")) if "." in f else (f, None) for f in step.fills}


def test_every_derived_table_is_filled_by_one_registered_step(fresh):
    con = duckdb.connect(str(fresh), read_only=True)
    with_trace = {t for (t,) in con.execute(
        "SELECT DISTINCT table_name FROM information_schema.columns WHERE column_name = 'trace_id'").fetchall()}
    columns = set(con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall())
    tables = [t for s in derivations.STEPS.values() for t in s.tables]
    assert len(tables) == len(set(tables))  # no table filled by two steps
    assert set(tables) == with_trace - RECORDED  # every derived table has its step
    for step in derivations.STEPS.values():
        assert step.source in ("staged", "stored")
        for table, column in _fills(step):
            assert (table, column or "trace_id") in columns, (step.name, table, column)
        for table, column in _fills(step):  # ingest ran the step: its rows are there
            n = con.execute(f"SELECT count({column or '*'}) FROM {table}").fetchone()[0]
            assert n > 0, (step.name, table, column)
    con.close()
    order = [s.name for s in derivations.ordered()]
    assert order[0] == "events" and sorted(order) == sorted(derivations.STEPS)
    for step in derivations.STEPS.values():
        assert all(n in derivations.STEPS and order.index(n) < order.index(step.name) for n in step.needs), step


@pytest.mark.parametrize("name", [s.name for s in derivations.STEPS.values() if s.source == "stored"])
def test_migration_backfill_equals_a_fresh_ingest(fresh, tmp_path, name):
    """The step's migration holds the schema only and creates exactly what the steps of its version fill;
    undone and applied again on a store of traces, its backfill fills those tables as ingest did."""
    step = derivations.STEPS[name]
    sql = next(s for v, _n, s in migrations() if v == step.schema)
    assert not re.search(r"^\s*(INSERT|UPDATE|DELETE)\b", sql, re.M | re.I), step.schema
    same_version = set().union(*(_fills(s) for s in derivations.STEPS.values() if s.schema == step.schema))
    assert set(_created(step.schema)) == same_version
    db = _copy(fresh, tmp_path)
    _undo(db, [step.schema])
    with open_store(db) as store:
        assert store.schema_version() == migrations()[-1][0]
    _assert_same(db, fresh)


def _restage_and_fill(store, step, trace_id: str, source: str) -> None:
    """Stage the trace's file again and run the staged ``step`` on it, as ingest does."""
    with staging.scratch(store) as folder:
        reader = open_trace(Path(source))
        staging.raw_view(store.con, staging.stage(reader, folder / "raw.parquet"))
        staged = staging.derive_staged(store.con, folder, reader.meta, source, facts={})
        step.fill(store.con, trace_id, staged.base)


@pytest.mark.parametrize("name", list(derivations.STEPS))
def test_each_step_alone_refills_its_rows(fresh, tmp_path, name):
    """Delete one step's rows of every trace and run that step alone again (with the steps that fill columns of
    its tables): every derived table equals the fresh store's, so the step fills its rows and nothing else
    does (no derivation as a side effect of another)."""
    step = derivations.STEPS[name]
    column_fillers = [s for s in derivations.ordered()
                      if s is not step and any(t in step.tables for t, c in _fills(s) if c)]
    db = _copy(fresh, tmp_path)
    with open_store(db) as store:
        con = store.con
        traces = con.execute("SELECT trace_id, source FROM traces ORDER BY trace_id").fetchall()
        for table, column in _fills(step):
            con.execute(f"UPDATE {table} SET {column} = NULL" if column else f"DELETE FROM {table}")
        for trace_id, source in traces:
            if step.source == "staged":
                _restage_and_fill(store, step, trace_id, source)
            else:
                step.fill(con, trace_id)
            for other in column_fillers:  # refilled rows lack the columns other steps set: run those again
                assert other.source == "stored", other
                for table in other.tables:
                    con.execute(f"DELETE FROM {table} WHERE trace_id = ?", [trace_id])
                other.fill(con, trace_id)
    _assert_same(db, fresh)


def test_a_store_at_schema_2_migrates_to_what_a_fresh_ingest_stores(fresh, tmp_path):
    """A store written before the launch splits (schema 2) gets every derived table of its traces from the
    migrations' backfills, row for row what ingest stores now. (The run's traces are removed first: their
    collectives come from the staged events, which an old store no longer has; so do memory events, which stay
    empty: the memory analysis then asks for a re-ingest.)"""
    db = _copy(fresh, tmp_path)
    with open_store(db) as store:
        run = [t for (t,) in store.con.execute(
            "SELECT trace_id FROM traces WHERE run_id IN (SELECT run_id FROM runs)").fetchall()]
        assert len(run) == 2
        remove_traces(store, run)
        kept = {t for (t,) in store.con.execute("SELECT trace_id FROM traces").fetchall()}
    _undo(db, [v for v, _n, _s in migrations() if v > 2])
    with open_store(db) as store:
        assert store.schema_version() == migrations()[-1][0]
    # tables of staged steps newer than schema 2 come from events an old store no longer has: they stay empty
    late_staged = {t for s in derivations.STEPS.values() if s.source == "staged" and s.schema > 2 for t in s.tables}
    with duckdb.connect(str(fresh), read_only=True) as con:
        want = {t: con.execute(f"SELECT count(*) FROM {t} WHERE list_contains($k, trace_id)", {"k": sorted(kept)})
                .fetchone()[0] for t in _derived_tables()}
    assert all(want[t] for t in want if t not in late_staged), want
    assert want["memory_events"], "the kept traces include one recorded with profile_memory=True"
    with duckdb.connect(str(db), read_only=True) as con:
        assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in late_staged} == dict.fromkeys(
            late_staged, 0)
    assert table_diffs(db, fresh, sorted(set(_derived_tables()) - late_staged), kept) == {}
