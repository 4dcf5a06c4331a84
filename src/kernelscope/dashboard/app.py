"""The Dash app: ``create_app(db_path)`` builds it, ``serve(db_path, ...)`` runs it.

Routing is explicit (no page registry): ``route`` maps the URL to a page. The URL carries the state:

- ``/``                          traces table
- ``/trace/<id>`` or ``/?trace=<id>``   overview of one trace (an id prefix, file name or name works too)

Every callback opens the store read-only, renders, and closes it at once, so an ingest in another
process can take the write lock between requests (new traces appear on reload). A store that is busy,
missing or not a store gives a sentence on the page, never a traceback.
"""

from __future__ import annotations

import pathlib
from urllib.parse import parse_qs, unquote

import dash
from dash import Input, Output, dcc, html

from ..errors import KernelscopeError, TraceNotFound, UsageError
from ..storage.queries import resolve_trace
from ..storage.store import open_store
from .pages import overview, traces
from .pages.common import message

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
#trust p { margin: 4px 0; font-size: 14px; }
"""

_INDEX = """<!DOCTYPE html>
<html><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + _CSS + """</style></head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body></html>"""


def trace_ref(pathname: str | None, search: str | None) -> str | None:
    """The trace the URL names: ``/trace/<ref>`` or ``?trace=<ref>``; None for the traces page."""
    path = pathname or "/"
    if path.startswith("/trace/"):
        ref = unquote(path[len("/trace/"):]).strip("/")
        return ref or None
    values = parse_qs((search or "").lstrip("?")).get("trace")
    return values[0] if values else None


def route(db_path, pathname: str | None, search: str | None):
    """Render the page for a URL (the router callback as a plain function)."""
    path = pathname or "/"
    ref = trace_ref(path, search)
    if ref is None and path not in ("/", ""):
        return message(f"There is no page at {path}. Open the traces list at /.", "msg-no-page", "error")
    try:
        with open_store(db_path, read_only=True) as store:
            if ref is None:
                return traces.layout(store)
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
            return overview.layout(store, trace_id)
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
                  html.Span(str(db_path), className="ks-store")], className="ks-header"),
        dcc.Loading(html.Div(id="page"), delay_show=300),
    ])

    @app.callback(Output("page", "children"), Input("url", "pathname"), Input("url", "search"))
    def _render(pathname, search):
        return route(db_path, pathname, search)

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
