"""Memory: figures and tables over the ``memory`` analysis' Result (allocated and reserved bytes over time per
device with the peak marked, per-operator allocations, live-at-end blocks) and the report section. Numbers and
definitions: ``analysis.memory`` and docs/metrics.md "Memory". Sizes are shown in MiB (2^20 bytes, as torch's
memory summaries print them)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import cache
from ..storage import catalog
from ..units import BYTES_PER_MIB, NS_PER_MS
from .blocks import Section, Table
from .figures import styled
from .missing import shown

ALLOCATED, RESERVED, PEAK = "#4e79a7", "#f28e2b", "#e15759"


def mib_text(nbytes) -> str:
    """Bytes as MiB text with two decimals and the exact byte count (below 1 MiB: bytes only); '—' for
    missing."""
    if nbytes is None or nbytes != nbytes:
        return "—"
    if abs(int(nbytes)) < BYTES_PER_MIB:
        return f"{int(nbytes):,} B"
    return f"{int(nbytes) / BYTES_PER_MIB:,.2f} MiB ({int(nbytes):,} B)"


def has_memory(r) -> bool:
    """The Result holds memory events with the allocator's totals (else its warnings say why not)."""
    return bool(r.scalars.get("memory_events")) and len(r.tables.get("device_memory", ())) > 0


def peak_text(row) -> str:
    """'<device>: <size> at <operator> in <module>' for one ``device_memory`` row."""
    op = row.get("peak_operator")
    mod = row.get("peak_module")
    via = row.get("peak_module_via")
    where = f" at {op}" if isinstance(op, str) else " outside every operator"
    if isinstance(mod, str):
        where += f" in {mod}" + (" (its forward operator's module)" if via == "forward operator" else "")
    return f"{row['device']}: {mib_text(row.get('peak_allocated_bytes'))}{where}"


def _scale(peak) -> tuple[int, str]:
    """(bytes per unit, unit) for a device's axis: MiB, or bytes when its peak stays below 1 MiB."""
    return (BYTES_PER_MIB, "MiB") if peak is not None and peak == peak and int(peak) >= BYTES_PER_MIB else (1, "bytes")


def memory_figure(r) -> go.Figure:
    """Allocated (solid) and reserved (dashed) bytes over time (ms since the trace start) as step lines, one row per
    device (in MiB, or bytes for a device that never reaches 1 MiB), the peak of allocated marked and its operator
    and module in the hover."""
    series = r.tables["series"]
    devices = r.tables["device_memory"]
    names = list(devices["device"])
    fig = make_subplots(rows=len(names), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"{d} ({'CPU allocator' if d == 'cpu' else 'device allocator'})"
                                        for d in names])
    for i, (dev, row) in enumerate(zip(names, devices.to_dict("records")), start=1):
        s = series[series["device"] == dev]
        x = s["t_ns"].astype("int64") / NS_PER_MS
        peak = row.get("peak_allocated_bytes")
        per, unit = _scale(peak)
        fmt = "%{y:,.2f}" if per > 1 else "%{y:,.0f}"
        for col, label, colour, dash in (("reserved_bytes", "reserved", RESERVED, "dash"),
                                         ("allocated_bytes", "allocated", ALLOCATED, "solid")):
            fig.add_trace(go.Scatter(
                x=x, y=s[col].astype("float64") / per, mode="lines",
                line={"shape": "hv", "color": colour, "dash": dash}, name=label, legendgroup=label,
                showlegend=i == 1, hovertemplate=f"{dev} {label}: {fmt} {unit} at " + "%{x:.3f} ms<extra></extra>"),
                row=i, col=1)
        if peak is not None and peak == peak:
            fig.add_trace(go.Scatter(
                x=[int(row["peak_t_ns"]) / NS_PER_MS], y=[int(peak) / per], mode="markers+text",
                marker={"color": PEAK, "size": 10, "symbol": "diamond"}, name="peak", legendgroup="peak",
                showlegend=i == 1, text=[f"peak {mib_text(peak).split(' (')[0]}"], textposition="top center",
                hovertext=[shown(peak_text(row))], hoverinfo="text"), row=i, col=1)
        fig.update_yaxes(title_text=unit, rangemode="tozero", row=i, col=1)
    fig.update_xaxes(title_text="time since the trace start (ms)", row=len(names), col=1)
    title = "Memory over time (allocated solid, reserved dashed; ◆ peak)"
    styled(fig, title={"text": title, "font": {"size": 14}},
                height=120 + 260 * len(names),
                margin={"l": 60, "r": 20, "t": 70, "b": 50},
                legend={"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"})
    return fig


def operator_rows(r, device: str | None = None, limit: int | None = None) -> pd.DataFrame:
    """The ``operators`` table (optionally one device's, the first ``limit`` rows) with sizes in MiB."""
    df = r.tables["operators"]
    if device is not None:
        df = df[df["device"] == device]
    if limit is not None:
        df = df.head(limit)
    out = pd.DataFrame({"device": list(df["device"]), "operator": list(df["operator"]),
                        "allocs": [int(v) for v in df["allocs"]]})
    out["allocated (MiB)"] = [round(int(v) / BYTES_PER_MIB, 3) for v in df["alloc_bytes"]]
    out["frees"] = [int(v) for v in df["frees"]]
    out["freed (MiB)"] = [round(int(v) / BYTES_PER_MIB, 3) for v in df["freed_bytes"]]
    out["net (MiB)"] = [round(int(v) / BYTES_PER_MIB, 3) for v in df["net_bytes"]]
    return out


def live_rows(r, device: str | None = None, limit: int | None = None) -> pd.DataFrame:
    """The ``live_at_end`` table (optionally one device's) as shown: time in ms, size in bytes and MiB."""
    df = r.tables["live_at_end"]
    if device is not None:
        df = df[df["device"] == device]
    if limit is not None:
        df = df.head(limit)
    return pd.DataFrame({
        "device": list(df["device"]), "allocated at (ms)": [int(v) / NS_PER_MS for v in df["t_ns"]],
        "bytes": [int(v) for v in df["bytes"]], "MiB": [round(int(v) / BYTES_PER_MIB, 3) for v in df["bytes"]],
        "operator": [v if isinstance(v, str) else "(no operator)" for v in df["operator"]],
        "module": [v if isinstance(v, str) else "" for v in df["module"]]})


def summary_lines(r) -> list[str]:
    """Sentences: the peak per device, what is live at the end, the allocator's share of GPU idle."""
    out = [f"Peak allocated {peak_text(row)}; peak reserved {mib_text(row.get('peak_reserved_bytes'))}."
           for row in r.tables["device_memory"].to_dict("records")]
    live = r.scalars.get("live_at_end_bytes") or {}
    if any(live.values()):
        out.append("Allocated in the window and not freed by its end (leak suspects): "
                   + ", ".join(f"{d} {mib_text(v)}" for d, v in live.items() if v) + ".")
    else:
        out.append("Every block allocated in the window was freed by its end.")
    s = r.scalars
    if s.get("idle_ns"):
        share = s.get("allocator_idle_share") or 0.0
        out.append(f"cudaMalloc/cudaFree and their kin ({s.get('allocator_calls', 0):,} calls) overlap "
                   f"{100 * share:.1f}% of the GPU's idle time ({s.get('allocator_idle_ns', 0) / NS_PER_MS:,.3f} of "
                   f"{s['idle_ns'] / NS_PER_MS:,.3f} ms).")
    return out


def memory_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace with memory events: the peak sentences, the memory-over-time figure, the top operators by
    allocated bytes and the largest live-at-end blocks. Absent when no trace has memory events."""
    blocks: list = []
    for tid in trace_ids:
        r = cache.analysis(store, "memory", tid)
        if not has_memory(r):
            continue
        name = catalog.trace_name(store, tid) or tid
        blocks += [f"{name}: {line}" for line in summary_lines(r)]
        if ctx.figures:
            fig = memory_figure(r)
            fig.update_layout(title_text=f"{name}: {fig.layout.title.text}")
            blocks.append(fig)
        blocks.append(Table(operator_rows(r, limit=20), f"{name}: allocations per operator (self: the operator "
                                                         "whose own range holds the event), top 20 by bytes"))
        live = live_rows(r, limit=20)
        if len(live):
            blocks.append(Table(live, f"{name}: live at the end of the window, largest 20"))
        blocks += [f"{name}: warning: {shown(w)}" for w in r.warnings]
    return Section("Memory", "memory", blocks) if blocks else None
