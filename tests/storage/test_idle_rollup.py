"""idle_rollup (schema 011): the host-wait idle per cause category, per operator and per (operator, category),
against a pandas reference over the stored idle_pieces; a store from before schema 11 gets the same rows when
opened writable (the migration's backfill runs the ingest step)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.store import open_store

ROOT = Path(__file__).resolve().parents[2] / "sample_traces"
KEY = "trace_id, operator NULLS FIRST, category NULLS FIRST"


def _reference(pieces: pd.DataFrame) -> pd.DataFrame:
    """The three kinds of rows from the pieces, by pandas: sums, and distinct (device, gap start) per group."""
    p = pieces.assign(gap=list(zip(pieces["device"].fillna(-1), pieces["gap_start_ns"])))
    rows = []
    for (t, c), g in p.groupby(["trace_id", "category"]):
        rows.append((t, None, c, int(g["ns"].sum()), g["gap"].nunique()))
    ops = p[p["operator"].notna()]
    for (t, o), g in ops.groupby(["trace_id", "operator"]):
        rows.append((t, o, None, int(g["ns"].sum()), g["gap"].nunique()))
    for (t, o, c), g in ops.groupby(["trace_id", "operator", "category"]):
        rows.append((t, o, c, int(g["ns"].sum()), g["gap"].nunique()))
    df = pd.DataFrame(rows, columns=["trace_id", "operator", "category", "idle_ns", "gaps"])
    return df.sort_values(["trace_id", "operator", "category"], na_position="first").reset_index(drop=True)


def test_idle_rollup_matches_pieces_and_backfill(tmp_path):
    p = tmp_path / "s.duckdb"
    with open_store(p) as store:
        (res,) = ingest_paths(store, [ROOT / "llama_decode" / "trace.json.gz"], progress=False)
        assert res.status == "ingested"
        pieces = store.query("SELECT * FROM idle_pieces")
        got = store.query(f"SELECT * FROM idle_rollup ORDER BY {KEY}")
    assert pieces["category"].nunique() >= 3 and pieces["operator"].notna().any()
    want = _reference(pieces)
    pd.testing.assert_frame_equal(got.astype({"idle_ns": "int64", "gaps": "int64"}), want, check_dtype=False)
    # per category and per operator the sums are the trace's host-wait pieces, each piece counted once
    assert got[got["operator"].isna()]["idle_ns"].sum() == pieces["ns"].sum()
    con = duckdb.connect(str(p))
    con.execute("DROP TABLE idle_rollup")
    con.execute("DELETE FROM schema_version WHERE version = 11")
    con.close()
    with open_store(p) as store:
        pd.testing.assert_frame_equal(store.query(f"SELECT * FROM idle_rollup ORDER BY {KEY}"), got)
