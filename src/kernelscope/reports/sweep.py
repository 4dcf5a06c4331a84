"""A sweep (traces ordered by a numeric label such as ``batch``): figure builder over the ``transition``
analysis' result, the sentences for its bracket, the list of sweeps a store holds, and the report's sweep
section. The dashboard's Sweep page draws the same figure.

Definitions (docs/metrics.md, "CPU-bound or GPU-bound", ``transition``): per point the traced latency and
GPU busy time per iteration, the un-profiled time, TKLQT and the mean queue depth ``q``, busy and idle; each
point's ``regime`` comes from the deciding rule, and the bracket (``last_cpu_bound``, ``first_gpu_bound``)
is where the sweep changes regime. The figure builder never touches the store.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import cache
from ..errors import UsageError
from ..storage import catalog
from ..units import NS_PER_MS, ms_text
from .blocks import Section, Table
from .figures import styled

REGIME_COLORS = {"cpu_bound": "rgba(239, 68, 68, 0.12)", "gpu_bound": "rgba(34, 197, 94, 0.12)"}


def order_by_label(store, trace_ids: list[str], by: str) -> list[str]:
    """``trace_ids`` in sweep order: by the numeric value of label ``by`` (ascending), ties by trace name
    then id; traces without a numeric ``by`` last, by name. Unknown ids keep their place at the end."""
    df = catalog.label_values(store, trace_ids, by)
    known = {r.trace_id: (pd.isna(r.value_num), 0.0 if pd.isna(r.value_num) else float(r.value_num), r.name,
                          r.trace_id) for r in df.itertuples(index=False)}
    return sorted((t for t in trace_ids if t in known), key=known.__getitem__) + \
        [t for t in trace_ids if t not in known]


def sweep_choices(store) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sweeps, labels). ``sweeps``: per sweep name its ``traces`` and ``by`` keys (numeric labels that every
    trace of the sweep carries with distinct values; 'batch' first). ``labels``: numeric label ``key``s whose
    values differ between all ``traces`` carrying them."""
    raw = catalog.sweep_keys(store)
    rows = []
    for sweep, g in raw.groupby("sweep", sort=True):
        keys = [k for k in g["key"] if isinstance(k, str)]
        keys.sort(key=lambda k: (k != "batch", k))
        rows.append({"sweep": sweep, "traces": int(g["traces"].iloc[0]), "by": keys})
    return pd.DataFrame(rows, columns=["sweep", "traces", "by"]), catalog.distinct_numeric_labels(store)


def sweep_result(store, by: str = "batch", sweep: str | None = None, trace_ids: list[str] | None = None):
    """The transition analysis over a sweep (errors are the analysis' own UsageErrors)."""
    return cache.analysis(store, "transition", trace_ids, by=by, sweep=sweep)


def _log_x(labels: list) -> bool:
    vals = [float(v) for v in labels]
    return len(vals) > 1 and min(vals) > 0 and max(vals) / min(vals) >= 8


def _edges(labels: list, log: bool) -> list[tuple[float, float]]:
    """x extent of each point's regime shading: halfway to its neighbours (in log space on a log axis);
    the end points mirror their inner half."""
    f, g = (math.log, math.exp) if log else ((lambda x: x), (lambda x: x))
    u = [f(float(x)) for x in labels]
    if len(u) < 2:
        return [(x - 0.5, x + 0.5) for x in u]
    mids = [(a + b) / 2 for a, b in zip(u, u[1:])]
    lo, hi = [2 * u[0] - mids[0]] + mids, mids + [2 * u[-1] - mids[-1]]
    return [(g(a), g(b)) for a, b in zip(lo, hi)]


def sweep_figure(points: pd.DataFrame, scalars: dict, selected=None) -> go.Figure:
    """Four panels over the swept label (``points`` and ``scalars`` of the transition analysis):
    (1) traced latency, un-profiled time and GPU busy per iteration (ms) with the host floor H,
    (2) TKLQT (ms), (3) mean queue depth q with q = 1, (4) busy and idle of the trace (ms).
    Each point's background is shaded by its ``regime`` (red CPU-bound, green GPU-bound); the deciding
    bracket is a dashed pair of lines. Every marker carries the point's trace id as ``customdata`` (clicks
    select it); ``selected`` (a label value) is ringed."""
    by = scalars.get("by") or "label"
    labels = list(points["label"])
    log = _log_x(labels)
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=("time per iteration", "TKLQT", "mean queue depth q (dotted: q = 1)",
                                        "GPU busy and idle (whole trace)"))
    ids = list(points["trace_id"])

    def line(row, col, name, color, scale=NS_PER_MS, dash=None, unit="ms"):
        y = pd.to_numeric(points[col], errors="coerce").astype("float64") / scale
        fig.add_trace(go.Scatter(x=labels, y=y, mode="lines+markers", name=name, customdata=ids,
                                 line={"color": color, "dash": dash}, marker={"size": 8},
                                 hovertemplate=f"{by}=%{{x}}: %{{y:,.3f}} {unit}<extra>{name}</extra>"),
                      row=row, col=1)
    line(1, "latency_per_iter_ns", "traced latency / iter", "#111827")
    line(1, "unprofiled_ns", "un-profiled time", "#7c3aed", dash="dot")
    line(1, "busy_per_iter_ns", "GPU busy / iter", "#2563eb")
    line(2, "tklqt_ns", "TKLQT", "#f59e0b")
    line(3, "mean_queue_depth", "q", "#b45309", scale=1, unit="kernels")
    line(4, "busy_ns", "busy", "#2563eb", dash="dash")
    line(4, "idle_ns", "idle", "#ef4444", dash="dash")
    if scalars.get("host_floor_ns") is not None:
        fig.add_hline(y=scalars["host_floor_ns"] / NS_PER_MS, row=1, col=1, line={"dash": "dot", "color": "#7c3aed"},
                      annotation_text="host floor H", annotation_position="top left")
    fig.add_hline(y=1, row=3, col=1, line={"dash": "dot", "color": "#6b7280"})  # no label: misplaced on log axes
    # each point's regime as a background and the bracket as a dashed pair, on all four panels: the shapes
    # add_vrect / add_vline(row="all") make, set at once (each of those calls re-validated every shape so far:
    # ~200 ms a figure)
    panels = [("x" if r == 1 else f"x{r}", ("y" if r == 1 else f"y{r}") + " domain") for r in range(1, 5)]
    shapes = [{"type": "rect", "x0": lo, "x1": hi, "xref": xref, "y0": 0, "y1": 1, "yref": yref,
               "fillcolor": REGIME_COLORS.get(regime, "rgba(0,0,0,0)"), "line": {"width": 0}, "layer": "below"}
              for (lo, hi), regime in zip(_edges(labels, log), points["regime"]) for xref, yref in panels]
    t = scalars.get("transition")
    if t:
        shapes += [{"type": "line", "x0": x, "x1": x, "xref": xref, "y0": 0, "y1": 1, "yref": yref,
                    "line": {"dash": "dash", "color": "#111827", "width": 1}}
                   for x in (t["last_cpu_bound"], t["first_gpu_bound"]) for xref, yref in panels]
    fig.update_layout(shapes=[*fig.layout.shapes, *shapes])
    if selected is not None:
        hit = points[points["label"].astype(str) == str(selected)]
        if len(hit):
            p = hit.iloc[0]
            for row, col, scale in [(1, "latency_per_iter_ns", NS_PER_MS), (2, "tklqt_ns", NS_PER_MS),
                                    (3, "mean_queue_depth", 1), (4, "busy_ns", NS_PER_MS)]:
                v = p[col]
                if v is not None and not pd.isna(v):
                    fig.add_trace(go.Scatter(x=[p["label"]], y=[float(v) / scale], mode="markers", showlegend=False,
                                             customdata=[p["trace_id"]], hoverinfo="skip",
                                             marker={"size": 18, "symbol": "circle-open", "color": "#111827",
                                                     "line": {"width": 2}}), row=row, col=1)
    for row, title in [(1, "ms"), (2, "ms (log)"), (3, "kernels (log)"), (4, "ms")]:
        fig.update_yaxes(title_text=title, row=row, col=1, type="log" if row in (2, 3) else None)
    fig.update_xaxes(type="log" if log else "linear", tickvals=labels, ticktext=[str(v) for v in labels])
    fig.update_xaxes(title_text=by, row=4, col=1)
    bracket = f"transition between {by}={t['last_cpu_bound']} and {by}={t['first_gpu_bound']} ({t['rule']} rule)" \
        if t else "no transition"
    styled(fig, title={"text": f"Sweep over {by}: {bracket}; shaded red CPU-bound, green GPU-bound",
                             "font": {"size": 14}},
                height=940, margin={"l": 70, "r": 20, "t": 60, "b": 90},
                clickmode="event", hovermode="closest",
                legend={"orientation": "h", "y": -0.06, "x": 0, "xanchor": "left", "yanchor": "top"})
    return fig


def bracket_sentences(scalars: dict) -> list[str]:
    """The transition scalars in words: the deciding bracket, both rules' brackets, the host floor."""
    by = scalars.get("by")
    n = scalars.get("n_points", 0)
    out = []
    if n < 2:
        out.append(f"A sweep of {n} point{'s' if n != 1 else ''}: there is no transition to bracket "
                   "(it needs at least two points).")
    t = scalars.get("transition")
    if t:
        out.append(f"The sweep turns GPU-bound between {by}={t['last_cpu_bound']} (last CPU-bound) and "
                   f"{by}={t['first_gpu_bound']} (first GPU-bound), decided by the {t['rule']} rule.")
    elif n >= 2:
        out.append(f"No bracket: {scalars.get('transition_reason')}.")
    for rule, b in (scalars.get("brackets") or {}).items():
        if "reason" in b:
            out.append(f"{rule} rule: {b['reason']}.")
        else:
            out.append(f"{rule} rule: last CPU-bound {by}={b['last_cpu_bound']}, first GPU-bound "
                       f"{by}={b['first_gpu_bound']}.")
    if scalars.get("host_floor_ns") is not None:
        out.append(f"Host floor H = {ms_text(scalars['host_floor_ns'])} (median un-profiled time of the points "
                   "the trace rule calls CPU-bound).")
    return out


def points_table(points: pd.DataFrame, by: str) -> pd.DataFrame:
    """The points as shown (ms with 3 decimals); q before TKLQT, which is a sum over the point's kernels."""
    def ms(col):
        return [None if v is None or pd.isna(v) else round(int(v) / NS_PER_MS, 3) for v in points[col]]
    return pd.DataFrame({
        by: points["label"], "trace": points["name"], "latency / iter (ms)": ms("latency_per_iter_ns"),
        "un-profiled (ms)": ms("unprofiled_ns"),
        "inflation (×)": [None if v is None or pd.isna(v) else round(float(v), 3) for v in points["inflation"]],
        "busy / iter (ms)": ms("busy_per_iter_ns"),
        "q": [None if v is None or pd.isna(v) else round(float(v), 3) for v in points["mean_queue_depth"]],
        "TKLQT: sum over kernels (ms)": ms("tklqt_ns"), "busy (ms)": ms("busy_ns"), "idle (ms)": ms("idle_ns"),
        "regime": points["regime"]})


def sweep_section(store, trace_ids: list[str], ctx) -> Section | None:
    """The sweep over the report's traces, only with several traces or ``--by`` (default label: batch)."""
    if len(trace_ids) < 2 and not ctx.by:
        return None
    by = ctx.by or "batch"
    try:
        r = sweep_result(store, by=by, trace_ids=list(trace_ids))
    except UsageError as e:
        return Section("Sweep", "sweep", [f"No sweep over these traces: {e}"])
    blocks: list = [f"{len(r.tables['points'])} points over {by}."] + bracket_sentences(r.scalars)
    blocks.append(Table(points_table(r.tables["points"], by), f"Sweep points over {by} (transition analysis)"))
    if len(r.tables["points"]) >= 1 and ctx.figures:
        blocks.append(sweep_figure(r.tables["points"], r.scalars))
    blocks += [f"warning: {w}" for w in r.warnings]
    return Section("Sweep", "sweep", blocks)
