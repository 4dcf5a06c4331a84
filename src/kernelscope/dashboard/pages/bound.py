"""Bound-ness of one trace (``/trace/<ref>/bound[?bins=N]``): the GPU span split into busy, host wait and
dependency wait, queue depth over time per stream (binned, ``bins`` in the URL) with the CPU-bound and
GPU-bound segments shaded, the segments, and the idle causes (categories, and operators ranked by the
host wait they cause). Numbers and figures come from the ``bound`` analysis through ``reports/bound.py``."""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from ...analysis import cache
from ...analysis.summary import no_gpu_reason
from ...errors import KernelscopeError
from ...reports import bound as rb
from ...storage.store import open_store
from ...units import ms_text
from .. import params as P
from .. import urls
from ..widgets import graph, grid, message, pct_text, warning_lines
from ..widgets import kpi as _kpi

TITLE = "Bound"
BIN_CHOICES = list(P.BIN_CHOICES)
DEFAULT_BINS = 200


def _bins(params: dict | None) -> int:
    """The ``bins`` URL parameter (checked by params.url_params against BIN_CHOICES), else the default."""
    return P.integer(params or {}, "bins") or DEFAULT_BINS


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    bins = _bins(params)
    r = cache.analysis(store, "bound", trace_id, bins=bins)
    s = r.scalars
    body: list = [html.H2("Bound-ness")]
    if not s.get("gpu_span_ns"):
        body.append(message(rb.NO_GPU.format(why=no_gpu_reason(store, trace_id)), "msg-no-gpu"))
        return html.Div(body, id="bound-page")
    span = s["gpu_span_ns"]
    body.append(html.Div([
        _kpi("host_wait_ns", "host wait", s["host_wait_ns"], pct_text(s["host_wait_ns"], span),
             ms_text(s["host_wait_ns"]), "idle with no launched work queued: the GPU waited for the host"),
        _kpi("dependency_wait_ns", "dependency wait", s["dependency_wait_ns"], pct_text(s["dependency_wait_ns"], span),
             ms_text(s["dependency_wait_ns"]), "idle while launched work waited (events, syncs, launch floor)"),
        _kpi("busy_ns", "GPU busy", s["busy_ns"], pct_text(s["busy_ns"], span), ms_text(s["busy_ns"]),
             "union of GPU activity"),
        _kpi("cpu_bound_ns", "CPU-bound segments", s["cpu_bound_ns"], ms_text(s["cpu_bound_ns"]),
             pct_text(s["cpu_bound_ns"], span), "bins where host wait fills more than half"),
        _kpi("gpu_bound_ns", "GPU-bound segments", s["gpu_bound_ns"], ms_text(s["gpu_bound_ns"]),
             pct_text(s["gpu_bound_ns"], span), "bins where the GPU is busy or has queued work"),
        *[_kpi(k, k[:-3].replace("_", "-") + " segments", s[k], ms_text(s[k]), pct_text(s[k], span),
               "segments of this regime (bound analysis)")
          for k in sorted(s) if k.endswith("_bound_ns") and k not in ("cpu_bound_ns", "gpu_bound_ns")],
    ], className="ks-kpis", id="bound-kpis"))
    body += [html.P(t) for t in rb.bound_sentences(s)]
    t = r.tables
    body.append(graph("bound-split", rb.idle_split_figure(t["devices"])))
    body += [html.Div(["time bins: ", dcc.Dropdown(id="bound-bins", options=BIN_CHOICES, value=bins,
                                                    clearable=False, style={"width": "120px"})],
                      className="ks-row"),
             dcc.Store(id="bound-trace", data=trace_id),
             graph("bound-queue", rb.queue_depth_figure(t["queue_depth"], t["segments"])),
             html.Div(_segments(t["segments"]), id="bound-segments")]
    body.append(html.H3("Idle causes"))
    if t["idle_causes"].empty:
        body.append(message("There is no host wait in this trace, so no idle cause to rank.", "msg-no-host-wait"))
    else:
        body.append(graph("bound-causes", rb.idle_causes_figure(t["idle_causes"])))
        if not t["idle_operators"].empty:
            ops = t["idle_operators"].copy()
            ops["share_pct"] = (ops["share_of_host_wait"] * 100).round(1)
            body += [graph("bound-idle-operators", rb.idle_operators_figure(ops)),
                     grid(ops, [("operator", "operator", "text"), ("idle_ns", "host wait caused (ms)", "ms"),
                                ("share_pct", "% of host wait", "numeric"), ("main_category", "main cause", "text"),
                                ("gaps", "gaps", "numeric"), ("slow_calls", "slow calls (>= 1 ms)", "numeric"),
                                ("slow_call_idle_ns", "in slow calls (ms)", "ms"),
                                ("slow_new_shape_calls", "slow, new shapes", "numeric")],
                          "bound-idle-operators-table")]
    body += warning_lines(r.warnings)
    return html.Div(body, id="bound-page")


def _segments(segments) -> list:
    if segments.empty:
        return []
    df = rb.segments_table(segments)
    return [html.H3(f"Regime segments ({len(df)})"),
            grid(df, [(c, c, "text" if c == "regime" else "numeric") for c in df.columns], "bound-segments-table",
                 page_size=15)]


def rebin(db_path, trace_id: str, bins: int) -> tuple:
    """The bins dropdown callback as a plain function: (queue figure, segments, URL search)."""
    bins = bins if bins in BIN_CHOICES else DEFAULT_BINS
    with open_store(db_path, read_only=True) as store:  # only the binned tables depend on the bin count
        queue, segments = rb.binned(store, trace_id, bins)
    return rb.queue_depth_figure(queue, segments), _segments(segments), urls.search_of({"bins": bins})


def register(app, db_path) -> None:
    @app.callback(Output("bound-queue", "figure"), Output("bound-segments", "children"),
                  Output("url", "search", allow_duplicate=True),
                  Input("bound-bins", "value"), State("bound-trace", "data"), prevent_initial_call=True)
    def _rebin(bins, trace_id):
        try:
            return rebin(db_path, trace_id, int(bins))
        except (KernelscopeError, TypeError, ValueError):
            return dash.no_update, dash.no_update, dash.no_update
