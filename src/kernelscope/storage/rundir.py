"""Collector run directories (trace.json.gz [+ telemetry.parquet] [+ run.json] [+ Nsight passes]): reading and
checking run.json, telemetry and timing rows, what a run directory adds to its trace (``run_dir_parts``, a
``TraceInput``), ``ingest_run_all``, which ingests every pass of one, and ``ingest_run`` (the same, one result).
A rank of a run of many ranks (storage/rankrun.py) takes the same parts.

The passes of one run (``discovery.run_parts``; collectors/nsight.py writes them): the Kineto trace; nsys's SQLite
export ``<name>.sqlite``, a second trace of the SAME run (same ``run_id``, rank 0: two collectors of one process,
not two ranks; no ``runs`` row is written for it, as for any single-process run); ncu's ``<name>_ncu.csv``,
joined to the run's Kineto trace (else its nsys trace) as ``storage.ncu.ingest_ncu(match=...)`` does, with the
clock and cache control run.json's ``nsight.ncu`` records.
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import pyarrow as pa

from ..collectors.nvml import TELEMETRY_SCHEMA  # the sampler's schema: the one definition of the columns
from ..errors import KernelscopeError, ParseError
from .discovery import path_problem, run_parts
from .inserts import insert_rows
from .onetrace import IngestResult, failed, ingest_file
from .tracerow import TraceInput


def _read_telemetry(path: pathlib.Path) -> pa.Table:
    import pyarrow.parquet as pq

    problem = path_problem(path)
    if problem:  # a FIFO would block the Parquet reader forever
        raise ParseError(f"{path}: {problem}")
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise ParseError(f"{path}: not a readable Parquet file: {str(exc).splitlines()[0]}") from None
    if "ts_ns" not in table.column_names:
        raise ParseError(f"{path}: telemetry has no ts_ns column; it was not written by kernelscope")
    cols = {}
    for col, typ in zip(TELEMETRY_SCHEMA.names, TELEMETRY_SCHEMA.types):
        if col in table.column_names:
            try:
                cols[col] = table.column(col).cast(typ)
            except Exception:
                raise ParseError(f"{path}: telemetry column {col} cannot be read as {typ}") from None
        else:
            cols[col] = pa.nulls(table.num_rows, typ)
    return pa.table(cols)


#: A run.json larger than this is not a collector's run record (ours are a few KB to a few MB).
RUN_JSON_MAX_BYTES = 64 << 20


def _read_run_json(path: pathlib.Path) -> dict:
    """run.json as a dict, its fields checked (``_check_run_json``); ParseError naming the file for a
    FIFO, an oversized file, invalid JSON or a field of the wrong type."""
    if not path.exists() and not path.is_symlink():
        return {}
    problem = path_problem(path)
    if problem:
        raise ParseError(f"{path}: {problem}")
    if path.stat().st_size > RUN_JSON_MAX_BYTES:
        raise ParseError(f"{path}: run.json is larger than {RUN_JSON_MAX_BYTES >> 20} MB; it is not a run record")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"{path}: not valid JSON ({str(exc).splitlines()[0]}); fix or remove run.json") from None
    except RecursionError:
        raise ParseError(f"{path}: run.json is nested too deeply to read; fix or remove it") from None
    except OSError as exc:
        raise ParseError(f"{path}: cannot read run.json ({exc.strerror or exc})") from None
    if not isinstance(data, dict):
        raise ParseError(f"{path}: run.json must hold a JSON object, not {_json_type(data)}")
    _check_run_json(path, data)
    return data


def _json_type(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _check_run_json(path, data: dict) -> None:
    """The fields ingest reads, by type: name/run_id strings, labels and provenance objects, timings a
    list of objects (``_timing_rows`` checks each). Absent or null is fine."""
    want = {"name": (str,), "run_id": (str,), "labels": (dict,), "provenance": (dict,), "timings": (list,)}
    for key, types in want.items():
        value = data.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            what = {str: "a string", dict: "an object", list: "a list"}[types[0]]
            raise ParseError(f"{path}: run.json's {key!r} must be {what}, not {_json_type(value)}; fix run.json")
    for key in ("labels", "provenance"):
        try:
            json.dumps(data.get(key), allow_nan=False)
        except ValueError:
            raise ParseError(f"{path}: run.json's {key!r} holds NaN or Infinity; fix run.json") from None
    for k in data.get("labels") or {}:
        if not str(k).strip():
            raise ParseError(f"{path}: run.json's 'labels' has an empty key; fix run.json")
    _timing_rows("", data.get("timings"), path)  # checked before the trace is parsed, not inside its transaction


def _timing_rows(trace_id: str, timings, path) -> list[tuple]:
    def number(t: dict, key: str, kind, lo: float, hi: float):
        v = t.get(key)
        if v is None:
            return None
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v < hi
        if not ok or (kind is int and not float(v).is_integer()):
            raise ParseError(
                f"{path}: timings entry {i}: {key!r} must be {'an integer' if kind is int else 'a number'} "
                f"in range, not {json.dumps(v, default=str)[:40]}; fix run.json")
        return kind(v)

    rows = []
    for i, t in enumerate(timings or []):  # noqa: B007 - i is read by number()'s message
        if not isinstance(t, dict) or "kind" not in t:
            raise ParseError(f"{path}: each timings entry needs a 'kind'")
        rows.append(
            (
                trace_id,
                str(t["kind"]),
                number(t, "iteration", int, -(2**31), 2**31),
                number(t, "dur_ns", int, -(2**63), 2**63),
                number(t, "energy_mj", float, -math.inf, math.inf),
            )
        )
    return rows


def run_dir_parts(run_dir: pathlib.Path, labels) -> TraceInput:
    """What a collector run directory adds to its trace: name (run.json's, else the folder's), labels
    (run.json's, then ``labels``), run id, provenance, host and an ``extra`` insert of its telemetry and
    timings. ParseError for a run.json or telemetry file that cannot be read."""
    meta = _read_run_json(run_dir / "run.json")
    telemetry_path = run_dir / "telemetry.parquet"
    telemetry = _read_telemetry(telemetry_path) if telemetry_path.exists() else None
    merged = dict(meta.get("labels") or {})
    merged.update(labels or {})

    def extra(con, trace_id):
        if telemetry is not None and telemetry.num_rows:
            tbl = telemetry.add_column(0, "trace_id", pa.array([trace_id] * telemetry.num_rows))
            con.register("ks_telemetry", tbl)
            con.execute("INSERT INTO telemetry SELECT * FROM ks_telemetry ORDER BY device_index, ts_ns")
            con.unregister("ks_telemetry")
        rows = _timing_rows(trace_id, meta.get("timings"), run_dir / "run.json")
        if rows:
            insert_rows(con, "timings", rows)

    prov = meta.get("provenance") if isinstance(meta.get("provenance"), dict) else None
    return TraceInput(name=meta.get("name") or run_dir.resolve().name, run_id=meta.get("run_id"),
                      provenance=meta.get("provenance"), labels=merged, extra=extra,
                      host=(prov or {}).get("hostname"))


def ingest_run(
    store, run_dir, *, name=None, labels=None, python_functions=True, salvage=False, _on_batch=None
) -> IngestResult:
    """Ingest a collector run directory (trace.json.gz [+ telemetry.parquet] [+ run.json]) as one trace,
    with its telemetry, provenance, timings and labels, in ONE transaction; and its Nsight passes, when it
    holds any (``ingest_run_all``): the result is then the run's main trace's (Kineto, else nsys), its message
    followed by the other parts' lines.

    Name: ``name``, else run.json's "name", else the folder's name. Labels: run.json's, then ``labels``.
    """
    results = ingest_run_all(store, run_dir, name=name, labels=labels, python_functions=python_functions,
                             salvage=salvage, _on_batch=_on_batch)
    main = results[0]
    for r in results[1:]:
        main.message += f"; {pathlib.Path(r.path).name}: {r.status}" + (f" as {r.trace_id}" if r.trace_id else "") + (
            f" ({r.message})" if r.status == "failed" or r.path.endswith((".csv", ".csv.gz")) else "")
    return main


def _ingest_kineto(store, run_dir: pathlib.Path, trace: pathlib.Path, given: TraceInput, *, name, python_functions,
                   salvage, _on_batch, labels=None) -> IngestResult:
    return ingest_file(
        store,
        trace,
        labels=labels if labels is not None else given.labels,
        name=name or given.name,
        run_id=given.run_id,
        provenance=given.provenance,
        python_functions=python_functions,
        salvage=salvage,
        _on_batch=_on_batch,
        _extra=given.extra,
    )


def _label_if_missing(store, trace_id: str, key: str, value: str) -> None:
    from .tracerow import insert_labels

    if not store.con.execute("SELECT 1 FROM labels WHERE trace_id = ? AND key = ?", [trace_id, key]).fetchall():
        insert_labels(store.con, trace_id, {key: value})


#: Labels of a run's nsys trace that it does not take from the run: a sweep's points are its Kineto traces.
NOT_ON_NSYS = ("sweep",)


def _ncu_settings(run_dir: pathlib.Path) -> dict:
    """run.json's ``nsight.ncu`` clock/cache control and note (collectors/nsight.py records them), or {}."""
    try:
        rec = (_read_run_json(run_dir / "run.json").get("nsight") or {}).get("ncu") or {}
    except (KernelscopeError, AttributeError):
        return {}
    if not isinstance(rec, dict):
        return {}
    out = {k: rec[k] for k in ("clock_control", "cache_control", "settings_note") if isinstance(rec.get(k), str)}
    return out if ("clock_control" in out or "cache_control" in out) else {}


def ingest_run_all(
    store, run_dir, *, name=None, labels=None, python_functions=True, salvage=False, _on_batch=None
) -> list[IngestResult]:
    """Every pass of a collector run directory, one result each, the main trace's first: the Kineto trace (as
    before, with telemetry and timings); each nsys SQLite export as a trace of the same run (name
    ``<name>-nsys``, the run's labels but ``sweep``, provenance; telemetry and timings only when there is no
    Kineto trace); each ncu CSV joined to the Kineto trace (else the nsys one). With an nsys export beside it,
    the Kineto trace is labelled ``collector=kineto`` and the nsys one ``collector=nsys``. A run directory of
    the Kineto pass alone ingests exactly as before. Parts already stored are 'skipped'; a failed part leaves no
    rows and the others still land."""
    run_dir = pathlib.Path(run_dir)
    t0 = time.perf_counter()
    parts = run_parts(run_dir) if run_dir.is_dir() else None
    if parts is None or (parts.kineto is None and not parts.nsys):
        return [failed(run_dir, ParseError("not a run directory: no trace.json.gz in it"), t0)]
    try:
        given = run_dir_parts(run_dir, labels)
    except KernelscopeError as exc:
        return [failed(run_dir, exc, t0)]
    kw = dict(python_functions=python_functions, salvage=salvage, _on_batch=_on_batch)
    results: list[IngestResult] = []
    main_id = None
    if parts.kineto is not None:
        both = {**given.labels, "collector": "kineto"} if parts.nsys else None
        results.append(_ingest_kineto(store, run_dir, parts.kineto, given, name=name, labels=both, **kw))
        main_id = results[-1].trace_id
        if both and results[-1].status == "skipped" and main_id:  # stored before the nsys pass was added
            _label_if_missing(store, main_id, "collector", "kineto")
    base = name or given.name
    nsys_labels = {k: v for k, v in given.labels.items() if k not in NOT_ON_NSYS}
    nsys_labels["collector"] = "nsys"
    for i, sqlite in enumerate(parts.nsys):
        res = ingest_file(store, sqlite, labels=nsys_labels, name=f"{base}-nsys" + (f"{i + 1}" if i else ""),
                          run_id=given.run_id, provenance=given.provenance,
                          _extra=given.extra if parts.kineto is None and i == 0 else None, **kw)
        results.append(res)
        main_id = main_id or res.trace_id
    if parts.ncu:
        from .ncu import ingest_ncu

        settings = _ncu_settings(run_dir)
        for csv_path in parts.ncu:
            t1 = time.perf_counter()
            if main_id is None:
                results.append(IngestResult(str(csv_path), "failed", None,
                                            "no trace of its run was stored to join the Nsight Compute rows to"))
                continue
            r = ingest_ncu(store, csv_path, match=main_id, **settings)
            results.append(IngestResult(r.path, r.status, r.trace_id, r.message, r.kernels,
                                        time.perf_counter() - t1))
    return results
