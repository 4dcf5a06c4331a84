"""The Timeline's queries over one trace: its lanes, the events and busy bins of a window, the telemetry of a
window, the GPU activities of a selected operator.

Times are int64 ns since the Unix epoch, as stored; a *window* is ``[a, b)``.

**Lanes.** A lane is one row of the timeline, keyed ``(src, k1, k2, k3)``:

- ``cpu``  (pid, tid, depth): CPU operators of one thread at one nesting depth (0 = top level);
- ``api``  (pid, tid, 0): CUDA runtime/driver calls of one thread (launches, syncs, ...);
- ``gpu``  (device, stream, 0): GPU activities (kernels, memcpy, memset) of one stream;
- ``ann``  (kind code, 0, 0): annotations (phases) of one kind: ``ANN_KINDS`` (step, user, nvtx, gpu).

**Busy per bin** (:func:`bins`): for each lane, the summed time of its intervals inside the bin, capped at the
bin's length (``intervals.busy_bins_sql``). No per-lane union is taken: on a 1M-kernel trace the window
function doubled the cost of binning. The drawing (lane order, labels, the zoomed-out cache of base bins)
lives in ``reports.timeline_data``.
"""

from __future__ import annotations

import pandas as pd

from .collectives import COLLECTIVE_KERNEL_RE
from .intervals import busy_bins_sql

#: Annotation kinds in lane order; the lane key's k1 is the index here.
ANN_KINDS = ("step", "user", "nvtx", "gpu")
LANE_COLUMNS = ["src", "k1", "k2", "k3"]

_ANN_CASE = "CASE kind " + " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(ANN_KINDS)) + " ELSE 9 END"

# One SELECT per source with the same columns: lane key, event id, name, start, end and a detail text.
SOURCES = {
    "cpu": "SELECT 'cpu' AS src, pid AS k1, tid AS k2, coalesce(depth, 0) AS k3, op_id AS id, name, "
           "start_ns, end_ns, '' AS detail FROM cpu_ops WHERE trace_id = $t",
    "api": "SELECT 'api' AS src, pid AS k1, tid AS k2, 0 AS k3, launch_id AS id, name, start_ns, end_ns, "
           "coalesce(launch_type, '') AS detail FROM launches WHERE trace_id = $t",
    "gpu": "SELECT 'gpu' AS src, device AS k1, stream AS k2, 0 AS k3, activity_id AS id, name, start_ns, "
           "end_ns, kind AS detail FROM gpu_activities WHERE trace_id = $t",
    "ann": f"SELECT 'ann' AS src, {_ANN_CASE} AS k1, 0 AS k2, 0 AS k3, ann_id AS id, name, start_ns, "
           "end_ns, kind AS detail FROM annotations WHERE trace_id = $t",
}

# The same lanes with only what binning reads (DuckDB does not prune unused columns through the union
# subquery, and reading the names doubled the cost on 1M kernels).
BIN_SOURCES = {
    "cpu": "SELECT 'cpu' AS src, pid AS k1, tid AS k2, coalesce(depth, 0) AS k3, start_ns, end_ns FROM cpu_ops "
           "WHERE trace_id = $t",
    "api": "SELECT 'api' AS src, pid AS k1, tid AS k2, 0 AS k3, start_ns, end_ns FROM launches WHERE trace_id = $t",
    "gpu": "SELECT 'gpu' AS src, device AS k1, stream AS k2, 0 AS k3, start_ns, end_ns FROM gpu_activities "
           "WHERE trace_id = $t",
    "ann": f"SELECT 'ann' AS src, {_ANN_CASE} AS k1, 0 AS k2, 0 AS k3, start_ns, end_ns FROM annotations "
           "WHERE trace_id = $t",
}

# events() draws collective kernels (NCCL/RCCL, by name as storage/collectives.py defines them) apart: detail 'nccl'
_NCCL_DETAIL = f"CASE WHEN kind = 'kernel' AND regexp_matches(name, '{COLLECTIVE_KERNEL_RE}') THEN 'nccl' ELSE kind END"
EVENT_SOURCES = dict(SOURCES, gpu=SOURCES["gpu"].replace("kind AS detail", f"{_NCCL_DETAIL} AS detail"))

_COUNT_SQL = "SELECT count(*) AS n FROM ({src}) q WHERE start_ns < $b AND end_ns > $a"

_EVENTS_SQL = """
SELECT src, k1, k2, k3, id, name, start_ns, end_ns, detail FROM ({src}) q
WHERE start_ns < $b AND end_ns > $a ORDER BY start_ns, src, id
"""

_INFO_SQL = """
SELECT t.start_ns, t.end_ns, t.clock_offset_ns, t.ingested_ns, t.name,
  (SELECT count(*) FROM gpu_activities WHERE trace_id = $t) AS gpu_events,
  (SELECT count(*) FROM telemetry WHERE trace_id = $t) AS telemetry_samples
FROM traces t WHERE t.trace_id = $t
"""

_LANES_SQL = f"""
SELECT 'ann' AS src, {_ANN_CASE} AS k1, 0 AS k2, 0 AS k3, count(*) AS events
FROM annotations WHERE trace_id = $t GROUP BY ALL
UNION ALL SELECT 'cpu', pid, tid, coalesce(depth, 0), count(*) FROM cpu_ops WHERE trace_id = $t GROUP BY ALL
UNION ALL SELECT 'api', pid, tid, 0, count(*) FROM launches WHERE trace_id = $t GROUP BY ALL
UNION ALL SELECT 'gpu', device, stream, 0, count(*) FROM gpu_activities WHERE trace_id = $t GROUP BY ALL
"""


def trace_info(store, trace_id: str) -> dict | None:
    """origin (``start_ns``), ``end_ns``, ``clock_offset_ns`` (telemetry clock minus trace clock),
    ``ingested_ns``, ``gpu_events``, ``telemetry_samples``, ``name``; None for an unknown trace."""
    df = store.query(_INFO_SQL, {"t": trace_id})
    if df.empty:
        return None
    row = {k: (None if pd.isna(v) else v) for k, v in df.iloc[0].items()}
    for k in ("start_ns", "end_ns", "clock_offset_ns", "ingested_ns", "gpu_events", "telemetry_samples"):
        row[k] = None if row[k] is None else int(row[k])
    return row


def lane_counts(store, trace_id: str) -> pd.DataFrame:
    """Every lane of the trace with its event count (columns src, k1, k2, k3, events), in no order."""
    return store.query(_LANES_SQL, {"t": trace_id})


def count_events(store, trace_id: str, a: int, b: int) -> int:
    """Events of every lane intersecting ``[a, b)``."""
    sql = " UNION ALL ".join(_COUNT_SQL.format(src=s) for s in SOURCES.values())
    return int(store.query(f"SELECT CAST(sum(n) AS BIGINT) AS n FROM ({sql})", {"t": trace_id, "a": a, "b": b})
               ["n"].iloc[0])


def events(store, trace_id: str, a: int, b: int) -> pd.DataFrame:
    """Every event intersecting ``[a, b)`` (lane key, id, name, start_ns, end_ns, detail), by start. ``detail``
    is the GPU activity's kind ('kernel', 'memcpy', 'memset'; 'nccl' for a collective library's kernel), the
    launch call's type, the annotation's kind, '' for CPU operators."""
    union = "\n  UNION ALL ".join(EVENT_SOURCES.values())
    return store.query(_EVENTS_SQL.format(src=union), {"t": trace_id, "a": a, "b": b})


def empty_bins() -> pd.DataFrame:
    """A frame of no bins with the columns and types of :func:`bins`."""
    return pd.DataFrame({c: pd.Series(dtype="object" if c == "src" else "int64")
                         for c in LANE_COLUMNS + ["bin", "busy_ns"]})


def bins_of(store, sources, params: dict) -> pd.DataFrame:
    """Busy ns per (lane, bin) of each SELECT in ``sources`` (lane key, start_ns, end_ns), ``params`` giving
    ``a``, ``b``, ``w`` and the sources' own; the non-empty parts concatenated (:func:`empty_bins` if none)."""
    parts = [store.query(busy_bins_sql(s), params) for s in sources]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return empty_bins()
    return pd.concat(parts, ignore_index=True)


def bins(store, trace_id: str, a: int, b: int, w: int) -> pd.DataFrame:
    """Busy ns per (lane, bin) in ``[a, b)``, bins of ``w`` ns from ``a``, straight from DuckDB (sparse:
    bins without busy time are absent)."""
    return bins_of(store, BIN_SOURCES.values(), {"t": trace_id, "a": a, "b": b, "w": w})


#: The telemetry quantities the Timeline draws (columns of table telemetry).
TELEMETRY_COLUMNS = ("power_mw", "power_instant_mw", "sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct", "mem_util_pct",
                     "temperature_c")

# samples in [a, b) plus, per device and quantity, its last value before a and its first at or after b, at
# their own sample times (so lines run across a window narrower than the sampling period, and slow fields --
# clocks, utilisation, filled in one sample in several -- start from their last known value)
def _edge_sql(side: str) -> str:
    agg, cond = ("max", "t_ns < $a") if side == "before" else ("min", "t_ns >= $b")
    marks = ", ".join(f"{agg}(t_ns) FILTER (WHERE {c} IS NOT NULL) OVER (PARTITION BY device) AS _e_{c}"
                      for c in TELEMETRY_COLUMNS)
    keep = ", ".join(f"CASE WHEN t_ns = _e_{c} THEN {c} END AS {c}" for c in TELEMETRY_COLUMNS)
    return (f"SELECT device, t_ns, {keep} FROM (SELECT *, {marks} FROM s WHERE {cond}) e "
            f"WHERE t_ns IN ({', '.join(f'_e_{c}' for c in TELEMETRY_COLUMNS)})")


_TELEMETRY_SQL = f"""
WITH s AS (
  SELECT coalesce(device_index, -1) AS device, ts_ns - $off AS t_ns, {", ".join(TELEMETRY_COLUMNS)}
  FROM telemetry WHERE trace_id = $t
)
SELECT * FROM s WHERE t_ns >= $a AND t_ns < $b
UNION ALL {_edge_sql("before")}
UNION ALL {_edge_sql("after")}
ORDER BY device, t_ns
"""

_TELEMETRY_BINNED_SQL = """
SELECT coalesce(device_index, -1) AS device, (ts_ns - $off - $a) // $w AS bin,
       min(ts_ns - $off) AS t_ns, {avgs}
FROM telemetry WHERE trace_id = $t AND ts_ns - $off >= $a AND ts_ns - $off < $b
GROUP BY ALL ORDER BY device, bin
""".replace("{avgs}", ", ".join(f"avg({c}) AS {c}" for c in TELEMETRY_COLUMNS))


def telemetry(store, trace_id: str, a: int, b: int, clock_offset_ns: int | None, max_points: int = 2000):
    """NVML samples in ``[a, b)`` on the trace's clock (``t_ns = ts_ns - clock_offset_ns``; offset 0 when
    not measured), with each device's nearest sample before and after the window: device, t_ns and the
    ``TELEMETRY_COLUMNS`` (power_mw, power_instant_mw, sm_clock_mhz, mem_clock_mhz, gpu_util_pct,
    mem_util_pct, temperature_c; null where a sample lacks the field). More than ``max_points`` samples in
    the window are averaged per bin (``t_ns`` is then the bin's first sample; no neighbours)."""
    p = {"t": trace_id, "a": a, "b": b, "off": int(clock_offset_ns or 0)}
    n = store.query("SELECT count(*) AS n FROM telemetry WHERE trace_id = $t AND ts_ns - $off >= $a "
                    "AND ts_ns - $off < $b", p)["n"].iloc[0]
    if int(n) <= max_points:
        return store.query(_TELEMETRY_SQL, p)
    return store.query(_TELEMETRY_BINNED_SQL, p | {"w": max(1, -(-(b - a) // max_points))}).drop(columns="bin")


# The selected GPU activities in [a, b) with their launch calls. {acts} picks the activities' ids.
_SELECT_SQL = """
SELECT l.pid, l.tid, l.start_ns AS launch_start_ns, l.end_ns AS launch_end_ns, g.activity_id, g.name,
       g.kind, g.device, g.stream, g.start_ns, g.end_ns
FROM gpu_activities g LEFT JOIN launches l ON l.trace_id = $t AND l.launch_id = g.launch_id
WHERE g.trace_id = $t AND g.start_ns < $b AND g.end_ns > $a AND {acts}
ORDER BY g.start_ns LIMIT $limit
"""
# launched inside one operator instance: the launch call is on its thread and starts inside its interval
_INSTANCE_ACTS = """g.launch_id IN (
  SELECT l.launch_id FROM launches l
  JOIN (SELECT pid, tid, start_ns, end_ns FROM cpu_ops WHERE trace_id = $t AND op_id = $op) o
    ON l.pid = o.pid AND l.tid = o.tid AND l.start_ns >= o.start_ns AND l.start_ns < o.end_ns
  WHERE l.trace_id = $t)"""
# attributed (at ingest) to a leaf or top-level operator of that name
_NAME_ACTS = """(g.leaf_op_id IN (SELECT op_id FROM cpu_ops WHERE trace_id = $t AND name = $op)
  OR g.top_op_id IN (SELECT op_id FROM cpu_ops WHERE trace_id = $t AND name = $op))"""


def selection(store, trace_id: str, op: str, a: int, b: int, limit: int = 5000) -> tuple[pd.DataFrame, str]:
    """The GPU activities launched inside the selected operator(s) and intersecting ``[a, b)``, with their
    launch calls (at most ``limit``, by start). ``op`` is an operator instance id (digits: ``op_id``) or an
    operator name (every instance). A launch belongs to an operator instance when it is on the same thread
    and starts inside the instance's interval (the operator or one of its children made it); to an
    operator name when its leaf or top-level operator has that name.

    Returns ``(frame, label)``; ``label`` names the selection in words ('' when nothing matches)."""
    p = {"t": trace_id}
    if op.isdigit():
        sql, p["op"] = _INSTANCE_ACTS, int(op)
        named = store.query("SELECT name FROM cpu_ops WHERE trace_id = $t AND op_id = $op", p)
        label = f"{named['name'].iloc[0]} (instance {op})" if not named.empty else ""
    else:
        sql, p["op"] = _NAME_ACTS, op
        hit = store.query("SELECT 1 FROM cpu_ops WHERE trace_id = $t AND name = $op LIMIT 1", p)
        label = f"{op} (every call)" if not hit.empty else ""
    if not label:
        return pd.DataFrame(), ""
    return store.query(_SELECT_SQL.format(acts=sql), p | {"a": a, "b": b, "limit": limit}), label


def selection_bins(store, trace_id: str, op: str, a: int, b: int, w: int) -> pd.DataFrame:
    """Busy ns per bin (as :func:`bins`) of the GPU activities of selection ``op`` (as in :func:`selection`),
    in one lane keyed ('sel', 0, 0, 0)."""
    p = {"t": trace_id, "op": int(op) if op.isdigit() else op}
    acts = _INSTANCE_ACTS if op.isdigit() else _NAME_ACTS
    src = ("SELECT 'sel' AS src, 0 AS k1, 0 AS k2, 0 AS k3, g.start_ns, g.end_ns FROM gpu_activities g "
           f"WHERE g.trace_id = $t AND {acts}")
    return store.query(busy_bins_sql(src), p | {"a": a, "b": b, "w": w})


# ---------------------------------------------------------------------------------------------------------
# What the viewer shows about events: thread names, per-event details (hover, details panel), search.

def thread_names(store, trace_id: str) -> pd.DataFrame:
    """Kineto's ``thread_name`` and ``process_name`` metadata of the trace (pid, tid, kind, name), as stored
    (a thread may have several names: torch writes 'thread N (python3)' and 'thread N (pt_autograd_0)')."""
    return store.query("SELECT pid, tid, kind, name FROM threads WHERE trace_id = $t "
                       "AND kind IN ('thread_name', 'process_name') ORDER BY pid, tid, kind, name", {"t": trace_id})


# The fields of the hover, per source, for the events intersecting [a, b). A GPU activity's launching
# operator is its leaf operator (gpu_activities.leaf_op_id, linked at ingest through its launch call), its
# shapes that operator's input_dims; the operators are then looked up by id (a join against every cpu_op of a
# 1M-kernel trace scanned millions of rows per zoom).
# (one query over the three tables: a query per table cost ~8 ms each on a 1M-kernel trace)
_DETAILS_SQL = """
SELECT 'gpu' AS src, activity_id AS id, correlation, grid_x, grid_y, grid_z, block_x, block_y, block_z,
       leaf_op_id, top_op_id, NULL::VARCHAR AS op_dims, NULL::BIGINT AS activities
FROM gpu_activities WHERE trace_id = $t AND start_ns < $b AND end_ns > $a
UNION ALL
SELECT 'cpu', op_id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, input_dims, NULL
FROM cpu_ops WHERE trace_id = $t AND start_ns < $b AND end_ns > $a
UNION ALL
SELECT 'api', launch_id, correlation, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, activities
FROM launches WHERE trace_id = $t AND start_ns < $b AND end_ns > $a
"""
_DETAIL_COLUMNS = {"gpu": ["src", "id", "correlation", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"],
                   "cpu": ["src", "id", "op_dims"], "api": ["src", "id", "correlation", "activities"]}
_OPS_BY_ID_SQL = """
SELECT op_id, name, input_dims, input_types FROM cpu_ops
WHERE trace_id = $t AND op_id BETWEEN $lo AND $hi AND op_id IN (SELECT unnest($ids))
"""


def ops_by_id(store, trace_id: str, ids) -> pd.DataFrame:
    """The operators of the trace with these op_ids (op_id, name, input_dims, input_types), indexed by op_id."""
    ids = sorted({int(i) for i in ids if i is not None and not pd.isna(i)})
    if not ids:
        return pd.DataFrame(columns=["name", "input_dims", "input_types"], index=pd.Index([], name="op_id"))
    return store.query(_OPS_BY_ID_SQL, {"t": trace_id, "ids": ids, "lo": ids[0], "hi": ids[-1]}).set_index("op_id")


def event_details(store, trace_id: str, a: int, b: int) -> dict[str, pd.DataFrame]:
    """The hover fields of the events intersecting ``[a, b)``, per source (keyed by ``id``, the event id of
    :func:`events`): 'gpu': correlation, grid_x..z, block_x..z, op_name (the launching, leaf, operator),
    op_dims (its input_dims JSON text), top_name (its top-level operator); 'cpu': op_dims; 'api':
    correlation, activities (GPU activities linked to the call)."""
    df = store.query(_DETAILS_SQL, {"t": trace_id, "a": a, "b": b})
    out = {src: df.loc[df["src"] == src, cols].reset_index(drop=True) for src, cols in _DETAIL_COLUMNS.items()}
    g = df[df["src"] == "gpu"]
    ops = ops_by_id(store, trace_id, g["leaf_op_id"].tolist() + g["top_op_id"].tolist())
    gpu = out["gpu"]
    gpu["op_name"] = g["leaf_op_id"].map(ops["name"]).to_numpy()
    gpu["op_dims"] = g["leaf_op_id"].map(ops["input_dims"]).to_numpy()
    gpu["top_name"] = g["top_op_id"].map(ops["name"]).to_numpy()
    return out


# One event by id, per source; the operators it names (leaf, top-level, parent) are looked up by id afterwards
# (a join against cpu_ops scanned every operator of the trace: 0.4 s on a 1M-kernel trace).
_DETAIL_SQL = {
    "gpu": """
SELECT 'gpu' AS src, g.device AS k1, g.stream AS k2, 0 AS k3, g.activity_id AS id, g.name, g.kind, g.start_ns,
       g.end_ns, g.correlation, g.external_id, g.grid_x, g.grid_y, g.grid_z, g.block_x, g.block_y, g.block_z,
       g.registers_per_thread, g.shared_memory_bytes, g.est_occupancy_pct, g.bytes, g.is_graph,
       g.leaf_op_id AS op_id, g.top_op_id, l.launch_id, l.name AS launch_name, l.pid, l.tid,
       l.start_ns AS launch_start_ns, c.collective
FROM gpu_activities g
LEFT JOIN launches l ON l.trace_id = g.trace_id AND l.launch_id = g.launch_id AND l.launch_id = (
  SELECT launch_id FROM gpu_activities WHERE trace_id = $t AND activity_id = $id)
LEFT JOIN collectives c ON c.trace_id = g.trace_id AND c.activity_id = g.activity_id AND c.activity_id = $id
WHERE g.trace_id = $t AND g.activity_id = $id""",
    "cpu": """
SELECT 'cpu' AS src, pid AS k1, tid AS k2, coalesce(depth, 0) AS k3, op_id AS id, name, start_ns, end_ns, pid,
       tid, depth, external_id, seq_number, input_dims AS op_dims, input_types AS op_types, parent_op_id,
       CASE WHEN top_op_id <> op_id THEN top_op_id END AS top_op_id
FROM cpu_ops WHERE trace_id = $t AND op_id = $id""",
    "api": """
SELECT 'api' AS src, pid AS k1, tid AS k2, 0 AS k3, launch_id AS id, name, start_ns, end_ns, pid, tid, correlation,
       launch_type, activities, leaf_op_id AS op_id
FROM launches WHERE trace_id = $t AND launch_id = $id""",
    "ann": f"""
SELECT 'ann' AS src, {_ANN_CASE} AS k1, 0 AS k2, 0 AS k3, ann_id AS id, name, start_ns, end_ns, kind, pid, tid,
       device, step
FROM annotations WHERE trace_id = $t AND ann_id = $id""",
}
# which operator ids of a detail row name which operator fields: id column -> (name column, dims, types)
_DETAIL_OPS = {"op_id": ("op_name", "op_dims", "op_types"), "top_op_id": ("top_name", None, None),
               "parent_op_id": ("parent_name", None, None)}


def _value(v):
    return None if not isinstance(v, str) and pd.isna(v) else v.item() if hasattr(v, "item") else v


def event_detail(store, trace_id: str, src: str, event_id: int) -> dict | None:
    """One event of the timeline with everything the details panel shows (None when there is no such event):
    its lane key (src, k1, k2, k3), id, name, start_ns, end_ns, and per source: 'gpu' the activity's
    columns, its launch call (launch_id, launch_name, pid, tid, launch_start_ns), its launching (leaf)
    operator (op_id, op_name, op_dims, op_types), top-level operator (top_name) and collective type;
    'cpu' thread, depth, shapes (op_dims, op_types), parent and top-level operator names (parent_name,
    top_name; null for a top-level operator); 'api' thread, correlation, launch type, activities, the
    operator that made the call (op_name, op_dims, op_types); 'ann' kind, thread, step."""
    df = store.query(_DETAIL_SQL[src], {"t": trace_id, "id": int(event_id)})
    if df.empty:
        return None
    out = {k: _value(v) for k, v in df.iloc[0].items()}
    ids = {c: out[c] for c in _DETAIL_OPS if c in out}
    ops = ops_by_id(store, trace_id, ids.values())
    for col, (name, dims, types) in _DETAIL_OPS.items():
        if col not in out:
            continue
        hit = ops.loc[int(out[col])] if out[col] is not None and int(out[col]) in ops.index else None
        out[name] = None if hit is None else _value(hit["name"])
        if dims:
            out[dims] = None if hit is None else _value(hit["input_dims"])
            out[types] = None if hit is None else _value(hit["input_types"])
    return out


# Search by name: events whose name contains the text, case-insensitively (a literal, never a pattern),
# ordered by (start_ns, src, id) -- the order in which "next" walks them.
_MATCH = "contains(lower(name), $q)"  # DuckDB filters dictionary-compressed names once per distinct name
_AFTER = "(start_ns > $s OR (start_ns = $s AND (src > $src OR (src = $src AND id > $id))))"
_FIND_SQL = """
SELECT src, k1, k2, k3, id, name, start_ns, end_ns FROM ({union}) q WHERE {match} AND {after}
ORDER BY start_ns, src, id LIMIT 1
"""
_RANK_SQL = "SELECT count(*) AS total, count(*) FILTER (WHERE NOT {after}) AS upto FROM ({union}) q WHERE {match}"
_WINDOW_MATCHES_SQL = """
SELECT src, k1, k2, k3, id, start_ns, end_ns FROM ({union}) q
WHERE start_ns < $b AND end_ns > $a AND {match} ORDER BY start_ns, src, id LIMIT $limit
"""


def find_event(store, trace_id: str, text: str, after: tuple[int, str, int] | None = None) -> dict | None:
    """The first event (every lane: operators, API calls, GPU activities, phases) whose name contains
    ``text`` (case-insensitive) and that comes after ``after`` = (start_ns, src, id) in the order (start_ns,
    src, id); from the trace's first event when ``after`` is None. Wraps around to the first match when none
    comes after. Returns the match (lane key, id, name, start_ns, end_ns) with ``rank`` (1-based position of
    the match in that order) and ``total`` (matches in the trace), or None when nothing matches."""
    union = "\n  UNION ALL ".join(SOURCES.values())
    p = {"t": trace_id, "q": text.lower()}
    s, src, i = after if after is not None else (-(2**63), "", -(2**63))
    df = store.query(_FIND_SQL.format(union=union, match=_MATCH, after=_AFTER), p | {"s": s, "src": src, "id": i})
    if df.empty and after is not None:  # wrap around
        df = store.query(_FIND_SQL.format(union=union, match=_MATCH, after=_AFTER),
                         p | {"s": -(2**63), "src": "", "id": -(2**63)})
    if df.empty:
        return None
    hit = {k: (v if isinstance(v, str) else int(v)) for k, v in df.iloc[0].items() if k != "name"}
    hit["name"] = df["name"].iloc[0]
    r = store.query(_RANK_SQL.format(union=union, match=_MATCH, after=_AFTER),
                    p | {"s": hit["start_ns"], "src": hit["src"], "id": hit["id"]}).iloc[0]
    hit["total"], hit["rank"] = int(r["total"]), int(r["upto"])
    return hit


def window_matches(store, trace_id: str, text: str, a: int, b: int, limit: int = 5000) -> pd.DataFrame:
    """The events intersecting ``[a, b)`` whose name contains ``text`` (case-insensitive): lane key, id,
    start_ns, end_ns (the first ``limit`` by start)."""
    union = "\n  UNION ALL ".join(SOURCES.values())
    return store.query(_WINDOW_MATCHES_SQL.format(union=union, match=_MATCH),
                       {"t": trace_id, "q": text.lower(), "a": a, "b": b, "limit": limit})


def event_selection(store, trace_id: str, src: str, event_id: int, a: int, b: int,
                    limit: int = 5000) -> pd.DataFrame:
    """The GPU activities of a selected event, as :func:`selection` returns them (with their launch calls):
    a GPU activity itself; the activities a CUDA API call launched (one, or a graph's many); none for other
    events (a CPU operator's go through :func:`selection`)."""
    acts = {"gpu": "g.activity_id = $id", "api": "g.launch_id = $id"}.get(src)
    if acts is None:
        return pd.DataFrame()
    return store.query(_SELECT_SQL.format(acts=acts), {"t": trace_id, "id": int(event_id), "a": a, "b": b,
                                                       "limit": limit})
