"""tests/tables.py's table_diffs, which the derivation tests rely on to prove two stores equal: it must see a
changed value, a missing or duplicated row and a NULL where a value was, and say nothing of equal tables."""

from __future__ import annotations

import duckdb
from tables import table_diffs


def _store(path, rows):
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE t (trace_id VARCHAR, a BIGINT, b VARCHAR, l INTEGER[])")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    return path


BASE = [("x", 1, "k", [1, 2]), ("x", 2, None, None), ("y", 3, "m", [])]


def test_equal_tables_and_each_kind_of_difference(tmp_path):
    a = _store(tmp_path / "a.duckdb", BASE)
    assert table_diffs(a, _store(tmp_path / "same.duckdb", list(reversed(BASE))), ["t"]) == {}
    changed = {
        "value": [("x", 1, "k", [1, 2]), ("x", 2, None, None), ("y", 4, "m", [])],
        "list": [("x", 1, "k", [2, 1]), ("x", 2, None, None), ("y", 3, "m", [])],
        "null": [("x", 1, "k", [1, 2]), ("x", 2, "", None), ("y", 3, "m", [])],
        "duplicate": [*BASE, ("y", 3, "m", [])],
        "missing": BASE[:2],
        "moved": [("x", 1, "k", [1, 2]), ("x", 2, "m", None), ("y", 3, None, [])],  # same values, other rows
    }
    for name, rows in changed.items():
        d = table_diffs(a, _store(tmp_path / f"{name}.duckdb", rows), ["t"])
        assert set(d) == {"t"} and "rows; only in" in d["t"], (name, d)
    # only the given traces are compared: y's rows differ, x's do not
    y_differs = _store(tmp_path / "y.duckdb", [*BASE[:2], ("y", 9, "m", [])])
    assert table_diffs(a, y_differs, ["t"], traces={"x"}) == {}
    assert set(table_diffs(a, y_differs, ["t"], traces={"y"})) == {"t"}
