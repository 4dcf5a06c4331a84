"""The operator table of one trace, shared by the Operators page (dashboard/pages/operators.py, whose docstring
defines every column) and the report's Operators section: one row per operator name with its calls, CPU time
(the instances' durations, children included), GPU time, kernels, TKLQT, FLOPs, achieved GB/s and % of peak.
Nothing is recomputed: the launch and bandwidth analyses' tables, and storage's CPU times per name.

A CPU-only trace (torch.profiler's defaults on a machine without a GPU) has only its CPU column: the section is
then the one thing its report says about where the time went.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import cache
from ..storage import catalog
from ..units import FLOP_PER_GFLOP, ns_to_ms
from . import timeline_data as td
from .blocks import Section, Table

#: Rows of the report's table per trace (the page shows them all).
REPORT_ROWS = 15


def _bandwidth_by_name(sig: pd.DataFrame) -> pd.DataFrame:
    """Per name over its modelled signatures: flops summed, gbps and pct_peak weighted by gpu_ns."""
    cols = ["name", "flops", "gbps", "pct_peak"]
    if sig.empty:
        return pd.DataFrame(columns=cols)
    s = sig[sig["bytes"].notna() & (sig["gpu_ns"] > 0)].copy()
    if s.empty:
        return pd.DataFrame(columns=cols)
    s["pct"] = np.where(s["bound"] == "compute", s["pct_peak_flops"], s["pct_peak_bw"]).astype("float64")
    s["w"] = s["gpu_ns"].astype("float64")
    s["gw"] = s["achieved_gbps"].astype("float64") * s["w"]
    s["pw"] = s["pct"] * s["w"]
    s["pv"] = s["pct"].notna() * s["w"]
    g = s.groupby("name", sort=False).agg(flops=("flops", "sum"), gw=("gw", "sum"), w=("w", "sum"),
                                          pw=("pw", "sum"), pv=("pv", "sum")).reset_index()
    g["gbps"] = g["gw"] / g["w"]
    g["pct_peak"] = np.where(g["pv"] > 0, g["pw"] / g["pv"].where(g["pv"] > 0, 1), np.nan)
    return g[cols]


def operator_table(store, trace_id: str, level: str = "leaf") -> tuple[pd.DataFrame, list[str]]:
    """The operator table (module docstring) sorted by GPU time, and the analyses' warnings. Through the process's
    cache (analysis/cache.py: keyed by store, trace and level; the analyses take seconds on 1M kernels)."""
    df, warnings = cache.call(store, trace_id, "operators", _operator_table, level=level)
    return df.copy(), list(warnings)


def _operator_table(store, trace_id: str, level: str) -> tuple[pd.DataFrame, list[str]]:
    launch = cache.analysis(store, "launch", trace_id)
    per = launch.tables["per_leaf_op" if level == "leaf" else "per_op"]
    per = per[per["name"].notna()][["name", "calls", "kernels", "gpu_union_ns", "tklqt_ns"]]
    cpu = td.op_cpu_times(store, trace_id, level)
    df = cpu.merge(per, on="name", how="outer")
    warnings = list(launch.warnings)
    if level == "leaf":
        bw = cache.analysis(store, "bandwidth", trace_id)
        warnings += list(bw.warnings)
        df = df.merge(_bandwidth_by_name(bw.tables["per_signature"]), on="name", how="left")
    else:
        df["flops"] = df["gbps"] = df["pct_peak"] = np.nan
    out = pd.DataFrame({
        "name": df["name"], "id": df["name"],
        "count": df["count"].fillna(0).astype("int64"),
        "cpu_ns": df["cpu_ns"],
        "calls_gpu": df["calls"].fillna(0).astype("int64"),
        "kernels": df["kernels"].fillna(0).astype("int64"),
        "gpu_union_ns": df["gpu_union_ns"],
        "tklqt_ns": df["tklqt_ns"],
        "gflop": (df["flops"].astype("float64") / FLOP_PER_GFLOP).round(3),
        "gbps": df["gbps"].astype("float64").round(1),
        "pct_peak": df["pct_peak"].astype("float64").round(1),
    })
    # the order the table opens in: GPU time, then CPU time as shown (ms, 3 decimals; ties keep their order)
    out["cpu_shown"] = _ms(out["cpu_ns"])
    out = out.sort_values(["gpu_union_ns", "cpu_shown"], ascending=False, na_position="last")
    return out.drop(columns="cpu_shown").reset_index(drop=True), warnings


def _ms(ns: pd.Series) -> pd.Series:
    return ns_to_ms(ns.astype("float64")).round(3)


def operators_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace: its top REPORT_ROWS leaf operators by GPU time, then CPU time (the Operators page's order)."""
    blocks: list = []
    for tid in trace_ids:
        df, _warnings = operator_table(store, tid, "leaf")
        if df.empty:
            continue
        name = catalog.trace_name(store, tid) or tid
        top = df.head(REPORT_ROWS)
        shown = pd.DataFrame({"operator": top["name"], "calls": top["count"], "CPU time (ms)": _ms(top["cpu_ns"]),
                              "GPU time (ms)": _ms(top["gpu_union_ns"]), "kernels": top["kernels"],
                              "TKLQT (ms)": _ms(top["tklqt_ns"]), "GFLOP": top["gflop"], "GB/s": top["gbps"],
                              "% of peak": top["pct_peak"]})
        gpu = bool(df["kernels"].sum())  # the table opens with the operators of most GPU time
        if not gpu:  # no GPU work: the GPU columns would be n/a throughout
            shown = shown[["operator", "calls", "CPU time (ms)"]]
        order = "GPU time, then CPU time" if gpu else "CPU time (no GPU work in this trace)"
        blocks.append(Table(shown.reset_index(drop=True),
                            f"{name}: top {len(top)} of {len(df)} operators by {order}; CPU time is the calls' "
                            "durations, the operators they call included (the Operators page lists them all)"))
    return Section("Operators", "operators", blocks) if blocks else None
