"""Small facts about stored traces, runs and labels that reports look up by name: a trace's name, its numeric
label keys, how many rows it has of a kind, when each trace was ingested, the runs of the store, and the
sweeps its labels describe. Each function is one parameterised query."""

from __future__ import annotations

import pandas as pd


def trace_name(store, trace_id: str) -> str | None:
    """The trace's stored name; None when the trace has none or is unknown."""
    df = store.query("SELECT name FROM traces WHERE trace_id = $t", {"t": trace_id})
    if df.empty:
        return None
    name = df["name"].iloc[0]
    return name if isinstance(name, str) else None


def trace_names(store, trace_ids) -> list:
    """The stored names of the given traces (unknown ids left out), by name."""
    return store.query("SELECT name FROM traces WHERE list_contains($ids, trace_id) ORDER BY name",
                       {"ids": list(trace_ids)})["name"].tolist()


def numeric_label_keys(store, trace_id: str) -> list[str]:
    """Keys of the trace's labels with a numeric value, sorted."""
    return store.query("SELECT key FROM labels WHERE trace_id = $t AND value_num IS NOT NULL ORDER BY key",
                       {"t": trace_id})["key"].tolist()


def cuda_event_timings(store, trace_id: str) -> int:
    """Un-profiled timings the collector recorded with CUDA events for the trace (``timings`` rows of kind
    'cuda_event')."""
    return int(store.query("SELECT count(*) AS n FROM timings WHERE trace_id = $t AND kind = 'cuda_event'",
                           {"t": trace_id})["n"].iloc[0])


def gpu_activity_count(store, trace_id: str) -> int:
    """GPU activities (kernels, memcpy, memset) of the trace."""
    return int(store.query("SELECT count(*) AS n FROM gpu_activities WHERE trace_id = $t",
                           {"t": trace_id})["n"].iloc[0])


def ingest_stamps(store, trace_ids=None) -> dict:
    """``{trace_id: ingested_ns or None}`` of the given trace ids (unknown ids left out), or of every trace
    of the store when ``trace_ids`` is None, in id order for the whole store."""
    if trace_ids is None:
        df = store.query("SELECT trace_id, ingested_ns FROM traces ORDER BY trace_id")
    else:
        df = store.query("SELECT trace_id, ingested_ns FROM traces WHERE trace_id IN (SELECT unnest($ids))",
                         {"ids": list(trace_ids)})
    return {str(t): None if pd.isna(n) else int(n) for t, n in zip(df["trace_id"], df["ingested_ns"])}


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
# Numeric labels whose values tell every trace carrying them apart (a sweep without a sweep=NAME label).
_BY_SQL = """
SELECT key, count(DISTINCT trace_id) AS traces FROM labels
WHERE value_num IS NOT NULL AND key <> 'unprofiled_ns'
GROUP BY key HAVING count(DISTINCT trace_id) >= 2 AND count(DISTINCT value_num) = count(DISTINCT trace_id)
ORDER BY key
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
    traces carrying them: key, traces; by key."""
    return store.query(_BY_SQL)
