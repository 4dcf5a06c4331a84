"""What the store holds, by name: the small look-ups the dashboard's pages make to title a page, fill a
dropdown or link a trace to its run (trace names, sweep names, label keys, a trace's rank). Every function
takes an open store and returns plain Python values or a small DataFrame; none computes a metric."""

from __future__ import annotations

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
