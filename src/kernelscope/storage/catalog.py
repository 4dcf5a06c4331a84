"""What the store holds, by name: the small look-ups the dashboard's pages and the reports make to title a
page, fill a dropdown or link a trace to its run (trace names, sweep names, label keys, a trace's rank, the
runs, ingest stamps for cache keys, row counts). Every function takes an open store and returns plain Python
values or a small DataFrame; none computes a metric."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported by the queries that return frames, not by every CLI command's start
    import pandas as pd


def trace_name(store, trace_id: str) -> str | None:
    """The stored name of ``trace_id`` (None when it has none)."""
    df = store.query("SELECT name FROM traces WHERE trace_id = $t", {"t": trace_id})
    name = df["name"].iloc[0] if len(df) else None
    return name if isinstance(name, str) else None


def trace_names(store, trace_ids: list[str]) -> dict[str, str | None]:
    """``{trace_id: name}`` for the given traces that exist."""
    df = store.query("SELECT trace_id, name FROM traces WHERE list_contains($ids, trace_id)",
                     {"ids": list(trace_ids)})
    return dict(df.itertuples(index=False, name=None))


def trace_choices(store) -> pd.DataFrame:
    """Traces a comparison can pick (every format but Nsight Compute's kernel-only CSVs): columns
    ``trace_id``, ``name``, ordered by name then id."""
    return store.query("SELECT trace_id, name FROM traces WHERE format <> 'ncu' ORDER BY name, trace_id")


def sweep_names(store) -> list[str]:
    """The values of the ``sweep`` label, sorted."""
    df = store.query("SELECT DISTINCT value_text FROM labels WHERE key = 'sweep' ORDER BY 1")
    return list(df["value_text"])


def numeric_label_keys(store) -> list[str]:
    """Keys of labels that carry a number on some trace (what a sweep can be paired by), sorted."""
    df = store.query("SELECT DISTINCT key FROM labels WHERE value_num IS NOT NULL ORDER BY 1")
    return list(df["key"])


def rank_of(store, trace_id: str) -> tuple[str, int] | None:
    """``(run_id, rank)`` of a trace that is a rank of a run with stored clocks, else None."""
    df = store.query("SELECT t.run_id, t.rank FROM traces t JOIN rank_clocks k ON k.trace_id = t.trace_id "
                     "WHERE t.trace_id = $t", {"t": trace_id})
    if df.empty:
        return None
    return df["run_id"].iloc[0], int(df["rank"].iloc[0])


def traces_by_prefix(store, prefix: str) -> pd.DataFrame:
    """Traces whose id starts with ``prefix``: columns ``trace_id``, ``name``, ``run_id`` (null outside a
    run)."""
    return store.query("SELECT trace_id, name, run_id FROM traces WHERE starts_with(trace_id, $r)", {"r": prefix})


def numeric_labels_of(store, trace_id: str) -> list[str]:
    """Keys of ``trace_id``'s labels with a numeric value, sorted."""
    return store.query("SELECT key FROM labels WHERE trace_id = $t AND value_num IS NOT NULL ORDER BY key",
                       {"t": trace_id})["key"].tolist()


def cuda_event_timings(store, trace_id: str) -> int:
    """Un-profiled timings the collector recorded with CUDA events for the trace (``timings`` rows of kind
    'cuda_event')."""
    return int(store.query("SELECT count(*) AS n FROM timings WHERE trace_id = $t AND kind = 'cuda_event'",
                           {"t": trace_id})["n"].iloc[0])


def process_wall_ns(store, trace_id: str) -> int | None:
    """The un-profiled run's whole-process wall time the collector recorded when the script marks no
    kernelscope.range region (``timings`` kind 'process_wall'), else None."""
    v = store.query("SELECT max(dur_ns) AS ns FROM timings WHERE trace_id = $t AND kind = 'process_wall'",
                    {"t": trace_id})["ns"].iloc[0]
    import pandas as pd

    return None if pd.isna(v) else int(v)


def gpu_activity_count(store, trace_id: str) -> int:
    """GPU activities (kernels, memcpy, memset) of the trace."""
    return int(store.query("SELECT count(*) AS n FROM gpu_activities WHERE trace_id = $t",
                           {"t": trace_id})["n"].iloc[0])


def ingest_stamps(store, trace_ids=None) -> dict:
    """``{trace_id: ingested_ns or None}`` of the given trace ids (unknown ids left out), or of every trace
    of the store when ``trace_ids`` is None, in id order for the whole store."""
    if trace_ids is None:  # fetchall, not a DataFrame: every cached analysis asks (analysis/cache.py's key)
        rows = store.con.execute("SELECT trace_id, ingested_ns FROM traces ORDER BY trace_id").fetchall()
    else:
        rows = store.con.execute("SELECT trace_id, ingested_ns FROM traces WHERE list_contains($ids, trace_id)",
                                 {"ids": list(trace_ids)}).fetchall()  # 0.55 ms; IN (SELECT unnest) 1.1 ms
    return {str(t): None if n is None else int(n) for t, n in rows}


def runs(store) -> pd.DataFrame:
    """The runs of the store that still have traces, by name then id: run_id, name, world_size, rank_source,
    offset_method."""
    return store.query("SELECT run_id, name, world_size, rank_source, offset_method FROM runs "
                       "WHERE run_id IN (SELECT run_id FROM traces WHERE run_id IS NOT NULL) ORDER BY name, run_id")


# Sweeps: the traces labelled sweep=NAME, with the numeric labels that tell their points apart.
_SWEEPS_SQL = """
WITH s AS (SELECT value_text AS sweep, trace_id FROM labels WHERE key = 'sweep'),
c AS (SELECT sweep, count(DISTINCT trace_id) AS traces FROM s GROUP BY sweep),
k AS (SELECT s.sweep, l.key, count(DISTINCT l.trace_id) AS n, count(DISTINCT l.value_num) AS nd
      FROM s JOIN labels l ON l.trace_id = s.trace_id
      WHERE l.value_num IS NOT NULL AND l.key <> 'unprofiled_ns' GROUP BY ALL)
SELECT c.sweep, c.traces, k.key, k.nd
FROM c LEFT JOIN k ON k.sweep = c.sweep AND k.n = c.traces AND k.nd = c.traces
ORDER BY c.sweep, k.key
"""
# Each trace's name and its numeric value of label $by (null: none), for ordering a sweep's traces.
_ORDER_SQL = """
SELECT t.trace_id, coalesce(t.name, '') AS name,
       (SELECT any_value(value_num) FROM labels l WHERE l.trace_id = t.trace_id AND l.key = $by) AS value_num
FROM traces t WHERE list_contains($ids, t.trace_id)
"""
# Numeric labels whose values tell every trace carrying them apart (a sweep without a sweep=NAME label), unless
# those traces are the ranks of one run (rank=0, 1 of a DDP run: not a sweep; the Ranks page compares them).
_BY_SQL = """
SELECT l.key, count(DISTINCT l.trace_id) AS traces FROM labels l JOIN traces t ON t.trace_id = l.trace_id
WHERE l.value_num IS NOT NULL AND l.key <> 'unprofiled_ns'
GROUP BY l.key
HAVING count(DISTINCT l.trace_id) >= 2 AND count(DISTINCT l.value_num) = count(DISTINCT l.trace_id)
   AND NOT (count(t.run_id) = count(*) AND count(DISTINCT t.run_id) = 1)
ORDER BY l.key
"""


def sweep_keys(store) -> pd.DataFrame:
    """Per sweep name (label ``sweep``): ``traces`` carrying it and each numeric label ``key`` (not
    ``unprofiled_ns``) that every one of them carries with distinct values (null when none), by sweep then
    key; ``nd`` is that key's count of distinct values."""
    return store.query(_SWEEPS_SQL)


def label_values(store, trace_ids, by: str) -> pd.DataFrame:
    """For the given traces (unknown ids left out): trace_id, name ('' when none) and value_num (the numeric
    value of label ``by``; null when the trace has none), in no order."""
    return store.query(_ORDER_SQL, {"ids": list(trace_ids), "by": by})


def distinct_numeric_labels(store) -> pd.DataFrame:
    """Numeric label keys (not ``unprofiled_ns``) on at least two traces whose values differ between all the
    traces carrying them, those traces not all the ranks of one run: key, traces; by key."""
    return store.query(_BY_SQL)
