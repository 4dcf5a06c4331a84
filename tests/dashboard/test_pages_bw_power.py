"""Bandwidth, Power and Compare pages: layouts through the Flask test client (the router callback over
HTTP, as the browser calls it), callbacks as plain functions. Numbers on the page are compared with the
analyses' JSON (``Result.to_dict``); the roofline's ceilings with the row of data/device_peaks.csv read
here with the csv module."""

from __future__ import annotations

import csv
import json
import re
import shutil
from importlib import resources

import dash
import pytest

from kernelscope.analysis.registry import get_analysis
from kernelscope.dashboard.app import route
from kernelscope.dashboard.pages import bandwidth, compare
from kernelscope.reports.roofline import plottable
from kernelscope.storage.store import open_store

from .tree import find, ns_columns, shown_ms, texts
from .tree import find_json as _find
from .tree import page_json as _page
from .tree import plotly_values as _values
from .tree import text_json as _text

# ------------------------------------------------------------------ Flask test client helpers





def _analysis(db, name, *args, **kw):
    with open_store(db, read_only=True) as store:
        return get_analysis(name).fn(store, *args, **kw)


def _csv_peaks(db, trace_id: str) -> dict:
    """The package's device-peak row for the trace's GPU: the first row whose ``match`` regex is found
    (case-insensitive) in the deviceProperties name; numbers as floats."""
    with open_store(db, read_only=True) as store:
        props = store.query("SELECT device_properties FROM traces WHERE trace_id = $t", {"t": trace_id})
    gpu = json.loads(props["device_properties"].iloc[0])[0]["name"]
    text = resources.files("kernelscope").joinpath("data", "device_peaks.csv").read_text("utf-8")
    row = next(r for r in csv.DictReader(text.splitlines()) if re.search(r["match"], gpu, re.IGNORECASE))
    return {k: (float(v) if v and k not in ("device", "match", "source") else v) for k, v in row.items()}


# ------------------------------------------------------------------ Bandwidth

def test_bandwidth_numbers_equal_the_analysis_json(client, dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    page = _page(client, f"/trace/{tid}/bandwidth")
    js = json.loads(_analysis(dash_store.db, "bandwidth", tid).to_json())
    for key in ("modelled_share", "gpu_ns", "achieved_gbps", "achieved_tflops", "signatures", "above_peak"):
        kpi = _find(page, f"bw-kpi-{key}")
        assert float(kpi["props"]["data-value"]) == pytest.approx(js[key], rel=1e-12), key
    assert _text(_find(page, "bw-kpi-modelled_share")) == f"{100 * js['modelled_share']:.1f}%"
    assert _text(_find(page, "bw-kpi-gpu_ns")) == f"{js['gpu_ns'] / 1e6:,.3f} ms"
    # the sentence: modelled ms of total ms (hand: modelled_gpu_ns / 1e6, gpu_ns / 1e6)
    assert f"{js['modelled_gpu_ns'] / 1e6:,.3f} of {js['gpu_ns'] / 1e6:,.3f} ms" in _text(_find(page, "bw-modelled"))

    grid = _find(page, bandwidth.TABLE_ID)
    rows = grid["props"]["rowData"]
    sig = js["per_signature"]
    assert len(rows) == len(sig) == js["signatures"]
    for i, (row, ref) in enumerate(zip(rows, sig)):
        assert row["sig"] == row["id"] == i
        assert (row["name"], row["input_dims"], row["calls"]) == (ref["name"], ref["input_dims"], ref["calls"])
        assert row["gpu_ns"] == ref["gpu_ns"] and shown_ms(grid, row, "gpu_ns") == round(ref["gpu_ns"] / 1e6, 3)
        assert row["share_pct"] == round(100 * ref["gpu_ns"] / js["gpu_ns"], 1)
        for col, digits in (("pct_peak_bw", 1), ("pct_peak_flops", 1), ("achieved_tflops", 3), ("intensity", 2)):
            assert row[col] == (None if ref[col] is None else round(ref[col], digits)), (i, col)
        assert row["bound"] == ref["bound"]
    # GPU times of the rows add up to the analysis' total (rows are every signature)
    assert sum(r["gpu_ns"] for r in sig) == js["gpu_ns"]


def test_roofline_ceilings_equal_the_device_peak_row(client, dash_store):
    tid = dash_store.ids["llama_prefill_b8"]
    fig = _find(_page(client, f"/trace/{tid}/bandwidth"), bandwidth.FIGURE_ID)["props"]["figure"]
    peak = _csv_peaks(dash_store.db, tid)
    assert "H200" in peak["device"]
    traces = {t["name"]: t for t in fig["data"]}
    mem = next(t for n, t in traces.items() if "memory" in n and "GB/s" in n)
    x, y = _values(mem["x"]), _values(mem["y"])
    # the memory slope: TFLOP/s = intensity (FLOP/B) x GB/s / 1000 at both ends
    assert y[0] * 1000 / x[0] == pytest.approx(peak["mem_bw_gbps"]) == y[1] * 1000 / x[1]
    roofs = {n: t for n, t in traces.items() if n.endswith("TFLOP/s")}
    expect = {c: peak[c] for c in ("fp64_tflops", "fp32_tflops", "fp32_matrix_tflops", "bf16_tflops",
                                   "fp16_tflops", "fp8_tflops") if peak[c]}
    assert len(roofs) == len(expect) == 6
    drawn = sorted(_values(t["y"])[0] for t in roofs.values())
    assert drawn == sorted(expect.values())
    for t in roofs.values():
        ys, xs = _values(t["y"]), _values(t["x"])
        assert ys[0] == ys[1]  # horizontal
        assert xs[0] == pytest.approx(ys[0] * 1000 / peak["mem_bw_gbps"])  # starts at its ridge
    assert _values(mem["x"])[1] == pytest.approx(peak["fp8_tflops"] * 1000 / peak["mem_bw_gbps"])
    # the roof bf16 GEMMs are measured against is drawn solid, unused ones dotted
    assert roofs[next(n for n in roofs if n.startswith("BF16"))]["line"]["dash"] == "solid"
    assert roofs[next(n for n in roofs if n.startswith("FP64"))]["line"]["dash"] == "dot"


def test_roofline_points_are_the_signatures(client, dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    page = _page(client, f"/trace/{tid}/bandwidth", "?sig=3")
    fig = _find(page, bandwidth.FIGURE_ID)["props"]["figure"]
    r = _analysis(dash_store.db, "bandwidth", tid)
    sig = r.tables["per_signature"]
    pts = {}
    for t in fig["data"]:
        if "customdata" in t:
            for s, x, y in zip(_values(t["customdata"]), _values(t["x"]), _values(t["y"])):
                pts[int(s)] = (x, y)
    # every signature with positive intensity and FLOP rate is one point, at (intensity, achieved_tflops)
    js = r.to_dict()["per_signature"]
    positive = [i for i, row in enumerate(js) if (row["intensity"] or 0) > 0 and (row["achieved_tflops"] or 0) > 0]
    assert sorted(pts) == positive and len(positive) == len(plottable(sig)) > 10
    for i in positive:
        assert pts[i] == pytest.approx((js[i]["intensity"], js[i]["achieved_tflops"]))
    # ?sig=3: the ring (trace 0) sits on signature 3, and the text names it
    ring = fig["data"][0]
    assert ring["name"] == "selected"
    assert (_values(ring["x"])[0], _values(ring["y"])[0]) == pytest.approx(pts[3])
    assert f"#3 {sig['name'].iloc[3]}" in _text(_find(page, bandwidth.SELECTED_ID))
    assert _find(page, bandwidth.TABLE_ID)["props"]["selectedRows"] == {"ids": ["3"]}  # row ids: signature numbers


def test_select_callback_as_plain_function():
    rows = [{"sig": 0, "name": "aten::mm", "calls": 4, "_x": 100.0, "_y": 300.0, "gpu_ns": 1_000_000},
            {"sig": 1, "name": "aten::copy_", "calls": 2, "_x": None, "_y": None, "gpu_ns": 500_000}]
    click = {"points": [{"customdata": 0, "x": 100.0, "y": 300.0}]}
    patch, selected, text, search = bandwidth.select(bandwidth.FIGURE_ID, click, None, rows, "?zoom=1")
    ops = patch.to_plotly_json()["operations"]
    assert {(tuple(o["location"]), json.dumps(o["params"]["value"])) for o in ops} == \
        {(("data", 0, "x"), "[100.0]"), (("data", 0, "y"), "[300.0]")}
    assert search == "?zoom=1&sig=0" and selected == {"ids": ["0"]}
    assert "aten::mm" in texts(dash.html.Div(text))
    # a table row without a point on log axes (0 FLOPs): selected, the ring emptied
    patch, _, _, search = bandwidth.select(bandwidth.TABLE_ID, None, {"rowIndex": 1, "colId": "sig", "rowId": "1"},
                                           rows, "?sig=0")
    assert search == "?sig=1"
    assert all(o["params"]["value"] == [] for o in patch.to_plotly_json()["operations"])
    # a click on a ceiling (no customdata) or an unknown signature changes nothing
    assert bandwidth.select(bandwidth.FIGURE_ID, {"points": [{"x": 1, "y": 2}]}, None, rows, "") == \
        (dash.no_update,) * 4
    assert bandwidth.select(bandwidth.TABLE_ID, None, {"rowId": "7"}, rows, "") == (dash.no_update,) * 4


@pytest.mark.parametrize("value, n, expect", [("3", 10, 3), ("0", 10, 0), ("10", 10, None), ("-1", 10, None),
                                              ("x", 10, None), (None, 10, None)])
def test_sig_parameter(value, n, expect):
    assert bandwidth.selected_signature({} if value is None else {"sig": value}, n) == expect


def test_with_param_keeps_other_keys():
    assert bandwidth.with_param("?a=1&sig=2", "sig", 5) == "?a=1&sig=5"
    assert bandwidth.with_param("", "sig", 0) == "?sig=0"
    assert bandwidth.with_param("?sig=2", "sig", None) == ""


def test_bandwidth_measured_bytes_with_ncu(dash_store, tmp_path):
    """A copy of the store with the ncu DRAM CSV matched to the Nsight trace: the page lists modelled vs
    measured bytes; the sums equal the analysis' per_instance rows summed by hand."""
    from kernelscope.storage.ncu import ingest_ncu

    from .conftest import ROOT

    db = tmp_path / "ncu.duckdb"
    shutil.copy(dash_store.db, db)
    tid = dash_store.ids["nsys"]
    with open_store(db) as store:
        res = ingest_ncu(store, ROOT / "sample_traces" / "nsight" / "encoder2_ncu_dram.csv.gz", match=tid)
        assert res.status == "ingested" and res.matched > 50
    page = route(db, f"/trace/{tid}/bandwidth", "")
    rows = find(page, "bw-measured").rowData
    assert rows
    with open_store(db, read_only=True) as store:
        from kernelscope.reports.roofline import bandwidth_result
        r = bandwidth_result(store, tid)
        ncu = store.query("SELECT activity_id, dram_bytes_read + dram_bytes_write AS b FROM ncu_kernels "
                          "WHERE trace_id = $t AND activity_id IS NOT NULL", {"t": tid})
        acts = store.query("SELECT activity_id, leaf_op_id, kind FROM gpu_activities WHERE trace_id = $t", {"t": tid})
    sig = r.tables["per_signature"]
    # second way, in pandas: an operator counts when every one of its kernels was measured; its bytes are
    # the sum of its kernels' read + write bytes. Totals over the page's rows equal that.
    k = acts[(acts["kind"] == "kernel") & acts["leaf_op_id"].notna()].merge(ncu, on="activity_id", how="left")
    full = k.groupby("leaf_op_id").filter(lambda d: d["b"].notna().all()).groupby("leaf_op_id")["b"].sum()
    assert len(full) > 30
    assert sum(x["measured_calls"] for x in rows) == len(full)
    assert sum(x["measured_bytes"] for x in rows) == int(full.sum())
    for x in rows:
        assert x["name"] == sig["name"].iloc[x["signature"]]
        assert 0 < x["measured_calls"] <= sig["calls"].iloc[x["signature"]]
        assert x["ratio"] is not None and 0.2 < x["ratio"] < 5  # model minimum vs DRAM bytes: same order


def test_bandwidth_without_ncu_says_so(dash_store):
    page = route(dash_store.db, f"/trace/{dash_store.ids['llama_prefill_b1']}/bandwidth", "")
    assert find(page, "msg-bw-no-measured") is not None and find(page, "bw-measured") is None


@pytest.mark.parametrize("name", ["llama_prefill_b1", "train_step", "compiled"])
def test_bandwidth_unmodelled_operators_listed(dash_store, name):
    tid = dash_store.ids[name]
    page = route(dash_store.db, f"/trace/{tid}/bandwidth", "")
    r = _analysis(dash_store.db, "bandwidth", tid)
    un = r.tables["unmodelled"]
    # the unmodelled operators' time is what the modelled share leaves out
    assert int(un["gpu_ns"].sum()) == r.scalars["gpu_ns"] - r.scalars["modelled_gpu_ns"]
    if not len(un):
        assert find(page, "msg-bw-all-modelled") is not None and find(page, "bw-unmodelled") is None
        return
    grid = find(page, "bw-unmodelled")
    rows = grid.rowData
    assert [x["name"] for x in rows] == un["name"].tolist()
    assert ns_columns(grid) == {"gpu_ns": (1_000_000, 3)}  # shown in ms
    assert [shown_ms(grid, x, "gpu_ns") for x in rows] == [round(v / 1e6, 3) for v in un["gpu_ns"]]
    assert [x["reason"] for x in rows] == un["reason"].tolist()


@pytest.mark.parametrize("name, msg", [("cpu_only", "msg-bw-no-gpu")])
def test_bandwidth_empty_cases(dash_store, name, msg):
    page = route(dash_store.db, f"/trace/{dash_store.ids[name]}/bandwidth", "")
    assert find(page, msg) is not None and find(page, bandwidth.FIGURE_ID) is None
    assert "CPU-only" in texts(page)


def test_graph_replays_unattributed_are_said(dash_store):
    tid = dash_store.ids["small_kernels_graph"]
    r = _analysis(dash_store.db, "bandwidth", tid)
    page = route(dash_store.db, f"/trace/{tid}/bandwidth", "")
    assert r.scalars["unattributed_gpu_ns"] > 0  # CUDA-graph replays have no leaf operator
    assert r.scalars["gpu_ns"] == 0 and r.scalars["modelled_share"] is None
    assert f"All {r.scalars['unattributed_gpu_ns'] / 1e6:,.3f} ms of GPU activity has no leaf operator" in texts(page)
    assert find(page, "msg-bw-nothing-modelled") is not None
    assert find(page, "bw-kpi-modelled_share").children == "—"
    # no signature: neither figure nor table (the selection callback needs both, or the browser logs an error)
    assert find(page, bandwidth.FIGURE_ID) is None and find(page, bandwidth.TABLE_ID) is None


# ------------------------------------------------------------------ Power

def test_power_numbers_equal_the_analysis_json(client, dash_store):
    tid = dash_store.ids["llama_prefill_b128"]
    page = _page(client, f"/trace/{tid}/power")
    js = json.loads(_analysis(dash_store.db, "power", tid).to_json())
    for key in ("energy_per_iteration_mj", "energy_per_unit_mj", "j_per_tflop"):
        assert js[key] is not None
        assert float(_find(page, f"power-kpi-{key}")["props"]["data-value"]) == pytest.approx(js[key], rel=1e-12)
    assert _text(_find(page, "power-kpi-j_per_tflop")) == f"{js['j_per_tflop']:,.3f} J/TFLOP"
    assert _text(_find(page, "power-kpi-energy_per_iteration_mj")) == f"{js['energy_per_iteration_mj'] / 1000:,.3f} J"
    bp = js["busy_power"]
    if bp["mean_w"] is None:  # the 160 ms window holds < 10 steps of the ~100 ms power reading
        assert bp["reason"] and _find(page, "power-kpi-busy_power")["props"]["data-value"] in ("", None)
    else:
        assert float(_find(page, "power-kpi-busy_power")["props"]["data-value"]) == pytest.approx(bp["mean_w"])
        assert _text(_find(page, "power-kpi-busy_power")).startswith(
            f"{bp['mean_w']:,.1f} W (peak {bp['peak_w']:,.1f} W")
    sm = js["clocks"]["sm_clock_mhz"]
    assert _text(_find(page, "power-kpi-sm_clock_mhz")) == f"{sm['median']:,.0f} MHz (min {sm['min']:,}, max {sm['max']:,})"
    # J/TFLOP by hand: energy per iteration (J) / (FLOPs / steps / 1e12); this trace has 2 ProfilerSteps
    steps = sum(1 for p in js["phases"] if p["kind"] == "step")
    assert js["j_per_tflop"] == pytest.approx((js["energy_per_iteration_mj"] / 1e3) / (js["flops"] / steps / 1e12))


def test_power_null_numbers_say_why(client, dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    page = _page(client, f"/trace/{tid}/power")
    r = _analysis(dash_store.db, "power", tid)
    s, tr = r.scalars, r.trust
    # a 38 ms trace under a ~100 ms counter step: the trace window is below 10 steps, so its energy is null
    assert s["trace_energy_mj"] is None and s["trace_window_ns"] < tr["min_window_ns"] == 10 * tr["counter_step_ns"]
    kpi = _find(page, "power-kpi-trace_energy_mj")
    assert kpi["props"]["data-value"] == "" and _text(kpi) == "n/a"
    why = _text(_find(page, "power-why-trace_energy_mj"))
    assert f"({s['trace_window_ns'] / 1e6:,.1f} ms) is shorter than 10 counter steps" in why
    assert f"{tr['min_window_ns'] / 1e6:,.1f} ms" in why
    phases = _find(page, "power-phases")["props"]["rowData"]
    assert len(phases) == len(r.tables["phases"]) and all(p["energy"] == "n/a" for p in phases)
    short = [int(d) for d in r.tables["phases"]["dur_ns"]]  # every phase is shorter than 10 counter steps: one sentence
    assert _text(_find(page, "power-phases-na")).startswith(
        f"n/a: {len(short)} phase{'s' if len(short) > 1 else ''} of {min(short) / 1e6:,.1f}")


def test_power_timeline_is_binned_on_the_trace_axis(client, dash_store):
    tid = dash_store.ids["llama_prefill_b8"]
    fig = _find(_page(client, f"/trace/{tid}/power"), "power-timeline")["props"]["figure"]
    with open_store(dash_store.db, read_only=True) as store:
        tel = store.query("SELECT ts_ns, power_mw FROM telemetry WHERE trace_id = $t ORDER BY ts_ns", {"t": tid})
        tr = store.query("SELECT start_ns, clock_offset_ns FROM traces WHERE trace_id = $t", {"t": tid}).iloc[0]
        busy = get_analysis("summary").fn(store, tid).scalars["busy_ns"]
    by_name = {t["name"]: t for t in fig["data"]}
    p = by_name["power (averaged)"]
    xs, ys = _values(p["x"]), _values(p["y"])
    assert 0 < len(xs) <= 2000 and len(xs) == len(tel)  # fewer samples than bins: one point per sample
    # second way: trace time = ts - offset, in ms since the trace start; power in W
    t_ms = ((tel["ts_ns"] - int(tr["clock_offset_ns"]) - int(tr["start_ns"])) / 1e6).round(4).tolist()
    assert xs == pytest.approx(t_ms, abs=1e-4)
    assert ys == pytest.approx((tel["power_mw"] / 1000).round(3).tolist())
    # busy shading: at most 2000 bins whose busy time adds up to the summary's busy_ns
    b = by_name["GPU 0 busy (% of bin)"]
    bx = _values(b["x"])
    assert len(bx) <= 2000 and b["yaxis"] == "y2"
    width_ms = bx[1] - bx[0]
    total = sum(y / 100 * width_ms for y in _values(b["y"])[:-1])
    assert total == pytest.approx(busy / 1e6, rel=0.01)


@pytest.mark.parametrize("name", ["probe_train", "cpu_only", "nsys"])
def test_power_without_telemetry_says_so(dash_store, name):
    page = route(dash_store.db, f"/trace/{dash_store.ids[name]}/power", "")
    assert find(page, "msg-power-no-telemetry") is not None and find(page, "power-timeline") is None
    assert "No telemetry was recorded" in texts(page)


# ------------------------------------------------------------------ Compare

def test_compare_two_traces_over_http(client, dash_store):
    a, b = dash_store.ids["llama_prefill_b1"], dash_store.ids["llama_prefill_b8"]
    page = _page(client, "/compare", f"?a={a}&b={b}")
    js = json.loads(_analysis(dash_store.db, "diff", [a, b]).to_json())
    head = _find(page, "compare-headline")["props"]["rowData"]
    assert [h["metric"] for h in head] == [h["metric"] for h in js["headline"]]
    for row, ref in zip(head, js["headline"]):
        assert row["delta_pct"] == (None if ref["delta_pct"] is None else round(ref["delta_pct"], 1))
        if ref["metric"].endswith("_ns"):
            assert row["A"] == f"{ref['a'] / 1e6:,.3f} ms" and row["B"] == f"{ref['b'] / 1e6:,.3f} ms"
    matched = _find(page, "compare-matched")["props"]["rowData"]
    ref_m = [g for g in js["groups"] if g["status"] == "matched"]
    assert len(matched) == min(len(ref_m), compare.TOP_GROUPS) == js["matched_groups"]
    assert [(m["key"], m["count_a"], m["count_b"]) for m in matched] == \
        [(g["key"], g["count_a"], g["count_b"]) for g in ref_m]
    assert [abs(m["delta_ms"]) for m in matched] == sorted((abs(m["delta_ms"]) for m in matched), reverse=True)
    # groups add up to each trace's kernel time (docs/metrics.md), and the page shows that same split
    kt = {h["metric"]: h for h in js["headline"]}["kernel_time_ns"]
    assert sum(g["time_a_ns"] for g in js["groups"]) == kt["a"] and sum(g["time_b_ns"] for g in js["groups"]) == kt["b"]
    removed = _find(page, "compare-removed")
    assert (len(removed["props"]["rowData"]) if removed else 0) == js["removed_groups"]
    assert f"{js['matched_groups']:,} matched groups" in _text(_find(page, "compare-counts"))
    # the dropdowns show the URL's choice
    assert _find(page, "compare-a")["props"]["value"] == a and _find(page, "compare-b")["props"]["value"] == b


def test_compare_update_callback_writes_the_url(dash_store):
    a, b = dash_store.ids["small_kernels_eager"], dash_store.ids["small_kernels_graph"]
    children, search = compare.update(dash_store.db, "compare-b", a, b, "llama_prefill", None, "batch")
    assert search == f"?a={a}&b={b}"  # a trace dropdown fired: traces mode, sweeps ignored
    div = dash.html.Div(children)
    r = _analysis(dash_store.db, "diff", [a, b])
    assert f"{r.scalars['matched_groups']:,} matched groups" in texts(div)
    assert find(div, "compare-groups-figure") is not None
    # a trace picked alone: a sentence, and the URL keeps only it
    children, search = compare.update(dash_store.db, "compare-a", a, None, None, None, "batch")
    assert search == f"?a={a}" and find(dash.html.Div(children), "msg-compare-pick") is not None
    # the URL restores what the callback wrote
    again = route(dash_store.db, "/compare", f"?a={a}&b={b}")
    assert texts(find(again, compare.RESULT_ID)) == texts(div)


def test_compare_ignores_a_dropdown_that_repeats_the_url(dash_store):
    """A dropdown reporting its value on mount must not replace the comparison the URL opened."""
    url = "?sweep_a=llama_prefill&sweep_b=llama_prefill&by=batch"
    assert not compare.changed("compare-a", None, url)  # empty trace dropdown in sweeps mode
    assert not compare.changed("compare-by", "batch", "?a=x&b=y")  # absent by reads as batch
    # Dash empties the by dropdown when no trace has a numeric 'batch' label (GPT-2 at two vocabulary sizes):
    # that mount used to switch to sweeps mode, show "Pick two traces" and drop a and b from the URL
    assert not compare.changed("compare-by", None, "?a=x&b=y")
    assert compare.update(dash_store.db, "compare-by", "x", "y", None, None, None, "?a=x&b=y") == (dash.no_update,) * 2
    assert compare.changed("compare-by", "seq", "?a=x&b=y")
    assert not compare.changed("compare-sweep-a", "llama_prefill", url)
    assert compare.changed("compare-sweep-b", "other", url) and compare.changed("compare-a", "x", url)
    assert compare.update(dash_store.db, "compare-a", None, None, "llama_prefill", "llama_prefill", "batch",
                          url) == (dash.no_update, dash.no_update)
    assert compare.update(dash_store.db, None, "x", "y", None, None, "batch", "") == (dash.no_update,) * 2


def test_compare_choice():
    assert compare.choice("compare-sweep-b", "x", "y", "s1", "s2", None) == {"sweep_a": "s1", "sweep_b": "s2",
                                                                             "by": "batch"}
    assert compare.choice("compare-a", "x", None, "s1", "s2", "seq") == {"a": "x"}
    assert compare.choice("compare-by", "x", "y", None, None, "seq") == {"a": "x", "b": "y"}  # no sweep chosen
    assert compare.search_of({"sweep_a": "s 1", "by": "batch"}) == "?sweep_a=s+1&by=batch"


@pytest.fixture(scope="module")
def two_sweeps(dash_store, tmp_path_factory):
    """A copy of the store where the graph pair is a second sweep: sweep=sk, batch 1 (eager) and 8 (graph)."""
    from click.testing import CliRunner

    from kernelscope.cli import cli

    db = tmp_path_factory.mktemp("sweeps") / "s.duckdb"
    shutil.copy(dash_store.db, db)
    for name, batch in (("small_kernels_eager", 1), ("small_kernels_graph", 8)):
        r = CliRunner().invoke(cli, ["label", "--db", str(db), dash_store.ids[name], "sweep=sk", f"batch={batch}"])
        assert r.exit_code == 0, r.output
    return db


def test_compare_two_sweeps(two_sweeps, dash_store):
    page = route(two_sweeps, "/compare", "?sweep_a=llama_prefill&sweep_b=sk&by=batch")
    with open_store(two_sweeps, read_only=True) as store:
        r = get_analysis("diff").fn(store, None, by="batch", sweep="llama_prefill", sweep_b="sk")
    head = find(page, "compare-headline").rowData
    assert [(h["label"], h["metric"]) for h in head] == list(zip(r.tables["headline"]["label"],
                                                                 r.tables["headline"]["metric"]))
    assert sorted({h["label"] for h in head}) == [1, 8]  # batch=128 is in llama_prefill only
    assert "in one sweep only" in texts(page) and "128" in texts(page)
    fig = find(page, "compare-headline-figure").figure
    assert {t.name for t in fig.data} == set(r.tables["headline"]["metric"])
    assert find(page, "compare-sweep-a").value == "llama_prefill" and find(page, "compare-a").value is None
    children, search = compare.update(two_sweeps, "compare-sweep-b", None, None, "llama_prefill", "sk", "batch",
                                      "?sweep_a=llama_prefill&by=batch")
    assert search == "?sweep_a=llama_prefill&sweep_b=sk&by=batch"


@pytest.mark.parametrize("search, msg, words", [
    ("", "msg-compare-pick", "Pick two traces"),
    ("?a=no_such_trace&b=also_not", "msg-compare-error", "no_such_trace"),
    ("?sweep_a=llama_prefill", "msg-compare-pick", "Pick two sweeps"),
    ("?sweep_a=llama_prefill&sweep_b=llama_prefill&by=no_label", "msg-compare-error", "no trace is labelled"),
])
def test_compare_messages(dash_store, search, msg, words):
    page = route(dash_store.db, "/compare", search)
    assert find(page, msg) is not None and words in texts(find(page, msg))


def test_compare_needs_two_traces(empty_db):
    page = route(empty_db, "/compare", "?a=x&b=y")
    assert find(page, "msg-compare-few") is not None
    assert re.search(r"at least two traces; this store has 0", texts(page))


def test_compare_is_in_the_header(client):
    layout = client.get("/_dash-layout").get_json()
    assert '"href": "/compare"' in json.dumps(layout)


def test_nav_links_bandwidth_and_power(dash_store):
    page = route(dash_store.db, f"/trace/{dash_store.ids['llama_prefill_b1']}/power", "")
    assert find(page, "nav-bandwidth") is not None and "ks-active" in find(page, "nav-power").className
