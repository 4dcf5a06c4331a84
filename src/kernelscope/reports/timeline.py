"""Figure builders of the Timeline: DataFrames in (from ``reports.timeline_data``), Plotly figures out.

One shared x axis in ms since the trace's first event (the *origin*). The top subplot holds one row per
lane (annotations, CPU operators per thread and depth, CUDA API calls per thread, GPU streams); below it,
when the trace has telemetry in the window, one row per quantity group (power, clocks, utilisation,
temperature: ``TELEMETRY``) drawn as steps, with a legend.

Never one shape per event (DESIGN.md "Dashboard"): zoomed out every lane is one row of a single heatmap
of busy % per bin, with its colour bar; zoomed in, each lane (and event kind; NCCL kernels apart) is one
WebGL line trace whose segments are separated by NaN, with names written in the bars wide enough
(one SVG text trace, at most ``timeline_text.LABEL_LIMIT`` labels). The selection adds one trace of its
GPU activities, one of launch->kernel flow lines and a halo under the selected event; a search adds a
halo under its matches in the window.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from _plotly_utils.utils import convert_to_base64, to_typed_array_spec

from ..units import MW_PER_W, NS_PER_MS, NS_PER_US
from . import timeline_text as tt

LANE_PX = 26
#: Telemetry rows below the lanes: (axis title, [(column, legend name, scale to the axis unit)]); a row is
#: drawn when one of its columns has samples in the window. Lines are steps ('hv'): a sample's value holds
#: until the next sample.
TELEMETRY = [("power (W)", [("power_mw", "power", 1 / MW_PER_W), ("power_instant_mw", "instant power", 1 / MW_PER_W)]),
             ("clock (MHz)", [("sm_clock_mhz", "SM clock", 1.0), ("mem_clock_mhz", "memory clock", 1.0)]),
             ("utilisation (%)", [("gpu_util_pct", "GPU util", 1.0), ("mem_util_pct", "memory util", 1.0)]),
             ("temperature (°C)", [("temperature_c", "temperature", 1.0)])]
_COLORS = {"cpu": ["#2563eb", "#0891b2", "#7c3aed", "#db2777", "#ea580c", "#65a30d"],
           "api": "#6b7280", "ann": "#a16207",
           "kernel": "#1d4ed8", "memcpy": "#ea580c", "memset": "#16a34a", "nccl": "#a21caf"}
#: Colours of the telemetry series, in TELEMETRY's order of columns.
_TEL_COLORS = ["#b91c1c", "#f87171", "#1d4ed8", "#60a5fa", "#15803d", "#86efac", "#a16207"]
SELECT_COLOR = "#dc2626"
#: The selected (or found) event's halo and the other search matches' halo, drawn under the bars.
HIGHLIGHT_COLOR = "#f59e0b"
MATCH_COLOR = "#fde68a"
LANE_KEY = ["src", "k1", "k2", "k3"]
NAME_CHARS = 60
#: Busy-% colour scale of the binned view (white = idle) and its colour bar.
BUSY_SCALE = [[0, "#ffffff"], [0.01, "#dbeafe"], [1, "#1e3a8a"]]


def _trace(kind: str, **props) -> dict:
    """A trace as a plain dict (:func:`_figure` does not validate it per request; the tests do)."""
    return {"type": kind, **props}


_BIG = ("x", "y", "text", "customdata")


class _Figure(go.Figure):
    """A Figure whose JSON for the browser (``to_plotly_json``, what Dash serialises) is built without
    ``to_dict``'s deep copy of every trace and its walk over every list element looking for arrays: on a
    window of 15k events those took ~0.3 s per response (the text and customdata lists). The trace dicts are
    copied shallowly and only their numpy arrays become typed arrays, as ``to_dict`` would make them; lists
    (customdata, text) go as JSON lists (issue 11: a click reads customdata from the figure as sent)."""

    def to_plotly_json(self):
        data = []
        for props in self._data:
            d = dict(props)
            for k, v in d.items():
                if isinstance(v, np.ndarray) and v.dtype.kind in "iuf":
                    d[k] = to_typed_array_spec(v)
            data.append(d)
        layout = copy.deepcopy(self._layout)
        convert_to_base64(layout)
        return {"data": data, "layout": layout}


def _figure(traces: list, layout: dict) -> go.Figure:
    """The figure without Plotly's per-property validation (it cost ~50-100 ms per response on a
    1M-kernel trace; the builders only set properties the tests check) and without its deep copy of each
    trace's arrays (the text and customdata lists of 20k events cost another ~50 ms): they are put into
    the figure's trace dicts after it is built (the arrays are built here for this figure alone)."""
    big = [{k: t.pop(k) for k in _BIG if k in t} for t in traces]
    fig = _Figure(data=traces, layout=layout, _validate=False)
    for props, arrays in zip(fig._data, big):
        props.update(arrays)
    return fig


def to_ms(ns, origin: int):
    """ns since the epoch -> ms since ``origin`` (float)."""
    return (np.asarray(ns, dtype=np.int64) - int(origin)) / NS_PER_MS


def segments(start_ns, end_ns, origin: int, y: float) -> tuple[np.ndarray, np.ndarray]:
    """x (ms) and y arrays drawing one horizontal segment per interval, separated by NaN:
    ``[s0, e0, nan, s1, e1, nan, ...]``."""
    n = len(start_ns)
    x = np.full(3 * n, np.nan)
    x[0::3] = to_ms(start_ns, origin)
    x[1::3] = to_ms(end_ns, origin)
    yy = np.full(3 * n, np.nan)
    yy[0::3] = y
    yy[1::3] = y
    return x, yy


def _per_point(values, n: int, fill) -> list:
    """One value per segment point (the value at the start and end, ``fill`` at the gap)."""
    out = [fill] * (3 * n)
    out[0::3] = values
    out[1::3] = values
    return out


def _layout(lanes: pd.DataFrame, telemetry: pd.DataFrame | None, extra_rows: int, a: int, b: int,
            origin: int) -> tuple[dict, list, int]:
    """The layout (lanes on y axis 1 at the top, one axis per telemetry row below, every x axis matched to
    the first) and the telemetry traces (steps, one legend entry per device and quantity). Built as plain
    dicts: one validation per figure."""
    rows_tel = [(title, [c for c in cols if c[0] in telemetry.columns and telemetry[c[0]].notna().any()])
                for title, cols in TELEMETRY] if telemetry is not None and not telemetry.empty else []
    rows_tel = [r for r in rows_tel if r[1]]
    n_lanes = len(lanes) + extra_rows
    lane_h = max(120, LANE_PX * n_lanes + 40)
    heights = [lane_h] + [110] * len(rows_tel)
    total, gap = sum(heights), 30
    plot_h = total + gap * len(rows_tel)
    xr = [float(to_ms(a, origin)), float(to_ms(b, origin))]
    layout = {"height": plot_h + 90 + (30 if rows_tel else 0), "margin": {"l": 170, "r": 90, "t": 30, "b": 50},
              "showlegend": bool(rows_tel),
              "hovermode": "closest", "hoverdistance": 40, "plot_bgcolor": "white", "dragmode": "zoom"}
    top = 1.0
    traces = []
    for i, h in enumerate(heights, start=1):
        bottom = max(0.0, top - h / plot_h)
        sfx = "" if i == 1 else str(i)
        layout[f"xaxis{sfx}"] = {"range": xr, "showgrid": True, "gridcolor": "#f3f4f6", "anchor": f"y{sfx}",
                                 **({"matches": "x", "showticklabels": False} if i > 1 else {})}
        layout[f"yaxis{sfx}"] = {"domain": [bottom, top], "anchor": f"x{sfx}", "fixedrange": True}
        top = bottom - gap / plot_h
    last = "" if len(heights) == 1 else str(len(heights))
    layout[f"xaxis{last}"].update({"title": {"text": "time since trace start (ms)"}, "showticklabels": True})
    layout["yaxis"].update({"tickmode": "array", "tickvals": list(range(n_lanes)),
                            "ticktext": list(lanes["label"]) + (["selected"] if extra_rows else []),
                            "range": [n_lanes - 0.5, -0.5], "showgrid": False, "zeroline": False})
    if rows_tel:  # the legend of the telemetry series, above the figure
        layout["margin"]["t"] = 60
        layout["legend"] = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.0, "yanchor": "bottom",
                            "font": {"size": 10}, "title": {"text": "telemetry:"}}
    colors = {c[0]: _TEL_COLORS[i % len(_TEL_COLORS)] for i, c in enumerate(c for _, cs in TELEMETRY for c in cs)}
    for i, (title, cols) in enumerate(rows_tel, start=2):
        layout[f"yaxis{i}"]["title"] = {"text": title, "font": {"size": 11}}
        for device, d in telemetry.groupby("device", sort=True):
            for col, name, scale in cols:
                dd = d[d[col].notna()]  # slow fields (clocks, utilisation) fill one sample in several: no gaps
                if dd.empty:
                    continue
                label = f"GPU {device} {name}"
                traces.append(_trace('scattergl', x=to_ms(dd["t_ns"], 0), y=dd[col].to_numpy(dtype="float64") * scale,
                                     xaxis=f"x{i}", yaxis=f"y{i}", mode="lines+markers", marker={"size": 3},
                                     line={"width": 1.4, "shape": "hv", "color": colors[col]},
                                     name=label, showlegend=True, legendgroup=label,
                                     hovertemplate="%{x:.3f} ms: %{y:.1f}<extra>" + label + "</extra>"))
    return layout, traces, len(heights)


def _shift_telemetry(telemetry: pd.DataFrame | None, origin: int) -> pd.DataFrame | None:
    if telemetry is None or telemetry.empty:
        return telemetry
    t = telemetry.copy()
    t["t_ns"] = t["t_ns"].astype("int64") - int(origin)
    return t


def binned_figure(lanes: pd.DataFrame, bins: pd.DataFrame, start_ns: int, width_ns: int, a: int, b: int,
                  origin: int, telemetry: pd.DataFrame | None = None,
                  selected_bins: pd.DataFrame | None = None) -> go.Figure:
    """The zoomed-out timeline: a heatmap with one row per lane, z = busy % of each bin.

    ``bins``: lane key columns (src, k1, k2, k3), ``bin``, ``busy_ns`` (sparse; bin i is
    ``[start_ns + i*width_ns, +width_ns)``). ``lanes`` from ``timeline_data.lanes`` (its ``lane`` column is
    the row). ``[a, b)`` is the window shown (ns since the epoch); ``origin`` the trace's first event.
    ``selected_bins`` (bin, busy_ns), when given, adds a red row "selected" at the bottom.
    """
    n_bins = max(1, -(-(b - start_ns) // width_ns))
    extra = 1 if selected_bins is not None else 0
    z = np.zeros((len(lanes) + extra, n_bins), dtype=np.uint8)
    if not bins.empty:
        bb = bins[bins["bin"].between(0, n_bins - 1)].merge(lanes[LANE_KEY + ["lane"]], on=LANE_KEY)
        z[bb["lane"].to_numpy(), bb["bin"].to_numpy()] = _pct(bb["busy_ns"], width_ns)
    if extra:
        sb = selected_bins[selected_bins["bin"].between(0, n_bins - 1)]
        z[len(lanes), sb["bin"].to_numpy()] = _pct(sb["busy_ns"], width_ns)
    layout, traces, _ = _layout(lanes, _shift_telemetry(telemetry, origin), extra, a, b, origin)
    x = to_ms(start_ns + width_ns * np.arange(n_bins) + width_ns // 2, origin)
    lo, hi = layout["yaxis"]["domain"]
    traces.insert(0, _trace('heatmap', x=x, y=np.arange(len(lanes)), z=z[: len(lanes)], zmin=0, zmax=100,
                            colorscale=BUSY_SCALE, showscale=True, name="busy %", showlegend=False,
                            colorbar={"title": {"text": "busy %", "side": "right"}, "thickness": 12, "len": hi - lo,
                                      "lenmode": "fraction", "y": hi, "yanchor": "top", "x": 1.0, "xpad": 6,
                                      "tickvals": [0, 25, 50, 75, 100], "outlinewidth": 0},
                            hovertemplate="%{x:.3f} ms: %{z}% busy<extra></extra>"))
    if extra:
        traces.insert(1, _trace('heatmap', x=x, y=[len(lanes)], z=z[len(lanes):], zmin=0, zmax=100,
                                    colorscale=[[0, "#ffffff"], [0.01, "#fecaca"], [1, SELECT_COLOR]],
                                    showscale=False, name="selected", showlegend=False,
                                    hovertemplate="%{x:.3f} ms: selection %{z}% busy<extra></extra>"))
    return _figure(traces, layout)


def _pct(busy_ns: pd.Series, width_ns: int) -> np.ndarray:
    """Busy ns -> whole % of the bin (0..100)."""
    return np.clip(np.rint(100 * busy_ns.to_numpy(dtype=np.float64) / width_ns), 0, 100).astype(np.uint8)


def events_figure(lanes: pd.DataFrame, events: pd.DataFrame, a: int, b: int, origin: int,
                  telemetry: pd.DataFrame | None = None, selected: pd.DataFrame | None = None,
                  with_names: bool = True, details: dict | None = None, highlight: dict | None = None,
                  matches: pd.DataFrame | None = None, plot_px: float = tt.DEFAULT_PX) -> go.Figure:
    """The zoomed-in timeline: each event one segment on its lane; one WebGL trace per lane and kind.

    ``events``: lane key columns, id, name, start_ns, end_ns, detail (GPU activity kind, 'nccl' for a
    collective library's kernel, which gets its own colour; launch type). Every point carries
    ``customdata`` (a plain list, null at the gaps) naming its event for a click: a CPU operator's ``op_id``
    (int), else ``'gpu:<id>'``, ``'api:<id>'``, ``'ann:<id>'``. ``with_names``: the full hover
    (``timeline_text.hover_texts``, with ``details`` from ``storage.timeline.event_details``) on each
    segment's start and end points; without, hover says the time only (keeps the figure small when many
    events are drawn). Names are written inside the bars where they fit (``timeline_text.labels``, for a plot
    ``plot_px`` wide; trace 'labels').
    ``selected`` (from ``timeline_data.selection`` / ``event_selection``): its activities are redrawn in red,
    and a flow line runs from each launch call's start (on its thread's API lane) to the activity's start (on
    its stream's lane): flows for the selection only. ``highlight`` (an event: lane key, start_ns, end_ns)
    gets a halo under its bar (trace 'highlight'); ``matches`` (lane key, start_ns, end_ns: the search
    matches in the window) a paler one (trace 'search matches').
    """
    layout, traces, _ = _layout(lanes, _shift_telemetry(telemetry, origin), 0, a, b, origin)
    row = {k: i for i, k in enumerate(zip(lanes["src"], lanes["k1"], lanes["k2"], lanes["k3"]))}
    labels = list(lanes["label"])
    halos = []
    if matches is not None and not matches.empty:
        halos.append(_halo(matches, row, origin, MATCH_COLOR, 20, "search matches"))
    if highlight is not None:
        halos.append(_halo(pd.DataFrame([highlight]), row, origin, HIGHLIGHT_COLOR, 24, "highlight"))
    traces.extend(h for h in halos if h is not None)
    ev = None
    if not events.empty:
        keys = zip(*(events[c].tolist() for c in LANE_KEY))  # (iterating the columns themselves is slow)
        ev = events.assign(lane=[row.get(k, -1) for k in keys])
        ev = ev[ev["lane"] >= 0].reset_index(drop=True)
        hovers = tt.hover_texts(ev, details, labels, origin) if with_names else None
        for (lane, src, kind), d in ev.groupby([ev["lane"], ev["src"], _kind(ev)], sort=True):
            color = _color(src, kind, int(lanes["k3"].iloc[lane]))
            x, y = segments(d["start_ns"], d["end_ns"], origin, lane)
            if with_names:
                hover = [hovers[i] for i in d.index]
                text = [""] * (3 * len(d))
                text[0::3] = hover
                text[1::3] = hover
                kw = {"text": text, "hovertemplate": "%{text}<extra></extra>"}
            else:
                kw = {"hovertemplate": "%{x:.3f} ms<extra>" + str(labels[lane]) + "</extra>"}
            # a plain list, never a numpy array: Plotly sends arrays as base64 typed arrays, and Dash's
            # clickData reads customdata from the figure's raw data (figure.data[curve].customdata[point]),
            # where a typed array is still {dtype, bdata}: a real click would carry no event.
            raw = d["id"].to_numpy(dtype=np.int64).tolist()  # (iterating the column itself: 4 µs per value)
            ids = raw if src == "cpu" else [f"{src}:{v}" for v in raw]
            kw["customdata"] = _per_point(ids, len(d), None)
            group = f"{kind} kernel" if kind == "nccl" else kind
            traces.append(_trace('scattergl', x=x, y=y.astype(np.float32), mode="lines", connectgaps=False,
                                 line={"width": 14 if src != "ann" else 8, "color": color}, showlegend=False,
                                 name=f"{labels[lane]} {group}".strip(), **kw))
    if selected is not None and not selected.empty:
        traces.extend(_selected_traces(selected, row, origin))
    lab = tt.labels(ev, a, b, origin, plot_px) if ev is not None else None
    if lab is not None and not lab.empty:
        # WebGL like the bars (an SVG text trace is drawn under the WebGL canvas, where the bars hide it)
        traces.append(_trace('scattergl', x=lab["x"].to_numpy(), y=lab["lane"].to_numpy(dtype=np.float32),
                             mode="text", text=lab["text"].tolist(), textposition="middle right",
                             textfont={"size": 10, "color": "white"}, hoverinfo="skip", showlegend=False,
                             name="labels"))
    return _figure(traces, layout)


def _halo(df: pd.DataFrame, row: dict, origin: int, color: str, width: int, name: str) -> dict | None:
    lanes = np.array([row.get(tuple(k), -1) for k in zip(df["src"], df["k1"], df["k2"], df["k3"])])
    d = df[lanes >= 0]
    if d.empty:
        return None
    xs, ys = [], []
    for lane, g in d.assign(lane=lanes[lanes >= 0]).groupby("lane"):
        x, y = segments(g["start_ns"], g["end_ns"], origin, lane)
        xs.append(x)
        ys.append(y)
    return _trace('scattergl', x=np.concatenate(xs), y=np.concatenate(ys).astype(np.float32), mode="lines",
                  connectgaps=False, line={"width": width, "color": color}, hoverinfo="skip", showlegend=False,
                  name=name)


def _selected_traces(selected: pd.DataFrame, row: dict, origin: int) -> list:
    """The selection's GPU activities in red and its launch → activity flow lines."""
    out = []
    gl = selected.assign(lane=[row.get(("gpu", d, s, 0), -1) for d, s in zip(selected["device"],
                                                                               selected["stream"])])
    gl = gl[gl["lane"] >= 0]
    x = np.concatenate([segments(d["start_ns"], d["end_ns"], origin, lane)[0]
                        for lane, d in gl.groupby("lane")]) if not gl.empty else np.array([])
    y = np.concatenate([segments(d["start_ns"], d["end_ns"], origin, lane)[1]
                        for lane, d in gl.groupby("lane")]) if not gl.empty else np.array([])
    out.append(_trace('scattergl', x=x, y=y.astype(np.float32), mode="lines",
                      line={"width": 14, "color": SELECT_COLOR}, showlegend=False,
                      name="selected activities", hoverinfo="skip", connectgaps=False))
    fl = gl.dropna(subset=["launch_start_ns"])
    src_lane = np.array([row.get(("api", p, t, 0), -1) for p, t in zip(fl["pid"], fl["tid"])], dtype=float)
    fl = fl[src_lane >= 0]
    src_lane = src_lane[src_lane >= 0]
    n = len(fl)
    fx = np.full(3 * n, np.nan)
    fy = np.full(3 * n, np.nan)
    fx[0::3] = to_ms(fl["launch_start_ns"].astype("int64"), origin)
    fx[1::3] = to_ms(fl["start_ns"], origin)
    fy[0::3] = src_lane
    fy[1::3] = fl["lane"].to_numpy(dtype=float)
    out.append(_trace('scattergl', x=fx, y=fy.astype(np.float32), mode="lines",
                      line={"width": 1, "color": SELECT_COLOR}, showlegend=False,
                      name="launch → activity", hoverinfo="skip", connectgaps=False))
    return out


def _kind(ev: pd.DataFrame) -> pd.Series:
    """The colour group of an event: the GPU activity kind for GPU lanes, '' otherwise."""
    return ev["detail"].where(ev["src"] == "gpu", "").rename("kind")


def _color(src: str, kind: str, depth: int) -> str:
    if src == "cpu":
        return _COLORS["cpu"][depth % len(_COLORS["cpu"])]
    if src == "gpu":
        return _COLORS.get(kind, _COLORS["kernel"])
    return _COLORS[src]


# ---------------------------------------------------------------------------------------------------------
# Runs of many ranks (the Ranks page's aligned timeline): GPU lanes of every rank, x = ms since the run's
# origin on the aligned clock (timeline_data.run_info); collectives coloured by collective type.

#: Colour of a collective kernel per normalised type (storage/ranks.py); other types: "other".
COLLECTIVE_COLORS = {"allreduce": "#dc2626", "allgather": "#9333ea", "reducescatter": "#db2777",
                     "alltoall": "#0d9488", "broadcast": "#ca8a04", "reduce": "#ea580c",
                     "sendrecv": "#4d7c0f", "barrier": "#111827", "other": "#be123c"}
FOCUS_COLOR = "#111827"


def _run_axis(fig: go.Figure) -> go.Figure:
    fig.layout.xaxis.title = {"text": "aligned time since the run's first event (ms)"}
    return fig


def run_binned_figure(lanes: pd.DataFrame, bins: pd.DataFrame, start_ns: int, width_ns: int, a: int, b: int,
                      origin: int) -> go.Figure:
    """The zoomed-out aligned timeline of a run: one heatmap row per lane (per rank: its GPU streams and its
    collectives lane), z = busy % of each bin; arguments as :func:`binned_figure` with the run's lanes
    (``timeline_data.run_lanes``) and ``origin`` the run's aligned origin."""
    return _run_axis(binned_figure(lanes, bins, start_ns, width_ns, a, b, origin))


def run_events_figure(lanes: pd.DataFrame, events: pd.DataFrame, a: int, b: int, origin: int,
                      focus: str | None = None) -> go.Figure:
    """The zoomed-in aligned timeline of a run: each GPU activity one segment on its rank's stream lane,
    one WebGL trace per lane and colour group (collective type for collectives, else the activity kind).

    ``events`` from ``timeline_data.run_events`` (aligned times). Collective points carry ``customdata`` =
    their instance ``'pg:pg_seq'``. ``focus`` (an instance): its kernels are outlined by a thin dark line on
    every rank (trace ``collective <instance>``)."""
    layout, traces, _ = _layout(lanes, None, 0, a, b, origin)
    layout["xaxis"]["title"] = {"text": "aligned time since the run's first event (ms)"}
    row = {(r, d, s): i for i, (src, r, d, s) in enumerate(zip(lanes["src"], lanes["k1"], lanes["k2"], lanes["k3"]))
           if src == "gpu"}
    if not events.empty:
        ev = events.assign(lane=[row.get(k, -1) for k in zip(events["rank"], events["device"], events["stream"])])
        ev = ev[ev["lane"] >= 0]
        inst = ev["pg"].astype(str) + ":" + ev["pg_seq"].astype("Int64").astype(str)
        ev = ev.assign(inst=inst.where(ev["collective"].notna(), None),
                       group=ev["collective"].where(ev["collective"].notna(), ev["kind"]).fillna("kernel"))
        for (lane, group), d in ev.groupby(["lane", "group"], sort=True):
            is_coll = d["collective"].notna().iloc[0]
            color = COLLECTIVE_COLORS.get(group, COLLECTIVE_COLORS["other"]) if is_coll else \
                _COLORS.get(group, _COLORS["kernel"])
            x, y = segments(d["start_ns"], d["end_ns"], origin, lane)
            dur_us = ((d["end_ns"] - d["start_ns"]) / NS_PER_US).round(3).tolist()
            text = [""] * (3 * len(d))
            text[0::3] = [f"rank {int(r)}: {str(n)[:NAME_CHARS]}<br>{u:,} µs" + (f"<br>{group} {i}" if is_coll else "")
                          for r, n, u, i in zip(d["rank"], d["name"], dur_us, d["inst"])]
            kw = {"text": text, "hovertemplate": "%{text}<extra></extra>"}
            if is_coll:
                kw["customdata"] = _per_point(list(d["inst"]), len(d), None)
            traces.append(_trace("scattergl", x=x, y=y.astype(np.float32), mode="lines", connectgaps=False,
                                 line={"width": 14, "color": color},
                                 name=f"{lanes['label'].iloc[lane]} {group}" + (" collective" if is_coll else ""),
                                 **kw))  # hover text, and the instance a click opens (was never passed)
        if focus:
            f = ev[ev["inst"] == focus]
            if not f.empty:
                xs, ys = [], []
                for lane, d in f.groupby("lane"):
                    for off in (-0.32, 0.32):  # a line along the top and the bottom of each segment
                        x, y = segments(d["start_ns"], d["end_ns"], origin, lane + off)
                        xs.append(x)
                        ys.append(y)
                traces.append(_trace("scattergl", x=np.concatenate(xs), y=np.concatenate(ys).astype(np.float32),
                                     mode="lines", connectgaps=False, line={"width": 2, "color": FOCUS_COLOR},
                                     name=f"collective {focus}", hoverinfo="skip"))
    return _figure(traces, layout)
