"""A real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) against the app served on a
free localhost port: traces page, a row click to an overview, the drawn figure, zero console errors, and
the busy number in the DOM equal to `kernelscope summary --json`."""

from __future__ import annotations

import json

from kernelscope.reports.figures import bin_width_ns

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the page fixture skips these tests then
    expect = None


def _cli_summary(db, trace_id) -> dict:
    from click.testing import CliRunner

    from kernelscope.cli import cli

    res = CliRunner().invoke(cli, ["summary", trace_id, "--json", "--db", str(db)])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_traces_then_overview_in_chromium(page, base_url, dash_store, tmp_path_factory):
    shots = tmp_path_factory.mktemp("screenshots")
    page.goto(base_url + "/")
    page.wait_for_selector("#traces-table .ag-cell")
    rows = page.locator("#traces-table .ag-center-cols-container .ag-row")
    expect(rows).to_have_count(len(dash_store.ids))  # the grid draws its rows after it mounts
    # Filtering: type in the name column's filter cell.
    page.locator("#traces-table .ag-floating-filter[col-id='name'] input").fill("llama")
    page.keyboard.press("Enter")
    n_llama = sum("llama" in n for n in dash_store.ids)
    page.wait_for_function(f"document.querySelectorAll('#traces-table .ag-center-cols-container .ag-row').length == {n_llama}")
    page.screenshot(path=str(shots / "traces.png"), full_page=True)

    tid = dash_store.ids["llama_prefill_b1"]
    page.click("#traces-table .ag-cell >> text=llama_prefill_b1")
    page.wait_for_url(f"**/trace/{tid}")
    page.wait_for_selector("#busy-figure .scatterlayer .trace path.js-line")
    # _fullData holds the decoded arrays (data[0].x may still be Plotly's base64 typed-array form).
    n_points = page.evaluate("document.querySelector('#busy-figure .js-plotly-plot')._fullData[0].x.length")
    line = page.get_attribute("#busy-figure .scatterlayer .trace path.js-line", "d")
    assert line and line.count("V") > 100  # a drawn step line (H/V segments), not an empty path

    cli = _cli_summary(dash_store.db, tid)
    width = bin_width_ns(cli["gpu_span_ns"])
    assert n_points == -(-cli["gpu_span_ns"] // width) <= 2000  # every bin drawn, empty ones at 0
    busy = page.locator("#kpi-busy_ns")
    assert busy.get_attribute("data-value") == str(cli["busy_ns"])
    assert busy.inner_text() == f"{cli['busy_ns'] / 1e6:,.3f} ms"
    assert page.locator("#kpi-kernels").get_attribute("data-value") == str(cli["kernels"])
    assert page.locator("#kpi-gpu_span_ns").get_attribute("data-value") == str(cli["gpu_span_ns"])
    page.screenshot(path=str(shots / "overview.png"), full_page=True)
    assert page.console_errors == []


def test_shared_urls_and_messages_in_chromium(page, base_url, dash_store):
    tid = dash_store.ids["compiled"]
    page.goto(f"{base_url}/?trace={tid}")
    page.wait_for_selector("#busy-figure .scatterlayer .trace path.js-line")
    page.goto(f"{base_url}/trace/{dash_store.ids['cpu_only']}")
    expect(page.locator("#msg-no-gpu")).to_contain_text("no GPU activity")
    expect(page.locator("#kpi-cpu_ops")).to_have_text("2")
    page.goto(f"{base_url}/trace/0000deadbeef")
    expect(page.locator("#msg-unknown-trace")).to_contain_text("No trace matches '0000deadbeef'")
    assert page.console_errors == []
