"""Operators of one trace: one row per operator name with its calls, CPU time, GPU time, kernels, TKLQT,
FLOPs, achieved GB/s and % of peak; selecting a row lists the operator's kernels and links to the
Timeline with the operator highlighted.

URL state: ``level`` ('leaf' default: the operators GPU work is attributed to, where FLOPs and bytes are
modelled; 'top': top-level operators) and ``op`` (the selected name).

Where the numbers come from (none is recomputed here):

- ``count``, ``cpu_ns``: every instance of the name (top-level instances at level 'top') and the sum of
  their durations (``timeline_data.op_cpu_times``; no analysis returns CPU time per operator).
- ``calls_gpu``, ``kernels``, ``gpu_union_ns`` (per instance the union of its GPU activities, summed),
  ``tklqt_ns``: the launch analysis, table ``per_leaf_op`` (level 'leaf') or
  ``per_op`` (level 'top').
- ``gflop``, ``gbps``, ``pct_peak`` (level 'leaf' only): the bandwidth analysis's ``per_signature`` rows
  of the name: FLOPs summed; GB/s and % of peak are the signatures' own values weighted by their
  ``gpu_ns`` (for one signature exactly the analysis's value; for several, GB/s equals summed bytes over
  summed GPU time). % of peak is each signature's bound side: ``pct_peak_flops`` when ``bound`` is
  'compute', else ``pct_peak_bw``. Unmodelled signatures are left out of these three columns.

Times are held in ns and shown in ms (µs for a kernel's mean) by the table's column formatter.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html

from ...analysis.summary import no_gpu_reason
from ...reports import timeline_data as td
from ...reports.operators import operator_table
from ...storage.store import open_store
from .. import urls
from ..widgets import grid, message, warning_lines

TITLE = "Operators"
TABLE_ID = "operators-table"
LEVELS = {"leaf": "leaf operators (where GPU work is attributed)", "top": "top-level operators"}
COLUMNS = [("name", "operator", "text"), ("count", "calls", "numeric"), ("cpu_ns", "CPU time (ms)", "ms"),
           ("calls_gpu", "calls with GPU work", "numeric"), ("kernels", "kernels", "numeric"),
           ("gpu_union_ns", "GPU time (ms)", "ms"), ("tklqt_ns", "TKLQT (ms)", "ms"),
           ("gflop", "GFLOP", "numeric"), ("gbps", "GB/s", "numeric"), ("pct_peak", "% of peak", "numeric")]


def detail(store, trace_id: str, name: str | None, level: str) -> list:
    """The selected operator's kernels, its signatures (level 'leaf') and the Timeline link."""
    if not name:
        return [html.P("Select an operator (click its row) to list its kernels.", className="ks-hint",
                       id="operators-hint")]
    k = td.op_kernels(store, trace_id, name, level)
    link = dcc.Link(f"Show {name} on the Timeline", id="operators-timeline-link",
                    href=urls.trace_href(trace_id, "timeline", op=name))
    out = [html.H3(f"Kernels of {name}"), html.P(link)]
    if k.empty:
        out.append(message(f"No GPU activity is attributed to {name} ({LEVELS[level]}).", "msg-op-no-kernels"))
        return out
    k["where"] = [f"GPU {d} stream {s}" for d, s in zip(k["device"], k["stream"])]
    out.append(grid(k, [("name", "kernel", "text"), ("kind", "kind", "text"), ("count", "count", "numeric"),
                        ("total_ns", "total (ms)", "ms"), ("mean_ns", "mean (µs)", "us"),
                        ("where", "stream", "text")], "operator-kernels", tooltips=("name",), page_size=50))
    return out


def content(store, trace_id: str, level: str, name: str | None) -> list:
    """The table, the analyses' warnings and the selection's detail for one level."""
    df, warnings = operator_table(store, trace_id, level)
    if df.empty:
        return [message("This trace has no CPU operators, so there is no operator table.", "msg-no-operators")]
    head = []
    if level == "top":
        head.append(html.P("FLOPs, GB/s and % of peak are modelled per leaf operator: switch to leaf operators "
                           "to see them.", className="ks-hint"))
    if df["kernels"].sum() == 0:
        head.append(message("No GPU activity is attributed to any operator in this trace "
                            f"({no_gpu_reason(store, trace_id)}): "
                            "GPU time, kernels and TKLQT are empty.", "msg-no-gpu"))
    tbl = grid(df, COLUMNS, TABLE_ID, filters=True, page_size=25, tooltips=("name",), selectable=True,
               selected=name if name in set(df["name"]) else None)
    return head + [html.P("TKLQT: total kernel launch-and-queue time (docs/metrics.md). Type in a column's "
                          "filter cell to filter, click a header to sort, click a row to select.",
                          className="ks-hint"), tbl] \
        + warning_lines(warnings) \
        + [html.Div(detail(store, trace_id, name, level), id="operators-detail")]


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    params = params or {}
    level = params.get("level") if params.get("level") in LEVELS else "leaf"
    return html.Div([
        dcc.Store(id="operators-trace", data=trace_id),
        html.H2("Operators"),
        dcc.RadioItems(id="operators-level", value=level, inline=True,
                       options=[{"label": f" {v}  ", "value": k} for k, v in LEVELS.items()]),
        html.Div(content(store, trace_id, level, params.get("op") or None), id="operators-content"),
    ])


def select(db_path, trace_id: str, cell: dict | None, level: str | None, search: str | None):
    """The row-click callback as a plain function (``cell``: the grid's ``cellClicked``, whose ``rowId`` is
    the operator name): (detail children, new search) or None."""
    params = urls.query(search)
    level = level if level in LEVELS else "leaf"
    if cell is None or not cell.get("rowId"):
        return None
    name = str(cell["rowId"])
    with open_store(db_path, read_only=True) as store:
        children = detail(store, trace_id, name, level)
    return children, urls.search_of({k: v for k, v in params.items() if k != "op"} | {"op": name}, quoted=True)


def relevel(db_path, trace_id: str, level: str, search: str | None):
    """The level callback as a plain function: (content children, new search), or None when the URL
    already shows that level."""
    params = urls.query(search)
    level = level if level in LEVELS else "leaf"
    if level == (params.get("level") if params.get("level") in LEVELS else "leaf"):
        return None  # the page already shows this level (the radio fires when the page is drawn)
    with open_store(db_path, read_only=True) as store:
        children = content(store, trace_id, level, params.get("op") or None)
    return children, urls.search_of(params | {"level": level}, quoted=True)


def register(app, db_path) -> None:
    @app.callback(Output("operators-detail", "children"), Output("url", "search", allow_duplicate=True),
                  Input(TABLE_ID, "cellClicked"), State("operators-level", "value"),
                  State("operators-trace", "data"), State("url", "search"), prevent_initial_call=True)
    def _operators_select(cell, level, trace_id, search):
        out = select(db_path, trace_id, cell, level, search)
        if out is None:
            raise dash.exceptions.PreventUpdate
        return out

    @app.callback(Output("operators-content", "children"), Output("url", "search", allow_duplicate=True),
                  Input("operators-level", "value"), State("operators-trace", "data"), State("url", "search"),
                  prevent_initial_call=True)
    def _operators_level(level, trace_id, search):
        out = relevel(db_path, trace_id, level, search)
        if out is None:
            raise dash.exceptions.PreventUpdate
        return out
