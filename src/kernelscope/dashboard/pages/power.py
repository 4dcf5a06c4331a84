"""Power page of one trace (``/trace/<ref>/power``): power, energy, SM/memory clocks and temperature over
time (telemetry binned to at most 2,000 bins, on the trace's time axis through the stored clock offset) with
GPU-busy shading; the power analysis' headline numbers (a null number says why, under the 10-counter-step
window rule), throttling, energy per phase and the energy time share per operator."""

from __future__ import annotations

from dash import html

from ...analysis import cache
from ...reports.missing import NA
from ...reports.missing import shown as shown_text
from ...reports.power import (
    busy_shading,
    has_telemetry,
    headline,
    phase_energy_figure,
    phase_na_text,
    phase_rows,
    power_timeline_figure,
    telemetry_bins,
    throttle_text,
)
from ...storage.catalog import trace_name
from ...units import NS_PER_MS
from ..widgets import graph, grid, message, warning_lines

TITLE = "Power"


def _kpi(h: dict) -> html.Div:
    """One headline number: ``power-kpi-<key>``; ``data-value`` holds the Result's raw value (empty when
    null); the value shows with its unit, or 'n/a' with the reason under it (``power-why-<key>``)."""
    null = h["value"] is None
    shown, extra = (NA, h["text"][len(NA) + 2:]) if null and h["text"].startswith(NA + ": ") else (h["text"], "")
    return html.Div([html.Div(h["label"], className="ks-kpi-label"),
                     html.Div(shown, className="ks-kpi-value", id=f"power-kpi-{h['key']}",
                              **{"data-value": "" if null else repr(h["value"])}),
                     html.Div(extra, className="ks-kpi-extra", id=f"power-why-{h['key']}")],
                    className="ks-kpi ks-kpi-narrow", title=h["definition"])


def _trust_text(r) -> list[str]:
    t = r.trust
    sp = t.get("sample_period_ns") or {}
    out = [f"{t.get('telemetry_samples', 0):,} telemetry samples"
           + (f", period median {sp['median'] / NS_PER_MS:,.1f} ms, p95 {sp['p95'] / NS_PER_MS:,.1f} ms, "
              f"max {sp['max'] / NS_PER_MS:,.1f} ms." if sp.get("median") is not None else ".")]
    if t.get("counter_step_ns"):
        out.append(f"Counter step {t['counter_step_ns'] / NS_PER_MS:,.1f} ms over {t.get('counter_change_points', 0)} "
                   f"change points: windows shorter than {t['min_window_ns'] / NS_PER_MS:,.1f} ms (10 steps) get "
                   "no energy.")
    out.append(f"Telemetry placed on the trace's clock with an offset of {t.get('clock_offset_ns', 0):,} ns.")
    return out


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    name = trace_name(store, trace_id)
    body: list = [html.H2(f"Power and energy: {name or trace_id}")]
    if not has_telemetry(store, trace_id):
        return html.Div(body + [message(
            "No telemetry was recorded with this trace (it was not captured with the kernelscope collector's "
            "NVML sampler, or the machine had no NVML): there is no power, energy, clock or temperature to show.",
            "msg-power-no-telemetry")])
    r = cache.analysis(store, "power", trace_id)
    body.append(html.Div([_kpi(h) for h in headline(r)], className="ks-kpis", id="power-kpis"))
    body.append(html.P(throttle_text(r), id="power-throttle"))
    fig = power_timeline_figure(telemetry_bins(store, trace_id), busy_shading(store, trace_id),
                                r.scalars.get("trace_window_ns"))
    body.append(graph("power-timeline", fig))

    body.append(html.H3("Energy per phase"))
    ph = phase_rows(r)
    if len(ph):
        pf = phase_energy_figure(r.tables.get("phases"))
        if pf is not None:
            body.append(graph("power-phase-figure", pf))
        shown = ph.rename(columns={"energy (mJ)": "energy"}).assign(dur_ns=list(r.tables["phases"]["dur_ns"]))
        body.append(grid(shown, [("phase", "phase", "text"), ("kind", "kind", "text"),
                                 ("dur_ns", "duration (ms)", "ms"), ("energy", "energy (mJ)", "text")],
                         "power-phases"))
        na_text = phase_na_text(r)
        if na_text:
            body.append(html.P(na_text, id="power-phases-na"))
    else:
        body.append(message("The trace has no step or user annotations (phases).", "msg-power-no-phases"))

    share = r.tables.get("energy_time_share")
    if share is not None and len(share) and share["energy_time_share_mj"].notna().any():
        top = share.head(15).assign(share_mj=[round(float(v), 3) for v in share["energy_time_share_mj"].head(15)])
        body += [html.H3("Energy time share by operator (kernel time × mean busy power; not the operator's energy)"),
                 grid(top, [("name", "operator", "text"), ("kernel_time_ns", "kernel time (ms)", "ms"),
                            ("share_mj", "energy time share (mJ)", "numeric")], "power-time-share")]
    body.append(html.Div([html.H3("Trust")] + [html.P(t) for t in _trust_text(r)]
                         + warning_lines(r.warnings, shown_text),
                         id="power-trust"))
    return html.Div(body)
