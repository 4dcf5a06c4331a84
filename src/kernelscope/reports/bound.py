"""Bound-ness of one trace and the headline additions (TKLQT with q, energy, profiler inflation, kernel
categories, recommendations): figure builders over the ``bound``, ``launch``, ``power``, ``transition``,
``kernels`` and ``recommend`` analyses' results, and the report's sections. The dashboard's Bound page
and Overview draw the same figures and say the same sentences.

Definitions (docs/metrics.md, "CPU-bound or GPU-bound"): per device ``gpu_span_ns = busy_ns +
host_wait_ns + dependency_wait_ns``; queue depth is the number of launched-but-not-started kernels on a
stream; a time bin is ``cpu_bound`` when host-wait idle fills more than half of it. Builders never touch
the store and never recompute an analysis' number.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..analysis import bound as analysis_bound
from ..analysis import cache
from ..analysis.recommend import BOUND_TABLES, LAUNCH_TABLES
from ..analysis.summary import no_gpu_reason, trace_profiler_inflation
from ..errors import KernelscopeError
from ..storage import catalog
from ..units import NS_PER_MS, mj_to_j, ms_text, span_text
from . import launch as rl
from .blocks import Section, Table
from .figures import styled
from .missing import is_missing, na, shown

_LAYOUT = {"margin": {"l": 60, "r": 20, "t": 40, "b": 50},
           "legend": {"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"}}
REGIME_COLORS = {"cpu_bound": "rgba(239, 68, 68, 0.12)", "gpu_bound": "rgba(34, 197, 94, 0.10)"}
#: Colours (r, g, b) for regime values not in REGIME_COLORS (e.g. a communication-bound regime), given in
#: order of the values' sorted names so one value keeps its colour across figures of one trace.
EXTRA_REGIME_RGB = [(59, 130, 246), (168, 85, 247), (245, 158, 11), (20, 184, 166), (236, 72, 153)]


def regime_colors(regimes) -> dict[str, str]:
    """Fill colour of each regime value in ``regimes``: the known ones from ``REGIME_COLORS``, any other
    value (a regime the analysis added later) one of ``EXTRA_REGIME_RGB`` by sorted name, cycling."""
    out = {r: REGIME_COLORS[r] for r in regimes if r in REGIME_COLORS}
    unknown = sorted({str(r) for r in regimes if r not in REGIME_COLORS})
    for i, r in enumerate(unknown):
        red, green, blue = EXTRA_REGIME_RGB[i % len(EXTRA_REGIME_RGB)]
        out[r] = f"rgba({red}, {green}, {blue}, 0.12)"
    return out


def _opaque(rgba: str) -> str:
    return rgba.rsplit(",", 1)[0].replace("rgba", "rgb") + ")"
SPLIT = [("busy_ns", "busy", "#2563eb"), ("host_wait_ns", "host wait", "#ef4444"),
         ("dependency_wait_ns", "dependency wait", "#f59e0b")]

NO_GPU = ("This trace has no GPU activity ({why}): there is no idle to split, no queue and no "
          "regime to show.")  # why: summary.no_gpu_reason


def bound_result(store, trace_id: str):
    return cache.analysis(store, "bound", trace_id)


def binned(store, trace_id: str, bins: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """bound's two binned tables for ``bins`` (queue_depth, segments), cached: what a new bin count redraws
    (the rest of bound does not depend on it)."""
    return cache.call(store, trace_id, "bound:binned", analysis_bound.binned, bins=bins)


def idle_split_figure(devices: pd.DataFrame) -> go.Figure:
    """Per device (bound ``devices``) its GPU span split into busy, host wait and dependency wait (stacked
    horizontal bars in ms; the three add up to the device's ``gpu_span_ns``)."""
    fig = go.Figure()
    names = [f"GPU {d}" for d in devices["device"]]
    for col, label, color in SPLIT:
        share = devices[col] / devices["gpu_span_ns"]
        fig.add_trace(go.Bar(y=names, x=devices[col] / NS_PER_MS, name=label, orientation="h",
                             marker_color=color, customdata=list(zip(devices[col], share * 100)),
                             hovertemplate="%{y} " + label + ": %{customdata[0]:,} ns "
                             "(%{customdata[1]:.1f}% of span)<extra></extra>"))
    styled(fig, title={"text": "GPU span: busy, host wait, dependency wait", "font": {"size": 14}},
                barmode="stack", xaxis_title="ms", height=120 + 40 * len(devices), **_LAYOUT)
    return fig


def queue_depth_figure(queue: pd.DataFrame, segments: pd.DataFrame | None = None) -> go.Figure:
    """Mean queue depth per bin over time (bound ``queue_depth``), one step line per (device, stream); bins
    the table leaves out (nothing queued) are drawn at 0. x: ms since the first bin's start. The regime
    ``segments`` of the bound analysis, when given, shade the background by their ``regime`` value (red:
    cpu_bound, green: gpu_bound, any other value a colour of its own: :func:`regime_colors`), with one
    legend entry ``regime: <value>`` per value shown."""
    fig = go.Figure()
    if queue.empty:
        return fig
    width = int(queue["bin_end_ns"].iloc[0] - queue["bin_start_ns"].iloc[0])
    t0 = int((queue["bin_start_ns"] - queue["bin"] * width).min())
    n_bins = int(queue["bin"].max()) + 1
    for (dev, stream), d in queue.groupby(["device", "stream"], sort=True):
        depth = pd.Series(0.0, index=range(n_bins))
        depth.loc[d["bin"].astype("int64").to_numpy()] = d["mean_depth"].to_numpy()
        x = [b * width / NS_PER_MS for b in range(n_bins)]
        fig.add_trace(go.Scatter(x=x, y=depth.round(4), mode="lines", line={"shape": "hv", "width": 1.5},
                                 name=f"GPU {dev} stream {stream}",
                                 hovertemplate="%{x:.3f} ms: mean depth %{y:.2f}<extra>GPU " + str(dev)
                                 + " stream " + str(stream) + "</extra>"))
    if segments is not None and not segments.empty:
        colors = regime_colors(list(dict.fromkeys(segments["regime"])))
        # one list of shapes set once (add_vrect per segment re-validates the layout each time: seconds for
        # a trace of hundreds of segments)
        fig.update_layout(shapes=[{"type": "rect", "xref": "x", "yref": "y domain", "y0": 0, "y1": 1,
                                   "x0": (seg.start_ns - t0) / NS_PER_MS, "x1": (seg.end_ns - t0) / NS_PER_MS,
                                   "fillcolor": colors[seg.regime], "line": {"width": 0}, "layer": "below"}
                                  for seg in segments.itertuples(index=False)])
        for regime, color in colors.items():  # a legend entry per regime shown (shapes have none)
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"regime: {regime}",
                                     legendgroup="regime", hoverinfo="skip",
                                     marker={"symbol": "square", "size": 12, "color": _opaque(color)}))
    styled(fig, title={"text": f"Queue depth over time (bins of {span_text(width)}; background: the "
                             "regime of each segment)", "font": {"size": 14}},
                xaxis_title="time since the first bin (ms)", yaxis_title="launched, not started (mean)",
                height=340, **_LAYOUT)
    return fig


def idle_causes_figure(causes: pd.DataFrame) -> go.Figure:
    """Host-wait time by cause category (bound ``idle_causes``; the bars add up to ``host_wait_ns``), ms."""
    d = causes.sort_values("idle_ns").reset_index(drop=True)
    fig = go.Figure(go.Bar(y=list(d["category"]), x=d["idle_ns"] / NS_PER_MS, orientation="h",
                           marker_color="#ef4444",
                           customdata=list(zip(d["idle_ns"], d["share_of_host_wait"] * 100,
                                               [f"{int(n):,} gap{'s' if n != 1 else ''}" for n in d["gaps"]],
                                               [analysis_bound.CAUSE_WORDS.get(c, "") for c in d["category"]])),
                           hovertemplate="%{y}: %{customdata[0]:,} ns, %{customdata[1]:.1f}% of host wait, "
                           "%{customdata[2]}<br>%{customdata[3]}<extra></extra>"))
    styled(fig, title={"text": "What the launching thread was doing while the GPU waited (host wait)",
                             "font": {"size": 14}}, xaxis_title="host wait (ms)",
                height=max(220, 80 + 28 * len(d)), showlegend=False, **_LAYOUT)
    return fig


def idle_operators_figure(ops: pd.DataFrame, top: int = 15) -> go.Figure:
    """Operators ranked by the host-wait time they cause (bound ``idle_operators``), ms, coloured by their
    main cause category."""
    d = ops.head(top).iloc[::-1]
    fig = go.Figure()
    for cat, g in d.groupby("main_category", sort=False):
        fig.add_trace(go.Bar(y=list(g["operator"]), x=g["idle_ns"] / NS_PER_MS, orientation="h", name=str(cat),
                             customdata=list(zip(g["idle_ns"], g["share_of_host_wait"] * 100, g["gaps"])),
                             hovertemplate="%{y}: %{customdata[0]:,} ns, %{customdata[1]:.1f}% of host wait, "
                             "%{customdata[2]} gaps<extra>" + str(cat) + "</extra>"))
    styled(fig, title={"text": f"Idle causes: operators ranked by the host wait they cause (top {len(d)})",
                             "font": {"size": 14}}, xaxis_title="host wait (ms)",
                yaxis={"categoryorder": "array", "categoryarray": list(d["operator"])},
                height=max(240, 80 + 24 * len(d)), **_LAYOUT)
    return fig


def bound_sentences(s: dict, why: str = "a CPU-only trace") -> list[str]:
    """The bound scalars in words (``why``: summary.no_gpu_reason, said when there is no GPU activity)."""
    span = s.get("gpu_span_ns")
    if not span:
        return [NO_GPU.format(why=why)]

    def pct(v):
        return na() if v is None else f"{100 * v:.1f}%"
    return [f"Of the {ms_text(span)} GPU span, {ms_text(s['busy_ns'])} busy, {ms_text(s['host_wait_ns'])} host wait "
            f"({pct(s['host_wait_share'])}: the GPU had nothing queued) and {ms_text(s['dependency_wait_ns'])} "
            f"dependency wait ({pct(s['dependency_wait_share'])}: work was queued but waited), over "
            f"{s.get('gaps', 0):,} idle gaps.",
            f"CPU-bound segments {ms_text(s.get('cpu_bound_ns'))}, GPU-bound segments {ms_text(s.get('gpu_bound_ns'))} "
            f"(bins of {span_text(s.get('bin_ns'))})."]


def segments_table(segments: pd.DataFrame, t0: int | None = None) -> pd.DataFrame:
    """The regime segments as shown: start/end in ms since ``t0`` (the first segment start by default)."""
    if segments.empty:
        return pd.DataFrame()
    t0 = int(segments["start_ns"].min()) if t0 is None else t0
    return pd.DataFrame({"device": segments["device"], "regime": segments["regime"],
                         "start (ms)": ((segments["start_ns"] - t0) / NS_PER_MS).round(3),
                         "end (ms)": ((segments["end_ns"] - t0) / NS_PER_MS).round(3),
                         "duration (ms)": (segments["dur_ns"] / NS_PER_MS).round(3),
                         "busy (ms)": (segments["busy_ns"] / NS_PER_MS).round(3),
                         "host wait (ms)": (segments["host_wait_ns"] / NS_PER_MS).round(3),
                         "dependency wait (ms)": (segments["dependency_wait_ns"] / NS_PER_MS).round(3),
                         "bins": segments["bins"]})


def bound_figures(r) -> list[go.Figure]:
    """The Bound page's / section's figures from one bound Result (empty for a trace without GPU work)."""
    if not r.scalars.get("gpu_span_ns"):
        return []
    t = r.tables
    figs = [idle_split_figure(t["devices"]), queue_depth_figure(t["queue_depth"], t["segments"])]
    if not t["idle_causes"].empty:
        figs.append(idle_causes_figure(t["idle_causes"]))
    if not t["idle_operators"].empty:
        figs.append(idle_operators_figure(t["idle_operators"]))
    return figs


def _name(store, tid: str) -> str:
    return catalog.trace_name(store, tid) or tid


def bound_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace: the idle split in words and figures, queue depth with the regimes, idle causes."""
    blocks: list = []
    for tid in trace_ids:
        name = _name(store, tid)
        r = bound_result(store, tid)
        blocks += [f"{name}: {t}" for t in bound_sentences(r.scalars, no_gpu_reason(store, tid))]
        for fig in bound_figures(r) if ctx.figures else ():
            fig.update_layout(title_text=f"{name}: {fig.layout.title.text}")
            blocks.append(fig)
        blocks += [f"{name}: warning: {shown(w)}" for w in r.warnings]
    return Section("Bound-ness", "bound", blocks)


# --- headline additions: TKLQT with q, energy, profiler inflation, kernel categories, recommendations ---

def energy(power_result) -> tuple[float | None, str, str]:
    """(mJ, which, sentence) from the power analysis: the trace window's energy when known, else the
    un-profiled loop's energy per iteration, else None with the reason (:func:`energy_reason`)."""
    s = power_result.scalars
    if s.get("trace_energy_mj") is not None:
        return (float(s["trace_energy_mj"]), "trace_energy_mj",
                f"{mj_to_j(s['trace_energy_mj']):,.3f} J over the trace window ({s.get('energy_source')}; mean "
                f"{s.get('mean_power_w') or 0:,.1f} W).")
    if s.get("energy_per_iteration_mj") is not None:
        return (float(s["energy_per_iteration_mj"]), "energy_per_iteration_mj",
                f"{mj_to_j(s['energy_per_iteration_mj']):,.3f} J per iteration (un-profiled energy loop); "
                f"trace-window energy {na(energy_reason(power_result))}.")
    if s.get("energy_source") is None:
        return None, "", "No energy: the trace has no telemetry (no energy counter or power samples)."
    return None, "", f"No energy: {energy_reason(power_result).rstrip('.')}."


def energy_reason(power_result) -> str:
    """Why the trace window's energy is null, in a few words (the power analysis' window rule:
    ``reports.power.window_reason``); '' when it is known."""
    from .power import window_reason

    s = power_result.scalars
    if s.get("trace_energy_mj") is not None:
        return ""
    if s.get("energy_source") is None:
        return "no telemetry"
    return window_reason(power_result, s.get("trace_window_ns"))


def _numeric_label(store, tid: str) -> str | None:
    keys = catalog.numeric_labels_of(store, tid)
    return "batch" if "batch" in keys else (keys[0] if keys else None)


def inflation(store, tid: str) -> tuple[float | None, str, str]:
    """(profiler inflation, sentence, why it is missing): the transition analysis' ``inflation`` = traced
    latency per iteration / un-profiled time (collector ``cuda_event`` timings, else label ``unprofiled_ns``)
    for this one trace; None with the reason (a sentence and a few words) when there is no un-profiled time."""
    n_timings = catalog.cuda_event_timings(store, tid)
    whole = None if n_timings else catalog.process_wall_ns(store, tid)
    # `kernelscope profile` of a script without kernelscope.range("step") regions times the whole process
    whole_said = None if whole is None else (
        None, f"No profiler inflation per iteration: the un-profiled run was timed as a whole process "
              f"({ms_text(whole)}), not per step; mark the loop with kernelscope.range(\"step\") to time its "
              "iterations (the overhead line kernelscope profile printed compared the two runs step by step, or as "
              "whole processes when it found no step).",
        "un-profiled run timed as a whole process")
    collector = _collector_inflation(store, tid)
    fallback = collector or whole_said  # when the transition analysis gives no inflation
    by = _numeric_label(store, tid)
    if by is None and fallback:
        return fallback
    if by is None:
        return None, ("No profiler inflation: the trace has no numeric label, so the transition analysis "
                      "cannot place it" + (f" (it has {n_timings} un-profiled timings)." if n_timings else
                                           ", and there is no un-profiled timing either.")), \
            "no numeric label" if n_timings else "no un-profiled timing"
    try:
        p = cache.analysis(store, "transition", [tid], by=by).tables["points"].iloc[0]
    except KernelscopeError as e:
        return collector or (None, f"No profiler inflation: {e}", str(e))
    if (p["inflation"] is None or pd.isna(p["inflation"])) and fallback:
        return fallback
    if p["inflation"] is None or pd.isna(p["inflation"]):
        return None, ("No profiler inflation: no un-profiled time was recorded for this trace (collector "
                      "cuda_event timings or the label unprofiled_ns)."), "no un-profiled timing"
    return float(p["inflation"]), (
        f"Profiler inflation {p['inflation']:.2f}×: traced latency per iteration {ms_text(p['latency_per_iter_ns'])} "
        f"/ un-profiled {ms_text(p['unprofiled_ns'])} ({p['unprofiled_source']}, {p['iterations']} iteration(s))."
        + _per_steady_step(store, tid, int(p["unprofiled_ns"]))), ""


def _collector_inflation(store, tid: str) -> tuple[float, str, str] | None:
    """The profiler inflation ``kernelscope profile`` measured per step or per kernelscope.range region when it
    recorded the trace (docs/metrics.md, Collector overhead; the number its overhead line printed), else None."""
    measured = trace_profiler_inflation(store, tid)
    if measured is None:
        return None
    ratio, o = measured
    what, theirs = ("steps", "same steps") if o["basis"] == "step" else ("kernelscope.range regions", "regions")
    if ratio < 1:  # a step is not faster for being profiled: the steps varied more than the profiler cost
        return ratio, (f"Profiler inflation under the noise: kernelscope profile measured the median of {o['n']} "
                       f"recorded {what} ({ms_text(o['profiled_median_ns'])}) below the un-profiled run's {theirs} "
                       f"({ms_text(o['unprofiled_median_ns'])}), {ratio:.2f}×; a step is not faster for being "
                       "profiled, so they vary more than the profiler costs."), ""
    return ratio, (f"Profiler inflation {ratio:.2f}× per step, as kernelscope profile measured it: the median of "
                   f"{o['n']} recorded {what} ({ms_text(o['profiled_median_ns'])}) against the un-profiled run's "
                   f"{theirs} ({ms_text(o['unprofiled_median_ns'])})."), ""


def _per_steady_step(store, tid: str, unprofiled_ns: int) -> str:
    """The same ratio per steady step (the steps analysis' median over steps neither warm-up nor partial), said
    when some steps were left out: the latency per iteration carries whatever the first step recorded before
    the loop (Whisper under kernelscope profile: 9.14× with 7.4 s of set-up in its first step, 1.26× per steady
    step, beside the profile command's +49% per region)."""
    try:
        sc = cache.analysis(store, "steps", tid).scalars
    except KernelscopeError:
        return ""
    steady, median = sc.get("steady_steps") or 0, sc.get("step_time_median_ns")
    if not steady or steady == sc.get("step_count") or not median or not unprofiled_ns:
        return ""
    return (f" Per steady step (steps analysis: the median of {steady} of {sc['step_count']} steps, warm-up and "
            f"partial ones left out): {ms_text(median)}, {median / unprofiled_ns:.2f}×.")


def categories_figure(categories: pd.DataFrame) -> go.Figure:
    """Kernel time by category (kernels ``categories``; the bars add up to kernel time), ms, with the
    tensor-core part of each category."""
    d = categories[categories["time_ns"] > 0].sort_values("time_ns")
    fig = go.Figure()
    for col, label, color in [("tensor_core_ns", "tensor cores", "#7c3aed"), ("other", "other", "#93c5fd")]:
        v = d["tensor_core_ns"] if col == "tensor_core_ns" else d["time_ns"] - d["tensor_core_ns"]
        fig.add_trace(go.Bar(y=list(d["category"]), x=v / NS_PER_MS, name=label, orientation="h", marker_color=color,
                             customdata=list(zip(d["time_ns"], d["share"] * 100, d["kernels"])),
                             hovertemplate="%{y}: %{customdata[0]:,} ns, %{customdata[1]:.1f}% of kernel time, "
                             "%{customdata[2]:,} kernels<extra>" + label + "</extra>"))
    styled(fig, title={"text": "Kernel time by category", "font": {"size": 14}}, barmode="stack",
                xaxis_title="kernel time (ms)", height=max(220, 80 + 30 * len(d)), **_LAYOUT)
    return fig


def _value_text(v) -> str:
    if is_missing(v):
        return na()
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def evidence_text(e: dict) -> str:
    """One evidence entry as 'analysis.key[row] = value'."""
    row = e.get("row")
    where = "[" + ", ".join(f"{k}={na() if is_missing(v) else v}" for k, v in row.items()) + "]" if row else ""
    return f"{e['analysis']}.{e['key']}{where} = {_value_text(e['value'])}"


def recommendations(store, tid: str) -> tuple[list[dict], list[str]]:
    """(findings as dicts: rule, severity, message, saving_ns, evidence (texts)), warnings) from the
    recommend analysis. A trace without GPU activity gives none (the rules need GPU work)."""
    r = cache.analysis(store, "recommend", tid)
    out = []
    for f in r.tables["findings"].to_dict("records"):
        saving = f["saving_ns"]
        out.append({"rule": f["rule"], "severity": f["severity"], "message": f["message"],
                    "saving_ns": None if saving is None or pd.isna(saving) else int(saving),
                    "evidence": [evidence_text(e) for e in f["evidence"]]})
    return out, list(r.warnings)


def launch_part(store, tid: str):
    """launch with only the table the recommendations read (its scalars, the TKLQT headline, all there), or the
    whole Result when cached: the Launch page's other tables cost ~0.3 s of CPU at 1M kernels."""
    return cache.analysis_part(store, "launch", tid, LAUNCH_TABLES)


def bound_part(store, tid: str):
    """bound with only the tables the recommendations read (not its binned queue and busy tables), or the whole
    Result when cached."""
    return cache.analysis_part(store, "bound", tid, BOUND_TABLES)


def recommendation_lines(findings: list[dict]) -> list[str]:
    return [f"[{f['severity']}] {f['message']}"
            + (f" Possible saving {ms_text(f['saving_ns'])}." if f["saving_ns"] is not None else "")
            + " Evidence: " + "; ".join(f["evidence"]) + "." for f in findings]


def headline_extras(store, tid: str, has_gpu: bool) -> dict:
    """What the Overview adds to the summary: launch scalars, energy, inflation, kernels result,
    recommendations (all from the analyses)."""
    power = cache.analysis(store, "power", tid)
    infl = inflation(store, tid)
    out = {"launch": launch_part(store, tid).scalars,
           "energy": energy(power), "energy_why": energy_reason(power),
           "inflation": infl[:2], "inflation_why": infl[2],
           "kernels": cache.analysis(store, "kernels", tid)}
    out["findings"], out["recommend_warnings"] = [], []
    if has_gpu:
        try:
            out["findings"], out["recommend_warnings"] = recommendations(store, tid)
        except Exception as e:
            out["recommend_warnings"] = [f"the recommend analysis failed ({type(e).__name__}: {e}); no "
                                         "recommendation is shown."]
    return out


def extras_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace: TKLQT with q, energy, profiler inflation (a table), kernel categories, recommendations."""
    rows, blocks = [], []
    for tid in trace_ids:
        name = _name(store, tid)
        has_gpu = bool(catalog.gpu_activity_count(store, tid))
        x = headline_extras(store, tid, has_gpu)
        ls, (e_mj, e_key, e_text), (infl, infl_text) = x["launch"], x["energy"], x["inflation"]
        tk, mean = ls.get("tklqt_ns"), rl.mean_lq_ns(ls)
        rows.append({"trace": name,
                     "mean launch+queue per kernel (ms)": None if mean is None else round(mean / NS_PER_MS, 3),
                     "mean queue depth q": ls.get("mean_queue_depth"),
                     "TKLQT: sum over kernels (ms)": None if tk is None else round(tk / NS_PER_MS, 3),
                     "kernels in the sum": rl.tklqt_terms(ls),
                     "energy (J)": na(x["energy_why"]) if e_mj is None else round(mj_to_j(e_mj), 3),
                     "energy is": {"trace_energy_mj": "trace window", "energy_per_iteration_mj": "per iteration"}
                     .get(e_key, na()),
                     "profiler inflation (×)": na(x["inflation_why"]) if infl is None else round(infl, 3)})
        blocks += [f"{name}: {e_text}", f"{name}: {infl_text}"]
        cats = x["kernels"].tables["categories"]
        if x["kernels"].scalars.get("kernels") and ctx.figures:
            fig = categories_figure(cats)
            fig.update_layout(title_text=f"{name}: {fig.layout.title.text}")
            blocks.append(fig)
        if not has_gpu:
            blocks.append(f"{name}: no GPU activity: no recommendation.")
        elif not x["findings"] and not x["recommend_warnings"]:
            blocks.append(f"{name}: no recommendation rule fired.")
        blocks += [f"{name}: {t}" for t in recommendation_lines(x["findings"])]
        blocks += [f"{name}: warning: {shown(w)}" for w in x["recommend_warnings"]]
    blocks.insert(0, Table(pd.DataFrame(rows), "Launch+queue per kernel with q (TKLQT is their sum over the "
                           "kernels, not wall time), energy and profiler inflation"))
    return Section("Launch queue, energy, inflation and recommendations", "extras", blocks)
