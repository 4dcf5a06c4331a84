"""Whole stored tables as DataFrames, by name (the notebook API's ``store.table(name, trace)``).

Any table of the store's schema can be read by its name (``traces``, ``gpu_activities``, ``cpu_ops``,
``launches``, ``annotations``, ``python_calls``, ...; :func:`table_names` lists them), plus three views by
activity kind: ``kernels``, ``memcpys`` and ``memsets`` (``gpu_activities`` rows of that ``kind``). A trace
filter applies to tables with a ``trace_id`` column. Rows come ordered by ``trace_id`` and the first time column
the table has (``start_ns``, ``ts_ns``, ``gap_start_ns``), then by its first id column, so two reads of one
store give the same frame. Column meanings: the schema files (``storage/schema/*.sql``) and docs/metrics.md.
"""

from __future__ import annotations

import pandas as pd

from ..errors import UsageError

#: Views over gpu_activities by kind.
KIND_VIEWS = {"kernels": "kernel", "memcpys": "memcpy", "memsets": "memset"}
_TIME_COLUMNS = ("start_ns", "ts_ns", "gap_start_ns")
_ID_SUFFIX = "_id"


def table_names(store) -> list[str]:
    """The store's tables (its schema's, without the bookkeeping ``schema_version``), sorted, and the views
    ``kernels``, ``memcpys``, ``memsets``."""
    rows = store.con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                             "AND table_type = 'BASE TABLE'").fetchall()
    names = {r[0] for r in rows} - {"schema_version"}
    return sorted(names | set(KIND_VIEWS))


def _columns(store, table: str) -> list[str]:
    rows = store.con.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                             "AND table_name = ? ORDER BY ordinal_position", [table]).fetchall()
    return [r[0] for r in rows]


def table_frame(store, name: str, trace_id: str | None = None, limit: int | None = None) -> pd.DataFrame:
    """The table (or kind view) ``name`` as a DataFrame, only ``trace_id``'s rows when given (tables without
    ``trace_id`` are returned whole), at most ``limit`` rows. An unknown name is a user error listing the
    names."""
    known = table_names(store)
    if name not in known:
        raise UsageError(f"no table named {name!r} in the store; tables: {', '.join(known)}.")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise UsageError(f"limit= takes a whole number of rows >= 0, not {limit!r}.")
    table = "gpu_activities" if name in KIND_VIEWS else name  # from the checked list: safe to quote
    cols = _columns(store, table)
    where, params = [], []
    if name in KIND_VIEWS:
        where.append("kind = ?")
        params.append(KIND_VIEWS[name])
    if trace_id is not None and "trace_id" in cols:
        where.append("trace_id = ?")
        params.append(trace_id)
    order = [c for c in ("trace_id",) if c in cols]
    order += [c for c in _TIME_COLUMNS if c in cols][:1]
    order += [c for c in cols if c.endswith(_ID_SUFFIX) and c != "trace_id"][:1]
    sql = f'SELECT * FROM "{table}"' + (" WHERE " + " AND ".join(where) if where else "")
    sql += (" ORDER BY " + ", ".join(f'"{c}"' for c in order) if order else "")
    sql += f" LIMIT {int(limit)}" if limit is not None else ""
    return store.con.execute(sql, params).df()
