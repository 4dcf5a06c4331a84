"""Rows from Python into a table: ``insert_rows``, a few hundred rows per ``INSERT ... VALUES`` statement.

DuckDB's ``executemany`` runs one statement per row (about 0.75 ms each on this project's 2-core machines: 34 ms
for a run directory's 40 timing rows, 1.5 s for 2,000 rows); one statement of 500 rows takes a few ms.
"""

from __future__ import annotations

#: Rows per INSERT statement (its parameter list grows with it).
ROWS_PER_INSERT = 500


def insert_rows(con, into: str, rows) -> None:
    """``INSERT INTO <into> VALUES (..), (..)`` over ``rows`` (tuples of one width); ``into`` is a table name,
    with its column list where given (the caller's identifiers, never user input). Each value binds as a
    parameter and is cast to its column's type, as with ``executemany``."""
    rows = list(rows)
    for i in range(0, len(rows), ROWS_PER_INSERT):
        chunk = rows[i:i + ROWS_PER_INSERT]
        marks = "(" + ", ".join("?" * len(chunk[0])) + ")"
        con.execute(f"INSERT INTO {into} VALUES " + ", ".join([marks] * len(chunk)), [v for r in chunk for v in r])
