"""Steps page and report section: through the Flask test client (the router callback over HTTP), numbers equal
to the steps analysis' JSON; the stacked bars add up to each step; no steps, bad parameters and phase= in words;
the report section drawn by the same builders, present only when steps exist."""

from __future__ import annotations

import json

import plotly.graph_objects as go

from kernelscope.analysis.registry import get_analysis
from kernelscope.reports.blocks import Context, Table
from kernelscope.reports.report import SECTIONS
from kernelscope.reports.steps import steps_section
from kernelscope.storage.store import open_store

from .tree import find_json, page_json, plotly_values, text_json


def _js(db, tid, **kw) -> dict:
    with open_store(db, read_only=True) as store:
        return json.loads(get_analysis("steps").fn(store, tid, **kw).to_json())


def test_page_equals_the_analysis(client, dash_store):
    tid = dash_store.ids["small_kernels_graph"]
    js = _js(dash_store.db, tid)
    page = page_json(client, f"/trace/{tid}/steps")
    for key in ("step_time_median_ns", "step_time_min_ns", "step_time_max_ns", "step_count"):
        assert find_json(page, f"kpi-{key}")["props"]["data-value"] == str(js[key]), key
    rows = find_json(page, "steps-table")["props"]["rowData"]
    assert [(r["step"], r["dur_ns"], r["kernel_ns"], r["gpu_tail_ns"]) for r in rows] == \
        [(s["step"], s["dur_ns"], s["kernel_ns"], s["gpu_tail_ns"]) for s in js["steps"]]
    assert rows[0]["marked"] == "warm-up" and rows[1]["marked"] == ""
    # the stacked bars: eight categories whose heights add up to each step's time (ms)
    fig = find_json(page, "steps-breakdown")["props"]["figure"]
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert [t["name"] for t in bars] == ["Kernel", "Memcpy", "Memset", "Runtime", "DataLoader", "Python GC",
                                         "CPU Exec", "Other"]
    heights = [plotly_values(t["y"]) for t in bars]
    for i, s in enumerate(js["steps"]):
        assert abs(sum(h[i] for h in heights) - s["dur_ns"] / 1e6) < 1e-9
    assert fig["data"][0]["x"][0] == f"{js['steps'][0]['step']} (warm-up)"
    line = find_json(page, "steps-time")["props"]["figure"]["data"][0]
    assert plotly_values(line["y"]) == [s["dur_ns"] / 1e6 for s in js["steps"]]


def test_no_steps_bad_params_and_phase(client, dash_store):
    nsys = dash_store.ids["nsys"]
    page = page_json(client, f"/trace/{nsys}/steps")
    assert "ProfilerStep" in text_json(find_json(page, "msg-no-steps"))
    tid = dash_store.ids["compiled"]
    page = page_json(client, f"/trace/{tid}/steps", "?warmup=x")
    assert "warmup" in text_json(find_json(page, "msg-bad-param")) and find_json(page, "steps-table")
    page = page_json(client, f"/trace/{tid}/steps", "?warmup=0")
    assert find_json(page, "kpi-step_count")["props"]["data-value"] == "30"
    assert find_json(page, "steps-table")["props"]["rowData"][0]["marked"] == ""
    page = page_json(client, f"/trace/{tid}/steps", "?phase=nope")
    assert "'nope'" in text_json(find_json(page, "msg-no-steps"))


def test_report_section(dash_store):
    assert steps_section in SECTIONS
    with_steps, without = dash_store.ids["compiled"], dash_store.ids["nsys"]
    with open_store(dash_store.db, read_only=True) as store:
        sec = steps_section(store, [with_steps, without], Context())
        assert steps_section(store, [without], Context()) is None
    assert sec.anchor == "steps"
    assert sum(isinstance(b, go.Figure) for b in sec.blocks) == 2
    (table,) = [b for b in sec.blocks if isinstance(b, Table)]
    js = _js(dash_store.db, with_steps)
    assert list(table.df["step (ms)"]) == [s["dur_ns"] / 1e6 for s in js["steps"]]
    assert list(table.df["marked"])[:2] == ["warm-up", ""]
    text = " ".join(b for b in sec.blocks if isinstance(b, str))
    assert f"median {js['step_time_median_ns'] / 1e6:,.3f} ms" in text


def test_clicking_a_step_bar_opens_the_timeline_on_that_step(client, dash_store):
    from urllib.parse import parse_qs, urlsplit

    tid = dash_store.ids["small_kernels_graph"]
    js = _js(dash_store.db, tid)
    page = page_json(client, f"/trace/{tid}/steps")
    windows = find_json(page, "steps-windows")["props"]["data"]
    step = js["steps"][1]
    body = {"output": "steps-nav.href", "outputs": {"id": "steps-nav", "property": "href"},
            "inputs": [{"id": "steps-breakdown", "property": "clickData",
                        "value": {"points": [{"x": str(step["step"]), "curveNumber": 0}]}}],
            "changedPropIds": ["steps-breakdown.clickData"],
            "state": [{"id": "steps-windows", "property": "data", "value": windows}]}
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    href = r.get_json()["response"]["steps-nav"]["href"]
    parts = urlsplit(href)
    assert parts.path == f"/trace/{tid}/timeline"
    q = {k: float(v[0]) for k, v in parse_qs(parts.query).items()}
    assert abs((q["t1"] - q["t0"]) - step["dur_ns"] / 1e6) < 1e-5  # exactly the step's span
    timeline = page_json(client, parts.path, "?" + parts.query)
    assert f"between {q['t0']:,.3f} and {q['t1']:,.3f} ms" in json.dumps(timeline)


def _steps_df(durations_ms, warmup=(), partial=()):
    """A ``steps`` table (the analysis' columns the figures read): all of each step's time in CPU Exec."""
    import pandas as pd

    from kernelscope.reports.steps import CATEGORIES

    ns = [round(ms * 1e6) for ms in durations_ms]
    df = pd.DataFrame({"step": range(len(ns)), "dur_ns": ns,
                       "warmup": [i in warmup for i in range(len(ns))],
                       "partial": [i in partial for i in range(len(ns))]})
    for key, _, _ in CATEGORIES:
        df[f"{key}_ns"] = ns if key == "cpu_op" else [0] * len(ns)
    return df


def test_a_long_warm_up_step_does_not_flatten_the_steady_ones():
    """A BERT training run profiled from its start (AMP, a DataLoader with workers): its warm-up step took
    6,419.772 ms, the 11 steady ones 40.207-53.755 ms, and at the warm-up's scale they were flat lines at the
    bottom of both charts. Now both axes end at 1.3 x the longest steady step and the warm-up's time is written
    at the top; a marked step within 2 x of the steady ones (a short last step) changes nothing."""
    from kernelscope.reports.steps import breakdown_figure, step_time_figure

    steady = [40.716, 40.207, 43.678, 47.255, 44.523, 43.354, 49.668, 53.755, 45.264, 42.640, 43.957]
    df = _steps_df([6419.772, *steady, 20.376], warmup={0}, partial={0, 12})
    for fig in (breakdown_figure(df), step_time_figure(df, {"step_time_median_ns": 43_956_745})):
        assert fig.layout.yaxis.range == (0, 1.3 * 53.755)
        notes = [a.text for a in fig.layout.annotations if a.text.startswith("↑")]
        assert notes == ["↑ 6,419.772 ms"]
        assert "the axis fits the steady steps" in fig.layout.title.text
    for df in (_steps_df([100.0, *steady], warmup={0}),   # under 2 x the longest steady step: autoscaled
               _steps_df([6419.772, 50.0], warmup={0}, partial={1}),  # no steady step to fit
               _steps_df(steady)):                          # nothing marked
        fig = breakdown_figure(df)
        assert fig.layout.yaxis.range is None and not fig.layout.annotations
