"""A multi-rank run (``/ranks?run=RUN``): per-rank breakdown bars (compute, exposed communication, exposed
memcpy, idle), the collective skew heat map (how long each rank waited for the last to arrive) and the
straggler table, from the ``comm`` analysis through ``reports/ranks.py``. With no ``run`` and several runs
in the store, the page lists them.

**Aligned timeline** (``/ranks?run=RUN&view=timeline&t0=..&t1=..&coll=PG:SEQ``): the GPU lanes (one per
stream, plus a collectives lane per rank when zoomed out) of every rank of the run on one time axis. Each
rank's times are shifted by its *applied* clock offset, ``rank_clocks.clock_offset_ns`` (aligned = stored -
offset; 0 on one host, else the estimate from collective end times: storage/ranks.py; the estimate itself,
``estimate_ns``, is shown but not applied when the offset is 0). ``t0``/``t1``: the window in ms since the
run's origin (the earliest aligned trace start over its ranks); absent = the whole run. ``coll``: a
collective instance (process group : sequence, as in the heat map) outlined on every rank. A window with at
most ``timeline_data.EVENT_LIMIT`` GPU activities is drawn event by event (collectives coloured by type),
a larger one binned (busy % per lane); zooming writes t0/t1 back into the URL, so a shared URL restores the
view. Clicking a heat-map cell, a straggler-table row or a collective on the aligned timeline opens the
aligned timeline on that collective: its first start to its last end over the ranks, padded by half that
span (at least 20 µs) on each side, so the straggler's late arrival shows against the others' waiting.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from ...errors import KernelscopeError, UsageError
from ...reports import ranks as rr
from ...reports import timeline as tfig
from ...reports import timeline_data as td
from ...storage.catalog import traces_by_prefix
from ...storage.store import open_store
from ...units import NS_PER_MS, NS_PER_US, ms_text
from .. import urls
from ..widgets import graph, grid, message, warning_lines, zoom_filter, zoom_relayout

TITLE = "Ranks"
GRAPH_ID = "ranks-tl-graph"
#: Padding around a collective opened from the heat map/table: this fraction of its span, at least PAD_MIN_NS.
PAD_FRACTION, PAD_MIN_NS = 0.5, 20_000


def _href(run: str, **extra) -> str:
    return urls.store_href("ranks", run=run, **extra)


def _run_list(runs) -> html.Div:
    items = [html.Li([html.A(r.name or r.run_id, href=_href(r.run_id), id=f"ranks-link-{r.run_id}"),
                      f" ({r.world_size} ranks, ranks from {r.rank_source}; {r.run_id}) · ",
                      html.A("aligned timeline", href=_href(r.run_id, view="timeline"))])
             for r in runs.itertuples(index=False)]
    return html.Div([html.H2("Runs"), html.P("Pick a run of several ranks.", className="ks-hint"),
                     html.Ul(items, id="ranks-run-list")], id="ranks-page")


def layout(store, params: dict | None = None) -> html.Div:
    params = params or {}
    if params.get("view") == "timeline":
        return timeline_layout(store, params)
    run = params.get("run")
    runs = rr.run_list(store)
    if runs.empty:
        return html.Div([html.H2("Ranks"), message(
            "This store has no multi-rank run. Ingest a folder holding one trace per rank: "
            "`kernelscope ingest DIR`.", "msg-no-runs")], id="ranks-page")
    if run is None and len(runs) > 1:
        return _run_list(runs)
    try:
        r = rr.comm_result(store, run)
    except UsageError as e:
        return html.Div([html.H2("Ranks"), message(f"No run to show: {e}", "msg-unknown-run", "error"),
                         html.A("← all runs", href="/ranks")], id="ranks-page")
    s = r.scalars
    name = runs.set_index("run_id").loc[s["run_id"], "name"] if s["run_id"] in set(runs.run_id) else s["run_id"]
    kpis = [("ranks", f"{s['world_size']}"), ("collectives", f"{s['collective_instances']}"),
            ("max start skew", ms_text(s["max_start_skew_ns"])),
            ("straggler", "—" if s["straggler_rank"] is None else f"rank {s['straggler_rank']}"),
            ("skew it caused", ms_text(s["straggler_skew_caused_ns"]))]
    ranks = r.tables["ranks"]
    body: list = [
        dcc.Store(id="ranks-run", data=s["run_id"]),
        dcc.Location(id="ranks-nav", refresh=True),
        html.H2(f"Run {name}"),
        html.P([f"{s['run_id']}; clock offsets applied (ns): {r.trust['clock_offsets_applied']} · ",
                html.A("aligned timeline of every rank", href=_href(s["run_id"], view="timeline"),
                       id="ranks-timeline-link")], className="ks-hint"),
        html.Div([html.Div([html.Div(k, className="ks-kpi-label"), html.Div(v, className="ks-kpi-value")],
                           className="ks-kpi", id=f"ranks-kpi-{i}") for i, (k, v) in enumerate(kpis)],
                 className="ks-kpis"),
        html.H3("Where each rank's GPU time went"),
        graph("ranks-breakdown", rr.breakdown_figure(ranks)),
        html.H3("Collective skew: time each rank waited for the last to arrive"),
        html.P("Click a cell (or a row of the table below) to see that collective on every rank's aligned "
               "timeline.", className="ks-hint"),
        graph("ranks-skew", rr.skew_heatmap(r.tables["arrivals"])),
        html.H3("Stragglers: collectives by start skew"),
    ]
    st = rr.straggler_table(r.tables["collectives"])
    body.append(grid(st.assign(id=st["instance"]),  # row id: the instance a click opens
                     [(c, c, "text" if c in ("instance", "collective") else "numeric") for c in st.columns],
                     "ranks-straggler-table", clickable=True))
    per = ranks[["rank", "name", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_pct", "comm_only_ns",
                 "exposed_memcpy_ns", "idle_ns", "gpu_span_ns"]].copy()
    body += [html.H3("Per rank (ns)"),
             grid(per, [(c, c, "text" if c == "name" else "numeric") for c in per.columns], "ranks-table")]
    body += warning_lines(r.warnings)
    return html.Div(body, id="ranks-page")


# ----------------------------------------------------------------------------------------------- timeline

def collective_href(store, run_id: str, instance: str) -> str | None:
    """The aligned timeline's URL zoomed to collective ``instance`` ('pg:seq') of the run (see the module
    docstring for the padding); None when the run has no such instance."""
    info = td.run_info(store, run_id)
    win = td.instance_window(store, info["run_id"], instance) if info else None
    if win is None or info["origin"] is None:
        return None
    s, e = win
    pad = max(PAD_MIN_NS, round((e - s) * PAD_FRACTION))
    a, b = max(info["origin"], s - pad), min(info["end_ns"], e + pad)
    return _href(info["run_id"], view="timeline", t0=urls.ms_since(a, info["origin"]),
                 t1=urls.ms_since(b, info["origin"]), coll=instance)


def _window(params: dict, info: dict) -> tuple[int, int, str]:
    """The aligned window [a, b) from t0/t1 (ms since the run's origin), clamped to the run."""
    return urls.parse_window(params, {"start_ns": info["origin"], "end_ns": info["end_ns"]})


def render_run(store, params: dict, limit: int = td.EVENT_LIMIT) -> dict:
    """Everything the aligned timeline shows for URL state ``params``: ``figure`` (or None), ``notes``
    ((id, sentence) pairs), ``status``, ``mode`` ('events' | 'binned' | 'empty'), ``events`` (GPU
    activities in the window), ``run_id``, ``info`` (``timeline_data.run_info``) and the window ``a``/``b``
    (aligned epoch ns). ``limit``: most activities drawn one by one."""
    out = {"figure": None, "notes": [], "status": "", "mode": "empty", "events": 0, "run_id": None,
           "info": None, "a": None, "b": None}
    run = (params.get("run") or "").strip()
    if not run:
        runs = rr.run_list(store)
        if len(runs) != 1:
            out["notes"].append(("msg-pick-run", "Pick a run for the aligned timeline: " + (
                "this store has no multi-rank run." if runs.empty else "this store holds several (see /ranks).")))
            return out
        run = str(runs["run_id"].iloc[0])
    info = td.run_info(store, run)
    if info is None:
        tr = traces_by_prefix(store, run)
        if len(tr) == 1 and not tr["run_id"].isna().iloc[0]:
            info = td.run_info(store, str(tr["run_id"].iloc[0]))  # a rank's trace id: its run
        if info is None and len(tr) == 1 and tr["run_id"].isna().iloc[0]:
            out["notes"].append(("msg-trace-outside-run", f"Trace {tr['trace_id'].iloc[0]} "
                                 f"({tr['name'].iloc[0]}) is not part of a run of several ranks, so there is "
                                 "nothing to align: its own Timeline shows it."))
            out["trace_id"] = str(tr["trace_id"].iloc[0])
        elif info is None:
            out["notes"].append(("msg-unknown-run", f"No single run matches {run!r}."))
    if info is None:
        return out
    out.update(run_id=info["run_id"], info=info)
    if len(info["ranks"]) < 2:
        out["notes"].append(("msg-one-rank", f"Run {info['name']} has one rank: there is nothing to align; "
                             "its own Timeline shows it."))
        out["trace_id"] = str(info["ranks"]["trace_id"].iloc[0]) if len(info["ranks"]) else None
        return out
    lanes = td.run_lanes(store, info["run_id"])
    if lanes.empty or info["origin"] is None:
        out["notes"].append(("msg-no-gpu", f"Run {info['name']} has no GPU activity to draw."))
        return out
    a, b, note = _window(params, info)
    out.update(a=a, b=b)
    if note:
        out["notes"].append(("msg-bad-window", note))
    focus = (params.get("coll") or "").strip() or None
    if focus and td.instance_window(store, info["run_id"], focus) is None:
        out["notes"].append(("msg-no-collective", f"No collective {focus!r} in this run to outline."))
        focus = None
    n = td.run_count(store, info["run_id"], a, b)
    out["events"] = n
    origin = info["origin"]
    t0, t1 = (a - origin) / NS_PER_MS, (b - origin) / NS_PER_MS
    if n == 0:
        out["notes"].append(("msg-empty-window", f"No GPU activity of any rank between {t0:,.3f} and {t1:,.3f} "
                             "ms: zoom out (double-click the figure) to see the whole run."))
        out["figure"] = tfig.run_events_figure(_streams(lanes), td.run_events(store, info["run_id"], a, a), a, b,
                                               origin)
    elif n <= limit:
        out["mode"] = "events"
        out["figure"] = tfig.run_events_figure(_streams(lanes), td.run_events(store, info["run_id"], a, b), a, b,
                                               origin, focus)
        out["status"] = (f"{n:,} GPU activities of {len(info['ranks'])} ranks between {t0:,.3f} and {t1:,.3f} ms, "
                         "drawn one by one; collectives coloured by type" + (f", collective {focus} outlined."
                                                                             if focus else "."))
    else:
        bins, start, width = td.run_binned(store, info["run_id"], a, b)
        out["mode"] = "binned"
        out["figure"] = tfig.run_binned_figure(lanes, bins, start, width, a, b, origin)
        out["status"] = (f"{n:,} GPU activities between {t0:,.3f} and {t1:,.3f} ms: more than {limit:,}, so each "
                         f"lane shows its busy % in bins of {width / NS_PER_US:,.1f} µs. Zoom in (drag) to see "
                         "individual kernels.")
    return out


def _streams(lanes):
    """The stream lanes only (collectives show on their streams when drawn event by event)."""
    g = lanes[lanes["src"] == "gpu"].reset_index(drop=True)
    return g.assign(lane=range(len(g)))


def _offsets_text(info: dict) -> str:
    return "; ".join(f"rank {int(r)}: {int(o):,} ns" for r, o in zip(info["ranks"]["rank"],
                                                                     info["ranks"]["clock_offset_ns"]))


def _notes(view: dict) -> list:
    out = []
    for msg_id, text in view["notes"]:
        m = message(text, msg_id)
        if view.get("trace_id") and msg_id in ("msg-trace-outside-run", "msg-one-rank"):
            m.children = [m.children, html.A("open its Timeline", href=urls.trace_href(view["trace_id"], "timeline"))]
        out.append(m)
    return out


def timeline_layout(store, params: dict) -> html.Div:
    view = render_run(store, params)
    info = view["info"]
    head = [dcc.Store(id="ranks-run", data=view["run_id"]), dcc.Store(id="ranks-tl-zoom"),
            dcc.Location(id="ranks-nav", refresh=True)]
    if info is None:  # no graph, so no zoom store either (its callback writes the graph)
        head = [h for h in head if getattr(h, "id", None) != "ranks-tl-zoom"]
        return html.Div(head + [html.H2("Aligned timeline"), html.Div(_notes(view), id="ranks-tl-notes"),
                                html.A("← all runs", href="/ranks")], id="ranks-page")
    timeline = graph(GRAPH_ID, view["figure"] or {}, config={"scrollZoom": False},
                     style={} if view["figure"] is not None else {"display": "none"})
    return html.Div(head + [
        html.H2(f"Aligned timeline · run {info['name']}"),
        html.P(["GPU streams of every rank on one time axis, each rank shifted by its applied clock offset "
                f"(rank_clocks.clock_offset_ns: {_offsets_text(info)}). Drag to zoom (the window goes into the "
                "URL), double-click for the whole run, click a collective to centre on it. ",
                html.A("← Ranks page", href=_href(info["run_id"]), id="ranks-back")], className="ks-hint"),
        html.Div(_notes(view), id="ranks-tl-notes"),
        html.P(view["status"], id="ranks-tl-status", className="ks-hint",
               **{"data-mode": view["mode"], "data-events": str(view["events"])}),
        timeline,
    ], id="ranks-page")


def update_timeline(db_path, search: str | None, relayout: dict | None) -> tuple | None:
    """The aligned timeline's zoom callback as a plain function: (figure, notes, status, mode, event count,
    search) for the new window, or None when the relayout changes no x range."""
    new = urls.window_params(urls.query(search), relayout) if relayout else None
    if new is None:
        return None
    with open_store(db_path, read_only=True) as store:
        view = render_run(store, new)
    return (view["figure"] or {}, _notes(view), view["status"], view["mode"], str(view["events"]),
            urls.search_of(new) or "?")


def clicked_instance(trigger: str, skew_click, cell, tl_click) -> str | None:
    """The collective instance ('pg:seq') a click names: a heat-map cell (its x), a straggler-table cell
    (``cell``, the grid's ``cellClicked``: its row id is the instance) or a collective segment of the aligned
    timeline (its customdata)."""
    if trigger.startswith("ranks-skew"):
        pts = (skew_click or {}).get("points") or []
        return str(pts[0]["x"]) if pts and pts[0].get("x") is not None else None
    if trigger.startswith("ranks-straggler-table"):
        return str((cell or {}).get("rowId") or "") or None
    if trigger.startswith(GRAPH_ID):
        pts = (tl_click or {}).get("points") or []
        cd = pts[0].get("customdata") if pts else None
        return cd if isinstance(cd, str) and cd else None
    return None


def register(app, db_path) -> None:
    zoom_filter(app, GRAPH_ID, "ranks-tl-zoom")

    @app.callback(Output(GRAPH_ID, "figure"), Output("ranks-tl-notes", "children"),
                  Output("ranks-tl-status", "children"), Output("ranks-tl-status", "data-mode"),
                  Output("ranks-tl-status", "data-events"), Output("url", "search", allow_duplicate=True),
                  Input("ranks-tl-zoom", "data"), State("url", "search"), prevent_initial_call=True)
    def _ranks_zoom(zoom, search):
        try:
            out = update_timeline(db_path, search, zoom_relayout(zoom))
        except KernelscopeError as exc:
            return (dash.no_update, [message(f"Cannot read the store: {exc}.", "msg-store-error", "error")],
                    *[dash.no_update] * 4)
        if out is None:
            raise dash.exceptions.PreventUpdate
        return out

    @app.callback(Output("ranks-nav", "href"), Input("ranks-skew", "clickData"),
                  Input("ranks-straggler-table", "cellClicked"), State("ranks-run", "data"), prevent_initial_call=True)
    def _open_collective(skew_click, cell, run_id):
        trig = [t["prop_id"] for t in dash.callback_context.triggered]
        inst = clicked_instance(trig[0] if trig else "", skew_click, cell, None)
        return _nav(db_path, run_id, inst)

    @app.callback(Output("ranks-nav", "href", allow_duplicate=True), Input(GRAPH_ID, "clickData"),
                  State("ranks-run", "data"), prevent_initial_call=True)
    def _open_from_timeline(click, run_id):
        return _nav(db_path, run_id, clicked_instance(GRAPH_ID, None, None, click))


def _nav(db_path, run_id, inst):
    if not inst or not run_id:
        raise dash.exceptions.PreventUpdate
    try:
        with open_store(db_path, read_only=True) as store:
            href = collective_href(store, run_id, inst)
    except KernelscopeError:
        raise dash.exceptions.PreventUpdate from None
    if href is None:
        raise dash.exceptions.PreventUpdate
    return href
