"""Figure builders shared by the dashboard and the report. They take DataFrames (already computed by an
analysis or a query) and return Plotly figures; they never touch the store.

Never one Plotly shape or point per kernel: time series here are binned (at most ``MAX_BINS`` bins).
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from ..units import NS_PER_MS, span_text

#: Most bins a binned time series may have (DESIGN.md "Dashboard": <= ~2k bins when zoomed out).
MAX_BINS = 2000
#: The Plotly template of every figure.
TEMPLATE = "plotly_white"


def styled(fig: go.Figure, template: str = TEMPLATE, **layout) -> go.Figure:
    """``fig.update_layout(template=template, **layout)``; returns ``fig``. Give a figure's whole layout here,
    where it is cheap:

    - a figure that has no layout of its own yet (built by ``go.Figure(...)``, traces added or not) gets
      ``layout`` in one assignment, which Plotly validates as its constructor does: 1.6 ms for a small bar chart
      against 6.9 ms through ``update_layout``, whose per-key path parsing and change tracking were a fifth
      of a report's time (the same figure JSON either way); one that has (``make_subplots``) is updated;
    - ``layout``'s magic-underscore keys (``xaxis_title=``) are spelled out as nested dicts first, as Plotly
      reads them (``_nested``);
    - the registered template is set the way Plotly's own constructor sets its default template (already
      valid: validation off for that one assignment), which gives the same figure JSON without Plotly
      deep-copying and re-validating the whole template: that took ~20 ms per figure."""
    if layout:
        nested = _nested(layout)
        if set(fig.layout._props or ()) <= {"template"}:  # nothing but Plotly's default template yet
            fig.layout = nested
        else:
            fig.update_layout(nested)
    fig.layout._validate = False
    try:
        fig.layout.template = pio.templates[template]
    finally:
        fig.layout._validate = fig._validate
    return fig


#: Plotly property names that hold an underscore: a magic-underscore key never splits inside them.
_UNDERSCORED = ("plot_bgcolor", "paper_bgcolor", "error_x", "error_y", "error_z")


def _nested(layout: dict) -> dict:
    """``layout`` with each magic-underscore key (``xaxis_title_font_size=9``) spelled out as nested dicts
    (``{"xaxis": {"title": {"font": {"size": 9}}}}``), merged in order as ``update_layout`` merges them: a later
    leaf wins, dicts merge, and a string where a dict goes is its ``text`` (Plotly's ``title="..."``)."""
    out: dict = {}
    for key, value in layout.items():
        parts = key
        for name in _UNDERSCORED:
            parts = parts.replace(name, name.replace("_", "-"))
        path = [p.replace("-", "_") for p in parts.split("_")]
        _merge(out, path, value)
    return out


def _merge(into: dict, path: list, value) -> None:
    for name in path[:-1]:
        child = into.get(name)
        if not isinstance(child, dict):
            child = into[name] = {} if child is None else {"text": child}
        into = child
    last = path[-1]
    if isinstance(value, dict):
        old = into.get(last)
        if isinstance(old, str):
            old = {"text": old}
        into[last] = merged = dict(old) if isinstance(old, dict) else {}
        for k, v in value.items():
            _merge(merged, [k], v)
    elif isinstance(into.get(last), dict) and isinstance(value, str):
        into[last]["text"] = value
    else:
        into[last] = value


def bin_width_ns(span_ns: int, max_bins: int = MAX_BINS) -> int:
    """Width of each bin in integer ns so that ``ceil(span_ns / width) <= max_bins``; at least 1 ns."""
    span_ns = int(span_ns)
    if span_ns <= 0:
        return 1
    return max(1, -(-span_ns // max_bins))


def busy_fraction_bins(bins: pd.DataFrame, span_ns: int, width_ns: int) -> pd.DataFrame:
    """Complete the sparse per-bin busy time into one row per (device, bin) with its busy fraction.

    ``bins``: columns ``device``, ``bin`` (0-based index from the first GPU activity start ``t0``),
    ``busy_ns`` (ns of the device's busy union inside ``[t0 + bin*width, t0 + (bin+1)*width)``); bins with
    no busy time may be absent. ``span_ns``: first GPU activity start to last end over the trace.

    Returns columns ``device``, ``bin``, ``start_ns`` (bin start relative to ``t0``), ``bin_ns`` (the bin's
    length: ``width_ns``, the last bin clipped to ``span_ns``), ``busy_ns`` and ``busy_fraction`` =
    busy_ns / bin_ns (0..1).
    """
    span_ns, width_ns = int(span_ns), int(width_ns)
    cols = ["device", "bin", "start_ns", "bin_ns", "busy_ns", "busy_fraction"]
    if span_ns <= 0 or bins.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols[:-1]} |
                            {"busy_fraction": pd.Series(dtype="float64")})
    n_bins = -(-span_ns // width_ns)
    out = []
    for device in sorted(int(d) for d in bins["device"].unique()):
        mine = bins[bins["device"] == device]
        busy = pd.Series(0, index=range(n_bins), dtype="int64")
        busy.loc[mine["bin"].astype("int64").to_numpy()] = mine["busy_ns"].astype("int64").to_numpy()
        start = pd.Series(range(n_bins), dtype="int64") * width_ns
        length = (start + width_ns).clip(upper=span_ns) - start
        out.append(pd.DataFrame({"device": device, "bin": range(n_bins), "start_ns": start,
                                 "bin_ns": length, "busy_ns": busy.to_numpy()}))
    df = pd.concat(out, ignore_index=True)
    df["busy_fraction"] = df["busy_ns"] / df["bin_ns"]
    return df


def busy_fraction_figure(bins: pd.DataFrame, span_ns: int, width_ns: int) -> go.Figure:
    """Per-device GPU busy fraction over time: one step line per device, x in ms since the trace's first
    GPU activity, y in % of each bin's length that the device's busy union covers.

    Arguments as for :func:`busy_fraction_bins`.
    """
    df = busy_fraction_bins(bins, span_ns, width_ns)
    fig = go.Figure()
    for device, d in df.groupby("device", sort=True):
        fig.add_trace(go.Scatter(
            x=d["start_ns"] / NS_PER_MS,
            y=(d["busy_fraction"] * 100.0).round(3),
            mode="lines",
            line={"shape": "hv", "width": 1.5},
            fill="tozeroy",
            name=f"GPU {device}",
            hovertemplate="%{x:.3f} ms: %{y:.1f}% busy<extra>GPU " + str(device) + "</extra>",
        ))
    width_text = span_text(width_ns)
    n_bins = int(df["bin"].max()) + 1 if not df.empty else 0
    styled(
        fig,
        title={"text": f"GPU busy over time ({n_bins} bins of {width_text})", "font": {"size": 14}},
        xaxis_title="time since first GPU activity (ms)",
        yaxis={"title": "busy (% of bin)", "range": [0, 105]},
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
        height=320,
        legend={"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"},
        showlegend=True,
    )
    return fig
