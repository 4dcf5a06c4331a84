"""Bandwidth / roofline: figure builders over the bandwidth analysis' Result, and the report section.

Everything drawn here comes from ``analysis.bandwidth`` (docs/metrics.md, "Bandwidth and compute
utilisation"): per signature ``intensity`` (FLOP/byte), ``achieved_tflops``, ``achieved_gbps``,
``pct_peak_bw``, ``pct_peak_flops``, ``bound``; the device's ceilings from the scalar ``device_peaks``
(the matched row of ``data/device_peaks.csv``). Nothing is recomputed; the figure only converts units
(TFLOP/s on the y axis) and draws.

Roofline: x = arithmetic intensity (FLOP/byte), y = achieved TFLOP/s, both log. The memory ceiling is the
line ``y = intensity · mem_bw_gbps / 1000`` (GB/s x FLOP/byte = GFLOP/s), each compute roof a horizontal
line at the row's dense peak (TFLOP/s) from its ridge ``peak · 1000 / mem_bw_gbps`` (FLOP/byte) on.
Signatures with 0 FLOPs or 0 bytes (copies, views) have no point on log axes; the table lists them.
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from ..analysis import cache
from ..analysis.bandwidth import NO_SHAPES
from ..storage import catalog
from ..storage.ncu import measured_dram_bytes
from ..units import GFLOP_PER_TFLOP, NS_PER_MS, shapes_text
from .blocks import Section, Table
from .figures import styled

# Compute roofs drawn from a device-peak row: (column, label). Empty cells (unsupported) are skipped.
ROOFS = [
    ("fp64_tflops", "FP64"),
    ("fp32_tflops", "FP32 (no tensor cores)"),
    ("fp32_matrix_tflops", "TF32 tensor cores"),
    ("bf16_tflops", "BF16 tensor cores"),
    ("fp16_tflops", "FP16 tensor cores"),
    ("fp8_tflops", "FP8 tensor cores"),
]
BOUND_COLOURS = {"memory": "#2563eb", "compute": "#dc2626"}
NO_BOUND_COLOUR = "#6b7280"

def ncu_measured_bytes(store, trace_id: str) -> pd.DataFrame | None:
    """``op_id, measured_bytes`` (DRAM bytes Nsight Compute measured, per leaf operator instance whose every
    kernel was measured: ``storage.ncu.measured_dram_bytes``) for the bandwidth analysis' ``measured_bytes``
    option; None when no ncu row with DRAM bytes matches the trace."""
    _, per_op = measured_dram_bytes(store, trace_id)
    return per_op[["op_id", "measured_bytes"]] if per_op is not None and len(per_op) else None


def bandwidth_result(store, trace_id: str):
    """The bandwidth analysis of one trace with Nsight Compute's measured bytes beside the model when the
    store has them: the analysis joins them itself where it can; otherwise they are passed through its
    ``measured_bytes`` option (``ncu_measured_bytes``)."""
    r = cache.analysis(store, "bandwidth", trace_id)
    if "measured_bytes" in r.tables["per_instance"].columns:
        return r
    measured = ncu_measured_bytes(store, trace_id)
    return r if measured is None else cache.analysis(store, "bandwidth", trace_id, measured_bytes=measured)


def num(v) -> float | None:
    """A finite float, else None (null-safe for None, NaN, pd.NA)."""
    try:
        if v is None or pd.isna(v):
            return None
    except (TypeError, ValueError):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def ceilings(device_peaks: dict | None) -> pd.DataFrame:
    """The roofline's ceilings from the bandwidth analysis' ``device_peaks`` scalar: one row per (distinct
    device-peak row, compute roof): ``device`` (the row's name), ``mem_bw_gbps``, ``roof`` (label),
    ``column`` (device-table column), ``tflops`` (dense peak) and ``ridge`` = tflops · 1000 / mem_bw_gbps
    (FLOP/byte). Unknown devices (null rows) and empty cells give no row."""
    rows, seen = [], set()
    for peak in (device_peaks or {}).values():
        if not peak or not num(peak.get("mem_bw_gbps")) or peak.get("device") in seen:
            continue
        seen.add(peak.get("device"))
        bw = float(peak["mem_bw_gbps"])
        for col, label in ROOFS:
            v = num(peak.get(col))
            if v:
                rows.append({"device": peak.get("device"), "mem_bw_gbps": bw, "roof": label, "column": col,
                             "tflops": v, "ridge": v * GFLOP_PER_TFLOP / bw})
    return pd.DataFrame(rows, columns=["device", "mem_bw_gbps", "roof", "column", "tflops", "ridge"])


def plottable(sig: pd.DataFrame) -> pd.DataFrame:
    """The ``per_signature`` rows a log-log roofline can place (intensity and achieved TFLOP/s positive),
    with ``signature`` = the row number in ``per_signature``."""
    if sig is None or not len(sig):
        return pd.DataFrame(columns=["signature", "name", "intensity", "achieved_tflops"])
    df = sig.reset_index(drop=True).assign(signature=range(len(sig)))
    x = pd.to_numeric(df["intensity"].astype("Float64"), errors="coerce").astype("float64")
    y = pd.to_numeric(df["achieved_tflops"].astype("Float64"), errors="coerce").astype("float64")
    keep = (x > 0) & (y > 0)
    out = df[keep.fillna(False).to_numpy(bool)].copy()
    out["intensity"], out["achieved_tflops"] = x[keep.fillna(False)], y[keep.fillna(False)]
    return out


def _hover(r) -> str:
    def f(v, fmt):
        v = num(v)
        return "—" if v is None else format(v, fmt)
    return (f"<b>{r['name']}</b><br>{shapes_text(r.get('input_dims')) or ''}<br>{r.get('input_types') or ''}<br>"
            f"calls {int(r['calls']):,} · GPU {int(r['gpu_ns']) / NS_PER_MS:,.3f} ms<br>"
            f"intensity {f(r['intensity'], ',.2f')} FLOP/B · {f(r['achieved_tflops'], ',.3f')} TFLOP/s · "
            f"{f(r['achieved_gbps'], ',.1f')} GB/s<br>"
            f"{f(r['pct_peak_flops'], '.1f')}% of FLOP peak · {f(r['pct_peak_bw'], '.1f')}% of bandwidth peak"
            f" · bound {r['bound'] if isinstance(r['bound'], str) else '—'}")


def roofline_figure(sig: pd.DataFrame, device_peaks: dict | None, selected: int | None = None) -> go.Figure:
    """Roofline of one trace: one point per operator signature (``per_signature`` rows, marker area
    proportional to GPU time, colour = bound), the device's memory slope and compute roofs (``ceilings``).

    Trace order (callbacks patch trace 0): 0 = the selection ring (the signature ``selected``, empty when
    None), then the memory slope, the roofs, then one point trace per bound. Each point's ``customdata`` is
    its signature number (the row in ``per_signature``)."""
    pts = plottable(sig)
    ceil = ceilings(device_peaks)
    fig = go.Figure()
    sel = pts[pts["signature"] == selected] if selected is not None else pts.iloc[:0]
    fig.add_trace(go.Scatter(x=sel["intensity"].tolist(), y=sel["achieved_tflops"].tolist(), mode="markers",
                             name="selected", hoverinfo="skip", showlegend=False,
                             marker={"symbol": "circle-open", "size": 34, "color": "#f59e0b",
                                     "line": {"width": 4}}))
    xs = pts["intensity"].tolist() + ceil["ridge"].tolist()
    x_lo = min(xs) / 4 if xs else 0.01
    x_hi = max(xs) * 4 if xs else 1000.0
    for device, c in ceil.groupby("device", sort=False):
        bw = float(c["mem_bw_gbps"].iloc[0])
        top = float(c["ridge"].max())
        fig.add_trace(go.Scatter(x=[x_lo, top], y=[x_lo * bw / GFLOP_PER_TFLOP, top * bw / GFLOP_PER_TFLOP],
                                 mode="lines",
                                 name=f"{device}: memory {bw:,.0f} GB/s", line={"color": "#111827", "width": 2},
                                 hovertemplate=f"memory bandwidth {bw:,.0f} GB/s<extra>{device}</extra>"))
        used = set(pd.to_numeric(sig["peak_tflops"].astype("Float64"), errors="coerce").dropna().round(6)) \
            if sig is not None and len(sig) else set()
        for r in c.itertuples(index=False):
            on = round(r.tflops, 6) in used
            fig.add_trace(go.Scatter(
                x=[r.ridge, x_hi], y=[r.tflops, r.tflops], mode="lines",
                name=f"{r.roof} {r.tflops:,.1f} TFLOP/s",
                line={"color": "#111827" if on else "#9ca3af", "width": 2 if on else 1,
                      "dash": "solid" if on else "dot"},
                hovertemplate=f"{r.roof}: {r.tflops:,.1f} TFLOP/s, ridge {r.ridge:,.1f} FLOP/B<extra>{device}</extra>"))
    if len(pts):
        size = (pts["gpu_ns"].astype("float64") / float(pts["gpu_ns"].max())) ** 0.5 * 30 + 5
        pts = pts.assign(_size=size.to_numpy())
        bound = pts["bound"].where(pts["bound"].map(lambda b: isinstance(b, str)), "unknown")
        for b, d in pts.groupby(bound.to_numpy(), sort=True):
            fig.add_trace(go.Scatter(
                x=d["intensity"].tolist(), y=d["achieved_tflops"].tolist(), mode="markers",
                name=f"{b}-bound" if b != "unknown" else "bound unknown",
                customdata=d["signature"].tolist(),
                text=[_hover(r) for r in d.to_dict("records")], hovertemplate="%{text}<extra></extra>",
                marker={"size": d["_size"].tolist(), "color": BOUND_COLOURS.get(b, NO_BOUND_COLOUR),
                        "opacity": 0.75, "line": {"width": 1, "color": "white"}}))
    styled(fig,
        title={"text": "Roofline: operator signatures (area ∝ GPU time)", "font": {"size": 14}},
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "achieved TFLOP/s"},
        height=480, margin={"l": 70, "r": 20, "t": 40, "b": 50},
        legend={"font": {"size": 11}}, clickmode="event",
    )
    return fig


# (field, header with unit, 'text' | 'numeric') of the signature table, as the page and report show it.
SIGNATURE_COLUMNS = [
    ("name", "operator", "text"), ("input_dims", "input shapes", "text"), ("input_types", "dtypes", "text"),
    ("calls", "calls", "numeric"), ("gpu_ms", "GPU time (ms)", "numeric"),
    ("share_pct", "% of leaf GPU time", "numeric"), ("intensity", "FLOP/byte", "numeric"),
    ("achieved_gbps", "GB/s", "numeric"), ("achieved_tflops", "TFLOP/s", "numeric"),
    ("pct_peak_bw", "% peak bandwidth", "numeric"), ("pct_peak_flops", "% peak FLOP/s", "numeric"),
    ("bound", "bound", "text"), ("dtype", "peak dtype", "text"), ("rule", "rule", "text"),
]


def _round(col: pd.Series, digits: int) -> list:
    return [None if (v := num(x)) is None else round(v, digits) for x in col]


def signature_rows(sig: pd.DataFrame, gpu_ns_total: int | None) -> pd.DataFrame:
    """``per_signature`` as shown: ``id`` = signature number, long tensor lists of the shapes shortened
    (``units.shapes_text``), GPU time in ms (3 decimals), its share of the
    analysis' ``gpu_ns`` in % (1 decimal), rates rounded (intensity 2, GB/s 1, TFLOP/s 3, % 1 decimal);
    null stays null."""
    cols = [f for f, _, _ in SIGNATURE_COLUMNS]
    if sig is None or not len(sig):
        return pd.DataFrame(columns=["id"] + cols)
    s = sig.reset_index(drop=True)
    text = lambda c: [v if isinstance(v, str) else None for v in s[c]]  # noqa: E731
    out = pd.DataFrame({
        "id": range(len(s)), "name": text("name"), "input_dims": [shapes_text(v) for v in text("input_dims")],
        "input_types": text("input_types"), "calls": s["calls"].astype("int64"),
        "gpu_ms": [round(int(v) / NS_PER_MS, 3) for v in s["gpu_ns"]],
        "share_pct": [round(100.0 * int(v) / gpu_ns_total, 1) if gpu_ns_total else None for v in s["gpu_ns"]],
        "intensity": _round(s["intensity"], 2), "achieved_gbps": _round(s["achieved_gbps"], 1),
        "achieved_tflops": _round(s["achieved_tflops"], 3), "pct_peak_bw": _round(s["pct_peak_bw"], 1),
        "pct_peak_flops": _round(s["pct_peak_flops"], 1), "bound": text("bound"), "dtype": text("dtype"),
        "rule": text("rule"),
    })
    return out.astype({c: object for c in ("share_pct", "intensity", "achieved_gbps", "achieved_tflops",
                                           "pct_peak_bw", "pct_peak_flops")})


MEASURED_COLUMNS = ["signature", "name", "measured_calls", "measured_bytes", "measured_gbps",
                    "modelled_over_measured"]


def measured_vs_modelled(result) -> pd.DataFrame:
    """Modelled vs measured bytes per signature with a measurement: ``signature`` (row in
    ``per_signature``), ``name``, ``measured_calls``, ``measured_bytes`` (summed DRAM bytes),
    ``measured_gbps`` (over those calls' GPU time) and ``modelled_over_measured`` (their modelled bytes /
    measured bytes; null when one of them is unmodelled). Read from ``per_signature`` when the analysis
    gives these columns there, else summed from ``per_instance`` (which then holds every instance).
    Empty without measurements."""
    sig = result.tables.get("per_signature")
    if sig is not None and "measured_bytes" in sig.columns and "measured_calls" in sig.columns:
        s = sig.reset_index(drop=True).assign(signature=range(len(sig)))
        s = s[s["measured_calls"] > 0]
        return pd.DataFrame({"signature": s["signature"].astype("int64").tolist(), "name": s["name"].tolist(),
                             "measured_calls": s["measured_calls"].astype("int64").tolist(),
                             "measured_bytes": [int(v) for v in s["measured_bytes"]],
                             "measured_gbps": [num(v) for v in s["measured_gbps"]],
                             "modelled_over_measured": [num(v) for v in s["modelled_over_measured"]]},
                            columns=MEASURED_COLUMNS)
    inst = result.tables.get("per_instance")
    if inst is None or "measured_bytes" not in inst.columns:
        return pd.DataFrame(columns=MEASURED_COLUMNS)
    m = inst[inst["measured_bytes"].notna()]
    rows = []
    for sig_no, d in m.groupby("signature", sort=True):
        modelled = None if d["bytes"].isna().any() else int(d["bytes"].astype("int64").sum())
        measured, ns = int(d["measured_bytes"].astype("int64").sum()), int(d["gpu_ns"].sum())
        rows.append({"signature": int(sig_no), "name": str(d["name"].iloc[0]), "measured_calls": int(len(d)),
                     "measured_bytes": measured, "measured_gbps": measured / ns if ns else None,
                     "modelled_over_measured": modelled / measured if modelled is not None and measured else None})
    return pd.DataFrame(rows, columns=MEASURED_COLUMNS)


def modelled_sentence(scalars: dict, *, say_no_shapes: bool = True) -> str:
    """The modelled share in words (``modelled_share``, ``modelled_gpu_ns``, ``gpu_ns``,
    ``unattributed_gpu_ns``), and, unless ``say_no_shapes`` is off (a page that says it in its own message),
    that a trace without shapes cannot be modelled and how to record them."""
    share, total = scalars.get("modelled_share"), scalars.get("gpu_ns") or 0
    un = scalars.get("unattributed_gpu_ns") or 0
    if not total:
        return ("No GPU time is attributed to a leaf operator: nothing is modelled." if not un else
                f"All {un / NS_PER_MS:,.3f} ms of GPU activity has no leaf operator (CUDA-graph replays or "
                "launches outside the trace): nothing is modelled.")
    text = (f"{100 * share:.1f}% of leaf-operator GPU time ({(scalars.get('modelled_gpu_ns') or 0) / NS_PER_MS:,.3f}"
            f" of {total / NS_PER_MS:,.3f} ms) is modelled (its operator has a FLOP/byte rule).")
    if un:
        text += (f" {un / NS_PER_MS:,.3f} ms of GPU activity has no leaf operator (CUDA-graph replays or launches "
                 "outside the trace) and is not modelled.")
    if say_no_shapes and scalars.get("shapes_recorded") is False:
        text += " " + NO_SHAPES[0].upper() + NO_SHAPES[1:]
    return text


def peaks_sentence(device_peaks: dict | None) -> str:
    """Which device-peak row the ceilings come from, or why there are none."""
    rows = [p for p in (device_peaks or {}).values() if p]
    if not rows:
        return ("The device is not in the device-peak table: no ceilings, no % of peak and no bound "
                "(add a row with -o peaks=PATH or $KERNELSCOPE_DEVICE_PEAKS).")
    names = sorted({p.get("device") or "?" for p in rows})
    return "Ceilings: " + "; ".join(f"{p.get('device')}: {p.get('mem_bw_gbps'):,.0f} GB/s (source: {p.get('source')})"
                                   for p in {p.get("device"): p for p in rows}.values()) + \
        ("" if len(names) == 1 else " (several devices)") + "."


def roofline_section(store, trace_ids: list[str], ctx, top: int = 15) -> Section | None:
    """Per trace with leaf-operator GPU time: the roofline, the modelled share, the top ``top``
    signatures by GPU time, the unmodelled operators and modelled vs measured bytes when ncu data exists.
    None when no trace has GPU activity."""
    blocks: list = []
    for tid in trace_ids:
        name = catalog.trace_name(store, tid)
        name = name if name is not None else tid
        r = bandwidth_result(store, tid)
        s = r.scalars
        if not s.get("gpu_ns") and not s.get("unattributed_gpu_ns"):
            blocks.append(f"{name}: no GPU activity attributed to an operator: no roofline.")
            continue
        sig = r.tables.get("per_signature")
        if ctx.figures:
            fig = roofline_figure(sig, s.get("device_peaks"))
            fig.update_layout(title=f"{name}: roofline (area ∝ GPU time)")
            blocks.append(fig)
        blocks += [f"{name}: " + modelled_sentence(s), f"{name}: " + peaks_sentence(s.get("device_peaks"))]
        rows = signature_rows(sig, s.get("gpu_ns"))
        if len(rows):
            shown = rows.head(top).drop(columns=["rule"])
            shown.columns = ["#"] + [h for f, h, _ in SIGNATURE_COLUMNS if f not in ("rule",)]
            blocks.append(Table(shown, f"{name}: top {len(shown)} of {s.get('signatures', len(rows))} "
                                       "operator signatures by GPU time"))
        un = r.tables.get("unmodelled")
        if un is not None and len(un):
            u = un.head(top)
            blocks.append(Table(pd.DataFrame({
                "operator": u["name"], "calls": u["calls"], "GPU time (ms)": _round(u["gpu_ns"] / NS_PER_MS, 3),
                "% of leaf GPU time": _round(u["share"] * 100, 1), "why unmodelled": u["reason"]}),
                f"{name}: unmodelled operators by GPU time"))
        mm = measured_vs_modelled(r)
        if len(mm):  # signatures by GPU time, numbered as in the table above; their shapes tell calls apart
            dims = rows.set_index("id")["input_dims"]
            m = mm.head(top)
            m = m.assign(shapes=[dims.get(i) for i in m["signature"]])
            m = m[["signature", "name", "shapes"] + MEASURED_COLUMNS[2:]]
            cut = f"top {len(m)} of {len(mm)} measured signatures by GPU time; " if len(m) < len(mm) else ""
            blocks.append(Table(m.rename(columns={"signature": "#", "name": "operator", "shapes": "input shapes",
                                                  "measured_calls": "calls measured",
                                                  "measured_bytes": "measured bytes (ncu DRAM)",
                                                  "measured_gbps": "measured GB/s",
                                                  "modelled_over_measured": "modelled / measured"}),
                                f"{name}: modelled vs Nsight Compute measured bytes ({cut}ncu flushes caches and "
                                "locks clocks)"))
        # the no-shapes warning is in the modelled sentence above: not said twice
        blocks += [f"{name}: warning: {w}" for w in r.warnings
                   if not (w == NO_SHAPES and s.get("shapes_recorded") is False)]
    return Section("Bandwidth and roofline", "roofline", blocks) if blocks else None
