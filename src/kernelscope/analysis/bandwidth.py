"""Bandwidth and compute utilisation per leaf operator: FLOPs, minimum bytes, achieved rates, % of peak,
roofline bound.

Definitions (docs/metrics.md, "Bandwidth and compute utilisation"; the per-operator rules are in
``opmodel``):

- Only **leaf operators** count: the CPU operators GPU activities are attributed to
  (``gpu_activities.leaf_op_id``), so an ``aten::linear`` that calls ``aten::addmm`` is counted once, at
  the ``aten::addmm``. Activities with no leaf operator (CUDA-graph replays, kernels whose launch fell
  outside the trace) are ``unattributed_gpu_ns``.
- ``gpu_ns`` of an operator instance: length of the union of its GPU activity intervals (kernels,
  memcpy, memset), in ns. ``achieved_gbps = bytes / gpu_ns`` (GB/s, 10⁹ bytes),
  ``achieved_tflops = flops / gpu_ns / 1000`` (TFLOP/s).
- ``pct_peak_bw = 100 · achieved_gbps / mem_bw_gbps``; ``pct_peak_flops = 100 · achieved_tflops /
  peak`` where peak is the device's dense peak for the operator's dtype (tensor-core peak for GEMM,
  convolution and attention; the non-tensor-core fp32 peak for all other work).
- ``intensity = flops / bytes`` (FLOP/byte); ``bound`` is ``memory`` when intensity is below the ridge
  ``peak_flops / peak_bw`` of the operator's peak, else ``compute``; null when bytes are 0 or unknown.
- ``modelled_share = modelled_gpu_ns / gpu_ns``: the share of leaf-operator GPU time whose operator has
  a rule (``bytes`` not null). Per signature (name + input shapes + dtypes) sums flops, bytes and
  ``gpu_ns`` over its instances.
- The device's peaks come from the package table ``data/device_peaks.csv`` (each row names its
  datasheet), matched by regular expression against the trace's device name; a user table
  (``peaks=PATH`` or ``$KERNELSCOPE_DEVICE_PEAKS``) is searched first. Unknown device: no percentages,
  no bound, one warning.
- An operator recorded with shapes but without dtypes (Nsight Systems NVTX ranges) takes the one dtype
  its kernels' names state (``opmodel.kernel_name_dtype``); such rows have ``dtype_source =
  'kernel_name'``, recorded ones ``'trace'``. Kernels that disagree: no dtype, unmodelled.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ..errors import UsageError
from .opmodel import MIXED, infer_input_types, kernel_name_dtype, model_op
from .result import Result

DESCRIPTION = "FLOPs and minimum bytes per leaf operator, achieved GB/s and TFLOP/s, % of device peak, roofline."
PEAKS_ENV = "KERNELSCOPE_DEVICE_PEAKS"
PEAK_COLUMNS = ("mem_bw_gbps", "fp64_tflops", "fp32_tflops", "fp32_matrix_tflops", "fp16_tflops",
                "bf16_tflops", "fp8_tflops", "l2_mb")
# operator peak key -> device-table column (tensor-core work); every other operator uses fp32_tflops.
_TENSOR_COLUMN = {"bf16": "bf16_tflops", "fp16": "fp16_tflops", "tf32": "fp32_matrix_tflops",
                  "fp32": "fp32_tflops", "fp8": "fp8_tflops", "fp64": "fp64_tflops"}

# Leaf operator instances grouped by everything a rule reads (name, recorded inputs, the element-size
# hint their kernels give: cat kernels name OpaqueType<N>) and device; per group the instances' op ids,
# activity counts and GPU times as lists (one row per group, so the inputs are read and grouped once).
# An instance's GPU time is the union of its activity intervals: sorted by start, each activity adds the
# part of it that ends after every earlier one, end - max(start, running max of earlier ends).
_SQL_GROUPS = """
WITH a AS (
  SELECT leaf_op_id AS op_id, device, start_ns, end_ns,
         max(end_ns) OVER (PARTITION BY leaf_op_id ORDER BY start_ns, end_ns
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
         CASE WHEN name LIKE '%OpaqueType<%'
              THEN nullif(regexp_extract(name, 'OpaqueType<(\\d+)u?>', 1), '') END AS hint,
         {kdt} AS kdt
  FROM gpu_activities {kjoin} WHERE trace_id = $t AND leaf_op_id IS NOT NULL
), per AS (
  SELECT op_id, min(device) AS device, count(*) AS activities, max(hint) AS hint,
         CASE WHEN count(DISTINCT kdt) > 1 THEN 'mixed' ELSE min(kdt) END AS kdtype,
         CAST(coalesce(sum(end_ns - greatest(start_ns, coalesce(prev_end, start_ns)))
                       FILTER (WHERE prev_end IS NULL OR end_ns > prev_end), 0) AS BIGINT) AS gpu_ns
  FROM a GROUP BY op_id
)
SELECT o.name, o.input_dims, o.input_types, o.input_strides, o.concrete_inputs, per.hint, per.kdtype,
       per.device,
       list(per.op_id) AS op_ids, list(per.activities) AS activities, list(per.gpu_ns) AS gpu_ns
FROM per JOIN cpu_ops o ON o.trace_id = $t AND o.op_id = per.op_id
GROUP BY ALL
ORDER BY o.name, o.input_dims, o.input_types, o.input_strides, o.concrete_inputs, per.hint, per.kdtype,
         per.device
"""
# Without kernel-name evidence every kernel's dtype word is NULL; with it, a kernel name's dtype comes from
# the ($kn, $kd) pairs computed in Python (kernel_name_dtype: RE2 has no look-behind).
_NO_EVIDENCE = {"kdt": "CAST(NULL AS VARCHAR)", "kjoin": ""}
_EVIDENCE = {"kdt": "kd.dt",
             "kjoin": "LEFT JOIN (SELECT unnest($kn) AS kname, unnest($kd) AS dt) kd ON kd.kname = name"}

# Names of kernels attributed to operators recorded with shapes but no dtypes (none on Kineto traces).
_SQL_ANY_UNTYPED = """
SELECT count(*) AS n FROM (SELECT 1 FROM cpu_ops
  WHERE trace_id = $t AND input_types IS NULL AND input_dims IS NOT NULL LIMIT 1)
"""
_SQL_UNTYPED_KERNELS = """
SELECT DISTINCT a.name FROM gpu_activities a
JOIN cpu_ops o ON o.trace_id = $t AND o.op_id = a.leaf_op_id
WHERE a.trace_id = $t AND o.input_types IS NULL AND o.input_dims IS NOT NULL
"""

_SQL_UNATTRIBUTED = """
SELECT CAST(coalesce(sum(dur_ns), 0) AS BIGINT) AS ns, count(*) AS n
FROM gpu_activities WHERE trace_id = $t AND leaf_op_id IS NULL
"""

_SQL_TRACE = "SELECT device_properties, provenance FROM traces WHERE trace_id = $t"


# ---------------------------------------------------------------- device peaks


def load_peaks(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Device-peak rows: the user's table (``path``, else ``$KERNELSCOPE_DEVICE_PEAKS``) first, then the
    package's ``data/device_peaks.csv``. Columns: device, match (regex, case-insensitive), mem_bw_gbps,
    fp64/fp32/fp32_matrix/fp16/bf16/fp8 dense TFLOP/s (empty = not supported), source."""
    rows: list[dict[str, Any]] = []
    user = path or os.environ.get(PEAKS_ENV)
    if user:
        p = Path(user)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot read the device-peak table {p} ({e.strerror}); pass a readable CSV "
                             f"with the columns of kernelscope's data/device_peaks.csv.") from None
        rows += _parse_peaks(text, str(p))
    text = resources.files("kernelscope").joinpath("data", "device_peaks.csv").read_text("utf-8")
    return rows + _parse_peaks(text, "data/device_peaks.csv")


def _parse_peaks(text: str, where: str) -> list[dict[str, Any]]:
    out = []
    reader = csv.DictReader(io.StringIO(text))
    missing = {"device", "match", "mem_bw_gbps"} - set(reader.fieldnames or [])
    if missing:
        raise UsageError(f"device-peak table {where} lacks the column(s) {', '.join(sorted(missing))}; "
                         "copy the header of kernelscope's data/device_peaks.csv.")
    for n, r in enumerate(reader, start=2):
        row: dict[str, Any] = {"device": r["device"], "match": r["match"], "source": r.get("source") or where}
        try:
            row["regex"] = re.compile(r["match"], re.IGNORECASE)
            for c in PEAK_COLUMNS:
                v = (r.get(c) or "").strip()
                row[c] = float(v) if v else None
        except (re.error, ValueError) as e:
            raise UsageError(f"device-peak table {where}, line {n}: {e}; fix the regex or the number.") from None
        if not row["mem_bw_gbps"]:
            raise UsageError(f"device-peak table {where}, line {n}: mem_bw_gbps must be a positive number.")
        out.append(row)
    return out


def match_device(name: str | None, peaks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first peak row whose ``match`` regex is found in the device name; None if none."""
    if not name:
        return None
    return next((r for r in peaks if r["regex"].search(name)), None)


def _json(text: Any) -> Any:
    if text is None or isinstance(text, (list, dict)):
        return text
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def device_names(store, trace_id: str) -> tuple[dict[int, str], dict[str, Any]]:
    """{device index: name} from the trace's deviceProperties (else the collector's provenance gpus),
    and the provenance dict (empty when absent)."""
    df = store.query(_SQL_TRACE, {"t": trace_id})
    if len(df) == 0:
        return {}, {}
    props, prov = _json(df.iloc[0]["device_properties"]) or [], _json(df.iloc[0]["provenance"]) or {}
    names: dict[int, str] = {}
    for g in prov.get("gpus") or [] if isinstance(prov, dict) else []:
        if isinstance(g, dict) and g.get("name") is not None:
            names[int(g.get("cuda_index", len(names)))] = str(g["name"])
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict) and p.get("name"):
            names[int(p.get("id", 0))] = str(p["name"])
    return names, prov if isinstance(prov, dict) else {}


# ---------------------------------------------------------------- the analysis


def bandwidth(store, trace_id: str, *, peaks: str | Path | None = None, device: str | None = None,
              measured_bytes: pd.DataFrame | None = None, infer_dtypes: bool = True) -> Result:
    """Bandwidth/compute utilisation of one trace's leaf operators (definitions: module docstring).

    ``peaks``: a CSV of device peaks searched before the package table. ``device``: a device name to
    use instead of the trace's own. ``measured_bytes``: optional DataFrame ``op_id, measured_bytes``
    (DRAM bytes measured by a profiler such as Nsight Compute, summed over the operator's kernels);
    when given, ``measured_bytes`` and ``measured_gbps`` columns appear beside the modelled ones.
    ``infer_dtypes``: give operators recorded with shapes but no dtypes the dtype their kernels' names
    agree on (``dtype_source = 'kernel_name'``); False leaves them unmodelled.
    """
    t = trace_id
    un = store.query(_SQL_UNATTRIBUTED, {"t": t}).iloc[0]
    names, prov = device_names(store, t)
    table = load_peaks(peaks)
    warnings: list[str] = []

    tf32_mm = bool(prov.get("tf32_matmul", False))
    tf32_conv = bool(prov.get("tf32_cudnn", True))

    # One row per group of identical calls: model it once, attach the device's peaks.
    evidence = {}
    if infer_dtypes and int(store.query(_SQL_ANY_UNTYPED, {"t": t}).iloc[0]["n"]):
        for kn in store.query(_SQL_UNTYPED_KERNELS, {"t": t})["name"]:
            if (dt := kernel_name_dtype(kn)) is not None:
                evidence[kn] = dt
    if evidence:
        groups = store.query_arrow(_SQL_GROUPS.format(**_EVIDENCE),
                                   {"t": t, "kn": list(evidence), "kd": list(evidence.values())})
    else:
        groups = store.query_arrow(_SQL_GROUPS.format(**_NO_EVIDENCE), {"t": t})
    g = groups.drop_columns(["op_ids", "activities", "gpu_ns"]).to_pandas()
    types, sources = _dtype_sources(g)
    costs = [model_op(r.name, r.input_dims, ty, r.input_strides, r.concrete_inputs,
                      elem_size_hint=int(r.hint) if isinstance(r.hint, str) else None,
                      tf32_matmul=tf32_mm, tf32_conv=tf32_conv)
             for r, ty in zip(g.itertuples(index=False), types)]
    g["flops"] = pd.array([c.flops for c in costs], dtype="Int64")
    g["bytes"] = pd.array([c.bytes for c in costs], dtype="Int64")
    g["dtype"] = pd.Series([c.dtype for c in costs], dtype="object")
    g["tensor_core"] = pd.Series([c.tensor for c in costs], dtype=bool)
    g["rule"] = pd.Series([c.rule for c in costs], dtype="object")
    g["reason"] = pd.Series([c.reason for c in costs], dtype="object")
    g["dtype_source"] = pd.Series(sources, dtype="object")

    dev_rows: dict[int, dict[str, Any] | None] = {}
    for d in sorted(int(x) for x in g["device"].dropna().unique()):
        nm = device or names.get(d) or (next(iter(names.values())) if len(names) == 1 else None)
        dev_rows[d] = match_device(nm, table)
        if dev_rows[d] is None:
            warnings.append(f"device {d} ({nm or 'no name in the trace'}) is not in the device-peak table: "
                            f"no % of peak and no bound; add a row with peaks=PATH or ${PEAKS_ENV}.")
    bw_peak, fl_peak, l2 = [], [], []
    for d, dt, tc in zip(g["device"], g["dtype"], g["tensor_core"]):
        row = dev_rows.get(int(d)) if d is not None and not pd.isna(d) else None
        col = (_TENSOR_COLUMN.get(dt) if tc else "fp32_tflops") if isinstance(dt, str) else None
        bw_peak.append(row["mem_bw_gbps"] if row else None)
        fl_peak.append(row.get(col) if row and col else None)
        l2.append(row["l2_mb"] * 2**20 if row and row.get("l2_mb") else None)
    g["peak_gbps"] = pd.array(bw_peak, dtype="Float64")
    g["peak_tflops"] = pd.array(fl_peak, dtype="Float64")
    g["fits_cache"] = (g["bytes"].astype("Float64") <= pd.array(l2, dtype="Float64")).fillna(False).astype(bool)

    # Instances: the groups' lists flattened (numpy), group values repeated, ordered by op id.
    n = len(g)
    counts = pc.list_value_length(groups["op_ids"]).to_numpy(zero_copy_only=False) if n else np.zeros(0, int)
    gi = np.repeat(np.arange(n), counts)
    flat = {c: np.asarray(pc.list_flatten(groups[c]).to_numpy(zero_copy_only=False) if n else [], dtype="int64")
            for c in ("op_ids", "activities", "gpu_ns")}
    order = np.argsort(flat["op_ids"], kind="stable")
    gi, ns = gi[order], flat["gpu_ns"][order]
    g["gpu_ns"] = np.bincount(gi, weights=ns, minlength=n).astype("int64") if n else []
    g["calls"] = np.asarray(counts, dtype="int64")
    g["activities"] = np.bincount(gi, weights=flat["activities"][order], minlength=n).astype("int64") if n else []
    _add_rates(g)  # intensity and bound are properties of a group (same calls, same peaks)

    inst = pd.DataFrame({"op_id": flat["op_ids"][order], "name": _repeat(g["name"], gi),
                         "signature": np.zeros(len(gi), dtype="int64"),
                         "device": g["device"].to_numpy()[gi], "activities": flat["activities"][order],
                         "gpu_ns": ns})
    for col in ("flops", "bytes"):
        inst[col] = g[col].take(gi).reset_index(drop=True)
    inst["dtype"], inst["tensor_core"] = _repeat(g["dtype"], gi), g["tensor_core"].to_numpy(bool)[gi]
    inst["rule"] = _repeat(g["rule"], gi)
    inst["dtype_source"] = _repeat(g["dtype_source"], gi)
    fl, by = _floats(g["flops"])[gi], _floats(g["bytes"])[gi]
    pbw, pfl = _floats(g["peak_gbps"])[gi], _floats(g["peak_tflops"])[gi]
    with np.errstate(divide="ignore", invalid="ignore"):
        nsf = np.where(ns > 0, ns.astype(float), np.nan)
        inst["achieved_gbps"] = by / nsf
        inst["achieved_tflops"] = fl / nsf / 1e3
        inst["pct_peak_bw"] = 100 * inst["achieved_gbps"].to_numpy() / pbw
        inst["pct_peak_flops"] = 100 * inst["achieved_tflops"].to_numpy() / pfl
    inst["intensity"] = _floats(g["intensity"])[gi]
    inst["bound"] = _repeat(g["bound"], gi)
    inst["fits_cache"] = g["fits_cache"].to_numpy(bool)[gi]
    inst["peak_gbps"], inst["peak_tflops"] = pbw, pfl
    if measured_bytes is not None:
        inst = _with_measured(inst, measured_bytes)

    sig = _signatures(g)
    if n:
        inst["signature"] = g["signature"].to_numpy("int64")[gi]
    modelled_g = g["bytes"].notna().to_numpy(bool)
    total_ns = int(ns.sum())
    modelled_ns = int(g.loc[modelled_g, "gpu_ns"].sum())
    unm = g.loc[~modelled_g]
    unmodelled = (unm.groupby(["name", "reason"], dropna=False, sort=False)
                  .agg(calls=("calls", "sum"), gpu_ns=("gpu_ns", "sum")).reset_index()
                  .sort_values(["gpu_ns", "name"], ascending=[False, True], kind="stable"))
    unmodelled["gpu_ns"] = unmodelled["gpu_ns"].astype("int64")
    unmodelled["calls"] = unmodelled["calls"].astype("int64")
    unmodelled["share"] = unmodelled["gpu_ns"] / total_ns if total_ns else float("nan")
    unmodelled = unmodelled[["name", "calls", "gpu_ns", "share", "reason"]].reset_index(drop=True)

    m = g.loc[modelled_g]
    flops = int((m["flops"].astype("int64") * m["calls"]).sum())
    nbytes = int((m["bytes"].astype("int64") * m["calls"]).sum())
    over_bw = np.nan_to_num(inst["pct_peak_bw"].to_numpy(float)) > 100
    over_fl = np.nan_to_num(inst["pct_peak_flops"].to_numpy(float)) > 100
    above = int((over_bw | over_fl).sum())
    unexplained = int(((over_bw & ~inst["fits_cache"].to_numpy(bool)) | over_fl).sum())
    cached = above - unexplained
    if cached:
        warnings.append(f"{cached} operator instances move their modelled bytes faster than the DRAM peak; "
                        "all of their bytes fit in the device's last-level cache, so inputs written just "
                        "before were read from cache: their pct_peak_bw overstates DRAM use.")
    if unexplained:
        warnings.append(f"{unexplained} operator instances exceed 100% of a device peak without a cache "
                        "explanation (a modelling or peak-table error): read their numbers with care.")
    from_names = g["dtype_source"].eq("kernel_name").to_numpy(bool)
    untyped = (g["input_types"].isna() & g["input_dims"].notna()).to_numpy(bool)
    conflicting = untyped & g["kdtype"].eq(MIXED).fillna(False).to_numpy(bool)
    if from_names.any():
        warnings.append(f"{int(g.loc[from_names, 'calls'].sum())} operator instances "
                        f"({int(g.loc[from_names, 'gpu_ns'].sum())} ns) were recorded without dtypes; "
                        "their dtype was taken from the dtype word their kernels' names agree on "
                        "(dtype_source = 'kernel_name').")
    if conflicting.any():
        warnings.append(f"{int(g.loc[conflicting, 'calls'].sum())} operator instances recorded without "
                        "dtypes have kernels whose names state different dtypes (casts, mixed precision): "
                        "no dtype inferred, left unmodelled.")
    if int(un["ns"]):
        warnings.append(f"{int(un['n'])} GPU activities ({int(un['ns'])} ns) have no leaf operator "
                        "(CUDA-graph replays or launches outside the trace) and are not modelled.")
    matched = {d: r for d, r in dev_rows.items() if r}
    scalars = {
        "gpu_ns": total_ns,
        "modelled_gpu_ns": modelled_ns,
        "modelled_share": modelled_ns / total_ns if total_ns else None,
        "unattributed_gpu_ns": int(un["ns"]),
        "modelled_share_of_all": (modelled_ns / (total_ns + int(un["ns"]))
                                  if total_ns + int(un["ns"]) else None),
        "flops": flops,
        "bytes": nbytes,
        "achieved_gbps": nbytes / modelled_ns if modelled_ns else None,
        "achieved_tflops": flops / modelled_ns / 1e3 if modelled_ns else None,
        "instances": int(len(inst)),
        "signatures": int(len(sig)),
        "above_peak": above,
        "above_peak_unexplained": unexplained,
        "device_peaks": {str(d): ({"device": r["device"], "mem_bw_gbps": r["mem_bw_gbps"],
                                   **{c: r[c] for c in PEAK_COLUMNS[1:]}, "source": r["source"]}
                                  if r else None) for d, r in dev_rows.items()},
        "tf32_matmul": tf32_mm,
    }
    trust = {
        "instances_modelled": int(g.loc[modelled_g, "calls"].sum()),
        "instances_unmodelled": int(g.loc[~modelled_g, "calls"].sum()),
        "devices_matched": len(matched),
        "devices_unmatched": len(dev_rows) - len(matched),
        "tf32_from": "provenance" if "tf32_matmul" in prov else "default (off for matmul, on for cuDNN)",
        "measured_bytes": measured_bytes is not None,
        "instances_dtype_from_kernel_name": int(g.loc[from_names, "calls"].sum()),
        "instances_dtype_conflicting": int(g.loc[conflicting, "calls"].sum()),
    }
    if not len(inst):
        warnings.append("no GPU activity is attributed to a leaf operator: nothing to model.")
    return Result(name="bandwidth", definition=__doc__.strip(), scalars=scalars,
                  tables={"per_instance": inst,
                          "per_signature": sig,
                          "unmodelled": unmodelled},
                  warnings=warnings, trust=trust)


def _dtype_sources(g: pd.DataFrame) -> tuple[list, list]:
    """Per group: the input types to model with and where their dtypes come from: ``trace`` (recorded),
    ``kernel_name`` (recorded shapes without dtypes, given the one dtype the group's kernel names state:
    ``opmodel.infer_input_types``), or None (no dtype known)."""
    types, sources = [], []
    for r in g.itertuples(index=False):
        inferred = None
        if isinstance(r.input_types, str):
            types.append(r.input_types)
            sources.append("trace")
            continue
        if isinstance(r.kdtype, str) and r.kdtype != MIXED and isinstance(r.input_dims, str):
            inferred = infer_input_types(r.name, r.input_dims, r.kdtype)
        types.append(inferred)
        sources.append("kernel_name" if inferred else None)
    return types, sources


def _repeat(col: pd.Series, gi: np.ndarray) -> pd.Categorical:
    """Per-group text values repeated per instance (``gi`` = group of each instance), as a categorical:
    a million instances share a few dozen distinct strings. Missing values stay missing."""
    vals = list(col)
    cats = sorted({v for v in vals if isinstance(v, str)})
    pos = {c: i for i, c in enumerate(cats)}
    codes = np.array([pos.get(v, -1) if isinstance(v, str) else -1 for v in vals], dtype=np.int32)
    return pd.Categorical.from_codes(codes[gi] if len(codes) else codes, categories=cats)


def _floats(col: pd.Series) -> np.ndarray:
    """A nullable column as float64 with NaN for missing."""
    return col.astype("Float64").to_numpy(dtype="float64", na_value=np.nan)


def _add_rates(df: pd.DataFrame) -> None:
    ns = df["gpu_ns"].astype("Float64").where(df["gpu_ns"] > 0)
    b, f = df["bytes"].astype("Float64"), df["flops"].astype("Float64")
    df["achieved_gbps"] = b / ns
    df["achieved_tflops"] = f / ns / 1e3
    df["pct_peak_bw"] = 100 * df["achieved_gbps"] / df["peak_gbps"]
    df["pct_peak_flops"] = 100 * df["achieved_tflops"] / df["peak_tflops"]
    df["intensity"] = f / b.where(b > 0)
    ridge = df["peak_tflops"] * 1e3 / df["peak_gbps"]  # FLOP per byte
    known = (df["intensity"].notna() & ridge.notna()).to_numpy(dtype=bool)
    below = (df["intensity"] < ridge).fillna(False).to_numpy(dtype=bool)
    bound = pd.Series(None, index=df.index, dtype="object")
    bound[known & below] = "memory"
    bound[known & ~below] = "compute"
    df["bound"] = bound


def _signatures(g: pd.DataFrame) -> pd.DataFrame:
    """Per signature (name + input shapes + dtypes), from the groups of identical calls: sums, and rates
    over the summed time; flops/bytes null when any call is unmodelled. Sorted by GPU time; ``g`` gets a
    ``signature`` column: its row number in this table."""
    key = ["name", "input_dims", "input_types"]
    if not len(g):
        g["signature"] = pd.Series(dtype="int64")
        cols = key + ["calls", "activities", "gpu_ns", "flops", "bytes", "dtype", "tensor_core", "rule",
                      "dtype_source", "achieved_gbps", "achieved_tflops", "pct_peak_bw", "pct_peak_flops", "intensity",
                      "bound", "peak_gbps", "peak_tflops"]
        return pd.DataFrame(columns=cols)
    x = g.assign(tf=g["flops"] * g["calls"], tb=g["bytes"] * g["calls"], missing=g["bytes"].isna())
    grp = x.groupby(key, dropna=False, sort=False)
    sig = grp.agg(calls=("calls", "sum"), activities=("activities", "sum"), gpu_ns=("gpu_ns", "sum"),
                  flops=("tf", "sum"), bytes=("tb", "sum"), missing=("missing", "any"),
                  dtype=("dtype", "first"), tensor_core=("tensor_core", "first"), rule=("rule", "first"),
                  dtype_source=("dtype_source", "first"),
                  peak_gbps=("peak_gbps", "first"), peak_tflops=("peak_tflops", "first")).reset_index()
    for col in ("flops", "bytes"):
        sig[col] = sig[col].astype("Int64").mask(sig["missing"])
    for col in ("calls", "activities", "gpu_ns"):
        sig[col] = sig[col].astype("int64")
    _add_rates(sig)
    sig = sig.sort_values(["gpu_ns", "name", "input_dims"], ascending=[False, True, True],
                          kind="stable").reset_index(drop=True)
    index = {k: i for i, k in enumerate(sig[key].itertuples(index=False, name=None))}
    g["signature"] = [index[k] for k in g[key].itertuples(index=False, name=None)]
    return sig[key + ["calls", "activities", "gpu_ns", "flops", "bytes", "dtype", "tensor_core", "rule",
                      "dtype_source", "achieved_gbps", "achieved_tflops", "pct_peak_bw", "pct_peak_flops", "intensity",
                      "bound", "peak_gbps", "peak_tflops"]]


def _with_measured(inst: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Join measured DRAM bytes per operator instance (``op_id``, ``measured_bytes``) beside the model."""
    if not {"op_id", "measured_bytes"} <= set(measured.columns):
        raise UsageError("measured bytes need the columns op_id and measured_bytes (one row per operator).")
    m = measured[["op_id", "measured_bytes"]].astype({"op_id": "int64"})
    out = inst.merge(m, on="op_id", how="left")
    ns = out["gpu_ns"].astype("Float64").where(out["gpu_ns"] > 0)
    out["measured_gbps"] = out["measured_bytes"].astype("Float64") / ns
    return out
