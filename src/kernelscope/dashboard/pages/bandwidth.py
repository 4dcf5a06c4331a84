"""Bandwidth page of one trace (``/trace/<ref>/bandwidth?sig=N``): the roofline of the bandwidth analysis'
operator signatures with the device's ceilings, the signature table (% of peak bandwidth and FLOP/s,
bound), modelled vs Nsight Compute measured bytes, the modelled share and the unmodelled operators.

State in the URL: ``sig`` = the selected signature (its row number in the analysis' ``per_signature``).
Clicking a point or a table row selects it: the point gets a ring, the row is selected (highlighted), ``sig``
goes into the URL, and opening that URL restores the selection. GPU times are held in ns and shown in ms by
the table's column formatter."""

from __future__ import annotations

import dash
from dash import Input, Output, State, html

from ...analysis.bandwidth import NO_SHAPES
from ...analysis.summary import no_gpu_reason
from ...reports.roofline import (
    SIGNATURE_COLUMNS,
    bandwidth_result,
    measured_vs_modelled,
    modelled_sentence,
    num,
    peaks_sentence,
    roofline_figure,
    signature_rows,
)
from ...storage.catalog import trace_name
from ...units import NS_PER_MS, ms_text
from .. import params as P
from ..urls import with_param
from ..widgets import count_text, graph, grid, message, warning_lines

TITLE = "Bandwidth"
FIGURE_ID = "roofline-figure"
TABLE_ID = "bw-signatures"
SELECTED_ID = "bw-selected"
#: The signature table's columns: the analysis' rows as ``reports.roofline`` shows them, GPU time in ns.
COLUMNS = [("sig", "#", "numeric")] + [("gpu_ns", h, "ms") if f == "gpu_ms" else (f, h, k)
                                       for f, h, k in SIGNATURE_COLUMNS]


def selected_signature(params: dict | None, n_signatures: int) -> int | None:
    """The ``sig`` URL parameter as a signature number in range, else None (a bad value selects nothing)."""
    n = P.integer(params or {}, "sig")
    return n if n is not None and n < n_signatures else None


def _kpi(key: str, label: str, shown: str, raw, definition: str) -> html.Div:
    """A headline number; ``data-value`` holds the analysis' raw value (empty when null)."""
    return html.Div([html.Div(label, className="ks-kpi-label"),
                     html.Div(shown, className="ks-kpi-value", id=f"bw-kpi-{key}",
                              **{"data-value": "" if raw is None else repr(raw)})],
                    className="ks-kpi", title=definition)


def _fmt(v, fmt: str, unit: str = "") -> str:
    return "—" if v is None else format(v, fmt) + unit


def selection(sig: int) -> dict:
    """The signature table's ``selectedRows``: the row of signature ``sig`` (row ids are signature numbers)."""
    return {"ids": [str(int(sig))]}


def selection_text(row: dict | None) -> list:
    """The selected signature in words (a row of the table's data), or a hint when none is selected."""
    if not row:
        return [html.P("Click a point of the roofline or a row of the table to select an operator signature.",
                       className="ks-hint")]
    def v(k, fmt, unit=""):
        return _fmt(row.get(k), fmt, unit)
    return [html.P([html.B(f"#{row['sig']} {row['name']}"), f" · shapes {row.get('input_dims') or '—'} · "
                    f"dtypes {row.get('input_types') or '—'}"]),
            html.P(f"{row['calls']:,} calls · {ms_text(row.get('gpu_ns'))} GPU time "
                   f"({v('share_pct', '.1f', '%')} of leaf GPU time) · intensity {v('intensity', ',.2f')} "
                   f"FLOP/byte · {v('achieved_gbps', ',.1f', ' GB/s')} ({v('pct_peak_bw', '.1f', '%')} of peak "
                   f"bandwidth) · {v('achieved_tflops', ',.3f', ' TFLOP/s')} ({v('pct_peak_flops', '.1f', '%')} of "
                   f"peak FLOP/s) · bound {row.get('bound') or '—'} · rule {row.get('rule') or '—'}",
                   id="bw-selected-numbers")]


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    r = bandwidth_result(store, trace_id)
    s = r.scalars
    name = trace_name(store, trace_id)
    body: list = [html.H2(f"Bandwidth and roofline: {name or trace_id}")]
    if not s.get("gpu_ns") and not s.get("unattributed_gpu_ns"):
        return html.Div(body + [message(
            f"This trace has no GPU activity attributed to operators ({no_gpu_reason(store, trace_id)}): there "
            "are no FLOPs, bytes or roofline to show.", "msg-bw-no-gpu")])
    share = s.get("modelled_share")
    body.append(html.Div([
        _kpi("modelled_share", "modelled share", _fmt(None if share is None else 100 * share, ".1f", "%"), share,
             "modelled_gpu_ns / gpu_ns: leaf-operator GPU time whose operator has a FLOP/byte rule"),
        _kpi("gpu_ns", "leaf-operator GPU time", _fmt((s.get("gpu_ns") or 0) / NS_PER_MS, ",.3f", " ms"),
             s.get("gpu_ns"), "sum over leaf-operator instances of the union of their GPU activity intervals"),
        _kpi("achieved_gbps", "achieved bandwidth", _fmt(s.get("achieved_gbps"), ",.1f", " GB/s"),
             s.get("achieved_gbps"), "modelled bytes / modelled GPU time"),
        _kpi("achieved_tflops", "achieved compute", _fmt(s.get("achieved_tflops"), ",.3f", " TFLOP/s"),
             s.get("achieved_tflops"), "modelled FLOPs / modelled GPU time / 1000"),
        _kpi("signatures", "signatures", count_text(s.get("signatures")), s.get("signatures"),
             "distinct (operator, input shapes, dtypes)"),
        _kpi("above_peak", "above 100% of a peak", count_text(s.get("above_peak")), s.get("above_peak"),
             "instances above a bandwidth or FLOP peak (see the warnings)"),
    ], className="ks-kpis", id="bw-kpis"))
    sig = r.tables.get("per_signature")
    rows = signature_rows(sig, s.get("gpu_ns"))
    selected = selected_signature(params, len(rows))
    # a trace without shapes: the message above its roofline names the cause and the fix, so this sentence
    # leaves them out (said once on the page)
    body += [html.P(modelled_sentence(s, say_no_shapes=not len(rows)), id="bw-modelled"),
             html.P(peaks_sentence(s.get("device_peaks")), className="ks-hint", id="bw-peaks")]
    said_no_shapes = False
    if not len(rows):  # only unattributed GPU time (CUDA-graph replays): no signature, no figure, no table
        body.append(message("No GPU time is attributed to an operator signature, so there is no roofline to "
                            "draw (see the sentence above).", "msg-bw-nothing-modelled"))
    else:
        said_no_shapes = s.get("shapes_recorded") is False
        if said_no_shapes:
            body.append(message("No operator has input shapes, so the roofline has no points: " + NO_SHAPES
                                + " The operators' GPU time is listed below.", "msg-bw-nothing-modelled"))
        elif not s.get("modelled_gpu_ns"):
            body.append(message("No operator with GPU time has a FLOP/byte rule (nothing modelled): the roofline "
                                "has no points; the unmodelled operators are listed below.",
                                "msg-bw-nothing-modelled"))
        # the figure and the table come together: the selection callback reads both
        body.append(graph(FIGURE_ID, roofline_figure(sig, s.get("device_peaks"), selected)))
    if len(rows):
        # the exact point coordinates (_x, _y) ride along in the table's rows for the selection ring
        data = rows.drop(columns="gpu_ms").assign(
            sig=rows["id"], gpu_ns=[int(v) for v in sig["gpu_ns"]], _x=[num(v) for v in sig["intensity"]],
            _y=[num(v) for v in sig["achieved_tflops"]])
        t = grid(data, COLUMNS, TABLE_ID, page_size=20, tooltips=("name", "input_dims"), keep=("_x", "_y"),
                 selectable=True, selected=selected)
        body.append(html.Div(selection_text(t.rowData[selected] if selected is not None else None), id=SELECTED_ID))
        body += [html.H3(f"Operator signatures ({len(rows)} by GPU time)"), t]

    mm = measured_vs_modelled(r)
    body.append(html.H3("Modelled vs measured bytes"))
    if len(mm):
        mm = mm.assign(gbps=[None if v is None else round(v, 1) for v in mm["measured_gbps"]],
                       ratio=[None if v is None else round(v, 3) for v in mm["modelled_over_measured"]])
        body.append(grid(mm, [("signature", "#", "numeric"), ("name", "operator", "text"),
                               ("measured_calls", "calls measured", "numeric"),
                               ("measured_bytes", "measured DRAM bytes (ncu)", "numeric"),
                               ("gbps", "measured GB/s", "numeric"),
                               ("ratio", "modelled / measured bytes", "numeric")], "bw-measured"))
        body.append(html.P("Nsight Compute flushes caches and locks clocks by default: its bytes can exceed the "
                           "model's minimum (cache flush) or fall below it (data left in L2).", className="ks-hint"))
    else:
        body.append(message("No Nsight Compute DRAM bytes are stored for this trace's kernels (ingest an ncu CSV "
                            "with dram__bytes_read.sum/dram__bytes_write.sum to compare).", "msg-bw-no-measured"))

    un = r.tables.get("unmodelled")
    body.append(html.H3("Unmodelled operators"))
    if un is not None and len(un):
        u = un.assign(share_pct=[None if v is None or v != v else round(100 * v, 1) for v in un["share"]])
        body.append(grid(u, [("name", "operator", "text"), ("calls", "calls", "numeric"),
                             ("gpu_ns", "GPU time (ms)", "ms"), ("share_pct", "% of leaf GPU time", "numeric"),
                             ("reason", "why unmodelled", "text")], "bw-unmodelled"))
    else:
        body.append(message("Every operator with GPU time has a FLOP/byte rule.", "msg-bw-all-modelled"))
    # the no-shapes warning is the message above the roofline: not said again at the bottom
    warnings = [w for w in r.warnings if not (said_no_shapes and w == NO_SHAPES)]
    if warnings:
        body.append(html.Div(warning_lines(warnings), id="bw-warnings"))
    return html.Div(body)


def select(trigger: str | None, click_data, cell, rows: list[dict] | None, search: str | None):
    """The selection callback as a plain function. ``trigger``: the id of the input that fired (the figure,
    or the table with ``cell``, its ``cellClicked``). Returns (figure patch, the table's selected rows,
    selection text, url search); a click on a ceiling or outside the table changes nothing
    (``dash.no_update``)."""
    rows = rows or []
    sig = None
    if trigger == FIGURE_ID and click_data and click_data.get("points"):
        sig = click_data["points"][0].get("customdata")
    elif trigger == TABLE_ID and cell:
        sig = cell.get("rowId")
    by_sig = {r["sig"]: r for r in rows}
    if isinstance(sig, list):
        sig = sig[0] if sig else None
    if sig is None or int(sig) not in by_sig:
        return dash.no_update, dash.no_update, dash.no_update, dash.no_update
    row = by_sig[int(sig)]
    patch = dash.Patch()
    on_plot = row.get("_x") is not None and row.get("_y") is not None and row["_x"] > 0 and row["_y"] > 0
    patch["data"][0]["x"] = [row["_x"]] if on_plot else []
    patch["data"][0]["y"] = [row["_y"]] if on_plot else []
    return patch, selection(int(sig)), selection_text(row), with_param(search, "sig", int(sig))


def register(app, db_path) -> None:
    @app.callback(Output(FIGURE_ID, "figure"), Output(TABLE_ID, "selectedRows"),
                  Output(SELECTED_ID, "children"), Output("url", "search", allow_duplicate=True),
                  Input(FIGURE_ID, "clickData"), Input(TABLE_ID, "cellClicked"),
                  State(TABLE_ID, "rowData"), State("url", "search"), prevent_initial_call=True)
    def _select(click_data, cell, rows, search):
        return select(dash.ctx.triggered_id, click_data, cell, rows, search)

