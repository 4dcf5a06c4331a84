"""The tables' duration formatter and sorting in a real headless Chromium (the ``page`` fixture): a column
holding integer ns shows exactly Python's ``round(ns / 1e6, 3)`` (µs: ``round(ns / 1e3, 2)``) as JavaScript
writes that number, ties included, in the formatter itself and in the traces table's real cells; a click on
a duration column's header sorts the rows by the ns they hold, not by their text."""

from __future__ import annotations

import random
from decimal import Decimal

import pandas as pd

from kernelscope.storage.queries import list_traces
from kernelscope.storage.store import open_store

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the page fixture skips these tests then
    expect = None

_ROWS = "#traces-table .ag-center-cols-container .ag-row"
_FORMAT = """(args) => args.values.map(v => window.dashAgGridFunctions.ksNs(
    {value: v, colDef: {context: {nsPer: args.per, digits: args.digits}}}))"""


def js_number(x: float | None) -> str:
    """How JavaScript's String() writes a float (what a table cell shows); '' for null."""
    if x is None:
        return ""
    if x == 0:
        return "0"
    text = format(Decimal(repr(float(x))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _values() -> list[int]:
    rng = random.Random(12)
    ties = [62_500 * k for k in range(1, 200, 2)]  # k/16 ms: exact binary halves, Python rounds them to even
    halves = [1000 * k + 500 for k in range(0, 3000)]  # 0.0005 ms off a 3-decimal value, not exact in binary
    wide = [rng.randrange(0, 10**12) for _ in range(2000)] + [rng.randrange(-10**9, 0) for _ in range(200)]
    return ties + halves + wide + [0, 1, 999, 1_000_000, 2**52]


def test_the_duration_formatter_is_pythons_round(page, base_url):
    page.goto(base_url + "/")
    page.wait_for_selector("#traces-table .ag-cell")
    values = _values()
    for per, digits in ((1_000_000, 3), (1000, 2)):
        got = page.evaluate(_FORMAT, {"values": values, "per": per, "digits": digits})
        want = [js_number(round(v / per, digits)) for v in values]
        bad = [(v, g, w) for v, g, w in zip(values, got, want) if g != w]
        assert not bad, bad[:10]
    means = [v / 7 for v in values[:500]]  # a mean in ns is a float
    got = page.evaluate(_FORMAT, {"values": means, "per": 1000, "digits": 2})
    assert got == [js_number(round(v / 1000, 2)) for v in means]
    assert page.evaluate(_FORMAT, {"values": [None], "per": 1_000_000, "digits": 3}) == [""]
    assert page.console_errors == []


def test_traces_table_cells_and_numeric_sort(page, base_url, dash_store):
    with open_store(dash_store.db, read_only=True) as store:
        ref = list_traces(store).set_index("trace_id")["gpu_span_ns"]
    page.goto(base_url + "/")
    rows = page.locator(_ROWS)
    expect(rows).to_have_count(len(ref))

    def shown() -> list[tuple[str, str]]:
        return [(r.get_attribute("row-id"), r.locator(".ag-cell[col-id='gpu_span_ns']").inner_text())
                for r in rows.all()]

    for tid, text in shown():
        span = ref[tid]
        assert text == ("" if pd.isna(span) else js_number(round(int(span) / 1e6, 3))), tid
    header = page.locator("#traces-table [role=columnheader][col-id='gpu_span_ns']")
    header.click()  # ascending: nulls first, then by the ns held
    expect(header).to_have_attribute("aria-sort", "ascending")
    with_span = ref.dropna().astype("int64").sort_values(kind="stable")
    order = [tid for tid, _ in shown()]
    assert order[len(ref) - len(with_span):] == list(with_span.index)
    assert set(order[:len(ref) - len(with_span)]) == set(ref[ref.isna()].index)
    header.click()
    expect(header).to_have_attribute("aria-sort", "descending")
    assert [tid for tid, _ in shown()][:len(with_span)] == list(with_span.index[::-1])
    # the sort arrow takes room from the header: its text wraps, it is not clipped to "GPU span (…"
    clipped = page.eval_on_selector_all("#traces-table .ag-header-cell-text",
                                        "els => els.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)")
    assert clipped == []
    assert page.console_errors == []


def test_a_click_on_the_lower_half_of_the_last_row_opens_it(page, base_url):
    """A table wider than the window has a horizontal scrollbar; where scrollbars overlay the page (headless
    Chromium, macOS by default) AG Grid lays it, invisible, over the last row's lower 16 px, and it took the
    click: the last trace of the traces table did not open (on HTA's V100 trace, the one just ingested)."""
    page.set_viewport_size({"width": 700, "height": 700})  # narrower than the table: it scrolls sideways
    try:
        page.goto(base_url + "/")
        page.wait_for_selector(_ROWS)
        assert page.evaluate("() => { const v = document.querySelector('#traces-table .ag-center-cols-viewport');"
                             " return v.scrollWidth > v.clientWidth; }")
        last = page.locator(f"{_ROWS}[row-index]").last
        last.scroll_into_view_if_needed()
        row_id = last.get_attribute("row-id")
        box = last.bounding_box()
        page.mouse.click(box["x"] + 60, box["y"] + box["height"] * 0.8)
        page.wait_for_url(f"**/trace/{row_id}", timeout=30_000)
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})
    assert page.console_errors == []


def test_a_trace_opened_from_low_on_the_list_shows_its_page_from_the_top(page, base_url):
    """The traces list scrolled down to its last row: the row's overview opens at the top of the window, its
    tabs in view (it opened at the list's scroll position, below its tabs and KPIs)."""
    page.set_viewport_size({"width": 1400, "height": 400})  # the list is taller than the window
    try:
        page.goto(base_url + "/")
        page.wait_for_selector(_ROWS)
        last = page.locator(f"{_ROWS}[row-index]").last
        last.scroll_into_view_if_needed()
        assert page.evaluate("() => window.scrollY") > 100
        row_id = last.get_attribute("row-id")
        box = last.bounding_box()
        page.mouse.click(box["x"] + 60, box["y"] + box["height"] / 2)
        page.wait_for_url(f"**/trace/{row_id}", timeout=30_000)
        page.wait_for_selector("#nav-overview")
        page.wait_for_function("() => window.scrollY === 0", timeout=10_000)
        tabs = page.locator("#nav-overview").bounding_box()
        assert 0 <= tabs["y"] < 400
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})
    assert page.console_errors == []
