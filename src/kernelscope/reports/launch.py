"""Launch overhead: figure builders over the ``launch`` and ``whatif`` analyses' results, and the report's
launch section. The dashboard's Launch page draws the same figures.

Definitions (docs/metrics.md, "Launch overhead"): a kernel's launch-and-queue time ``lq = api + queue +
dispatch`` (integer ns); TKLQT sums ``lq`` over kernels not launched by a graph plus one ``lq`` per graph
launch, and is always shown with the mean queue depth ``q = tklqt_ns / gpu_span_ns``. The builders only
read the analyses' tables and scalars: they never touch the store and never recompute a number.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..analysis import cache
from ..analysis.summary import no_gpu_reason
from ..storage import catalog
from ..units import NS_PER_MS, NS_PER_US, ms_text
from .blocks import Section, Table
from .figures import styled
from .missing import value_or_na

SPLIT = [("api_ns", "api (host call)", "#2563eb"), ("queue_ns", "queue (GPU busy ahead)", "#f59e0b"),
         ("dispatch_ns", "dispatch (host→GPU)", "#10b981")]

_LAYOUT = {"margin": {"l": 60, "r": 20, "t": 40, "b": 50},
           "legend": {"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"}}


def launch_results(store, trace_id: str):
    """(launch Result, whatif Result) of one trace: what the Launch page and section show."""
    return cache.analysis(store, "launch", trace_id), cache.analysis(store, "whatif", trace_id)


NO_LAUNCHES = ("no kernel with a launch call in the trace ({why}, or kernels launched before the "
               "profiler started): there is no launch overhead to show.")  # why: summary.no_gpu_reason


def has_launches(ls: dict) -> bool:
    """Whether the launch analysis found any TKLQT term (a kernel or a graph launch with a launch call)."""
    return bool(ls.get("kernels") or ls.get("graph_launches"))


def tklqt_terms(ls: dict) -> int:
    """How many ``lq`` terms TKLQT sums: kernels not launched by a graph plus one per graph launch."""
    return int(ls.get("kernels") or 0) + int(ls.get("graph_launches") or 0)


def mean_lq_ns(ls: dict) -> int | None:
    """The mean launch-and-queue time per TKLQT term (int ns): ``tklqt_ns / terms``; None without terms.
    This is what a reader compares with a kernel's duration; TKLQT itself is a sum over kernels and can
    exceed the trace many times over (a 152 ms trace with ~253 kernels queued on average has a TKLQT of
    38.6 s)."""
    n = tklqt_terms(ls)
    return None if not n or ls.get("tklqt_ns") is None else round(ls["tklqt_ns"] / n)


def tklqt_sum_label(ls: dict) -> str:
    """What TKLQT sums over, in words: 'sum over 1,274 kernels', 'sum over 6 graph launches', or both."""
    k, g = int(ls.get("kernels") or 0), int(ls.get("graph_launches") or 0)
    parts = ([f"{k:,} kernel{'s' if k != 1 else ''}"] if k or not g else []) + \
        ([f"{g:,} graph launch{'es' if g != 1 else ''}"] if g else [])
    return "sum over " + " and ".join(parts)


NO_SPAN = "no GPU activity, so no GPU span to divide by"
NO_TERMS = "no kernel with a launch call"


def q_text(q) -> str:
    """The mean queue depth as shown (2 decimals), or n/a with the reason (no GPU span)."""
    return value_or_na(q, lambda v: f"{v:,.2f}", NO_SPAN)


def mean_lq_text(ls: dict) -> str:
    return value_or_na(mean_lq_ns(ls), ms_text, NO_TERMS)


def per_term_text(ls: dict, key: str) -> str:
    """A part of TKLQT (``api_ns``, ``queue_ns``, ...) per term, e.g. 'mean 30.274 ms per kernel'; '' without
    terms or value."""
    n, v = tklqt_terms(ls), ls.get(key)
    return "" if not n or v is None else f"mean {ms_text(round(v / n))} per kernel"


def tklqt_lead(ls: dict) -> str:
    """The launch headline in one line, the per-kernel mean and q first and the sum said as one, e.g.
    'mean launch+queue per kernel 30.279 ms, q = 252.98; TKLQT 38,575.033 ms is the sum over 1,274 kernels
    (not wall time)'."""
    return (f"mean launch+queue per kernel {mean_lq_text(ls)}, q = {q_text(ls.get('mean_queue_depth'))}; "
            f"TKLQT {ms_text(ls.get('tklqt_ns'))} is the {tklqt_sum_label(ls)} (not wall time)")


def tklqt_text(scalars: dict) -> str:
    """TKLQT with the mean queue depth beside it (never a share of time), e.g. '38,575.033 ms (q = 252.98)'."""
    return f"{ms_text(scalars.get('tklqt_ns'))} (q = {q_text(scalars.get('mean_queue_depth'))})"


def distribution_figure(distribution: pd.DataFrame) -> go.Figure:
    """The launch analysis' ``distribution`` table: per metric (lq, api, queue, dispatch, launch delay) its
    median, p90, p99 and max over the TKLQT terms, in µs on a log axis (grouped bars)."""
    fig = go.Figure()
    d = distribution[distribution["count"] > 0]
    for col, name, color in [("median_ns", "median", "#1d4ed8"), ("p90_ns", "p90", "#60a5fa"),
                             ("p99_ns", "p99", "#f59e0b"), ("max_ns", "max", "#b91c1c")]:
        fig.add_trace(go.Bar(x=[m.removesuffix("_ns") for m in d["metric"]],
                             y=(d[col].astype("float64") / NS_PER_US).clip(lower=1e-3),
                             name=name, marker_color=color,
                             customdata=d[col].astype("int64"),
                             hovertemplate="%{x} " + name + ": %{customdata:,} ns<extra></extra>"))
    styled(fig, title={"text": "Launch-and-queue time split over the TKLQT terms", "font": {"size": 14}},
                barmode="group", yaxis={"title": "µs per kernel (log; 0 drawn at 0.001)", "type": "log"},
                height=340, **_LAYOUT)
    return fig


def tklqt_by_operator_figure(per_op: pd.DataFrame, top: int = 15) -> go.Figure:
    """TKLQT of the ``top`` top-level operators (launch ``per_op``), split api/queue/dispatch (stacked,
    the parts add up to the operator's ``tklqt_ns``), in ms; launches outside every operator show as
    '(no operator)'."""
    d = per_op.sort_values("tklqt_ns", ascending=False).head(top).iloc[::-1]
    names = [n if isinstance(n, str) else "(no operator)" for n in d["name"]]
    fig = go.Figure()
    for col, label, color in SPLIT:
        fig.add_trace(go.Bar(y=names, x=d[col] / NS_PER_MS, name=label, orientation="h", marker_color=color,
                             customdata=d[["tklqt_ns", "calls"]].to_numpy(),
                             hovertemplate="%{y}: %{x:,.3f} ms " + label.split(" ")[0]
                             + " (TKLQT %{customdata[0]:,} ns, %{customdata[1]} calls)<extra></extra>"))
    styled(fig, title={"text": f"TKLQT by operator (top {len(d)})", "font": {"size": 14}},
                barmode="stack", xaxis_title="TKLQT (ms)", height=max(260, 60 + 24 * len(d)),
                **_LAYOUT)
    return fig


def launch_bound_figure(launch_bound: pd.DataFrame, top: int = 15) -> go.Figure:
    """Launch-bound operators (launch ``launch_bound``): per operator its summed launch-call time next to
    the summed union of its GPU activities (ms). An instance is launch-bound when the first exceeds the
    second; the hover gives how many of its calls are."""
    d = launch_bound.sort_values("launch_bound_calls", ascending=False).head(top).iloc[::-1]
    fig = go.Figure()
    for col, label, color in [("launch_api_ns", "launch calls (host)", "#2563eb"),
                              ("gpu_union_ns", "GPU time (union)", "#6b7280")]:
        fig.add_trace(go.Bar(y=list(d["name"]), x=d[col] / NS_PER_MS, name=label, orientation="h",
                             marker_color=color, customdata=d[["launch_bound_calls", "calls"]].to_numpy(),
                             hovertemplate="%{y}: %{x:,.3f} ms " + label
                             + " (%{customdata[0]} of %{customdata[1]} calls launch-bound)<extra></extra>"))
    styled(fig, title={"text": "Launch-bound operators: launch-call time vs GPU time", "font": {"size": 14}},
                barmode="group", xaxis_title="ms (summed over calls)", height=max(260, 60 + 30 * len(d)),
                **_LAYOUT)
    return fig


def whatif_rows(s: dict) -> list[tuple[str, int | None]]:
    """(label, ns) of the what-if bars: predicted with free launches, observed, traced, naive kernel sum."""
    return [("predicted (free launches)", s.get("predicted_ns")), ("observed", s.get("observed_ns")),
            ("traced (under the profiler)", s.get("traced_ns")), ("naive (sum of kernels)", s.get("naive_ns"))]


def whatif_figure(s: dict) -> go.Figure:
    """The whatif scalars as bars (ms): predicted vs observed vs traced vs the naive kernel sum."""
    rows = [(k, v) for k, v in whatif_rows(s) if v is not None]
    fig = go.Figure(go.Bar(x=[k for k, _ in rows], y=[v / NS_PER_MS for _, v in rows],
                           marker_color=["#10b981", "#111827", "#6b7280", "#f59e0b"][:len(rows)],
                           customdata=[v for _, v in rows],
                           text=[ms_text(v) for _, v in rows], textposition="outside",
                           hovertemplate="%{x}: %{customdata:,} ns<extra></extra>"))
    sp = s.get("predicted_speedup")
    styled(fig, title={"text": "What-if: launch overhead removed"
                             + (f" (predicted speedup {sp:.2f}×)" if sp is not None else ""), "font": {"size": 14}},
                yaxis_title="ms", height=340, showlegend=False, **_LAYOUT)
    return fig


def whatif_sentences(s: dict) -> list[str]:
    out = []
    if s.get("predicted_ns") is None:
        return ["The what-if has nothing to replay (no GPU activity with a launch call in scope)."]
    out.append(f"With free launches the GPU work would take {ms_text(s['predicted_ns'])} "
               f"(observed {ms_text(s.get('observed_ns'))}, {s.get('observed_source')}; naive sum of kernels "
               f"{ms_text(s.get('naive_ns'))}).")
    if s.get("twin"):
        pe, ne = (value_or_na(v, lambda x: f"{100 * x:+.1f}%", "the twin has no observed time")
                  for v in (s.get("prediction_error"), s.get("naive_error")))
        out.append(f"Twin {s['twin']}: observed {ms_text(s.get('twin_observed_ns'))}; prediction error {pe}, "
                   f"naive error {ne}.")
    gap = value_or_na(s.get("residual_gap_ns"), lambda x: f"{x:,} ns", "none measured")
    out.append(f"Residual gap per activity {gap} ({s.get('residual_source') or 'no source'}); "
               f"{s.get('host_syncs', 0)} host barriers kept.")
    return out


def launch_sentence(ls: dict) -> str:
    """The launch headline in words: the per-kernel mean with q, then TKLQT as a sum, then its split."""
    q = ls.get("mean_queue_depth")
    regime = "" if q is None else (f" (on average {q:,.1f} kernels launched but not started: GPU-bound)" if q >= 1
                                   else " (less than one kernel waiting on average: CPU-bound)")
    return (f"mean launch+queue per kernel {mean_lq_text(ls)} with q = {q_text(q)}{regime}; TKLQT, the "
            f"{tklqt_sum_label(ls)}, is {ms_text(ls.get('tklqt_ns'))} (not wall time), split into api "
            f"{ms_text(ls.get('api_ns'))}, queue {ms_text(ls.get('queue_ns'))} and dispatch "
            f"{ms_text(ls.get('dispatch_ns'))}.")


def headline(ls: dict, ws: dict) -> pd.DataFrame:
    """The launch headline of one trace as one row (ms with 3 decimals; q as a number): the mean
    launch-and-queue time per kernel and q lead; TKLQT follows as the sum it is, with how many terms it sums
    (kernels not launched by a graph, one per graph launch)."""
    def ms(v):
        return None if v is None else round(int(v) / NS_PER_MS, 3)
    return pd.DataFrame([{
        "mean launch+queue per kernel (ms)": ms(mean_lq_ns(ls)), "mean queue depth q": ls.get("mean_queue_depth"),
        "TKLQT: sum over kernels (ms)": ms(ls.get("tklqt_ns")), "kernels in the sum": tklqt_terms(ls),
        "api (ms)": ms(ls.get("api_ns")), "queue (ms)": ms(ls.get("queue_ns")),
        "dispatch (ms)": ms(ls.get("dispatch_ns")), "launch delay (ms)": ms(ls.get("launch_delay_ns")),
        "launch-bound op instances": ls.get("launch_bound_ops"),
        "what-if predicted (ms)": ms(ws.get("predicted_ns")), "observed (ms)": ms(ws.get("observed_ns")),
        "naive (ms)": ms(ws.get("naive_ns")), "GPU idle in gaps >= 1 ms (ms)": ms(ws.get("long_idle_ns")),
    }])


def launch_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace: the launch headline, the split distribution, TKLQT by operator, launch-bound operators and
    the what-if."""
    blocks: list = []
    for tid in trace_ids:
        name = catalog.trace_name(store, tid) or tid
        lr, wr = launch_results(store, tid)
        ls, ws = lr.scalars, wr.scalars
        if not has_launches(ls):
            blocks.append(f"{name}: " + NO_LAUNCHES.format(why=no_gpu_reason(store, tid)))
            continue
        df = headline(ls, ws)
        df.insert(0, "trace", name)
        blocks.append(Table(df, f"{name}: launch overhead (q = TKLQT / GPU span; TKLQT sums every kernel's "
                                "launch-and-queue time, a graph launch counted once)"))
        blocks.append(f"{name}: {launch_sentence(ls)}")
        lb = lr.tables["launch_bound"]
        figs = [] if not ctx.figures else (
            [distribution_figure(lr.tables["distribution"]), tklqt_by_operator_figure(lr.tables["per_op"])]
            + ([] if lb.empty else [launch_bound_figure(lb)]) + [whatif_figure(ws)])
        for fig in figs:
            fig.update_layout(title_text=f"{name}: {fig.layout.title.text}")
        blocks += figs[:2] + ([f"{name}: no operator instance is launch-bound."] if lb.empty else []) + figs[2:]
        blocks += [f"{name}: {t}" for t in whatif_sentences(ws)]
        blocks += [f"{name}: warning: {w}" for w in lr.warnings + wr.warnings]
    return Section("Launch overhead", "launch", blocks)
