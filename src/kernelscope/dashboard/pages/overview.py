"""Overview of one trace: headline numbers of the "summary" analysis, the host-wait share, TKLQT with the
mean queue depth (launch), energy (power), profiler inflation (transition's rule on the collector's
un-profiled timing), the trust section in words, kernel categories (kernels), the recommendations
(recommend) with their evidence, top kernels and operators, and the binned GPU-busy figure."""

from __future__ import annotations

from dash import html

from ...analysis import cache
from ...analysis.bound import idle_split
from ...analysis.rules import rule_host_bound_launch
from ...analysis.summary import no_gpu_reason
from ...reports import bound as rb
from ...reports.data import busy_bins
from ...reports.figures import busy_fraction_figure
from ...reports.missing import kpi_parts, shown
from ...reports.overview import host_wait, trust_sentences
from ...units import mj_to_j, ms_text
from ..widgets import count_text, graph, grid, kpi, message, pct_text, tklqt_kpis, warning_lines

# (scalar key, label, kind, definition shown on hover). kind: 'ns' (shown in ms) or 'count'.
KPIS = [
    ("gpu_span_ns", "GPU span", "ns", "first GPU activity start to last GPU activity end"),
    ("busy_ns", "GPU busy", "ns", "length of the union of GPU activity intervals (summed over devices)"),
    ("idle_ns", "GPU idle", "ns", "GPU span minus busy"),
    ("kernel_time_ns", "kernel time", "ns", "sum of kernel durations"),
    ("latency_ns", "latency", "ns", "first top-level CPU operator start to last GPU activity end"),
    ("exposed_host_ns", "exposed host time", "ns", "latency minus GPU busy (union over devices)"),
    ("kernels", "kernels", "count", "kernel activities on the GPU"),
    ("launches", "launches", "count", "host calls that launched GPU work"),
    ("cpu_ops", "CPU operators", "count", "CPU operators (phases and Python functions excluded)"),
    ("memcpys", "memcpys", "count", "memory copies on the GPU"),
]


def _kpi(key: str, label: str, value, kind: str, definition: str, extra: str = "", why: str = "") -> html.Div:
    """One headline number (``widgets.kpi``): ``data-value`` holds the raw value (int ns for times, a count
    otherwise; empty when null), so does its hover title (with 'ns' for times). A null value shows as 'n/a'
    with ``why`` under it."""
    shown, extra = kpi_parts(value, ms_text if kind == "ns" else count_text, why, extra)
    raw = None if value is None else int(value)
    title = "" if raw is None else (f"{raw} ns" if kind == "ns" else str(raw))
    return kpi(key, label, raw, shown, extra, definition, title=title)


TITLE = "Overview"
NO_GPU_WHY = "no GPU activity"
ENERGY_KIND = {"trace_energy_mj": "trace window", "energy_per_iteration_mj": "per iteration (un-profiled)"}


def _whatif_if_cited(store, trace_id: str) -> None:
    """whatif (~0.4 s at 1M kernels), when the recommendation that cites it fires: host_bound_launch's saving,
    decided from the launch and bound parts; otherwise nothing on the page reads it."""
    if rule_host_bound_launch({"bound": rb.bound_part(store, trace_id), "launch": rb.launch_part(store, trace_id)}):
        cache.analysis(store, "whatif", trace_id)


def _idle_split(store, trace_id: str):
    return cache.call(store, trace_id, "idle_split", idle_split)


def _busy_bins(store, trace_id: str):
    return cache.call(store, trace_id, "busy_bins", busy_bins)


def _power(store, trace_id: str):
    return cache.analysis(store, "power", trace_id)


#: What the Overview computes, at once in the prefetch's threads (cache.prefetch), in the order they start: the
#: longest at 1M kernels first, with what whatif waits for (the launch and bound parts tell whether it is cited)
#: started beside it; power after bandwidth, whose FLOP total it reads. The page's own work after the prefetch is
#: then mostly reading the cache.
PREFETCH = ("bandwidth", rb.launch_part, rb.bound_part, _whatif_if_cited, "summary", "kernels", "steps", "memory",
            _idle_split, _busy_bins, _power)


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    cache.prefetch(store, trace_id, PREFETCH)
    result = cache.analysis(store, "summary", trace_id)
    s, trust = result.scalars, result.trust
    has_gpu = bool(s.get("devices_count"))
    title = html.Div([
        html.H2(s.get("name") or trace_id),
        html.P([f"trace {trace_id} · {s.get('source')}"]
               + ([" · labels: " + ", ".join(f"{k}={v}" for k, v in sorted(s["labels"].items()))]
                  if s.get("labels") else []), className="ks-hint"),
    ])
    span = s.get("gpu_span_ns")
    extras = {"busy_ns": pct_text(s.get("busy_ns"), span) + (" of span" if span else ""),
              "idle_ns": pct_text(s.get("idle_ns"), span) + (" of span" if span else "")}
    if s.get("devices_count", 0) > 1:
        extras["busy_ns"] = extras["idle_ns"] = "summed over devices"
    if (s.get("kernel_time_ns") or 0) > (s.get("busy_ns") or 0):  # reads as more kernel time than the GPU ran
        extras["kernel_time_ns"] = "a sum: kernels overlap on streams"
    why = {"latency_ns": "no top-level CPU operator" if has_gpu else NO_GPU_WHY,
           "exposed_host_ns": "no top-level CPU operator" if has_gpu else NO_GPU_WHY}
    kpis = [_kpi(k, label, s.get(k), kind, d, extras.get(k, ""), why.get(k, NO_GPU_WHY if kind == "ns" else ""))
            for k, label, kind, d in KPIS]

    hw = host_wait(_idle_split(store, trace_id)) if has_gpu else None
    if hw is not None:
        kpis.append(html.Div(
            [html.Div("host wait", className="ks-kpi-label"),
             html.Div(pct_text(*hw) or "0.0%", className="ks-kpi-value", id="kpi-host_wait_share",
                      title=f"{hw[0]} ns", **{"data-value": str(hw[0])}),
             html.Div(f"{ms_text(hw[0])} of span", className="ks-kpi-extra")],
            className="ks-kpi", title="share of the GPU span the GPU sat idle with no launched work "
                                      "queued (waiting for the host)"))

    x = rb.headline_extras(store, trace_id, has_gpu)
    kpis += _extra_kpis(x)

    body: list = [title, html.Div(kpis, className="ks-kpis", id="kpis")]
    body.append(html.Div([html.P(x["energy"][2], id="energy-text"), html.P(x["inflation"][1], id="inflation-text")],
                         className="ks-hint"))
    if not has_gpu:
        body.append(message(f"This trace has no GPU activity ({no_gpu_reason(store, trace_id)}): GPU span, "
                            "busy, idle and "
                            "latency are not defined, and there is no GPU timeline to draw.", "msg-no-gpu"))
    else:
        bins, span_ns, width = _busy_bins(store, trace_id)
        body.append(graph("busy-figure", busy_fraction_figure(bins, span_ns, width)))

    sentences = trust_sentences(trust, s)
    body.append(html.Div([html.H3("Trust")] + [html.P(t) for t in sentences]
                         + warning_lines(result.warnings, shown),
                         id="trust"))
    body += _categories_and_recommendations(x, has_gpu)
    body += _tables(result, s.get("kernel_time_ns") or 0)
    return html.Div(body)


def _extra_kpis(x: dict) -> list:
    """TKLQT (with q), mean queue depth, energy and profiler inflation. ``data-value``: TKLQT in int ns,
    q and inflation as the analyses return them, energy in mJ (``data-key`` names the power key)."""
    e_mj, e_key, e_text = x["energy"]
    infl, infl_text = x["inflation"]
    energy_kpi = kpi("energy_mj", "energy", e_mj,
                           *kpi_parts(e_mj, lambda v: f"{mj_to_j(v):,.3f} J", x["energy_why"],
                                      ENERGY_KIND.get(e_key, "")), e_text, **{"data-key": e_key})
    return [
        *tklqt_kpis(x["launch"]),
        energy_kpi,
        kpi("inflation", "profiler inflation", infl,
                  *kpi_parts(infl, lambda v: f"{v:.2f}×", x["inflation_why"], "traced / un-profiled"), infl_text),
    ]


def _categories_and_recommendations(x: dict, has_gpu: bool) -> list:
    out: list = [html.H3("Kernel categories")]
    kr = x["kernels"]
    if kr.scalars.get("kernels"):
        out.append(graph("overview-categories", rb.categories_figure(kr.tables["categories"])))
    else:
        out.append(message("This trace has no kernels, so there are no kernel categories.", "msg-no-kernels"))
    out.append(html.H3("Recommendations"))
    if not has_gpu:
        out.append(message("No recommendation: the rules need GPU activity.", "msg-no-recommendations"))
    elif not x["findings"] and x["recommend_warnings"]:
        out.append(message("No recommendation: " + "; ".join(map(shown, x["recommend_warnings"])),
                           "msg-no-recommendations", "error"))
        return out
    elif not x["findings"]:
        out.append(message("No recommendation rule fired on this trace.", "msg-no-recommendations"))
    else:
        out.append(html.Div([html.Div([
            html.P([html.B(f"[{f['severity']}] {f['rule']}: "), f["message"]]
                   + ([f" Possible saving {ms_text(f['saving_ns'])}."] if f["saving_ns"] is not None else [])),
            html.Ul([html.Li(e) for e in f["evidence"]], className="ks-hint")],
            className="ks-finding", **{"data-rule": f["rule"]}) for f in x["findings"]], id="recommendations"))
    out += warning_lines(x["recommend_warnings"], shown)
    return out


def _tables(result, kernel_time_ns: int) -> list:
    out = []
    tk = result.tables["top_kernels"].copy()
    if not tk.empty:
        tk["share_pct"] = (tk["share"] * 100).round(1)
        out += [html.H3("Top kernels by total time"),
                grid(tk, [("name", "kernel", "text"), ("count", "count", "numeric"),
                          ("total_ns", "total (ms)", "ms"), ("mean_ns", "mean (µs)", "us"),
                          ("share_pct", "% of kernel time", "numeric")], "top-kernels", tooltips=("name",))]
    to = result.tables["top_operators"].copy()
    if to.empty and not tk.empty:
        out.append(message("No kernel in this trace is attributed to a CPU operator, so there is no "
                           "operator table.", "msg-no-operators"))
    elif not to.empty:
        to["share_pct"] = (to["share"] * 100).round(1)
        out += [html.H3("Top operators by kernel time (top-level operators)"),
                grid(to, [("name", "operator", "text"), ("calls", "calls", "numeric"),
                          ("kernels", "kernels", "numeric"), ("kernel_time_ns", "kernel time (ms)", "ms"),
                          ("share_pct", "% of kernel time", "numeric")], "top-operators")]
    return out
