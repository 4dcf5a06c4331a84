"""Launch overhead of one trace (``/trace/<ref>/launch``): TKLQT with the mean queue depth, the
api/queue/dispatch split and its distribution, TKLQT by operator, launch-bound operators and the what-if
(predicted with free launches vs observed vs the naive kernel sum). Numbers and figures come from the
``launch`` and ``whatif`` analyses through ``reports/launch.py``."""

from __future__ import annotations

from dash import dcc, html

from ...reports import launch as rl
from ...reports.missing import kpi_parts
from ...units import NS_PER_MS
from .common import count_text, message, ms_text, table
from ...analysis.summary import no_gpu_reason

TITLE = "Launch"


def kpi(kid: str, label: str, raw, shown: str, extra: str = "", definition: str = "", **attrs) -> html.Div:
    """A headline number (also used by the Overview and Bound pages): id ``kpi-<kid>``, the raw value in
    ``data-value`` (int ns, a count, or the float as the analysis returned it; empty when null) so tests can
    compare it with the CLI's JSON; ``definition`` shows on hover; ``attrs``: more data-* attributes."""
    value = "" if raw is None else str(raw)
    return html.Div([html.Div(label, className="ks-kpi-label"),
                     html.Div(shown, className="ks-kpi-value", id=f"kpi-{kid}", **{"data-value": value}, **attrs),
                     html.Div(extra, className="ks-kpi-extra", id=f"kpi-{kid}-extra")], className="ks-kpi",
                    title=definition)


def tklqt_kpis(ls: dict) -> list[html.Div]:
    """The launch headline as three numbers (also the Overview's): the mean launch+queue time per kernel
    and q lead; TKLQT follows, labelled as the sum over kernels it is (it can exceed the trace many times
    over: 38.6 s on a 152 ms trace with ~253 kernels queued on average)."""
    q = ls.get("mean_queue_depth")
    mean = rl.mean_lq_ns(ls)
    return [
        kpi("mean_lq_ns", "mean launch+queue per kernel", mean,
            *kpi_parts(mean, ms_text, rl.NO_TERMS, "from its launch call's start to its start"),
            "TKLQT / kernels in the sum (a graph launch counts once)"),
        kpi("mean_queue_depth", "mean queue depth q", q,
            *kpi_parts(q, lambda v: f"{v:,.2f}", rl.NO_SPAN,
                       "" if q is None else ("GPU-bound (q ≥ 1)" if q >= 1 else "CPU-bound (q < 1)")),
            "launched-but-not-started kernels on average: TKLQT / GPU span (Little's law)"),
        kpi("tklqt_ns", f"TKLQT ({rl.tklqt_sum_label(ls)})", ls.get("tklqt_ns"), ms_text(ls.get("tklqt_ns")),
            "a sum, not wall time" + ("" if q is None else f": q = {rl.q_text(q)} = TKLQT / GPU span"),
            "sum of launch-and-queue time over kernels not launched by a graph, one term per graph launch"),
    ]


def _graph(gid: str, fig) -> dcc.Graph:
    return dcc.Graph(id=gid, figure=fig, config={"displaylogo": False})


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    lr, wr = rl.launch_results(store, trace_id)
    ls, ws = lr.scalars, wr.scalars
    body: list = [html.H2("Launch overhead")]
    if not rl.has_launches(ls):
        body.append(message("This trace has " + rl.NO_LAUNCHES.format(why=no_gpu_reason(store, trace_id)),
                            "msg-no-launches"))
        return html.Div(body)
    body.append(html.Div([*tklqt_kpis(ls),
        *[kpi(k, label + " (sum)", ls.get(k), ms_text(ls.get(k)), rl.per_term_text(ls, k), d) for k, label, d in [
            ("api_ns", "api", "launch-call time (host)"),
            ("queue_ns", "queue", "waiting behind earlier work on the stream (GPU-bound)"),
            ("dispatch_ns", "dispatch", "from the call's return (or the stream freeing) to the kernel start"),
            ("launch_delay_ns", "launch delay", "max(0, kernel start - launch call end), summed")]],
        kpi("launch_bound_ops", "launch-bound op instances", ls.get("launch_bound_ops"),
             count_text(ls.get("launch_bound_ops")), "",
             "top-level operator instances whose launch calls outlast their GPU work"),
        kpi("predicted_ns", "what-if predicted", ws.get("predicted_ns"), ms_text(ws.get("predicted_ns")),
             "" if ws.get("predicted_speedup") is None else f"{ws['predicted_speedup']:.2f}× faster than observed",
             "GPU work replayed with free launches"),
    ], className="ks-kpis", id="launch-kpis"))
    body.append(html.P(f"{ls.get('kernels', 0):,} kernels and {ls.get('graph_launches', 0):,} graph launches "
                       f"({ls.get('graph_kernels', 0):,} graph kernels) are the TKLQT terms. The naive per-node sum "
                       f"over graph kernels would be {ms_text(ls.get('tklqt_naive_ns'))} (not a launch cost).",
                       className="ks-hint"))
    body.append(_graph("launch-distribution", rl.distribution_figure(lr.tables["distribution"])))
    bk = lr.tables["by_kind"].copy()
    for c in ["lq_ns", "api_ns", "queue_ns", "dispatch_ns", "launch_delay_ns"]:
        bk[c.replace("_ns", "_ms")] = (bk[c] / NS_PER_MS).round(3)
    body += [html.H3("By kind (memcpy and memset are outside TKLQT)"),
             table(bk, [("kind", "kind", "text"), ("count", "count", "numeric"), ("lq_ms", "lq (ms)", "numeric"),
                        ("api_ms", "api (ms)", "numeric"), ("queue_ms", "queue (ms)", "numeric"),
                        ("dispatch_ms", "dispatch (ms)", "numeric"),
                        ("launch_delay_ms", "launch delay (ms)", "numeric")], "launch-by-kind")]
    body.append(_graph("launch-by-operator", rl.tklqt_by_operator_figure(lr.tables["per_op"])))
    lb = lr.tables["launch_bound"]
    body.append(html.H3("Launch-bound operators"))
    if lb.empty:
        body.append(message("No operator instance is launch-bound: every one's GPU work outlasts its launch "
                            "calls.", "msg-no-launch-bound"))
    else:
        body.append(_graph("launch-bound-figure", rl.launch_bound_figure(lb)))
        t = lb.copy()
        t["launch_api_ms"] = (t["launch_api_ns"] / NS_PER_MS).round(3)
        t["gpu_union_ms"] = (t["gpu_union_ns"] / NS_PER_MS).round(3)
        body.append(table(t, [("name", "operator", "text"), ("calls", "calls", "numeric"),
                              ("launch_bound_calls", "launch-bound calls", "numeric"),
                              ("launch_api_ms", "launch calls (ms)", "numeric"),
                              ("gpu_union_ms", "GPU time (ms)", "numeric")], "launch-bound-table"))
    body += [html.H3("What-if: launch overhead removed"), _graph("whatif-figure", rl.whatif_figure(ws))]
    body += [html.P(t) for t in rl.whatif_sentences(ws)]
    body += [html.P("⚠ " + w, className="ks-warning") for w in lr.warnings + wr.warnings]
    return html.Div(body, id="launch-page")
