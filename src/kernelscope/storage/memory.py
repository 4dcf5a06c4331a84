"""The allocator's events of a trace (schema 009, ``memory_events``): the "memory" step of storage/derivations.py
that fills them, and the named queries the memory analysis reads (analysis/memory.py has the definitions;
docs/metrics.md "Memory").

**memory** (a staged step: the args of the ``[memory]`` instants exist only in the staged events, ``ks_raw``):
one row per ``[memory]`` event with its signed ``Bytes``, ``Addr``, the allocator's running ``Total Allocated`` /
``Total Reserved`` and its device, attributed to the innermost cpu_op on its (pid, tid) whose range holds it
(``start_ns <= ts_ns < end_ns``) and that op's top-level op. The innermost holder is found without a range join:
the deepest op starting last at or before the event on its thread (an ASOF join) is the innermost op of a chain
that holds every op holding the event (ops nest), so the holder is the first op up that chain (``parent_op_id``)
whose end lies after the event. Traces stored before schema 009 keep none (their ``[memory]`` instants sit in
other_events without args): ``memory_state`` tells the two apart.

**memory_pairs** (a stored step, schema 012): ``pair_ns`` of each allocation (the time of the free that ends its
block) and of each free (the time of the allocation it ends), from one window over the trace's events per device
and address; so the blocks live at the window's end and the frees of blocks allocated before it are a filtered
scan (``live_at_end``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .idle import _ALLOCATOR
from .intervals import covered_before, islands

#: The name profile_memory=True gives the allocator's instant events (and its out-of-memory ones).
MEMORY_EVENT = "[memory]"
OOM_EVENT = "[OutOfMemory]"

if TYPE_CHECKING:  # imported where a frame is built: ingest (this module's derivation steps) never needs pandas
    import pandas as pd

#: A device's label: "cuda:0", "cpu", else the raw type and id.
_LABEL = """CASE WHEN {p}device_type = 1 THEN 'cuda:' || coalesce({p}device_id::VARCHAR, '?')
                 WHEN {p}device_type = 0 THEN 'cpu'
                 ELSE 'device type ' || coalesce({p}device_type::VARCHAR, '?') || ':'
                      || coalesce({p}device_id::VARCHAR, '?') END"""


def device_label_sql(prefix: str = "") -> str:
    """SQL of the device label of a memory_events row (``prefix``: its alias and a dot)."""
    return _LABEL.format(p=prefix)


_INSERT = f"""
INSERT INTO memory_events (trace_id, event_id, pid, tid, ts_ns, device_type, device_id, addr, bytes,
                           total_allocated_bytes, total_reserved_bytes, op_id, top_op_id)
WITH RECURSIVE m AS (
    SELECT seq, pid, tid, ts_ns + $base AS ts, mem_device_type, mem_device_id, mem_addr, mem_bytes,
           mem_total_allocated_bytes, mem_total_reserved_bytes
    FROM ks_raw WHERE kind = 'instant' AND name = '{MEMORY_EVENT}' AND ts_ns IS NOT NULL
), heads AS (  -- per thread and start time, the deepest op starting there (the others there hold it)
    SELECT pid, tid, start_ns, op_id FROM cpu_ops WHERE trace_id = $tid
    QUALIFY row_number() OVER (PARTITION BY pid, tid, start_ns ORDER BY depth DESC, end_ns, op_id DESC) = 1
), cand AS (
    SELECT m.seq, m.ts, h.op_id FROM m ASOF JOIN heads h ON h.pid = m.pid AND h.tid = m.tid AND m.ts >= h.start_ns
), walk AS (  -- up the chain while the op ended at or before the event
    SELECT seq, ts, op_id FROM cand
    UNION ALL
    SELECT w.seq, w.ts, o.parent_op_id
    FROM walk w JOIN cpu_ops o ON o.trace_id = $tid AND o.op_id = w.op_id
    WHERE o.end_ns <= w.ts AND o.parent_op_id IS NOT NULL
), holder AS (
    SELECT w.seq, o.op_id, o.top_op_id
    FROM walk w JOIN cpu_ops o ON o.trace_id = $tid AND o.op_id = w.op_id
    WHERE o.start_ns <= w.ts AND w.ts < o.end_ns
)
SELECT $tid, m.seq, m.pid, m.tid, m.ts, m.mem_device_type, m.mem_device_id, m.mem_addr, m.mem_bytes,
       m.mem_total_allocated_bytes, m.mem_total_reserved_bytes, h.op_id, h.top_op_id
FROM m LEFT JOIN holder h ON h.seq = m.seq
ORDER BY m.mem_device_type, m.mem_device_id, m.ts, m.seq
"""


def insert_memory(con, trace_id: str, base: int) -> None:
    """Insert the ``memory_events`` rows of the trace staged as ``ks_raw`` (inside the ingest transaction, after
    the "events" step stored its cpu_ops)."""
    con.execute(_INSERT, {"tid": trace_id, "base": int(base)})


# ------------------------------------------------------------------------------------------------ queries

_SQL_STATE = f"""
SELECT (SELECT count(*) FROM memory_events WHERE trace_id = $t) AS events,
       (SELECT count(*) FROM other_events WHERE trace_id = $t AND name = '{MEMORY_EVENT}') AS instants,
       (SELECT count(*) FROM other_events WHERE trace_id = $t AND name = '{OOM_EVENT}') AS oom,
       (SELECT count(*) FROM memory_events WHERE trace_id = $t AND (bytes IS NULL OR total_allocated_bytes IS NULL))
         AS incomplete,
       (SELECT count(*) FROM memory_events WHERE trace_id = $t AND op_id IS NULL) AS without_op
"""


def memory_state(store, trace_id: str) -> dict[str, int]:
    """Counts that say what a trace holds: ``events`` (memory_events rows), ``instants`` (its ``[memory]``
    instants kept in other_events: more than ``events`` means it was ingested before memory events were kept),
    ``oom`` (``[OutOfMemory]`` events), ``incomplete`` (rows lacking Bytes or Total Allocated), ``without_op``."""
    row = store.con.execute(_SQL_STATE, {"t": trace_id}).fetchone()
    return dict(zip(("events", "instants", "oom", "incomplete", "without_op"), (int(v) for v in row)))


_SQL_DEVICES = f"""
SELECT {device_label_sql()} AS device, device_type, device_id, count(*) AS events,
       count(*) FILTER (WHERE bytes > 0) AS allocs,
       CAST(coalesce(sum(bytes) FILTER (WHERE bytes > 0), 0) AS BIGINT) AS alloc_bytes,
       count(*) FILTER (WHERE bytes < 0) AS frees,
       CAST(coalesce(-sum(bytes) FILTER (WHERE bytes < 0), 0) AS BIGINT) AS freed_bytes,
       min(ts_ns) AS first_ns, max(ts_ns) AS last_ns,
       arg_min(total_allocated_bytes - bytes, (ts_ns, event_id)) AS allocated_before_bytes,
       arg_max(total_allocated_bytes, (ts_ns, event_id)) AS allocated_at_end_bytes,
       max(total_allocated_bytes) AS peak_allocated_bytes,
       max(total_reserved_bytes) AS peak_reserved_bytes,
       arg_max(total_reserved_bytes, (ts_ns, event_id)) AS reserved_at_end_bytes
FROM memory_events WHERE trace_id = $t AND total_allocated_bytes IS NOT NULL
GROUP BY ALL ORDER BY device_type DESC, device_id
"""


def memory_devices(store, trace_id: str) -> pd.DataFrame:
    """Per device (``device`` label, ``device_type``, ``device_id``): events, allocations and frees (count and
    bytes), first/last event time, allocated just before the first event and after the last, the peaks of
    allocated and reserved bytes, reserved at the end. CUDA devices first, then CPU."""
    return store.query(_SQL_DEVICES, {"t": trace_id})


_SQL_PEAKS = f"""
WITH pk AS (  -- per device, the first event (by time, then id) reaching the maximum Total Allocated
    SELECT arg_max(event_id, (total_allocated_bytes, -ts_ns, -event_id)) AS event_id FROM memory_events
    WHERE trace_id = $t AND total_allocated_bytes IS NOT NULL GROUP BY device_type, device_id
), p AS (
    SELECT *, {device_label_sql()} AS device FROM memory_events
    WHERE trace_id = $t AND event_id IN (SELECT event_id FROM pk)
)
SELECT p.device, p.device_type, p.device_id, p.total_allocated_bytes AS peak_allocated_bytes,
       p.total_reserved_bytes AS reserved_at_peak_bytes, p.ts_ns, p.event_id, p.pid, p.tid, p.bytes,
       p.op_id, o.name AS operator, p.top_op_id, t.name AS top_operator
FROM p LEFT JOIN cpu_ops o ON o.trace_id = $t AND o.op_id = p.op_id
LEFT JOIN cpu_ops t ON t.trace_id = $t AND t.op_id = p.top_op_id
ORDER BY p.device_type DESC, p.device_id
"""


def memory_peaks(store, trace_id: str) -> pd.DataFrame:
    """Per device, the event at which allocated bytes peak (the first one reaching the maximum ``Total
    Allocated``): its time, thread, bytes, reserved bytes then, and its operator and top-level operator."""
    return store.query(_SQL_PEAKS, {"t": trace_id})


_SQL_SERIES = f"""
WITH e AS (
    SELECT device_type, device_id, event_id, ts_ns, total_allocated_bytes, total_reserved_bytes,
           count(*) OVER d AS n, min(ts_ns) OVER d AS t0, max(ts_ns) OVER d AS t1
    FROM memory_events WHERE trace_id = $t AND total_allocated_bytes IS NOT NULL
    WINDOW d AS (PARTITION BY device_type, device_id)
), kept AS (  -- per bin of a device with more than $max events: its highest, lowest, highest reserved, last
    SELECT unnest([arg_max(event_id, (total_allocated_bytes, -ts_ns, -event_id)),
                   arg_min(event_id, (total_allocated_bytes, ts_ns, event_id)),
                   arg_max(event_id, (coalesce(total_reserved_bytes, -1), -ts_ns, -event_id)),
                   arg_max(event_id, (ts_ns, event_id))]) AS event_id
    FROM e WHERE n > $max
    GROUP BY device_type, device_id, (ts_ns - t0) // greatest(1, (t1 - t0 + $bins) // $bins)
)
SELECT {device_label_sql()} AS device, device_type, device_id, ts_ns, event_id,
       total_allocated_bytes AS allocated_bytes, total_reserved_bytes AS reserved_bytes
FROM e WHERE n <= $max OR event_id IN (SELECT event_id FROM kept)
ORDER BY device_type DESC, device_id, ts_ns, event_id
"""


def memory_series(store, trace_id: str, max_points: int) -> pd.DataFrame:
    """Allocated and reserved bytes after each event, per device; a device with more than ``max_points``
    events is cut into ``max_points // 4`` equal time bins and keeps, per bin, the events of its highest and
    lowest allocated, highest reserved, and its last event (so the exact peaks and the level at each bin's
    end are kept)."""
    return store.query(_SQL_SERIES, {"t": trace_id, "max": int(max_points), "bins": max(1, int(max_points) // 4)})


_SQL_OPS = f"""
SELECT {device_label_sql('e.')} AS device, coalesce(o.name, '(no operator)') AS operator,
       count(*) FILTER (WHERE e.bytes > 0) AS allocs,
       CAST(coalesce(sum(e.bytes) FILTER (WHERE e.bytes > 0), 0) AS BIGINT) AS alloc_bytes,
       count(*) FILTER (WHERE e.bytes < 0) AS frees,
       CAST(coalesce(-sum(e.bytes) FILTER (WHERE e.bytes < 0), 0) AS BIGINT) AS freed_bytes,
       CAST(coalesce(sum(e.bytes), 0) AS BIGINT) AS net_bytes,
       CAST(coalesce(max(e.bytes) FILTER (WHERE e.bytes > 0), 0) AS BIGINT) AS largest_alloc_bytes
FROM memory_events e LEFT JOIN cpu_ops o ON o.trace_id = e.trace_id AND o.op_id = e.op_id
WHERE e.trace_id = $t AND e.bytes IS NOT NULL AND e.bytes <> 0
GROUP BY e.device_type, e.device_id, operator
ORDER BY e.device_type DESC, e.device_id, alloc_bytes DESC, freed_bytes DESC, operator
"""


def op_allocations(store, trace_id: str) -> pd.DataFrame:
    """Per device and operator name (its events' innermost operator: self, not children): allocations and
    frees (count, bytes), net bytes (allocated - freed) and the largest allocation. Events outside every
    operator are ``(no operator)``."""
    return store.query(_SQL_OPS, {"t": trace_id})


# The pairs (schema 012, ``memory_events.pair_ns``): one pass over the trace's allocations and frees, in (time, id)
# order per device and address. An allocation is paired with the next event at its address when that is a free; a
# free with the previous one when that is an allocation. Unpaired: an allocation live at the end of the window, a
# free of a block allocated before it.
_PAIRS_UPDATE = """
UPDATE memory_events AS m SET pair_ns = p.pair_ns
FROM (
    SELECT event_id,
           CASE WHEN bytes > 0 AND lead(bytes) OVER w < 0 THEN lead(ts_ns) OVER w
                WHEN bytes < 0 AND lag(bytes) OVER w > 0 THEN lag(ts_ns) OVER w END AS pair_ns
    FROM memory_events WHERE trace_id = $tid AND bytes IS NOT NULL AND bytes <> 0
    WINDOW w AS (PARTITION BY device_type, device_id, addr ORDER BY ts_ns, event_id)
) p
WHERE m.trace_id = $tid AND m.event_id = p.event_id AND p.pair_ns IS NOT NULL
"""


def insert_memory_pairs(con, trace_id: str) -> None:
    """Set ``memory_events.pair_ns`` of one trace whose memory_events are stored (the "memory_pairs" step)."""
    con.execute(_PAIRS_UPDATE, {"tid": trace_id})


_LIVE = "trace_id = $t AND bytes > 0 AND pair_ns IS NULL"  # allocated in the window and not freed by its end

_SQL_LIVE_ROWS = f"""
WITH l AS (SELECT * FROM memory_events WHERE {_LIVE} ORDER BY bytes DESC, ts_ns, event_id LIMIT $limit)
SELECT {device_label_sql('l.')} AS device, l.ts_ns, l.event_id, l.addr, l.bytes, l.tid,
       l.op_id, o.name AS operator, t.name AS top_operator
FROM l LEFT JOIN cpu_ops o ON o.trace_id = $t AND o.op_id = l.op_id
LEFT JOIN cpu_ops t ON t.trace_id = $t AND t.op_id = l.top_op_id
ORDER BY l.bytes DESC, l.ts_ns, l.event_id
"""

_SQL_LIVE_TOTALS = f"""
SELECT {device_label_sql()} AS device, count(*) AS blocks, CAST(sum(bytes) AS BIGINT) AS bytes
FROM memory_events WHERE {_LIVE} GROUP BY ALL ORDER BY device
"""

_SQL_UNMATCHED_FREES = "SELECT count(*) FROM memory_events WHERE trace_id = $t AND bytes < 0 AND pair_ns IS NULL"


def live_at_end(store, trace_id: str, limit: int) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Blocks allocated inside the window and not freed by its end (an allocation whose next event at the
    same device and address is not a free: ``pair_ns`` NULL): the ``limit`` largest (time, address, bytes,
    thread, allocating operator and its top-level operator), totals per device (``blocks``, ``bytes``), and the
    number of frees of blocks allocated before the window."""
    p = {"t": trace_id}
    rows = store.query(_SQL_LIVE_ROWS, {**p, "limit": max(int(limit), 0)})
    totals = store.query(_SQL_LIVE_TOTALS, p).astype({"blocks": "int64", "bytes": "int64"})
    return rows, totals, int(store.con.execute(_SQL_UNMATCHED_FREES, p).fetchone()[0])


# The allocator's call names among the trace's launch-call names: the regular expression runs once per distinct
# name (a few dozen), not once per call (a million at 1M kernels).
_ALLOCATOR_NAMES = f"""allocator_names AS (
    SELECT name FROM (SELECT DISTINCT name FROM launches WHERE trace_id = $t)
    WHERE {_ALLOCATOR.format(c="regexp_replace(name, '_v[0-9]+$', '')")}
)"""

_SQL_ALLOCATOR_CALLS_ROWS = f"""
WITH {_ALLOCATOR_NAMES}
SELECT start_ns, end_ns, dur_ns, coalesce(end_ns > start_ns, false) AS has_time FROM launches
WHERE trace_id = $t AND name IN (SELECT name FROM allocator_names)
"""

_SQL_IDLE_GAPS = ("SELECT device, gap_start_ns, gap_end_ns FROM idle_gaps WHERE trace_id = $t "
                  "ORDER BY device, gap_start_ns")



def allocator_idle(store, trace_id: str) -> tuple[pd.DataFrame, dict[str, int]]:
    """Per GPU device: its idle time (the idle gaps of its busy union, idle_gaps) and the part of it that
    overlaps the union of the allocator's runtime/driver calls (cudaMalloc, cudaFree, cuMemAlloc, ...: the
    'allocator' names of storage/idle.py) on any thread; and the trace's allocator calls (count, summed ns).

    A device's gaps are disjoint, so the overlap is, per island of the calls' union, the gaps' length before its
    end less their length before its start (``intervals.covered_before``): exact integer ns, no range join."""
    import pandas as pd

    p = {"t": trace_id}
    every = store.query(_SQL_ALLOCATOR_CALLS_ROWS, p)  # every allocator call; the union uses those with time
    calls_n, call_ns = len(every), int(every["dur_ns"].sum())  # (sum skips a missing dur_ns, as SQL's does)
    calls = every[every["has_time"].to_numpy(bool)]
    us, ue = islands(calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64))
    gaps = store.query(_SQL_IDLE_GAPS, p)
    rows = []
    for device, g in gaps.groupby("device", sort=True, dropna=False):
        gs, ge = g["gap_start_ns"].to_numpy(np.int64), g["gap_end_ns"].to_numpy(np.int64)
        over = 0
        if len(us) and not pd.isna(device):  # a gap of no device overlaps nothing (the join on device)
            over = int((covered_before(gs, ge, ue) - covered_before(gs, ge, us)).sum())
        rows.append({"device": device, "idle_ns": int((ge - gs).sum()), "allocator_idle_ns": over,
                     "allocator_calls": len(calls), "allocator_call_ns": int((ue - us).sum())})
    per_device = pd.DataFrame(rows, columns=["device", "idle_ns", "allocator_idle_ns", "allocator_calls",
                                             "allocator_call_ns"])
    per_device = per_device.astype({"device": gaps["device"].dtype, "idle_ns": "int64", "allocator_idle_ns": "int64",
                                    "allocator_calls": "int64", "allocator_call_ns": "int64"})
    return per_device, {"calls": calls_n, "call_ns": call_ns}


# A module range is a python_function named "nn.Module: X_k" (with_modules=True). The innermost holding an event
# on its thread is the one starting last (then ending first) among those holding it; else the operator's module
# (cpu_ops.module_call_id, storage/pycontext.py: the module at the op's start, or its forward operator's).
_SQL_MODULES = """
WITH ev AS (
    SELECT event_id, pid, tid, ts_ns, op_id FROM memory_events WHERE trace_id = $t AND list_contains($ids, event_id)
), direct AS (
    SELECT e.event_id, arg_max(m.name, (m.start_ns, -m.end_ns)) AS module
    FROM ev e JOIN python_calls m ON m.trace_id = $t AND m.pid = e.pid AND m.tid = e.tid
                                 AND m.start_ns <= e.ts_ns AND e.ts_ns < m.end_ns AND m.name LIKE 'nn.Module: %'
    GROUP BY e.event_id
), by_op AS (
    SELECT e.event_id, m.name AS module,
           CASE WHEN o.fwd_op_id IS NULL THEN 'operator' ELSE 'forward operator' END AS module_via
    FROM ev e JOIN cpu_ops o ON o.trace_id = $t AND o.op_id = e.op_id
    JOIN python_calls m ON m.trace_id = $t AND m.call_id = o.module_call_id
)
SELECT e.event_id, coalesce(d.module, b.module) AS module,
       CASE WHEN d.module IS NOT NULL THEN 'event' ELSE b.module_via END AS module_via
FROM ev e LEFT JOIN direct d ON d.event_id = e.event_id LEFT JOIN by_op b ON b.event_id = e.event_id
WHERE d.module IS NOT NULL OR b.module IS NOT NULL
"""


def event_modules(store, trace_id: str, event_ids: list[int]) -> pd.DataFrame:
    """The nn.Module active at each of ``event_ids`` (``event_id``, ``module``, ``module_via``): the innermost
    ``nn.Module: X_k`` range on the event's thread holding it (``module_via`` 'event'); else its operator's module
    (``cpu_ops.module_call_id``: 'operator', or 'forward operator' for a backward operator on the autograd
    thread, whose module is its forward operator's). Events with neither are absent."""
    import pandas as pd

    if not event_ids:
        return pd.DataFrame({"event_id": [], "module": [], "module_via": []})
    return store.query(_SQL_MODULES, {"t": trace_id, "ids": [int(i) for i in event_ids]})
