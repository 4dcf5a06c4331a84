"""Timeline of one trace: CPU operators by thread and depth, CUDA API calls, GPU activity per stream,
phases and telemetry on one time axis (ms since the trace's first event).

URL state: ``t0``/``t1`` (window, ms since the trace start; absent = the whole trace) and ``op`` (the
selection: an operator instance id, or an operator name). Zooming the figure re-queries that window and
writes t0/t1 back; clicking a CPU operator selects it. A window with at most
``timeline_data.EVENT_LIMIT`` events is drawn event by event, a larger one binned (busy % per lane).
"Export to Perfetto" downloads a Chrome-trace JSON of the window (route ``/export/<trace>/perfetto.json``).
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from ...analysis.summary import no_gpu_reason
from ...errors import KernelscopeError
from ...reports import timeline as tfig
from ...reports import timeline_data as td
from ...storage.catalog import rank_of
from ...storage.store import open_store
from ...units import NS_PER_MS, NS_PER_US
from .. import params as P
from .. import urls
from ..urls import export_href, parse_window, window_search
from ..widgets import graph, message, zoom_filter, zoom_relayout

TITLE = "Timeline"
GRAPH_ID = "timeline-graph"


def render(store, trace_id: str, params: dict) -> dict:
    """Everything the page shows for the URL state ``params``: ``figure`` (or None), ``notes`` (sentences
    with their element ids), ``status`` (one line), ``mode`` ('events' | 'binned' | 'empty'), ``events``
    (in the window), ``export`` (href) and the window ``a``/``b`` (epoch ns)."""
    info = td.trace_info(store, trace_id)
    lanes = td.lanes(store, trace_id, info)
    out = {"figure": None, "notes": [], "status": "", "mode": "empty", "events": 0, "export": "",
           "a": info["start_ns"], "b": info["end_ns"]}
    if lanes.empty or info["start_ns"] is None:
        out["notes"].append(("msg-no-events", "This trace has no timed events to draw."))
        return out
    a, b, note = parse_window(params, info)
    out.update(a=a, b=b, export=export_href(trace_id, info, a, b))
    if note:
        out["notes"].append(("msg-bad-window", note))
    if not info["gpu_events"]:
        out["notes"].append(("msg-no-gpu-lanes", f"This trace has no GPU activity ({no_gpu_reason(store, trace_id)}): "
                             "the timeline shows CPU lanes only, with no GPU streams."))
    tel = None
    if not info["telemetry_samples"]:
        out["notes"].append(("msg-no-telemetry", "This trace has no telemetry (no NVML samples were "
                             "recorded), so power, SM clock and utilisation are not drawn."))
    else:
        tel = td.telemetry(store, trace_id, a, b, info["clock_offset_ns"])
        if info["clock_offset_ns"] is None:
            out["notes"].append(("msg-clock-offset", "The trace has no measured clock offset: telemetry is "
                                 "placed on the host clock as recorded."))
    op = (params.get("op") or "").strip()
    whole = a <= info["start_ns"] and b >= info["end_ns"]
    n = int(lanes["events"].sum()) if whole else td.count_events(store, trace_id, a, b)
    out["events"] = n
    t0, t1 = (a - info["start_ns"]) / NS_PER_MS, (b - info["start_ns"]) / NS_PER_MS
    label = ""
    if n == 0:
        out["notes"].append(("msg-empty-window", f"No events between {t0:,.3f} and {t1:,.3f} ms: zoom out "
                             "(double-click the figure) to see the whole trace."))
        out["mode"] = "empty"
        out["figure"] = tfig.events_figure(lanes, td.events(store, trace_id, a, a), a, b, info["start_ns"], tel)
    elif n <= td.EVENT_LIMIT:
        sel = None
        if op:
            sel, label = td.selection(store, trace_id, op, a, b)
        out["mode"] = "events"
        out["figure"] = tfig.events_figure(lanes, td.events(store, trace_id, a, b), a, b, info["start_ns"],
                                           tel, sel, with_names=n <= td.NAME_LIMIT)
        out["status"] = f"{n:,} events between {t0:,.3f} and {t1:,.3f} ms, drawn one by one" + (
            "." if n <= td.NAME_LIMIT else f"; names show on hover below {td.NAME_LIMIT:,} events: zoom in.")
    else:
        bins, start, width = td.binned(store, trace_id, a, b, info=info)
        sb = None
        if op:
            _, label = td.selection(store, trace_id, op, a, a)
            if label:
                sb, _, _ = td.selection_bins(store, trace_id, op, a, b, info=info)  # same bins as `bins`
        out["mode"] = "binned"
        out["figure"] = tfig.binned_figure(lanes, bins, start, width, a, b, info["start_ns"], tel, sb)
        out["status"] = (f"{n:,} events between {t0:,.3f} and {t1:,.3f} ms: more than "
                         f"{td.EVENT_LIMIT:,}, so each lane shows its busy % in bins of "
                         f"{_duration(width)}. Zoom in (drag on the figure) to see individual events.")
    if op and not label:
        out["notes"].append(("msg-no-selection", f"No operator {op!r} in this trace to select."))
    elif op:
        out["status"] += f" Selected: {label}" + (" (its GPU activities in red, with launch → activity lines)."
                                                  if out["mode"] == "events" else " (its GPU busy % in the "
                                                  "red 'selected' row).")
    return out


def _duration(ns: int) -> str:
    if ns >= NS_PER_MS:
        return f"{ns / NS_PER_MS:,.3f} ms"
    return f"{ns / NS_PER_US:,.1f} µs"


def _notes(view: dict) -> list:
    return [message(text, msg_id) for msg_id, text in view["notes"]]


def _status(view: dict) -> html.P:
    return html.P(view["status"], id="timeline-status", className="ks-hint",
                  **{"data-mode": view["mode"], "data-events": str(view["events"])})


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    params = params or {}
    view = render(store, trace_id, params)
    info = td.trace_info(store, trace_id)
    figure = graph(GRAPH_ID, view["figure"] or {}, config={"scrollZoom": False},
                   style={} if view["figure"] is not None else {"display": "none"})
    here = urls.trace_href(trace_id, "timeline")
    clear = html.A("clear selection", id="timeline-clear", className="ks-spaced",
                   href=here + window_search(params, info, view["a"], view["b"], None))
    return html.Div([
        dcc.Store(id="timeline-trace", data=trace_id),
        dcc.Store(id="timeline-zoom"),
        html.H2(f"Timeline · {info['name'] or trace_id}"),
        html.P("Drag on the figure to zoom in (the window goes into the URL), double-click to see the whole "
               "trace, click a CPU operator to select it. Lanes: phases, CPU operators per thread and "
               "nesting depth (d0 = top level), CUDA API calls per thread, GPU streams; then telemetry.",
               className="ks-hint"),
        html.Div([html.A("Export to Perfetto (Chrome-trace JSON of this window)", id="timeline-export",
                         href=view["export"], download=f"{trace_id}-perfetto.json", target="_blank"),
                  clear, *_run_link(store, trace_id)], className="ks-toolbar"),
        html.Div(_notes(view), id="timeline-notes"),
        _status(view),
        figure,
    ])


def _run_link(store, trace_id: str) -> list:
    """A link to the aligned timeline of the run this trace is a rank of (none outside a run)."""
    of = rank_of(store, trace_id)
    if of is None:
        return []
    return [html.A(f"rank {of[1]}: every rank of its run aligned", id="timeline-run-link", className="ks-spaced",
                   href=urls.store_href("ranks", run=of[0], view="timeline"))]


def update(db_path, trace_id: str, search: str | None, relayout: dict | None = None,
           click: dict | None = None):
    """The zoom/click callback as a plain function. Returns (figure, notes, status text, mode, event count,
    export href, clear-selection href, search) or None when the event changes nothing (a resize, a y-axis
    drag, a click off a CPU operator)."""
    params = urls.query(search)
    new = dict(params)
    if click is not None:
        pts = (click or {}).get("points") or []
        cd = pts[0].get("customdata") if pts else None
        if cd is None or isinstance(cd, list) or cd != cd:  # only CPU operator points carry an op_id
            return None
        new["op"] = str(int(cd))
    elif relayout is not None:
        new = urls.window_params(params, relayout)
        if new is None:
            return None
    else:
        return None
    with open_store(db_path, read_only=True) as store:
        info = td.trace_info(store, trace_id)
        view = render(store, trace_id, new)
    whole = "t0" not in new and "t1" not in new
    search_out = window_search(params, info, None if whole else view["a"], None if whole else view["b"],
                               new.get("op"))
    clear_href = urls.trace_href(trace_id, "timeline") + window_search(
        params, info, None if whole else view["a"], None if whole else view["b"], None)
    return view["figure"] or {}, _notes(view), view["status"], view["mode"], str(view["events"]), \
        view["export"], clear_href, search_out


def register(app, db_path) -> None:
    zoom_filter(app, GRAPH_ID, "timeline-zoom")

    @app.callback(Output(GRAPH_ID, "figure"), Output("timeline-notes", "children"),
                  Output("timeline-status", "children"), Output("timeline-status", "data-mode"),
                  Output("timeline-status", "data-events"), Output("timeline-export", "href"),
                  Output("timeline-clear", "href"), Output("url", "search", allow_duplicate=True),
                  Input("timeline-zoom", "data"), Input(GRAPH_ID, "clickData"),
                  State("timeline-trace", "data"), State("url", "search"), prevent_initial_call=True)
    def _timeline_update(zoom, click, trace_id, search):
        trig = [t["prop_id"] for t in dash.callback_context.triggered]
        try:
            out = update(db_path, trace_id, search,
                         relayout=zoom_relayout(zoom) if any(t.startswith("timeline-zoom") for t in trig) else None,
                         click=click if any(t.endswith("clickData") for t in trig) else None)
        except KernelscopeError as exc:
            return (dash.no_update, [message(f"Cannot read the store: {exc}.", "msg-store-error", "error")],
                    *[dash.no_update] * 6)
        if out is None:
            raise dash.exceptions.PreventUpdate
        return out

    @app.server.route(urls.EXPORT_ROUTE)
    def _perfetto(trace_id):
        from flask import Response, request

        from ...storage.queries import resolve_trace

        if P.check_ref(trace_id):
            return Response(f"Cannot export: {P.check_ref(trace_id)}\n", status=400, mimetype="text/plain")
        try:
            with open_store(db_path, read_only=True) as store:
                tid = resolve_trace(store, trace_id)
                info = td.trace_info(store, tid)
                params = P.url_params(request.query_string.decode("latin-1"))
                if params.problems:
                    return Response(f"Cannot export: {'; '.join(params.problems)}.\n", status=400,
                                    mimetype="text/plain")
                a, b, _ = parse_window(params, info)
                body = td.chrome_trace_text(store, tid, a, b)
        except KernelscopeError as exc:
            return Response(f"Cannot export: {exc}.\n", status=404, mimetype="text/plain")
        return Response(body, mimetype="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{tid}-perfetto.json"'})
