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
    """Every event intersecting ``[a, b)`` (lane key, id, name, start_ns, end_ns, detail), by start."""
    union = "\n  UNION ALL ".join(SOURCES.values())
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


# samples in [a, b) plus, per device, the last one before a and the first one at or after b (so lines
# run across a window narrower than the sampling period)
_TELEMETRY_SQL = """
WITH s AS (
  SELECT coalesce(device_index, -1) AS device, ts_ns - $off AS t_ns, power_mw, sm_clock_mhz, gpu_util_pct
  FROM telemetry WHERE trace_id = $t
)
SELECT * FROM s WHERE t_ns >= $a AND t_ns < $b
UNION ALL SELECT * FROM (SELECT * FROM s WHERE t_ns < $a
                         QUALIFY row_number() OVER (PARTITION BY device ORDER BY t_ns DESC) = 1)
UNION ALL SELECT * FROM (SELECT * FROM s WHERE t_ns >= $b
                         QUALIFY row_number() OVER (PARTITION BY device ORDER BY t_ns) = 1)
ORDER BY device, t_ns
"""

_TELEMETRY_BINNED_SQL = """
SELECT coalesce(device_index, -1) AS device, (ts_ns - $off - $a) // $w AS bin,
       min(ts_ns - $off) AS t_ns, avg(power_mw) AS power_mw, avg(sm_clock_mhz) AS sm_clock_mhz,
       avg(gpu_util_pct) AS gpu_util_pct
FROM telemetry WHERE trace_id = $t AND ts_ns - $off >= $a AND ts_ns - $off < $b
GROUP BY ALL ORDER BY device, bin
"""


def telemetry(store, trace_id: str, a: int, b: int, clock_offset_ns: int | None, max_points: int = 2000):
    """NVML samples in ``[a, b)`` on the trace's clock (``t_ns = ts_ns - clock_offset_ns``; offset 0 when
    not measured), with each device's nearest sample before and after the window: device, t_ns,
    power_mw, sm_clock_mhz, gpu_util_pct. More than ``max_points`` samples in the window are averaged per
    bin (``t_ns`` is then the bin's first sample; no neighbours)."""
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
