"""Where one trace is CPU-bound or GPU-bound: the device idle split into host wait and dependency wait.

Definition (docs/metrics.md, "CPU-bound vs GPU-bound"): per device, every idle gap of the union of GPU
activity intervals (kernels, memcpy, memset) inside the GPU span is

* **host wait** if, when the gap opens (time ``t0``, the end of the busy interval before it), no GPU
  activity of that device is launched-but-not-started: no activity starting at or after the gap's end has
  a launch call that had returned by ``t0`` (``launch.end_ns <= t0``);
* **dependency wait** otherwise (work was queued, yet nothing ran: events, syncs, graph-node gaps, the
  launch floor).

Shares are of ``gpu_span_ns`` (first activity start to last activity end on the device). Activities with no
matched launch call cannot be waiting in this sense and are ignored for the test. Times in ns.
"""

from __future__ import annotations

import pandas as pd

DEFINITION = __doc__

_GAPS_SQL = """
WITH b AS (
    SELECT device, start_ns, end_ns,
           lag(end_ns) OVER (PARTITION BY device ORDER BY start_ns) AS prev_end
    FROM busy_intervals WHERE trace_id = $trace
),
gaps AS (
    SELECT device, prev_end AS gap_start_ns, start_ns AS gap_end_ns
    FROM b WHERE prev_end IS NOT NULL AND start_ns > prev_end
),
acts AS (
    SELECT a.device, a.start_ns,
           min(l.end_ns) OVER (PARTITION BY a.device ORDER BY a.start_ns DESC, a.activity_id DESC
                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS min_launch_end_after
    FROM gpu_activities a LEFT JOIN launches l
      ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
    WHERE a.trace_id = $trace
),
first_after AS (  -- per gap: min launch end over activities starting at/after the gap end (suffix min)
    SELECT g.device, g.gap_start_ns, g.gap_end_ns, min(x.min_launch_end_after) AS min_launch_end_after
    FROM gaps g LEFT JOIN acts x ON x.device = g.device AND x.start_ns = g.gap_end_ns
    GROUP BY ALL
)
SELECT device, gap_start_ns, gap_end_ns, gap_end_ns - gap_start_ns AS gap_ns,
       CASE WHEN min_launch_end_after IS NOT NULL AND min_launch_end_after <= gap_start_ns
            THEN 'dependency_wait' ELSE 'host_wait' END AS cause
FROM first_after
ORDER BY device, gap_start_ns
"""

_SPAN_SQL = """
SELECT device, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
       max(end_ns) - min(start_ns) AS gpu_span_ns, sum(end_ns - start_ns) AS busy_ns
FROM busy_intervals WHERE trace_id = $trace GROUP BY device ORDER BY device
"""


def idle_gaps(store, trace_id: str) -> pd.DataFrame:
    """One row per idle gap of each device's busy union: device, gap_start_ns, gap_end_ns, gap_ns, cause."""
    return store.query(_GAPS_SQL, {"trace": trace_id})


def idle_split(store, trace_id: str) -> pd.DataFrame:
    """Per device: gpu_span_ns, busy_ns, idle_ns, host_wait_ns, dependency_wait_ns and their shares of the span."""
    spans = store.query(_SPAN_SQL, {"trace": trace_id})
    gaps = idle_gaps(store, trace_id)
    rows = []
    for rec in spans.itertuples(index=False):
        g = gaps[gaps.device == rec.device]
        host = int(g.loc[g.cause == "host_wait", "gap_ns"].sum())
        dep = int(g.loc[g.cause == "dependency_wait", "gap_ns"].sum())
        span = int(rec.gpu_span_ns)
        rows.append(
            {
                "device": int(rec.device),
                "gpu_span_ns": span,
                "busy_ns": int(rec.busy_ns),
                "idle_ns": span - int(rec.busy_ns),
                "host_wait_ns": host,
                "dependency_wait_ns": dep,
                "host_wait_share": host / span if span else None,
                "dependency_wait_share": dep / span if span else None,
                "gaps": int(len(g)),
            }
        )
    return pd.DataFrame(rows)
