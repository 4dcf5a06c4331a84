"""The Dash app: ``create_app(db_path)`` builds it, ``serve(db_path, ...)`` runs it.

Routing is explicit (no page registry): ``TRACE_PAGES`` and ``STORE_PAGES`` map the page names of the URL
scheme (``urls.py``: ``/``, ``/trace/<ref>[/<page>]``, ``/<page>``) to their modules, and ``route`` maps a URL
to a page. The URL carries the state.

Query parameters after the path hold the page's own state (selection, zoom), each declared and checked in
``params.py`` (a bad value is dropped and named in one sentence above the page); a page reads them in
``layout(store, trace_id, params)`` and its callbacks write them back with
``Output("url", "search", allow_duplicate=True)``. The router listens to the path only (the query
string is State), so writing the state does not re-render the page, and opening the URL restores it.

Page modules: ``TITLE`` (nav text), ``layout(...)`` and optionally ``register(app, db_path)`` for their
callbacks. Every callback opens the store read-only, renders, and closes it at once, so an ingest in
another process can take the write lock between requests (new traces appear on reload). A store that
is busy, missing or not a store gives a sentence on the page, never a traceback.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import pathlib
import re
import secrets
from urllib.parse import urlencode

import dash
from dash import ClientsideFunction, Input, Output, State, dcc, html

from ..errors import KernelscopeError, TraceNotFound, UsageError
from ..storage.queries import resolve_trace
from ..storage.store import open_store
from . import params as P
from . import urls
from .pages import (
    bandwidth,
    bound,
    compare,
    launch,
    memory,
    modules,
    operators,
    overview,
    power,
    ranks,
    stacks,
    steps,
    sweep,
    timeline,
    traces,
)
from .params import check_ref, shown
from .urls import page_name, trace_ref, url_params  # noqa: F401  (the router reads the URL with these)
from .widgets import message

# Pages of one trace, in nav order: /trace/<ref>/<name>. Add a page with one line here and its name in urls.py.
TRACE_PAGES = {
    "overview": overview,
    "timeline": timeline,
    "operators": operators,
    "launch": launch,
    "bound": bound,
    "bandwidth": bandwidth,
    "power": power,
    "steps": steps,
    "modules": modules,
    "stacks": stacks,
    "memory": memory,
}
# Pages over the whole store or several traces: /<name>?...
STORE_PAGES: dict = {
    "compare": compare,
    "sweep": sweep,
    "ranks": ranks,
}
if tuple(TRACE_PAGES) != urls.TRACE_PAGES or tuple(STORE_PAGES) != urls.STORE_PAGES:
    raise ImportError("dashboard.app's TRACE_PAGES/STORE_PAGES and urls.py name different pages")

# The page shell. Styles and browser-side functions are files in assets/ (Dash links every .css and .js there).
_INDEX = """<!DOCTYPE html>
<html><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}</head>
<body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body></html>"""


def nav(trace_id: str, active: str) -> html.Div:
    """Links to every page of one trace; the current one is marked."""
    return html.Div([dcc.Link(getattr(m, "TITLE", n), href=urls.trace_href(trace_id, n), id=f"nav-{n}",
                              className="ks-active" if n == active else "")
                     for n, m in TRACE_PAGES.items()], className="ks-nav")


def route(db_path, pathname: str | None, search: str | None, logdir=None):
    """Render the page for a URL (the router callback as a plain function). A URL parameter that fails its
    check (``params.SPECS``) is left out and named in one sentence above the page. ``logdir``: the folder
    ``--logdir`` watches (the traces list says so)."""
    path = pathname if isinstance(pathname, str) else "/"
    params = P.url_params(search)
    page = _page(db_path, path or "/", search if isinstance(search, str) else "", params, logdir)
    if not params.problems:
        return page
    return html.Div([message(params.sentence(), "msg-bad-param", "error"), page])


def _trace_of_unknown_page(store, ref: str) -> tuple[str, str] | None:
    """``(trace id, page)`` when ``ref`` is a stored trace, a slash and a name that is no trace page (a user
    typing /trace/<id>/kernels); None otherwise."""
    head, sep, page = ref.rpartition("/")
    if not sep or not head or not page:
        return None
    try:
        return resolve_trace(store, head), page
    except (TraceNotFound, UsageError):
        return None


def _page(db_path, path: str, search: str, params, logdir=None):
    name = page_name(path)
    ref = trace_ref(path, search)
    params = {k: v for k, v in params.items() if k != "trace"}  # the trace is the page's subject, not state
    if ref is None and name not in STORE_PAGES and path not in ("/", ""):
        return message(f"There is no page at {shown(path)}. Open the traces list at /.", "msg-no-page", "error")
    if ref is not None and check_ref(ref):
        return html.Div([message(check_ref(ref), "msg-unknown-trace", "error"), dcc.Link("← all traces", href="/")])
    try:
        with open_store(db_path, read_only=True) as store:
            if ref is None:
                return STORE_PAGES[name].layout(store, params) if name in STORE_PAGES else traces.layout(store, logdir)
            try:
                trace_id = resolve_trace(store, ref)
            except TraceNotFound:
                if (known := _trace_of_unknown_page(store, ref)) is not None:  # /trace/<id>/<no such page>
                    tid, page = known
                    return html.Div([nav(tid, ""), message(
                        f"Trace {tid} has no page {shown(page)}: its pages are {', '.join(TRACE_PAGES)}; "
                        "across traces: /compare, /sweep and /ranks (a run's ranks and their collectives).",
                        "msg-no-page", "error")])
                return html.Div([
                    message(f"No trace matches {shown(ref)} in this store.", "msg-unknown-trace", "error"),
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


ERROR_ID = "ks-callback-error"
_log = logging.getLogger("kernelscope.dashboard")


def callback_error(exc: Exception):
    """Any callback that raises: one sentence above the page (never an HTTP 500 and a blank page), the
    traceback in the server's log, and no change to the callback's outputs."""
    _log.error("a dashboard callback failed", exc_info=exc)
    what = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    dash.set_props(ERROR_ID, {"children": message(
        f"This view could not be drawn from the request ({type(exc).__name__}{': ' + what if what else ''}); "
        "the page keeps its last state. Reload the page; if it happens again, the server log has the details.",
        "msg-callback-error", "error")})
    return None


def create_app(db_path, token: str | None = None, logdir=None) -> dash.Dash:
    """The dashboard over the store at ``db_path`` (read-only, one short-lived connection per callback).
    With ``token`` every request needs it (``_guard``); request bodies are capped at MAX_BODY_BYTES. ``logdir``:
    the folder a watcher ingests (storage/logdir.py), named in the header and on the traces list."""
    db_path = pathlib.Path(db_path)
    app = dash.Dash(__name__, title="kernelscope", suppress_callback_exceptions=True,
                    update_title=None, on_error=callback_error,
                    assets_folder=str(pathlib.Path(__file__).with_name("assets")))
    app.index_string = _INDEX
    app.layout = html.Div([
        dcc.Location(id="url", refresh="callback-nav"),
        dcc.Store(id="url-shown"),  # the path last scrolled to the top for (toTop)
        html.Div([dcc.Link("kernelscope", href="/", className="ks-brand"),
                  dcc.Link("traces", href="/"),
                  *[dcc.Link(getattr(m, "TITLE", n), href=f"/{n}") for n, m in STORE_PAGES.items()],
                  html.Span(str(db_path) + (f" · watching {logdir}" if logdir else ""), className="ks-store")],
                 className="ks-header"),
        html.Div(id=ERROR_ID),
        dcc.Loading(html.Div(id="page"), delay_show=300),
    ])

    # another page opens at its top (the window kept the old page's scroll: a trace opened from low on the
    # traces list showed its overview below its tabs and KPIs); a change of the query string alone (a zoom) does not
    app.clientside_callback(ClientsideFunction("kernelscope", "toTop"), Output("url-shown", "data"),
                            Input("url", "pathname"), prevent_initial_call=True)

    @app.callback(Output("page", "children"), Input("url", "pathname"), State("url", "search"))
    def _render(pathname, search):
        return route(db_path, pathname if isinstance(pathname, str) else None,
                     search if isinstance(search, str) else None, logdir)

    for module in list(TRACE_PAGES.values()) + list(STORE_PAGES.values()):
        if hasattr(module, "register"):
            module.register(app, db_path)

    @app.callback(Output("url", "pathname"), Output("url", "search"),
                  Input(traces.TABLE_ID, "cellClicked"), prevent_initial_call=True)
    def _open_trace(cell):
        target = traces.open_trace(cell)
        if target is None:
            return dash.no_update, dash.no_update
        return target, ""

    _guard(app.server, token)
    return app


#: Largest request body the dashboard reads (a callback posts its inputs and states: a few kB, the Bandwidth
#: table's rows at most, ~0.5 kB each). Larger bodies get 413 and one sentence; no body is ever echoed.
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Cookie that carries the access token after it was given once as ``?token=``.
TOKEN_COOKIE = "kernelscope_token"
TOKEN_HEADER = "X-Kernelscope-Token"
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._~-]{8,256}$")


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be an access token (it goes into URLs as is), or None."""
    if _TOKEN_RE.match(token or ""):
        return None
    return "must be 8 to 256 characters of A-Z, a-z, 0-9 and . _ ~ -"


def _guard(server, token: str | None) -> None:
    """Body size cap, and with ``token`` an access check on every request (pages, callbacks, assets,
    exports): the token as header ``X-Kernelscope-Token`` (or ``Authorization: Bearer``), the cookie, or
    ``?token=`` once (answered by a redirect to the same URL without it, setting the cookie)."""
    from flask import Response, redirect, request

    server.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    @server.errorhandler(413)
    def _too_large(_exc):
        return Response(f"kernelscope: the request body is larger than the {MAX_BODY_BYTES >> 20} MB the "
                        "dashboard accepts.\n", status=413, mimetype="text/plain")

    if token is None:
        return
    if token_problem(token):
        raise UsageError(f"the dashboard token {token_problem(token)}")
    expected = token.encode()

    def ok(given) -> bool:
        return isinstance(given, str) and hmac.compare_digest(given.encode("utf-8", "replace"), expected)

    @server.before_request
    def _check_token():
        auth = request.headers.get("Authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if ok(request.headers.get(TOKEN_HEADER)) or ok(bearer) or ok(request.cookies.get(TOKEN_COOKIE)):
            return None
        if ok(request.args.get("token")):
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
            target = "/" + request.path.lstrip("/") + ("?" + urlencode(rest) if rest else "")
            resp = redirect(target, code=303) if request.method in ("GET", "HEAD") else None
            if resp is None:  # not a page load: serve it, and set the cookie on the answer
                return None
            resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict", path="/")
            return resp
        return Response("kernelscope: this dashboard needs its access token: open the URL the `kernelscope "
                        "dashboard` command printed (it ends in ?token=...), or send the token in the "
                        f"{TOKEN_HEADER} header.\n", status=401, mimetype="text/plain",
                        headers={"WWW-Authenticate": 'Bearer realm="kernelscope"'})

    @server.after_request
    def _remember(resp):
        if ok(request.args.get("token")) and not ok(request.cookies.get(TOKEN_COOKIE)):
            resp.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict", path="/")
        return resp


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to an outside address


def new_token() -> str:
    return secrets.token_urlsafe(18)


def _check_port_free(host: str, port: int) -> None:
    """UsageError when ``host:port`` cannot be bound (another dashboard, or any server, holds it)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # an unresolvable host: the server's own error says so
    family, kind, proto, _name, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no conflict
        try:
            sock.bind(addr)
        except OSError as exc:
            raise UsageError(f"cannot serve on {host}:{port}: {exc.strerror or exc} (another kernelscope dashboard "
                             "or server holds it?); stop it, or choose another port with --port") from None


def serve(db_path, host: str = "127.0.0.1", port: int = 8050, debug: bool = False,
          token: str | None = None, logdir=None) -> None:
    """Print the URL and serve the dashboard until interrupted. Beyond loopback a token is required (one is
    generated when none is given) and a warning goes to stderr; on loopback a given token is required too."""
    import sys

    if not is_loopback(host):
        token = token or new_token()
        print(f"kernelscope: warning: serving on {host}, beyond this machine: every trace, name and file path "
              "in the store can be read by anyone who can reach this port and has the token in the URL below; "
              "serve on 127.0.0.1 (the default) unless you mean it.", file=sys.stderr, flush=True)
    _check_port_free(host, port)  # before the URL: printed for a port another server holds, it pointed there
    app = create_app(db_path, token=token, logdir=logdir)
    query = f"?token={token}" if token else ""
    shown_host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    print(f"kernelscope dashboard: http://{shown_host}:{port}/{query}", flush=True)
    app.run(host=host, port=port, debug=debug)
