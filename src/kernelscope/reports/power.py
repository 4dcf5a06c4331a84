"""Power: the telemetry time series (binned in DuckDB), figure builders over it and over the power
analysis' Result, and the report section.

Numbers come from ``analysis.power`` (docs/metrics.md, "Power"): energies, ``j_per_tflop``, busy/idle power,
clocks, throttling, per-phase energy. A null number is shown with its reason, read from the same Result:
a window shorter than ``trust.min_window_ns`` (10 counter steps) or outside the telemetry, no energy loop,
no FLOPs, no telemetry at all (METRICS.md, "Energy").

Time axis: ms since the trace's first event (``traces.start_ns``); a telemetry sample at host time ``ts_ns``
lies at trace time ``ts_ns - traces.clock_offset_ns`` (0 when the offset is unknown, as the analysis does).
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import cache
from ..storage import catalog, series
from ..units import MJ_PER_J, NS_PER_MS
from .blocks import Section, Table
from .data import busy_bins
from .figures import MAX_BINS, bin_width_ns, busy_fraction_bins, styled
from .missing import na, shown


def has_telemetry(store, trace_id: str) -> bool:
    """Whether the trace has any telemetry sample (checked before running the power analysis, which
    also runs the bandwidth analysis for its FLOPs)."""
    return series.has_telemetry(store, trace_id)


def telemetry_bins(store, trace_id: str, max_bins: int = MAX_BINS) -> pd.DataFrame:
    """The trace's telemetry binned in DuckDB: at most ``max_bins`` bins per device over the samples' time
    range. Columns: device, bin, samples, t_ns (mean sample time in the bin, ns since ``traces.start_ns``),
    power_w, power_instant_w, sm_clock_mhz, mem_clock_mhz, temperature_c (means of the non-null samples),
    energy_j (counter at the bin's last sample minus the device's first reading, J). Empty without
    telemetry."""
    span = series.telemetry_span(store, trace_id)
    if not int(span["n"]):
        return pd.DataFrame(columns=["device", "bin", "samples", "t_ns", "power_w", "power_instant_w",
                                     "energy_j", "sm_clock_mhz", "mem_clock_mhz", "temperature_c"])
    t0 = int(span["t0"])
    width = bin_width_ns(int(span["t1"]) - t0 + 1, max_bins)
    return series.telemetry_bins(store, trace_id, t0, width)


def busy_shading(store, trace_id: str, max_bins: int = MAX_BINS) -> pd.DataFrame:
    """GPU busy fraction per (device, bin) on the same axis as ``telemetry_bins``: columns device,
    start_ns (bin start, ns since ``traces.start_ns``), bin_ns, busy_fraction (0..1). Empty without GPU
    activity. Bins from ``reports.data.busy_bins`` (at most ``max_bins`` over the GPU span)."""
    tr = series.trace_starts(store, trace_id)
    bins, span_ns, width = busy_bins(store, trace_id, max_bins)
    df = busy_fraction_bins(bins, span_ns, width)
    if not len(df) or pd.isna(tr["gpu_t0"]):
        return df[["device", "start_ns", "bin_ns", "busy_fraction"]]
    df["start_ns"] = df["start_ns"] + (int(tr["gpu_t0"]) - int(tr["start_ns"]))
    return df[["device", "start_ns", "bin_ns", "busy_fraction"]]


# (column, row, label, unit) of the timeline's series
SERIES = [
    ("power_w", 1, "power (averaged)", "W"),
    ("power_instant_w", 1, "power (instant)", "W"),
    ("energy_j", 2, "energy since first sample", "J"),
    ("sm_clock_mhz", 3, "SM clock", "MHz"),
    ("mem_clock_mhz", 3, "memory clock", "MHz"),
    ("temperature_c", 4, "temperature", "°C"),
]


def power_timeline_figure(tel: pd.DataFrame, busy: pd.DataFrame | None = None,
                          window_ns: int | None = None) -> go.Figure:
    """Power, energy, clocks and temperature over time (rows of one figure, shared x in ms since the
    trace start), one line per device and series from ``telemetry_bins``; GPU busy (``busy_shading``, % of
    each bin) shaded grey behind the power row; the trace window ``[0, window_ns]`` shaded light blue."""
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        specs=[[{"secondary_y": True}], [{}], [{}], [{}]],
                        subplot_titles=("power (W)", "energy since first sample (J)", "clocks (MHz)",
                                        "temperature (°C)"))
    if busy is not None and len(busy):
        for device, d in busy.groupby("device", sort=True):
            fig.add_trace(go.Scatter(
                x=(d["start_ns"] / NS_PER_MS).round(4).tolist(), y=(d["busy_fraction"] * 100).round(2).tolist(),
                mode="lines", line={"shape": "hv", "width": 0}, fill="tozeroy", fillcolor="rgba(107,114,128,0.18)",
                name=f"GPU {device} busy (% of bin)", hovertemplate="%{x:.3f} ms: %{y:.1f}% busy<extra></extra>"),
                row=1, col=1, secondary_y=True)
    multi = tel["device"].nunique() > 1 if len(tel) else False
    for device, d in tel.groupby("device", sort=True):
        for col, row, label, unit in SERIES:
            v = d[["t_ns", col]].dropna()
            if not len(v):
                continue
            fig.add_trace(go.Scatter(
                x=(v["t_ns"] / NS_PER_MS).round(4).tolist(), y=v[col].astype(float).round(3).tolist(),
                mode="lines+markers", marker={"size": 4}, line={"width": 1.5},
                name=f"{label}" + (f" (GPU {device})" if multi else ""),
                hovertemplate="%{x:.3f} ms: %{y:,.1f} " + unit + f"<extra>{label}</extra>"),
                row=row, col=1, secondary_y=False if row == 1 else None)
    if window_ns:
        fig.add_vrect(x0=0, x1=window_ns / NS_PER_MS, row="all", col=1, fillcolor="rgba(59,130,246,0.07)",
                      line_width=0, layer="below")
    fig.update_yaxes(range=[0, 105], tickvals=[0, 50, 100], showgrid=False, title_text="GPU busy (%)", row=1,
                     col=1, secondary_y=True)
    fig.update_xaxes(title_text="time since trace start (ms); blue: the trace window", row=4, col=1)
    styled(fig, height=760, margin={"l": 60, "r": 60, "t": 80, "b": 50},
                legend={"orientation": "h", "yanchor": "bottom", "y": 1.04, "x": 0},  # above the power row
                hovermode="closest")
    return fig


def phase_energy_figure(phases: pd.DataFrame) -> go.Figure | None:
    """Energy per phase (the power analysis' ``phases`` rows with a non-null ``energy_mj``), bars in J;
    None when no phase has an energy."""
    if phases is None or not len(phases):
        return None
    p = phases[phases["energy_mj"].notna()]
    if not len(p):
        return None
    labels = [f"{n} ({k})" for n, k in zip(p["name"], p["kind"])]
    fig = go.Figure(go.Bar(x=(p["energy_mj"].astype(float) / MJ_PER_J).tolist(), y=labels, orientation="h",
                           hovertemplate="%{y}: %{x:,.3f} J<extra></extra>"))
    styled(fig, title={"text": "Energy per phase (J)", "font": {"size": 14}},
                height=120 + 24 * len(p), margin={"l": 200, "r": 20, "t": 40, "b": 40},
                yaxis={"autorange": "reversed"}, xaxis_title="energy (J)")
    return fig


def window_reason(result, window_ns: int | None) -> str:
    """Why the energy of a window of ``window_ns`` is null, from the Result's scalars and trust."""
    s, tr = result.scalars, result.trust
    if not s.get("energy_source"):
        return "no energy counter or power samples in the telemetry"
    mw = tr.get("min_window_ns")
    if mw is None:
        return "the telemetry has too few changes to measure a counter step"
    if window_ns is not None and window_ns < mw:
        return f"the window ({window_ns / NS_PER_MS:,.1f} ms) is shorter than {_min_window_text(result)}"
    return "the window is not inside the telemetry's first..last counter change"


def _min_window_text(result) -> str:
    """'10 counter steps (10 × 100.0 ms = 1,000.0 ms)': the shortest window the power analysis reads energy over."""
    step, mw = result.trust.get("counter_step_ns"), result.trust["min_window_ns"]
    steps = f"10 × {step / NS_PER_MS:,.1f} ms = " if step else ""
    return f"10 counter steps ({steps}{mw / NS_PER_MS:,.1f} ms)"


def null_reasons(result) -> dict[str, str]:
    """For each null headline scalar of the power Result, why it is null (METRICS.md window rules)."""
    s, out = result.scalars, {}
    if s.get("trace_energy_mj") is None:
        out["trace_energy_mj"] = out["mean_power_w"] = window_reason(result, s.get("trace_window_ns"))
    if s.get("energy_per_iteration_mj") is None:
        out["energy_per_iteration_mj"] = "no un-profiled energy loop was recorded with the trace"
    if s.get("energy_per_unit_mj") is None:
        out["energy_per_unit_mj"] = (out.get("energy_per_iteration_mj")
                                     or "the trace has no tokens label (or batch and seq labels)")
    if s.get("j_per_tflop") is None:
        out["j_per_tflop"] = (out.get("energy_per_iteration_mj")
                              or "the bandwidth analysis found no modelled FLOPs")
    for key in ("busy_power", "idle_power"):
        p = s.get(key) or {}
        if p.get("mean_w") is None:
            which = "inside" if key == "busy_power" else "outside"
            out[key] = (p["reason"] if p.get("reason") and p.get("reason") != "no samples" else
                        f"no telemetry sample in the trace window fell {which} a GPU busy interval")
    for key in ("sm_clock_mhz", "mem_clock_mhz"):
        if (s.get("clocks") or {}).get(key) is None:
            out[key] = "no clock sample inside the trace window (clocks are sampled less often than power)"
    return out


def headline(result) -> list[dict]:
    """The headline numbers of the power Result as rows: key, label, value (the Result's raw number),
    text (value with its unit, or 'n/a: <reason>'), definition."""
    s = result.scalars
    bp, ip, ck = s.get("busy_power") or {}, s.get("idle_power") or {}, s.get("clocks") or {}
    why = null_reasons(result)
    unit = s.get("unit")

    def clock(key):
        c = ck.get(key)
        return None if c is None else c.get("median"), \
            None if c is None else f"{c['median']:,.0f} MHz (min {c['min']:,}, max {c['max']:,})"
    def txt(v, fmt: str, scale: float = 1.0, suffix: str = ""):
        return None if v is None else format(v / scale, fmt) + suffix

    def pw(p):
        return None if p.get("mean_w") is None else \
            f"{p['mean_w']:,.1f} W (peak {p['peak_w']:,.1f} W, {p['samples']} samples)"
    e_iter = s.get("energy_per_iteration_mj")
    rows = [
        ("energy_source", "energy source", s.get("energy_source"), s.get("energy_source"),
         "energy_counter (NVML total energy) or integrated_power (trapezoids over power samples)"),
        ("trace_energy_mj", "trace energy", s.get("trace_energy_mj"),
         txt(s.get("trace_energy_mj"), ",.3f", MJ_PER_J, " J"), "energy of the trace window (counter difference)"),
        ("mean_power_w", "mean power (trace)", s.get("mean_power_w"), txt(s.get("mean_power_w"), ",.1f", 1, " W"),
         "trace energy / trace window"),
        ("energy_per_iteration_mj", "energy per iteration", e_iter, txt(e_iter, ",.3f", MJ_PER_J, " J"),
         "from the un-profiled energy loop"),
        ("energy_per_unit_mj", f"energy per {unit or 'unit'}", s.get("energy_per_unit_mj"),
         txt(s.get("energy_per_unit_mj"), ",.3f", 1, " mJ"),
         "energy per iteration / units per iteration (tokens, else batch x seq)"),
        ("j_per_tflop", "J per TFLOP", s.get("j_per_tflop"), txt(s.get("j_per_tflop"), ",.3f", 1, " J/TFLOP"),
         "energy per iteration / (modelled FLOPs per iteration / 1e12)"),
        ("busy_power", "mean power, GPU busy", bp.get("mean_w"), pw(bp),
         "telemetry samples in the trace window inside a busy interval"),
        ("idle_power", "mean power, GPU idle", ip.get("mean_w"), pw(ip),
         "telemetry samples in the trace window outside busy intervals"),
        ("sm_clock_mhz", "SM clock (median)", *clock("sm_clock_mhz"), "over samples in the trace window"),
        ("mem_clock_mhz", "memory clock (median)", *clock("mem_clock_mhz"), "over samples in the trace window"),
    ]
    out = []
    for key, label, value, text, definition in rows:
        if text is None:
            text = na(why.get(key, "not measured"))
        out.append({"key": key, "label": label, "value": value, "text": text, "definition": definition})
    return out


def throttle_text(result) -> str:
    """The throttle reasons that were set, with their share of samples, in one sentence."""
    thr = result.tables.get("throttle")
    if thr is None or not len(thr) or thr["share"].isna().all():
        return "No throttle-reason samples were recorded."
    on = thr[thr["samples"] > 0]
    n = result.trust.get("telemetry_samples")
    if not len(on):
        return f"No clock-event (throttle) reason was set in any sample ({n} telemetry samples)."
    return "Clock-event reasons set: " + ", ".join(f"{r} in {100 * s:.0f}% of samples"
                                                  for r, s in zip(on["reason"], on["share"])) + "."


def phase_rows(result) -> pd.DataFrame:
    """The ``phases`` table as shown: phase, kind, duration (ms), energy (mJ, or 'n/a'; ``phase_na_text`` says
    why under the table, once per reason rather than in every cell)."""
    ph = result.tables.get("phases")
    if ph is None or not len(ph):
        return pd.DataFrame(columns=["phase", "kind", "duration (ms)", "energy (mJ)"])
    return pd.DataFrame({
        "phase": ph["name"].tolist(), "kind": ph["kind"].tolist(),
        "duration (ms)": [round(int(d) / NS_PER_MS, 3) for d in ph["dur_ns"]],
        "energy (mJ)": [f"{e:,.1f}" if e is not None and e == e else "n/a" for e in ph["energy_mj"]],
    })


def phase_na_text(result) -> str | None:
    """Why the phases' n/a energies are n/a, one sentence per reason (None when every phase has one): the phases
    shorter than 10 counter steps together, with their range of durations."""
    ph = result.tables.get("phases")
    if ph is None or not len(ph):
        return None
    mw = result.trust.get("min_window_ns")
    short, other = [], {}
    for e, d in zip(ph["energy_mj"], ph["dur_ns"]):
        if e is not None and e == e:
            continue
        if result.scalars.get("energy_source") and mw is not None and int(d) < mw:
            short.append(int(d))
        else:
            why = window_reason(result, int(d))
            other[why] = other.get(why, 0) + 1
    out = []
    if short:
        span = (f"{min(short) / NS_PER_MS:,.1f} ms" if min(short) == max(short)
                else f"{min(short) / NS_PER_MS:,.1f}-{max(short) / NS_PER_MS:,.1f} ms")
        out.append(f"n/a: {len(short)} phase{'s' if len(short) > 1 else ''} of {span}, shorter than "
                   f"{_min_window_text(result)}, too short to read the energy counter over.")
    out += [f"n/a: {n} phase{'s' if n > 1 else ''}: {why}." for why, n in other.items()]
    return " ".join(out) or None


REPORT_BINS = 500  # bins per series in the report (the file holds every trace's figure; <= 10 MB)


def power_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace: the telemetry timeline with busy shading, the headline numbers (nulls with reasons),
    throttling, and energy per phase. Traces without telemetry get a sentence."""
    blocks: list = []
    rows = []
    for tid in trace_ids:
        name = catalog.trace_name(store, tid)
        name = name if name is not None else tid
        if not has_telemetry(store, tid):
            blocks.append(f"{name}: no telemetry was recorded with this trace: no power, energy or clocks.")
            continue
        r = cache.analysis(store, "power", tid)
        if ctx.figures:
            fig = power_timeline_figure(telemetry_bins(store, tid, REPORT_BINS),
                                        busy_shading(store, tid, REPORT_BINS), r.scalars.get("trace_window_ns"))
            fig.update_layout(title=f"{name}: power, energy, clocks and temperature")
            blocks.append(fig)
        rows.append({"trace": name, **{h["label"]: h["text"] for h in headline(r)}})
        blocks.append(f"{name}: " + throttle_text(r))
        ph = phase_rows(r)
        if len(ph):
            blocks += [Table(ph, f"{name}: energy per phase"), *filter(None, [phase_na_text(r)])]
        pf = phase_energy_figure(r.tables.get("phases")) if ctx.figures else None
        if pf is not None:
            blocks.append(pf)
        blocks += [f"{name}: warning: {shown(w)}" for w in r.warnings]
    if rows:
        blocks.insert(0, Table(pd.DataFrame(rows), "Energy and power (definitions: docs/metrics.md, Power)"))
    return Section("Power and energy", "power", blocks) if blocks else None
