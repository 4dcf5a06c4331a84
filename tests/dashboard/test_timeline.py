"""Timeline page: DuckDB binning and windowing vs independent Python computations over the same rows,
the callbacks as plain functions, the layout and callbacks through the Flask test client, the Perfetto
export, and the empty cases (CPU-only, no telemetry, empty window)."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qs

import numpy as np
import pytest

from kernelscope.dashboard.app import route
from kernelscope.dashboard.pages import timeline as page
from kernelscope.reports import timeline as tfig
from kernelscope.reports import timeline_data as td

from .tree import find, texts
from .tree import find_json as _find_json


def _rows(store, tid):
    """Every event with its lane key, read straight from the tables (no timeline_data SQL)."""
    q = store.query
    out = []
    for r in q("SELECT pid, tid, coalesce(depth, 0) AS d, start_ns, end_ns FROM cpu_ops WHERE trace_id = $t",
               {"t": tid}).itertuples():
        out.append((("cpu", r.pid, r.tid, r.d), r.start_ns, r.end_ns))
    for r in q("SELECT pid, tid, start_ns, end_ns FROM launches WHERE trace_id = $t", {"t": tid}).itertuples():
        out.append((("api", r.pid, r.tid, 0), r.start_ns, r.end_ns))
    for r in q("SELECT device, stream, start_ns, end_ns FROM gpu_activities WHERE trace_id = $t",
               {"t": tid}).itertuples():
        out.append((("gpu", r.device, r.stream, 0), r.start_ns, r.end_ns))
    for r in q("SELECT kind, start_ns, end_ns FROM annotations WHERE trace_id = $t", {"t": tid}).itertuples():
        out.append((("ann", td.ANN_KINDS.index(r.kind), 0, 0), r.start_ns, r.end_ns))
    return [(tuple(int(x) if not isinstance(x, str) else x for x in k), int(s), int(e)) for k, s, e in out]


def _python_bins(rows, a, b, w):
    """Reference binning by hand: per lane and bin, the sum of each interval's overlap with the bin
    [a + i*w, a + (i+1)*w) ∩ [a, b), capped at w."""
    acc: dict = {}
    for key, s, e in rows:
        s, e = max(s, a), min(e, b)
        if e <= s:
            continue
        for i in range((s - a) // w, (e - 1 - a) // w + 1):
            lo, hi = a + i * w, a + (i + 1) * w
            acc[(key, i)] = acc.get((key, i), 0) + min(e, hi) - max(s, lo)
    return {k: min(v, w) for k, v in acc.items() if v > 0}


def _as_dict(df):
    return {((r.src, int(r.k1), int(r.k2), int(r.k3)), int(r.bin)): int(r.busy_ns) for r in df.itertuples()}


@pytest.mark.parametrize("name", ["llama_prefill_b1", "two_devices", "train_step"])
def test_direct_binning_equals_python(dash_store, store, name):
    tid = dash_store.ids[name]
    info = td.trace_info(store, tid)
    rows = _rows(store, tid)
    # a window that cuts intervals at both ends and a bin width that does not divide it
    a = info["start_ns"] + (info["end_ns"] - info["start_ns"]) // 7
    b = info["end_ns"] - (info["end_ns"] - info["start_ns"]) // 5
    w = (b - a) // 37 + 3  # 37 or 38 bins, the last one cut by b
    got = _as_dict(td.bin_sql_query(store, tid, a, b, w))
    assert got == _python_bins(rows, a, b, w)
    assert len({lane for lane, _ in got}) >= 3 and len(got) > 10


def test_cached_binning_equals_direct_and_python(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    info = td.trace_info(store, tid)
    a, b = info["start_ns"], info["end_ns"]
    bins, start, width = td.binned(store, tid, a, b, max_bins=500, info=info)
    base_w = -(-(b - a) // td.BASE_BINS)
    assert width % base_w == 0 and width // base_w == -(-(b - a) // (500 * base_w))  # the cache path
    assert start == a and -(-(b - a) // width) <= 500
    # the same bins straight from DuckDB and by hand: equal wherever no base bin was capped
    direct = _as_dict(td.bin_sql_query(store, tid, start, start + width * (-(-(b - a) // width)), width))
    assert _as_dict(bins) == direct == _python_bins(_rows(store, tid), start, start + width * 10**9, width)


def test_gpu_lane_busy_equals_the_busy_union(dash_store, store):
    """Second way: one stream, no same-stream overlap -> the GPU lane's bins sum to the trace's busy_ns
    (busy_intervals, the union written at ingest)."""
    tid = dash_store.ids["llama_prefill_b1"]
    info = td.trace_info(store, tid)
    bins, _, _ = td.binned(store, tid, info["start_ns"], info["end_ns"], info=info)
    busy = int(store.query("SELECT sum(end_ns - start_ns) AS b FROM busy_intervals WHERE trace_id = $t",
                           {"t": tid})["b"].iloc[0])
    assert int(bins.loc[bins["src"] == "gpu", "busy_ns"].sum()) == busy


def test_count_and_events_in_a_window(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    info = td.trace_info(store, tid)
    a, b = info["start_ns"] + 5_000_000, info["start_ns"] + 6_000_000
    want = sum(1 for _, s, e in _rows(store, tid) if s < b and e > a)
    assert td.count_events(store, tid, a, b) == want > 100
    ev = td.events(store, tid, a, b)
    assert len(ev) == want and (ev["start_ns"] < b).all() and (ev["end_ns"] > a).all()
    assert list(ev["start_ns"]) == sorted(ev["start_ns"])


def test_lanes_order_and_labels(dash_store, store):
    two = td.lanes(store, dash_store.ids["two_devices"])
    assert two["label"].tolist() == ["GPU 0 stream 7", "GPU 0 stream 13", "GPU 1 stream 7"]
    lanes = td.lanes(store, dash_store.ids["llama_prefill_b8"])
    assert lanes["lane"].tolist() == list(range(len(lanes)))
    assert lanes["src"].tolist() == sorted(lanes["src"], key=["ann", "cpu", "api", "gpu"].index)
    cpu = lanes[lanes["src"] == "cpu"]
    assert cpu["k3"].tolist() == list(range(len(cpu)))  # depths 0..max of the one thread
    want = store.query("SELECT max(depth) AS d FROM cpu_ops WHERE trace_id = $t",
                       {"t": dash_store.ids["llama_prefill_b8"]})["d"].iloc[0]
    assert len(cpu) == want + 1


def test_segments_are_nan_separated():
    x, y = tfig.segments([1_000_000, 3_000_000], [2_000_000, 5_000_000], 0, 4)
    assert x[[0, 1, 3, 4]].tolist() == [1.0, 2.0, 3.0, 5.0] and np.isnan(x[2]) and np.isnan(x[5])
    assert y[[0, 1, 3, 4]].tolist() == [4, 4, 4, 4] and np.isnan(y[2])


def test_figures_are_valid_plotly(dash_store, store, monkeypatch):
    """The builders skip Plotly's validation per request: validate both kinds here."""
    import plotly.graph_objects as go

    tid = dash_store.ids["llama_prefill_b8"]
    events = page.render(store, tid, {"t0": "5", "t1": "6", "op": "aten::mm"})["figure"]
    monkeypatch.setattr(td, "EVENT_LIMIT", 1000)
    binned = page.render(store, tid, {"op": "aten::mm"})["figure"]
    for fig in (events, binned):
        checked = go.Figure(fig.to_dict())  # raises on an invalid property or value
        assert len(checked.data) == len(fig.data) > 1


# ---- the page: render, callbacks as plain functions ----

def test_zoomed_in_draws_individual_events(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    info = td.trace_info(store, tid)
    view = page.render(store, tid, {"t0": "5", "t1": "6"})
    assert view["mode"] == "events" and view["a"] == info["start_ns"] + 5_000_000
    fig = view["figure"]
    assert list(fig.layout.xaxis.range) == [5.0, 6.0]
    gpu_lane = int(td.lanes(store, tid).query("src == 'gpu'")["lane"].iloc[0])
    kernels = [t for t in fig.data if t.type == "scattergl" and t.y is not None and len(t.y)
               and t.y[0] == gpu_lane]
    n = sum(np.isfinite(np.asarray(t.x, dtype=float)).sum() // 2 for t in kernels)
    want = int(store.query("SELECT count(*) AS n FROM gpu_activities WHERE trace_id = $t AND start_ns < $b "
                           "AND end_ns > $a", {"t": tid, "a": view["a"], "b": view["b"]})["n"].iloc[0])
    assert n == want > 10


def test_zoomed_out_is_binned(dash_store, store, monkeypatch):
    tid = dash_store.ids["llama_prefill_b8"]
    monkeypatch.setattr(td, "EVENT_LIMIT", 1000)  # the sample has 7k events; 1M-kernel traces have 6M
    view = page.render(store, tid, {})
    assert view["mode"] == "binned" and "busy % in bins" in view["status"]
    heat = [t for t in view["figure"].data if t.type == "heatmap"]
    assert len(heat) == 1 and np.asarray(heat[0].z).shape[0] == len(td.lanes(store, tid))
    # one heatmap on the lanes (+ telemetry series below): never one trace per event
    lanes_axis = [t for t in view["figure"].data if t.yaxis in (None, "y")]
    devices = store.query("SELECT count(DISTINCT device_index) AS n FROM telemetry WHERE trace_id = $t",
                          {"t": tid})["n"].iloc[0]
    assert len(lanes_axis) == 1 and len(view["figure"].data) - 1 <= len(td.TELEMETRY_COLUMNS) * devices


def test_selection_draws_flow_lines(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    info = td.trace_info(store, tid)
    a, b = info["start_ns"] + 5_000_000, info["start_ns"] + 6_000_000
    op = store.query("SELECT op_id FROM cpu_ops WHERE trace_id = $t AND name = 'aten::mm' AND start_ns >= $a "
                     "ORDER BY start_ns LIMIT 1", {"t": tid, "a": a})["op_id"].iloc[0]
    sel, label = td.selection(store, tid, str(op), a, b)
    # second way: aten::mm is a leaf, so its kernels are the activities whose leaf operator it is
    want = store.query("SELECT activity_id FROM gpu_activities WHERE trace_id = $t AND leaf_op_id = $o",
                       {"t": tid, "o": int(op)})["activity_id"].tolist()
    assert sorted(sel["activity_id"]) == sorted(want) and len(want) >= 1 and "aten::mm" in label
    view = page.render(store, tid, {"t0": "5", "t1": "6", "op": str(op)})
    flow = [t for t in view["figure"].data if t.name == "launch → activity"][0]
    x = np.asarray(flow.x, dtype=float)
    assert x[0] == pytest.approx((sel["launch_start_ns"].iloc[0] - info["start_ns"]) / 1e6, abs=1e-9)
    assert x[1] == pytest.approx((sel["start_ns"].iloc[0] - info["start_ns"]) / 1e6, abs=1e-9)
    red = [t for t in view["figure"].data if t.name == "selected activities"][0]
    assert np.isfinite(np.asarray(red.x, dtype=float)).sum() == 2 * len(want)


def test_selection_by_name_binned(dash_store, store, monkeypatch):
    tid = dash_store.ids["llama_prefill_b8"]
    monkeypatch.setattr(td, "EVENT_LIMIT", 1000)
    view = page.render(store, tid, {"op": "aten::mm"})
    heat = [t for t in view["figure"].data if t.type == "heatmap"]
    assert len(heat) == 2 and heat[1].name == "selected" and np.asarray(heat[1].z).max() > 0
    info = td.trace_info(store, tid)
    sb, start, width = td.selection_bins(store, tid, "aten::mm", info["start_ns"], info["end_ns"], info=info)
    total = int(store.query("SELECT sum(dur_ns) AS d FROM gpu_activities g WHERE trace_id = $t AND leaf_op_id IN "
                            "(SELECT op_id FROM cpu_ops WHERE trace_id = $t AND name = 'aten::mm')",
                            {"t": tid})["d"].iloc[0])
    assert int(sb["busy_ns"].sum()) == total  # mm kernels never overlap on the stream: nothing capped


def test_update_zoom_click_and_reset(dash_store):
    tid = dash_store.ids["llama_prefill_b8"]
    out = page.update(dash_store.db, tid, "?op=aten::mm", relayout={"xaxis.range[0]": 5.0, "xaxis.range[1]": 6.0})
    fig, notes, status, mode, n, export, clear, details, search = out
    q = parse_qs(search.lstrip("?"))
    assert clear == f"/trace/{tid}/timeline?t0=5.000000&t1=6.000000"  # same window, no op
    assert q == {"op": ["aten::mm"], "t0": ["5.000000"], "t1": ["6.000000"]} and mode == "events"
    assert export.endswith("t0=5.000000&t1=6.000000") and int(n) > 0
    # zoom on a telemetry subplot's axis, and a range given as a list
    assert parse_qs(page.update(dash_store.db, tid, "", relayout={"xaxis2.range": [1, 2]})[-1].lstrip("?"))["t0"] \
        == ["1.000000"]
    # reset (double-click): the whole trace, selection kept
    assert page.update(dash_store.db, tid, search, relayout={"xaxis.autorange": True})[-1] == "?op=aten%3A%3Amm"
    # a resize or a y drag changes nothing
    assert page.update(dash_store.db, tid, search, relayout={"autosize": True}) is None
    # a click on a CPU operator selects that instance; elsewhere nothing
    out = page.update(dash_store.db, tid, search, click={"points": [{"customdata": 1234}]})
    assert parse_qs(out[-1].lstrip("?"))["op"] == ["1234"] and parse_qs(out[-1].lstrip("?"))["t0"] == ["5.000000"]
    assert page.update(dash_store.db, tid, search, click={"points": [{"x": 1}]}) is None


def test_zoom_relayout():
    assert page.zoom_relayout({"range": [3, 3.5], "at": 7}) == {"xaxis.range[0]": 3, "xaxis.range[1]": 3.5}
    assert page.zoom_relayout({"autorange": True, "at": 7}) == {"xaxis.autorange": True}
    assert page.zoom_relayout(None) is None


def test_url_restores_the_view(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    search = page.update(dash_store.db, tid, "", relayout={"xaxis.range[0]": 7.25, "xaxis.range[1]": 8.5})[-1]
    tree = route(dash_store.db, f"/trace/{tid}/timeline", search)
    fig = find(tree, "timeline-graph").figure
    assert list(fig.layout.xaxis.range) == [7.25, 8.5]


def test_telemetry_aligned_with_the_clock_offset(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    info = td.trace_info(store, tid)
    assert info["telemetry_samples"] > 0 and info["clock_offset_ns"] is not None
    view = page.render(store, tid, {})
    power = [t for t in view["figure"].data if t.name and "power" in t.name][0]
    raw = store.query("SELECT ts_ns, power_mw FROM telemetry WHERE trace_id = $t ORDER BY ts_ns", {"t": tid})
    t_ms = (raw["ts_ns"] - info["clock_offset_ns"] - info["start_ns"]) / 1e6
    inside = (t_ms >= 0) & (t_ms < (info["end_ns"] - info["start_ns"]) / 1e6)
    xs = np.asarray(power.x, dtype=float)
    for x in t_ms[inside]:
        assert np.isclose(xs, x, atol=1e-9).any()
    ys = np.asarray(power.y, dtype=float)
    for x, w in zip(t_ms[inside], raw["power_mw"][inside] / 1000.0):  # W at the sample's aligned time
        assert ys[np.isclose(xs, x, atol=1e-9)][0] == pytest.approx(w)


def test_messages_cpu_only_no_telemetry_empty_window(dash_store, store):
    cpu = page.render(store, dash_store.ids["cpu_only"], {})
    ids = [i for i, _ in cpu["notes"]]
    assert "msg-no-gpu-lanes" in ids and "msg-no-telemetry" in ids and cpu["figure"] is not None
    probe = page.render(store, dash_store.ids["probe_train"], {})
    assert "msg-no-telemetry" in [i for i, _ in probe["notes"]]
    assert "msg-no-telemetry" not in [i for i, _ in page.render(store, dash_store.ids["llama_prefill_b1"], {})["notes"]]
    # a window after the trace's end
    late = page.render(store, dash_store.ids["llama_prefill_b1"], {"t0": "1e6", "t1": "2e6"})
    assert late["mode"] == "empty" and "msg-empty-window" in [i for i, _ in late["notes"]]
    bad = page.render(store, dash_store.ids["llama_prefill_b1"], {"t0": "x"})
    assert "msg-bad-window" in [i for i, _ in bad["notes"]]
    none = page.render(store, dash_store.ids["llama_prefill_b1"], {"op": "no::such_op"})
    assert "msg-no-selection" in [i for i, _ in none["notes"]]


# ---- Flask test client ----

def _post(client, output, inputs, state):
    deps = client.get("/_dash-dependencies").get_json()
    first = output.strip(".").split("...")[0]
    output = next(d["output"] for d in deps if first in d["output"]) if "..." in output else output
    body = {"output": output, "outputs": [{"id": o.split(".")[0], "property": o.split(".")[1]}
                                          for o in output.strip(".").split("...")],
            "inputs": inputs, "state": state, "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"]}
    if "..." not in output:
        body["outputs"] = body["outputs"][0]
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200, r.data[:300]
    return r.get_json()["response"]


def _values(arr):
    if isinstance(arr, dict):
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=arr["dtype"])
    return np.asarray(arr, dtype=float)



def test_layout_and_zoom_over_http(client, dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    resp = _post(client, "page.children", [{"id": "url", "property": "pathname", "value": f"/trace/{tid}/timeline"}],
                 [{"id": "url", "property": "search", "value": "?t0=1&t1=2"}])
    tree = resp["page"]["children"]
    fig = _find_json(tree, "timeline-graph")["props"]["figure"]
    assert fig["layout"]["xaxis"]["range"] == [1.0, 2.0]
    xs = np.concatenate([_values(t["x"]) for t in fig["data"] if t["type"] == "scattergl"])
    finite = xs[np.isfinite(xs)]
    assert len(finite) > 0 and finite.max() > 1.0 and finite.min() < 2.0
    assert _find_json(tree, "timeline-status")["props"]["data-mode"] == "events"
    # the zoom callback through /_dash-update-component
    out = "..timeline-graph.figure...timeline-notes.children...timeline-status.children..." \
          "timeline-status.data-mode...timeline-status.data-events...timeline-export.href...timeline-clear.href..." \
          "timeline-details.children...url.search.."
    # (the browser-side filter turns a relayoutData with an x range into timeline-zoom.data)
    resp = _post(client, out, [{"id": "timeline-zoom", "property": "data", "value": {"range": [3, 3.5], "at": 1}},
                               {"id": "timeline-graph", "property": "clickData", "value": None},
                               {"id": "timeline-find", "property": "n_submit", "value": None},
                               {"id": "timeline-find-next", "property": "n_clicks", "value": 0}],
                 [{"id": "timeline-find", "property": "value", "value": ""},
                  {"id": "timeline-trace", "property": "data", "value": tid},
                  {"id": "url", "property": "search", "value": ""}])
    assert resp["url"]["search"] == "?t0=3.000000&t1=3.500000"
    assert resp["timeline-graph"]["figure"]["layout"]["xaxis"]["range"] == [3.0, 3.5]


def test_perfetto_export(client, dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    info = td.trace_info(store, tid)
    r = client.get(f"/export/{tid}/perfetto.json?t0=5&t1=6")
    assert r.status_code == 200 and "attachment" in r.headers["Content-Disposition"]
    doc = json.loads(r.data)
    a, b = info["start_ns"] + 5_000_000, info["start_ns"] + 6_000_000
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == td.count_events(store, tid, a, b) and not doc["otherData"]["truncated"]
    # exact ns: ts (µs since the origin, 3 decimals) * 1000 + origin = a stored start
    kernel = store.query("SELECT name, start_ns, end_ns FROM gpu_activities WHERE trace_id = $t AND start_ns >= $a "
                         "ORDER BY start_ns LIMIT 1", {"t": tid, "a": a}).iloc[0]
    hit = [e for e in xs if e["name"] == kernel["name"] and round(e["ts"] * 1000) + info["start_ns"] == kernel["start_ns"]]
    assert len(hit) == 1 and round(hit[0]["dur"] * 1000) == kernel["end_ns"] - kernel["start_ns"]
    # a flow per activity whose launch call is in the window too
    want = int(store.query("SELECT count(*) AS n FROM gpu_activities g JOIN launches l ON l.trace_id = g.trace_id "
                           "AND l.launch_id = g.launch_id WHERE g.trace_id = $t AND g.start_ns < $b AND g.end_ns > $a "
                           "AND l.start_ns < $b AND l.end_ns > $a", {"t": tid, "a": a, "b": b})["n"].iloc[0])
    assert sum(e["ph"] == "s" for e in doc["traceEvents"]) == sum(e["ph"] == "f" for e in doc["traceEvents"]) == want
    assert any(e["ph"] == "C" for e in doc["traceEvents"])  # telemetry counters
    assert client.get("/export/nosuchtrace/perfetto.json").status_code == 404


def test_perfetto_export_is_bounded(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    info = td.trace_info(store, tid)
    doc = td.chrome_trace(store, tid, info["start_ns"], info["end_ns"], limit=100)
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == 100 and doc["otherData"]["truncated"]
    assert "first 100" in doc["otherData"]["note"]


def test_page_texts(dash_store):
    tree = route(dash_store.db, f"/trace/{dash_store.ids['cpu_only']}/timeline", "")
    assert "no GPU activity" in texts(find(tree, "msg-no-gpu-lanes"))


def test_event_ids_go_to_the_browser_as_a_plain_list(dash_store, store):
    """issue 11: Dash's clickData reads ``figure.data[curve].customdata[point]`` from the JSON as sent; a
    numpy array goes as a base64 typed array ({dtype, bdata}), so a real click carried no operator id. The
    ids go as a JSON list: each segment's start and end carry its event, the gap null: a CPU operator's op_id
    (int), any other bar 'src:id' (issue 13: every bar can be selected)."""
    tid = dash_store.ids["llama_prefill_b8"]
    view = page.render(store, tid, {"t0": "10", "t1": "11"})
    assert view["mode"] == "events"
    lanes = td.lanes(store, tid)
    cpu_labels = set(lanes.loc[lanes["src"] == "cpu", "label"])
    data = [t for t in json.loads(view["figure"].to_json())["data"] if t.get("customdata") is not None]
    cpu = [t for t in data if t["name"] in cpu_labels]
    assert cpu and len(data) > len(cpu)
    ids = set(store.query("SELECT op_id FROM cpu_ops WHERE trace_id = $t", {"t": tid})["op_id"])
    want = {"gpu": set(store.query("SELECT activity_id AS i FROM gpu_activities WHERE trace_id = $t", {"t": tid})["i"]),
            "api": set(store.query("SELECT launch_id AS i FROM launches WHERE trace_id = $t", {"t": tid})["i"]),
            "ann": set(store.query("SELECT ann_id AS i FROM annotations WHERE trace_id = $t", {"t": tid})["i"])}
    for t in data:
        cd = t["customdata"]
        assert isinstance(cd, list) and cd[2::3] == [None] * (len(cd) // 3) and cd[0::3] == cd[1::3]
        if t in cpu:
            assert all(isinstance(v, int) for v in cd[0::3]) and set(cd[0::3]) <= ids
        else:
            src = {v.split(":")[0] for v in cd[0::3]}
            assert len(src) == 1 and {int(v.split(":")[1]) for v in cd[0::3]} <= want[src.pop()]
