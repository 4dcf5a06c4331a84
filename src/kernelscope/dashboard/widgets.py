"""Layout pieces shared by the pages: messages, headline numbers (KPIs), the launch headline, graphs,
warnings, the zoom filter of the time-axis pages, and tables.

Tables are AG Grids (``grid``). A column is ``(field, header, kind)``: ``text`` (left-aligned), ``numeric``,
or a duration held in the rows as integer ns and shown by one formatter (``ksNs`` in
``assets/kernelscope.js``): ``ms`` (3 decimals) or ``us`` (µs, 2 decimals). The rows keep the ns, so sorting
is numeric on the exact value; the text shown is the ns divided and rounded the way Python's ``round``
does. Filtering (``filters=True``) keeps the DataTable syntax: text columns match what they contain,
number columns take ``>100``, ``<=2.5``, ``!=0`` or a plain number, compared with the value as shown."""

from __future__ import annotations

import dash_ag_grid as dag
from dash import ClientsideFunction, Input, Output, dcc, html

from ..reports import launch as rl
from ..reports.missing import kpi_parts
from ..units import NS_PER_MS, NS_PER_US, ms_text

# -------------------------------------------------------------------------------------------- text

def message(text: str, msg_id: str, kind: str = "info") -> html.Div:
    """A sentence in place of a page or a figure (empty store, unknown trace, no GPU activity, ...)."""
    return html.Div(html.P(text), className=f"ks-message ks-{kind}", id=msg_id)


def pct_text(part, whole) -> str:
    if part is None or not whole:
        return ""
    return f"{100.0 * part / whole:.1f}%"


def count_text(n) -> str:
    return "—" if n is None else f"{int(n):,}"


def warning_lines(warnings, say=str) -> list[html.P]:
    """One '⚠ ...' line per warning (``say`` rewrites each first, e.g. ``reports.missing.shown``)."""
    return [html.P("⚠ " + say(w), className="ks-warning") for w in warnings]


def graph(graph_id: str, figure, **kwargs) -> dcc.Graph:
    """A Plotly figure without the Plotly logo in its mode bar."""
    return dcc.Graph(id=graph_id, figure=figure, config={"displaylogo": False, **kwargs.pop("config", {})},
                     **kwargs)


# -------------------------------------------------------------------------------------------- KPIs

def kpi(kid: str, label: str, raw, shown: str, extra: str = "", definition: str = "", **attrs) -> html.Div:
    """A headline number: id ``kpi-<kid>``, the raw value in ``data-value`` (int ns, a count, or the float
    as the analysis returned it; empty when null) so tests can compare it with the CLI's JSON; ``extra``
    under it (id ``kpi-<kid>-extra``); ``definition`` shows on hover; ``attrs``: more attributes of the value
    (data-*, title)."""
    value = "" if raw is None else str(raw)
    return html.Div([html.Div(label, className="ks-kpi-label"),
                     html.Div(shown, className="ks-kpi-value", id=f"kpi-{kid}", **{"data-value": value}, **attrs),
                     html.Div(extra, className="ks-kpi-extra", id=f"kpi-{kid}-extra")], className="ks-kpi",
                    title=definition)


def tklqt_kpis(ls: dict) -> list[html.Div]:
    """The launch headline as three numbers (Launch and Overview pages): the mean launch+queue time per
    kernel and q lead; TKLQT follows, labelled as the sum over kernels it is (it can exceed the trace many
    times over: 38.6 s on a 152 ms trace with ~253 kernels queued on average)."""
    q = ls.get("mean_queue_depth")
    mean = rl.mean_lq_ns(ls)
    return [
        kpi("mean_lq_ns", "mean launch+queue per kernel", mean,
            *kpi_parts(mean, ms_text, rl.NO_TERMS, "from its launch call's start to its start"),
            "TKLQT / kernels in the sum (a graph launch counts once)"),
        kpi("mean_queue_depth", "mean queue depth q", q,
            *kpi_parts(q, lambda v: f"{v:,.2f}", rl.NO_SPAN,
                       "" if q is None else ("GPU-bound (q ≥ 1)" if q >= 1 else "CPU-bound (q < 1)")),
            "launched-but-not-started kernels on average: TKLQT / GPU span (Little's law)"),
        kpi("tklqt_ns", f"TKLQT ({rl.tklqt_sum_label(ls)})", ls.get("tklqt_ns"), ms_text(ls.get("tklqt_ns")),
            "a sum, not wall time" + ("" if q is None else f": q = {rl.q_text(q)} = TKLQT / GPU span"),
            "sum of launch-and-queue time over kernels not launched by a graph, one term per graph launch"),
    ]


# -------------------------------------------------------------------------------------------- zoom

def zoom_filter(app, graph_id: str, store_id: str) -> None:
    """Keep a figure's x-range changes (and the double-click reset) in ``store_id``, dropping the rest
    (resize/autosize, y drags), in the browser (``kernelscope.zoomFilter`` in assets/kernelscope.js). A
    server callback on relayoutData itself would be superseded by the {"autosize": true} relayout Plotly
    emits right after a zoom, and the zoom's answer would be dropped."""
    app.clientside_callback(ClientsideFunction("kernelscope", "zoomFilter"), Output(store_id, "data"),
                            Input(graph_id, "relayoutData"), prevent_initial_call=True)


def zoom_relayout(zoom: dict | None) -> dict | None:
    """The browser-side zoom filter's output as the relayoutData it came from."""
    if not zoom:
        return None
    if zoom.get("autorange"):
        return {"xaxis.autorange": True}
    lo, hi = zoom["range"]
    return {"xaxis.range[0]": lo, "xaxis.range[1]": hi}


# -------------------------------------------------------------------------------------------- tables

#: Durations held as ns and shown in another unit: kind -> (ns per unit, decimals).
NS_UNITS = {"ms": (NS_PER_MS, 3), "us": (NS_PER_US, 2)}
#: DataTable's page size, kept: a table with more rows pages by this many unless told otherwise.
PAGE_SIZE = 250
MAX_COLUMN_PX = 520
NS_FORMATTER = {"function": "ksNs(params)"}
_NUMBER_FILTER = {"filter": "agTextColumnFilter",
                  "filterParams": {"textMatcher": {"function": "ksNumberMatch(params)"}},
                  "filterValueGetter": {"function": "ksFilterValue(params)"}}
_TEXT_FILTER = {"filter": "agTextColumnFilter", "filterParams": {"caseSensitive": True}}


def column(field: str, header: str, kind: str = "numeric", *, tooltip: bool = False, filters: bool = False) -> dict:
    """One AG Grid column definition (see the module docstring for ``kind``)."""
    col: dict = {"field": field, "headerName": header}
    if kind != "text":
        col["type"] = "rightAligned"
    if kind in NS_UNITS:
        per, digits = NS_UNITS[kind]
        col.update(valueFormatter=NS_FORMATTER, context={"nsPer": per, "digits": digits})
    if filters:
        col.update(_TEXT_FILTER if kind == "text" else _NUMBER_FILTER)
    if tooltip:
        col["tooltipField"] = field
    return col


def grid(df, columns: list[tuple[str, str, str]], grid_id: str, *, page_size: int = PAGE_SIZE,
         filters: bool = False, tooltips: tuple[str, ...] = (), keep: tuple[str, ...] = (),
         selectable: bool = False, selected=None, clickable: bool = False) -> dag.AgGrid:
    """A sortable table of ``df``. ``columns``: (field, header, kind). A column ``id`` in ``df`` becomes the
    row id (a click's ``cellClicked.rowId``); ``keep``: more fields the rows carry unshown (for callbacks).
    ``filters``: a filter cell under each header. ``tooltips``: fields whose full text shows on hover.
    ``selectable``: a click selects (highlights) the row; ``selected``: the row id selected when drawn.
    ``clickable``: the pointer shows rows open something. Pages by ``page_size`` rows when it has more."""
    fields = [f for f, _, _ in columns] + [f for f in keep if f in df.columns]
    if "id" in df.columns and "id" not in fields:
        fields.append("id")
    options: dict = {"domLayout": "autoHeight", "tooltipShowDelay": 350, "enableCellTextSelection": True,
                     "ensureDomOrder": True}
    if len(df) > page_size:
        options.update(pagination=True, paginationPageSize=page_size, paginationPageSizeSelector=False)
    if selectable:
        options["rowSelection"] = {"mode": "singleRow", "checkboxes": False, "enableClickSelection": True}
    kwargs = {}
    if "id" in fields:
        kwargs["getRowId"] = "ksRowId(params)"
    if selected is not None:
        kwargs["selectedRows"] = {"ids": [str(selected)]}
    return dag.AgGrid(
        id=grid_id,
        rowData=df[fields].to_dict("records"),
        columnDefs=[column(f, h, k, tooltip=f in tooltips, filters=filters) for f, h, k in columns],
        defaultColDef={"sortable": True, "floatingFilter": filters, "resizable": True,
                       "suppressHeaderMenuButton": True, "suppressFloatingFilterButton": True,
                       "maxWidth": MAX_COLUMN_PX, "cellDataType": False,
                       # a header wraps rather than clips when its sort arrow appears ("CPU time (…" after a click)
                       "wrapHeaderText": True, "autoHeaderHeight": True},
        dashGridOptions=options,
        columnSize="autoSize",
        className="ks-grid" + (" ks-clickable" if clickable else ""),
        **kwargs,
    )
