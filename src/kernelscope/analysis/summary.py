"""The per-trace summary: counts, GPU time spans, top kernels and operators, and a trust section.

Definitions (docs/metrics.md is the canonical text; every time is integer ns):

- GPU activity: a row of ``gpu_activities`` (kind kernel, memcpy or memset; never GPU-side annotations
  or syncs). ``kernels``/``memcpys``/``memsets`` count them.
- ``launches``: host runtime/driver calls that launched GPU work (``launches.activities > 0``: at least one
  GPU activity carries their correlation id). ``cpu_ops``: CPU operators (ProfilerStep#N and
  ``record_function`` ranges are phases, ``python_function`` events are not operators).
- ``kernel_time_ns``: sum of kernel durations. ``busy_ns``: length of the union of GPU activity intervals
  on a device. ``gpu_span_ns``: first GPU activity start to last GPU activity end. ``idle_ns`` =
  ``gpu_span_ns - busy_ns``. ``latency_ns``: first top-level CPU operator start to last GPU activity end.
  ``exposed_host_ns`` = ``latency_ns - busy_ns``.
- Several devices: ``kernel_time_ns``, ``busy_ns`` and ``idle_ns`` are sums over devices (the ``devices``
  table has each device's numbers), ``gpu_span_ns`` is the overall first start to last end, and
  ``exposed_host_ns`` subtracts the union of GPU activity over all devices. ``exposed_host_ns`` counts only the
  GPU activity inside the latency window (work that ran before the first top-level operator, queued before
  the profiler's window opened, is in neither side), so it is never negative.
- Span-like numbers (``gpu_span_ns``, ``idle_ns``, ``latency_ns``, ``exposed_host_ns``) are null when the
  trace has no GPU activity (``latency_ns`` also when it has no CPU operator, or when every GPU activity
  ends before the first top-level operator starts: a warning says so; it is never negative).
- ``top_kernels``: the 10 kernel names with the most summed duration (``share`` of ``kernel_time_ns``).
  ``top_operators`` / ``top_leaf_operators``: the 10 top-level / leaf operator names whose kernels have
  the most summed kernel duration; ``calls`` counts the operator instances that launched kernels.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from ..storage.intervals import union_sql
from ..storage.labels import label_value
from ..storage.ranks import rank_ranges
from .result import Result
from .result import py_scalar as _py
from .rows import query_row, query_rows

DESCRIPTION = "Counts, GPU busy/idle/span, latency, top kernels and operators, trust."
TOP_N = 10

# Scalar numbers over the whole trace, one row. Every BIGINT sum is cast back to BIGINT so that ns stay
# exact integers (DuckDB widens SUM(BIGINT) to HUGEINT, which pandas would turn into float).
_SQL_COUNTS = """
WITH g AS (
  SELECT count(*) FILTER (WHERE kind = 'kernel') AS kernels,
         count(*) FILTER (WHERE kind = 'memcpy') AS memcpys,
         count(*) FILTER (WHERE kind = 'memset') AS memsets,
         CAST(coalesce(sum(dur_ns) FILTER (WHERE kind = 'kernel'), 0) AS BIGINT) AS kernel_time_ns,
         CAST(max(end_ns) - min(start_ns) AS BIGINT) AS gpu_span_ns, max(end_ns) AS last_end_ns
  FROM gpu_activities WHERE trace_id = $t
), o AS (
  SELECT count(*) AS cpu_ops, min(start_ns) FILTER (WHERE depth = 0) AS first_top_ns
  FROM cpu_ops WHERE trace_id = $t
)
SELECT g.kernels, g.memcpys, g.memsets,
  (SELECT count(*) FROM launches WHERE trace_id = $t AND activities > 0)         AS launches,
  o.cpu_ops, g.kernel_time_ns, g.gpu_span_ns, g.last_end_ns - o.first_top_ns    AS latency_ns,
  o.first_top_ns, g.last_end_ns - g.gpu_span_ns                                   AS first_gpu_ns,
  (SELECT count(*) FROM annotations WHERE trace_id = $t AND kind = 'step')       AS steps,
  (SELECT count(*) FROM annotations WHERE trace_id = $t AND kind = 'user')       AS user_annotations
FROM g, o
"""

# Per device: activity counts and span from gpu_activities, busy time from the derived busy_intervals.
_SQL_DEVICES = """
WITH act AS (
  SELECT device,
         count(*) FILTER (WHERE kind = 'kernel') AS kernels,
         count(*) FILTER (WHERE kind = 'memcpy') AS memcpys,
         count(*) FILTER (WHERE kind = 'memset') AS memsets,
         CAST(coalesce(sum(dur_ns) FILTER (WHERE kind = 'kernel'), 0) AS BIGINT) AS kernel_time_ns,
         CAST(max(end_ns) - min(start_ns) AS BIGINT) AS gpu_span_ns
  FROM gpu_activities WHERE trace_id = $t GROUP BY device
), busy AS (
  SELECT device, CAST(sum(end_ns - start_ns) AS BIGINT) AS busy_ns
  FROM busy_intervals WHERE trace_id = $t GROUP BY device
)
SELECT act.device, kernels, memcpys, memsets, kernel_time_ns,
       CAST(coalesce(busy.busy_ns, 0) AS BIGINT) AS busy_ns, gpu_span_ns,
       CAST(gpu_span_ns - coalesce(busy.busy_ns, 0) AS BIGINT) AS idle_ns
FROM act LEFT JOIN busy ON busy.device = act.device
ORDER BY act.device
"""

# Length of the union of busy intervals over all devices (islands of overlapping intervals;
# storage/intervals.py has the one definition).
_SQL_UNION_ALL_DEVICES = f"""
SELECT CAST(coalesce(sum(end_ns - start_ns), 0) AS BIGINT) AS busy_ns
FROM ({union_sql("(SELECT greatest(start_ns, $from) AS start_ns, end_ns FROM busy_intervals "
                 "WHERE trace_id = $t AND end_ns > $from)")})
"""

_SQL_TOP_KERNELS = """
SELECT name, count(*) AS count, CAST(sum(dur_ns) AS BIGINT) AS total_ns,
       avg(dur_ns) AS mean_ns, CAST(min(dur_ns) AS BIGINT) AS min_ns, CAST(max(dur_ns) AS BIGINT) AS max_ns
FROM gpu_activities WHERE trace_id = $t AND kind = 'kernel'
GROUP BY name ORDER BY total_ns DESC, name LIMIT $n
"""

# {link} is 'top_op_id' or 'leaf_op_id' (a column name chosen here, never user input).
# Kernels are summed per operator instance first, then per name (calls = instances with kernels).
# From the per-instance kernel sums stored at ingest (op_kernels, storage/derive.py; {link} is 'top' or
# 'leaf'): per operator name, calls = instances with kernels. ``instances`` (every row): all instances with
# kernels = count(DISTINCT top_op_id / leaf_op_id) over the kernels, which the trust section reports.
_SQL_TOP_OPS = """
SELECT name, count(*) AS calls, CAST(sum(kernels) AS BIGINT) AS kernels,
       CAST(sum(kernel_time_ns) AS BIGINT) AS kernel_time_ns,
       (SELECT count(*) FROM op_kernels WHERE trace_id = $t AND link = '{link}') AS instances
FROM op_kernels WHERE trace_id = $t AND link = '{link}' AND has_op
GROUP BY name ORDER BY kernel_time_ns DESC, name LIMIT $n
"""

_SQL_TRUST = """
WITH k AS (
  SELECT count(*) FILTER (WHERE launch_id IS NOT NULL) AS kernels_with_launch,
         count(*) FILTER (WHERE is_graph) AS graph_kernels,
         count(*) FILTER (WHERE NOT is_graph) AS nongraph_kernels,
         count(*) FILTER (WHERE NOT is_graph AND leaf_op_id IS NOT NULL) AS nongraph_kernels_with_leaf_op,
         CAST(coalesce(sum(dur_ns) FILTER (WHERE top_op_id IS NULL), 0) AS BIGINT)
             AS kernel_time_without_operator_ns
  FROM gpu_activities WHERE trace_id = $t AND kind = 'kernel'
), l AS (
  SELECT count(*) FILTER (WHERE ext_agrees = false) AS ext_id_disagreements,
         count(*) FILTER (WHERE ext_agrees IS NOT NULL) AS ext_id_compared
  FROM launches WHERE trace_id = $t
)
SELECT k.kernels_with_launch, k.graph_kernels, k.nongraph_kernels, k.nongraph_kernels_with_leaf_op,
  k.kernel_time_without_operator_ns,
  (SELECT count(*) FROM cpu_ops WHERE trace_id = $t AND depth = 0) AS top_ops,
  (SELECT count(*) FROM activity_splits WHERE trace_id = $t AND lq_ns < 0) AS negative_launch_times,
  l.ext_id_disagreements, l.ext_id_compared
FROM k, l
"""

# Kernel launch calls that launched nothing in the trace, and those of them inside stream capture: the thread's
# last cudaStreamBeginCapture/EndCapture (or hip...) call before the launch was a begin (an ASOF join).
_SQL_NO_KERNEL = """
WITH cap AS (  -- stream-capture begin (open = 1) and end (open = 0) calls, per thread
  SELECT coalesce(pid, -1) AS p, coalesce(tid, -1) AS h, start_ns,
         regexp_matches(name, 'StreamBeginCapture')::INTEGER AS open
  FROM launches WHERE trace_id = $t AND regexp_matches(name, '^(cuda|hip)Stream(Begin|End)Capture')
), idle AS (
  SELECT coalesce(pid, -1) AS p, coalesce(tid, -1) AS h, start_ns FROM launches
  WHERE trace_id = $t AND launch_type = 'kernel' AND activities = 0
)
SELECT count(*) AS count, count(*) FILTER (WHERE c.open = 1) AS in_capture
FROM idle i ASOF LEFT JOIN cap c ON c.p = i.p AND c.h = i.h AND c.start_ns <= i.start_ns
"""


def launches_without_kernel(store, trace_id: str) -> dict[str, int]:
    """``{count, in_capture}``: kernel launch calls with no kernel in the trace, and how many of them were
    recorded into a CUDA/HIP graph by stream capture (summary's ``trust.launches_without_kernel``)."""
    row = query_row(store, _SQL_NO_KERNEL, t=trace_id)
    return {"count": int(row["count"] or 0), "in_capture": int(row["in_capture"] or 0)}

# An activity overlaps its stream when it starts before an earlier-starting activity on the same
# (device, stream) has ended (programmatic dependent launch does this; it is not an error): counted per stream at
# ingest (stream_overlaps, schema 013).
_SQL_SAME_STREAM_OVERLAPS = """
SELECT CAST(coalesce(sum(overlapping), 0) AS BIGINT) AS same_stream_overlaps FROM stream_overlaps WHERE trace_id = $t
"""

_SQL_TRACE = """
SELECT trace_id, name, source, rank, warnings, dropped_notes, provenance FROM traces WHERE trace_id = $t
"""

_SQL_LABELS = "SELECT key, value_text, value_num FROM labels WHERE trace_id = $t ORDER BY key"

# What ingest recorded about the trace's own soundness (schema 008; null for traces stored before it) and,
# for a trace of a partial run, the run's missing ranks.
_SQL_INGEST_TRUST = """
SELECT t.truncated, t.negative_durations, t.set_aside, t.run_id, t.rank, r.world_size, r.ranks, r.missing_ranks
FROM traces t LEFT JOIN runs r ON r.run_id = t.run_id WHERE t.trace_id = $t
"""




def _json_list(text: Any) -> list:
    if text is None:
        return []
    if isinstance(text, list):
        return text
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return [str(text)]
    return value if isinstance(value, list) else [value]


def _json_obj(text: Any) -> dict | None:
    if text is None:
        return None
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# torch.profiler options a kernelscope collector run records in its provenance, and what each records.
_RECORDED = {"record_shapes": "shapes", "with_stack": "stacks", "profile_memory": "memory", "with_modules": "modules"}


def profiler_options(provenance: Any) -> dict | None:
    """The torch.profiler options a kernelscope collector run recorded in the trace's provenance; None when the
    trace does not say (not a kernelscope collector run)."""
    opts = (_json_obj(provenance) or {}).get("profiler_options")
    return opts if isinstance(opts, dict) else None


def _trace_provenance(store, trace_id: str):
    return query_row(store, "SELECT provenance FROM traces WHERE trace_id = $t", t=trace_id).get("provenance")


def trace_profiler_options(store, trace_id: str) -> dict:
    """``profiler_options`` of a stored trace's provenance; {} when it does not say."""
    return profiler_options(_trace_provenance(store, trace_id)) or {}


def trace_profiler_overhead(store, trace_id: str) -> dict:
    """The profiler overhead ``kernelscope profile`` measured for a stored trace (run.json ``overhead.profiler``,
    kept in its provenance as ``profiler_overhead``); {} when it does not say."""
    o = (_json_obj(_trace_provenance(store, trace_id)) or {}).get("profiler_overhead")
    return o if isinstance(o, dict) else {}


def trace_python_gc(store, trace_id: str) -> dict:
    """Both passes' full garbage collections as ``kernelscope profile`` counted them (provenance ``python_gc``:
    ``{"profiled": {"full_collections", "ns"}, "unprofiled": ... or None}``); {} when it does not say."""
    g = (_json_obj(_trace_provenance(store, trace_id)) or {}).get("python_gc")
    return g if isinstance(g, dict) else {}


def trace_profiler_inflation(store, trace_id: str) -> tuple[float, dict] | None:
    """(profiled / un-profiled time, the overhead record) per step or kernelscope.range region, as ``kernelscope
    profile`` measured it when it recorded the trace (``trace_profiler_overhead``); None when it did not."""
    o = trace_profiler_overhead(store, trace_id)
    if o.get("basis") not in ("step", "range") or o.get("pct") is None:
        return None
    return 1 + float(o["pct"]) / 100, o


def trace_device_properties(store, trace_id: str) -> list[dict]:
    """A stored trace's deviceProperties entries (dicts); [] when it has none. Kineto's 2021 spelling of the
    compute capability (``major``/``minor``) is given as today's ``computeMajor``/``computeMinor`` too."""
    from .opmodel_inputs import json_value

    props = json_value(query_row(store, "SELECT device_properties FROM traces WHERE trace_id = $t",
                                 t=trace_id).get("device_properties"))
    out = []
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict):
            out.append({**p, "computeMajor": p.get("computeMajor", p.get("major")),
                        "computeMinor": p.get("computeMinor", p.get("minor"))})
    return out


def _not_recorded(provenance: Any) -> list[str] | None:
    """What the collector's profiler was told not to record (shapes, stacks, memory, modules); null when the
    trace does not say (not a kernelscope collector run)."""
    opts = profiler_options(provenance)
    if opts is None:
        return None
    return [what for key, what in _RECORDED.items() if key in opts and not opts[key]]


def _fmt_int(n: int) -> str:
    return f"{n:,}"


def ingest_trust(store, trace_id: str) -> tuple[dict[str, Any], list[str]]:
    """The trust keys ingest recorded for a trace (docs/metrics.md "Trust section") and their warnings:

    - ``truncated``: null, or where a cut file ended and what ``ingest --salvage`` kept (``at_byte``,
      ``read_bytes``, ``events_kept``, ``gzip``, ``reason``);
    - ``negative_durations``: events whose duration was negative as written and is stored as 0 ns:
      ``count``, ``kernels``, ``cpu_ops`` and ``by_kind`` (per kind ``count``, ``min_ns``, ``sum_ns`` of the
      raw durations); null for traces stored before this was counted;
    - ``set_aside``: events of categories kernelscope does not map (other accelerators, device ranges,
      unknown categories), kept in other_events and never analysed: ``events``, ``device_events`` and
      ``by_category``; a trace with device events set aside is never called CPU-only;
    - ``partial_run``: null, or for a trace of a run that lacks ranks: ``run_id``, ``world_size``,
      ``ranks_present``, ``missing_ranks``.
    """
    row = query_row(store, _SQL_INGEST_TRUST, t=trace_id)
    cut = _json_obj(row.get("truncated"))
    neg = _json_obj(row.get("negative_durations"))
    aside = _json_obj(row.get("set_aside"))
    missing = _json_list(row.get("missing_ranks")) if row.get("missing_ranks") is not None else []
    trust: dict[str, Any] = {"truncated": cut}
    warnings: list[str] = []
    if neg is None:
        trust["negative_durations"] = None
    else:
        count = sum(int(v.get("count", 0)) for v in neg.values())
        trust["negative_durations"] = {
            "count": count, "kernels": int(neg.get("kernel", {}).get("count", 0)),
            "cpu_ops": int(neg.get("cpu_op", {}).get("count", 0)), "by_kind": neg}
        if count:
            parts = ", ".join(f"{_fmt_int(int(v['count']))} {k}" for k, v in sorted(neg.items()))
            worst = min(int(v.get("min_ns", 0)) for v in neg.values())
            warnings.append(f"{_fmt_int(count)} events had a negative duration ({parts}; down to "
                            f"{_fmt_int(worst)} ns, clock trouble in the profiler): each is stored as 0 ns, so "
                            "sums and busy time leave them out.")
    if aside is None:
        trust["set_aside"] = None
    else:
        events = sum(int(v.get("events", 0)) for v in aside.values())
        device = sum(int(v.get("device_events", 0)) for v in aside.values())
        trust["set_aside"] = {"events": events, "device_events": device, "by_category": aside}
        if device:
            cats = ", ".join(f"{k} {_fmt_int(int(v['device_events']))}" for k, v in sorted(aside.items())
                             if v.get("device_events"))
            warnings.append(f"{_fmt_int(device)} device events of categories kernelscope does not analyse "
                            f"({cats}: another accelerator or a device range) were set aside: GPU numbers cover "
                            "CUDA/HIP kernels, copies and memsets only.")
        if events > device:
            cats = ", ".join(f"{k} {_fmt_int(int(v['events']) - int(v.get('device_events', 0)))}"
                             for k, v in sorted(aside.items()) if int(v["events"]) > int(v.get("device_events", 0)))
            warnings.append(f"{_fmt_int(events - device)} host events of categories kernelscope does not map "
                            f"({cats}) were kept aside, not analysed.")
    if cut:
        warnings.insert(0, f"TRUNCATED trace: the file ends at byte {_fmt_int(int(cut.get('read_bytes', 0)))} "
                           f"({cut.get('reason', 'cut short')}); the {_fmt_int(int(cut.get('events_kept', 0)))} "
                           "complete events before the cut were kept (ingest --salvage) and the rest is lost: "
                           "counts, times and spans cover the kept part only.")
    if missing and row.get("world_size"):
        trust["partial_run"] = {"run_id": row.get("run_id"), "world_size": int(row["world_size"]),
                                "ranks_present": int(row.get("ranks") or 0), "missing_ranks": missing}
        warnings.append(f"rank {row.get('rank')} of a partial run ({row.get('run_id')}): "
                        f"{int(row.get('ranks') or 0)} of {int(row['world_size'])} ranks present, "
                        f"missing ranks {rank_ranges(missing)}; run-wide numbers cover the present ranks only.")
    else:
        trust["partial_run"] = None
    return trust, warnings


def no_gpu_reason(store, trace_id: str) -> str:
    """Why a trace without CUDA/HIP GPU activity has none, as a short phrase for pages and reports that say
    "no GPU activity (...)": it holds device events kernelscope sets aside (another accelerator, device
    ranges), or it is the kept part of a truncated trace, else it is a CPU-only trace. Never "CPU-only"
    while the trace holds device events (docs/metrics.md, trust ``set_aside``)."""
    trust, _warnings = ingest_trust(store, trace_id)
    aside = trust.get("set_aside") or {}
    if aside.get("device_events"):
        cats = ", ".join(k for k, v in sorted(aside["by_category"].items()) if v.get("device_events"))
        return (f"it holds {_fmt_int(int(aside['device_events']))} device events kernelscope does not analyse "
                f"({cats}): not a CPU-only trace")
    if trust.get("truncated"):
        return "the kept part of a truncated trace: the cut may have taken its GPU events"
    return "a CPU-only trace"


def _pct(part: int, whole: int) -> float | None:
    return None if not whole else round(100.0 * part / whole, 3)


def _table(store, sql: str, **params) -> pd.DataFrame:
    df = store.query(sql, params)
    return df if isinstance(df, pd.DataFrame) else pd.DataFrame(df)


def _core(store, t: str):
    """(counts row, devices table, busy_ns, idle_ns, latency_ns): what summary and headline share."""
    c = query_row(store, _SQL_COUNTS, t=t)
    devices = _table(store, _SQL_DEVICES, t=t)
    has_gpu = len(devices) > 0
    busy = int(devices["busy_ns"].sum()) if has_gpu else 0
    idle = int(devices["idle_ns"].sum()) if has_gpu else None
    latency = c["latency_ns"] if has_gpu else None
    if latency is not None and latency < 0:  # every GPU activity ended before the first operator started
        latency = None
    return c, devices, busy, idle, latency


def headline(store, trace_id: str) -> dict[str, Any]:
    """summary's scalars kernels, kernel_time_ns, busy_ns, gpu_span_ns, idle_ns and latency_ns alone
    (same definitions and values; what diff compares), without the tables and trust queries."""
    c, devices, busy, idle, latency = _core(store, trace_id)
    return {"kernels": c["kernels"], "kernel_time_ns": c["kernel_time_ns"], "busy_ns": busy,
            "gpu_span_ns": c["gpu_span_ns"] if len(devices) else None, "idle_ns": idle, "latency_ns": latency}


def summary(store, trace_id: str) -> Result:
    """Summarise one stored trace (definitions in this module's docstring and docs/metrics.md)."""
    t = trace_id
    meta = query_row(store, _SQL_TRACE, t=t)
    c, devices, busy, idle, latency = _core(store, t)
    has_gpu = len(devices) > 0
    # exposed host time is measured over the latency window: GPU work that ran before the first top-level
    # operator (queued before the profiler's window opened) is not in latency_ns, so it is not subtracted
    early = latency is not None and c["first_gpu_ns"] is not None and c["first_gpu_ns"] < c["first_top_ns"]
    if len(devices) <= 1 and not early:
        union_all = busy
    else:
        start = int(c["first_top_ns"]) if early else -(2 ** 62)
        union_all = query_row(store, _SQL_UNION_ALL_DEVICES, t=t, **{"from": start})["busy_ns"]
    scalars: dict[str, Any] = {
        "trace_id": meta.get("trace_id", t),
        "name": meta.get("name"),
        "source": meta.get("source"),
        "labels": {r["key"]: label_value(r["value_text"], r["value_num"])
                   for r in query_rows(store, _SQL_LABELS, t=t)},
        "kernels": c["kernels"],
        "memcpys": c["memcpys"],
        "memsets": c["memsets"],
        "launches": c["launches"],
        "cpu_ops": c["cpu_ops"],
        "kernel_time_ns": c["kernel_time_ns"],
        "busy_ns": busy,
        "gpu_span_ns": c["gpu_span_ns"] if has_gpu else None,
        "idle_ns": idle,
        "latency_ns": latency,
        "exposed_host_ns": None if latency is None else latency - union_all,
        "devices_count": len(devices),
        "phases": {"steps": c["steps"], "user_annotations": c["user_annotations"]},
    }
    if len(devices) > 1:
        scalars["per_device"] = {
            str(int(r["device"])): {k: _py(r[k]) for k in ("kernels", "kernel_time_ns", "busy_ns",
                                                           "gpu_span_ns", "idle_ns")}
            for _, r in devices.iterrows()
        }
        scalars["totals"] = ("kernel_time_ns, busy_ns and idle_ns are sums over devices; gpu_span_ns is "
                             "the overall first start to last end; exposed_host_ns subtracts the union "
                             "of GPU activity over all devices")

    top_kernels = _table(store, _SQL_TOP_KERNELS, t=t, n=TOP_N)
    kt = c["kernel_time_ns"]
    top_kernels["share"] = top_kernels["total_ns"] / kt if kt else float("nan")
    top_ops = _table(store, _SQL_TOP_OPS.format(link="top"), t=t, n=TOP_N)
    top_leaf = _table(store, _SQL_TOP_OPS.format(link="leaf"), t=t, n=TOP_N)
    instances = {}
    for key, df in (("top_ops_with_kernels", top_ops), ("leaf_ops_with_kernels", top_leaf)):
        instances[key] = int(df["instances"].iloc[0]) if len(df) else 0
        del df["instances"]  # in place, as drop(inplace=True) did (its inplace keyword is deprecated)
        df["share"] = df["kernel_time_ns"] / kt if kt else float("nan")

    tr = dict(query_row(store, _SQL_TRUST, t=t), **instances)
    overlaps = query_row(store, _SQL_SAME_STREAM_OVERLAPS, t=t)["same_stream_overlaps"]
    dropped = _json_list(meta.get("dropped_notes"))
    parser_warnings = _json_list(meta.get("warnings"))
    trust = {
        "kernels_with_launch": {"count": tr["kernels_with_launch"],
                                "pct": _pct(tr["kernels_with_launch"], c["kernels"])},
        "nongraph_kernels_with_leaf_op": {"count": tr["nongraph_kernels_with_leaf_op"],
                                          "of": tr["nongraph_kernels"],
                                          "pct": _pct(tr["nongraph_kernels_with_leaf_op"],
                                                      tr["nongraph_kernels"])},
        "graph_kernels": tr["graph_kernels"],
        "ops_with_kernels": {"leaf_ops": tr["leaf_ops_with_kernels"],
                             "top_level_ops": tr["top_ops_with_kernels"],
                             "top_level_ops_total": tr["top_ops"],
                             "top_level_pct": _pct(tr["top_ops_with_kernels"], tr["top_ops"])},
        "kernel_time_without_operator_ns": tr["kernel_time_without_operator_ns"],
        "negative_launch_times": tr["negative_launch_times"],
        "same_stream_overlaps": overlaps,
        "ext_id_disagreements": {"count": tr["ext_id_disagreements"], "compared": tr["ext_id_compared"]},
        "launches_without_kernel": launches_without_kernel(store, t),
        "dropped_notes": dropped,
        "parser_warnings": parser_warnings,
    }
    ingest_keys, ingest_warnings = ingest_trust(store, t)
    trust.update(ingest_keys)
    trust["not_recorded"] = _not_recorded(meta.get("provenance"))
    warnings: list[str] = list(ingest_warnings)
    if c["kernels"] and tr["kernels_with_launch"] < c["kernels"]:
        warnings.append(f"{c['kernels'] - tr['kernels_with_launch']} of {c['kernels']} kernels have no "
                        "matching launch call; launch and operator numbers leave them out.")
    if tr["negative_launch_times"]:
        warnings.append(f"{tr['negative_launch_times']} GPU activities start before their launch call "
                        "(clock skew between host and GPU timestamps).")
    if tr["ext_id_disagreements"]:
        warnings.append(f"{tr['ext_id_disagreements']} launch calls: External id and nesting name "
                        "different operators; nesting was used.")
    if dropped:
        warnings.append(f"the profiler noted lost records ({len(dropped)} notes): counts may be low.")
    if not has_gpu:
        aside_dev = (trust.get("set_aside") or {}).get("device_events") or 0
        if aside_dev:  # never "CPU-only" while the trace holds device events
            warnings.append(f"the trace has no CUDA/HIP GPU activity that kernelscope analyses, but it holds "
                            f"{aside_dev:,} device events of other kinds (set aside above): it is not a CPU-only "
                            "trace; GPU spans and latency are null.")
        elif trust.get("truncated"):
            warnings.append("the kept part of the truncated trace has no GPU activity (the profiler writes GPU "
                            "events after host events, so the cut may have taken them): GPU spans and latency "
                            "are null.")
        else:
            warnings.append("the trace has no GPU activity: GPU spans and latency are null.")
        if not c["cpu_ops"] and not aside_dev:
            warnings.append("the trace holds no PyTorch operator, runtime call or GPU activity: it may not be a "
                            "torch.profiler trace (or its profiler window caught nothing).")
    elif c["latency_ns"] is not None and c["latency_ns"] < 0:
        warnings.append("every GPU activity ends before the first top-level operator starts (work launched "
                        "before the profiler's window, or clock skew): latency and exposed host time are null.")

    return Result(
        name="summary",
        definition=__doc__.strip(),
        scalars=scalars,
        tables={"top_kernels": top_kernels, "top_operators": top_ops, "top_leaf_operators": top_leaf,
                "devices": devices},
        warnings=warnings,
        trust=trust,
    )
