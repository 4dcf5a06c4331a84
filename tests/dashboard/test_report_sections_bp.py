"""Report sections for bandwidth/roofline and power: drawn by the same figure builders as the dashboard
pages, numbers equal to the analyses' JSON, empty cases in words, registered in the report."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from kernelscope.analysis.registry import get_analysis
from kernelscope.dashboard.app import route
from kernelscope.dashboard.pages import bandwidth
from kernelscope.reports.blocks import Context, Table
from kernelscope.reports.power import power_section
from kernelscope.reports.report import SECTIONS, report
from kernelscope.reports.roofline import roofline_section
from kernelscope.storage.store import open_store

from .tree import find


def _sections(db, fn, ids):
    with open_store(db, read_only=True) as store:
        return fn(store, ids, Context())


def test_sections_are_registered():
    assert roofline_section in SECTIONS and power_section in SECTIONS


def test_roofline_section_equals_the_page_and_the_analysis(dash_store):
    tid = dash_store.ids["llama_prefill_b8"]
    sec = _sections(dash_store.db, roofline_section, [tid])
    assert sec.anchor == "roofline"
    figs = [b for b in sec.blocks if isinstance(b, go.Figure)]
    assert len(figs) == 1
    # the same builder as the page: identical data (the report only retitles the figure)
    page_fig = find(route(dash_store.db, f"/trace/{tid}/bandwidth", ""), bandwidth.FIGURE_ID).figure
    assert json.dumps(figs[0].to_plotly_json()["data"], default=str) == \
        json.dumps(page_fig.to_plotly_json()["data"], default=str)
    with open_store(dash_store.db, read_only=True) as store:
        js = json.loads(get_analysis("bandwidth").fn(store, tid).to_json())
    top = next(b for b in sec.blocks if isinstance(b, Table) and "operator signatures" in b.caption)
    assert len(top.df) == min(15, js["signatures"]) and f"of {js['signatures']} operator signatures" in top.caption
    assert top.df["#"].tolist() == list(range(len(top.df)))  # the numbers the measured table and the page use
    for (_, row), ref in zip(top.df.iterrows(), js["per_signature"]):
        assert row["operator"] == ref["name"] and row["calls"] == ref["calls"]
        assert row["GPU time (ms)"] == round(ref["gpu_ns"] / 1e6, 3)
        assert row["% peak bandwidth"] == round(ref["pct_peak_bw"], 1)
        assert row["% peak FLOP/s"] == round(ref["pct_peak_flops"], 1)
    text = " ".join(b for b in sec.blocks if isinstance(b, str))
    assert f"{100 * js['modelled_share']:.1f}% of leaf-operator GPU time" in text
    assert f"{js['device_peaks']['0']['mem_bw_gbps']:,.0f} GB/s" in text


def test_power_section_numbers_and_nulls(dash_store):
    ids = [dash_store.ids["llama_prefill_b128"], dash_store.ids["probe_train"]]
    sec = _sections(dash_store.db, power_section, ids)
    assert sec.anchor == "power"
    head = sec.blocks[0]
    assert isinstance(head, Table) and len(head.df) == 1  # the probe trace has no telemetry: no row
    with open_store(dash_store.db, read_only=True) as store:
        r = get_analysis("power").fn(store, ids[0])
    s = r.scalars
    row = head.df.iloc[0]
    assert row["J per TFLOP"] == f"{s['j_per_tflop']:,.3f} J/TFLOP"
    assert row["energy per iteration"] == f"{s['energy_per_iteration_mj'] / 1000:,.3f} J"
    assert row["energy per batch*seq"] == f"{s['energy_per_unit_mj']:,.3f} mJ"
    # a 160 ms trace under 10 counter steps of ~98 ms: null, with the reason
    assert s["trace_energy_mj"] is None
    assert row["trace energy"].startswith("n/a: the window (") and "10 counter steps" in row["trace energy"]
    figs = [b for b in sec.blocks if isinstance(b, go.Figure)]
    assert len(figs) == 1 and any(t.name == "power (averaged)" and len(t.x) > 10 for t in figs[0].data)
    assert any(isinstance(b, str) and b.startswith("probe_train") and "no telemetry" in b for b in sec.blocks)
    phases = next(b for b in sec.blocks if isinstance(b, Table) and "energy per phase" in b.caption)
    assert phases.df["phase"].tolist() == r.tables["phases"]["name"].tolist()


def test_cpu_only_sections_say_so(dash_store):
    tid = dash_store.ids["cpu_only"]
    roof = _sections(dash_store.db, roofline_section, [tid])
    assert [b for b in roof.blocks if isinstance(b, go.Figure)] == []
    assert any("no GPU activity" in b for b in roof.blocks if isinstance(b, str))
    pw = _sections(dash_store.db, power_section, [tid])
    assert all(isinstance(b, str) for b in pw.blocks) and "no telemetry" in pw.blocks[0]


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_report_contains_both_sections(dash_store, fmt):
    tid = dash_store.ids["llama_prefill_b1"]
    with open_store(dash_store.db, read_only=True) as store:
        text = report(store, [tid], fmt=fmt)
    if fmt == "html":
        assert 'id="roofline"' in text and 'id="power"' in text
        assert len(text.encode()) <= 10_000_000
    else:
        assert "## Bandwidth and roofline" in text and "## Power and energy" in text
        assert "| J per TFLOP |" in text or "J per TFLOP" in text


def test_phase_energy_figure_draws_only_phases_with_energy():
    import pandas as pd

    from kernelscope.reports.power import phase_energy_figure

    phases = pd.DataFrame({"name": ["ProfilerStep#1", "forward", "backward"], "kind": ["step", "user", "user"],
                           "energy_mj": [1500.0, None, 250.5]})
    fig = phase_energy_figure(phases)
    (bar,) = fig.data
    assert list(bar.y) == ["ProfilerStep#1 (step)", "backward (user)"] and list(bar.x) == [1.5, 0.2505]  # J
    assert phase_energy_figure(phases.assign(energy_mj=[None, None, None])) is None


@pytest.mark.parametrize("name, source, words", [
    ("llama_prefill_b1", "energy_counter", "is shorter than 10 counter steps"),
    ("train_step", "integrated_power", "too few changes to measure a counter step"),
])
def test_null_reasons_follow_the_window_rule(dash_store, name, source, words):
    from kernelscope.reports.power import null_reasons

    with open_store(dash_store.db, read_only=True) as store:
        r = get_analysis("power").fn(store, dash_store.ids[name])
    assert r.scalars["energy_source"] == source and r.scalars["trace_energy_mj"] is None
    why = null_reasons(r)
    assert words in why["trace_energy_mj"] and why["mean_power_w"] == why["trace_energy_mj"]
    # numbers that exist get no reason
    assert "energy_per_iteration_mj" not in why and r.scalars["energy_per_iteration_mj"] is not None
