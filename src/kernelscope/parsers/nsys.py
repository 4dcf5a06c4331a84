"""Reader for Nsight Systems exports: SQLite (``nsys export --type sqlite``), plain or gzip, Parquet
directories (``nsys export --type parquetdir``: one ``<TABLE>.parquet`` per table), and ``.nsys-rep``
reports (exported to SQLite first when an ``nsys`` binary is on PATH).

One mapping, two sources. The mapping is SQL over nsys's tables, run with Python's ``sqlite3`` (DuckDB's
SQLite extension is downloaded at run time and cannot be assumed): a ``.sqlite.gz`` is decompressed to a
temporary file that is removed after iteration; for a Parquet directory the tables the mapping reads
(``TABLES_READ``) are loaded into an in-memory SQLite database, with each column converted to what nsys's
SQLite export holds (uint64 -> int64 two's complement, as SQLite's INTEGER stores it; dictionaries
decoded; booleans -> 0/1). Table and column lists come from the source (``sqlite_master`` / the Parquet
files and their schemas), so missing tables and columns are handled alike.

What becomes which ``RAW_EVENTS`` row (``kind``):

===============================================  ==========================================================
nsys table                                        rows
===============================================  ==========================================================
CUPTI_ACTIVITY_KIND_KERNEL                        kernel: demangled name, grid/block, registers, static +
                                                  dynamic shared memory, device, stream; pid = device,
                                                  tid = stream (as Kineto writes GPU events)
CUPTI_ACTIVITY_KIND_RUNTIME                       runtime (eventClass 0) / driver (eventClass 1); names
                                                  keep nsys's ``_vNNNN`` suffix (storage strips it)
CUPTI_ACTIVITY_KIND_MEMCPY / _MEMSET              memcpy ``Memcpy HtoD (Pageable -> Device)`` (direction
                                                  in ``text``) / memset ``Memset (Device)``; bytes
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION               sync (``Context sync``, ``Stream sync``, ...)
CUPTI_ACTIVITY_KIND_GRAPH_TRACE                   kernel rows named ``CUDA graph N (graph-level trace)``
                                                  plus a warning: re-capture with ``--cuda-graph-trace=node``
NVTX_EVENTS push/pop (59), start/end (60)         emit_nvtx ranges (``name, seq = N, op_id = N, sizes =
                                                  [[..]], input_op_ids = [..]``) -> cpu_op (name parsed,
                                                  ``input_dims`` = the sizes JSON, ``seq_number``, op_id in
                                                  ``text``); ``ProfilerStep#N`` and other ranges ->
                                                  annotation; ``cat`` = ``nvtx`` or ``nvtx:<domain>``
NVTX_EVENTS marks (34)                            instant
PROFILER_OVERHEAD                                 other (cat ``nsys_overhead``): never GPU activity, never idle
ThreadNames / PROCESSES                           meta (thread_name / process_name) for processes with events
===============================================  ==========================================================

Identifiers: pid = ``(globalTid >> 24) & 0xFFFFFF``, tid = ``globalTid & 0xFFFFFF``. A launch and its GPU
work share ``correlationId`` *within a process* (``kernel.globalPid = runtime.globalTid & ~0xFFFFFF``);
when GPU work of more than one process is present the process id is packed into the correlation
(``correlationId + pid << 32``, with a warning) so that correlations stay unique trace-wide.

Times: integer ns on the session clock; ``TraceMeta.base_time_ns`` = ``TARGET_INFO_SESSION_START_TIME.
utcEpochNs``, or 0 when ``META_DATA_EXPORT`` says the export was ``--ts-normalize``d (already epoch ns).

Exports differ by version and tables exist only when they have rows: missing tables and columns are read
as absent; missing core tables and columns are listed in ``TraceMeta.warnings``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from kernelscope.errors import ParseError
from kernelscope.parsers.schema import RAW_EVENTS, TraceMeta

SQLITE_MAGIC = b"SQLite format 3\x00"

#: CUPTI memcpy kinds (CUpti_ActivityMemcpyKind) as Kineto abbreviates them.
MEMCPY_KINDS = {
    1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
    10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD",
}
#: nsys ENUM_CUDA_MEM_KIND labels (used when the export lacks the enum table).
MEM_KINDS = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}
#: ENUM_CUPTI_SYNC_TYPE labels (fallback).
SYNC_TYPES = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}
#: NVTX_EVENTS.eventType values.
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75
#: Streams/ids nsys writes as "none".
_NONE_ID = 4294967295

_EMIT_NVTX_RE = re.compile(r", (?:seq|op_id) = -?\d+|, sizes = \[")


def parse_emit_nvtx(text: str) -> dict[str, Any] | None:
    """Split a ``torch.autograd.profiler.emit_nvtx`` range text into its parts, or None when the text
    carries none of emit_nvtx's markers (``, seq = N``, ``, op_id = N``, ``, sizes = [...]``).

    ``"aten::addmm, seq = 7, op_id = 12, sizes = [[8], [8, 16]], input_op_ids = [(0,-1)]"`` ->
    ``{"name": "aten::addmm", "seq": 7, "op_id": 12, "sizes": "[[8], [8, 16]]", "input_op_ids":
    "[(0,-1)]"}`` (sizes kept as the JSON text torch wrote).
    """
    if not text or not _EMIT_NVTX_RE.search(text):
        return None
    out: dict[str, Any] = {"seq": None, "op_id": None, "sizes": None, "input_op_ids": None}
    rest = text
    i = rest.find(", input_op_ids = ")
    if i >= 0:
        out["input_op_ids"] = rest[i + len(", input_op_ids = "):]
        rest = rest[:i]
    i = rest.find(", sizes = [")
    if i >= 0:
        out["sizes"] = rest[i + len(", sizes = "):]
        rest = rest[:i]
    m = re.search(r", op_id = (-?\d+)$", rest)
    if m:
        out["op_id"] = int(m.group(1))
        rest = rest[: m.start()]
    m = re.search(r", seq = (-?\d+)$", rest)
    if m:
        out["seq"] = int(m.group(1))
        rest = rest[: m.start()]
    out["name"] = rest
    return out


def _is_step(name: str | None) -> bool:
    return bool(name) and re.match(r"^ProfilerStep#\d+$", name) is not None


class _Batcher:
    """Collects column values for RAW_EVENTS rows and hands out record batches; numbers ``seq``."""

    def __init__(self, batch_rows: int):
        self.batch_rows = batch_rows
        self.seq = 0
        self.cols: dict[str, list] = {}
        self.n = 0

    def add_rows(self, names: list[str], rows: list[tuple]) -> None:
        """Append rows given as tuples in the order of ``names`` (RAW_EVENTS field names)."""
        if not rows:
            return
        cols = list(zip(*rows))
        for name in RAW_EVENTS.names:
            if name == "seq":
                continue
            lst = self.cols.setdefault(name, [])
            if name in names:
                lst.extend(cols[names.index(name)])
            else:
                lst.extend([None] * len(rows))
        self.n += len(rows)

    def ready(self) -> bool:
        return self.n >= self.batch_rows

    def flush(self) -> pa.RecordBatch | None:
        if self.n == 0:
            return None
        arrays = []
        for f in RAW_EVENTS:
            if f.name == "seq":
                arrays.append(pa.array(range(self.seq, self.seq + self.n), pa.int64()))
            else:
                arrays.append(pa.array(self.cols[f.name], f.type))
        self.seq += self.n
        self.cols, self.n = {}, 0
        return pa.RecordBatch.from_arrays(arrays, schema=RAW_EVENTS)


_I64 = (-(2**63), 2**63 - 1)
_I32 = (-(2**31), 2**31 - 1)
_TIME = (-(2**62), 2**62)  # ns: +-146 years; an end - start of two such values cannot overflow int64
_GPU_INT = {"start": _TIME, "end": _TIME, "deviceId": _I32, "streamId": _I64, "correlationId": _I64,
            "globalPid": _I64}
#: Columns the mapping reads as integers, with the range their RAW_EVENTS field (or arithmetic) holds;
#: ``NsysReader._check_types`` refuses an export where one holds anything else.
INT_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": {
        **_GPU_INT, "gridX": _I32, "gridY": _I32, "gridZ": _I32, "blockX": _I32, "blockY": _I32, "blockZ": _I32,
        "registersPerThread": _I32, "staticSharedMemory": _TIME, "dynamicSharedMemory": _TIME,
        "demangledName": _I64, "shortName": _I64, "mangledName": _I64},
    "CUPTI_ACTIVITY_KIND_RUNTIME": {"start": _TIME, "end": _TIME, "correlationId": _I64, "globalTid": _I64,
                                    "nameId": _I64, "eventClass": _I64},
    "CUPTI_ACTIVITY_KIND_MEMCPY": {**_GPU_INT, "bytes": _I64, "copyKind": _I64, "srcKind": _I64, "dstKind": _I64},
    "CUPTI_ACTIVITY_KIND_MEMSET": {**_GPU_INT, "bytes": _I64, "memKind": _I64},
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": {**_GPU_INT, "syncType": _I64},
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": {**_GPU_INT, "graphId": _I64},
    "NVTX_EVENTS": {"start": _TIME, "end": _TIME, "eventType": _I64, "globalTid": _I64, "domainId": _I64,
                    "textId": _I64},
    "PROFILER_OVERHEAD": {"start": _TIME, "end": _TIME, "globalTid": _I64, "nameId": _I64},
    "ThreadNames": {"globalTid": _I64, "nameId": _I64},
    "PROCESSES": {"pid": _I64},
    "StringIds": {"id": _I64},
    "TARGET_INFO_SESSION_START_TIME": {"utcEpochNs": _I64},
    "TARGET_INFO_GPU": {"id": _I32, "smCount": _I32, "maxWarpsPerSm": _I32, "threadsPerWarp": _I32},
    "TARGET_INFO_CUDA_DEVICE": {"gpuId": _I32, "cudaId": _I32},
    "ENUM_CUDA_MEM_KIND": {"id": _I64},
    "ENUM_CUPTI_SYNC_TYPE": {"id": _I64},
}
#: Text columns the mapping reads into string fields (names, NVTX texts).
TEXT_COLUMNS = (("StringIds", "value"), ("NVTX_EVENTS", "text"), ("PROCESSES", "name"))

#: Every nsys table the mapping reads (the Parquet source loads these, and only these, into SQLite).
TABLES_READ = (
    "StringIds", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE",
    "DIAGNOSTIC_EVENT", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "NVTX_EVENTS", "PROFILER_OVERHEAD", "ThreadNames", "PROCESSES", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE",
)


class _SqliteSource:
    """An nsys SQLite export opened read-only: ``tables``, ``columns(table)``, ``con`` for the mapping's SQL."""

    what = "SQLite file"
    export_type = "sqlite"

    def __init__(self, db: str):
        try:
            self.con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise ParseError(f"cannot open the SQLite file ({exc}); check the file") from None

    def tables(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')]

    def close(self) -> None:
        self.con.close()


def _sqlite_column(arr: pa.ChunkedArray) -> list:
    """A Parquet column as the Python values nsys's SQLite export holds for it."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = t.value_type
    if pa.types.is_unsigned_integer(t) or pa.types.is_boolean(t):
        arr = arr.cast(pa.int64(), safe=False)  # uint64 above 2**63 wraps, as in SQLite's signed INTEGER
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
              or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        arr = arr.cast(pa.string())
    return arr.to_pylist()


class _ParquetSource(_SqliteSource):
    """An ``nsys export --type parquetdir`` directory: every ``<TABLE>.parquet`` is a table; those in
    ``TABLES_READ`` are loaded into an in-memory SQLite database with the export's column names."""

    what = "Parquet directory"
    export_type = "parquetdir"

    def __init__(self, folder: Path):
        import pyarrow.parquet as pq

        self.files = {f.name[: -len(".parquet")]: f for f in sorted(folder.glob("*.parquet")) if f.is_file()}
        self.schemas: dict[str, list[str]] = {}
        self.con = sqlite3.connect(":memory:")
        for name, f in self.files.items():
            try:
                self.schemas[name] = list(pq.read_schema(f).names)
                if name not in TABLES_READ:
                    continue
                table = pq.read_table(f)
            except (pa.ArrowException, OSError) as exc:
                self.con.close()
                raise ParseError(
                    f"cannot read {f.name} of the Parquet export ({str(exc).splitlines()[0] if str(exc) else exc}); "
                    "export the report again with `nsys export --type parquetdir`"
                ) from None
            cols = ", ".join(f'"{c}"' for c in table.column_names)
            self.con.execute(f'CREATE TABLE "{name}" ({cols})')
            if table.num_rows:
                marks = ", ".join("?" * table.num_columns)
                values = [_sqlite_column(c) for c in table.columns]
                self.con.executemany(f'INSERT INTO "{name}" VALUES ({marks})', zip(*values))
            if name == "StringIds" and "id" in table.column_names:  # looked up once per row, as nsys's key
                self.con.execute('CREATE INDEX "StringIds_id" ON "StringIds" (id)')

    def tables(self) -> set[str]:
        return set(self.files)

    def columns(self, table: str) -> list[str]:
        return self.schemas.get(table, [])


class NsysReader:
    """Iterate an nsys export (SQLite file, ``.sqlite.gz``, ``.nsys-rep`` or Parquet directory) as
    ``RAW_EVENTS`` record batches; ``meta`` is complete afterwards."""

    def __init__(self, path: str | Path, *, batch_rows: int = 65536, **_ignored: Any):
        self.path = Path(path)
        self.batch_rows = batch_rows
        self.meta = TraceMeta(format="nsys")

    # ------------------------------------------------------------------------------------- file access

    def _materialize(self, tmpdir: str) -> str:
        """A plain SQLite file to open: the path itself, a decompressed copy, or an nsys export."""
        from kernelscope.parsers.source import Source

        if self.path.name.endswith(".nsys-rep"):
            return self._export_report(tmpdir)
        src = Source(self.path)
        try:
            if not src.gz:
                while src.read(4 << 20):
                    pass
                self.meta.content_hash = src.sha.hexdigest()
                return str(self.path)
            out = os.path.join(tmpdir, "export.sqlite")
            with open(out, "wb") as f:
                while True:
                    block = src.read(4 << 20)
                    if not block:
                        break
                    f.write(block)
            self.meta.content_hash = src.sha.hexdigest()
            return out
        finally:
            src.close()

    def _export_report(self, tmpdir: str) -> str:
        import hashlib

        nsys = shutil.which("nsys")
        if nsys is None:
            raise ParseError(
                "this is an Nsight Systems report (.nsys-rep) and no `nsys` is on PATH to export it; run "
                f"`nsys export --type sqlite -o {self.path.stem}.sqlite {self.path.name}` and ingest the .sqlite"
            )
        h = hashlib.sha256()
        with open(self.path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        self.meta.content_hash = h.hexdigest()
        out = os.path.join(tmpdir, "export.sqlite")
        proc = subprocess.run(
            [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", out, str(self.path)],
            capture_output=True, text=True,
        )
        if proc.returncode != 0 or not os.path.exists(out):
            last = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
            raise ParseError(f"`nsys export --type sqlite` failed on the report ({last[0]}); export it by hand")
        return out

    def _hash_folder(self) -> None:
        """content_hash of a Parquet export: sha256 over its ``.parquet`` files (name and bytes, by name)."""
        import hashlib

        h = hashlib.sha256()
        for f in sorted(self.path.glob("*.parquet")):
            h.update(f.name.encode() + b"\0")
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
        self.meta.content_hash = h.hexdigest()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        with tempfile.TemporaryDirectory(prefix="kernelscope-nsys-") as tmpdir:
            if self.path.is_dir():
                self._hash_folder()
                src: _SqliteSource = _ParquetSource(self.path)
            else:
                src = _SqliteSource(self._materialize(tmpdir))
            try:
                yield from self._read(src)
            except sqlite3.DatabaseError as exc:
                raise ParseError(
                    f"the SQLite file is damaged or truncated ({exc}); export it again with "
                    "`nsys export --type sqlite`"
                ) from None
            finally:
                src.close()

    # ------------------------------------------------------------------------------------------ reading

    def _read(self, src: _SqliteSource) -> Iterator[pa.RecordBatch]:
        con = src.con
        tables = src.tables()
        event_tables = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"}
        nsys_like = tables & {"TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT"} or tables & event_tables
        if nsys_like and "StringIds" not in tables:
            raise ParseError(
                f"this Nsight Systems {src.what} export has no StringIds table (the names of kernels and "
                f"calls); export the whole report again with `nsys export --type {src.export_type}`"
            )
        if not nsys_like:
            raise ParseError(
                f"this {src.what} is not an Nsight Systems export (no StringIds/TARGET_INFO/CUPTI tables); "
                f"give the output of `nsys export --type {src.export_type}`"
            )
        self.tables = tables
        self.cols = {t: src.columns(t) for t in tables}
        meta = self.meta
        self._check_types(con, src.export_type)
        self._read_meta(con)
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
            if t not in tables:
                meta.warnings.append(f"the export has no {t} table (not traced, or no rows): its events are absent")
        absent = sorted(
            t for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "PROFILER_OVERHEAD")
            if t not in tables
        )
        meta.extra["nsys_tables_absent"] = absent
        self._corr_expr = self._correlation_packing(con)

        b = _Batcher(self.batch_rows)
        for fill in (self._kernels, self._graph_trace, self._memcpy, self._memset, self._sync,
                     self._runtime, self._nvtx, self._overhead, self._threads):
            for names, rows in fill(con):
                b.add_rows(names, rows)
                if b.ready():
                    yield b.flush()
        last = b.flush()
        if last is not None:
            yield last
        meta.events = b.seq

    def _check_types(self, con, export_type: str = "sqlite") -> None:
        """ParseError when a column the mapping reads as an integer holds anything else (text, a blob, a
        fraction) or an integer out of the range its row field holds (``INT_COLUMNS``). nsys writes these
        columns as INTEGER; SQLite stores whatever it is given, and its arithmetic would turn text into 0
        (a wrong pid, a negative duration) instead of failing. One scan per table."""
        for table, spec in INT_COLUMNS.items():
            cols = [(c, rng) for c, rng in spec.items() if c in self.cols.get(table, ())]
            if not cols:
                continue
            checks = []
            for c, (lo, hi) in cols:
                checks.append(f"""sum(CASE WHEN typeof("{c}") NOT IN ('integer', 'null') OR "{c}" < {lo} """
                              f"""OR "{c}" > {hi} THEN 1 ELSE 0 END)""")
            counts = con.execute(f'SELECT {", ".join(checks)} FROM "{table}"').fetchone()
            for (c, (lo, hi)), bad in zip(cols, counts or ()):
                if not bad:
                    continue
                rowid, value, kind = con.execute(
                    f"""SELECT rowid, "{c}", typeof("{c}") FROM "{table}" WHERE typeof("{c}") NOT IN """
                    f"""('integer', 'null') OR "{c}" < {lo} OR "{c}" > {hi} LIMIT 1"""
                ).fetchone()
                shown = repr(value)[:40] if kind != "integer" else f"{value} (out of range)"
                more = f" and {bad - 1} more row{'s' if bad > 2 else ''}" if bad > 1 else ""
                raise ParseError(
                    f"{table}.{c} holds {shown} ({kind}) in row {rowid}{more}, where nsys writes integers: "
                    f"the export is damaged or was edited; export the report again with `nsys export --type "
                    f"{export_type}`"
                )
        for table, c in TEXT_COLUMNS:
            if c not in self.cols.get(table, ()):
                continue
            row = con.execute(f"""SELECT rowid, "{c}", typeof("{c}") FROM "{table}" """
                              f"""WHERE typeof("{c}") NOT IN ('text', 'null') LIMIT 1""").fetchone()
            if row:
                raise ParseError(
                    f"{table}.{c} holds {repr(row[1])[:40]} ({row[2]}) in row {row[0]}, where nsys writes text: "
                    f"the export is damaged or was edited; export the report again with `nsys export --type "
                    f"{export_type}`"
                )

    def _c(self, table: str, col: str, alias: str = "t", default: str = "NULL") -> str:
        """``alias.col`` when the table has the column, else ``default`` (and a note when it matters)."""
        if col in self.cols.get(table, ()):
            return f'{alias}."{col}"'
        note = f"{table} has no column {col} in this export; read as missing"
        if note not in self.meta.warnings:
            self.meta.warnings.append(note)
        return default

    def _fetch(self, con, sql: str, names: list[str]) -> Iterator[tuple[list[str], list[tuple]]]:
        cur = con.execute(sql)
        while True:
            rows = cur.fetchmany(self.batch_rows)
            if not rows:
                return
            yield names, rows

    def _str(self, expr: str) -> str:
        return f"(SELECT value FROM StringIds WHERE id = {expr})"

    def _read_meta(self, con) -> None:
        meta = self.meta
        export = {}
        if "META_DATA_EXPORT" in self.tables:
            export = {str(k): v for k, v in con.execute("SELECT name, value FROM META_DATA_EXPORT")}
        meta.extra["nsys_export"] = {
            k: export[k] for k in ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION", "EXPORT_PARAM_TIME_NORMALIZE")
            if k in export
        }
        normalized = str(export.get("EXPORT_PARAM_TIME_NORMALIZE", "false")).lower() == "true"
        start = None
        if "TARGET_INFO_SESSION_START_TIME" in self.tables and "utcEpochNs" in self.cols["TARGET_INFO_SESSION_START_TIME"]:
            row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
            start = int(row[0]) if row and row[0] is not None else None
        if normalized:
            meta.base_time_ns = 0
        elif start is not None:
            meta.base_time_ns = start
        else:
            meta.base_time_ns = 0
            meta.warnings.append(
                "the export has no TARGET_INFO_SESSION_START_TIME.utcEpochNs: times stay relative to the "
                "session start (not epoch ns)"
            )
        shift = str(export.get("EXPORT_PARAM_TIME_SHIFT", "0"))
        if shift not in ("0", "", "None"):
            meta.warnings.append(f"the export was written with a time shift of {shift} ns; times include it")
        meta.device_properties = self._devices(con)
        if "DIAGNOSTIC_EVENT" in self.tables and "text" in self.cols["DIAGNOSTIC_EVENT"]:
            for (text,) in con.execute("SELECT text FROM DIAGNOSTIC_EVENT"):
                t = str(text or "")
                if re.search(r"\b(dropped|lost|overflow|discarded)\b", t, re.I):
                    meta.dropped_notes.append(t)

    def _devices(self, con) -> list[dict[str, Any]]:
        """TARGET_INFO_GPU rows in Kineto's deviceProperties keys (plus nsys's uuid, bandwidth, ...)."""
        if "TARGET_INFO_GPU" not in self.tables:
            self.meta.warnings.append("the export has no TARGET_INFO_GPU table: no device properties")
            return []
        cuda_id = {}
        if "TARGET_INFO_CUDA_DEVICE" in self.tables:
            cuda_id = {int(g): int(c) for g, c in con.execute("SELECT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE")}
        cur = con.execute("SELECT * FROM TARGET_INFO_GPU")
        names = [d[0] for d in cur.description]
        out = []
        keys = {
            "name": "name", "totalMemory": "totalGlobalMem", "computeMajor": "computeMajor",
            "computeMinor": "computeMinor", "maxThreadsPerBlock": "maxThreadsPerBlock",
            "maxRegistersPerBlock": "regsPerBlock", "threadsPerWarp": "warpSize",
            "maxShmemPerBlock": "sharedMemPerBlock", "smCount": "numSms",
            "maxRegistersPerSm": "regsPerMultiprocessor", "maxShmemPerBlockOptin": "sharedMemPerBlockOptin",
            "maxShmemPerSm": "sharedMemPerMultiprocessor", "memoryBandwidth": "memoryBandwidth",
            "clockRate": "clockRate", "uuid": "uuid", "busLocation": "busLocation",
            "l2CacheSize": "l2CacheSize", "chipName": "chipName",
        }
        for row in cur.fetchall():
            r = dict(zip(names, row))
            gid = r.get("id", len(out))
            d: dict[str, Any] = {"id": cuda_id.get(int(gid), int(gid)) if gid is not None else len(out)}
            for src, dst in keys.items():
                if r.get(src) is not None:
                    d[dst] = r[src]
            if r.get("maxWarpsPerSm") is not None and r.get("threadsPerWarp") is not None:
                d["maxThreadsPerMultiprocessor"] = int(r["maxWarpsPerSm"]) * int(r["threadsPerWarp"])
            out.append(d)
        return out

    def _correlation_packing(self, con) -> str:
        """SQL turning (correlationId, globalPid) into a trace-wide unique correlation."""
        pids = set()
        for t, col in (("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid")):
            if t in self.tables and col in self.cols[t]:
                pids |= {r[0] for r in con.execute(f'SELECT DISTINCT ("{col}" >> 24) & 16777215 FROM "{t}"')}
        if len(pids) > 1:
            self.meta.warnings.append(
                f"{len(pids)} processes launched CUDA work; correlation ids are made unique per process as "
                "correlationId + (pid << 32)"
            )
            return "(t.correlationId + ((({g} >> 24) & 16777215) << 32))"
        return "t.correlationId"

    def _corr(self, table: str, gcol: str) -> str:
        if "correlationId" not in self.cols.get(table, ()):
            return self._c(table, "correlationId")
        return self._corr_expr.format(g=f't."{gcol}"')

    def _gpu_common(self, table: str) -> tuple[list[str], list[str]]:
        dev = self._c(table, "deviceId")
        stream = self._c(table, "streamId")
        names = ["pid", "tid", "ts_ns", "dur_ns", "correlation", "device", "stream"]
        exprs = [dev, stream, "t.start", "t.\"end\" - t.start", self._corr(table, "globalPid"), dev, stream]
        return names, exprs

    def _kernels(self, con):
        t = "CUPTI_ACTIVITY_KIND_KERNEL"
        if t not in self.tables:
            return
        names, exprs = self._gpu_common(t)
        name_col = next((c for c in ("demangledName", "shortName", "mangledName") if c in self.cols[t]), None)
        name_expr = self._str(f't."{name_col}"') if name_col else "NULL"
        sm = {int(d["id"]): int(d["numSms"]) for d in self.meta.device_properties if d.get("numSms")}
        dev = self._c(t, "deviceId")
        sm_case = "NULL" if not sm else (
            "CASE " + " ".join(f"WHEN {dev} = {k} THEN {v}.0" for k, v in sm.items()) + " END"
        )
        c = lambda col: self._c(t, col)  # noqa: E731
        blocks = f"({c('gridX')} * {c('gridY')} * {c('gridZ')})"
        threads = f"({c('blockX')} * {c('blockY')} * {c('blockZ')})"
        names += ["kind", "cat", "ph", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                  "registers_per_thread", "shared_memory_bytes", "blocks_per_sm", "warps_per_sm"]
        exprs += ["'kernel'", "'kernel'", "'X'", name_expr, c("gridX"), c("gridY"), c("gridZ"), c("blockX"),
                  c("blockY"), c("blockZ"), c("registersPerThread"),
                  f"(coalesce({c('staticSharedMemory')}, 0) + coalesce({c('dynamicSharedMemory')}, 0))",
                  f"{blocks} / {sm_case}", f"{blocks} * (({threads} + 31) / 32) / {sm_case}"]
        sql = f'SELECT {", ".join(exprs)} FROM "{t}" t ORDER BY t.start'
        yield from self._fetch(con, sql, names)

    def _graph_trace(self, con):
        t = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
        if t not in self.tables:
            return
        n = con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
        if not n:
            return
        self.meta.warnings.append(
            f"{n} CUDA graph executions were traced at graph granularity (one row per graph launch, no "
            "kernels): each is stored as one kernel-kind activity; re-capture with "
            "`nsys profile --cuda-graph-trace=node` for per-kernel rows"
        )
        names, exprs = self._gpu_common(t)
        gid = self._c(t, "graphId", default="'?'")
        names += ["kind", "cat", "ph", "name"]
        exprs += ["'kernel'", "'cuda_graph'", "'X'", f"'CUDA graph ' || {gid} || ' (graph-level trace)'"]
        yield from self._fetch(con, f'SELECT {", ".join(exprs)} FROM "{t}" t ORDER BY t.start', names)

    def _enum(self, con, table: str, fallback: dict[int, str]) -> dict[int, str]:
        if table in self.tables:
            try:
                return {int(i): str(label) for i, _n, label in con.execute(f'SELECT id, name, label FROM "{table}"')}
            except sqlite3.Error:
                pass
        return dict(fallback)

    def _memcpy(self, con):
        t = "CUPTI_ACTIVITY_KIND_MEMCPY"
        if t not in self.tables:
            return
        mem = self._enum(con, "ENUM_CUDA_MEM_KIND", MEM_KINDS)
        names, exprs = self._gpu_common(t)
        names += ["bytes", "_copy", "_src", "_dst"]
        exprs += [self._c(t, "bytes"), self._c(t, "copyKind"), self._c(t, "srcKind"), self._c(t, "dstKind")]
        sql = f'SELECT {", ".join(exprs)} FROM "{t}" t ORDER BY t.start'
        out_names = names[:-3] + ["kind", "cat", "ph", "name", "text"]
        for _n, rows in self._fetch(con, sql, names):
            out = []
            for r in rows:
                d = MEMCPY_KINDS.get(r[-3], "Unknown") if r[-3] is not None else "Unknown"
                name = f"Memcpy {d} ({mem.get(r[-2], 'Unknown')} -> {mem.get(r[-1], 'Unknown')})"
                out.append(r[:-3] + ("memcpy", "gpu_memcpy", "X", name, d))
            yield out_names, out

    def _memset(self, con):
        t = "CUPTI_ACTIVITY_KIND_MEMSET"
        if t not in self.tables:
            return
        mem = self._enum(con, "ENUM_CUDA_MEM_KIND", MEM_KINDS)
        names, exprs = self._gpu_common(t)
        names += ["bytes", "_kind"]
        exprs += [self._c(t, "bytes"), self._c(t, "memKind")]
        sql = f'SELECT {", ".join(exprs)} FROM "{t}" t ORDER BY t.start'
        out_names = names[:-1] + ["kind", "cat", "ph", "name"]
        for _n, rows in self._fetch(con, sql, names):
            yield out_names, [
                r[:-1] + ("memset", "gpu_memset", "X", f"Memset ({mem.get(r[-1], 'Unknown')})") for r in rows
            ]

    def _sync(self, con):
        t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        if t not in self.tables:
            return
        labels = self._enum(con, "ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES)
        names, exprs = self._gpu_common(t)
        names += ["_type"]
        exprs += [self._c(t, "syncType")]
        sql = f'SELECT {", ".join(exprs)} FROM "{t}" t ORDER BY t.start'
        out_names = names[:-1] + ["kind", "cat", "ph", "name"]
        for _n, rows in self._fetch(con, sql, names):
            out = []
            for r in rows:
                r = list(r[:-1]) + ["sync", "cuda_sync", "X", labels.get(r[-1], "Unknown")]
                for i in (1, 6):  # tid, stream: "no stream" -> null
                    if r[i] == _NONE_ID:
                        r[i] = None
                out.append(tuple(r))
            yield out_names, out

    def _host_ids(self, col: str = "t.globalTid") -> list[str]:
        return [f"(({col} >> 24) & 16777215)", f"({col} & 16777215)"]

    def _runtime(self, con):
        t = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if t not in self.tables:
            return
        name = self._str("t.nameId") if "nameId" in self.cols[t] else "NULL"
        if "eventClass" in self.cols[t]:
            kind = "CASE t.eventClass WHEN 1 THEN 'driver' ELSE 'runtime' END"
        else:
            kind = f"CASE WHEN {name} LIKE 'cuda%' THEN 'runtime' ELSE 'driver' END"
        names = ["pid", "tid", "ts_ns", "dur_ns", "correlation", "kind", "cat", "ph", "name"]
        exprs = self._host_ids() + ["t.start", "t.\"end\" - t.start", self._corr(t, "globalTid"), kind,
                                    f"CASE WHEN {kind} = 'driver' THEN 'cuda_driver' ELSE 'cuda_runtime' END",
                                    "'X'", name]
        yield from self._fetch(con, f'SELECT {", ".join(exprs)} FROM "{t}" t ORDER BY t.start', names)

    def _nvtx(self, con):
        t = "NVTX_EVENTS"
        if t not in self.tables:
            return
        c = lambda col: self._c(t, col)  # noqa: E731
        text = f"coalesce({c('text')}, {self._str(c('textId'))})" if "textId" in self.cols[t] else c("text")
        domains = {}
        if "domainId" in self.cols[t]:
            domains = {
                int(d): str(n) for d, n in con.execute(
                    f"SELECT t.domainId, {text} FROM NVTX_EVENTS t WHERE t.eventType = {NVTX_DOMAIN_CREATE}"
                ) if d is not None and n is not None
            }
        sql = (
            f"SELECT t.eventType, t.start, t.\"end\", {text}, {c('globalTid')}, {c('domainId')} "
            f"FROM NVTX_EVENTS t WHERE t.eventType IN ({NVTX_MARK}, {NVTX_PUSHPOP}, {NVTX_STARTEND}) "
            "ORDER BY t.start"
        )
        names = ["kind", "cat", "ph", "name", "pid", "tid", "ts_ns", "dur_ns", "seq_number", "input_dims", "text"]
        unclosed = 0
        ops = 0
        for _n, rows in self._fetch(con, sql, []):
            out = []
            for etype, start, end, txt, gtid, dom in rows:
                pid = (gtid >> 24) & 0xFFFFFF if gtid is not None else None
                tid = gtid & 0xFFFFFF if gtid is not None else None
                cat = "nvtx" if not dom else f"nvtx:{domains.get(int(dom), dom)}"
                if etype == NVTX_MARK:
                    out.append(("instant", cat, "i", txt, pid, tid, start, 0, None, None, None))
                    continue
                if end is None or start is None:
                    unclosed += 1
                    continue  # end < start goes on: storage stores it as 0 ns and counts it (negative durations)
                parsed = parse_emit_nvtx(txt) if not dom else None
                if parsed is not None and not _is_step(parsed["name"]):
                    ops += 1
                    extra = {k: parsed[k] for k in ("op_id", "input_op_ids") if parsed[k] is not None}
                    out.append(("cpu_op", cat, "X", parsed["name"], pid, tid, start, end - start,
                                parsed["seq"], parsed["sizes"], json.dumps(extra) if extra else None))
                else:
                    name = parsed["name"] if parsed is not None else txt
                    out.append(("annotation", cat, "X", name, pid, tid, start, end - start, None, None, None))
            yield names, out
        if unclosed:
            self.meta.warnings.append(f"{unclosed} NVTX ranges were never closed (no end time); skipped")
        self.meta.extra["nvtx_operator_ranges"] = ops

    def _overhead(self, con):
        t = "PROFILER_OVERHEAD"
        if t not in self.tables:
            return
        name = self._str("t.nameId") if "nameId" in self.cols[t] else "'profiler overhead'"
        names = ["pid", "tid", "ts_ns", "dur_ns", "kind", "cat", "ph", "name"]
        exprs = self._host_ids(self._c(t, "globalTid")) + ["t.start", "t.\"end\" - t.start", "'other'",
                                                           "'nsys_overhead'", "'X'", name]
        yield from self._fetch(con, f'SELECT {", ".join(exprs)} FROM "{t}" t ORDER BY t.start', names)

    def _threads(self, con):
        """Process and thread names of the processes that have host events in the export."""
        pids = set()
        for t, col in (("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"), ("NVTX_EVENTS", "globalTid")):
            if t in self.tables and col in self.cols[t]:
                pids |= {r[0] for r in con.execute(f'SELECT DISTINCT ("{col}" >> 24) & 16777215 FROM "{t}"') if r[0] is not None}
        names = ["kind", "ph", "name", "pid", "tid", "text"]
        out = []
        if "PROCESSES" in self.tables and {"pid", "name"} <= set(self.cols["PROCESSES"]):
            for pid, pname in con.execute("SELECT pid, name FROM PROCESSES"):
                if pid in pids:
                    out.append(("meta", "M", "process_name", pid, 0, pname))
        if "ThreadNames" in self.tables and {"nameId", "globalTid"} <= set(self.cols["ThreadNames"]):
            for gtid, tname in con.execute(f"SELECT t.globalTid, {self._str('t.nameId')} FROM ThreadNames t"):
                if gtid is not None and (gtid >> 24) & 0xFFFFFF in pids:
                    out.append(("meta", "M", "thread_name", (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF, tname))
        if out:
            yield names, out
