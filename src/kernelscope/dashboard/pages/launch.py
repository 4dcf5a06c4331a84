"""Launch overhead of one trace (``/trace/<ref>/launch``): TKLQT with the mean queue depth, the
api/queue/dispatch split and its distribution, TKLQT by operator, launch-bound operators and the what-if
(predicted with free launches vs observed vs the naive kernel sum). Numbers and figures come from the
``launch`` and ``whatif`` analyses through ``reports/launch.py``."""

from __future__ import annotations

from dash import html

from ...analysis.summary import no_gpu_reason
from ...reports import launch as rl
from ...units import ms_text
from ..widgets import count_text, graph, grid, kpi, message, tklqt_kpis, warning_lines

TITLE = "Launch"


def whatif_extra(ws: dict) -> str:
    """Under the what-if headline: the speed-up, and how much of the observed time was GPU idle in stretches of
    1 ms or more (host work the replay counts as removable: set-up, data loading, a stall)."""
    if ws.get("predicted_speedup") is None:
        return ""
    text = f"{ws['predicted_speedup']:.2f}× faster than observed"
    if ws.get("long_idle_ns"):
        text += f", counting {ms_text(ws['long_idle_ns'])} of GPU idle in stretches ≥ 1 ms as removable"
    return text


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
             whatif_extra(ws), "GPU work replayed with free launches"),
    ], className="ks-kpis", id="launch-kpis"))
    body.append(html.P(f"{ls.get('kernels', 0):,} kernels and {ls.get('graph_launches', 0):,} graph launches "
                       f"({ls.get('graph_kernels', 0):,} graph kernels) are the TKLQT terms. The naive per-node sum "
                       f"over graph kernels would be {ms_text(ls.get('tklqt_naive_ns'))} (not a launch cost).",
                       className="ks-hint"))
    body.append(graph("launch-distribution", rl.distribution_figure(lr.tables["distribution"])))
    body += [html.H3("By kind (memcpy and memset are outside TKLQT)"),
             grid(lr.tables["by_kind"], [("kind", "kind", "text"), ("count", "count", "numeric"),
                                         ("lq_ns", "lq (ms)", "ms"), ("api_ns", "api (ms)", "ms"),
                                         ("queue_ns", "queue (ms)", "ms"), ("dispatch_ns", "dispatch (ms)", "ms"),
                                         ("launch_delay_ns", "launch delay (ms)", "ms")], "launch-by-kind")]
    body.append(graph("launch-by-operator", rl.tklqt_by_operator_figure(lr.tables["per_op"])))
    lb = lr.tables["launch_bound"]
    body.append(html.H3("Launch-bound operators"))
    if lb.empty:
        body.append(message("No operator instance is launch-bound: every one's GPU work outlasts its launch "
                            "calls.", "msg-no-launch-bound"))
    else:
        body.append(graph("launch-bound-figure", rl.launch_bound_figure(lb)))
        body.append(grid(lb, [("name", "operator", "text"), ("calls", "calls", "numeric"),
                              ("launch_bound_calls", "launch-bound calls", "numeric"),
                              ("launch_api_ns", "launch calls (ms)", "ms"),
                              ("gpu_union_ns", "GPU time (ms)", "ms")], "launch-bound-table"))
    body += [html.H3("What-if: launch overhead removed"), graph("whatif-figure", rl.whatif_figure(ws))]
    body += [html.P(t) for t in rl.whatif_sentences(ws)]
    body += warning_lines(lr.warnings + wr.warnings)
    return html.Div(body, id="launch-page")
