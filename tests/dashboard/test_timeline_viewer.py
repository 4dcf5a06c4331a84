"""The Timeline as a viewer (issue 13, capability 6), callback by callback, against references read straight
from the sample's raw files (the trace JSON with the standard library, telemetry.parquet with pyarrow): the
hover of every kernel, operator and launch call of a window (a wrong field -- launch time for start, External
id for correlation, top-level for leaf operator -- shows up), the search (jumps to the window of the k-th
match in start order, selects and marks it, wraps), NCCL kernels in their own colour (ddp2), thread names on
the lanes, the telemetry rows (every quantity as steps with a legend, at the raw sample times), the busy-%
colour bar, the labels written in bars, and a click on a kernel giving its details."""

from __future__ import annotations

import decimal
import gzip
import html
import json
import re
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pyarrow.parquet as pq
import pytest
from dash import html as dhtml

from kernelscope.dashboard.pages import timeline as page
from kernelscope.reports import timeline as tfig
from kernelscope.reports import timeline_data as td
from kernelscope.reports import timeline_text as tt

from .tree import find
from .tree import texts as _texts

ROOT = Path(__file__).resolve().parents[2]
_HOST = {"cuda_runtime", "cuda_driver"}


def _ns(base: int, us) -> int:
    return base + int((decimal.Decimal(us) * 1000).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))


class Raw:
    """The raw trace JSON of a sample run: kernels, host calls by correlation, CPU operators per thread, thread
    names; times in epoch ns from the decimal text."""

    def __init__(self, run: str):
        doc = json.load(gzip.open(ROOT / "sample_traces" / run / "trace.json.gz"), parse_float=decimal.Decimal)
        base = int(doc.get("baseTimeNanoseconds", 0))
        self.kernels, self.calls, self.ops, self.events, self.meta = [], {}, {}, [], []
        for e in doc["traceEvents"]:
            if e.get("ph") == "M":
                self.meta.append(e)
                continue
            if e.get("ph") != "X" or "dur" not in e:
                continue
            s = _ns(base, e["ts"])
            r = {"name": e["name"], "cat": e.get("cat"), "start": s, "end": s + _ns(0, e["dur"]),
                 "dur_us": decimal.Decimal(e["dur"]), "pid": e.get("pid"), "tid": e.get("tid"),
                 "args": e.get("args") or {}}
            self.events.append(r)
            if r["cat"] == "kernel":
                self.kernels.append(r)
            elif r["cat"] in _HOST and "correlation" in r["args"]:
                self.calls[r["args"]["correlation"]] = r
            elif r["cat"] == "cpu_op":
                self.ops.setdefault((r["pid"], r["tid"]), []).append(r)

    def leaf_op(self, call: dict):
        """The deepest CPU operator on the call's thread enclosing it (the shortest enclosing one)."""
        enclosing = [o for o in self.ops.get((call["pid"], call["tid"]), [])
                     if o["start"] <= call["start"] and o["end"] >= call["end"]]
        return min(enclosing, key=lambda o: o["end"] - o["start"]) if enclosing else None


@pytest.fixture(scope="module")
def b8():
    return Raw("llama_prefill_b8")


@pytest.fixture(scope="module")
def ddp():
    return Raw("ddp2/ddp_rank0")


def _div(children):
    return dhtml.Div(children)


def texts(children) -> str:
    return _texts(_div(children) if isinstance(children, list) else children)


def _pts(fig, name_pred):
    """(trace, text) of the start point of every segment of the traces whose name passes ``name_pred``."""
    out = []
    for t in fig.data:
        if t.type == "scattergl" and t.name and name_pred(t.name) and t.text is not None:
            out += [(t, txt) for txt in list(t.text)[0::3]]
    return out


def _field(text: str, pattern: str) -> str:
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return m.group(1)


def _dims(text) -> str:
    return re.sub(r"\s", "", text if isinstance(text, str) else json.dumps(text))


def test_hover_of_every_kernel_operator_and_call_is_the_raw_events(dash_store, store, b8):
    tid = dash_store.ids["llama_prefill_b8"]
    origin = td.trace_info(store, tid)["start_ns"]
    view = page.render(store, tid, {"t0": "5", "t1": "6"})
    assert view["mode"] == "events" and view["events"] <= td.NAME_LIMIT
    by_corr = {k["args"]["correlation"]: k for k in b8.kernels}
    kernels = _pts(view["figure"], lambda n: n.startswith("GPU ") and n.endswith(" kernel"))
    assert len(kernels) > 20
    for _, text in kernels:
        k = by_corr[int(_field(text, r"<br>correlation (\d+)"))]
        name = html.unescape(_field(text, r"^<b>(.*?)</b>"))
        assert name == (k["name"] if len(k["name"]) <= tt.HOVER_NAME else k["name"][: tt.HOVER_NAME - 1] + "…")
        assert f"kernel on GPU {k['args']['device']} stream {k['args']['stream']}<br>" in text
        start_ms = float(_field(text, r"start ([\d,.]+) ms").replace(",", ""))
        assert start_ms == pytest.approx((k["start"] - origin) / 1e6, abs=2e-6)
        assert decimal.Decimal(_field(text, r" · ([\d.]+) µs")) == k["dur_us"].quantize(decimal.Decimal("0.001"))
        assert _field(text, r"grid (\[[^\]]*\])") == json.dumps(k["args"]["grid"])
        assert _field(text, r"block (\[[^\]]*\])") == json.dumps(k["args"]["block"])
        op = b8.leaf_op(b8.calls[k["args"]["correlation"]])
        assert _field(text, r"launched by ([^<]*?)(?: in |<br>)") == op["name"]
        assert _dims(_field(text, r"shapes ([^<]*)$")) == _dims(op["args"]["Input Dims"])
    # operators: their shapes; launch calls: their correlation and the activities they launched
    ops = {(o["name"], o["start"]): o for ops in b8.ops.values() for o in ops}
    for _, text in _pts(view["figure"], lambda n: re.search(r" d\d+$", n) is not None):
        start = origin + round(float(_field(text, r"start ([\d,.]+) ms").replace(",", "")) * 1e6)
        name = html.unescape(_field(text, r"^<b>(.*?)</b>"))
        o = min((o for (n, s), o in ops.items() if n == name and abs(s - start) <= 2), key=lambda o: o["start"])
        assert _dims(_field(text, r"shapes ([^<]*)$")) == _dims(o["args"].get("Input Dims", "not recorded"))
    calls = _pts(view["figure"], lambda n: n.endswith("CUDA API"))
    launched = {}
    for k in b8.kernels + [e for e in b8.events if e["cat"] in ("gpu_memcpy", "gpu_memset")]:
        c = k["args"].get("correlation")
        launched[c] = launched.get(c, 0) + 1
    assert calls
    for _, text in calls:
        c = int(_field(text, r"correlation (\d+)"))
        assert html.unescape(_field(text, r"^<b>(.*?)</b>")) == b8.calls[c]["name"]
        assert int(_field(text, r" · (\d+) GPU activities")) == launched.get(c, 0)


def test_search_jumps_to_the_next_match_selects_and_marks_it(dash_store, store, b8):
    tid = dash_store.ids["llama_prefill_b8"]
    origin = td.trace_info(store, tid)["start_ns"]
    text = "GeMM"  # case-insensitive
    hits = sorted((e for e in b8.events if text.lower() in e["name"].lower()), key=lambda e: e["start"])
    assert len(hits) >= 2 and all(e["cat"] == "kernel" for e in hits)
    search = ""
    for step, k in enumerate([0, 1, 0]):  # first, next, wrapped around to the first
        out = page.update(dash_store.db, tid, search, find=text)
        fig, notes, details, search = out[0], out[1], out[7], out[-1]
        q = {k2: v[0] for k2, v in parse_qs(search.lstrip("?")).items()}
        want = hits[k]
        t0, t1 = float(q["t0"]), float(q["t1"])
        assert t0 <= (want["start"] - origin) / 1e6 and (want["end"] - origin) / 1e6 <= t1 and t1 - t0 <= 1.0 + 1e-9
        assert q["find"] == text and q["sel"].startswith("gpu:")
        assert texts(find(_div(details), "detail-correlation")) == str(want["args"]["correlation"])
        note = texts(notes)
        assert f"Match {k + 1} of {len(hits)}" in note and ("wrapped around" in note) == (step == 2)
        mark = [t for t in fig.data if t.name == "highlight"][0]
        x = np.asarray(mark.x, dtype=float)
        assert x[0] == pytest.approx((want["start"] - origin) / 1e6, abs=1e-6)
        assert x[1] == pytest.approx((want["end"] - origin) / 1e6, abs=1e-6)
    # the other matches of the window are marked too; an unknown name says so and changes nothing
    view = page.render(store, tid, {"find": text})
    marks = [t for t in view["figure"].data if t.name == "search matches"]
    assert view["mode"] == "events" and np.isfinite(np.asarray(marks[0].x, dtype=float)).sum() == 2 * len(hits)
    out = page.update(dash_store.db, tid, "?t0=1&t1=2", find="no such kernel anywhere")
    assert out[-1] == "?t0=1.000000&t1=2.000000" and "No event's name contains" in texts(out[1])


def test_nccl_kernels_are_coloured_apart(dash_store, store, ddp):
    tid = dash_store.ids["ddp_rank0"]
    view = page.render(store, tid, {})
    assert view["mode"] == "events"
    gpu = [t for t in view["figure"].data if t.name and t.name.startswith("GPU ") and "stream" in t.name]
    nccl = [t for t in gpu if t.name.endswith(" nccl kernel")]
    raw_nccl = [k for k in ddp.kernels if k["name"].lower().startswith("nccl")]
    assert raw_nccl and nccl

    def segments(ts):
        return sum(int(np.isfinite(np.asarray(t.x, dtype=float)).sum()) // 2 for t in ts)

    assert segments(nccl) == len(raw_nccl)
    assert segments([t for t in gpu if t.name.endswith(" kernel")]) == len(ddp.kernels)
    assert {t.line.color for t in nccl} == {tfig._COLORS["nccl"]}
    assert tfig._COLORS["nccl"] not in {t.line.color for t in view["figure"].data if t not in nccl and t.line}


def test_lanes_are_named_by_thread(dash_store, store, ddp):
    tid = dash_store.ids["ddp_rank0"]
    names: dict = {}
    for e in ddp.meta:
        if e["name"] == "thread_name":
            names.setdefault((e["pid"], e["tid"]), []).append(e["args"]["name"])
    lanes = td.lanes(store, tid)
    host = lanes[lanes["src"].isin(["cpu", "api"])]
    named = 0
    for r in host.itertuples():
        raw = names.get((r.k1, r.k2))
        if not raw:
            assert r.label.startswith(f"thread {r.k1}/{r.k2}")
            continue
        inner = [re.match(r"thread \d+ \((.*)\)", n).group(1) for n in raw]
        want = next((n for n in inner if n != "python3"), inner[0])  # the name torch gave the thread
        assert r.label == f"{want} ({r.k2}) " + (f"d{r.k3}" if r.src == "cpu" else "CUDA API")
        named += 1
    assert named >= 4 and any(label.startswith("pt_autograd_0 (") for label in host["label"])
    fig = page.render(store, tid, {"t0": "0", "t1": "1"})["figure"]
    assert list(fig.layout.yaxis.ticktext) == list(lanes["label"])


def test_telemetry_rows_are_steps_with_a_legend_at_the_raw_samples(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    info = td.trace_info(store, tid)
    raw = pq.read_table(ROOT / "sample_traces" / "llama_prefill_b8" / "telemetry.parquet").to_pandas()
    fig = page.render(store, tid, {})["figure"]
    tel = {t.name: t for t in fig.data if t.showlegend}
    quantities = [(c, n, s) for _, cols in tfig.TELEMETRY for c, n, s in cols if raw[c].notna().any()]
    assert len(quantities) >= 3 and fig.layout.showlegend
    span = info["end_ns"] - info["start_ns"]
    for col, name, scale in quantities:
        t = tel[f"GPU 0 {name}"]
        assert t.line.shape == "hv" and t.yaxis != "y"
        d = raw[raw[col].notna()]
        at = d["ts_ns"].to_numpy() - info["clock_offset_ns"] - info["start_ns"]
        inside = (at >= 0) & (at < span)
        xs, ys = np.asarray(t.x, dtype=float), np.asarray(t.y, dtype=float)
        want_x = at[inside] / 1e6
        want_y = d[col].to_numpy(dtype=float)[inside] * scale
        # the window's samples, with the quantity's last sample before it and first after it
        before, after = at[at < 0], at[at >= span]
        assert len(xs) == inside.sum() + (len(before) > 0) + (len(after) > 0)
        assert np.allclose(xs[(xs >= 0) & (xs < span / 1e6)], want_x, atol=1e-9)
        assert np.allclose(ys[(xs >= 0) & (xs < span / 1e6)], want_y)
        if len(before):
            assert xs[0] == pytest.approx(before.max() / 1e6, abs=1e-9)
    # a window narrower than the slow fields' period still draws them from their last value before it
    clock = raw[raw["sm_clock_mhz"].notna()]
    at = clock["ts_ns"].to_numpy() - info["clock_offset_ns"] - info["start_ns"]
    a_ms = (at[1] + 1000) / 1e6  # just after the second SM clock sample
    narrow = page.render(store, tid, {"t0": f"{a_ms:.6f}", "t1": f"{a_ms + 0.05:.6f}"})["figure"]
    sm = [t for t in narrow.data if t.name == "GPU 0 SM clock"][0]
    assert np.asarray(sm.x, dtype=float)[0] == pytest.approx(at[1] / 1e6, abs=1e-9)
    assert np.asarray(sm.y, dtype=float)[0] == clock["sm_clock_mhz"].iloc[1]


def test_binned_view_has_a_busy_colour_bar(dash_store, store, monkeypatch):
    tid = dash_store.ids["llama_prefill_b8"]
    monkeypatch.setattr(td, "EVENT_LIMIT", 1000)
    heat = [t for t in page.render(store, tid, {})["figure"].data if t.type == "heatmap"][0]
    assert heat.showscale and heat.colorbar.title.text == "busy %" and (heat.zmin, heat.zmax) == (0, 100)
    assert np.asarray(heat.z).max() > 50


def test_labels_fit_in_their_bars(dash_store, store, b8):
    tid = dash_store.ids["llama_prefill_b8"]
    origin = td.trace_info(store, tid)["start_ns"]
    px = 1000
    fig = page.render(store, tid, {"t0": "5", "t1": "5.3"}, plot_px=px)["figure"]
    lab = [t for t in fig.data if t.name == "labels"][0]
    lanes = td.lanes(store, tid)
    a, b = origin + 5_000_000, origin + 5_300_000
    per_px = (b - a) / px
    gpu_lane = int(lanes.loc[lanes["src"] == "gpu", "lane"].iloc[0])
    kernels = [k for k in b8.kernels if k["start"] < b and k["end"] > a]
    assert len(list(lab.text)) >= 5
    seen = 0
    for x, y, text in zip(np.asarray(lab.x, dtype=float), np.asarray(lab.y, dtype=float), lab.text):
        if int(y) != gpu_lane:
            continue
        at = origin + x * 1e6
        k = [k for k in kernels if k["start"] - 1 <= at <= k["end"] + 1][0]  # the label sits on a kernel
        width_px = (min(k["end"], b) - max(k["start"], a)) / per_px
        assert len(text) * tt.CHAR_PX + tt.PAD_PX <= width_px + 1e-6
        assert tt.short_name(k["name"]).startswith(text.rstrip("…"))
        seen += 1
    wide = [k for k in kernels if (min(k["end"], b) - max(k["start"], a)) / per_px >= 40]
    assert seen >= len(wide) > 0  # every bar 40 px wide has its label


def test_a_click_on_a_kernel_shows_its_details_and_its_launch_line(dash_store, store, b8):
    tid = dash_store.ids["llama_prefill_b8"]
    origin = td.trace_info(store, tid)["start_ns"]
    k = max((k for k in b8.kernels if origin + 5_000_000 <= k["start"] < origin + 6_000_000),
            key=lambda k: k["end"] - k["start"])
    aid = int(store.query("SELECT activity_id FROM gpu_activities WHERE trace_id = $t AND correlation = $c",
                          {"t": tid, "c": k["args"]["correlation"]})["activity_id"].iloc[0])
    out = page.update(dash_store.db, tid, "?t0=5&t1=6", click={"points": [{"customdata": f"gpu:{aid}"}]})
    fig, details, search = out[0], out[7], out[-1]
    assert parse_qs(search.lstrip("?"))["sel"] == [f"gpu:{aid}"]
    call = b8.calls[k["args"]["correlation"]]
    want = {"detail-name": k["name"], "detail-correlation": str(k["args"]["correlation"]),
            "detail-grid": json.dumps(k["args"]["grid"]), "detail-block": json.dumps(k["args"]["block"]),
            "detail-operator": b8.leaf_op(call)["name"], "detail-launch": f"{call['name']} at "
            f"{(call['start'] - origin) / 1e6:,.6f} ms"}
    for cid, value in want.items():
        assert texts(find(_div(details), cid)) == value, cid
    flow = [t for t in fig.data if t.name == "launch → activity"][0]
    x = np.asarray(flow.x, dtype=float)
    assert np.isfinite(x).sum() == 2  # one line: this kernel's, from its launch call
    assert x[0] == pytest.approx((call["start"] - origin) / 1e6, abs=1e-6)
    assert x[1] == pytest.approx((k["start"] - origin) / 1e6, abs=1e-6)
