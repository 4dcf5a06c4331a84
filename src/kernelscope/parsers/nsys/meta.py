"""What an nsys export says about itself, into ``TraceMeta``: the export's version and time settings
(``META_DATA_EXPORT``), the time base (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``, or 0 for a
``--ts-normalize``d export), the devices (``TARGET_INFO_GPU`` in Kineto's deviceProperties keys) and the
profiler's notes about lost data (``DIAGNOSTIC_EVENT``)."""

from __future__ import annotations

import re
from typing import Any

from kernelscope.parsers.schema import TraceMeta


def read_meta(con, tables: set[str], cols: dict[str, list[str]], meta: TraceMeta) -> None:
    """Fill ``meta`` from the export's own tables (``tables``; ``cols``: table -> its columns)."""
    export = {}
    if "META_DATA_EXPORT" in tables:
        export = {str(k): v for k, v in con.execute("SELECT name, value FROM META_DATA_EXPORT")}
    meta.extra["nsys_export"] = {
        k: export[k] for k in ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION", "EXPORT_PARAM_TIME_NORMALIZE")
        if k in export
    }
    normalized = str(export.get("EXPORT_PARAM_TIME_NORMALIZE", "false")).lower() == "true"
    start = None
    if "TARGET_INFO_SESSION_START_TIME" in tables and "utcEpochNs" in cols["TARGET_INFO_SESSION_START_TIME"]:
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
    meta.device_properties = _devices(con, tables, meta)
    if "DIAGNOSTIC_EVENT" in tables and "text" in cols["DIAGNOSTIC_EVENT"]:
        for (text,) in con.execute("SELECT text FROM DIAGNOSTIC_EVENT"):
            t = str(text or "")
            if re.search(r"\b(dropped|lost|overflow|discarded)\b", t, re.I):
                meta.dropped_notes.append(t)


def _devices(con, tables: set[str], meta: TraceMeta) -> list[dict[str, Any]]:
    """TARGET_INFO_GPU rows in Kineto's deviceProperties keys (plus nsys's uuid, bandwidth, ...)."""
    if "TARGET_INFO_GPU" not in tables:
        meta.warnings.append("the export has no TARGET_INFO_GPU table: no device properties")
        return []
    cuda_id = {}
    if "TARGET_INFO_CUDA_DEVICE" in tables:
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
