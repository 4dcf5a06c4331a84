"""The report's overview section: headline numbers per trace, host-wait share, GPU-busy over time, and
the trust section in words. The dashboard's Overview page shows the same sentences (``trust_sentences``)."""

from __future__ import annotations

import pandas as pd

from ..analysis import cache
from ..analysis.bound import idle_split
from ..analysis.summary import no_gpu_reason
from ..units import NS_PER_MS, ms_text
from .blocks import Section, Table
from .data import busy_bins
from .figures import busy_fraction_figure


def trust_sentences(trust: dict, scalars: dict) -> list[str]:
    """The summary's trust section in words (definitions in analysis/summary.py)."""
    out = []
    kernels = scalars.get("kernels") or 0
    kl = trust.get("kernels_with_launch", {})
    if kernels:
        out.append(f"{kl.get('count', 0):,} of {kernels:,} kernels have a launch call in the trace"
                   + (f" ({kl['pct']:.1f}%)." if kl.get("pct") is not None else "."))
    leaf = trust.get("nongraph_kernels_with_leaf_op", {})
    if leaf.get("of"):
        out.append(f"{leaf['count']:,} of {leaf['of']:,} kernels launched outside CUDA graphs are attributed "
                   "to the CPU operator that launched them.")
    if trust.get("graph_kernels"):
        out.append(f"{trust['graph_kernels']:,} kernels ran inside CUDA graphs (attributed to the graph "
                   "launch, not to individual operators).")
    ops = trust.get("ops_with_kernels", {})
    if ops.get("top_level_ops_total"):
        out.append(f"{ops['top_level_ops']:,} of {ops['top_level_ops_total']:,} top-level CPU operators "
                   "launched GPU kernels.")
    if kernels:
        out.append(f"{ms_text(trust.get('kernel_time_without_operator_ns', 0))} of kernel time has no "
                   "CPU operator.")
    if trust.get("negative_launch_times"):
        out.append(f"{trust['negative_launch_times']:,} GPU activities start before their launch call "
                   "(host/GPU clock skew).")
    if trust.get("same_stream_overlaps"):
        out.append(f"{trust['same_stream_overlaps']:,} GPU activities overlap an earlier one on the same "
                   "stream (e.g. programmatic dependent launch, or clock jitter).")
    ext = trust.get("ext_id_disagreements", {})
    if ext.get("count"):
        out.append(f"{ext['count']:,} of {ext['compared']:,} launch calls: External id and nesting name "
                   "different operators; nesting was used.")
    nokernel = trust.get("launches_without_kernel") or {}
    if nokernel.get("count"):
        n, cap = nokernel["count"], nokernel.get("in_capture") or 0
        said = f"{n:,} kernel launch calls launched no kernel in the trace"
        if not cap:
            said += " (kernels dropped by the profiler, or run after it stopped)."
        else:
            said += (f"; {cap:,} of them inside stream capture (cudaStreamBeginCapture to EndCapture): recorded into "
                     "a CUDA graph that runs later, so the GPU numbers leave that work out"
                     + ("." if n == cap else " (the rest: kernels dropped by the profiler or run after it stopped)."))
        out.append(said)
    if trust.get("dropped_notes"):
        out.append(f"The profiler noted lost records ({len(trust['dropped_notes'])} notes): counts may be low.")
    notes = [str(n).rstrip(". ") for n in trust.get("parser_warnings") or []]
    if notes:  # said as they are: a repair, a skipped event, a nesting the links worked around (each one line)
        more = f" ({len(notes) - 3} more in `kernelscope summary`)" if len(notes) > 3 else ""
        out.append(f"Parser note{'s' if len(notes) > 1 else ''}: {'; '.join(notes[:3])}{more}.")
    return out


def host_wait(split) -> tuple[int, int] | None:
    """(host_wait_ns, gpu_span_ns) summed over devices from bound.idle_split; None without GPU activity.
    Host wait: idle gaps of a device's busy union during which no launched work was queued for it (the
    GPU waited for the CPU; analysis/bound.py has the exact rule); share = host_wait_ns / gpu_span_ns."""
    if split is None or split.empty:
        return None
    return int(split["host_wait_ns"].sum()), int(split["gpu_span_ns"].sum())


def _ms(ns):
    return None if ns is None else round(int(ns) / NS_PER_MS, 3)


def overview_section(store, trace_ids: list[str], ctx) -> Section:
    """One row of headline numbers per trace (ms, 3 decimals, as the dashboard shows them), then per trace
    its GPU-busy figure and trust sentences."""
    rows, per_trace = [], []
    for tid in trace_ids:
        r = cache.analysis(store, "summary", tid)
        s = r.scalars
        hw = host_wait(cache.call(store, tid, "idle_split", idle_split)) if s.get("devices_count") else None
        rows.append({"trace": s.get("name") or tid, "id": tid,
                     "GPU span (ms)": _ms(s.get("gpu_span_ns")), "GPU busy (ms)": _ms(s.get("busy_ns")),
                     "GPU idle (ms)": _ms(s.get("idle_ns")), "kernel time (ms)": _ms(s.get("kernel_time_ns")),
                     "latency (ms)": _ms(s.get("latency_ns")),
                     "host wait (% of span)": None if not hw or not hw[1] else round(100 * hw[0] / hw[1], 1),
                     "kernels": s.get("kernels"), "launches": s.get("launches")})
        per_trace.append((tid, s, r))
    blocks: list = [Table(pd.DataFrame(rows), "Headline numbers (definitions: docs/metrics.md)")]
    for tid, s, r in per_trace:
        name = s.get("name") or tid
        if s.get("devices_count"):
            if ctx.figures:
                bins, span_ns, width = busy_bins(store, tid)
                fig = busy_fraction_figure(bins, span_ns, width)
                fig.update_layout(title=f"{name}: GPU busy over time")
                blocks.append(fig)
        else:
            blocks.append(f"{name}: no GPU activity ({no_gpu_reason(store, tid)}): nothing to draw.")
        blocks += [f"{name}: " + t for t in trust_sentences(r.trust, s)]
        blocks += [f"{name}: warning: " + w for w in r.warnings]
    return Section("Overview and trust", "overview", blocks)
