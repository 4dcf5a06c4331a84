"""Overview additions, Launch, Bound and Sweep pages: layouts through the Flask test client (the router
callback as the browser calls it), callbacks as plain functions, and the numbers on the pages equal to the
analyses' results, several checked a second way from the store (hand computations in the tests)."""

from __future__ import annotations

import statistics

import pytest
import reference_launch

from kernelscope.analysis.registry import get_analysis
from kernelscope.dashboard.app import route
from kernelscope.dashboard.pages import bound as bound_page
from kernelscope.dashboard.pages import sweep as sweep_page

from .tree import find, texts
from .tree import find_json as _find
from .tree import page_json as _page
from .tree import plotly_values as _vals
from .tree import text_json as _text


def _dv(tree, kid) -> str:
    return _find(tree, f"kpi-{kid}")["props"]["data-value"]


# --- Overview additions ---------------------------------------------------------------------------------

def test_overview_tklqt_energy_inflation_equal_the_analyses(client, dash_store, store):
    tid = dash_store.ids["llama_prefill_b1"]
    page = _page(client, f"/trace/{tid}")
    ls = get_analysis("launch").fn(store, tid).scalars
    assert _dv(page, "tklqt_ns") == str(ls["tklqt_ns"])
    assert _dv(page, "mean_queue_depth") == str(ls["mean_queue_depth"])
    # Second way: TKLQT = sum over kernels with a launch call (no graph in this trace) of start(k) - start(launch).
    hand = store.query("""SELECT sum(a.start_ns - l.start_ns) AS s, count(*) FILTER (WHERE a.is_graph) AS g
                          FROM gpu_activities a JOIN launches l USING (trace_id, launch_id)
                          WHERE a.trace_id = $t AND a.kind = 'kernel'""", {"t": tid})
    assert int(hand["g"].iloc[0]) == 0 and int(hand["s"].iloc[0]) == ls["tklqt_ns"]
    span = get_analysis("summary").fn(store, tid).scalars["gpu_span_ns"]
    assert abs(ls["mean_queue_depth"] - ls["tklqt_ns"] / span) < 1e-6  # q = TKLQT / span
    assert "q = 0.31" in _text(_find(page, "kpis"))  # shown with q, never as a share

    # Energy: the sample's trace window is shorter than 10 counter steps, so the per-iteration energy is shown.
    ps = get_analysis("power").fn(store, tid).scalars
    assert ps["trace_energy_mj"] is None
    energy = _find(page, "kpi-energy_mj")["props"]
    assert energy["data-key"] == "energy_per_iteration_mj"
    assert float(energy["data-value"]) == ps["energy_per_iteration_mj"]
    assert "shorter than 10 counter steps" in _text(_find(page, "energy-text"))

    # Profiler inflation = the steady steps' mean span (steps analysis) / median un-profiled cuda_event time, the
    # timings read from the store by hand.
    st = get_analysis("steps").fn(store, tid).tables["steps"]
    steady = st[~st["warmup"] & ~st["partial"] & (st["activities"] > 0)]
    assert len(steady) >= 1
    ev = store.query("SELECT dur_ns FROM timings WHERE trace_id = $t AND kind = 'cuda_event'", {"t": tid})["dur_ns"]
    hand_infl = round(steady["dur_ns"].mean()) / round(statistics.median(ev.tolist()))
    assert float(_dv(page, "inflation")) == pytest.approx(hand_infl, rel=1e-12)
    assert 1.5 < hand_infl < 3  # the profiler slows this launch-bound trace about 2x


def test_overview_categories_and_recommendations(client, dash_store, store):
    tid = dash_store.ids["llama_prefill_b1"]
    page = _page(client, f"/trace/{tid}")
    k = get_analysis("kernels").fn(store, tid)
    fig = _find(page, "overview-categories")["props"]["figure"]
    # tensor-core + other bars per category add up to the category's kernel time (ms)
    cats = {}
    for tr in fig["data"]:
        for y, x in zip(tr["y"], _vals(tr["x"])):
            cats[y] = cats.get(y, 0.0) + x
    want = {r.category: r.time_ns / 1e6 for r in k.tables["categories"].itertuples() if r.time_ns > 0}
    assert cats.keys() == want.keys() and all(abs(cats[c] - want[c]) < 1e-9 for c in want)
    assert abs(sum(cats.values()) - k.scalars["kernel_time_ns"] / 1e6) < 1e-6
    rec = get_analysis("recommend").fn(store, tid)
    shown = _find(page, "recommendations")["props"]["children"]
    assert [d["props"]["data-rule"] for d in shown] == list(rec.tables["findings"]["rule"])
    first = rec.tables["findings"].iloc[0]
    assert first["message"] in _text(shown[0])
    ev = first["evidence"][0]
    assert f"{ev['analysis']}.{ev['key']}" in _text(shown[0])  # the evidence numbers are cited


def test_overview_no_telemetry_and_cpu_only(client, dash_store):
    page = _page(client, f"/trace/{dash_store.ids['probe_train']}")
    assert _dv(page, "energy_mj") == "" and "no telemetry" in _text(_find(page, "energy-text"))
    assert "No profiler inflation" in _text(_find(page, "inflation-text"))
    page = _page(client, f"/trace/{dash_store.ids['cpu_only']}")
    assert _dv(page, "mean_queue_depth") == "" and _dv(page, "tklqt_ns") == "0"
    assert _find(page, "msg-no-recommendations") is not None and _find(page, "msg-no-kernels") is not None
    # the summary KPIs the browser test compares are still there
    assert _find(page, "kpi-busy_ns") is not None and _find(page, "kpi-gpu_span_ns") is not None


# --- Launch ---------------------------------------------------------------------------------------------

def test_launch_page_numbers_equal_the_launch_and_whatif_results(client, dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    page = _page(client, f"/trace/{tid}/launch")
    assert _find(page, "nav-launch")["props"]["className"] == "ks-active"
    lr = get_analysis("launch").fn(store, tid)
    ws = get_analysis("whatif").fn(store, tid).scalars
    ls = lr.scalars
    for k in ["tklqt_ns", "api_ns", "queue_ns", "dispatch_ns", "launch_bound_ops"]:
        assert _dv(page, k) == str(ls[k]), k
    # the split shown is the one computed from the raw rows by tests/reference_launch.py (api + queue +
    # dispatch = tklqt holds by construction: dispatch is the remainder)
    want = reference_launch.totals(reference_launch.splits(store, tid))
    assert {k: ls[k] for k in want} == want
    # TKLQT by operator: the three stacked parts per operator add up to that operator's tklqt_ns
    fig = _find(page, "launch-by-operator")["props"]["figure"]
    per = {}
    for tr in fig["data"]:
        for y, x in zip(tr["y"], _vals(tr["x"])):
            per[y] = per.get(y, 0.0) + x
    po = lr.tables["per_op"].set_index("name")["tklqt_ns"]
    top = po.sort_values(ascending=False).head(15)
    assert set(per) == set(top.index) and all(abs(per[n] - top[n] / 1e6) < 1e-6 for n in top.index)
    # what-if bars: predicted, observed, traced, naive in ms
    wf = _find(page, "whatif-figure")["props"]["figure"]["data"][0]
    assert _vals(wf["customdata"]) == [ws["predicted_ns"], ws["observed_ns"], ws["traced_ns"], ws["naive_ns"]]
    assert _dv(page, "predicted_ns") == str(ws["predicted_ns"])
    assert ws["long_idle_ns"] == 0  # a prefill of back-to-back launches: the speed-up alone under the headline
    assert _find(page, "kpi-predicted_ns-extra")["props"]["children"] == \
        f"{ws['predicted_speedup']:.2f}× faster than observed"
    # distribution: the medians drawn are the table's (µs)
    dist = lr.tables["distribution"].set_index("metric")
    med = _find(page, "launch-distribution")["props"]["figure"]["data"][0]
    assert _vals(med["customdata"]) == [int(dist.loc[m, "median_ns"]) for m in
                                       ["lq_ns", "api_ns", "queue_ns", "dispatch_ns", "launch_delay_ns"]]
    lb = _find(page, "launch-bound-table")["props"]["rowData"]
    assert [r["name"] for r in lb] == list(lr.tables["launch_bound"]["name"])


def test_launch_page_says_how_much_long_gpu_idle_the_what_if_removes(client, dash_store, store):
    """ddp rank 1 has GPU-idle stretches of 1 ms or more inside its traced scope (1.95 ms; whatif long_idle_ns):
    the headline's extra line says how much of the speed-up is that time, in ms."""
    tid = dash_store.ids["ddp_rank1"]
    ws = get_analysis("whatif").fn(store, tid).scalars
    assert 1_000_000 <= ws["long_idle_ns"] < ws["traced_ns"]
    page = _page(client, f"/trace/{tid}/launch")
    assert _find(page, "kpi-predicted_ns-extra")["props"]["children"] == (
        f"{ws['predicted_speedup']:.2f}× faster than observed, counting {ws['long_idle_ns'] / 1e6:,.3f} ms of GPU "
        "idle in stretches ≥ 1 ms as removable")


def test_launch_page_graph_trace_and_cpu_only(client, dash_store, store):
    tid = dash_store.ids["small_kernels_graph"]
    page = _page(client, f"/trace/{tid}/launch")
    ls = get_analysis("launch").fn(store, tid).scalars
    assert ls["graph_launches"] > 0 and ls["tklqt_naive_ns"] > ls["tklqt_ns"]
    assert _dv(page, "tklqt_ns") == str(ls["tklqt_ns"])
    assert f"{ls['graph_kernels']:,} graph kernels" in _text(page)
    page = _page(client, f"/trace/{dash_store.ids['cpu_only']}/launch")
    assert "no kernel with a launch call" in _text(_find(page, "msg-no-launches"))
    assert _find(page, "launch-distribution") is None


# --- Bound ----------------------------------------------------------------------------------------------

def test_bound_page_split_queue_and_causes(client, dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    page = _page(client, f"/trace/{tid}/bound")
    r = get_analysis("bound").fn(store, tid)
    s = r.scalars
    for k in ["host_wait_ns", "dependency_wait_ns", "busy_ns", "cpu_bound_ns", "gpu_bound_ns"]:
        assert _dv(page, k) == str(s[k]), k
    # the split bars add up to the span: busy + host wait + dependency wait = gpu_span_ns
    split = _find(page, "bound-split")["props"]["figure"]["data"]
    assert sum(int(tr["customdata"][0][0]) for tr in split) == s["gpu_span_ns"]
    # queue depth: sum over streams and bins of mean depth x bin width = queued_ns (the area, = TKLQT here)
    fig = _find(page, "bound-queue")["props"]["figure"]
    width = s["bin_ns"]
    lines = [tr for tr in fig["data"] if tr["name"].startswith("GPU ")]  # the rest: regime legend entries
    area = sum(sum(_vals(tr["y"])) for tr in lines) * width
    assert abs(area - s["queued_ns"]) <= 1e-4 * width * sum(len(_vals(tr["y"])) for tr in lines)
    assert s["queued_ns"] == get_analysis("launch").fn(store, tid).scalars["tklqt_ns"]
    # one shaded rectangle per regime segment, one legend entry per regime value shown
    assert len(fig["layout"]["shapes"]) == len(r.tables["segments"])
    assert sorted(tr["name"] for tr in fig["data"] if not tr["name"].startswith("GPU ")) == \
        sorted(f"regime: {v}" for v in set(r.tables["segments"]["regime"]))
    assert len(_find(page, "bound-segments-table")["props"]["rowData"]) == len(r.tables["segments"])
    causes = _find(page, "bound-causes")["props"]["figure"]["data"][0]
    assert sum(int(c[0]) for c in causes["customdata"]) == s["host_wait_ns"]  # causes add up to host wait
    ops = _find(page, "bound-idle-operators-table")["props"]["rowData"]
    assert [o["operator"] for o in ops] == list(r.tables["idle_operators"]["operator"])


def test_bound_bins_in_url_and_rebin_callback(client, dash_store, store):
    tid = dash_store.ids["llama_prefill_b1"]
    page = _page(client, f"/trace/{tid}/bound", "?bins=500")
    assert _find(page, "bound-bins")["props"]["value"] == 500
    s500 = get_analysis("bound").fn(store, tid, bins=500).scalars
    assert _dv(page, "cpu_bound_ns") == str(s500["cpu_bound_ns"])
    fig, segments, search = bound_page.rebin(dash_store.db, tid, 50)
    s50 = get_analysis("bound").fn(store, tid, bins=50).scalars
    assert search == "?bins=50"
    assert len(fig.data[0].x) <= 50 and s50["bin_ns"] >= 10 * s500["bin_ns"] - 10
    assert f"({len(get_analysis('bound').fn(store, tid, bins=50).tables['segments'])})" in texts(segments[0])
    # bad bins in the URL fall back to the default
    assert _find(_page(client, f"/trace/{tid}/bound", "?bins=abc"), "bound-bins")["props"]["value"] == 200


def test_bound_page_cpu_only(client, dash_store):
    page = _page(client, f"/trace/{dash_store.ids['cpu_only']}/bound")
    assert "no GPU activity" in _text(_find(page, "msg-no-gpu")) and _find(page, "bound-queue") is None


# --- Sweep ----------------------------------------------------------------------------------------------

def test_sweep_list_without_params(client, dash_store):
    page = _page(client, "/sweep")
    link = _find(page, "sweep-link-llama_prefill-batch")
    assert link["props"]["href"] == "/sweep?sweep=llama_prefill&by=batch"
    assert "(3 traces)" in _text(_find(page, "sweep-list"))
    # ddp ranks 0 and 1, each ingested alone here (two partial runs): a numeric label telling them apart
    assert _find(page, "by-link-rank") is not None


def test_the_ranks_of_one_run_are_not_offered_as_a_sweep(tmp_path):
    """A numeric label that tells traces apart is offered as a sweep unless those traces are the ranks of one run:
    ddp2 ingested as one run carries rank=0 and rank=1 (not a sweep: the Ranks page compares them); two standalone
    traces labelled tokens=1 and tokens=2 are offered; a rank label on a standalone trace too makes rank a label
    over traces that are not all of one run, and it is offered again."""
    import edge_traces
    from conftest import ddp2_copy

    from kernelscope.storage.catalog import distinct_numeric_labels
    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.queries import set_labels
    from kernelscope.storage.store import open_store

    db = ddp2_copy(tmp_path / "s.duckdb")
    with open_store(db, read_only=True) as store:
        assert "rank" in set(store.query("SELECT key FROM labels")["key"])
    assert find(route(db, "/sweep", ""), "by-link-rank") is None
    with open_store(db) as store:
        ids = [r.trace_id for r in ingest_paths(store, [edge_traces.cpu_only(tmp_path),
                                                        edge_traces.python_functions(tmp_path)], progress=False)]
        for tid, n in zip(ids, (1, 2)):
            set_labels(store, tid, {"tokens": n})
    page = route(db, "/sweep", "")
    assert find(page, "by-link-tokens") is not None and find(page, "by-link-rank") is None
    assert "(2 traces)" in texts(find(page, "label-list"))
    with open_store(db) as store:
        set_labels(store, ids[0], {"rank": 3})
        assert list(distinct_numeric_labels(store)["key"]) == ["rank", "tokens"]



def test_sweep_page_numbers_and_bracket(client, dash_store, store):
    page = _page(client, "/sweep", "?sweep=llama_prefill&by=batch")
    r = get_analysis("transition").fn(store, None, by="batch", sweep="llama_prefill")
    pts = r.tables["points"]
    assert list(pts["label"]) == [1, 8, 128]
    t = r.scalars["transition"]
    assert f"between batch={t['last_cpu_bound']} (last CPU-bound) and batch={t['first_gpu_bound']}" in _text(page)
    # second way for the trace rule's bracket: q >= 1 from the launch analysis of each point
    q = [get_analysis("launch").fn(store, tid).scalars["mean_queue_depth"] for tid in pts["trace_id"]]
    first = next(i for i, v in enumerate(q) if v >= 1)
    assert r.scalars["brackets"]["trace"]["first_gpu_bound"] == [1, 8, 128][first]
    assert f"trace rule: last CPU-bound batch={[1, 8, 128][first - 1]}, first GPU-bound batch={[1, 8, 128][first]}" \
        in _text(page)
    fig = _find(page, "sweep-figure")["props"]["figure"]
    by_name = {tr["name"]: tr for tr in fig["data"] if tr.get("name")}
    assert _vals(by_name["TKLQT"]["y"]) == pytest.approx([v / 1e6 for v in pts["tklqt_ns"]])
    assert _vals(by_name["q"]["y"]) == pytest.approx(list(pts["mean_queue_depth"]))
    assert by_name["q"]["customdata"] == list(pts["trace_id"])
    regimes = [sh["fillcolor"] for sh in fig["layout"]["shapes"] if sh.get("fillcolor")]
    assert len(regimes) == 3 * 4  # one shaded band per point on each of the four panels
    dashed = [sh for sh in fig["layout"]["shapes"] if sh.get("line", {}).get("dash") == "dash"]
    assert sorted({sh["x0"] for sh in dashed}) == sorted([t["last_cpu_bound"], t["first_gpu_bound"]])


def test_sweep_click_selects_point_and_url_restores_it(client, dash_store, store):
    page = _page(client, "/sweep", "?sweep=llama_prefill&by=batch")
    data = _find(page, "sweep-data")["props"]["data"]
    tid = dash_store.ids["llama_prefill_b8"]
    fig, panel, search = sweep_page.select_point({"points": [{"customdata": tid, "x": 8}]}, data,
                                                 "?sweep=llama_prefill&by=batch")
    assert search == "?sweep=llama_prefill&by=batch&point=8"
    assert "batch = 8" in texts(panel[0])
    assert find(panel[2], "sweep-open-launch").href == f"/trace/{tid}/launch"
    rings = [tr for tr in fig.data if tr.marker.symbol == "circle-open"]
    assert len(rings) == 4 and all(list(tr.x) == [8] for tr in rings)
    # no click, unknown trace: nothing changes
    assert sweep_page.select_point(None, data, "")[2] is sweep_page.dash.no_update
    assert sweep_page.select_point({"points": [{"customdata": "nope"}]}, data, "")[2] is sweep_page.dash.no_update
    # the shared URL restores the selection
    page = _page(client, "/sweep", search)
    assert "batch = 8 (llama_prefill_b8)" in _text(_find(page, "sweep-selected-title"))
    rings = [tr for tr in _find(page, "sweep-figure")["props"]["figure"]["data"]
             if tr.get("marker", {}).get("symbol") == "circle-open"]
    assert len(rings) == 4


def test_sweep_empty_cases(client, dash_store, empty_db):
    page = _page(client, "/sweep", "?by=layers")  # only train_step carries layers: one point
    assert "1 point" in _text(_find(page, "msg-one-point"))
    page = _page(client, "/sweep", "?by=nope")
    assert "no stored trace has a label 'nope'" in _text(_find(page, "msg-no-sweep"))
    assert "no sweep" in texts(route(empty_db, "/sweep", "")).lower()


def test_queue_figure_colours_any_regime_value():
    """A regime value the figure does not know (the bound analysis' communication-bound segments) gets a
    colour of its own and a legend entry named by the value; the known ones keep theirs."""
    import pandas as pd

    from kernelscope.reports import bound as rb

    queue = pd.DataFrame({"device": [0, 0, 0], "stream": [7, 7, 7], "bin": [0, 1, 2],
                          "bin_start_ns": [1000, 2000, 3000], "bin_end_ns": [2000, 3000, 4000],
                          "mean_depth": [0.5, 2.0, 0.0]})
    segments = pd.DataFrame({"device": [0, 0, 0, 0], "regime": ["cpu_bound", "comm_bound", "gpu_bound", "comm_bound"],
                             "start_ns": [1000, 2000, 3000, 3500], "end_ns": [2000, 3000, 3500, 4000]})
    fig = rb.queue_depth_figure(queue, segments).to_plotly_json()
    fills = [s["fillcolor"] for s in fig["layout"]["shapes"]]
    assert len(fills) == 4 and fills[0] == rb.REGIME_COLORS["cpu_bound"] and fills[2] == rb.REGIME_COLORS["gpu_bound"]
    assert fills[1] == fills[3] and fills[1] not in rb.REGIME_COLORS.values()  # one new colour, used twice
    # x0 of the comm_bound shape: (2000 - t0) / 1e6 ms with t0 = bin_start - bin*width = 1000
    assert fig["layout"]["shapes"][1]["x0"] == 0.001
    legend = {t["name"]: t["marker"]["color"] for t in fig["data"] if t["name"].startswith("regime: ")}
    assert sorted(legend) == ["regime: comm_bound", "regime: cpu_bound", "regime: gpu_bound"]
    assert legend["regime: comm_bound"] == fills[1].replace("rgba", "rgb").rsplit(",", 1)[0] + ")"
    # two unknown values get two different colours, by sorted name
    c = rb.regime_colors(["zeta", "alpha", "cpu_bound"])
    assert c["alpha"] != c["zeta"] and c["cpu_bound"] == rb.REGIME_COLORS["cpu_bound"]
    assert c["alpha"] == "rgba(59, 130, 246, 0.12)"  # EXTRA_REGIME_RGB[0] for the first name in order
