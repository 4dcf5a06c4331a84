"""Timeline of one trace: CPU operators by thread and depth, CUDA API calls, GPU activity per stream,
phases and telemetry on one time axis (ms since the trace's first event).

URL state: ``t0``/``t1`` (window, ms since the trace start; absent = the whole trace), the selection --
``op`` (an operator instance id, or an operator name) or ``sel`` (one event: 'gpu:<id>', 'api:<id>',
'ann:<id>') -- and ``find`` (the searched name). Zooming the figure re-queries that window and writes t0/t1
back; clicking any bar selects its event: the details panel shows it, its launch -> kernel flow lines are
drawn (for the selection only) and a halo marks it. The search box jumps to the next event whose name
contains the text (after the selection, else from the window's start; wrapping at the end), selects it and
marks every match in the window. A window with at most ``timeline_data.EVENT_LIMIT`` events is drawn event
by event (full hover below ``NAME_LIMIT`` events, names written in bars wide enough), a larger one binned
(busy % per lane, with a colour bar). "Export to Perfetto" downloads a Chrome-trace JSON of the window
(route ``/export/<trace>/perfetto.json``).
"""

from __future__ import annotations

import dash
from dash import ClientsideFunction, Input, Output, State, dcc, html

from ...analysis.summary import no_gpu_reason
from ...errors import KernelscopeError
from ...reports import timeline as tfig
from ...reports import timeline_data as td
from ...reports import timeline_text as tt
from ...storage.catalog import rank_of
from ...storage.store import open_store
from ...units import NS_PER_MS, NS_PER_US
from .. import params as P
from .. import urls
from ..urls import export_href, parse_window, window_search
from ..widgets import graph, message, zoom_relayout

TITLE = "Timeline"
GRAPH_ID = "timeline-graph"
#: A search jumps to a window centred on the match: the current width, at most ``JUMP_NS`` (or 20 times
#: the match) so the window is drawn event by event, at least 3 times the match.
JUMP_NS = NS_PER_MS


def _selection(store, trace_id: str, params: dict, info: dict):
    """The URL's selection: (kind, key, detail) with kind 'op' (key: the op text) or 'sel' (key: (src, id)),
    detail the selected event (``event_detail``; None for an operator name); None when nothing is selected."""
    op = (params.get("op") or "").strip()
    if op:
        d = _detail(store, trace_id, info, "cpu", int(op)) if op.isdigit() else None
        return "op", op, d
    sel = params.get("sel")
    if sel:
        src, _, i = sel.partition(":")
        if src == "cpu":  # an operator instance, as op= names it
            return "op", i, _detail(store, trace_id, info, "cpu", int(i))
        return "sel", (src, int(i)), _detail(store, trace_id, info, src, int(i))
    return None


def _detail(store, trace_id: str, info: dict, src: str, event_id: int):
    key = ("timeline-detail", str(getattr(store, "path", "")), trace_id, info["ingested_ns"], src, event_id)
    return td.cached(key, lambda: td.event_detail(store, trace_id, src, event_id))


def _launched(store, trace_id: str, info: dict, kind: str, key):
    """The GPU activities of a selected CPU operator instance or CUDA API call over the whole trace (cached)."""
    ck = ("timeline-launched", str(getattr(store, "path", "")), trace_id, info["ingested_ns"], kind, str(key))

    def build():
        if kind == "op":
            return td.selection(store, trace_id, key, info["start_ns"], info["end_ns"] + 1, limit=1 << 62)[0]
        return td.event_selection(store, trace_id, key[0], key[1], info["start_ns"], info["end_ns"] + 1,
                                  limit=1 << 62)
    return td.cached(ck, build)


def render(store, trace_id: str, params: dict, plot_px: float | None = None, found: dict | None = None) -> dict:
    """Everything the page shows for the URL state ``params``: ``figure`` (or None), ``notes`` (sentences
    with their element ids), ``status`` (one line), ``mode`` ('events' | 'binned' | 'empty'), ``events``
    (in the window), ``export`` (href), the window ``a``/``b`` (epoch ns) and ``details`` (the selected
    event's (field, label, value) rows; empty without one). ``plot_px``: the plot's width in the browser
    (labels are fitted to it); ``found``: the search step that led here (a note says which match it is)."""
    info = td.trace_info(store, trace_id)
    lanes = td.lanes(store, trace_id, info)
    out = {"figure": None, "notes": [], "status": "", "mode": "empty", "events": 0, "export": "",
           "a": info["start_ns"], "b": info["end_ns"], "details": [], "details_title": ""}
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
                             "recorded), so power, clocks, utilisation and temperature are not drawn."))
    else:
        tel = td.telemetry(store, trace_id, a, b, info["clock_offset_ns"])
        if info["clock_offset_ns"] is None:
            out["notes"].append(("msg-clock-offset", "The trace has no measured clock offset: telemetry is "
                                 "placed on the host clock as recorded."))
    if found is not None:
        out["notes"].append(("msg-find", f"Match {found['rank']:,} of {found['total']:,} for "
                             f"{P.shown(params.get('find', ''))}: {P.shown(found['name'], 90)}"
                             + (" (wrapped around to the first)." if found.get("wrapped") else ".")))
    picked = _selection(store, trace_id, params, info)
    op = picked[1] if picked and picked[0] == "op" else ""
    whole = a <= info["start_ns"] and b >= info["end_ns"]
    n = int(lanes["events"].sum()) if whole else td.count_events(store, trace_id, a, b)
    out["events"] = n
    t0, t1 = (a - info["start_ns"]) / NS_PER_MS, (b - info["start_ns"]) / NS_PER_MS
    label = _label(picked)
    highlight = picked[2] if picked and picked[2] is not None else None
    px = float(plot_px) if plot_px else tt.DEFAULT_PX
    find = (params.get("find") or "").strip()
    if n == 0:
        out["notes"].append(("msg-empty-window", f"No events between {t0:,.3f} and {t1:,.3f} ms: zoom out "
                             "(double-click the figure) to see the whole trace."))
        out["mode"] = "empty"
        out["figure"] = tfig.events_figure(lanes, td.events(store, trace_id, a, a), a, b, info["start_ns"], tel)
    elif n <= td.EVENT_LIMIT:
        sel = None
        if op:
            sel, label = td.selection(store, trace_id, op, a, b)
        elif picked:
            sel = td.event_selection(store, trace_id, picked[1][0], picked[1][1], a, b)
        with_names = n <= td.NAME_LIMIT
        out["mode"] = "events"
        out["figure"] = tfig.events_figure(
            lanes, td.events(store, trace_id, a, b), a, b, info["start_ns"], tel, sel, with_names=with_names,
            details=td.event_details(store, trace_id, a, b) if with_names else None, highlight=highlight,
            matches=td.window_matches(store, trace_id, find, a, b) if find else None, plot_px=px)
        out["status"] = f"{n:,} events between {t0:,.3f} and {t1:,.3f} ms, drawn one by one" + (
            "." if with_names else f"; the full hover shows below {td.NAME_LIMIT:,} events: zoom in.")
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
                         f"{_duration(width)} (colour bar on the right). Zoom in (drag on the figure) to see "
                         "individual events.")
    if picked and not label:
        what = "operator" if picked[0] == "op" else "event"
        out["notes"].append(("msg-no-selection", f"No {what} {P.shown(params.get('op') or params.get('sel'))} "
                             "in this trace to select."))
    elif picked:
        flows = out["mode"] == "events" and (picked[0] == "op" or picked[1][0] in ("gpu", "api"))
        out["status"] += f" Selected: {label}" + (
            " (its GPU activities in red, with launch → activity lines)." if flows else
            " (its GPU busy % in the red 'selected' row)." if out["mode"] == "binned" and picked[0] == "op" else ".")
        if highlight is not None:
            kind, key = picked[0], picked[1]
            launched = _launched(store, trace_id, info, kind, key) if kind == "op" or key[0] == "api" else None
            row = lanes[(lanes["src"] == highlight["src"]) & (lanes["k1"] == highlight["k1"])
                        & (lanes["k2"] == highlight["k2"]) & (lanes["k3"] == highlight["k3"])]
            lane_label = str(row["label"].iloc[0]) if not row.empty else ""
            out["details"] = tt.detail_rows(highlight, info["start_ns"], lane_label, launched)
            out["details_title"] = label
    return out


def _label(picked) -> str:
    """The selection in words ('' when the selected event does not exist)."""
    if not picked:
        return ""
    kind, key, d = picked
    if kind == "op":
        if d is None:
            return ""  # a name: selection() says whether it exists and names it
        return f"{d['name']} (instance {key})"
    if d is None:
        return ""
    what = {"gpu": d.get("kind", "activity"), "api": "CUDA API call", "ann": "phase"}.get(key[0], "event")
    name = tt.short_name(d["name"]) if key[0] == "gpu" else str(d["name"])
    return f"{name[:100]} ({what} {key[1]})"


def _duration(ns: int) -> str:
    if ns >= NS_PER_MS:
        return f"{ns / NS_PER_MS:,.3f} ms"
    return f"{ns / NS_PER_US:,.1f} µs"


def _notes(view: dict) -> list:
    return [message(text, msg_id) for msg_id, text in view["notes"]]


def _status(view: dict) -> html.P:
    return html.P(view["status"], id="timeline-status", className="ks-hint",
                  **{"data-mode": view["mode"], "data-events": str(view["events"])})


def _details(view: dict) -> list:
    """The details panel's children: the selected event's fields (each value's id ``detail-<field>``)."""
    if not view["details"]:
        return [html.P("Click a bar to see its details here.", className="ks-hint", id="timeline-details-empty")]
    return [html.H4(view["details_title"], id="timeline-details-title"),
            html.Table(html.Tbody([html.Tr([html.Th(label), html.Td(value, id=f"detail-{field}")])
                                   for field, label, value in view["details"]]), className="ks-details")]


def _clear_href(trace_id: str, params: dict, info: dict, a, b) -> str:
    rest = {k: v for k, v in params.items() if k != "sel"}
    return urls.trace_href(trace_id, "timeline") + window_search(rest, info, a, b, None)


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    params = params or {}
    view = render(store, trace_id, params)
    info = td.trace_info(store, trace_id)
    figure = graph(GRAPH_ID, view["figure"] or {}, config={"scrollZoom": False},
                   style={} if view["figure"] is not None else {"display": "none"})
    whole = "t0" not in params and "t1" not in params
    clear = html.A("clear selection", id="timeline-clear", className="ks-spaced",
                   href=_clear_href(trace_id, params, info, None if whole else view["a"],
                                    None if whole else view["b"]))
    return html.Div([
        dcc.Store(id="timeline-trace", data=trace_id),
        dcc.Store(id="timeline-zoom"),
        html.H2(f"Timeline · {info['name'] or trace_id}"),
        html.P("Drag on the figure to zoom in (the window goes into the URL), double-click to see the whole "
               "trace, click any bar to select it (details below the figure, launch → kernel lines for it). "
               "Lanes: phases, CPU operators per thread and nesting depth (d0 = top level), CUDA API calls "
               "per thread, GPU streams (NCCL kernels in purple); then telemetry. 'phases: gpu' is the "
               "profiler's GPU-side copy of a range: it spans only the kernels launched on the range's own "
               "thread, so backward (launched by the autograd thread) has none there; its kernels are on the "
               "GPU stream lanes.",
               className="ks-hint"),
        html.Div([dcc.Input(id="timeline-find", type="text", value=params.get("find", ""), debounce=True,
                            placeholder="find by name (Enter: next match)", className="ks-find"),
                  html.Button("next", id="timeline-find-next", n_clicks=0, className="ks-spaced-small"),
                  html.A("Export to Perfetto (Chrome-trace JSON of this window)", id="timeline-export",
                         className="ks-spaced", href=view["export"], download=f"{trace_id}-perfetto.json",
                         target="_blank"),
                  clear, *_run_link(store, trace_id)], className="ks-toolbar ks-row"),
        html.Div(_notes(view), id="timeline-notes"),
        _status(view),
        figure,
        html.Div(_details(view), id="timeline-details", className="ks-details-panel"),
    ])


def _run_link(store, trace_id: str) -> list:
    """A link to the aligned timeline of the run this trace is a rank of (none outside a run)."""
    of = rank_of(store, trace_id)
    if of is None:
        return []
    return [html.A(f"rank {of[1]}: every rank of its run aligned", id="timeline-run-link", className="ks-spaced",
                   href=urls.store_href("ranks", run=of[0], view="timeline"))]


def _jump(store, trace_id: str, info: dict, params: dict, text: str, a: int, b: int):
    """The search step: (new params, the match with ``wrapped``) or (None, None) when nothing matches.
    Continues after the selected event when the text is the one searched last, else from the window's
    start."""
    after = (a - 1, "~", 2**62)  # every event starting at or after a
    picked = _selection(store, trace_id, params, info) if params.get("find", "") == text else None
    if picked and picked[2] is not None:
        d = picked[2]
        after = (int(d["start_ns"]), d["src"], int(d["id"]))
    hit = td.find_event(store, trace_id, text, after)
    if hit is None:
        return None, None
    hit["wrapped"] = (hit["start_ns"], hit["src"], hit["id"]) <= after
    dur = hit["end_ns"] - hit["start_ns"]
    w = max(3 * dur, min(b - a, max(20 * dur, JUMP_NS)), 1000)
    mid = hit["start_ns"] + dur // 2
    lo = max(info["start_ns"], min(mid - w // 2, info["end_ns"] - w))
    hi = min(info["end_ns"], lo + w)
    new = {k: v for k, v in params.items() if k not in ("op", "sel")}
    new.update(t0=urls.ms_since(lo, info["start_ns"]), t1=urls.ms_since(hi, info["start_ns"]), find=text)
    if hit["src"] == "cpu":
        new["op"] = str(hit["id"])
    else:
        new["sel"] = f"{hit['src']}:{hit['id']}"
    return new, hit


def update(db_path, trace_id: str, search: str | None, relayout: dict | None = None,
           click: dict | None = None, find: str | None = None, plot_px: float | None = None):
    """The zoom/click/search callback as a plain function. Returns (figure, notes, status text, mode, event
    count, export href, clear-selection href, details panel, search) or None when the event changes nothing
    (a resize, a y-axis drag, a click off any bar, an empty search)."""
    params = urls.query(search)
    new = dict(params)
    found = None
    with open_store(db_path, read_only=True) as store:
        info = td.trace_info(store, trace_id)
        if find is not None:
            text = find.strip()
            if not text or P.check("find", text):
                return None
            a, b, _ = parse_window(params, info)
            new, found = _jump(store, trace_id, info, params, text, a, b)
            if new is None:
                view = render(store, trace_id, params, plot_px)
                view["notes"].append(("msg-find", f"No event's name contains {P.shown(text)}."))
                new = params
        elif click is not None:
            pts = (click or {}).get("points") or []
            cd = pts[0].get("customdata") if pts else None
            if isinstance(cd, bool) or isinstance(cd, list) or cd is None or cd != cd:
                return None
            new.pop("op", None)
            new.pop("sel", None)
            if isinstance(cd, str) and P.check("sel", cd) is None:
                new["sel"] = cd
            elif isinstance(cd, (int, float)):
                new["op"] = str(int(cd))  # a CPU operator's op_id (a crafted infinity raises: one sentence)
            else:
                return None
        elif relayout is not None:
            new = urls.window_params(params, relayout)
            if new is None:
                return None
        else:
            return None
        if find is None or found is not None:
            view = render(store, trace_id, new, plot_px, found)
    whole = "t0" not in new and "t1" not in new
    wa, wb = (None, None) if whole else (view["a"], view["b"])
    search_out = window_search({k: v for k, v in new.items() if k not in ("op",)}, info, wa, wb, new.get("op"))
    return view["figure"] or {}, _notes(view), view["status"], view["mode"], str(view["events"]), \
        view["export"], _clear_href(trace_id, new, info, wa, wb), _details(view), search_out


def register(app, db_path) -> None:
    # the browser keeps x-range changes (and the reset) with the plot's width in px (labels fit to it)
    app.clientside_callback(ClientsideFunction("kernelscope", "timelineZoom"), Output("timeline-zoom", "data"),
                            Input(GRAPH_ID, "relayoutData"), State(GRAPH_ID, "id"), prevent_initial_call=True)

    @app.callback(Output(GRAPH_ID, "figure"), Output("timeline-notes", "children"),
                  Output("timeline-status", "children"), Output("timeline-status", "data-mode"),
                  Output("timeline-status", "data-events"), Output("timeline-export", "href"),
                  Output("timeline-clear", "href"), Output("timeline-details", "children"),
                  Output("url", "search", allow_duplicate=True),
                  Input("timeline-zoom", "data"), Input(GRAPH_ID, "clickData"),
                  Input("timeline-find", "n_submit"), Input("timeline-find-next", "n_clicks"),
                  State("timeline-find", "value"), State("timeline-trace", "data"), State("url", "search"),
                  prevent_initial_call=True)
    def _timeline_update(zoom, click, _submit, _next, text, trace_id, search):
        trig = [t["prop_id"] for t in dash.callback_context.triggered]
        if len(trig) != 1:  # the page was just drawn: Dash names every input once (nothing happened)
            raise dash.exceptions.PreventUpdate
        px = (zoom or {}).get("px") if isinstance(zoom, dict) else None
        px = px if isinstance(px, (int, float)) and 50 <= px <= 20_000 else None
        try:
            if trig[0].startswith("timeline-find"):
                if not (_submit or _next):
                    raise dash.exceptions.PreventUpdate
                out = update(db_path, trace_id, search, find=text if isinstance(text, str) else "", plot_px=px)
            else:
                out = update(db_path, trace_id, search,
                             relayout=zoom_relayout(zoom) if any(t.startswith("timeline-zoom") for t in trig)
                             else None,
                             click=click if any(t.endswith("clickData") for t in trig) else None, plot_px=px)
        except KernelscopeError as exc:
            return (dash.no_update, [message(f"Cannot read the store: {exc}.", "msg-store-error", "error")],
                    *[dash.no_update] * 7)
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
