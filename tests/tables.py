"""Row-for-row comparison of tables in two DuckDB store files, done by DuckDB (EXCEPT ALL both ways: a multiset
difference, so duplicate rows count and NULLs compare equal to NULLs), not by fetching every row into Python and
sorting it. Columns are matched by name. Tables whose row count and sum of row hashes agree are taken as equal
without the EXCEPT ALLs (two multisets of rows that differ give the same 64-bit hash sum by chance only).
"""

from __future__ import annotations

from pathlib import Path

import duckdb


def _columns(con, db: str, table: str) -> list[str]:
    return sorted(c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND table_name = ?", [db, table]).fetchall())


def table_diffs(a: Path, b: Path, tables, traces=None, show: int = 3) -> dict[str, str]:
    """Per table of ``tables`` whose rows differ between store files ``a`` and ``b`` (optionally only rows of
    ``traces``, by ``trace_id``): a one-line description with up to ``show`` rows each side lacks. Equal
    tables are left out, so ``{}`` means every table is equal (same columns, same rows with multiplicity)."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
        con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
        out = {}
        for table in tables:
            cols_a, cols_b = _columns(con, "a", table), _columns(con, "b", table)
            if cols_a != cols_b:
                out[table] = f"columns differ: {cols_a} vs {cols_b}"
                continue
            sel = ", ".join(f'"{c}"' for c in cols_a)
            where = "" if traces is None else " WHERE list_contains($traces, trace_id)"
            params = {} if traces is None else {"traces": sorted(traces)}
            qa, qb = f'SELECT {sel} FROM a."{table}"{where}', f'SELECT {sel} FROM b."{table}"{where}'
            # the multiset's fingerprint first (row count, sum of row hashes): one scan of each side, where
            # the two EXCEPT ALLs hash every row into a table; rows are listed only when it differs
            fa, fb = (con.execute(f"SELECT count(*), sum(hash({sel})::HUGEINT) FROM ({q})", params).fetchone()
                      for q in (qa, qb))
            if fa == fb:
                continue
            n_a, n_b = fa[0], fb[0]
            only_a = con.execute(f"{qa} EXCEPT ALL {qb} LIMIT {show}", params).fetchall()
            only_b = con.execute(f"{qb} EXCEPT ALL {qa} LIMIT {show}", params).fetchall()
            if n_a != n_b or only_a or only_b:
                out[table] = f"{n_a} vs {n_b} rows; only in {a.name}: {only_a}; only in {b.name}: {only_b}"
        return out
    finally:
        con.close()


def dataset_diffs(a: Path, b: Path, skip_columns=(), show: int = 3) -> dict[str, str]:
    """``table_diffs`` for two Parquet datasets of ``kernelscope export --parquet`` (their manifests name the
    tables; partition columns read from the paths), leaving out the columns ``skip_columns``."""
    import json

    ma, mb = (json.loads((p / "kernelscope_export.json").read_text())["tables"] for p in (a, b))
    out = {} if ma.keys() == mb.keys() else {"(tables)": f"{sorted(ma)} vs {sorted(mb)}"}
    con = duckdb.connect()
    try:
        for table in sorted(set(ma) & set(mb)):
            ia, ib = ma[table], mb[table]
            if (ia["columns"], ia["partitioned_by"], ia["rows"]) != (ib["columns"], ib["partitioned_by"], ib["rows"]):
                out[table] = f"manifest differs: {ia} vs {ib}"
                continue
            if not ia["rows"]:
                continue
            cols = ", ".join(f'"{c}"' for c, _t in ia["columns"] if c not in skip_columns)
            sel = [f"SELECT {cols} FROM read_parquet('{p / table}/**/*.parquet', hive_partitioning = true)"
                   for p in (a, b)]
            only_a = con.execute(f"{sel[0]} EXCEPT ALL {sel[1]} LIMIT {show}").fetchall()
            only_b = con.execute(f"{sel[1]} EXCEPT ALL {sel[0]} LIMIT {show}").fetchall()
            if only_a or only_b:
                out[table] = f"only in {a.name}: {only_a}; only in {b.name}: {only_b}"
        return out
    finally:
        con.close()
