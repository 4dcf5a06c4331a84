"""``NsysReader``: the mapping of an nsys export's tables to ``RAW_EVENTS`` rows (the table in the package
docstring), one SQL query per table over the SQLite connection ``source.open_export`` gives."""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from kernelscope.errors import ParseError
from kernelscope.parsers.nsys.meta import read_meta
from kernelscope.parsers.nsys.source import SqliteSource, open_export
from kernelscope.parsers.nsys.tables import check_types
from kernelscope.parsers.schema import RAW_EVENTS, TraceMeta

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


class NsysReader:
    """Iterate an nsys export (SQLite file, ``.sqlite.gz``, ``.nsys-rep`` or Parquet directory) as
    ``RAW_EVENTS`` record batches; ``meta`` is complete afterwards."""

    def __init__(self, path: str | Path, *, batch_rows: int = 65536, **_ignored: Any):
        self.path = Path(path)
        self.batch_rows = batch_rows
        self.meta = TraceMeta(format="nsys")

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        with tempfile.TemporaryDirectory(prefix="kernelscope-nsys-") as tmpdir:
            src = open_export(self.path, tmpdir, self.meta)
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

    def _read(self, src: SqliteSource) -> Iterator[pa.RecordBatch]:
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
        check_types(con, self.cols, src.export_type)
        read_meta(con, tables, self.cols, meta)
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
                rows = con.execute(f'SELECT DISTINCT ("{col}" >> 24) & 16777215 FROM "{t}"')
                pids |= {r[0] for r in rows if r[0] is not None}
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
