"""What ``kernelscope mcp`` answers, as plain functions of a store path returning JSON-safe dicts (the MCP layer,
agents/server.py, only registers them). Each answer is the CLI's JSON for the same question, with two rules for
agents (docs/agents.md):

- **Definitions and trust travel with every number**: an analysis result keeps its ``definition``, ``trust``
  and ``warnings`` (as ``--json`` prints them); ``traces``, ``sql`` and ``schema`` carry a ``definition`` and a
  ``trust`` of their own.
- **Tables are paged, never dumped**: every table becomes ``{"columns", "rows", "total_rows", "offset",
  "limit", "next_offset"}`` holding rows ``[offset, offset + limit)`` of the CLI's table (``next_offset`` null
  on the last page); ``limit`` is at most ``MAX_LIMIT``.

The store is opened read-only for each call (an ingest may run meanwhile); only ``ingest`` writes, and the
server registers it only when started with ``--allow-ingest``.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..analysis.result import json_safe, table_records
from ..errors import UsageError

DEFAULT_LIMIT = 50
MAX_LIMIT = 500

PAGING = ("Tables are paged: each is {columns, rows, total_rows, offset, limit, next_offset}; rows [offset, "
          "offset+limit) of the full table in the CLI's order; call again with offset=next_offset for more "
          "(next_offset is null on the last page).")

TRACES_DEFINITION = (
    "One row per stored trace, as `kernelscope traces --json` prints it: id, name, source (the file ingested), "
    "format, rank, labels (numbers as numbers), devices (with GPU activities), kernels (count), gpu_span_ns "
    "(first to last GPU activity over all devices), ingested_ns, notes (a TRUNCATED trace, a partial run, "
    "negative durations stored as 0, device events set aside). headline (with headline=true): the numbers "
    "`kernelscope diff` compares, from the summary analysis (kernels, kernel_time_ns, busy_ns, gpu_span_ns, "
    "idle_ns, latency_ns) and the launch analysis (tklqt_ns, mean_queue_depth; null without matched launches); "
    "docs/metrics.md defines each.")

SQL_DEFINITION = (
    "One read-only SQL statement on the store, through `kernelscope sql`'s code path (storage.queries."
    "ReadonlySql): no writes, no file or network access, no extensions, no settings changes, one statement, "
    "a time limit (timeout_s, default 30, at most 86400) and a memory bound ($KERNELSCOPE_SQL_MEMORY_LIMIT, "
    "default 1GB). Rows come as `kernelscope sql --json` prints them; only the page asked for is kept, the "
    "rest is counted (total_rows). The schema tool lists the tables and what each column means.")


def _limit(offset: int, limit: int) -> tuple[int, int]:
    if not isinstance(offset, int) or offset < 0:
        raise UsageError(f"offset must be a whole number >= 0, not {offset!r}")
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {limit!r}")
    return offset, limit


def page(rows: list, columns: list[str], offset: int, limit: int, total: int | None = None) -> dict[str, Any]:
    """Rows ``[offset, offset + limit)`` of ``rows`` (already cut when ``total`` is given) as a page."""
    if total is None:
        total, rows = len(rows), rows[offset:offset + limit]
    nxt = offset + limit if offset + limit < total else None
    return {"columns": columns, "rows": rows, "total_rows": total, "offset": offset, "limit": limit,
            "next_offset": nxt}


def paged_result(result, offset: int = 0, limit: int = DEFAULT_LIMIT, table: str | None = None) -> dict[str, Any]:
    """``result.to_dict()`` (what ``--json`` prints) with each table (or only ``table``) paged."""
    offset, limit = _limit(offset, limit)
    if table is not None:
        result.table(table)  # an unknown name: one line naming the tables there are
    out = result.to_dict()
    for name, df in result.tables.items():
        if table is not None and name != table:
            del out[name]
            continue
        out[name] = page(out[name], [str(c) for c in df.columns], offset, limit)
    out["paging"] = PAGING
    return out


def _open(db: str):
    from ..storage.store import open_store

    return open_store(db, read_only=True)


def traces(db: str, headline: bool = False, offset: int = 0, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """Stored traces as ``kernelscope traces --json`` lists them (paged); with ``headline``, each row of the
    page also carries ``headline``: the metrics ``kernelscope diff`` compares."""
    from ..analysis.diff import headline_values
    from ..storage.labels import typed_label
    from ..storage.queries import list_traces

    offset, limit = _limit(offset, limit)
    with _open(db) as store:
        df = list_traces(store).rename(columns={"trace_id": "id"})
        df["labels"] = [{k: typed_label(v) for k, v in lab.items()} for lab in df["labels"]]
        df["devices"] = [[int(d) for d in devs] for devs in df["devices"]]
        rows = table_records(df)
        out = page(rows, [str(c) for c in df.columns], offset, limit)
        if headline:
            for row in out["rows"]:
                row["headline"] = json_safe(headline_values(store, row["id"]))
    return {"traces": out, "definition": TRACES_DEFINITION,
            "trust": "notes name what ingest found wrong with a trace; `summary` has its full trust section.",
            "paging": PAGING}


def analyses() -> dict[str, Any]:
    """Every registered analysis (analysis/registry.py): name, description, whether it takes several traces,
    its options (name and default, from its function), and its definition."""
    from ..analysis import ANALYSES

    rows = []
    for a in ANALYSES.values():
        params = list(inspect.signature(a.fn).parameters.values())[2:]  # after (store, trace_id[s])
        options = [{"name": p.name, "default": json_safe(p.default)} for p in params
                   if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                   and not p.name.startswith("_") and not (a.multi and p.name in ("by", "sweep"))]
        doc = inspect.getmodule(a.fn).__doc__ or ""
        rows.append({"name": a.name, "description": a.description, "multi_trace": a.multi,
                     "options": options, "definition": (getattr(inspect.getmodule(a.fn), "DEFINITION", None)
                                                        or doc).strip()})
    return {"analyses": rows,
            "definition": "Run one with the analyze tool: name, traces, options {name: value}; multi_trace "
                          "analyses also take by (a numeric label) and sweep (label sweep=NAME). "
                          "docs/metrics.md defines every number."}


def analyze(db: str, name: str, traces: list[str] | None = None, options: dict | None = None,
            by: str | None = None, sweep: str | None = None, table: str | None = None, offset: int = 0,
            limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """``kernelscope analyze NAME TRACE... [-o KEY=VALUE] --json``, tables paged. Several traces for a
    single-trace analysis: ``{"results": [...]}``, one per trace (the CLI prints that list)."""
    from ..analysis import get_analysis
    from ..storage.queries import resolve_trace

    analysis = get_analysis(name)
    kwargs = dict(options or {})
    refs = list(traces or [])
    with _open(db) as store:
        ids = [resolve_trace(store, r) for r in refs]
        if analysis.multi:
            result = analysis.fn(store, ids or None, by=by or "batch", sweep=sweep, **kwargs)
            return paged_result(result, offset, limit, table)
        if by is not None or sweep is not None:
            raise UsageError(f"by and sweep apply to multi-trace analyses only; '{name}' takes traces.")
        if not ids:
            raise UsageError(f"analysis '{name}' needs at least one trace (an id, id prefix or file name).")
        results = [paged_result(analysis.fn(store, t, **kwargs), offset, limit, table) for t in ids]
    return results[0] if len(results) == 1 else {"results": results}


def diff(db: str, a: str, b: str, sweeps: bool = False, by: str = "batch", fail_on: list[str] | None = None,
         table: str | None = None, offset: int = 0, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """``kernelscope diff A B --json`` (tables paged) with ``violations``: one line per broken ``fail_on``
    rule, as the CLI prints them on stderr before exiting 1."""
    from ..analysis.diff import diff as diff_fn
    from ..analysis.diff import parse_rule, violations
    from ..storage.queries import resolve_trace

    rules = [parse_rule(r) for r in fail_on or []]
    with _open(db) as store:
        if sweeps:
            result = diff_fn(store, None, by=by, sweep=a, sweep_b=b)
        else:
            result = diff_fn(store, [resolve_trace(store, a), resolve_trace(store, b)], by=by)
    out = paged_result(result, offset, limit, table)
    out["violations"] = violations(result, rules)
    return out


def sql(db: str, query: str, offset: int = 0, limit: int = 100, timeout_s: float = 30.0) -> dict[str, Any]:
    """One read-only query with ``kernelscope sql``'s limits; rows ``[offset, offset + limit)`` kept, every
    row counted."""
    from ..storage.queries import ReadonlySql

    offset, limit = _limit(offset, limit)
    rows: list[dict] = []
    seen = 0
    with ReadonlySql(db, query, timeout_s=timeout_s, bound_process=True) as q:
        cols = list(q.columns)
        try:
            for batch in q.batches():
                n = batch.num_rows
                lo, hi = max(offset - seen, 0), min(offset + limit - seen, n)
                if lo < hi:
                    part = batch.slice(lo, hi - lo).to_pylist()
                    rows += [{c: json_safe(r[c]) for c in cols} for r in part] if len(set(cols)) == len(cols) \
                        else [dict(zip(cols, map(json_safe, r.values()))) for r in part]
                seen += n
        except MemoryError as exc:
            raise q.error(exc) from None
    return {"result": page(rows, cols, offset, limit, total=seen), "definition": SQL_DEFINITION,
            "trust": "Raw store rows: times are integer ns since the Unix epoch (durations ns); see the schema "
                     "tool for each column.", "paging": PAGING}


def schema(db: str, table: str | None = None) -> dict[str, Any]:
    """The store's tables and columns (name, type, definition from storage/schema/*.sql)."""
    from ..storage.schema_doc import schema_tables

    with _open(db) as store:
        tables = schema_tables(store)
    if table is not None:
        tables = [t for t in tables if t["table"] == table]
        if not tables:
            raise UsageError(f"no table named {table!r}; call schema without a table to list them.")
    return {"tables": tables,
            "definition": "Tables of the kernelscope store (DuckDB). Times are BIGINT ns since the Unix epoch, "
                          "durations BIGINT ns; every event row carries trace_id. docs/metrics.md defines the "
                          "analyses built on them.",
            "trust": "A column without a definition is not commented in the schema files; its name and type "
                     "are the store's own."}


def ingest(db: str, paths: list[str], labels: dict | None = None) -> dict[str, Any]:
    """``kernelscope ingest PATH... --label K=V``: one row per file (status, trace id, events, message)."""
    from ..storage.ingest import ingest_paths
    from ..storage.store import open_store

    with open_store(db, read_only=False) as store:
        results = ingest_paths(store, list(paths), labels={str(k): str(v) for k, v in (labels or {}).items()},
                               progress=False)
    return {"files": [{"path": str(r.path), "status": r.status, "trace_id": r.trace_id,
                       "events": r.events, "message": r.message} for r in results],
            "definition": "status is ingested, skipped (already stored) or failed (no rows kept, message says "
                          "why)."}
