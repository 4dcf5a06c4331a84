"""Steps of one trace (``/trace/<ref>/steps``): TensorBoard's overview per step -- stacked bars of kernel,
memcpy, memset, runtime, dataloader, CPU-op and other time, the step-time line with the steady steps' median,
the spread, and the table with warm-up and partial steps marked (and why). Numbers come from the ``steps``
analysis (docs/metrics.md "Steps") through ``reports/steps.py``.

URL state: ``phase`` (a user annotation to use as the steps instead of ``ProfilerStep#N``) and ``warmup``
(warm-up steps per window, default 1). Clicking a step's bar opens the Timeline zoomed to that step.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from ...analysis import cache
from ...errors import UsageError
from ...reports import steps as rs
from ...reports import timeline_data as td
from ...reports.missing import shown
from ...units import ms_text
from .. import params as P
from .. import urls
from ..widgets import graph, grid, kpi, message, warning_lines

TITLE = "Steps"


def _kpis(r) -> html.Div:
    s = r.scalars
    cv = s.get("step_time_cv")
    return html.Div([
        kpi("step_time_median_ns", "median step time", s.get("step_time_median_ns"),
            ms_text(s.get("step_time_median_ns")), f"over {s.get('steady_steps') or s.get('step_count')} step(s)",
            "median span of the steady steps (neither warm-up nor partial)"),
        kpi("step_time_min_ns", "min", s.get("step_time_min_ns"), ms_text(s.get("step_time_min_ns"))),
        kpi("step_time_max_ns", "max", s.get("step_time_max_ns"), ms_text(s.get("step_time_max_ns"))),
        kpi("step_time_cv", "CV", cv, "—" if cv is None else f"{100 * cv:.2f}%", "",
            "population standard deviation / mean of the steady steps' times"),
        kpi("step_count", "steps", s.get("step_count"), f"{s.get('step_count', 0):,}",
            f"{s.get('warmup_steps', 0)} warm-up, {s.get('partial_steps', 0)} partial"),
    ], className="ks-kpis", id="steps-kpis")


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    params = params or {}
    phase = params.get("phase") or None
    warmup = P.integer(params, "warmup")
    body: list = [html.H2("Steps")]
    try:
        given = {k: v for k, v in (("phase", phase), ("warmup", warmup)) if v is not None}  # the report's key
        r = cache.analysis(store, "steps", trace_id, **given)
    except UsageError as exc:
        return html.Div(body + [message(str(exc), "msg-steps-bad-option", "error")])
    if not r.scalars.get("step_count"):
        offers = r.trust.get("phase_candidates") or []
        hint = " Here, ?phase=NAME in the page's URL does the same." if phase is None and not offers else ""
        body.append(message(shown(r.warnings[0]) + hint, "msg-no-steps"))
        if offers:  # one click instead of editing the URL
            body.append(html.Div(["Use a range as the steps: "] + [
                html.A(f"{c['name']} ({c['ranges']:,})", href=urls.trace_href(trace_id, "steps", phase=c["name"]),
                       className="ks-chip", id=f"steps-phase-{i}") for i, c in enumerate(offers)],
                className="ks-hint", id="steps-phase-offers"))
        return html.Div(body, id="steps-page")
    df = r.tables["steps"]
    body.append(_kpis(r))
    body.append(html.P(rs.spread_text(r), className="ks-hint", id="steps-spread"))
    origin = td.trace_info(store, trace_id)["start_ns"]  # the Timeline's t0/t1 are ms since it
    windows = {label: urls.trace_href(trace_id, "timeline", t0=urls.ms_since(int(a), origin),
                                      t1=urls.ms_since(int(a) + int(d), origin))
               for label, a, d in zip(rs.step_labels(df), df["start_ns"], df["dur_ns"])}
    body += [dcc.Store(id="steps-windows", data=windows), dcc.Location(id="steps-nav", refresh=True),
             html.P("Click a step's bar to open the Timeline zoomed to it.", className="ks-hint")]
    body.append(graph("steps-breakdown", rs.breakdown_figure(df)))
    body.append(graph("steps-time", rs.step_time_figure(df, r.scalars)))
    cols = [("step", "step", "numeric"), ("dur_ns", "step (ms)", "ms")]
    cols += [(f"{k}_ns", f"{label} (ms)", "ms") for k, label, _ in rs.CATEGORIES]
    cols += [("gpu_tail_ns", "GPU tail (ms)", "ms"), ("host_dur_ns", "host range (ms)", "ms"),
             ("activities", "GPU activities", "numeric"), ("marked", "marked", "text"), ("note", "why", "text")]
    shown_df = df.assign(marked=rs.table_rows(df)["marked"])
    body += [html.H3("Per step (a step ends when the GPU work it launched ends; the categories add up to it)"),
             grid(shown_df, cols, "steps-table", tooltips=("note",))]
    b = r.tables["breakdown"]
    labels = {k: label for k, label, _ in rs.CATEGORIES}
    body += [html.H3("Mean over the steady steps"),
             grid(b.assign(pct=[None if v is None or v != v else round(100 * float(v), 1) for v in b["share"]],
                           category=[labels.get(c, c) for c in b["category"]]),
                  [("category", "category", "text"), ("mean_ns", "mean (ms)", "ms"), ("pct", "% of step", "numeric")],
                  "steps-breakdown-table")]
    body += warning_lines(r.warnings, shown)
    return html.Div(body, id="steps-page")


def register(app, db_path) -> None:
    @app.callback(Output("steps-nav", "href"), Input("steps-breakdown", "clickData"), State("steps-windows", "data"),
                  prevent_initial_call=True)
    def _open_step(click, windows):
        try:
            return windows[click["points"][0]["x"]]
        except (TypeError, KeyError, IndexError):
            raise dash.exceptions.PreventUpdate from None
