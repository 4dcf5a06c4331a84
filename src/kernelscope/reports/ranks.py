"""A multi-rank run: figure builders over the ``comm`` analysis' result (per-rank breakdown bars, collective
skew heat map) and the straggler table. The dashboard's Ranks page draws them; they never touch the store.

Breakdown segments are disjoint and add up to the rank's GPU span (docs/metrics.md, "Communication"):
compute |K|, exposed communication |C \\ K|, exposed copies |M \\ (K u C)|, idle; hidden communication
(|C| - |C \\ K|) lies under compute and is shown in the hover text, not as a segment.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..analysis.registry import get_analysis
from ..storage import catalog
from ..units import BYTES_PER_MB, NS_PER_MS

SEGMENTS = [  # (column, label, colour)
    ("compute_ns", "compute", "#2563eb"),
    ("exposed_comm_ns", "exposed communication", "#dc2626"),
    ("exposed_memcpy_ns", "exposed memcpy", "#f59e0b"),
    ("idle_ns", "idle", "#d1d5db"),
]


def comm_result(store, run: str | None = None):
    """The comm analysis over run ``run`` (or the store's only run); errors are its UsageErrors."""
    return get_analysis("comm").fn(store, None, run=run)


def run_list(store) -> pd.DataFrame:
    """The runs of the store: run_id, name, world_size, rank_source, offset_method."""
    return catalog.runs(store)


def breakdown_figure(ranks: pd.DataFrame) -> go.Figure:
    """Horizontal stacked bars, one per rank (ms): compute, exposed communication, exposed memcpy, idle."""
    fig = go.Figure()
    y = [f"rank {int(r)}" for r in ranks["rank"]]
    hidden = (ranks["comm_ns"] - ranks["exposed_comm_ns"]) / NS_PER_MS
    for col, label, colour in SEGMENTS:
        fig.add_bar(y=y, x=ranks[col] / NS_PER_MS, name=label, orientation="h", marker_color=colour,
                    customdata=hidden, hovertemplate="%{y}: " + label + " %{x:.3f} ms"
                    "<br>communication hidden under compute %{customdata:.3f} ms<extra></extra>")
    fig.update_layout(barmode="stack", xaxis_title="ms of the GPU span", height=120 + 28 * len(y),
                      margin=dict(l=70, r=20, t=30, b=40), legend=dict(orientation="h", y=1.12),
                      yaxis=dict(autorange="reversed"))
    return fig


def skew_heatmap(arrivals: pd.DataFrame) -> go.Figure:
    """Heat map of wait (ms) per rank (rows) and collective instance (columns, in time order): how long each
    rank waited inside the collective for the last one to arrive; the straggler's cell is 0."""
    if arrivals.empty:
        return go.Figure()
    a = arrivals.copy()
    a["instance"] = a["process_group"].astype(str) + ":" + a["pg_seq"].astype(str)
    order = a.groupby("instance")["start_ns"].min().sort_values().index.tolist()
    z = a.pivot_table(index="rank", columns="instance", values="wait_ns", aggfunc="max")[order] / NS_PER_MS
    fig = go.Figure(go.Heatmap(z=z.values, x=order, y=[f"rank {int(r)}" for r in z.index],
                               colorscale="Reds", colorbar_title="wait ms",
                               hovertemplate="%{y}, collective %{x}: waited %{z:.3f} ms<extra></extra>"))
    fig.update_layout(xaxis_title="collective (process group:sequence)", height=140 + 22 * len(z.index),
                      margin=dict(l=70, r=20, t=20, b=60), yaxis=dict(autorange="reversed"))
    return fig


def straggler_table(collectives: pd.DataFrame, top: int = 20) -> pd.DataFrame:
    """The ``top`` instances by start skew: collective, bytes, skews (ms), straggler, bandwidths, rounded for
    reading (MB to 2 decimals, ms to 3: whole us, GB/s to 1); the comm analysis keeps the exact values."""
    c = collectives.sort_values(["start_skew_ns", "first_start_ns"], ascending=[False, True]).head(top)
    return pd.DataFrame({
        "instance": c["process_group"].astype(str) + ":" + c["pg_seq"].astype(str),
        "collective": c["collective"],
        "MB": (c["bytes"] / BYTES_PER_MB).round(2),
        "start skew ms": (c["start_skew_ns"] / NS_PER_MS).round(3),
        "end skew ms": (c["end_skew_ns"] / NS_PER_MS).round(3),
        "straggler": c["straggler_rank"],
        "algbw GB/s": c["algbw_gbps"].round(1),
        "busbw GB/s": c["busbw_gbps"].round(1),
    }).reset_index(drop=True)
