"""Compare page over the store (``/compare?a=<ref>&b=<ref>`` or ``/compare?sweep_a=S&sweep_b=T&by=batch``):
two traces or two sweeps side by side through the diff analysis: headline metric changes, kernel groups
with count/time deltas (largest |delta| first), added and removed groups.

The choice lives in the URL: picking in the dropdowns writes it (trace ids, or the sweep names and
``by``), and opening such a URL renders the same comparison. A trace dropdown switches to comparing
traces, a sweep or ``by`` dropdown to comparing sweeps."""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from ...analysis import cache
from ...errors import KernelscopeError, TraceNotFound, UsageError
from ...reports.compare import group_rows, groups_figure, headline_figure, headline_rows
from ...storage import catalog
from ...storage.queries import resolve_trace
from ...storage.store import open_store
from .. import urls
from ..urls import search_of
from ..widgets import graph, grid, message, warning_lines

TITLE = "Compare"
RESULT_ID = "compare-result"
TRACE_INPUTS = ("compare-a", "compare-b")
SWEEP_INPUTS = ("compare-sweep-a", "compare-sweep-b", "compare-by")
TOP_GROUPS = 100


def options(store) -> dict:
    """Dropdown options: ``traces`` (label 'name · id', value trace id, newest first by name), ``sweeps``
    (values of the ``sweep`` label) and ``labels`` (keys of numeric labels, for ``by``)."""
    tr = catalog.trace_choices(store)
    return {"traces": [{"label": f"{n or t} · {t}", "value": t} for t, n in zip(tr["trace_id"], tr["name"])],
            "sweeps": [{"label": s, "value": s} for s in catalog.sweep_names(store)],
            "labels": [{"label": k, "value": k} for k in catalog.numeric_label_keys(store)]}


def choice(trigger: str | None, a, b, sweep_a, sweep_b, by) -> dict:
    """The URL parameters for the dropdowns' values: a trace dropdown that fired picks traces mode
    (``a``, ``b``), a sweep or ``by`` dropdown sweeps mode (``sweep_a``, ``sweep_b``, ``by``) once a sweep
    is chosen (``by`` alone pairs nothing: the traces stay); empty values are left out."""
    if trigger in SWEEP_INPUTS and (sweep_a or sweep_b):
        p = {"sweep_a": sweep_a, "sweep_b": sweep_b, "by": by or "batch"}
    else:
        p = {"a": a, "b": b}
    return {k: v for k, v in p.items() if v}


def render(store, params: dict | None) -> list:
    """The comparison the URL parameters ask for (children of the result div), or a sentence saying what
    is missing or wrong."""
    p = params or {}
    try:
        if p.get("sweep_a") or p.get("sweep_b"):
            if not (p.get("sweep_a") and p.get("sweep_b")):
                return [message("Pick two sweeps (A and B) to compare them point by point.", "msg-compare-pick")]
            by = p.get("by") or "batch"
            r = cache.analysis(store, "diff", None, by=by, sweep=p["sweep_a"], sweep_b=p["sweep_b"])
            title = f"Sweep {p['sweep_a']} (A) vs sweep {p['sweep_b']} (B), paired by {by}"
        else:
            if not (p.get("a") and p.get("b")):
                return [message("Pick two traces (A = before, B = after), or two sweeps, to compare them.",
                                "msg-compare-pick")]
            a, b = resolve_trace(store, p["a"]), resolve_trace(store, p["b"])
            r = cache.analysis(store, "diff", [a, b])
            names = catalog.trace_names(store, [a, b])
            title = f"{names.get(a) or a} (A, {a}) vs {names.get(b) or b} (B, {b})"
    except TraceNotFound as exc:
        return [message(f"Cannot compare: {exc}", "msg-compare-error", "error")]
    except (UsageError, KernelscopeError) as exc:
        return [message(f"Cannot compare: {exc}", "msg-compare-error", "error")]
    return _result(r, title)


def _result(r, title: str) -> list:
    s = r.scalars
    head, groups = r.tables["headline"], r.tables["groups"]
    out: list = [html.H3(title, id="compare-title"),
                 html.P(f"{s.get('matched_groups', 0):,} matched groups, {s.get('added_groups', 0):,} added (only "
                        f"in B), {s.get('removed_groups', 0):,} removed (only in A). Matching: "
                        f"{r.trust.get('matching', '')}.", id="compare-counts")]
    if s.get("mode") == "sweeps":
        out.append(html.P("Pairs: " + ", ".join(f"{s['by']}={p['label']}: {p['trace_a']} vs {p['trace_b']}"
                                                for p in s.get("pairs") or []), className="ks-hint"))
    hr = headline_rows(head)
    cols = ([("label", s.get("by") or "label", "numeric")] if "label" in hr.columns else []) + [
        ("metric", "metric", "text"), ("A", "A", "text"), ("B", "B", "text"), ("delta", "B − A", "text"),
        ("delta_pct", "change (%)", "numeric")]
    out.append(html.Div([
        html.Div([grid(hr, cols, "compare-headline", page_size=24)], className="ks-column"),
        html.Div([graph("compare-headline-figure", headline_figure(head, s.get("by")))], className="ks-column"),
    ], className="ks-columns"))
    if len(groups):
        out.append(graph("compare-groups-figure", groups_figure(groups)))
    gcols = ([("label", s.get("by") or "label", "numeric")] if "label" in groups.columns else []) + [
        ("level", "matched by", "text"), ("key", "group", "text"), ("status", "status", "text"),
        ("count_a", "count A", "numeric"), ("count_b", "count B", "numeric"), ("time_a_ms", "time A (ms)", "numeric"),
        ("time_b_ms", "time B (ms)", "numeric"), ("delta_ms", "B − A (ms)", "numeric"),
        ("delta_pct", "change (%)", "numeric"), ("largest_a", "largest in A", "text"),
        ("largest_b", "largest in B", "text")]
    matched = group_rows(groups, "matched", TOP_GROUPS)
    n_matched = int((groups["status"] == "matched").sum())
    out.append(html.H3(f"Matched groups ({n_matched:,}" + (f", the {TOP_GROUPS} largest changes shown)"
                                                            if n_matched > TOP_GROUPS else ")")))
    out.append(grid(matched, gcols, "compare-matched", page_size=25) if len(matched) else
               message("No kernel group is in both traces.", "msg-compare-no-matched"))
    for status, words in (("added", "Added (only in B)"), ("removed", "Removed (only in A)")):
        rows = group_rows(groups, status, TOP_GROUPS)
        out.append(html.H3(f"{words}: {int((groups['status'] == status).sum()):,} groups"))
        out.append(grid(rows, gcols, f"compare-{status}", page_size=25) if len(rows) else
                   html.P(f"None: every kernel group of {'B' if status == 'added' else 'A'} is matched.",
                          id=f"msg-compare-no-{status}"))
    out += warning_lines(r.warnings)
    return out


def layout(store, params: dict | None = None) -> html.Div:
    p = params or {}
    opts = options(store)
    body: list = [html.H2("Compare two traces or two sweeps")]
    if len(opts["traces"]) < 2:
        return html.Div(body + [message(f"Comparing needs at least two traces; this store has "
                                        f"{len(opts['traces'])}. Ingest another trace with `kernelscope ingest`.",
                                        "msg-compare-few")])
    sweep_mode = bool(p.get("sweep_a") or p.get("sweep_b"))

    def ref(key):  # a trace reference in the URL shown as the trace id the dropdown knows
        try:
            return resolve_trace(store, p[key]) if p.get(key) else None
        except KernelscopeError:
            return None
    dd = {"clearable": True, "style": {"minWidth": "320px"}}
    body.append(html.Div([
        html.Div([html.Span("Traces: A ", className="ks-hint"),
                  dcc.Dropdown(id="compare-a", options=opts["traces"], value=None if sweep_mode else ref("a"),
                               placeholder="trace A (before)", **dd),
                  html.Span(" B ", className="ks-hint"),
                  dcc.Dropdown(id="compare-b", options=opts["traces"], value=None if sweep_mode else ref("b"),
                               placeholder="trace B (after)", **dd)],
                 className="ks-row"),
        html.Div([html.Span("or sweeps: A ", className="ks-hint"),
                  dcc.Dropdown(id="compare-sweep-a", options=opts["sweeps"], value=p.get("sweep_a"),
                               placeholder="sweep A", **dd),
                  html.Span(" B ", className="ks-hint"),
                  dcc.Dropdown(id="compare-sweep-b", options=opts["sweeps"], value=p.get("sweep_b"),
                               placeholder="sweep B", **dd),
                  html.Span(" paired by ", className="ks-hint"),
                  dcc.Dropdown(id="compare-by", options=opts["labels"], value=p.get("by") or "batch",
                               clearable=False, style={"minWidth": "140px"})],
                 className="ks-row"),
    ], id="compare-controls"))
    if not opts["sweeps"]:
        body.append(html.P("No trace carries a sweep label: label traces `sweep=NAME batch=N` to compare sweeps.",
                           className="ks-hint", id="msg-compare-no-sweeps"))
    body.append(dcc.Loading(html.Div(render(store, p), id=RESULT_ID)))
    return html.Div(body)


PARAM_OF = {"compare-a": "a", "compare-b": "b", "compare-sweep-a": "sweep_a", "compare-sweep-b": "sweep_b",
            "compare-by": "by"}


def changed(trigger: str | None, value, search: str | None) -> bool:
    """Whether the dropdown that fired holds something other than the URL already says (a dropdown may
    report its value when it mounts; that must not replace the comparison the URL opened). An absent or
    empty ``by`` reads as ``batch`` (Dash empties a dropdown whose value is none of its options: ``batch``
    in a store without that label); empty and absent are the same."""
    key = PARAM_OF.get(trigger or "")
    if key is None:
        return False
    params = urls.query(search)
    if key == "by":
        return (value or "batch") != (params.get(key) or "batch")
    return (value or None) != params.get(key)


def update(db_path, trigger: str | None, a, b, sweep_a, sweep_b, by, search: str | None = None):
    """The dropdown callback as a plain function: (result children, url search), or ``dash.no_update``
    twice when the dropdown that fired agrees with the URL (``changed``)."""
    if not changed(trigger, {"compare-a": a, "compare-b": b, "compare-sweep-a": sweep_a,
                             "compare-sweep-b": sweep_b, "compare-by": by}.get(trigger or ""), search):
        return dash.no_update, dash.no_update
    params = choice(trigger, a, b, sweep_a, sweep_b, by)
    try:
        with open_store(db_path, read_only=True) as store:
            children = render(store, params)
    except KernelscopeError as exc:
        children = [message(f"Cannot read the store: {exc}.", "msg-store-error", "error")]
    return children, search_of(params)


def register(app, db_path) -> None:
    @app.callback(Output(RESULT_ID, "children"), Output("url", "search", allow_duplicate=True),
                  *[Input(i, "value") for i in TRACE_INPUTS + SWEEP_INPUTS], State("url", "pathname"),
                  State("url", "search"), prevent_initial_call=True)
    def _update(a, b, sweep_a, sweep_b, by, pathname, search):
        if (pathname or "").rstrip("/") != "/compare":
            return dash.no_update, dash.no_update
        return update(db_path, dash.ctx.triggered_id, a, b, sweep_a, sweep_b, by, search)
