"""The Ranks page and its aligned timeline in a real headless Chromium (Debian's /usr/bin/chromium via
Playwright), over a store of its own where sample_traces/ddp2 is ingested as one folder (one run of two
ranks; the session's dash_store ingests the ranks one by one): a straggler-table row and a heat-map cell
open the aligned timeline on that collective with both ranks' lanes drawn, a window in the URL is
restored, zero console errors."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from conftest import ddp2_copy

from kernelscope.analysis.comm import comm
from kernelscope.reports import timeline_data as td
from kernelscope.storage.store import open_store

from .plotclick import click_drawn

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the page fixture skips these tests then
    expect = None

ROOT = Path(__file__).resolve().parents[2]
_TRACES = """() => Array.from(document.querySelector('#ranks-tl-graph .js-plotly-plot')._fullData).map(t => ({
  name: t.name, type: t.type,
  segments: t.type === 'scattergl' ? Array.from(t.x).filter(v => Number.isFinite(v)).length / 2 : 0}))"""
_RANGE = "() => document.querySelector('#ranks-tl-graph .js-plotly-plot')._fullLayout.xaxis.range"


@pytest.fixture(scope="module")
def ranks_db(tmp_path_factory):
    db = ddp2_copy(tmp_path_factory.mktemp("browser_ranks") / "r.duckdb")  # ingested once per session
    with open_store(db) as store:
        assert store.query("SELECT count(*) AS n FROM rank_clocks")["n"].iloc[0] == 2  # one run, two ranks
    return db


@pytest.fixture(scope="module")
def base_url(ranks_db):  # overrides conftest's (served over dash_store) for this module's `page`
    import logging
    import socket
    import threading

    from werkzeug.serving import make_server

    from kernelscope.dashboard.app import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = make_server("127.0.0.1", port, create_app(ranks_db).server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    thread.join(5)


def _query(url: str) -> dict:
    return {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}


def _wait_drawn(page):
    page.wait_for_selector("#ranks-tl-graph .js-plotly-plot .main-svg")
    page.wait_for_function("() => { const g = document.querySelector('#ranks-tl-graph .js-plotly-plot');"
                           " return g && g._fullData && g._fullData.length > 0; }")


def _both_ranks_drawn(page, instance):
    traces = page.evaluate(_TRACES)
    for rank in (0, 1):
        assert sum(t["segments"] for t in traces if t["name"].startswith(f"rank {rank} ")) > 0
        assert any(t["name"].startswith(f"rank {rank} ") and t["name"].endswith("allreduce collective")
                   and t["segments"] > 0 for t in traces)
    focus = [t for t in traces if t["name"] == f"collective {instance}"]
    assert len(focus) == 1 and focus[0]["segments"] == 4  # outlined on both ranks


def test_straggler_row_opens_the_aligned_timeline(page, base_url, ranks_db):
    with open_store(ranks_db, read_only=True) as store:
        r = comm(store)
        run = r.scalars["run_id"]
    top = r.tables["collectives"].sort_values(["start_skew_ns", "first_start_ns"], ascending=[False, True]).iloc[0]
    instance = f"{top.process_group}:{top.pg_seq}"
    page.goto(f"{base_url}/ranks?run={run}")
    cell = page.locator("#ranks-straggler-table .ag-center-cols-container .ag-row .ag-cell[col-id='instance']").first
    expect(cell).to_have_text(instance)
    cell.click()
    page.wait_for_url("**view=timeline**")
    _wait_drawn(page)
    q = _query(page.url)
    assert q["coll"] == instance and q["run"] == run
    expect(page.locator("#ranks-tl-status")).to_have_attribute("data-mode", "events")
    _both_ranks_drawn(page, instance)
    # the window drawn is the URL's, and it holds the collective on both ranks (aligned times)
    rng = page.evaluate(_RANGE)
    assert rng == [pytest.approx(float(q["t0"]), abs=1e-6), pytest.approx(float(q["t1"]), abs=1e-6)]
    with open_store(ranks_db, read_only=True) as store:
        origin = td.run_info(store, run)["origin"]
    arr = r.tables["arrivals"]
    arr = arr[(arr["process_group"] == top.process_group) & (arr["pg_seq"] == top.pg_seq)]
    assert rng[0] <= (arr["start_ns"].min() - origin) / 1e6 and (arr["end_ns"].max() - origin) / 1e6 <= rng[1]
    assert page.console_errors == []


# Page coordinates of a heatmap cell in rank 0's row (the top quarter), ``f`` of the way across the plot.
_CELL = """(f) => { const b = document.querySelector('#ranks-skew .nsewdrag').getBoundingClientRect();
  return {x: b.left + b.width * f, y: b.top + b.height * 0.25}; }"""


def test_heatmap_cell_opens_that_collective_and_the_url_restores(page, base_url, ranks_db):
    with open_store(ranks_db, read_only=True) as store:
        r = comm(store)
        run = r.scalars["run_id"]
    a = r.tables["arrivals"]
    order = (a.assign(i=a["process_group"].astype(str) + ":" + a["pg_seq"].astype(str))
             .groupby("i")["start_ns"].min().sort_values().index.tolist())
    page.goto(f"{base_url}/ranks?run={run}")
    page.wait_for_selector("#ranks-skew .js-plotly-plot .nsewdrag")
    col = 2  # the third collective in time order, row of rank 0
    click_drawn(page, "#ranks-skew", _CELL, (col + 0.5) / len(order),
                until="() => location.search.includes('view=timeline')")
    _wait_drawn(page)
    assert _query(page.url)["coll"] == order[col]
    _both_ranks_drawn(page, order[col])
    # a shared URL restores the window
    page.goto(f"{base_url}/ranks?run={run}&view=timeline&t0=10&t1=12")
    _wait_drawn(page)
    assert page.evaluate(_RANGE) == [10, 12]
    with open_store(ranks_db, read_only=True) as store:
        n = td.run_count(store, run, td.run_info(store, run)["origin"] + 10_000_000,
                         td.run_info(store, run)["origin"] + 12_000_000)
    expect(page.locator("#ranks-tl-status")).to_have_attribute("data-events", str(n))
    assert n > 0 and page.console_errors == []


def test_drag_zoom_goes_into_the_url(page, base_url, ranks_db):
    with open_store(ranks_db, read_only=True) as store:
        run = comm(store).scalars["run_id"]
    page.goto(f"{base_url}/ranks?run={run}&view=timeline&t0=0&t1=20")
    _wait_drawn(page)
    box = page.locator("#ranks-tl-graph .nsewdrag").first.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=8)
    page.mouse.up()
    page.wait_for_function("() => new URLSearchParams(location.search).get('t0') !== '0'")
    q = _query(page.url)
    t0, t1 = float(q["t0"]), float(q["t1"])
    assert 4 < t0 < t1 < 11 and q["view"] == "timeline"  # a quarter to a half of the 20 ms window
    with open_store(ranks_db, read_only=True) as store:
        origin = td.run_info(store, run)["origin"]
        n = td.run_count(store, run, origin + round(t0 * 1e6), origin + round(t1 * 1e6))
    expect(page.locator("#ranks-tl-status")).to_have_attribute("data-events", str(n))
    assert page.console_errors == []


# Page coordinates 3 px into the first collective segment drawn at least 8 px wide (its start vertex carries
# the instance 'pg:seq' as customdata), with that instance; null when none is.
_COLLECTIVE_BAR = """() => { const gd = document.querySelector('#ranks-tl-graph .js-plotly-plot');
  const fl = gd._fullLayout, box = gd.querySelector('.nsewdrag').getBoundingClientRect();
  for (const t of gd._fullData) {
    if (!t.customdata || !(t.name || '').endsWith('collective')) continue;
    for (let j = 0; j + 1 < t.x.length; j += 3) {
      const x0 = fl.xaxis.l2p(t.x[j]), x1 = fl.xaxis.l2p(t.x[j + 1]);
      if (typeof t.customdata[j] === 'string' && x1 - x0 >= 8 && x0 > 0 && x0 < box.width - 8)
        return {x: box.left + x0 + 3, y: box.top + fl.yaxis.l2p(t.y[j]), inst: t.customdata[j]}; } }
  return null; }"""


def test_real_click_on_a_collective_segment_opens_it(page, base_url, ranks_db):
    """issue 11: a real mouse click on a collective kernel of the aligned timeline (its customdata must reach
    Dash's clickData, so it is sent as a plain list, not a typed array) opens that collective."""
    with open_store(ranks_db, read_only=True) as store:
        run = comm(store).scalars["run_id"]
        info = td.run_info(store, run)
        ev = td.run_events(store, run, info["origin"], info["end_ns"])
    c = ev[ev["collective"].notna()].assign(d=lambda x: x["end_ns"] - x["start_ns"]).sort_values("d").iloc[-1]
    # a window three times the longest collective kernel, centred on it: drawn a third of the plot wide
    t0, t1 = ((c["start_ns"] - c["d"] - info["origin"]) / 1e6, (c["end_ns"] + c["d"] - info["origin"]) / 1e6)
    page.goto(f"{base_url}/ranks?run={run}&view=timeline&t0={t0:.6f}&t1={t1:.6f}")
    _wait_drawn(page)
    expect(page.locator("#ranks-tl-status")).to_have_attribute("data-mode", "events")
    assert page.evaluate(_COLLECTIVE_BAR) is not None, "no collective segment drawn wide enough to click"
    bar = click_drawn(page, "#ranks-tl-graph", _COLLECTIVE_BAR,
                      until="(b) => new URLSearchParams(location.search).get('coll') === b.inst")
    _wait_drawn(page)
    _both_ranks_drawn(page, bar["inst"])
    assert page.console_errors == []
