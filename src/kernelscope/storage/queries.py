"""Store-level queries shared by the CLI and the dashboard: listing, resolving, labelling, removing,
and user SQL in a locked-down read-only connection."""

from __future__ import annotations

import pathlib
import threading

from ..errors import KernelscopeError, StoreError, TraceNotFound, UsageError
from .ingest import insert_labels, label_number


def parse_label(text: str) -> tuple[str, str, float | None]:
    """``"batch=8"`` -> ``("batch", "8", 8.0)``; the number is None when the value is not numeric."""
    key, sep, value = str(text).partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"label {text!r} is not key=value (e.g. batch=8)")
    return key, value, label_number(value)


def list_traces(store):
    """One row per trace, in ingest order.

    Columns: trace_id, name, source, format, rank, labels (dict key -> text), devices (sorted list of
    devices with GPU activities), kernels (kernel count), gpu_span_ns (first GPU activity start to last
    GPU activity end over all devices; null without activities), ingested_ns.
    """
    df = store.query(
        """
        WITH g AS (
            SELECT trace_id, list(DISTINCT device ORDER BY device) FILTER (WHERE device IS NOT NULL)
                       AS devices,
                   count(*) FILTER (WHERE kind = 'kernel') AS kernels,
                   max(end_ns) - min(start_ns) AS gpu_span_ns
            FROM gpu_activities GROUP BY trace_id
        )
        SELECT t.trace_id, t.name, t.source, t.format, t.rank, t.ingested_ns,
               coalesce(g.devices, []) AS devices, coalesce(g.kernels, 0) AS kernels, g.gpu_span_ns
        FROM traces t LEFT JOIN g USING (trace_id)
        ORDER BY t.ingested_ns, t.trace_id
        """
    )
    labels = store.con.execute(
        "SELECT trace_id, key, value_text FROM labels ORDER BY trace_id, key"
    ).fetchall()
    by_trace: dict[str, dict[str, str]] = {}
    for tid, key, value in labels:
        by_trace.setdefault(tid, {})[key] = value
    df["labels"] = [by_trace.get(t, {}) for t in df["trace_id"]]
    df["devices"] = [list(d) if d is not None else [] for d in df["devices"]]
    return df[
        ["trace_id", "name", "source", "format", "rank", "labels", "devices", "kernels",
         "gpu_span_ns", "ingested_ns"]
    ]


def _one(ref: str, level: str, ids: list[str]) -> str | None:
    uniq = sorted(set(ids))
    if len(uniq) == 1:
        return uniq[0]
    if len(uniq) > 1:
        shown = ", ".join(uniq[:5]) + (" ..." if len(uniq) > 5 else "")
        raise UsageError(f"ambiguous: {ref!r} ({level}) matches {shown}; give more of the trace id")
    return None


def resolve_trace(store, ref) -> str:
    """The trace id for ``ref``: a full id, a unique id prefix, a source file name or path, or a name.

    Tried in that order; the first kind that matches decides (ambiguity there is an error).
    """
    ref = str(ref).strip()
    if not ref:
        raise UsageError("empty trace reference; give a trace id, id prefix or file name")
    rows = store.con.execute("SELECT trace_id, source, name FROM traces").fetchall()
    if any(r[0] == ref for r in rows):
        return ref
    for level, ids in (
        ("id prefix", [r[0] for r in rows if r[0].startswith(ref.lower())]),
        ("source file", [r[0] for r in rows if r[1] == ref or pathlib.Path(r[1]).name == ref]),
        ("source path", [r[0] for r in rows if _same_path(r[1], ref)]),
        ("name", [r[0] for r in rows if r[2] == ref]),
    ):
        found = _one(ref, level, ids)
        if found:
            return found
    raise TraceNotFound(
        f"no trace matches {ref!r} in store {store.path}; list them with `kernelscope traces`"
    )


def _same_path(source: str, ref: str) -> bool:
    try:
        return pathlib.Path(ref).expanduser().resolve() == pathlib.Path(source)
    except (OSError, RuntimeError):
        return False


def set_labels(store, trace_id: str, labels: dict) -> None:
    """Set (replace) labels on a stored trace: value_text as given, value_num when numeric."""
    if not store.con.execute("SELECT 1 FROM traces WHERE trace_id = ?", [trace_id]).fetchall():
        raise TraceNotFound(f"no trace {trace_id!r} in store {store.path}")
    store.con.execute("BEGIN TRANSACTION")
    try:
        insert_labels(store.con, trace_id, labels)
        store.con.execute("COMMIT")
    except BaseException:
        store.con.execute("ROLLBACK")
        raise


def trace_tables(con) -> list[str]:
    """Every table of the store that has a trace_id column (so removal covers future tables too)."""
    rows = con.execute(
        """SELECT DISTINCT table_name FROM information_schema.columns
           WHERE table_schema = 'main' AND column_name = 'trace_id' ORDER BY table_name"""
    ).fetchall()
    return [r[0] for r in rows]


def remove_traces(store, trace_ids) -> int:
    """Delete every row of the given traces from every table, and runs left without traces, in one
    transaction; returns traces removed."""
    ids = sorted(set(trace_ids))
    if not ids:
        return 0
    con = store.con
    con.execute("BEGIN TRANSACTION")
    try:
        n = con.execute(
            "SELECT count(*) FROM traces WHERE list_contains(?, trace_id)", [ids]
        ).fetchall()[0][0]
        for table in trace_tables(con):
            con.execute(f'DELETE FROM "{table}" WHERE list_contains(?, trace_id)', [ids])
        # a multi-rank run without any trace left goes too (its ranks are what it describes)
        con.execute("DELETE FROM runs WHERE run_id NOT IN "
                    "(SELECT run_id FROM traces WHERE run_id IS NOT NULL)")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return int(n)


READONLY_CONFIG = {
    "enable_external_access": "false",
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "lock_configuration": "true",
}


def run_readonly_sql(path, sql: str, *, timeout_s: float = 30.0, max_rows: int | None = None):
    """Run user SQL on a separate read-only connection with external access, extension install/load
    and configuration changes disabled; interrupted after ``timeout_s`` seconds.

    Returns a pandas DataFrame (at most ``max_rows`` rows when given). Errors -> KernelscopeError
    carrying DuckDB's first line.
    """
    import duckdb
    import pandas as pd
    import pyarrow as pa

    from .store import _connect

    path = pathlib.Path(path)
    if not path.exists():
        raise StoreError(f"no store at {path}; run `kernelscope ingest` first")
    con = _connect(path, True, READONLY_CONFIG)
    timed_out = threading.Event()

    def _stop():
        timed_out.set()
        con.interrupt()

    timer = threading.Timer(timeout_s, _stop)
    timer.daemon = True
    timer.start()
    try:
        try:
            rel = con.sql(sql)
            if rel is None:
                return pd.DataFrame()
            reader = rel.to_arrow_reader(65_536)
            batches = []
            rows = 0
            for b in reader:
                if max_rows is not None and rows + b.num_rows >= max_rows:
                    batches.append(b.slice(0, max_rows - rows))
                    rows = max_rows
                    break
                batches.append(b)
                rows += b.num_rows
            table = pa.Table.from_batches(batches, schema=reader.schema)
            return table.to_pandas()
        except duckdb.Error as exc:
            if timed_out.is_set():
                raise KernelscopeError(
                    f"query stopped after the {timeout_s:g} s time limit; narrow it or raise --timeout"
                ) from None
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            raise KernelscopeError(f"SQL error: {first}") from None
    finally:
        timer.cancel()
        con.close()
