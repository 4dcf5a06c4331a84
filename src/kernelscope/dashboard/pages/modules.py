"""Modules of one trace (``/trace/<ref>/modules[?metric=gpu_ns]``): the nn.Module tree recorded with
``with_modules=True`` as an icicle sized by GPU kernel time (forward + backward rolled up), forward, backward or
CPU time (``metric`` in the URL), the tree as a table (instances indented under their parents, by instance path),
the time per module class and the kernels outside every module. Numbers come from the ``modules`` analysis
(docs/metrics.md "Modules") through ``reports/modules.py``."""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from ...analysis import cache
from ...analysis.modules import NO_MODULES
from ...errors import KernelscopeError
from ...reports import modules as rm
from ...reports.missing import shown
from ...storage.store import open_store
from ...units import ms_text
from .. import urls
from ..widgets import graph, grid, kpi, message, pct_text, warning_lines

TITLE = "Modules"

_SUMS = [("gpu_ns", "GPU (ms)", "ms"), ("gpu_fwd_ns", "forward GPU (ms)", "ms"),
         ("gpu_bwd_ns", "backward GPU (ms)", "ms"), ("gpu_self_ns", "self GPU (ms)", "ms"),
         ("cpu_ns", "CPU (ms)", "ms"), ("cpu_self_ns", "self CPU (ms)", "ms"),
         ("cpu_bwd_ns", "backward CPU (ms)", "ms"), ("kernels", "kernels", "numeric")]


def _metric(params: dict | None, result) -> str:
    """The ``metric`` URL parameter (checked by params.url_params against the choices), else the trace's default
    (GPU kernel time; CPU time for a trace without kernels)."""
    m = (params or {}).get("metric")
    return m if m in rm.METRICS else rm.default_metric(result)


def _kpis(s: dict) -> html.Div:
    k = s.get("kernel_time_ns") or 0
    return html.Div([
        kpi("module_kernel_ns", "GPU time in modules", s["module_kernel_ns"], ms_text(s["module_kernel_ns"]),
            pct_text(s["module_kernel_ns"], k) + " of kernel time",
            "kernels launched inside an nn.Module range, backward kernels rolled up to their forward module"),
        kpi("bwd_kernel_ns", "of it backward", s["bwd_kernel_ns"], ms_text(s["bwd_kernel_ns"]), "",
            "kernels of backward operators with a forward operator (same Sequence number)"),
        kpi("outside_kernel_ns", "outside modules", s["outside_kernel_ns"], ms_text(s["outside_kernel_ns"]),
            pct_text(s["outside_kernel_ns"], k), "optimizer, loss seed, gradient accumulation, ..."),
        kpi("module_calls", "module calls", s["module_calls"], f"{s['module_calls']:,}",
            f"{s['module_instances']:,} instances, {s['module_classes']:,} classes"),
    ], className="ks-kpis", id="modules-kpis")


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    body: list = [html.H2("Modules")]
    if not rm.has_modules(store, trace_id):
        return html.Div(body + [message(NO_MODULES[0].upper() + NO_MODULES[1:], "msg-no-modules")],
                        id="modules-page")
    r = cache.analysis(store, "modules", trace_id)
    metric = _metric(params, r)
    t = r.tables
    body += [_kpis(r.scalars), html.P(rm.summary_sentence(r), className="ks-hint", id="modules-sentence"),
             *warning_lines(r.warnings, shown),  # they qualify the figure below (a compiled model's one module)
             html.Div(["size by: ", dcc.RadioItems(id="modules-metric", value=metric, inline=True,
                                                   options=[{"label": v, "value": k} for k, v in rm.METRICS.items()])],
                      className="ks-row"),
             dcc.Store(id="modules-trace", data=trace_id),
             graph("modules-icicle", rm.module_icicle(t["tree"], metric)),
             html.H3("Module tree (instance paths; the trace records no attribute names)"),
             grid(rm.tree_rows(t["tree"]), [("label", "module", "text"), ("class", "class", "text"),
                                            ("calls", "calls", "numeric"), *_SUMS], "modules-tree",
                  tooltips=("label",), keep=("path",), page_size=200),
             html.H3("Per class"),
             grid(t["classes"], [("class", "class", "text"), ("instances", "instances", "numeric"),
                                 ("calls", "calls", "numeric"), *_SUMS], "modules-classes")]
    out = t["outside"]
    if len(out):
        body += [html.H3("Kernels outside every module, by top-level operator"),
                 grid(out, [("top_op", "top-level operator", "text"), ("backward", "backward", "text"),
                            ("kernels", "kernels", "numeric"), ("gpu_ns", "GPU (ms)", "ms")], "modules-outside",
                      tooltips=("top_op",))]
    return html.Div(body, id="modules-page")


def resize(db_path, trace_id: str, metric: str) -> tuple:
    """The metric radio callback as a plain function: (icicle figure, URL search)."""
    with open_store(db_path, read_only=True) as store:
        r = cache.analysis(store, "modules", trace_id)
    metric = metric if metric in rm.METRICS else rm.default_metric(r)
    return rm.module_icicle(r.tables["tree"], metric), urls.search_of({"metric": metric})


def register(app, db_path) -> None:
    @app.callback(Output("modules-icicle", "figure"), Output("url", "search", allow_duplicate=True),
                  Input("modules-metric", "value"), State("modules-trace", "data"), prevent_initial_call=True)
    def _resize(metric, trace_id):
        try:
            return resize(db_path, trace_id, metric)
        except (KernelscopeError, TypeError, ValueError):
            return dash.no_update, dash.no_update
