"""The Timeline's export: a window of one trace as a Chrome-trace JSON text, which ui.perfetto.dev and
chrome://tracing open (the dashboard's "open in Perfetto" download).

The lanes are the Timeline's (``storage.timeline``): CPU operators, CUDA API calls, GPU activities and phases
become complete events, launch -> activity links become flow events, telemetry becomes counters. The event
texts are written by DuckDB (``to_json`` of a struct), not per event in Python.
"""

from __future__ import annotations

import json

import pandas as pd

from ..units import NS_PER_US
from .timeline import SOURCES, count_events, telemetry, trace_info

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
                                         "ts": round((int(r.t_ns) - origin) / NS_PER_US, 3), "args": args}))
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
