"""Compare: figure builders and display tables over the diff analysis' Result (docs/metrics.md, "Diff").

Two traces (A = before, B = after) or two sweeps paired by a label. Every number shown is a value of the
Result's ``headline`` and ``groups`` tables (delta = B - A, ``delta_pct`` = 100 (B - A) / A); this module
only converts ns to ms for display and picks rows (largest |delta_ns| first, as the analysis sorts them).
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from ..units import NS_PER_MS, clip_text
from .figures import styled
from .missing import is_missing

STATUS_COLOURS = {"matched": "#2563eb", "added": "#16a34a", "removed": "#dc2626"}


def _f(v) -> float | None:
    try:
        return None if v is None or pd.isna(v) else float(v)
    except (TypeError, ValueError):
        return None


def metric_text(metric: str, v) -> str:
    """A headline value with its unit: times (``*_ns``) in ms with 3 decimals, counts with separators,
    ``mean_queue_depth`` with 3 decimals; '—' when null."""
    x = _f(v)
    if x is None:
        return "—"
    if metric.endswith("_ns"):
        return f"{x / NS_PER_MS:,.3f} ms"
    if metric == "mean_queue_depth":
        return f"{x:,.3f}"
    return f"{int(x):,}"


def headline_rows(head: pd.DataFrame) -> pd.DataFrame:
    """The ``headline`` table as shown: metric, (label,) A, B, delta (with units) and delta % (1 decimal)."""
    cols = (["label"] if "label" in head.columns else []) + ["metric", "A", "B", "delta", "delta_pct"]
    if head is None or not len(head):
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame({
        "metric": head["metric"].tolist(),
        "A": [metric_text(m, v) for m, v in zip(head["metric"], head["a"])],
        "B": [metric_text(m, v) for m, v in zip(head["metric"], head["b"])],
        "delta": [("+" if (_f(v) or 0) > 0 else "") + metric_text(m, v) for m, v in zip(head["metric"], head["delta"])],
        "delta_pct": [None if _f(v) is None else round(_f(v), 1) for v in head["delta_pct"]],
    }, dtype=object)
    if "label" in head.columns:
        out.insert(0, "label", head["label"].tolist())
    return out[cols]


def group_rows(groups: pd.DataFrame, status: str | None = None, top: int | None = None) -> pd.DataFrame:
    """``groups`` rows (optionally only ``status``; the first ``top``) as shown: times in ms (3 decimals),
    delta % (1 decimal), the largest member on each side (groups not matched by signature). The analysis'
    order (largest |delta_ns| first) is kept."""
    cols = (["label"] if "label" in groups.columns else []) + [
        "level", "key", "status", "count_a", "count_b", "time_a_ms", "time_b_ms", "delta_ms", "delta_pct",
        "largest_a", "largest_b"]
    g = groups if status is None else groups[groups["status"] == status]
    if top is not None:
        g = g.head(top)
    if not len(g):
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame({
        "level": g["level"].tolist(), "key": g["key"].tolist(), "status": g["status"].tolist(),
        "count_a": g["count_a"].astype("int64").tolist(), "count_b": g["count_b"].astype("int64").tolist(),
        "time_a_ms": [round(int(v) / NS_PER_MS, 3) for v in g["time_a_ns"]],
        "time_b_ms": [round(int(v) / NS_PER_MS, 3) for v in g["time_b_ns"]],
        "delta_ms": [round(int(v) / NS_PER_MS, 3) for v in g["delta_ns"]],
        "delta_pct": [None if _f(v) is None else round(_f(v), 1) for v in g["delta_pct"]],
        "largest_a": [_text(v) for v in g.get("largest_a", [None] * len(g))],
        "largest_b": [_text(v) for v in g.get("largest_b", [None] * len(g))],
    }, dtype=object)
    if "label" in g.columns:
        out.insert(0, "label", g["label"].tolist())
    return out[cols]


def _members(d: pd.DataFrame) -> list[str]:
    """Per row, hover lines naming the group's largest member on each side (groups not matched by signature)."""
    a, b = (d[c] if c in d.columns else [None] * len(d) for c in ("largest_a", "largest_b"))
    return ["".join(f"<br>largest in {side}: {clip_text(str(v), 90)}" for side, v in (("A", x), ("B", y))
                    if not is_missing(v)) for x, y in zip(a, b)]


def _text(v) -> str | None:
    return None if is_missing(v) else str(v)


def headline_figure(head: pd.DataFrame, by: str | None = None) -> go.Figure:
    """Relative change (``delta_pct``) of each headline metric: bars for two traces; for two sweeps one
    line per metric over the paired label values (x = ``by``)."""
    fig = go.Figure()
    if head is not None and len(head) and "label" in head.columns:
        for metric, d in head.groupby("metric", sort=False):
            fig.add_trace(go.Scatter(x=d["label"].tolist(), y=[_f(v) for v in d["delta_pct"]], mode="lines+markers",
                                     name=metric, hovertemplate=f"{by}=%{{x}}: %{{y:+.1f}}%<extra>{metric}</extra>"))
        fig.update_xaxes(title_text=by or "label", type="log")
    elif head is not None and len(head):
        _ratio_bars(fig, head)
    styled(fig, title={"text": "Headline metrics: B against A", "font": {"size": 14}},
           height=360, margin={"l": 140, "r": 20, "t": 40, "b": 50})
    if "label" in (head.columns if head is not None else []):
        fig.update_yaxes(title_text="change (%)")
    return fig


def _ratio_bars(fig: go.Figure, head: pd.DataFrame) -> None:
    """Two traces: each metric's B / A as a bar from x1 on a log axis, its change in % written at the bar's end.
    Changes of +72,000% and -86% side by side (a queue depth against an idle time) both read on a log axis; on
    a linear % axis the second was a bar of no width. A metric without a ratio (A = 0, or either side missing)
    or with B = 0 gets no bar, only its words."""
    pct = [p if p is not None and math.isfinite(p) else None for p in (_f(v) for v in head["delta_pct"])]
    ratio = [None if p is None or p <= -100 else 1 + p / 100 for p in pct]
    logs = [math.log10(r) for r in ratio if r is not None]
    lo, hi = min(logs + [0.0]), max(logs + [0.0])
    pad = 0.3 * (hi - lo) + 0.3  # room for the words beside the longest bars
    words = ["no ratio (A is 0 or missing)" if p is None else ("-100% (B is 0)" if r is None else f"{p:+,.1f}%")
             for p, r in zip(pct, ratio)]
    fig.add_trace(go.Bar(
        x=[r - 1 if r is not None else 0.0 for r in ratio], base=1, y=head["metric"].tolist(), orientation="h",
        marker={"color": ["#dc2626" if (p or 0) > 0 else "#2563eb" for p in pct]},
        text=words, textposition="outside", cliponaxis=False,
        customdata=[metric_text(m, a) + " → " + metric_text(m, b)
                    for m, a, b in zip(head["metric"], head["a"], head["b"])],
        hovertemplate="%{y}: %{text} (%{customdata})<extra></extra>"))  # a bar spans [base, base + x]
    ticks = [10.0 ** k for k in range(math.floor(lo - pad), math.ceil(hi + pad) + 1)]
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(type="log", range=[lo - pad, hi + pad], tickvals=ticks,
                     ticktext=[f"x{t:g}" for t in ticks], title_text="B / A (log scale; bars from x1)")


def groups_figure(groups: pd.DataFrame, top: int = 20) -> go.Figure:
    """The ``top`` groups by |delta_ns| (the analysis' order) as horizontal bars of delta in ms, coloured
    by status (matched, added, removed)."""
    g = groups.head(top) if groups is not None else pd.DataFrame()
    fig = go.Figure()
    if len(g):
        labels = [(f"{lab}: " if "label" in g.columns else "") + (k if len(k) <= 60 else k[:57] + "...")
                  for k, lab in zip(g["key"].astype(str), g["label"] if "label" in g.columns else [None] * len(g))]
        for status, colour in STATUS_COLOURS.items():
            mask = (g["status"] == status).to_numpy()
            if not mask.any():
                continue
            d = g[mask]
            fig.add_trace(go.Bar(
                x=[int(v) / NS_PER_MS for v in d["delta_ns"]], y=[lab for lab, m in zip(labels, mask) if m],
                orientation="h", name=status, marker={"color": colour},
                customdata=list(zip(d["count_a"].tolist(), d["count_b"].tolist(), d["level"].tolist(), _members(d))),
                hovertemplate="%{y}<br>%{x:+,.3f} ms · count %{customdata[0]} → %{customdata[1]} "
                              "(%{customdata[2]})%{customdata[3]}<extra>" + status + "</extra>"))
        fig.update_yaxes(categoryorder="array", categoryarray=labels, autorange="reversed")
    styled(fig, title={"text": f"Kernel groups with the largest time change (top {len(g)}, ms, B − A)",
                       "font": {"size": 14}}, barmode="overlay",
           height=140 + 22 * max(len(g), 1), margin={"l": 360, "r": 20, "t": 40, "b": 50},
           xaxis_title="time change (ms)")
    return fig
