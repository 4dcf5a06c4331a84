"""Traces page: one row per stored trace, filterable; clicking a row opens its overview."""

from __future__ import annotations

import pandas as pd
from dash import html

from ...storage.queries import list_traces
from .. import urls
from ..widgets import grid, message

TABLE_ID = "traces-table"
#: The device column lists device indices, so it says so: "GPU devices" over a "0" read as no GPU on a GPU trace
#: (as under the CLI's "devices", now its `device_ids`).
COLUMNS = [("trace_id", "id", "text"), ("name", "name", "text"), ("labels", "labels", "text"),
           ("devices", "GPU device ids", "text"), ("kernels", "kernels", "numeric"),
           ("gpu_span_ns", "GPU span (ms)", "ms"), ("notes", "notes", "text")]


def rows(store) -> pd.DataFrame:
    """The traces table's rows: id, name, labels ('k=v, ...'), devices ('0, 1'), kernels, GPU span (int ns,
    shown in ms; None without GPU activity), notes (what ingest found: truncated, negative durations,
    events set aside, a partial run). The row ``id`` is the trace id."""
    df = list_traces(store)
    out = pd.DataFrame({
        "id": df["trace_id"],
        "trace_id": df["trace_id"],
        "name": df["name"],
        "labels": [", ".join(f"{k}={v}" for k, v in sorted(lab.items())) for lab in df["labels"]],
        "devices": [", ".join(str(d) for d in devs) for devs in df["devices"]],
        "kernels": df["kernels"].astype("int64"),
        "gpu_span_ns": pd.Series([None if pd.isna(v) else int(v) for v in df["gpu_span_ns"]], dtype=object),
        "notes": ["; ".join(n) if isinstance(n, (list, tuple)) else (n or "") for n in df["notes"]],
    })
    return out


def layout(store, logdir=None) -> html.Div:
    """The list; ``logdir``: the folder `kernelscope dashboard --logdir` watches (new traces appear on reload)."""
    df = rows(store)
    if df.empty:
        if logdir is not None:
            from ...storage.logdir import describe

            return html.Div([html.H2("Traces"), message(
                f"Waiting for traces: {describe(logdir)}. Reload this page to see them.", "msg-empty-store")])
        return html.Div([
            html.H2("Traces"),
            message(f"The store {store.path} has no traces yet. Ingest one with "
                    "`kernelscope ingest TRACE_FILE` and reload this page.", "msg-empty-store"),
        ])
    watching = f" Watching {logdir}: new traces appear on reload." if logdir is not None else ""
    return html.Div([
        html.H2("Traces"),
        html.P(f"{len(df)} traces in {store.path}. Type in the row under a header to filter "
               f"(e.g. >100 under kernels); click a row to open its overview.{watching}", className="ks-hint"),
        grid(df, COLUMNS, TABLE_ID, filters=True, page_size=50, clickable=True),
    ])


def open_trace(cell) -> str | None:
    """Path of the overview for the clicked cell's row (the grid's ``cellClicked``), or None (no click).
    Row ids are trace ids, so this is right whatever filtering or sorting the table shows."""
    if not cell or cell.get("rowId") is None:
        return None
    return urls.trace_href(cell["rowId"])
