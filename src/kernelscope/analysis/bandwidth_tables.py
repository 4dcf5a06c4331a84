"""The bandwidth analysis' tables from its groups of identical calls (one row per group: the same operator,
inputs, element-size hint, kernel-name dtype and device): rates and roofline bound (``add_rates``), the
per-signature table (``signatures_table``), which instances ``per_instance`` shows (``top_instances``) and
why a percentage of peak is above 100 (``notes``). Definitions: the ``bandwidth`` module docstring.

Arrays named ``group_of`` hold, per instance, the row number of its group; ``signature_of`` its signature.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..units import BYTES_PER_MB, BYTES_PER_MIB, GFLOP_PER_TFLOP

SIGNATURE_COLUMNS = ["calls", "activities", "gpu_ns", "flops", "bytes", "dtype", "tensor_core", "rule",
                     "dtype_source", "shapes_source", "achieved_gbps", "achieved_tflops", "pct_peak_bw",
                     "pct_peak_flops", "intensity", "bound", "fits_cache", "peak_gbps", "peak_tflops", "note"]
MEASURED_COLUMNS = ["measured_calls", "measured_bytes", "measured_gbps", "modelled_over_measured"]


def floats(col: pd.Series) -> np.ndarray:
    """A nullable column as float64 with NaN for missing."""
    return col.astype("Float64").to_numpy(dtype="float64", na_value=np.nan)


def repeat_per_instance(col: pd.Series, group_of: np.ndarray) -> pd.Categorical:
    """Per-group text values repeated per instance, as a categorical: a million instances share a few dozen
    distinct strings. Missing values stay missing."""
    vals = list(col)
    cats = sorted({v for v in vals if isinstance(v, str)})
    pos = {c: i for i, c in enumerate(cats)}
    codes = np.array([pos.get(v, -1) if isinstance(v, str) else -1 for v in vals], dtype=np.int32)
    return pd.Categorical.from_codes(codes[group_of] if len(codes) else codes, categories=cats)


def add_rates(df: pd.DataFrame) -> None:
    """``achieved_gbps`` (bytes / gpu_ns), ``achieved_tflops``, ``pct_peak_bw``, ``pct_peak_flops``,
    ``intensity`` (FLOP/byte) and ``bound`` (memory below the ridge ``peak_tflops · 1000 / peak_gbps``, else
    compute; null when either is unknown) from ``gpu_ns``, ``bytes``, ``flops`` and the peaks."""
    gpu_ns = df["gpu_ns"].astype("Float64").where(df["gpu_ns"] > 0)
    nbytes, flops = df["bytes"].astype("Float64"), df["flops"].astype("Float64")
    df["achieved_gbps"] = nbytes / gpu_ns
    df["achieved_tflops"] = flops / gpu_ns / GFLOP_PER_TFLOP
    df["pct_peak_bw"] = 100 * df["achieved_gbps"] / df["peak_gbps"]
    df["pct_peak_flops"] = 100 * df["achieved_tflops"] / df["peak_tflops"]
    df["intensity"] = flops / nbytes.where(nbytes > 0)
    ridge_flop_per_byte = df["peak_tflops"] * GFLOP_PER_TFLOP / df["peak_gbps"]
    known = (df["intensity"].notna() & ridge_flop_per_byte.notna()).to_numpy(dtype=bool)
    below = (df["intensity"] < ridge_flop_per_byte).fillna(False).to_numpy(dtype=bool)
    bound = pd.Series(None, index=df.index, dtype="object")
    bound[known & below] = "memory"
    bound[known & ~below] = "compute"
    df["bound"] = bound


def cache_explains(bytes_moved: np.ndarray, gpu_ns: np.ndarray, peak_gbps: np.ndarray,
                   l2_bytes: np.ndarray) -> np.ndarray:
    """Per row, whether a byte rate above the DRAM peak has its one physical explanation: the bytes beyond what
    DRAM moves at its peak in ``gpu_ns`` (``bytes - peak_gbps * gpu_ns``; GB/s x ns = bytes) fit in the
    last-level cache, so the cache can have served them (inputs written just before). True for every row whose
    bytes fit in the cache; False where a number is missing."""
    with np.errstate(invalid="ignore"):
        beyond = np.nan_to_num(bytes_moved - peak_gbps * gpu_ns, nan=np.inf)
    return beyond <= np.nan_to_num(l2_bytes, nan=-np.inf)


def notes(pct_peak_bw: np.ndarray, pct_peak_flops: np.ndarray, explained: np.ndarray, bytes_moved: np.ndarray,
          l2_bytes: np.ndarray, dram_bytes: np.ndarray) -> pd.Series:
    """Per row, in words, why a percentage of peak is above 100 (null when none is). ``explained``:
    ``cache_explains``; ``dram_bytes``: what DRAM moves at its peak in the row's time."""
    out = []
    for bw, fl, ok, nbytes, cache, dram in zip(pct_peak_bw, pct_peak_flops, explained, bytes_moved, l2_bytes,
                                               dram_bytes):
        if fl > 100:
            out.append("above the dense FLOP peak: a modelling or peak-table error")
        elif bw > 100 and ok and nbytes <= cache:
            out.append(f"pct_peak_bw left null: the modelled bytes moved at {bw:.0f}% of the DRAM peak, "
                       f"which is not DRAM bandwidth: all {nbytes / BYTES_PER_MB:.1f} MB fit in the "
                       f"{cache / BYTES_PER_MIB:.0f} MiB last-level cache, so data written just before was read "
                       "from cache")
        elif bw > 100 and ok:
            out.append(f"pct_peak_bw left null: the modelled bytes moved at {bw:.0f}% of the DRAM peak, "
                       f"which is not DRAM bandwidth alone: at its peak DRAM moves {dram / BYTES_PER_MB:.1f} of "
                       f"the {nbytes / BYTES_PER_MB:.1f} MB in that time, and the other "
                       f"{(nbytes - dram) / BYTES_PER_MB:.1f} MB fit in the {cache / BYTES_PER_MIB:.0f} MiB "
                       "last-level cache, so data written just before was read from cache")
        elif bw > 100:
            out.append("above the DRAM peak without a cache explanation: a modelling or peak-table error")
        else:
            out.append(None)
    return pd.Series(out, dtype="object")


def top_instances(group_of: np.ndarray, signature_of: np.ndarray, op_ids: np.ndarray, gpu_ns: np.ndarray,
                  top: int) -> np.ndarray:
    """Positions of the ``top`` instances of each signature with the most GPU time (ties: lower op id).
    Per group a partition finds the candidates (O(n)); only those are sorted."""
    if not len(group_of) or top <= 0:
        return np.zeros(0, "int64")
    order = (np.arange(len(group_of)) if bool((np.diff(group_of) >= 0).all())
             else np.argsort(group_of, kind="stable"))
    bounds = np.r_[0, np.cumsum(np.bincount(group_of))]
    candidates = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        idx = order[a:b]
        if b - a > top:
            ns = gpu_ns[idx]
            idx = idx[ns >= np.partition(ns, b - a - top)[b - a - top]]
        candidates.append(idx)
    c = np.concatenate(candidates)
    c = c[np.lexsort((op_ids[c], -gpu_ns[c], signature_of[c]))]
    s = signature_of[c]
    first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    rank = np.arange(len(c)) - np.repeat(first, np.diff(np.r_[first, len(c)]))
    return c[rank < top]


def signatures_table(g: pd.DataFrame, group_of: np.ndarray, gpu_ns: np.ndarray, measured: np.ndarray | None,
                     bytes_per_call: np.ndarray) -> pd.DataFrame:
    """Per signature (name + input shapes + dtypes), from the groups of identical calls ``g``: sums, and
    rates over the summed time; flops/bytes null when any call is unmodelled. With ``measured`` (bytes per
    instance, NaN = not measured; ``bytes_per_call``: modelled bytes per call of each group):
    ``measured_calls``, ``measured_bytes`` (their sum), ``measured_gbps`` (over those instances' GPU time)
    and ``modelled_over_measured`` (their modelled bytes / measured bytes). Sorted by GPU time; ``g`` gets a
    ``signature`` column: its row number in this table."""
    key = ["name", "input_dims", "input_types"]
    cols = key + ["input_strides"] + SIGNATURE_COLUMNS + (MEASURED_COLUMNS if measured is not None else [])
    if not len(g):
        g["signature"] = pd.Series(dtype="int64")
        return pd.DataFrame(columns=cols)
    x = g.assign(_flops=g["flops"] * g["calls"], _bytes=g["bytes"] * g["calls"], _unmodelled=g["bytes"].isna())
    agg = dict(input_strides=("input_strides", "first"),  # its first group's: a signature's calls rarely differ
               calls=("calls", "sum"), activities=("activities", "sum"), gpu_ns=("gpu_ns", "sum"),
               flops=("_flops", "sum"), bytes=("_bytes", "sum"), _unmodelled=("_unmodelled", "any"),
               dtype=("dtype", "first"), tensor_core=("tensor_core", "first"), rule=("rule", "first"),
               dtype_source=("dtype_source", "first"), shapes_source=("shapes_source", "first"),
               fits_cache=("fits_cache", "all"), cache_explains=("cache_explains", "all"),
               l2_bytes=("l2_bytes", "first"),
               peak_gbps=("peak_gbps", "first"), peak_tflops=("peak_tflops", "first"))
    if measured is not None:
        has = ~np.isnan(measured)
        n = len(g)
        x["_m_calls"] = np.bincount(group_of, weights=has, minlength=n)
        x["_m_bytes"] = np.bincount(group_of[has], weights=measured[has], minlength=n)
        x["_m_ns"] = np.bincount(group_of[has], weights=gpu_ns[has], minlength=n)
        x["_m_modelled_bytes"] = x["_m_calls"].to_numpy() * np.nan_to_num(bytes_per_call)
        x["_m_unmodelled"] = (x["_m_calls"].to_numpy() > 0) & np.isnan(bytes_per_call)
        agg.update(measured_calls=("_m_calls", "sum"), measured_bytes=("_m_bytes", "sum"),
                   _m_ns=("_m_ns", "sum"), _m_modelled_bytes=("_m_modelled_bytes", "sum"),
                   _m_unmodelled=("_m_unmodelled", "any"))
    groups = x.groupby(key, dropna=False, sort=False)
    sig = groups.agg(**agg).reset_index()
    sig["_group"] = np.arange(len(sig))  # groups.ngroup() numbers the rows of g in this order
    for col in ("flops", "bytes"):
        sig[col] = sig[col].astype("Int64").mask(sig["_unmodelled"])
    for col in ("calls", "activities", "gpu_ns"):
        sig[col] = sig[col].astype("int64")
    add_rates(sig)
    per_call = sig["calls"].to_numpy(float)  # the note speaks of one call: bytes and DRAM bytes per call
    explained = sig.pop("cache_explains").to_numpy(bool)
    sig["note"] = notes(floats(sig["pct_peak_bw"]), floats(sig["pct_peak_flops"]), explained,
                        floats(sig["bytes"]) / per_call, floats(sig["l2_bytes"]),
                        floats(sig["peak_gbps"]) * sig["gpu_ns"].to_numpy(float) / per_call)
    sig["pct_peak_bw"] = sig["pct_peak_bw"].mask((sig["pct_peak_bw"] > 100).fillna(False) & explained)
    if measured is not None:
        sig["measured_calls"] = sig["measured_calls"].astype("int64")
        measured_bytes = sig["measured_bytes"].where(sig["measured_calls"] > 0)
        sig["measured_bytes"] = pd.array(measured_bytes.round().astype("Float64"), dtype="Int64")
        sig["measured_gbps"] = measured_bytes / sig["_m_ns"].where(sig["_m_ns"] > 0)
        sig["modelled_over_measured"] = ((sig["_m_modelled_bytes"] / measured_bytes.where(measured_bytes > 0))
                                         .mask(sig["_m_unmodelled"]))
    sig = sig.sort_values(["gpu_ns", "name", "input_dims"], ascending=[False, True, True],
                          kind="stable").reset_index(drop=True)
    # by group number, not by key: a trace without shapes has NaN input_dims, and NaN keys never match
    position = np.empty(len(sig), dtype=np.int64)
    position[sig["_group"].to_numpy()] = np.arange(len(sig))
    g["signature"] = position[groups.ngroup().to_numpy()]
    return sig[cols]
