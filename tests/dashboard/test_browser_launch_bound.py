"""A real headless Chromium (Debian's /usr/bin/chromium via Playwright; the ``page`` fixture skips without
it) on the sample store: the Overview additions, Launch, Bound and Sweep pages each draw a figure with
data; a click on a sweep point selects it (URL state) and links to that trace's pages; the shared sweep URL
restores the selection; the numbers in the DOM equal the CLI's JSON; zero console errors."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kernelscope.cli import cli

from .plotclick import click_drawn

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the page fixture skips these tests then
    expect = None


def _cli(db, *args) -> dict:
    res = CliRunner().invoke(cli, [*args, "--db", str(db)])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _points(page, graph_id: str) -> int:
    """Data points Plotly holds for the figure (decoded arrays of every trace)."""
    js = ("(sel) => { const gd = document.querySelector(sel);"
          " return gd._fullData.reduce((n, t) => n + (t.x ? t.x.length : 0), 0); }")
    return page.evaluate(js, f"#{graph_id} .js-plotly-plot")


def test_overview_launch_bound_in_chromium(page, base_url, dash_store):
    tid = dash_store.ids["llama_prefill_b8"]
    launch = _cli(dash_store.db, "analyze", "launch", tid, "--format", "json")
    bound = _cli(dash_store.db, "analyze", "bound", tid, "--format", "json")

    page.goto(f"{base_url}/trace/{tid}")
    page.wait_for_selector("#overview-categories .js-plotly-plot .barlayer .point")
    assert page.get_attribute("#kpi-tklqt_ns", "data-value") == str(launch["tklqt_ns"])
    assert page.inner_text("#kpi-tklqt_ns") == f"{launch['tklqt_ns'] / 1e6:,.3f} ms"
    assert page.get_attribute("#kpi-mean_queue_depth", "data-value") == str(launch["mean_queue_depth"])
    assert page.inner_text("#kpi-inflation").endswith("×")
    assert page.locator("#recommendations .ks-finding").count() >= 1
    assert _points(page, "overview-categories") >= 2

    page.click("#nav-launch")
    page.wait_for_url(f"**/trace/{tid}/launch")
    page.wait_for_selector("#launch-by-operator .js-plotly-plot .barlayer .point")
    assert page.get_attribute("#kpi-queue_ns", "data-value") == str(launch["queue_ns"])
    assert _points(page, "launch-by-operator") >= 3 and _points(page, "whatif-figure") == 4

    page.click("#nav-bound")
    page.wait_for_url(f"**/trace/{tid}/bound")
    page.wait_for_selector("#bound-queue .scatterlayer .trace path.js-line")
    assert page.get_attribute("#kpi-host_wait_ns", "data-value") == str(bound["host_wait_ns"])
    assert _points(page, "bound-queue") >= 10
    assert page.locator("#bound-queue .shapelayer path, #bound-queue .layer-below .shapelayer path").count() >= 1
    assert page.console_errors == []


def test_bound_bins_dropdown_writes_the_url(page, base_url, dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    page.goto(f"{base_url}/trace/{tid}/bound")
    page.wait_for_selector("#bound-queue .scatterlayer .trace path.js-line")
    before = _points(page, "bound-queue")
    page.click("#bound-bins")
    page.get_by_role("option", name="50", exact=True).click()
    page.wait_for_url("**/bound?bins=50")
    page.wait_for_function("document.querySelector('#bound-queue .js-plotly-plot')._fullData[0].x.length <= 50")
    assert _points(page, "bound-queue") < before
    assert page.console_errors == []


# Page coordinates of the TKLQT marker of the sweep's second point (batch=8), from Plotly's axis layout (CI once
# clicked where the first draw had put it: tests/dashboard/plotclick.py waits for it to stay put).
_TKLQT_POINT = """() => {
    const gd = document.querySelector('#sweep-figure .js-plotly-plot');
    const i = gd._fullData.findIndex(t => t.name === 'TKLQT');
    const t = gd._fullData[i], fl = gd._fullLayout;
    const xa = fl[t.xaxis.replace('x', 'xaxis')], ya = fl[t.yaxis.replace('y', 'yaxis')];
    const box = gd.getBoundingClientRect();
    return [box.left + xa._offset + xa.l2p(Math.log10(t.x[1])), box.top + ya._offset + ya.l2p(Math.log10(t.y[1]))];
}"""

def test_sweep_click_selects_and_url_restores(page, base_url, dash_store):
    page.goto(f"{base_url}/sweep")
    page.wait_for_selector("#sweep-link-llama_prefill-batch")
    page.click("#sweep-link-llama_prefill-batch")
    page.wait_for_url("**/sweep?sweep=llama_prefill&by=batch")
    page.wait_for_selector("#sweep-figure .scatterlayer .trace .points path")
    assert _points(page, "sweep-figure") >= 3 * 7  # 7 series over the 3 points

    # Click the TKLQT marker of batch=8 (the second point) where Plotly drew it.
    click_drawn(page, "#sweep-figure", _TKLQT_POINT, until="() => location.search.includes('point=')")
    page.wait_for_url("**/sweep?sweep=llama_prefill&by=batch&point=8")
    expect(page.locator("#sweep-selected-title")).to_contain_text("batch = 8 (llama_prefill_b8)")
    assert page.locator("#sweep-figure .scatterlayer .trace .points path").count() >= 3 * 7 + 4  # rings added
    url = page.url

    # The shared URL restores the selection in a fresh load.
    page.goto(base_url + "/")
    page.goto(url)
    expect(page.locator("#sweep-selected-title")).to_contain_text("batch = 8 (llama_prefill_b8)")

    tid = dash_store.ids["llama_prefill_b8"]
    page.click("#sweep-open-launch")
    page.wait_for_url(f"**/trace/{tid}/launch")
    page.wait_for_selector("#whatif-figure .js-plotly-plot .barlayer .point")
    assert page.console_errors == []


def test_empty_cases_in_chromium(page, base_url, dash_store):
    page.goto(f"{base_url}/trace/{dash_store.ids['cpu_only']}/launch")
    page.wait_for_selector("#msg-no-launches")
    page.goto(f"{base_url}/trace/{dash_store.ids['cpu_only']}/bound")
    page.wait_for_selector("#msg-no-gpu")
    page.goto(f"{base_url}/sweep?by=layers")
    page.wait_for_selector("#msg-one-point")
    page.goto(f"{base_url}/trace/{dash_store.ids['probe_train']}")
    page.wait_for_selector("#energy-text")
    assert "no telemetry" in page.inner_text("#energy-text")
    assert page.console_errors == []
