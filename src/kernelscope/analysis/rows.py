"""A query's rows as plain Python values, for analyses that read scalars: ``query_rows`` (every row as a dict)
and ``query_row`` (the first row, ``{}`` when there is none). Numpy/pandas scalars become Python ones and
missing values (NaN, NA) become None, as ``result.py_scalar`` defines."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .result import column_rows, py_scalar


def query_rows(store, sql: str, **params) -> list[dict[str, Any]]:
    """Every row of ``store.query(sql, params)`` as a dict of plain Python values."""
    df = store.query(sql, params)
    if not isinstance(df, pd.DataFrame):
        df = pd.DataFrame(df)
    return [{c: py_scalar(v) for c, v in zip(df.columns, row)} for row in column_rows(df)]


def query_row(store, sql: str, **params) -> dict[str, Any]:
    """The first row of the query as a dict of plain Python values; ``{}`` when it returns no row."""
    rows = query_rows(store, sql, **params)
    return rows[0] if rows else {}
