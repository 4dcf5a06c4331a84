"""The nsys tables and columns the mapping reads (``TABLES_READ``, ``INT_COLUMNS``, ``TEXT_COLUMNS``) and
``check_types``: the refusal of an export where one of them holds what nsys never writes there."""

from __future__ import annotations

from kernelscope.errors import ParseError

_I64 = (-(2**63), 2**63 - 1)
_I32 = (-(2**31), 2**31 - 1)
_TIME = (-(2**62), 2**62)  # ns: +-146 years; an end - start of two such values cannot overflow int64
_GPU_INT = {"start": _TIME, "end": _TIME, "deviceId": _I32, "streamId": _I64, "correlationId": _I64,
            "globalPid": _I64}
#: Columns the mapping reads as integers, with the range their RAW_EVENTS field (or arithmetic) holds;
#: ``check_types`` refuses an export where one holds anything else.
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


def check_types(con, cols: dict[str, list[str]], export_type: str = "sqlite") -> None:
    """ParseError when a column the mapping reads as an integer holds anything else (text, a blob, a
    fraction) or an integer out of the range its row field holds (``INT_COLUMNS``), or a text column
    (``TEXT_COLUMNS``) holds anything but text. nsys writes these columns as INTEGER / TEXT; SQLite stores
    whatever it is given, and its arithmetic would turn text into 0 (a wrong pid, a negative duration)
    instead of failing. One scan per table. ``cols``: table -> its columns in the export."""
    for table, spec in INT_COLUMNS.items():
        present = [(c, rng) for c, rng in spec.items() if c in cols.get(table, ())]
        if not present:
            continue
        checks = []
        for c, (lo, hi) in present:
            checks.append(f"""sum(CASE WHEN typeof("{c}") NOT IN ('integer', 'null') OR "{c}" < {lo} """
                          f"""OR "{c}" > {hi} THEN 1 ELSE 0 END)""")
        counts = con.execute(f'SELECT {", ".join(checks)} FROM "{table}"').fetchone()
        for (c, (lo, hi)), bad in zip(present, counts or ()):
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
        if c not in cols.get(table, ()):
            continue
        row = con.execute(f"""SELECT rowid, "{c}", typeof("{c}") FROM "{table}" """
                          f"""WHERE typeof("{c}") NOT IN ('text', 'null') LIMIT 1""").fetchone()
        if row:
            raise ParseError(
                f"{table}.{c} holds {repr(row[1])[:40]} ({row[2]}) in row {row[0]}, where nsys writes text: "
                f"the export is damaged or was edited; export the report again with `nsys export --type "
                f"{export_type}`"
            )
