"""Windowing and binning queries for drawing the Timeline (dashboard page and Perfetto export).

Times are int64 ns since the Unix epoch, as stored; a *window* is ``[a, b)``. The drawing's x axis is ms
since the trace's first event (``traces.start_ns``, the *origin*).

**Lanes.** A lane is one row of the timeline, keyed ``(src, k1, k2, k3)``:

- ``cpu``  (pid, tid, depth): CPU operators of one thread at one nesting depth (0 = top level);
- ``api``  (pid, tid, 0): CUDA runtime/driver calls of one thread (launches, syncs, ...);
- ``gpu``  (device, stream, 0): GPU activities (kernels, memcpy, memset) of one stream;
- ``ann``  (kind code, 0, 0): annotations (phases) of one kind: ``ANN_KINDS`` (step, user, nvtx, gpu).

**Busy per bin.** For each lane, ``busy_ns`` of bin ``[a + i*w, a + (i+1)*w)`` is the summed time of the
lane's intervals inside the bin, capped at the bin's length (exact integer ns). For a lane whose intervals
do not overlap (CPU operators of one depth on one thread, a thread's API calls, a stream without
same-stream overlap) that is the length of their union; where they overlap (nested user ranges,
same-stream overlap) it can exceed the union inside a bin but never the bin. No per-lane union is taken:
on a 1M-kernel trace the window function doubled the cost of binning.

Zoomed far out the binning reads a per-process cache of ``BASE_BINS`` base bins over the whole trace
(built once per trace with the same SQL) and sums groups of adjacent base bins; bins are then aligned to
the base grid, and for non-overlapping lanes the sums equal the direct query's exactly. Narrower windows
are binned directly in DuckDB.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..analysis.comm import run_traces
from ..errors import UsageError
from .cache import cached  # the per-process cache shared with the other pages and the report

#: Annotation kinds in lane order; the lane key's k1 is the index here.
ANN_KINDS = ("step", "user", "nvtx", "gpu")
#: Base bins over the whole trace kept per trace and process for zoomed-out views.
BASE_BINS = 1 << 14
#: Most events drawn one by one; a window with more is drawn binned (DESIGN.md: below ~20k events).
EVENT_LIMIT = 20_000
#: Most events drawn with their names on hover (names cost ~50 bytes each in the response).
NAME_LIMIT = 5_000

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
LANE_COLUMNS = ["src", "k1", "k2", "k3"]

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

# Busy ns per (lane, bin) of one source in [a, b), bins of w ns from a: each interval is clipped to the
# window; those inside one bin (most) are summed per bin at once, the others split over the bins they
# touch (generate_series); the sum per bin is capped at the bin's length.
_BIN_SQL = """
WITH j AS (
  SELECT src, k1, k2, k3, s, e, (s - $a) // $w AS b0, (e - 1 - $a) // $w AS b1
  FROM (SELECT src, k1, k2, k3, greatest(start_ns, $a) AS s, least(end_ns, $b) AS e
        FROM ({src}) q WHERE start_ns < $b AND end_ns > $a AND end_ns > start_ns)
), one AS (
  SELECT src, k1, k2, k3, b0 AS bin, sum(e - s) AS d FROM j WHERE b0 = b1 GROUP BY ALL
), many AS (
  SELECT src, k1, k2, k3, bin, sum(least(e, $a + (bin + 1) * $w) - greatest(s, $a + bin * $w)) AS d
  FROM (SELECT src, k1, k2, k3, s, e, unnest(generate_series(b0, b1)) AS bin FROM j WHERE b1 > b0)
  GROUP BY ALL
)
SELECT src, k1, k2, k3, bin, CAST(least(sum(d), $w) AS BIGINT) AS busy_ns
FROM (SELECT * FROM one UNION ALL SELECT * FROM many) GROUP BY ALL
"""

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

_LANES_SQL = """
SELECT 'ann' AS src, {ann} AS k1, 0 AS k2, 0 AS k3, count(*) AS events FROM annotations WHERE trace_id = $t GROUP BY ALL
UNION ALL SELECT 'cpu', pid, tid, coalesce(depth, 0), count(*) FROM cpu_ops WHERE trace_id = $t GROUP BY ALL
UNION ALL SELECT 'api', pid, tid, 0, count(*) FROM launches WHERE trace_id = $t GROUP BY ALL
UNION ALL SELECT 'gpu', device, stream, 0, count(*) FROM gpu_activities WHERE trace_id = $t GROUP BY ALL
""".format(ann=_ANN_CASE)

_SRC_ORDER = {"ann": 0, "cpu": 1, "api": 1, "gpu": 3}


def trace_info(store, trace_id: str) -> dict | None:
    """origin (``start_ns``), ``end_ns``, ``clock_offset_ns`` (telemetry clock minus trace clock),
    ``gpu_events``, ``telemetry_samples``, ``name``; None for an unknown trace."""
    df = store.query(_INFO_SQL, {"t": trace_id})
    if df.empty:
        return None
    row = {k: (None if pd.isna(v) else v) for k, v in df.iloc[0].items()}
    for k in ("start_ns", "end_ns", "clock_offset_ns", "ingested_ns", "gpu_events", "telemetry_samples"):
        row[k] = None if row[k] is None else int(row[k])
    return row


def lanes(store, trace_id: str, info: dict | None = None) -> pd.DataFrame:
    """Every lane of the trace in drawing order (annotations, then per thread its operator depths and its
    CUDA API calls, then GPU streams), with its event count and a ``label``. Column ``lane`` is the row
    index (0 at the top). Cached per process and trace (a stored trace never changes)."""
    info = info or trace_info(store, trace_id)
    key = ("lanes", str(getattr(store, "path", "")), trace_id, info and info["ingested_ns"])
    return cached(key, lambda: _lanes(store, trace_id))


def _lanes(store, trace_id: str) -> pd.DataFrame:
    df = store.query(_LANES_SQL, {"t": trace_id})
    if df.empty:
        return pd.DataFrame(columns=LANE_COLUMNS + ["events", "label", "lane"])
    df["o"] = df["src"].map(_SRC_ORDER)
    df["k3o"] = np.where(df["src"] == "api", 1 << 30, df["k3"])  # a thread's API lane after its depths
    df = df.sort_values(["o", "k1", "k2", "k3o"]).drop(columns=["o", "k3o"]).reset_index(drop=True)
    df["label"] = [lane_label(r.src, r.k1, r.k2, r.k3) for r in df.itertuples()]
    df["lane"] = range(len(df))
    return df


def lane_label(src: str, k1, k2, k3) -> str:
    """The text of a lane on the y axis."""
    if src == "ann":
        return "phases: " + (ANN_KINDS[int(k1)] if 0 <= int(k1) < len(ANN_KINDS) else "other")
    if src == "cpu":
        return f"CPU {k1}/{k2} d{k3}"
    if src == "api":
        return f"CUDA API {k1}/{k2}"
    return f"GPU {k1} stream {k2}"


def count_events(store, trace_id: str, a: int, b: int) -> int:
    """Events of every lane intersecting ``[a, b)``."""
    sql = " UNION ALL ".join(_COUNT_SQL.format(src=s) for s in SOURCES.values())
    return int(store.query(f"SELECT CAST(sum(n) AS BIGINT) AS n FROM ({sql})", {"t": trace_id, "a": a, "b": b})
               ["n"].iloc[0])


def events(store, trace_id: str, a: int, b: int) -> pd.DataFrame:
    """Every event intersecting ``[a, b)`` (lane key, id, name, start_ns, end_ns, detail), by start."""
    union = "\n  UNION ALL ".join(SOURCES.values())
    return store.query(_EVENTS_SQL.format(src=union), {"t": trace_id, "a": a, "b": b})


def bin_sql_query(store, trace_id: str, a: int, b: int, w: int) -> pd.DataFrame:
    """Busy ns per (lane, bin) in ``[a, b)``, bins of ``w`` ns from ``a``, straight from DuckDB (sparse:
    bins without busy time are absent)."""
    parts = [store.query(_BIN_SQL.format(src=s), {"t": trace_id, "a": a, "b": b, "w": w})
             for s in BIN_SOURCES.values()]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "src" else "int64")
                             for c in LANE_COLUMNS + ["bin", "busy_ns"]})
    return pd.concat(parts, ignore_index=True)


def _base(store, trace_id: str, info: dict, op: str | None = None):
    """(origin, base width, lane keys, busy matrix [lanes x BASE_BINS]) of the whole trace, cached; with
    ``op`` the one lane of that selection (:func:`selection_bins`)."""
    key = ("base", str(getattr(store, "path", "")), trace_id, info["ingested_ns"], op)
    return cached(key, lambda: _build_base(store, trace_id, info, op))


def _build_base(store, trace_id: str, info: dict, op: str | None):
    origin, span = info["start_ns"], max(1, info["end_ns"] - info["start_ns"])
    w = max(1, -(-span // BASE_BINS))
    if op is None:
        df = bin_sql_query(store, trace_id, origin, origin + span, w)
    else:
        df = _selection_bin_query(store, trace_id, op, origin, origin + span, w)
    keys = list(df.groupby(LANE_COLUMNS, sort=False).groups) if not df.empty else []
    index = {k: i for i, k in enumerate(keys)}
    mat = np.zeros((len(keys), BASE_BINS), dtype=np.int64)
    if keys:
        rows = np.fromiter((index[k] for k in zip(df["src"], df["k1"], df["k2"], df["k3"])), dtype=np.int64,
                           count=len(df))
        mat[rows, df["bin"].to_numpy(dtype=np.int64)] = df["busy_ns"].to_numpy(dtype=np.int64)
    return origin, w, keys, mat


def binned(store, trace_id: str, a: int, b: int, max_bins: int = 2000, info: dict | None = None,
           op: str | None = None):
    """Busy ns per (lane, bin) covering ``[a, b)`` with at most about ``max_bins`` bins.

    Returns ``(bins, start, width)``: ``bins`` has the lane key columns, ``bin`` and ``busy_ns`` (sparse);
    bin ``i`` is ``[start + i*width, start + (i+1)*width)``, and ``start <= a``. Windows holding at least
    ``max_bins`` base bins are summed from the per-trace cache (``start`` then lies on the base grid);
    narrower ones are binned directly with ``start = a``. With ``op``: the selection's one lane
    (src 'sel') instead of every lane (:func:`selection_bins`).
    """
    info = info or trace_info(store, trace_id)
    span = b - a
    origin, base_w = info["start_ns"], max(1, -(-max(1, info["end_ns"] - info["start_ns"]) // BASE_BINS))
    if span < max_bins * base_w:
        w = max(1, -(-span // max_bins))
        if op is not None:
            return _selection_bin_query(store, trace_id, op, a, b, w), a, w
        return bin_sql_query(store, trace_id, a, b, w), a, w
    origin, base_w, keys, mat = _base(store, trace_id, info, op)
    k = -(-span // (max_bins * base_w))
    first = max(0, (a - origin) // base_w)
    last = min(BASE_BINS, -(-(b - origin) // base_w))
    n = -(-(last - first) // k)
    sub = np.zeros((len(keys), n * k), dtype=np.int64)
    sub[:, : last - first] = mat[:, first:last]
    sums = sub.reshape(len(keys), n, k).sum(axis=2)
    li, bi = np.nonzero(sums)
    kf = pd.DataFrame(keys, columns=LANE_COLUMNS) if keys else pd.DataFrame(columns=LANE_COLUMNS)
    df = kf.iloc[li].reset_index(drop=True)
    df["bin"] = bi.astype(np.int64)
    df["busy_ns"] = sums[li, bi]
    return df, origin + first * base_w, k * base_w


# samples in [a, b) plus, per device, the last one before a and the first one at or after b (so lines
# run across a window narrower than the sampling period)
_TELEMETRY_SQL = """
WITH s AS (
  SELECT coalesce(device_index, -1) AS device, ts_ns - $off AS t_ns, power_mw, sm_clock_mhz, gpu_util_pct
  FROM telemetry WHERE trace_id = $t
)
SELECT * FROM s WHERE t_ns >= $a AND t_ns < $b
UNION ALL SELECT * FROM (SELECT * FROM s WHERE t_ns < $a QUALIFY row_number() OVER (PARTITION BY device ORDER BY t_ns DESC) = 1)
UNION ALL SELECT * FROM (SELECT * FROM s WHERE t_ns >= $b QUALIFY row_number() OVER (PARTITION BY device ORDER BY t_ns) = 1)
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


def _selection_bin_query(store, trace_id: str, op: str, a: int, b: int, w: int) -> pd.DataFrame:
    p = {"t": trace_id, "op": int(op) if op.isdigit() else op}
    acts = _INSTANCE_ACTS if op.isdigit() else _NAME_ACTS
    src = ("SELECT 'sel' AS src, 0 AS k1, 0 AS k2, 0 AS k3, g.start_ns, g.end_ns FROM gpu_activities g "
           f"WHERE g.trace_id = $t AND {acts}")
    return store.query(_BIN_SQL.format(src=src), p | {"a": a, "b": b, "w": w})


def selection_bins(store, trace_id: str, op: str, a: int, b: int, max_bins: int = 2000,
                   info: dict | None = None) -> tuple[pd.DataFrame, int, int]:
    """Busy ns per bin of the selected operator's GPU activities (as in :func:`selection`), binned like
    :func:`binned` (same ``start`` and ``width`` for the same window): ``(bins[bin, busy_ns], start,
    width)``."""
    df, start, width = binned(store, trace_id, a, b, max_bins, info=info, op=op)
    return df[["bin", "busy_ns"]].sort_values("bin").reset_index(drop=True), start, width


#: Most events one Perfetto export holds (the first ones by start when the window has more).
EXPORT_LIMIT = 300_000

# One JSON text per exported event, written by DuckDB (to_json of a struct): complete events ('X') of the
# first $limit events by start in [a, b), then a launch -> activity flow pair ('s' on the launch call's
# thread, 'f' with bp 'e' on the activity's stream) for each activity whose launch call is exported too.
# ts/dur: µs since the origin, 3 decimals (exact ns). GPU pids: _PID_GPU + device; phases: _PID_PHASES.
_EXPORT_SQL = """
WITH ev AS (
  SELECT * FROM (
    {union}
  ) q WHERE start_ns < $b AND end_ns > $a ORDER BY start_ns, src, id LIMIT $limit
), x AS (
  SELECT start_ns, src, id, CASE src WHEN 'gpu' THEN $gpu + k1 WHEN 'ann' THEN $phases ELSE k1 END AS pid,
         k2 AS tid, name, detail, end_ns, k1
  FROM ev
), f AS (
  SELECT g.id AS act, l.pid AS lpid, l.tid AS ltid, l.start_ns AS lstart, g.pid AS gpid, g.tid AS gtid,
         g.start_ns AS gstart
  FROM x g JOIN gpu_activities a ON a.trace_id = $t AND a.activity_id = g.id AND g.src = 'gpu'
  JOIN x l ON l.src = 'api' AND l.id = a.launch_id
)
SELECT 0 AS part, start_ns AS o, to_json(struct_pack(
         name := coalesce(name, ''), ph := 'X',
         cat := CASE src WHEN 'cpu' THEN 'cpu_op' WHEN 'ann' THEN 'phase' ELSE coalesce(nullif(detail, ''), src) END,
         pid := pid, tid := CASE src WHEN 'ann' THEN k1 ELSE tid END,
         ts := round((start_ns - $o) / 1000.0, 3), dur := round((end_ns - start_ns) / 1000.0, 3),
         args := struct_pack(id := id))) AS j FROM x
UNION ALL
SELECT 1, lstart, to_json(struct_pack(name := 'launch', ph := 's', cat := 'ac2g', id := act, pid := lpid,
         tid := ltid, ts := round((lstart - $o) / 1000.0, 3))) FROM f
UNION ALL
SELECT 2, gstart, to_json(struct_pack(name := 'launch', ph := 'f', bp := 'e', cat := 'ac2g', id := act,
         pid := gpid, tid := gtid, ts := round((gstart - $o) / 1000.0, 3))) FROM f
ORDER BY part, o
"""
_PID_GPU = 1 << 30  # Chrome-trace pid of GPU device d: _PID_GPU + d (host pids are OS pids)
_PID_PHASES = (1 << 30) - 1


def chrome_trace_text(store, trace_id: str, a: int, b: int, limit: int = EXPORT_LIMIT) -> str:
    """A Chrome-trace JSON text (ui.perfetto.dev and chrome://tracing open it) of the events in ``[a, b)``:
    complete events ('X') for CPU operators (cat cpu_op), CUDA API calls (host pid/tid), GPU activities
    (pid named 'GPU d', tid = stream; cat = kernel/memcpy/memset) and phases (pid 'phases', tid = kind
    index); launch -> activity flows ('s'/'f', cat 'ac2g', id = the activity id) where both ends are
    exported; telemetry as counters ('C'). ``ts``/``dur`` are µs since the trace's first event with 3
    decimals (exact ns). At most ``limit`` events, the first by start; ``otherData`` says when cut. The
    event texts are written by DuckDB (no per-event Python)."""
    info = trace_info(store, trace_id)
    origin = info["start_ns"]
    union = "\n    UNION ALL ".join(SOURCES.values())
    p = {"t": trace_id, "a": a, "b": b, "o": origin, "gpu": _PID_GPU, "phases": _PID_PHASES}
    n = count_events(store, trace_id, a, b)
    rows = store.query(_EXPORT_SQL.format(union=union), p | {"limit": limit})
    parts = list(rows["j"])
    pids = {}
    devices = store.query("SELECT DISTINCT device FROM gpu_activities WHERE trace_id = $t AND start_ns < $b "
                          "AND end_ns > $a", {"t": trace_id, "a": a, "b": b})["device"]
    for d in devices.dropna():
        pids[_PID_GPU + int(d)] = f"GPU {int(d)}"
    if (rows["part"] == 0).any() and store.query("SELECT 1 FROM annotations WHERE trace_id = $t AND start_ns < $b "
                                                 "AND end_ns > $a LIMIT 1", {"t": trace_id, "a": a, "b": b}).shape[0]:
        pids[_PID_PHASES] = "phases"
    if info["telemetry_samples"]:
        tel = telemetry(store, trace_id, a, b, info["clock_offset_ns"], max_points=20_000)
        for r in tel.itertuples(index=False):
            pid = _PID_GPU + int(r.device)
            pids.setdefault(pid, f"GPU {int(r.device)}")
            args = {k: float(getattr(r, k)) for k in ("power_mw", "sm_clock_mhz", "gpu_util_pct")
                    if not pd.isna(getattr(r, k))}
            if args:
                parts.append(json.dumps({"name": "telemetry", "ph": "C", "pid": pid,
                                         "ts": round((int(r.t_ns) - origin) / 1000.0, 3), "args": args}))
    parts += [json.dumps({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
              for pid, name in pids.items()]
    cut = n > limit
    other = {"trace_id": trace_id, "trace": info["name"], "origin_ns": origin, "window_ns": [a, b],
             "events": min(n, limit), "truncated": cut,
             "note": (f"the window holds {n:,} events; this export has the first {limit:,} by start") if cut else ""}
    return ('{"displayTimeUnit":"ms","otherData":' + json.dumps(other) + ',"traceEvents":[\n'
            + ",\n".join(parts) + "\n]}\n")


def chrome_trace(store, trace_id: str, a: int, b: int, limit: int = EXPORT_LIMIT) -> dict:
    """:func:`chrome_trace_text` parsed (for tests and small windows)."""
    return json.loads(chrome_trace_text(store, trace_id, a, b, limit))


_OP_CPU_SQL = """
SELECT name, count(*) AS count, CAST(sum(dur_ns) AS BIGINT) AS cpu_ns FROM cpu_ops
WHERE trace_id = $t AND ({level}) GROUP BY name
"""


def op_cpu_times(store, trace_id: str, level: str = "leaf") -> pd.DataFrame:
    """Per operator name: ``count`` of instances and ``cpu_ns``, the sum of their durations (wall time on
    the CPU, children included). ``level`` 'top': top-level instances only (depth 0); 'leaf': every
    instance of the name."""
    cond = "coalesce(depth, 0) = 0" if level == "top" else "TRUE"
    return store.query(_OP_CPU_SQL.format(level=cond), {"t": trace_id})


_OP_KERNELS_SQL = """
SELECT o.name AS op, g.name, g.kind, g.device, g.stream, count(*) AS count,
       CAST(sum(g.dur_ns) AS BIGINT) AS total_ns, CAST(round(avg(g.dur_ns)) AS BIGINT) AS mean_ns
FROM gpu_activities g JOIN cpu_ops o ON o.trace_id = $t AND o.op_id = g.{col}
WHERE g.trace_id = $t
GROUP BY ALL
"""


def op_kernels(store, trace_id: str, name: str, level: str = "leaf") -> pd.DataFrame:
    """The GPU activities attributed (at ingest) to operators called ``name`` — through their leaf
    operator (``level`` 'leaf') or top-level operator ('top') — grouped by activity name, kind, device
    and stream: count, total_ns (sum of durations) and mean_ns, by total_ns descending. The grouping for
    every operator of the trace is computed once per process and trace, then filtered."""
    col = "top_op_id" if level == "top" else "leaf_op_id"
    info = trace_info(store, trace_id)
    key = ("op_kernels", str(getattr(store, "path", "")), trace_id, info and info["ingested_ns"], level)
    allk = cached(key, lambda: store.query(_OP_KERNELS_SQL.format(col=col), {"t": trace_id}))
    out = allk[allk["op"] == name].drop(columns="op")
    return out.sort_values(["total_ns", "name"], ascending=[False, True]).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------------
# Runs of many ranks: the GPU lanes of every rank on one aligned time axis (the Ranks page's timeline view).
#
# Aligned time = stored time - rank_clocks.clock_offset_ns (the *applied* offset: 0 on one host, else the
# estimate from collective end times; storage/ranks.py). The run's origin is the earliest aligned trace
# start over its ranks. Lanes keyed like the single-trace timeline (src, k1, k2, k3):
#   ``gpu``  (rank, device, stream): GPU activities of one stream of one rank;
#   ``coll`` (rank, device, 0): that rank's collective kernels (any stream), binned views only.

_RANK_ACTS = """
SELECT k.rank, a.device, a.stream, a.activity_id AS id, a.name, a.kind,
       a.start_ns - k.clock_offset_ns AS start_ns, a.end_ns - k.clock_offset_ns AS end_ns,
       c.collective, coalesce(c.pg_name, '') AS pg, c.pg_seq
FROM rank_clocks k JOIN gpu_activities a ON a.trace_id = k.trace_id
LEFT JOIN collectives c ON c.trace_id = a.trace_id AND c.activity_id = a.activity_id
WHERE k.run_id = $run
"""

_RANK_BIN_SOURCES = {
    "gpu": "SELECT 'gpu' AS src, k.rank AS k1, a.device AS k2, a.stream AS k3, a.start_ns - k.clock_offset_ns "
           "AS start_ns, a.end_ns - k.clock_offset_ns AS end_ns FROM rank_clocks k JOIN gpu_activities a "
           "ON a.trace_id = k.trace_id WHERE k.run_id = $run",
    "coll": "SELECT 'coll' AS src, k.rank AS k1, a.device AS k2, 0 AS k3, a.start_ns - k.clock_offset_ns "
            "AS start_ns, a.end_ns - k.clock_offset_ns AS end_ns FROM rank_clocks k JOIN collectives c "
            "ON c.trace_id = k.trace_id JOIN gpu_activities a ON a.trace_id = c.trace_id "
            "AND a.activity_id = c.activity_id WHERE k.run_id = $run",
}


def run_info(store, run: str) -> dict | None:
    """The run ``run`` names (as ``analysis.comm.run_traces`` resolves it: id, unique id prefix or name):
    ``run_id``, ``name``, ``ranks`` (frame of rank, trace_id, trace name, clock_offset_ns, aligned
    start_ns/end_ns), ``origin`` (earliest aligned trace start), ``end_ns`` (latest aligned trace end).
    None when no run or several match."""
    try:
        run_id = run_traces(store, run=str(run))[0]
    except UsageError:
        return None
    hits = store.query("SELECT name FROM runs WHERE run_id = $r", {"r": run_id})
    ranks = store.query(
        "SELECT k.rank, k.trace_id, t.name, k.clock_offset_ns, t.start_ns - k.clock_offset_ns AS start_ns, "
        "t.end_ns - k.clock_offset_ns AS end_ns FROM rank_clocks k JOIN traces t ON t.trace_id = k.trace_id "
        "WHERE k.run_id = $r ORDER BY k.rank", {"r": run_id})
    if ranks.empty or ranks["start_ns"].isna().all():
        return {"run_id": run_id, "name": hits["name"].iloc[0], "ranks": ranks, "origin": None, "end_ns": None}
    return {"run_id": run_id, "name": hits["name"].iloc[0], "ranks": ranks,
            "origin": int(ranks["start_ns"].min()), "end_ns": int(ranks["end_ns"].max())}


def run_lanes(store, run_id: str) -> pd.DataFrame:
    """The run's lanes in drawing order: per rank, its GPU streams, then its collectives lane (``coll``,
    only when it has collectives); columns src, k1 (rank), k2 (device), k3 (stream), events, label, lane."""
    df = store.query(
        "SELECT 'gpu' AS src, k.rank AS k1, a.device AS k2, a.stream AS k3, count(*) AS events FROM rank_clocks k "
        "JOIN gpu_activities a ON a.trace_id = k.trace_id WHERE k.run_id = $r GROUP BY ALL "
        "UNION ALL SELECT 'coll', k.rank, a.device, 0, count(*) FROM rank_clocks k JOIN collectives c "
        "ON c.trace_id = k.trace_id JOIN gpu_activities a ON a.trace_id = c.trace_id "
        "AND a.activity_id = c.activity_id WHERE k.run_id = $r GROUP BY ALL", {"r": run_id})
    if df.empty:
        return pd.DataFrame(columns=LANE_COLUMNS + ["events", "label", "lane"])
    df["o"] = (df["src"] == "coll").astype(int)
    df = df.sort_values(["k1", "k2", "o", "k3"]).drop(columns="o").reset_index(drop=True)
    df["label"] = [f"rank {r} · GPU {d} stream {s}" if src == "gpu" else f"rank {r} · collectives"
                   for src, r, d, s in zip(df["src"], df["k1"], df["k2"], df["k3"])]
    df["lane"] = range(len(df))
    return df


def run_count(store, run_id: str, a: int, b: int) -> int:
    """GPU activities of the run intersecting the aligned window ``[a, b)``."""
    return int(store.query(f"SELECT count(*) AS n FROM ({_RANK_ACTS}) q WHERE start_ns < $b AND end_ns > $a",
                           {"run": run_id, "a": a, "b": b})["n"].iloc[0])


def run_events(store, run_id: str, a: int, b: int) -> pd.DataFrame:
    """GPU activities of every rank intersecting the aligned window ``[a, b)``, by aligned start: rank,
    device, stream, id, name, kind, start_ns, end_ns (aligned), collective (null: not a collective), pg,
    pg_seq (the collective instance is ``pg:pg_seq``)."""
    return store.query(f"SELECT * FROM ({_RANK_ACTS}) q WHERE start_ns < $b AND end_ns > $a "
                       "ORDER BY start_ns, rank, id", {"run": run_id, "a": a, "b": b})


def run_binned(store, run_id: str, a: int, b: int, max_bins: int = 2000) -> tuple[pd.DataFrame, int, int]:
    """Busy ns per (lane, bin) of the run's lanes in the aligned window ``[a, b)`` (definition as for one
    trace: summed time inside the bin, capped at the bin), bins of ``width = ceil((b - a) / max_bins)`` ns
    from ``a``, straight from DuckDB. Returns ``(bins, a, width)``."""
    w = max(1, -(-(b - a) // max_bins))
    parts = [store.query(_BIN_SQL.format(src=s), {"run": run_id, "a": a, "b": b, "w": w})
             for s in _RANK_BIN_SOURCES.values()]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "src" else "int64")
                             for c in LANE_COLUMNS + ["bin", "busy_ns"]}), a, w
    return pd.concat(parts, ignore_index=True), a, w


def instance_window(store, run_id: str, instance: str) -> tuple[int, int] | None:
    """Aligned ``(first start, last end)`` over the ranks of collective instance ``'pg:pg_seq'`` of the
    run; None when the run has no such instance."""
    pg, _, seq = instance.rpartition(":")
    if not seq.lstrip("-").isdigit():
        return None
    df = store.query(f"SELECT min(start_ns) AS s, max(end_ns) AS e FROM ({_RANK_ACTS}) q "
                     "WHERE collective IS NOT NULL AND pg = $pg AND pg_seq = $seq",
                     {"run": run_id, "pg": pg, "seq": int(seq)})
    if df.empty or pd.isna(df["s"].iloc[0]):
        return None
    return int(df["s"].iloc[0]), int(df["e"].iloc[0])
