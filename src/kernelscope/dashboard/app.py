"""The Dash app: ``create_app(db_path)`` builds it, ``serve(db_path, ...)`` runs it.

Routing is explicit (no page registry): ``route`` maps the URL to a page. The URL carries the state:

- ``/``                                   traces table
- ``/trace/<ref>`` or ``/?trace=<ref>``   overview of one trace (an id prefix, file name or name works too)
- ``/trace/<ref>/<page>``                 another page of that trace (``TRACE_PAGES``)
- ``/<page>``                             a page over several traces (``STORE_PAGES``: sweep, compare)

Query parameters after the path hold the page's own state (selection, zoom); a page reads them in
``layout(store, trace_id, params)`` and its callbacks write them back with
``Output("url", "search", allow_duplicate=True)``. The router listens to the path only (the query
string is State), so writing the state does not re-render the page, and opening the URL restores it.

Page modules: ``TITLE`` (nav text), ``layout(...)`` and optionally ``register(app, db_path)`` for their
callbacks. Every callback opens the store read-only, renders, and closes it at once, so an ingest in
another process can take the write lock between requests (new traces appear on reload). A store that
is busy, missing or not a store gives a sentence on the page, never a traceback.
"""

from __future__ import annotations

import pathlib
from urllib.parse import parse_qs, unquote

import dash
from dash import Input, Output, State, dcc, html

from ..errors import KernelscopeError, TraceNotFound, UsageError
from ..storage.queries import resolve_trace
from ..storage.store import open_store
from .pages import (bandwidth, bound, compare, launch, operators, overview, power, ranks, sweep, timeline,
                    traces)
from .pages.common import message

# Pages of one trace, in nav order: /trace/<ref>/<name>. Add a page with one line here.
TRACE_PAGES = {
    "overview": overview,
    "timeline": timeline,
    "operators": operators,
    "launch": launch,
    "bound": bound,
    "bandwidth": bandwidth,
    "power": power,
}
# Pages over the whole store or several traces: /<name>?...
STORE_PAGES: dict = {
    "compare": compare,
    "sweep": sweep,
    "ranks": ranks,
}

_CSS = """
body { font-family: system-ui, -apple-system, sans-serif; margin: 0; color: #111827; background: #fafafa; }
.ks-header { background: #111827; color: white; padding: 10px 24px; display: flex; gap: 24px;
             align-items: baseline; }
.ks-header a { color: white; text-decoration: none; }
.ks-brand { font-weight: 700; font-size: 18px; }
.ks-store { color: #9ca3af; font-size: 13px; }
#page { padding: 12px 24px 40px; max-width: 1400px; }
.ks-hint { color: #4b5563; font-size: 13px; }
.ks-kpis { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.ks-kpi { background: white; border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px 12px;
          min-width: 130px; }
.ks-kpi-label { font-size: 12px; color: #6b7280; }
.ks-kpi-value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.ks-kpi-extra { font-size: 12px; color: #6b7280; min-height: 14px; }
.ks-message { background: #eff6ff; border: 1px solid #bfdbfe; border-radius: 6px; padding: 4px 14px;
              margin: 12px 0; }
.ks-error { background: #fef2f2; border-color: #fecaca; }
.ks-warning { color: #92400e; }
.ks-nav { display: flex; gap: 4px; margin: 8px 0 4px; border-bottom: 1px solid #e5e7eb; }
.ks-nav a { padding: 6px 12px; color: #374151; text-decoration: none; border-radius: 6px 6px 0 0; }
.ks-nav a.ks-active { background: white; border: 1px solid #e5e7eb; border-bottom-color: white;
                      font-weight: 600; margin-bottom: -1px; }
#trust p { margin: 4px 0; font-size: 14px; }
"""

_INDEX = """<!DOCTYPE html>
<html><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + _CSS + """</style></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body></html>"""


def trace_ref(pathname: str | None, search: str | None) -> str | None:
    """The trace the URL names: ``/trace/<ref>[/<page>]`` or ``?trace=<ref>``; None otherwise."""
    path = pathname or "/"
    if path.startswith("/trace/"):
        ref = unquote(path[len("/trace/"):]).strip("/")
        if "/" in ref and ref.rsplit("/", 1)[1] in TRACE_PAGES:
            ref = ref.rsplit("/", 1)[0]
        return ref or None
    values = parse_qs((search or "").lstrip("?")).get("trace")
    return values[0] if values else None


def page_name(pathname: str | None) -> str:
    """The page a URL names: a ``TRACE_PAGES`` key for trace URLs, a ``STORE_PAGES`` key, or ``traces``."""
    path = (pathname or "/").rstrip("/") or "/"
    if path.startswith("/trace/"):
        last = unquote(path).rsplit("/", 1)[1]
        return last if last in TRACE_PAGES and path.count("/") >= 3 else "overview"
    name = path.lstrip("/")
    return name if name in STORE_PAGES else ("traces" if name == "" else name)


def url_params(search: str | None) -> dict[str, str]:
    """The query string as a dict (last value wins), without the trace reference."""
    out = {k: v[-1] for k, v in parse_qs((search or "").lstrip("?")).items()}
    out.pop("trace", None)
    return out


def nav(trace_id: str, active: str) -> html.Div:
    """Links to every page of one trace; the current one is marked."""
    return html.Div([dcc.Link(getattr(m, "TITLE", n), href=f"/trace/{trace_id}/{n}", id=f"nav-{n}",
                              className="ks-active" if n == active else "")
                     for n, m in TRACE_PAGES.items()], className="ks-nav")


def route(db_path, pathname: str | None, search: str | None):
    """Render the page for a URL (the router callback as a plain function)."""
    path = pathname or "/"
    name = page_name(path)
    ref = trace_ref(path, search)
    params = url_params(search)
    if ref is None and name not in STORE_PAGES and path not in ("/", ""):
        return message(f"There is no page at {path}. Open the traces list at /.", "msg-no-page", "error")
    try:
        with open_store(db_path, read_only=True) as store:
            if ref is None:
                return STORE_PAGES[name].layout(store, params) if name in STORE_PAGES else traces.layout(store)
            try:
                trace_id = resolve_trace(store, ref)
            except TraceNotFound:
                return html.Div([
                    message(f"No trace matches {ref!r} in this store.", "msg-unknown-trace", "error"),
                    dcc.Link("← all traces", href="/"),
                ])
            except UsageError as exc:  # an ambiguous prefix
                return html.Div([
                    message(f"The trace reference is {exc}.", "msg-unknown-trace", "error"),
                    dcc.Link("← all traces", href="/"),
                ])
            name = name if name in TRACE_PAGES else "overview"  # /?trace=<ref>
            return html.Div([nav(trace_id, name), TRACE_PAGES[name].layout(store, trace_id, params)])
    except KernelscopeError as exc:
        return message(f"Cannot read the store: {exc}.", "msg-store-error", "error")


def create_app(db_path) -> dash.Dash:
    """The dashboard over the store at ``db_path`` (read-only, one short-lived connection per callback)."""
    db_path = pathlib.Path(db_path)
    app = dash.Dash(__name__, title="kernelscope", suppress_callback_exceptions=True,
                    update_title=None)
    app.index_string = _INDEX
    app.layout = html.Div([
        dcc.Location(id="url", refresh="callback-nav"),
        html.Div([dcc.Link("kernelscope", href="/", className="ks-brand"),
                  dcc.Link("traces", href="/"),
                  *[dcc.Link(getattr(m, "TITLE", n), href=f"/{n}") for n, m in STORE_PAGES.items()],
                  html.Span(str(db_path), className="ks-store")], className="ks-header"),
        dcc.Loading(html.Div(id="page"), delay_show=300),
    ])

    @app.callback(Output("page", "children"), Input("url", "pathname"), State("url", "search"))
    def _render(pathname, search):
        return route(db_path, pathname, search)

    for module in list(TRACE_PAGES.values()) + list(STORE_PAGES.values()):
        if hasattr(module, "register"):
            module.register(app, db_path)

    @app.callback(Output("url", "pathname"), Output("url", "search"),
                  Input(traces.TABLE_ID, "active_cell"), prevent_initial_call=True)
    def _open_trace(active_cell):
        target = traces.open_trace(active_cell)
        if target is None:
            return dash.no_update, dash.no_update
        return target, ""

    return app


def serve(db_path, host: str = "127.0.0.1", port: int = 8050, debug: bool = False) -> None:
    """Print the URL and serve the dashboard until interrupted."""
    app = create_app(db_path)
    print(f"kernelscope dashboard: http://{host}:{port}/", flush=True)
    app.run(host=host, port=port, debug=debug)
