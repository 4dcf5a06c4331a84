"""A sweep over several traces (``/sweep?sweep=NAME&by=LABEL[&point=VALUE]``): latency, un-profiled time,
TKLQT, queue depth, busy and idle against the swept label, each point shaded by its regime, the
transition bracket marked (the ``transition`` analysis through ``reports/sweep.py``). Clicking a point
selects it (``point`` in the URL) and links to that trace's pages. With no parameters the page lists the
sweeps and numeric labels the store holds."""

from __future__ import annotations

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html

from ...analysis.result import json_safe, table_records
from ...errors import UsageError
from ...reports import sweep as rs
from ...reports.launch import q_text
from ...units import ms_text
from .. import urls
from ..widgets import graph, grid, message, warning_lines

TITLE = "Sweep"


def _href(**q) -> str:
    return urls.store_href("sweep", **q)


def _choices(store) -> html.Div:
    sweeps, labels = rs.sweep_choices(store)
    body: list = [html.H2("Sweeps")]
    if sweeps.empty and labels.empty:
        body.append(message("This store has no sweep: no trace is labelled sweep=NAME and no numeric label "
                            "tells two or more traces apart. Label a series of runs with `kernelscope label "
                            "TRACE sweep=NAME batch=N`.", "msg-no-sweeps"))
        return html.Div(body, id="sweep-page")
    body.append(html.P("Pick a sweep (traces labelled sweep=NAME) and the numeric label it varies, or a numeric "
                       "label over every trace carrying it.", className="ks-hint"))
    items = []
    for r in sweeps.itertuples(index=False):
        if r.by:
            links = [html.A(f"by {k}", href=_href(sweep=r.sweep, by=k), id=f"sweep-link-{r.sweep}-{k}",
                            style={"marginRight": "10px"}) for k in r.by]
        else:
            links = [html.Span("no numeric label tells its traces apart", className="ks-hint")]
        items.append(html.Li([html.B(r.sweep), f" ({r.traces} trace{'s' if r.traces != 1 else ''}): "] + links))
    if items:
        body += [html.H3("Sweeps"), html.Ul(items, id="sweep-list")]
    if not labels.empty:
        body += [html.H3("Numeric labels"),
                 html.Ul([html.Li([html.A(f"{r.key}", href=_href(by=r.key), id=f"by-link-{r.key}"),
                                   f" ({r.traces} traces)"]) for r in labels.itertuples(index=False)],
                         id="label-list")]
    return html.Div(body, id="sweep-page")


def selected_panel(point: dict | None, by: str) -> list:
    """What the page says about the selected point: its numbers and links to its trace's pages."""
    if not point:
        return [html.P("Click a point to select it.", className="ks-hint")]
    tid = point["trace_id"]
    infl = point.get("inflation")
    return [html.H3(f"Selected: {by} = {point['label']} ({point.get('name') or tid})", id="sweep-selected-title"),
            html.P(f"regime {point.get('regime')}; traced latency / iteration "
                   f"{ms_text(point.get('latency_per_iter_ns'))}, "
                   f"un-profiled {ms_text(point.get('unprofiled_ns'))}"
                   + ("" if infl is None else f" (inflation {infl:.2f}×)")
                   + f"; mean queue depth q = {q_text(point.get('mean_queue_depth'))} (TKLQT, the sum of "
                   f"launch-and-queue time over the kernels, {ms_text(point.get('tklqt_ns'))})"
                   + f"; busy {ms_text(point.get('busy_ns'))}, idle {ms_text(point.get('idle_ns'))}."),
            html.Div([dcc.Link(text, href=urls.trace_href(tid, page), id=f"sweep-open-{page}",
                               style={"marginRight": "14px"})
                      for page, text in [("overview", "overview"), ("launch", "launch overhead"),
                                         ("bound", "bound-ness")]])]


def layout(store, params: dict | None = None) -> html.Div:
    params = params or {}
    sweep, by = params.get("sweep"), params.get("by")
    if not sweep and not by:
        return _choices(store)
    if not by:
        sweeps, _ = rs.sweep_choices(store)
        row = sweeps[sweeps["sweep"] == sweep]
        by = row["by"].iloc[0][0] if len(row) and row["by"].iloc[0] else "batch"
    title = f"Sweep {sweep} over {by}" if sweep else f"Traces by {by}"
    try:
        r = rs.sweep_result(store, by=by, sweep=sweep)
    except UsageError as e:
        return html.Div([html.H2(title), message(f"No sweep to show: {e}", "msg-no-sweep", "error"),
                         html.A("← all sweeps", href="/sweep")], id="sweep-page")
    points = r.tables["points"]
    selected = params.get("point")
    recs = table_records(points)
    hit = next((p for p in recs if str(p["label"]) == str(selected)), None) if selected is not None else None
    body: list = [html.H2(title), html.A("← all sweeps", href="/sweep")]
    if len(points) < 2:
        body.append(message(f"This sweep has {len(points)} point: there is nothing to compare and no transition "
                            "to bracket.", "msg-one-point"))
    body += [html.P(t) for t in rs.bracket_sentences(r.scalars)]
    body += [dcc.Store(id="sweep-data", data={"points": recs, "scalars": json_safe(r.scalars)}),
             graph("sweep-figure", rs.sweep_figure(points, r.scalars, selected=hit and hit["label"])),
             html.Div(selected_panel(hit, by), id="sweep-selected"),
             html.H3("Points")]
    df = rs.points_table(points, by)
    body.append(grid(df, [(c, c, "text" if c in ("trace", "regime") else "numeric") for c in df.columns],
                     "sweep-points-table"))
    body += warning_lines(r.warnings)
    return html.Div(body, id="sweep-page")


def select_point(click_data, data, search) -> tuple:
    """The click callback as a plain function: (figure with the point ringed, selected panel, URL search
    with ``point``). A click carries the point's trace id as customdata."""
    if not click_data or not data or not click_data.get("points"):
        return dash.no_update, dash.no_update, dash.no_update
    tid = click_data["points"][0].get("customdata")
    if isinstance(tid, list):
        tid = tid[0]
    point = next((p for p in data["points"] if p["trace_id"] == tid), None)
    if point is None:
        return dash.no_update, dash.no_update, dash.no_update
    q = dict(urls.query(search))
    q["point"] = str(point["label"])
    scalars = data["scalars"]
    fig = rs.sweep_figure(pd.DataFrame(data["points"]), scalars, selected=point["label"])
    return fig, selected_panel(point, scalars.get("by") or "label"), urls.search_of(q)


def register(app, db_path) -> None:
    @app.callback(Output("sweep-figure", "figure"), Output("sweep-selected", "children"),
                  Output("url", "search", allow_duplicate=True),
                  Input("sweep-figure", "clickData"), State("sweep-data", "data"), State("url", "search"),
                  prevent_initial_call=True)
    def _select(click_data, data, search):
        return select_point(click_data, data, search)
