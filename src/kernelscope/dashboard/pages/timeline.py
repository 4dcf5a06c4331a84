"""Timeline of one trace: CPU operators by thread and depth, CUDA API calls, GPU activity per stream,
phases and telemetry on one time axis (ms since the trace's first event).

URL state: ``t0``/``t1`` (window, ms since the trace start; absent = the whole trace) and ``op`` (the
selection: an operator instance id, or an operator name). Zooming the figure re-queries that window and
writes t0/t1 back; clicking a CPU operator selects it. A window with at most
``timeline_data.EVENT_LIMIT`` events is drawn event by event, a larger one binned (busy % per lane).
"Export to Perfetto" downloads a Chrome-trace JSON of the window (route ``/export/<trace>/perfetto.json``).
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import dash
from dash import Input, Output, State, dcc, html

from ...errors import KernelscopeError
from ...reports import timeline as tfig
from ...reports import timeline_data as td
from ...storage.catalog import rank_of
from ...storage.store import open_store
from ...units import NS_PER_MS
from .. import params as P
from .common import message
from ...analysis.summary import no_gpu_reason

TITLE = "Timeline"
GRAPH_ID = "timeline-graph"
_RANGE = re.compile(r"^xaxis\d*\.range\[([01])\]$")


def window_params(params: dict, relayout: dict) -> dict | None:
    """``params`` with the x window a Plotly relayout sets (``t0``/``t1``, ms) or resets (autorange: both
    removed); None when the relayout changes no x range (a y zoom, a legend click)."""
    rng = {}
    for k, v in relayout.items():
        m = _RANGE.match(k)
        if m:
            rng[int(m.group(1))] = v
        elif re.match(r"^xaxis\d*\.range$", k) and isinstance(v, list) and len(v) == 2:
            rng = {0: v[0], 1: v[1]}
    new = dict(params)
    if any(re.match(r"^xaxis\d*\.autorange$", k) for k in relayout):
        new.pop("t0", None)
        new.pop("t1", None)
    elif len(rng) == 2:
        new["t0"], new["t1"] = f"{float(rng[0]):.6f}", f"{float(rng[1]):.6f}"
    else:
        return None
    return new


def parse_window(params: dict, info: dict) -> tuple[int, int, str]:
    """The window ``[a, b)`` in epoch ns from ``t0``/``t1`` (ms since the trace start), clamped to the
    trace; the whole trace when absent. Returns (a, b, note); note says what was wrong with the URL."""
    origin, end = info["start_ns"], info["end_ns"]
    t0, t1 = P.ms(params, "t0"), P.ms(params, "t1")  # None: absent or refused (params.url_params says why)
    if (t0 is None and params.get("t0") not in (None, "")) or (t1 is None and params.get("t1") not in (None, "")):
        return origin, end, "The window in the URL (t0/t1) is not a finite number of ms; showing the whole trace."
    a = origin if t0 is None else origin + round(t0 * NS_PER_MS)
    b = end if t1 is None else origin + round(t1 * NS_PER_MS)
    if b <= a:
        return origin, end, "The window in the URL ends before it starts; showing the whole trace."
    a, b = max(a, origin), min(b, end)
    return a, max(b, a + 1), ""


def window_search(params: dict, info: dict, a: int | None, b: int | None, op: str | None) -> str:
    """The query string for a window (None: the whole trace) and selection, other params kept."""
    p = {k: v for k, v in params.items() if k not in ("t0", "t1", "op")}
    if a is not None and b is not None:
        p["t0"] = f"{(a - info['start_ns']) / NS_PER_MS:.6f}"
        p["t1"] = f"{(b - info['start_ns']) / NS_PER_MS:.6f}"
    if op:
        p["op"] = op
    return "?" + urlencode(p) if p else ""


def export_href(trace_id: str, info: dict, a: int, b: int) -> str:
    return (f"/export/{trace_id}/perfetto.json?t0={(a - info['start_ns']) / NS_PER_MS:.6f}"
            f"&t1={(b - info['start_ns']) / NS_PER_MS:.6f}")


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
        out["notes"].append(("msg-no-gpu-lanes", f"This trace has no GPU activity ({no_gpu_reason(store, trace_id)}): the "
                             "timeline shows CPU lanes only, with no GPU streams."))
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
    return f"{ns / 1000:,.1f} µs"


def _notes(view: dict) -> list:
    return [message(text, msg_id) for msg_id, text in view["notes"]]


def _status(view: dict) -> html.P:
    return html.P(view["status"], id="timeline-status", className="ks-hint",
                  **{"data-mode": view["mode"], "data-events": str(view["events"])})


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    params = params or {}
    view = render(store, trace_id, params)
    info = td.trace_info(store, trace_id)
    graph = dcc.Graph(id=GRAPH_ID, figure=view["figure"] or {}, config={"displaylogo": False,
                                                                        "scrollZoom": False},
                      style={} if view["figure"] is not None else {"display": "none"})
    clear = html.A("clear selection", id="timeline-clear", style={"marginLeft": "16px"},
                   href=f"/trace/{trace_id}/timeline" + window_search(params, info, view["a"], view["b"], None))
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
                  clear, *_run_link(store, trace_id)], style={"margin": "6px 0"}),
        html.Div(_notes(view), id="timeline-notes"),
        _status(view),
        graph,
    ])


def _run_link(store, trace_id: str) -> list:
    """A link to the aligned timeline of the run this trace is a rank of (none outside a run)."""
    of = rank_of(store, trace_id)
    if of is None:
        return []
    href = "/ranks?" + urlencode({"run": of[0], "view": "timeline"})
    return [html.A(f"rank {of[1]}: every rank of its run aligned", href=href,
                   id="timeline-run-link", style={"marginLeft": "16px"})]


def update(db_path, trace_id: str, search: str | None, relayout: dict | None = None,
           click: dict | None = None):
    """The zoom/click callback as a plain function. Returns (figure, notes, status text, mode, event count,
    export href, clear-selection href, search) or None when the event changes nothing (a resize, a y-axis
    drag, a click off a CPU operator)."""
    from ..params import url_params

    params = url_params(search)
    new = dict(params)
    if click is not None:
        pts = (click or {}).get("points") or []
        cd = pts[0].get("customdata") if pts else None
        if cd is None or isinstance(cd, list) or cd != cd:  # only CPU operator points carry an op_id
            return None
        new["op"] = str(int(cd))
    elif relayout is not None:
        new = window_params(params, relayout)
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
    clear_href = f"/trace/{trace_id}/timeline" + window_search(
        params, info, None if whole else view["a"], None if whole else view["b"], None)
    return view["figure"] or {}, _notes(view), view["status"], view["mode"], str(view["events"]), \
        view["export"], clear_href, search_out


# Runs in the browser on every relayout: keeps x-range changes (and the double-click reset), drops the rest
# (resize/autosize, y drags). A server callback on relayoutData itself would be superseded by the
# {"autosize": true} relayout Plotly emits right after a zoom, and the zoom's answer would be dropped.
_ZOOM_JS = """
function (r) {
    var nu = window.dash_clientside.no_update, lo = null, hi = null;
    if (!r) { return nu; }
    for (var k in r) {
        if (/^xaxis[0-9]*\\.autorange$/.test(k)) { return {"autorange": true, "at": Date.now()}; }
        var m = k.match(/^xaxis[0-9]*\\.range\\[([01])\\]$/);
        if (m) { if (m[1] === "0") { lo = r[k]; } else { hi = r[k]; } }
        if (/^xaxis[0-9]*\\.range$/.test(k) && Array.isArray(r[k])) { lo = r[k][0]; hi = r[k][1]; }
    }
    return (lo !== null && hi !== null) ? {"range": [lo, hi], "at": Date.now()} : nu;
}
"""


def zoom_relayout(zoom: dict | None) -> dict | None:
    """The browser-side zoom filter's output as the relayoutData it came from."""
    if not zoom:
        return None
    if zoom.get("autorange"):
        return {"xaxis.autorange": True}
    lo, hi = zoom["range"]
    return {"xaxis.range[0]": lo, "xaxis.range[1]": hi}


def register(app, db_path) -> None:
    app.clientside_callback(_ZOOM_JS, Output("timeline-zoom", "data"), Input(GRAPH_ID, "relayoutData"),
                            prevent_initial_call=True)

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

    @app.server.route("/export/<trace_id>/perfetto.json")
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
