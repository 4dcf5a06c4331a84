"""The dashboard's URLs, built and read in one place. Pages import this module (never the app, never each
other) for every link they draw and every query string their callbacks write back.

The scheme:

- ``/``                                   traces table
- ``/trace/<ref>`` or ``/?trace=<ref>``   overview of one trace (an id prefix, file name or name works too)
- ``/trace/<ref>/<page>``                 another page of that trace (``TRACE_PAGES``)
- ``/<page>``                             a page over several traces (``STORE_PAGES``)
- ``/export/<trace>/perfetto.json?t0=&t1=``  a window of a trace as Chrome-trace JSON

Query parameters hold a page's own state; each is declared and checked in ``params.py``. The time window of
the Timeline and the aligned Ranks timeline is ``t0``/``t1`` in ms since an origin (``parse_window``,
``window_search``, ``window_params``).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlencode

from ..units import NS_PER_MS
from . import params as P

#: Pages of one trace, in nav order (``app.TRACE_PAGES`` maps each to its module).
TRACE_PAGES = ("overview", "timeline", "operators", "launch", "bound", "bandwidth", "power", "steps", "modules",
               "stacks", "memory")
#: Pages over the whole store or several traces (``app.STORE_PAGES``).
STORE_PAGES = ("compare", "sweep", "ranks")

_RANGE = re.compile(r"^xaxis\d*\.range\[([01])\]$")


# ------------------------------------------------------------------------------------------ reading

def query(search: str | None) -> P.Params:
    """Every checked parameter of the query string, the trace reference included (``params.url_params``)."""
    return P.url_params(search)


def url_params(search: str | None) -> dict[str, str]:
    """The query string's checked parameters without the trace reference: a page's own state."""
    out = P.url_params(search)
    out.pop("trace", None)
    return out


def trace_ref(pathname: str | None, search: str | None) -> str | None:
    """The trace the URL names: ``/trace/<ref>[/<page>]`` or ``?trace=<ref>``; None otherwise."""
    path = pathname or "/"
    if path.startswith("/trace/"):
        ref = unquote(path[len("/trace/"):]).strip("/")
        if "/" in ref and ref.rsplit("/", 1)[1] in TRACE_PAGES:
            ref = ref.rsplit("/", 1)[0]
        return ref or None
    return P.url_params(search).get("trace")


def page_name(pathname: str | None) -> str:
    """The page a URL names: a ``TRACE_PAGES`` name for trace URLs, a ``STORE_PAGES`` name, or ``traces``."""
    path = (pathname or "/").rstrip("/") or "/"
    if path.startswith("/trace/"):
        last = unquote(path).rsplit("/", 1)[1]
        return last if last in TRACE_PAGES and path.count("/") >= 3 else "overview"
    name = path.lstrip("/")
    return name if name in STORE_PAGES else ("traces" if name == "" else name)


# ------------------------------------------------------------------------------------------ building

def search_of(params: dict, quoted: bool = False) -> str:
    """``?k=v&...`` for ``params`` in their order ('' when empty); ``quoted``: a space as %20 (``quote``)
    instead of '+'."""
    if not params:
        return ""
    return "?" + (urlencode(params, quote_via=quote) if quoted else urlencode(params))


def with_param(search: str | None, key: str, value) -> str:
    """The query string ``search`` with ``key`` set to ``value`` (removed when None), other keys kept."""
    pairs = [(k, v) for k, v in parse_qsl((search or "").lstrip("?")) if k != key]
    if value is not None:
        pairs.append((key, str(value)))
    return "?" + urlencode(pairs) if pairs else ""


def trace_href(trace_id: str, page: str | None = None, **query_params) -> str:
    """``/trace/<id>[/<page>][?...]``; None values are left out of the query."""
    q = {k: v for k, v in query_params.items() if v is not None}
    return f"/trace/{trace_id}" + (f"/{page}" if page else "") + ("?" + urlencode(q) if q else "")


def store_href(page: str, **query_params) -> str:
    """``/<page>?...`` of a store page; None values are left out."""
    return f"/{page}?" + urlencode({k: v for k, v in query_params.items() if v is not None})


# ------------------------------------------------------------------------------------------ time window

def parse_window(params: dict, info: dict) -> tuple[int, int, str]:
    """The window ``[a, b)`` in epoch ns from ``t0``/``t1`` (ms since ``info['start_ns']``), clamped to
    ``[start_ns, end_ns]``; the whole span when absent. Returns (a, b, note); note says what was wrong with
    the URL."""
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


def ms_since(ns: int, origin: int) -> str:
    """A window bound as the URL holds it: ms since ``origin``, six decimals."""
    return f"{(ns - origin) / NS_PER_MS:.6f}"


def window_search(params: dict, info: dict, a: int | None, b: int | None, op: str | None) -> str:
    """The query string for a window (None: the whole trace) and selection, other params kept."""
    p = {k: v for k, v in params.items() if k not in ("t0", "t1", "op")}
    if a is not None and b is not None:
        p["t0"], p["t1"] = ms_since(a, info["start_ns"]), ms_since(b, info["start_ns"])
    if op:
        p["op"] = op
    return "?" + urlencode(p) if p else ""


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


EXPORT_ROUTE = "/export/<trace_id>/perfetto.json"


def export_href(trace_id: str, info: dict, a: int, b: int) -> str:
    """The Perfetto export of window ``[a, b)`` of a trace."""
    return f"/export/{trace_id}/perfetto.json?t0={ms_since(a, info['start_ns'])}&t1={ms_since(b, info['start_ns'])}"
