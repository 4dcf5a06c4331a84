"""Bandwidth page of one trace (``/trace/<ref>/bandwidth?sig=N``): the roofline of the bandwidth analysis'
operator signatures with the device's ceilings, the signature table (% of peak bandwidth and FLOP/s,
bound), modelled vs Nsight Compute measured bytes, the modelled share and the unmodelled operators.

State in the URL: ``sig`` = the selected signature (its row number in the analysis' ``per_signature``).
Clicking a point or a table row selects it: the point gets a ring, the row is highlighted, ``sig`` goes
into the URL, and opening that URL restores the selection."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

import dash
from dash import Input, Output, State, dcc, html

from ...reports.roofline import (
    SIGNATURE_COLUMNS,
    num,
    bandwidth_result,
    measured_vs_modelled,
    modelled_sentence,
    peaks_sentence,
    roofline_figure,
    signature_rows,
)
from ...storage.catalog import trace_name
from ...units import NS_PER_MS
from .. import params as P
from .common import count_text, message, table
from ...analysis.summary import no_gpu_reason

TITLE = "Bandwidth"
FIGURE_ID = "roofline-figure"
TABLE_ID = "bw-signatures"
SELECTED_ID = "bw-selected"


def with_param(search: str | None, key: str, value) -> str:
    """The query string ``search`` with ``key`` set to ``value`` (removed when None), other keys kept."""
    pairs = [(k, v) for k, v in parse_qsl((search or "").lstrip("?")) if k != key]
    if value is not None:
        pairs.append((key, str(value)))
    return "?" + urlencode(pairs) if pairs else ""


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


def highlight(sig: int | None) -> list[dict]:
    """The signature table's conditional style: the selected signature's row highlighted."""
    base = [{"if": {"state": "active"}, "backgroundColor": "#fef3c7", "border": "1px solid #f59e0b"}]
    if sig is None:
        return base
    return base + [{"if": {"filter_query": f"{{sig}} = {int(sig)}"}, "backgroundColor": "#fde68a",
                    "fontWeight": "600"}]


def selection_text(row: dict | None) -> list:
    """The selected signature in words (a row of the table's data), or a hint when none is selected."""
    if not row:
        return [html.P("Click a point of the roofline or a row of the table to select an operator signature.",
                       className="ks-hint")]
    def v(k, fmt, unit=""):
        return _fmt(row.get(k), fmt, unit)
    return [html.P([html.B(f"#{row['sig']} {row['name']}"), f" · shapes {row.get('input_dims') or '—'} · "
                    f"dtypes {row.get('input_types') or '—'}"]),
            html.P(f"{row['calls']:,} calls · {v('gpu_ms', ',.3f', ' ms')} GPU time "
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
    body += [html.P(modelled_sentence(s), id="bw-modelled"),
             html.P(peaks_sentence(s.get("device_peaks")), className="ks-hint", id="bw-peaks")]

    sig = r.tables.get("per_signature")
    rows = signature_rows(sig, s.get("gpu_ns"))
    selected = selected_signature(params, len(rows))
    if not len(rows):  # only unattributed GPU time (CUDA-graph replays): no signature, no figure, no table
        body.append(message("No GPU time is attributed to an operator signature, so there is no roofline to "
                            "draw (see the sentence above).", "msg-bw-nothing-modelled"))
    else:
        if not s.get("modelled_gpu_ns"):
            body.append(message("No operator with GPU time has a FLOP/byte rule (nothing modelled): the roofline "
                                "has no points; the unmodelled operators are listed below.",
                                "msg-bw-nothing-modelled"))
        # the figure and the table come together: the selection callback reads both
        body.append(dcc.Graph(id=FIGURE_ID, figure=roofline_figure(sig, s.get("device_peaks"), selected),
                              config={"displaylogo": False}))
    # the exact point coordinates (_x, _y) ride along in the table's data for the selection ring
    data = rows.assign(sig=rows["id"], _x=[num(v) for v in sig["intensity"]] if len(rows) else [],
                       _y=[num(v) for v in sig["achieved_tflops"]] if len(rows) else [])
    records = data.to_dict("records")
    if len(rows):
        body.append(html.Div(selection_text(records[selected] if selected is not None else None), id=SELECTED_ID))
        t = table(data, [("sig", "#", "numeric")] + SIGNATURE_COLUMNS, TABLE_ID, page_size=20,
                  style_data_conditional=highlight(selected),
                  tooltip_data=[{"name": rr["name"] or "", "input_dims": rr["input_dims"] or ""} for rr in records],
                  tooltip_duration=None)
        t.data = records  # table() keeps only the shown columns and id; keep _x, _y too
        body += [html.H3(f"Operator signatures ({len(rows)} by GPU time)"), t]

    mm = measured_vs_modelled(r)
    body.append(html.H3("Modelled vs measured bytes"))
    if len(mm):
        mm = mm.assign(gbps=[None if v is None else round(v, 1) for v in mm["measured_gbps"]],
                       ratio=[None if v is None else round(v, 3) for v in mm["modelled_over_measured"]])
        body.append(table(mm, [("signature", "#", "numeric"), ("name", "operator", "text"),
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
        u = un.assign(gpu_ms=[round(int(v) / NS_PER_MS, 3) for v in un["gpu_ns"]],
                      share_pct=[None if v is None or v != v else round(100 * v, 1) for v in un["share"]])
        body.append(table(u, [("name", "operator", "text"), ("calls", "calls", "numeric"),
                              ("gpu_ms", "GPU time (ms)", "numeric"), ("share_pct", "% of leaf GPU time", "numeric"),
                              ("reason", "why unmodelled", "text")], "bw-unmodelled"))
    else:
        body.append(message("Every operator with GPU time has a FLOP/byte rule.", "msg-bw-all-modelled"))
    if r.warnings:
        body.append(html.Div([html.P("⚠ " + w, className="ks-warning") for w in r.warnings], id="bw-warnings"))
    return html.Div(body)


def select(trigger: str | None, click_data, active_cell, rows: list[dict] | None, search: str | None):
    """The selection callback as a plain function. ``trigger``: the id of the input that fired (the figure
    or the table). Returns (figure patch, table style, selection text, url search); a click on a ceiling
    or outside the table changes nothing (``dash.no_update``)."""
    rows = rows or []
    sig = None
    if trigger == FIGURE_ID and click_data and click_data.get("points"):
        sig = click_data["points"][0].get("customdata")
    elif trigger == TABLE_ID and active_cell:
        sig = active_cell.get("row_id")
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
    return patch, highlight(int(sig)), selection_text(row), with_param(search, "sig", int(sig))


def register(app, db_path) -> None:
    @app.callback(Output(FIGURE_ID, "figure"), Output(TABLE_ID, "style_data_conditional"),
                  Output(SELECTED_ID, "children"), Output("url", "search", allow_duplicate=True),
                  Input(FIGURE_ID, "clickData"), Input(TABLE_ID, "active_cell"),
                  State(TABLE_ID, "data"), State("url", "search"), prevent_initial_call=True)
    def _select(click_data, active_cell, rows, search):
        return select(dash.ctx.triggered_id, click_data, active_cell, rows, search)

