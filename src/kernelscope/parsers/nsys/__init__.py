"""Nsight Systems exports -> ``RAW_EVENTS`` batches (``NsysReader``): SQLite (``nsys export --type sqlite``),
plain or gzip, Parquet directories (``nsys export --type parquetdir``: one ``<TABLE>.parquet`` per table),
and ``.nsys-rep`` reports (exported to SQLite first when an ``nsys`` binary is on PATH).

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

Modules: ``source`` (the export opened as SQLite), ``tables`` (the tables and columns read, and their type
checks), ``meta`` (``TraceMeta`` from the export's own tables), ``reader`` (the mapping in the table above).
"""

from kernelscope.parsers.nsys.reader import (
    MEM_KINDS,
    MEMCPY_KINDS,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    SYNC_TYPES,
    NsysReader,
    parse_emit_nvtx,
)
from kernelscope.parsers.nsys.source import SQLITE_MAGIC
from kernelscope.parsers.nsys.tables import INT_COLUMNS, TABLES_READ, TEXT_COLUMNS

__all__ = [
    "INT_COLUMNS", "MEMCPY_KINDS", "MEM_KINDS", "NVTX_DOMAIN_CREATE", "NVTX_MARK", "NVTX_PUSHPOP", "NVTX_STARTEND",
    "SQLITE_MAGIC", "SYNC_TYPES", "TABLES_READ", "TEXT_COLUMNS", "NsysReader", "parse_emit_nvtx",
]
