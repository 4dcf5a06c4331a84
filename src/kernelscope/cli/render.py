"""How the CLI prints: an analysis Result, a DataFrame and a streamed SQL result, as an aligned text table, JSON
or CSV. Commands decide what to print; this module decides how it looks."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import click

from ..units import NS_PER_MS, NS_PER_S, NS_PER_US


def human_ns(ns: Any) -> str:
    """Nanoseconds in the largest unit that keeps them at or above 1 (s, ms, us), three decimals; "" for
    anything but a number."""
    if ns is None or isinstance(ns, bool) or not isinstance(ns, (int, float)):
        return ""
    a = abs(ns)
    if a >= NS_PER_S:
        return f"{ns / NS_PER_S:.3f} s"
    if a >= NS_PER_MS:
        return f"{ns / NS_PER_MS:.3f} ms"
    if a >= NS_PER_US:
        return f"{ns / NS_PER_US:.3f} us"
    return f"{ns} ns"


def _flatten(prefix: str, value: Any, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        if not value:
            out.append((prefix, "none"))
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, out)
    else:
        out.append((prefix, value))


def cell(value: Any, width: int = 70) -> str:
    """One table cell: '-' for missing, floats as 4 significant digits below 1 and with thousands and one
    decimal above, cut to ``width`` characters with '...'."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        text = f"{value:.4g}" if abs(value) < 1 else f"{value:,.1f}"
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        text = str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def _distinct_cells(values: list, width: int = 70) -> list[str]:
    """``cell(v, width)`` of each value, but values that differ and would be cut to the same text (kernel names
    that share their first 70 characters: hipBLASLt's Cijk_..._MI16x16x1_SN_..., CUTLASS templates) are shown
    by their head and the stretch where they first differ (Cijk_Alik_Bljk_BBS_BH...TLDS1_ULSGRO1_USL1_UIO...)."""
    cut = [cell(v, width) for v in values]
    full: dict[str, set[str]] = {}
    for v, c in zip(values, cut):
        if isinstance(v, str) and c.endswith("..."):
            full.setdefault(c, set()).add(v.replace("\n", " "))
    head, back = 20, 8
    room = width - head - 6
    shown: dict[str, str] = {}
    for group in full.values():
        if len(group) < 2:
            continue
        ordered = sorted(group)  # a value's nearest neighbours here share its longest prefix with any other
        for k, text in enumerate(ordered):
            p = max(len(os.path.commonprefix([text, o])) for o in ordered[max(0, k - 1):k + 2] if o != text)
            start = max(head, p - back)
            shown[text] = text[:head] + "..." + text[start:start + room] + ("..." if start + room < len(text) else "")
    return [shown.get(v.replace("\n", " "), c) if isinstance(v, str) else c for v, c in zip(values, cut)]


def _aligned(vals, widths, numeric) -> str:
    """One line of a text table: numeric columns right-aligned, others left-aligned, two spaces apart."""
    return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()


#: Columns that hold sentences (a finding's message, why a number is missing): a text table shows them whole,
#: each under its row, wrapped to the terminal, where any other cell is cut at 70 characters.
PROSE_COLUMNS = ("message", "note")


def text_table(df, width: int | None = None) -> str:
    """A DataFrame as an aligned text table with a header and a rule; "(no rows)" when empty. A prose column
    (PROSE_COLUMNS) is not a column there: its text follows each row whole, indented, wrapped to ``width``
    (default: the terminal's, else 120), its name under the header."""
    import shutil
    import textwrap

    from ..analysis.result import table_records

    rows = table_records(df)
    cols = [str(c) for c in df.columns]
    if not rows:
        return "(no rows)"
    prose = [c for c in cols if c in PROSE_COLUMNS]
    cols = [c for c in cols if c not in prose]
    cells = [list(t) for t in zip(*(_distinct_cells([r[c] for r in rows]) for c in cols))] if cols else \
        [[] for _ in rows]
    numeric = [all(isinstance(r[c], (int, float)) or r[c] is None for r in rows) for c in cols]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    room = max(40, (width or shutil.get_terminal_size((120, 24)).columns) - 4)
    out = [_aligned(cols, widths, numeric)] + [f"    {c}" for c in prose]
    out.append(_aligned(["-" * w for w in widths], widths, numeric))
    for r, row in zip(rows, cells):
        out.append(_aligned(row, widths, numeric))
        for c in prose:
            if r[c] is not None and str(r[c]).strip():
                out.extend("    " + line for line in textwrap.wrap(str(r[c]), room, break_on_hyphens=False))
    return "\n".join(out)


def emit_frame(df, fmt: str) -> None:
    """One DataFrame: JSON list of row objects, CSV with a header, or an aligned text table."""
    import json

    from ..analysis.result import table_records

    if fmt == "json":
        click.echo(json.dumps(table_records(df), indent=2, allow_nan=False))
    elif fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
    else:
        click.echo(text_table(df))


#: Rows of each table the text form of a whole Result shows (``--table NAME`` and the csv/json forms show all).
TEXT_TABLE_ROWS = 50


def emit_result(result, fmt: str, table: str | None) -> None:
    """An analysis Result: JSON object, CSV (scalars as key,value rows, or one --table), or text."""
    import pandas as pd

    if table is not None:
        emit_frame(result.table(table), fmt)
        return
    if fmt == "json":
        click.echo(result.to_json())
        return
    flat: list[tuple[str, Any]] = []
    _flatten("", result.to_dict() | {"tables": None, "definition": None}, flat)
    scalar_keys = set(result.scalars) | {"trust"}
    scalars = [(k, v) for k, v in flat if k.split(".")[0].split("[")[0] in scalar_keys]
    if fmt == "csv":
        click.echo(pd.DataFrame(scalars, columns=["key", "value"]).to_csv(index=False), nl=False)
        return
    width = max((len(k) for k, _ in scalars), default=0)
    click.echo(f"{result.name}")
    for w in result.warnings:  # the reason first: a trace without telemetry gave 127 lines of empty power tables
        click.echo(f"warning: {w}", err=True)  # with why at the bottom
    notes = {}
    if result.name == "launch":  # TKLQT is a sum over kernels: the per-kernel mean and q lead (issue 11)
        from ..reports.launch import tklqt_lead, tklqt_sum_label

        click.echo(f"  {tklqt_lead(result.scalars)}")
        notes["tklqt_ns"] = tklqt_sum_label(result.scalars)
    for key, value in scalars:
        human = human_ns(value) if key.endswith("_ns") else ""
        human = ", ".join(x for x in (human, notes.get(key, "")) if x)
        click.echo(f"  {key.ljust(width)}  {cell(value, 100)}" + (f"  ({human})" if human else ""))
    for name, df in result.tables.items():
        click.echo(f"\n{name}")
        click.echo(text_table(df.head(TEXT_TABLE_ROWS)))
        if len(df) > TEXT_TABLE_ROWS:  # a trace of 2,000 annotations printed 2,000 phase rows to the terminal
            click.echo(f"... {len(df) - TEXT_TABLE_ROWS:,} more rows of {len(df):,}: --table {name} prints them "
                       "all (with --format csv or json for a file)")


# ------------------------------------------------------------------------------------ streamed SQL rows


def _sql_rows(batch):
    """Rows of an Arrow batch as tuples of plain Python values (lists stay whole lists)."""
    return zip(*[col.to_pylist() for col in batch.columns]) if batch.num_columns else iter(())


def _sql_cell_text(value: Any) -> str:
    """A table cell (a json_safe value) in full: lists and structs as JSON text, others as tables show them."""
    import json

    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return cell(value, width=sys.maxsize)


def _sql_csv_value(value: Any) -> Any:
    import json

    from ..analysis.result import json_safe

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (list, tuple, dict)):  # the whole list, as JSON text
        return json.dumps(json_safe(value), ensure_ascii=False)
    return value


def emit_sql(q, fmt: str, block_rows: int = 2000) -> None:
    """Stream a query's result: JSON (a list of row objects), CSV with a header, or an aligned table whose
    column widths come from its first ``block_rows`` rows. Every value is printed in full."""
    import csv
    import io
    import json

    from ..analysis.result import json_safe

    cols = q.columns
    out = sys.stdout
    if fmt == "json":
        n = 0
        for batch in q.batches():
            for row in _sql_rows(batch):
                text = json.dumps({c: json_safe(v) for c, v in zip(cols, row)}, indent=2, allow_nan=False,
                                  ensure_ascii=False)
                out.write(("[\n" if n == 0 else ",\n") + "\n".join("  " + line for line in text.split("\n")))
                n += 1
        out.write("\n]\n" if n else "[]\n")
        return
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if cols:
            writer.writerow(cols)
        for batch in q.batches():
            for row in _sql_rows(batch):
                writer.writerow([_sql_csv_value(v) for v in row])
            out.write(buf.getvalue())
            buf.seek(0)
            buf.truncate()
        out.write(buf.getvalue())
        return
    widths: list[int] | None = None
    numeric: list[bool] = []
    block: list[tuple] = []

    def flush(rows):
        nonlocal widths, numeric
        cells = [[_sql_cell_text(v) for v in row] for row in rows]
        if widths is None:
            widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
            numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows)
                       for i in range(len(cols))]
            out.write(_aligned(cols, widths, numeric) + "\n"
                      + _aligned(["-" * w for w in widths], widths, numeric) + "\n")
        for r in cells:
            out.write(_aligned(r, widths, numeric) + "\n")

    for batch in q.batches():
        for row in _sql_rows(batch):
            block.append(tuple(json_safe(v) for v in row))
            if len(block) >= block_rows:
                flush(block)
                block = []
    if block:
        flush(block)
    if widths is None:
        out.write("(no rows)\n")
