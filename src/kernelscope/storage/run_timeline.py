"""The aligned timeline's queries over a run of many ranks: every rank's GPU lanes on one time axis (the Ranks
page's timeline view).

Aligned time = stored time - ``rank_clocks.clock_offset_ns`` (the *applied* offset: 0 on one host, else the
estimate from collective end times; storage/ranks.py). Lanes are keyed like the single-trace timeline's
(``storage.timeline``: src, k1, k2, k3):

- ``gpu``  (rank, device, stream): GPU activities of one stream of one rank;
- ``coll`` (rank, device, 0): that rank's collective kernels (any stream), binned views only.

The drawing (lane order and labels, the run's origin) lives in ``reports.timeline_data``.
"""

from __future__ import annotations

import pandas as pd

from .timeline import bins_of

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


def run_name(store, run_id: str):
    """The run's stored name (None when unnamed); IndexError for an unknown run id."""
    return store.query("SELECT name FROM runs WHERE run_id = $r", {"r": run_id})["name"].iloc[0]


def run_ranks(store, run_id: str) -> pd.DataFrame:
    """The run's ranks by rank: rank, trace_id, name (the trace's), clock_offset_ns, and the trace's aligned
    start_ns/end_ns."""
    return store.query(
        "SELECT k.rank, k.trace_id, t.name, k.clock_offset_ns, t.start_ns - k.clock_offset_ns AS start_ns, "
        "t.end_ns - k.clock_offset_ns AS end_ns FROM rank_clocks k JOIN traces t ON t.trace_id = k.trace_id "
        "WHERE k.run_id = $r ORDER BY k.rank", {"r": run_id})


def run_lane_counts(store, run_id: str) -> pd.DataFrame:
    """The run's lanes with their event counts (columns src, k1 (rank), k2 (device), k3 (stream), events),
    in no order; a ``coll`` lane only for a rank and device with collectives."""
    return store.query(
        "SELECT 'gpu' AS src, k.rank AS k1, a.device AS k2, a.stream AS k3, count(*) AS events FROM rank_clocks k "
        "JOIN gpu_activities a ON a.trace_id = k.trace_id WHERE k.run_id = $r GROUP BY ALL "
        "UNION ALL SELECT 'coll', k.rank, a.device, 0, count(*) FROM rank_clocks k JOIN collectives c "
        "ON c.trace_id = k.trace_id JOIN gpu_activities a ON a.trace_id = c.trace_id "
        "AND a.activity_id = c.activity_id WHERE k.run_id = $r GROUP BY ALL", {"r": run_id})


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


def run_bins(store, run_id: str, a: int, b: int, w: int) -> pd.DataFrame:
    """Busy ns per (lane, bin) of the run's lanes in the aligned window ``[a, b)``, bins of ``w`` ns from
    ``a`` (as ``timeline.bins``: summed time inside the bin, capped at the bin; sparse)."""
    return bins_of(store, _RANK_BIN_SOURCES.values(), {"run": run_id, "a": a, "b": b, "w": w})


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
