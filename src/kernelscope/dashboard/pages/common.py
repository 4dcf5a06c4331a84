"""Small layout pieces shared by the pages: messages, numbers with units, tables."""

from __future__ import annotations


from dash import dash_table, html

from ...units import ms_text  # noqa: F401  (pages import it from here)


def message(text: str, msg_id: str, kind: str = "info") -> html.Div:
    """A sentence in place of a page or a figure (empty store, unknown trace, no GPU activity, ...)."""
    return html.Div(html.P(text), className=f"ks-message ks-{kind}", id=msg_id)


def pct_text(part, whole) -> str:
    if part is None or not whole:
        return ""
    return f"{100.0 * part / whole:.1f}%"


def count_text(n) -> str:
    return "—" if n is None else f"{int(n):,}"


def table(df, columns: list[tuple[str, str, str]], table_id: str, **kwargs) -> dash_table.DataTable:
    """A sortable DataTable. ``columns``: (field, header with unit, 'text' | 'numeric'); text columns are
    left-aligned. A column ``id`` in ``df`` becomes the row id."""
    fields = [f for f, _, _ in columns]
    if "id" in df.columns and "id" not in fields:
        fields.append("id")  # DataTable row id: active_cell then carries row_id
    return dash_table.DataTable(
        id=table_id,
        columns=[{"id": f, "name": h, "type": t} for f, h, t in columns],
        data=df[fields].to_dict("records"),
        style_cell_conditional=[{"if": {"column_id": f}, "textAlign": "left"}
                                for f, _, t in columns if t == "text"],
        sort_action="native",
        style_table={"overflowX": "auto"},
        style_cell={"fontFamily": "system-ui, sans-serif", "fontSize": "13px", "padding": "4px 8px",
                    "maxWidth": "520px", "overflow": "hidden", "textOverflow": "ellipsis",
                    "whiteSpace": "nowrap"},
        style_header={"fontWeight": "600", "backgroundColor": "#f3f4f6"},
        **kwargs,
    )
