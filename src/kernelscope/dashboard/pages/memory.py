"""Memory of one trace (``/trace/<ref>/memory``): allocated and reserved bytes over time per device with the peak
marked, the peak's operator and module in a KPI, allocations and frees per operator, and the blocks still live at
the end of the window (leak suspects). Numbers come from the ``memory`` analysis (docs/metrics.md "Memory")
through ``reports/memory.py``. A trace without memory events says how to record them.

URL state: ``device`` (``cuda:0``, ``cpu``, ...) restricts the tables to one device; absent: every device.
"""

from __future__ import annotations

from dash import dcc, html

from ...analysis import cache
from ...reports import memory as rm
from ...reports.missing import shown
from ...units import NS_PER_MS
from .. import urls
from ..widgets import graph, grid, kpi, message, warning_lines

TITLE = "Memory"


def _kpis(r) -> html.Div:
    s = r.scalars
    dev = r.tables["device_memory"].set_index("device", drop=False)
    first = s.get("peak_device")
    row = dev.loc[first].to_dict() if first in dev.index else {}
    peak = row.get("peak_allocated_bytes")
    op, mod = row.get("peak_operator"), row.get("peak_module")
    where = (f"at {op}" if isinstance(op, str) else "outside every operator") + (
        f" · {mod}" if isinstance(mod, str) else "")
    share = s.get("allocator_idle_share")
    live = (s.get("live_at_end_bytes") or {}).get(first)
    out = [
        kpi("peak_allocated_bytes", f"peak allocated ({first})", None if peak is None else int(peak),
            rm.mib_text(peak), where, "max Total Allocated over the device's memory events in the window",
            **{"data-operator": op if isinstance(op, str) else "", "data-module": mod if isinstance(mod, str) else ""}),
        kpi("peak_reserved_bytes", f"peak reserved ({first})", row.get("peak_reserved_bytes"),
            rm.mib_text(row.get("peak_reserved_bytes")), "", "max Total Reserved (the caching allocator's pool)"),
        kpi("live_at_end_bytes", f"live at end ({first})", live, rm.mib_text(live),
            f"{int(row.get('live_at_end_blocks') or 0):,} block(s)", "allocated in the window, not freed by its end"),
        kpi("allocator_idle_share", "allocator share of GPU idle", share,
            "—" if share is None else f"{100 * share:.1f}%",
            f"{s.get('allocator_calls', 0):,} cudaMalloc/cudaFree-like calls",
            "GPU idle time overlapping the allocator's runtime calls / GPU idle time"),
    ]
    for other in [d for d in dev.index if d != first]:
        o = dev.loc[other].to_dict()
        oop = o.get("peak_operator")
        out.append(kpi(f"peak_allocated_bytes-{other.replace(':', '')}", f"peak allocated ({other})",
                       int(o["peak_allocated_bytes"]), rm.mib_text(o["peak_allocated_bytes"]),
                       f"at {oop}" if isinstance(oop, str) else "outside every operator"))
    return html.Div(out, className="ks-kpis", id="memory-kpis")


def _device_links(trace_id: str, devices: list[str], chosen: str | None) -> html.Div:
    links: list = ["Tables for: "]
    for label, value in [("all devices", None)] + [(d, d) for d in devices]:
        cls = "ks-active" if value == chosen else ""
        links += [dcc.Link(label, href=urls.trace_href(trace_id, "memory", device=value), className=cls,
                           id=f"memory-device-{(value or 'all').replace(':', '')}"), " "]
    return html.Div(links, className="ks-hint", id="memory-devices")


def layout(store, trace_id: str, params: dict | None = None) -> html.Div:
    params = params or {}
    body: list = [html.H2("Memory")]
    r = cache.analysis(store, "memory", trace_id)
    if not rm.has_memory(r):
        return html.Div(body + [message(" ".join(shown(w) for w in r.warnings) or "No memory events.",
                                        "msg-memory-none")], id="memory-page")
    devices = list(r.tables["device_memory"]["device"])
    chosen = params.get("device") or None
    if chosen is not None and chosen not in devices:
        body.append(message(f"No memory events on device {shown(chosen)}; the tables show every device "
                            f"({', '.join(devices)}).", "msg-memory-bad-device", "error"))
        chosen = None
    body.append(_kpis(r))
    body += [html.P(line, className="ks-hint") for line in rm.summary_lines(r)]
    body.append(graph("memory-timeline", rm.memory_figure(r)))
    if len(devices) > 1:
        body.append(_device_links(trace_id, devices, chosen))
    ops = rm.operator_rows(r, chosen)
    body += [html.H3("Allocations and frees per operator (self: the operator whose own range holds the event)"),
             grid(ops, [("device", "device", "text"), ("operator", "operator", "text"), ("allocs", "allocs", "numeric"),
                        ("allocated (MiB)", "allocated (MiB)", "numeric"), ("frees", "frees", "numeric"),
                        ("freed (MiB)", "freed (MiB)", "numeric"), ("net (MiB)", "net (MiB)", "numeric")],
                  "memory-operators", filters=True, tooltips=("operator",))]
    live = rm.live_rows(r, chosen)
    body.append(html.H3("Live at the end of the window (allocated in it, never freed: leak suspects)"))
    if len(live):
        body.append(grid(live, [("device", "device", "text"), ("allocated at (ms)", "allocated at (ms)", "numeric"),
                                ("bytes", "bytes", "numeric"), ("MiB", "MiB", "numeric"),
                                ("operator", "allocating operator", "text"), ("module", "module", "text")],
                         "memory-live", tooltips=("operator", "module")))
    else:
        body.append(message("Every block allocated in the window was freed by its end.", "msg-memory-no-live"))
    t = r.trust
    trust = [f"{r.scalars['memory_events']:,} memory events; {t.get('events_without_operator', 0):,} outside every "
             f"operator; {t.get('frees_of_blocks_allocated_before_window', 0):,} free(s) of blocks allocated before "
             "the window."]
    if t.get("series_downsampled"):
        trust.append("The curves are downsampled (each time bin keeps its highest, lowest and last points); the "
                     "peaks are exact.")
    if r.scalars.get("idle_ns"):
        trust.append(f"GPU idle {r.scalars['idle_ns'] / NS_PER_MS:,.3f} ms.")
    body.append(html.Div([html.H3("Trust")] + [html.P(x) for x in trust] + warning_lines(r.warnings, shown),
                         id="memory-trust"))
    return html.Div(body, id="memory-page")
