"""GPU-busy binning: DuckDB bins (reports/data.py) against an independent Python binning of the same
busy intervals, and the figure builder's filling of empty bins."""

from __future__ import annotations

import pandas as pd
import pytest

from kernelscope.analysis.registry import get_analysis
from kernelscope.reports.data import busy_bins
from kernelscope.reports.figures import MAX_BINS, bin_width_ns, busy_fraction_bins, busy_fraction_figure
from kernelscope.storage.store import open_store


def test_bin_width_keeps_at_most_max_bins():
    assert bin_width_ns(4000, 2000) == 2
    assert bin_width_ns(4001, 2000) == 3  # ceil: 2 would need 2001 bins
    assert bin_width_ns(10, 2000) == 1
    assert bin_width_ns(0) == 1
    for span in (1, 1999, 2000, 2001, 29_648_123, 10**12 + 7):
        w = bin_width_ns(span)
        assert -(-span // w) <= MAX_BINS
        assert w == 1 or -(-span // (w - 1)) > MAX_BINS  # the narrowest width that fits


def test_fraction_fills_empty_bins_and_clips_the_last():
    bins = pd.DataFrame({"device": [0, 0, 1], "bin": [0, 2, 1], "busy_ns": [10, 5, 7]})
    df = busy_fraction_bins(bins, span_ns=25, width_ns=10)  # bins 0..2, the last one 5 ns long
    assert list(df["device"]) == [0, 0, 0, 1, 1, 1]
    assert list(df["busy_ns"]) == [10, 0, 5, 0, 7, 0]
    assert list(df["bin_ns"]) == [10, 10, 5, 10, 10, 5]
    assert list(df["start_ns"]) == [0, 10, 20, 0, 10, 20]
    assert list(df["busy_fraction"]) == [1.0, 0.0, 1.0, 0.0, 0.7, 0.0]


def test_figure_one_line_per_device_in_percent():
    bins = pd.DataFrame({"device": [0, 1], "bin": [0, 1], "busy_ns": [5, 10]})
    fig = busy_fraction_figure(bins, span_ns=20, width_ns=10)
    assert [t.name for t in fig.data] == ["GPU 0", "GPU 1"]
    assert list(fig.data[0].y) == [50.0, 0.0]
    assert list(fig.data[1].y) == [0.0, 100.0]
    assert list(fig.data[1].x) == [0.0, 10 / 1e6]  # ms


def test_no_gpu_activity_gives_empty_bins_and_no_lines(dash_store):
    with open_store(dash_store.db, read_only=True) as store:
        bins, span, width = busy_bins(store, dash_store.ids["cpu_only"])
    assert bins.empty and span == 0
    assert busy_fraction_bins(bins, span, width).empty
    assert len(busy_fraction_figure(bins, span, width).data) == 0


def _python_bins(intervals: pd.DataFrame, t0: int, width: int) -> dict[tuple[int, int], int]:
    """Reference: walk each busy interval bin by bin in plain Python."""
    out: dict[tuple[int, int], int] = {}
    for dev, s, e in intervals[["device", "start_ns", "end_ns"]].itertuples(index=False):
        s, e = int(s), int(e)
        while s < e:
            b = (s - t0) // width
            stop = min(e, t0 + (b + 1) * width)
            out[(int(dev), b)] = out.get((int(dev), b), 0) + stop - s
            s = stop
    return out


@pytest.mark.parametrize("name", ["llama_prefill_b1", "compiled", "probe_train", "two_devices"])
def test_duckdb_bins_equal_python_reference_and_sum_to_busy(dash_store, name):
    tid = dash_store.ids[name]
    with open_store(dash_store.db, read_only=True) as store:
        bins, span, width = busy_bins(store, tid)
        intervals = store.query("SELECT * FROM busy_intervals WHERE trace_id = ?", [tid])
        t0 = int(store.query("SELECT min(start_ns) AS t FROM gpu_activities WHERE trace_id = ?", [tid])["t"][0])
        summary = get_analysis("summary").fn(store, tid)
    assert span == summary.scalars["gpu_span_ns"]
    assert width == bin_width_ns(span) and -(-span // width) <= MAX_BINS
    got = {(int(d), int(b)): int(v) for d, b, v in bins[["device", "bin"] + ["busy_ns"]].itertuples(index=False)}
    assert got == _python_bins(intervals, t0, width)
    assert sum(got.values()) == summary.scalars["busy_ns"]  # exact ns, summed over devices
    full = busy_fraction_bins(bins, span, width)
    assert full["busy_fraction"].between(0, 1).all()
    assert full["bin_ns"].groupby(full["device"]).sum().eq(span).all()


@pytest.mark.parametrize("layout", [
    {"xaxis_title": "ms", "yaxis_title": "n", "height": 300, "showlegend": False},
    {"title": {"text": "t", "font": {"size": 14}}, "xaxis_title_font_size": 9, "xaxis": {"type": "log"}},
    {"xaxis": {"type": "log", "title": "s"}, "xaxis_title_font_color": "red", "title": "plain", "title_x": 0.5},
    {"yaxis": {"title": "µs", "type": "log"}, "margin": {"l": 1, "r": 2}, "margin_t": 3, "legend_orientation": "h"},
    {"plot_bgcolor": "white", "paper_bgcolor": "#eee", "barmode": "stack", "bargap": 0.1},
])
def test_styled_gives_the_layout_update_layout_gives(layout):
    """styled() hands a fresh figure its layout in one assignment, spelling out magic-underscore keys itself:
    the figure must be the one Plotly's update_layout makes of the same keys, and so must an update of a
    figure that already has a layout (a shape drawn first)."""
    import json

    import plotly.graph_objects as go

    from kernelscope.reports.figures import TEMPLATE, styled

    def bar():
        return go.Figure(go.Bar(x=[1, 2], y=[3, 4]))

    want = bar().update_layout(template=TEMPLATE, **layout)
    assert json.loads(styled(bar(), **layout).to_json()) == json.loads(want.to_json())
    shaped = bar().add_shape(type="line", x0=0, x1=1, y0=0, y1=1)
    want = bar().add_shape(type="line", x0=0, x1=1, y0=0, y1=1).update_layout(template=TEMPLATE, **layout)
    assert json.loads(styled(shaped, **layout).to_json()) == json.loads(want.to_json())


def test_compare_headline_bars_are_ratios_on_a_log_axis():
    """Two traces' headline changes span orders of magnitude (+72,945% queue depth next to -98% idle): each bar
    runs from x1 to B/A on a log axis, so both read; its change in % is written beside it; a metric without a
    ratio (A = 0) or with B = 0 has no bar, only its words."""
    import math

    from kernelscope.reports.compare import headline_figure

    head = pd.DataFrame({"metric": ["mean_queue_depth", "idle_ns", "kernels", "busy_ns", "latency_ns"],
                         "a": [0.346, 1e6, 0, 2e6, 5e6], "b": [252.984, 1.8e4, 10, 0, 5e6],
                         "delta_pct": [72945.3, -98.2, None, -100.0, 0.0]})
    bar = headline_figure(head).data[0]
    assert bar.base == 1 and list(bar.y) == list(head["metric"])
    ends = [1 + x for x in bar.x]  # a bar spans [base, base + x]
    assert ends == pytest.approx([730.453, 0.018, 1.0, 1.0, 1.0])
    assert list(bar.text) == ["+72,945.3%", "-98.2%", "no ratio (A is 0 or missing)", "-100% (B is 0)", "+0.0%"]
    axis = headline_figure(head).layout.xaxis
    assert axis.type == "log"
    lo, hi = axis.range
    assert lo < math.log10(0.018) and hi > math.log10(730.453)  # every bar inside, with room for its words
    inf = headline_figure(head.assign(delta_pct=[float("inf"), -98.2, None, -100.0, 0.0]))
    assert inf.data[0].text[0] == "no ratio (A is 0 or missing)" and all(map(math.isfinite, inf.layout.xaxis.range))
