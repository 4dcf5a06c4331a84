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
- ``_foreach_*`` operators (optimizer steps) get the tensor lists of the gradients ``AccumulateGrad``
  recorded before them, when their multi_tensor_apply kernels' thread blocks confirm the list
  (``foreach_lists``); such rows have ``shapes_source = 'accumulate_grad'``.
- Above 100% of a peak: only a byte rate above the DRAM peak of an operator whose modelled bytes fit in
  the last-level cache (``fits_cache``: its inputs were read from cache) is explained. Such a row's
  ``pct_peak_bw`` is null (a DRAM percentage does not apply to cache-served bytes; ``achieved_gbps``
  stays) and ``note`` says why in words, with the rate it would have had; ``above_peak_cache`` counts
  them. Anything else keeps its percentage and counts in ``above_peak_unexplained`` (a bug by
  METRICS.md). So no shown percentage of a DRAM peak exceeds 100 unless the model or peak table is wrong.
- Measured bytes: Nsight Compute DRAM bytes of the trace's kernels (``ncu_kernels``), per kernel, per
  instance whose every kernel was measured, per signature, beside the modelled bytes
  (``modelled_over_measured = bytes / measured_bytes``).
- ``per_instance`` holds the top ``instances`` (default 5) instances of each signature by GPU time, or
  every instance with ``instances='all'``; every other number covers all instances.
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
import pyarrow as pa

from ..errors import UsageError
from ..storage.ncu import measured_dram_bytes
from .opmodel import DTYPES, MIXED, foreach_chunks, infer_input_types, kernel_name_dtype, model_op
from .result import Result

DESCRIPTION = "FLOPs and minimum bytes per leaf operator, achieved GB/s and TFLOP/s, % of device peak, roofline."
PEAKS_ENV = "KERNELSCOPE_DEVICE_PEAKS"
PEAK_COLUMNS = ("mem_bw_gbps", "fp64_tflops", "fp32_tflops", "fp32_matrix_tflops", "fp16_tflops",
                "bf16_tflops", "fp8_tflops", "l2_mb")
# operator peak key -> device-table column (tensor-core work); every other operator uses fp32_tflops.
_TENSOR_COLUMN = {"bf16": "bf16_tflops", "fp16": "fp16_tflops", "tf32": "fp32_matrix_tflops",
                  "fp32": "fp32_tflops", "fp8": "fp8_tflops", "fp64": "fp64_tflops"}

# Leaf operator instances, one row each, with their group's number (``grp``, from 0 in the order of the
# signature (op_signatures: name and recorded inputs, schema 006), the element-size hint their kernels give
# (cat kernels name OpaqueType<N>), the kernel-name dtype and the device): the groups are read and modelled
# once, the instances stay flat arrays. An instance's GPU time is the union of its activity intervals: one
# activity, its duration; two, the sum less their overlap; more (rare), sorted by start, each activity adds
# the part of it that ends after every earlier one, end - max(start, running max of earlier ends).
_SQL_INSTANCES = """
WITH a AS (
  SELECT leaf_op_id AS op_id, leaf_sig_id, device, start_ns, end_ns, dur_ns{kcol}
  FROM gpu_activities WHERE trace_id = $t AND leaf_op_id IS NOT NULL
), per AS (
  SELECT op_id, any_value(leaf_sig_id) AS sig_id, min(device) AS device, count(*) AS activities, {kdt} AS kdtype,
         CASE WHEN count(*) = 1 THEN sum(dur_ns)
              WHEN count(*) = 2 THEN sum(dur_ns) - greatest(0, min(end_ns) - max(start_ns)) END AS gpu_ns
  FROM a {kjoin} GROUP BY op_id
), hint AS (
  SELECT leaf_op_id AS op_id, max(nullif(regexp_extract(name, 'OpaqueType<(\\d+)u?>', 1), '')) AS hint
  FROM gpu_activities
  WHERE trace_id = $t AND leaf_op_id IS NOT NULL AND contains(name, 'OpaqueType<') GROUP BY 1
), many AS (
  SELECT op_id, sum(end_ns - greatest(start_ns, coalesce(prev_end, start_ns)))
                  FILTER (WHERE prev_end IS NULL OR end_ns > prev_end) AS gpu_ns
  FROM (SELECT op_id, start_ns, end_ns,
               max(end_ns) OVER (PARTITION BY op_id ORDER BY start_ns, end_ns
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM a WHERE op_id IN (SELECT op_id FROM per WHERE activities > 2))
  GROUP BY op_id
), inst AS (
  SELECT per.sig_id, hint.hint, per.kdtype, per.device, per.op_id, per.activities,
         CAST(coalesce(per.gpu_ns, many.gpu_ns, 0) AS BIGINT) AS gpu_ns
  FROM per LEFT JOIN many ON many.op_id = per.op_id LEFT JOIN hint ON hint.op_id = per.op_id
  WHERE per.sig_id IS NOT NULL  -- an operator with no cpu_ops row has no signature (and no inputs to model)
), grps AS (  -- the few distinct groups, numbered in order; each instance finds its number by a join on them
  SELECT CAST(row_number() OVER (ORDER BY sig_id, hint, kdtype, device) - 1 AS BIGINT) AS grp, *
  FROM (SELECT DISTINCT sig_id, hint, kdtype, device FROM inst)
)
SELECT g.grp, i.* FROM inst i JOIN grps g
  ON g.sig_id = i.sig_id AND g.hint IS NOT DISTINCT FROM i.hint AND g.kdtype IS NOT DISTINCT FROM i.kdtype
     AND g.device IS NOT DISTINCT FROM i.device
"""
_SQL_SIGNATURES = """
SELECT sig_id, name, input_dims, input_types, input_strides, concrete_inputs FROM op_signatures
WHERE trace_id = $t ORDER BY sig_id
"""

# Without kernel-name evidence every kernel's dtype word is NULL; with it, a kernel name's dtype comes from
# the ($kn, $kd) pairs computed in Python (kernel_name_dtype: RE2 has no look-behind).
_NO_EVIDENCE = {"kdt": "CAST(NULL AS VARCHAR)", "kjoin": "", "kcol": ""}
_EVIDENCE = {"kdt": "CASE WHEN count(DISTINCT kd.dt) > 1 THEN 'mixed' ELSE min(kd.dt) END",
             "kjoin": "LEFT JOIN (SELECT unnest($kn) AS kname, unnest($kd) AS dt) kd ON kd.kname = a.name",
             "kcol": ", name"}

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
SELECT CAST(coalesce(sum(dur_ns), 0) AS BIGINT) AS ns, count(*) AS n,
       list(DISTINCT device) FILTER (WHERE device IS NOT NULL) AS devices
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


# ---------------------------------------------------------------- tensor lists of _foreach_* operators

# Every _foreach_* operator (with or without GPU work: the CPU step-counter update is a boundary too), with
# the thread blocks its multi_tensor_apply kernels launched, the count of its other activities and the
# kernels' names.
_SQL_FOREACH = """
SELECT o.op_id, o.start_ns,
       CAST(coalesce(sum(a.grid_x * a.grid_y * a.grid_z)
                     FILTER (WHERE contains(a.name, 'multi_tensor_apply_kernel')), 0) AS BIGINT) AS blocks,
       count(a.activity_id) FILTER (WHERE NOT contains(a.name, 'multi_tensor_apply_kernel')) AS other,
       list(DISTINCT a.name) FILTER (WHERE contains(a.name, 'multi_tensor_apply_kernel')) AS kernels
FROM cpu_ops o LEFT JOIN gpu_activities a ON a.trace_id = $t AND a.leaf_op_id = o.op_id
WHERE o.trace_id = $t AND starts_with(o.name, 'aten::_foreach_')
GROUP BY o.op_id, o.start_ns ORDER BY o.start_ns, o.op_id
"""
# The gradients the autograd engine accumulated into parameters: one call per parameter and backward pass.
_SQL_GRADS = """
SELECT start_ns, input_dims, input_types FROM cpu_ops
WHERE trace_id = $t AND name = 'torch::autograd::AccumulateGrad' ORDER BY start_ns, op_id
"""
_FUNCTOR_DTYPE = re.compile(r"Functor<\s*([^,<>]+)")


def foreach_lists(store, trace_id: str) -> dict[int, tuple[list | None, str | None, str | None]]:
    """Tensor lists of the trace's ``_foreach_*`` operators, which Kineto does not record:
    ``{op_id: (shapes, dtype, reason)}`` with ``shapes`` None and a ``reason`` when no list is inferred.

    Rule (docs/metrics.md, "Tensor lists of _foreach_ operators"): an optimizer's ``_foreach_*`` calls
    run over the parameters that received a gradient in the backward pass before them, so the list is
    the ``torch::autograd::AccumulateGrad`` calls (each records its gradient's shape and dtype) after the
    last ``_foreach_*`` operator that precedes the latest such call before the operator, keeping those of
    the dtype its ``multi_tensor_apply_kernel`` functors name. Accepted only when all of the operator's
    GPU work is multi_tensor_apply kernels and their thread blocks (grid size, summed) equal the blocks
    PyTorch launches for that list, one per started chunk of 65,536 elements of each tensor
    (``opmodel.foreach_chunks``)."""
    fe = store.query(_SQL_FOREACH, {"t": trace_id})
    if not len(fe):
        return {}
    grads = store.query(_SQL_GRADS, {"t": trace_id})
    g_start = grads["start_ns"].to_numpy("int64")
    g_shape, g_type = [], []
    for d, ty in zip(grads["input_dims"], grads["input_types"]):
        d, ty = _json(d) or [], _json(ty) or []
        ok = bool(d) and isinstance(d[0], list) and all(isinstance(i, int) for i in d[0])
        g_shape.append(d[0] if ok else None)
        g_type.append(ty[0] if ty and isinstance(ty[0], str) else None)
    f_start = fe["start_ns"].to_numpy("int64")
    out: dict[int, tuple[list | None, str | None, str | None]] = {}
    for r in fe.itertuples(index=False):
        names = list(r.kernels) if isinstance(r.kernels, (list, tuple, np.ndarray)) else []
        if not names:
            continue  # no multi_tensor_apply kernel: nothing to model (CPU work, or other kernels)
        i = int(np.searchsorted(g_start, r.start_ns, side="left"))  # AccumulateGrad calls before it: [0, i)
        if not i:
            out[int(r.op_id)] = (None, None, "tensor-list shapes not recorded, and no AccumulateGrad before it "
                                 "in the trace to infer them from")
            continue
        j = int(np.searchsorted(f_start, g_start[i - 1], side="left"))  # _foreach_ ops before the last one
        lo = int(np.searchsorted(g_start, f_start[j - 1], side="right")) if j else 0
        dtypes = {kernel_name_dtype(m.group(1)) if (m := _FUNCTOR_DTYPE.search(n)) else None for n in names}
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        if int(r.other) or dtype is None or dtype == MIXED or dtype not in DTYPES:
            out[int(r.op_id)] = (None, None, "tensor-list shapes not recorded, and its kernels do not name "
                                 "one element dtype (or include other kernels)")
            continue
        shapes = [g_shape[k] for k in range(lo, i) if g_type[k] == dtype and g_shape[k] is not None]
        blocks = foreach_chunks(shapes)
        if not shapes or blocks != int(r.blocks):
            out[int(r.op_id)] = (None, None, f"tensor-list shapes not recorded; the {len(shapes)} gradients "
                                 f"accumulated before it need {blocks} thread blocks, its kernels ran "
                                 f"{int(r.blocks)}")
            continue
        out[int(r.op_id)] = (shapes, dtype, None)
    return out


def _explode_foreach(store, t: str, g: pd.DataFrame, gi: np.ndarray, op_ids: np.ndarray) -> pd.DataFrame:
    """Give every ``_foreach_*`` instance its own group row with the inferred tensor lists in
    ``input_dims`` (``shapes_source = 'accumulate_grad'``, ``hint`` = element size) or the reason none was
    inferred (``list_reason``). ``gi`` (group of each instance) is updated in place; emptied groups are
    dropped and the rest renumbered."""
    is_fe = g["name"].map(lambda n: isinstance(n, str) and n.startswith("aten::_foreach_")).to_numpy(bool)
    if not is_fe.any():
        return g
    lists = foreach_lists(store, t)
    pos = np.flatnonzero(is_fe[gi])
    rows = []
    for k, p in enumerate(pos):
        row = g.iloc[int(gi[p])].to_dict()
        shapes, dtype, reason = lists.get(int(op_ids[p]), (None, None, None))
        if shapes is not None:
            types = _json(row["input_types"]) or []
            dims = _json(row["input_dims"]) or [[] for _ in types]
            dims = [shapes if ty == "TensorList" else (dims[x] if x < len(dims) else [])
                    for x, ty in enumerate(types)]
            row.update(input_dims=json.dumps(dims), hint=str(DTYPES[dtype][0]), shapes_source="accumulate_grad")
        else:
            row["list_reason"] = reason
        rows.append(row)
        gi[p] = len(g) + k
    g = pd.concat([g, pd.DataFrame(rows)], ignore_index=True)
    keep = np.bincount(gi, minlength=len(g)) > 0
    new_no = np.cumsum(keep) - 1
    gi[:] = new_no[gi]
    return g.loc[keep].reset_index(drop=True)


# ---------------------------------------------------------------- the analysis

DEFAULT_INSTANCES = 5


def bandwidth(store, trace_id: str, *, peaks: str | Path | None = None, device: str | None = None,
              measured_bytes: pd.DataFrame | None = None, infer_dtypes: bool = True,
              infer_lists: bool = True, instances: int | str = DEFAULT_INSTANCES) -> Result:
    """Bandwidth/compute utilisation of one trace's leaf operators (definitions: module docstring).

    ``peaks``: a CSV of device peaks searched before the package table. ``device``: a device name to
    use instead of the trace's own. ``measured_bytes``: optional DataFrame ``op_id, measured_bytes``
    (DRAM bytes measured by a profiler, summed over the operator's kernels); without it, Nsight Compute
    rows with DRAM bytes matched to the trace's kernels are used when the store has them. Either way
    ``measured_bytes``, ``measured_gbps`` and ``modelled_over_measured`` columns appear beside the
    modelled ones. ``infer_dtypes``: give operators recorded with shapes but no dtypes the dtype their
    kernels' names agree on (``dtype_source = 'kernel_name'``); False leaves them unmodelled.
    ``infer_lists``: give ``_foreach_*`` operators the tensor lists of the gradients accumulated before
    them (``foreach_lists``); False leaves them unmodelled. ``instances``: rows of ``per_instance`` per
    signature, the N with the most GPU time (default 5), or ``"all"`` for every instance; every other
    number covers all instances either way.
    """
    t = trace_id
    if isinstance(instances, str) and instances.strip().lower() == "all":
        top = None
    elif isinstance(instances, (int, np.integer)) and not isinstance(instances, bool) and instances >= 0:
        top = int(instances)
    else:
        raise UsageError(f"instances must be a whole number >= 0 or 'all', not {instances!r} "
                         "(e.g. -o instances=all).")
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
        inst_tab = store.query_arrow(_SQL_INSTANCES.format(**_EVIDENCE),
                                     {"t": t, "kn": list(evidence), "kd": list(evidence.values())})
    else:
        inst_tab = store.query_arrow(_SQL_INSTANCES.format(**_NO_EVIDENCE), {"t": t})
    # Instances as flat arrays (sorted by group) and the group of each; a group's columns from its first row.
    gi = inst_tab.column("grp").to_numpy().astype("int64") if inst_tab.num_rows else np.zeros(0, "int64")
    flat = {c: np.asarray(inst_tab.column(c).to_numpy(zero_copy_only=False), dtype="int64")
            for c in ("op_id", "activities", "gpu_ns")}
    # by group (a stable sort: radix on 16-bit ints when there are fewer than 32767 groups, the usual case)
    order = np.argsort(gi.astype(np.int16) if len(gi) and gi.max() < 32767 else gi, kind="stable")
    gi, op_ids, acts, ns = gi[order], flat["op_id"][order], flat["activities"][order], flat["gpu_ns"][order]
    starts = np.flatnonzero(np.r_[True, gi[1:] != gi[:-1]]) if len(gi) else np.zeros(0, "int64")
    starts = order[starts]  # a row of each group in the fetched table
    heads = inst_tab.select(["sig_id", "hint", "kdtype", "device"]).take(starts)
    sigs = store.query_arrow(_SQL_SIGNATURES, {"t": t})  # sig_id = row number (0, 1, ...)
    sigs = sigs.take(np.asarray(heads.column("sig_id").to_numpy(), dtype="int64")) if len(starts) else sigs.slice(0, 0)
    g = pa.table({**{c: sigs.column(c) for c in ("name", "input_dims", "input_types", "input_strides",
                                                 "concrete_inputs")},
                  **{c: heads.column(c) for c in ("hint", "kdtype", "device")}}).to_pandas()
    g["shapes_source"] = pd.Series(["trace"] * len(g), dtype="object")
    g["list_reason"] = pd.Series([None] * len(g), dtype="object")
    if infer_lists and len(g):
        g = _explode_foreach(store, t, g, gi, op_ids)
    n = len(g)

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
    g["reason"] = pd.Series([lr if c.bytes is None and isinstance(lr, str) else c.reason
                             for c, lr in zip(costs, g["list_reason"])], dtype="object")
    g["dtype_source"] = pd.Series(sources, dtype="object")

    dev_rows: dict[int, dict[str, Any] | None] = {}
    # every device with GPU activity, also one whose activities have no operator (a graph-only trace)
    un_devices = un["devices"] if isinstance(un["devices"], (list, np.ndarray)) else []
    devices = {int(x) for x in g["device"].dropna().unique()} | {int(x) for x in un_devices}
    for d in sorted(devices):
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
    g["l2_bytes"] = pd.array(l2, dtype="Float64")
    g["fits_cache"] = (g["bytes"].astype("Float64") <= g["l2_bytes"]).fillna(False).astype(bool)

    # Per group sums over its instances (float sums are exact below 2**53 ns).
    g["calls"] = np.bincount(gi, minlength=n).astype("int64")
    g["gpu_ns"] = np.bincount(gi, weights=ns, minlength=n).astype("int64") if n else []
    g["activities"] = np.bincount(gi, weights=acts, minlength=n).astype("int64") if n else []
    _add_rates(g)  # intensity and bound are properties of a group (same calls, same peaks)

    # Above-peak counts over every instance: an instance is above a peak when its GPU time is shorter
    # than the time the peak needs for its group's bytes (FLOPs): ns < bytes / peak_gbps.
    gb, gf = _floats(g["bytes"]), _floats(g["flops"])
    gpbw, gpfl = _floats(g["peak_gbps"]), _floats(g["peak_tflops"])
    gfits = g["fits_cache"].to_numpy(bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        need_bw = np.nan_to_num(gb / gpbw, nan=-1.0)
        need_fl = np.nan_to_num(gf / (gpfl * 1e3), nan=-1.0)
    pos = ns > 0
    over_bw = (ns < need_bw[gi]) & pos
    over_fl = (ns < need_fl[gi]) & pos
    above = int((over_bw | over_fl).sum())
    unexplained = int(((over_bw & ~gfits[gi]) | over_fl).sum())
    cached = above - unexplained

    # Measured bytes per instance (explicit, else Nsight Compute rows in the store).
    measured_k = None
    if measured_bytes is not None:
        if not {"op_id", "measured_bytes"} <= set(measured_bytes.columns):
            raise UsageError("measured bytes need the columns op_id and measured_bytes (one row per operator).")
        measured = measured_bytes[["op_id", "measured_bytes"]]
    else:
        measured_k, measured = measured_dram_bytes(store, t)
    m_inst = None
    if measured is not None:
        m = measured.dropna(subset=["measured_bytes"])
        mo, mb = m["op_id"].to_numpy("int64"), m["measured_bytes"].to_numpy("int64")
        order = np.argsort(op_ids, kind="stable")
        at = np.searchsorted(op_ids[order], mo)
        hit = at < len(order)
        hit[hit] = op_ids[order][at[hit]] == mo[hit]
        m_inst = np.full(len(op_ids), np.nan)
        m_inst[order[at[hit]]] = mb[hit]

    sig = _signatures(g, gi, ns, m_inst, gb)
    sig_of = g["signature"].to_numpy("int64")[gi] if n else np.zeros(0, "int64")

    # per_instance: the top instances of each signature by GPU time (ties: lower op id), or all.
    keep = np.arange(len(op_ids)) if top is None else _top_instances(gi, sig_of, op_ids, ns, top)
    keep = keep[np.argsort(op_ids[keep], kind="stable")]
    kg = gi[keep]
    inst = pd.DataFrame({"op_id": op_ids[keep], "name": _repeat(g["name"], kg), "signature": sig_of[keep],
                         "device": g["device"].to_numpy()[kg], "activities": acts[keep], "gpu_ns": ns[keep]})
    for col in ("flops", "bytes"):
        inst[col] = g[col].take(kg).reset_index(drop=True)
    inst["dtype"], inst["tensor_core"] = _repeat(g["dtype"], kg), g["tensor_core"].to_numpy(bool)[kg]
    inst["rule"] = _repeat(g["rule"], kg)
    inst["dtype_source"] = _repeat(g["dtype_source"], kg)
    inst["shapes_source"] = _repeat(g["shapes_source"], kg)
    kb, kpbw, kpfl = gb[kg], gpbw[kg], gpfl[kg]
    with np.errstate(divide="ignore", invalid="ignore"):
        nsf = np.where(ns[keep] > 0, ns[keep].astype(float), np.nan)
        i_gbps, i_tflops = kb / nsf, gf[kg] / nsf / 1e3
        i_pbw, i_pfl = 100 * i_gbps / kpbw, 100 * i_tflops / kpfl
    inst["achieved_gbps"], inst["achieved_tflops"] = i_gbps, i_tflops
    inst["pct_peak_flops"] = i_pfl
    inst["intensity"] = _floats(g["intensity"])[kg]
    inst["bound"] = _repeat(g["bound"], kg)
    inst["fits_cache"] = gfits[kg]
    inst["peak_gbps"], inst["peak_tflops"] = kpbw, kpfl
    inst["note"] = _notes(i_pbw, i_pfl, gfits[kg], kb, _floats(g["l2_bytes"])[kg])
    inst["pct_peak_bw"] = np.where((i_pbw > 100) & gfits[kg], np.nan, i_pbw)  # cache-served: see note
    if m_inst is not None:
        mk = pd.array(np.where(np.isnan(m_inst[keep]), 0, m_inst[keep]).astype("int64"), dtype="Int64")
        mk[np.isnan(m_inst[keep])] = pd.NA
        inst["measured_bytes"] = mk
        with np.errstate(divide="ignore", invalid="ignore"):
            inst["measured_gbps"] = m_inst[keep] / nsf
            inst["modelled_over_measured"] = kb / np.where(m_inst[keep] > 0, m_inst[keep], np.nan)
        if measured_k is not None and "ncu_duration_ns" in measured.columns:
            d = measured.set_index("op_id")["ncu_duration_ns"]
            inst["ncu_duration_ns"] = pd.array(d.reindex(inst["op_id"]).to_numpy(), dtype="Int64")

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

    mg = g.loc[modelled_g]
    flops = int((mg["flops"].astype("int64") * mg["calls"]).sum())
    nbytes = int((mg["bytes"].astype("int64") * mg["calls"]).sum())
    if cached:
        warnings.append(f"{cached} operator instances move their modelled bytes faster than the DRAM peak "
                        "(above 100% of it); all of their bytes fit in the device's last-level cache, so "
                        "inputs written just before were read from cache, not DRAM: their pct_peak_bw is null, "
                        "'note' says why and fits_cache is true.")
    if unexplained:
        warnings.append(f"{unexplained} operator instances exceed 100% of a device peak without a cache "
                        "explanation (a modelling or peak-table error): read their numbers with care.")
    from_names = g["dtype_source"].eq("kernel_name").to_numpy(bool)
    untyped = (g["input_types"].isna() & g["input_dims"].notna()).to_numpy(bool)
    conflicting = untyped & g["kdtype"].eq(MIXED).fillna(False).to_numpy(bool)
    from_grads = g["shapes_source"].eq("accumulate_grad").to_numpy(bool)
    if from_names.any():
        warnings.append(f"{int(g.loc[from_names, 'calls'].sum())} operator instances "
                        f"({int(g.loc[from_names, 'gpu_ns'].sum())} ns) were recorded without dtypes; "
                        "their dtype was taken from the dtype word their kernels' names agree on "
                        "(dtype_source = 'kernel_name').")
    if conflicting.any():
        warnings.append(f"{int(g.loc[conflicting, 'calls'].sum())} operator instances recorded without "
                        "dtypes have kernels whose names state different dtypes (casts, mixed precision): "
                        "no dtype inferred, left unmodelled.")
    if from_grads.any():
        warnings.append(f"{int(g.loc[from_grads, 'calls'].sum())} _foreach_ operator instances "
                        f"({int(g.loc[from_grads, 'gpu_ns'].sum())} ns) were given the tensor lists of the "
                        "gradients accumulated before them (shapes_source = 'accumulate_grad'; the "
                        "profiler records no tensor-list shapes), checked against their kernels' thread blocks.")
    if len(g) and g["input_dims"].isna().all():
        warnings.append("the trace was recorded without shapes (torch.profiler's default, record_shapes=False): "
                        "no operator's FLOPs or bytes can be modelled; profile with record_shapes=True (or "
                        "`kernelscope profile`) for bandwidth and roofline numbers.")
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
        "instances": int(len(op_ids)),
        "instances_shown": int(len(inst)),
        "signatures": int(len(sig)),
        "above_peak": above,
        "above_peak_cache": cached,
        "above_peak_unexplained": unexplained,
        "device_peaks": {str(d): ({"device": r["device"], "mem_bw_gbps": r["mem_bw_gbps"],
                                   **{c: r[c] for c in PEAK_COLUMNS[1:]}, "source": r["source"]}
                                  if r else None) for d, r in dev_rows.items()},
        "tf32_matmul": tf32_mm,
    }
    tables = {"per_instance": inst, "per_signature": sig, "unmodelled": unmodelled}
    if m_inst is not None:
        has = ~np.isnan(m_inst)
        mb_sum = int(m_inst[has].sum())
        mod = gb[gi[has]]
        mod_sum = int(np.nansum(mod)) if np.isfinite(mod).all() else None
        scalars.update(measured_instances=int(has.sum()), measured_bytes=mb_sum, measured_modelled_bytes=mod_sum,
                       modelled_over_measured=(mod_sum / mb_sum if mod_sum is not None and mb_sum else None))
        if measured_k is not None:
            mk_ops = measured_k["op_id"].to_numpy("int64")
            at = np.minimum(np.searchsorted(op_ids[order], mk_ops), max(len(order) - 1, 0))
            found = op_ids[order][at] == mk_ops if len(order) else np.zeros(len(mk_ops), bool)
            mk_g = np.where(found, gi[order[at]], -1) if len(order) else np.full(len(mk_ops), -1)
            mk = measured_k.assign(name=[g["name"].iloc[j] if j >= 0 else None for j in mk_g],
                                   signature=pd.array([g["signature"].iloc[j] if j >= 0 else None for j in mk_g],
                                                      dtype="Int64"))
            tables["measured_kernels"] = mk[
                ["activity_id", "op_id", "name", "signature", "kernel", "dur_ns", "ncu_duration_ns",
                 "dram_bytes_read", "dram_bytes_write", "measured_bytes", "cache_control", "clock_control"]]
            settings = sorted({f"cache control '{a}', clock control '{b}'"
                               for a, b in zip(measured_k["cache_control"], measured_k["clock_control"])})
            warnings.append(f"measured bytes are Nsight Compute's DRAM bytes ({'; '.join(settings)}): ncu runs "
                            "each kernel alone (cache control 'all' flushes the caches first), writes still in "
                            "L2 when a kernel ends and re-reads served by L2 are not DRAM traffic, so measured "
                            "bytes can fall below the modelled minimum, and extra passes can push them above; "
                            "measured_gbps divides them by the traced GPU time.")
    trust = {
        "instances_modelled": int(g.loc[modelled_g, "calls"].sum()),
        "instances_unmodelled": int(g.loc[~modelled_g, "calls"].sum()),
        "devices_matched": len(matched),
        "devices_unmatched": len(dev_rows) - len(matched),
        "tf32_from": "provenance" if "tf32_matmul" in prov else "default (off for matmul, on for cuDNN)",
        "measured_bytes": m_inst is not None,
        "measured_from": ("argument" if measured_bytes is not None else "ncu" if m_inst is not None else None),
        "instances_dtype_from_kernel_name": int(g.loc[from_names, "calls"].sum()),
        "instances_dtype_conflicting": int(g.loc[conflicting, "calls"].sum()),
        "instances_lists_from_accumulate_grad": int(g.loc[from_grads, "calls"].sum()),
    }
    if not len(op_ids):
        warnings.append("no GPU activity is attributed to a leaf operator: nothing to model.")
    return Result(name="bandwidth", definition=__doc__.strip(), scalars=scalars, tables=tables,
                  warnings=warnings, trust=trust)


def _top_instances(gi: np.ndarray, sig_of: np.ndarray, op_ids: np.ndarray, ns: np.ndarray, top: int) -> np.ndarray:
    """Positions of the ``top`` instances of each signature with the most GPU time (ties: lower op id).
    Per group a partition finds the candidates (O(n)); only those are sorted."""
    if not len(gi) or top <= 0:
        return np.zeros(0, "int64")
    order = np.arange(len(gi)) if bool((np.diff(gi) >= 0).all()) else np.argsort(gi, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(gi))]
    cand = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        idx = order[a:b]
        if b - a > top:
            vals = ns[idx]
            idx = idx[vals >= np.partition(vals, b - a - top)[b - a - top]]
        cand.append(idx)
    c = np.concatenate(cand)
    c = c[np.lexsort((op_ids[c], -ns[c], sig_of[c]))]
    s = sig_of[c]
    first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    rank = np.arange(len(c)) - np.repeat(first, np.diff(np.r_[first, len(c)]))
    return c[rank < top]


def _notes(pbw: np.ndarray, pfl: np.ndarray, fits: np.ndarray, nbytes: np.ndarray, l2: np.ndarray) -> pd.Series:
    """Per row, in words, why a percentage of peak is above 100 (null when none is)."""
    out = []
    for b, f, c, nb, cache in zip(pbw, pfl, fits, nbytes, l2):
        if f > 100:
            out.append("above the dense FLOP peak: a modelling or peak-table error")
        elif b > 100 and c:
            out.append(f"pct_peak_bw left null: the modelled bytes moved at {b:.0f}% of the DRAM peak, "
                       f"which is not DRAM bandwidth: all {nb / 1e6:.1f} MB fit in the {cache / 2**20:.0f} MiB "
                       "last-level cache, so data written just before was read from cache")
        elif b > 100:
            out.append("above the DRAM peak without a cache explanation: a modelling or peak-table error")
        else:
            out.append(None)
    return pd.Series(out, dtype="object")


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


_SIG_COLUMNS = ["calls", "activities", "gpu_ns", "flops", "bytes", "dtype", "tensor_core", "rule", "dtype_source",
                "shapes_source", "achieved_gbps", "achieved_tflops", "pct_peak_bw", "pct_peak_flops", "intensity",
                "bound", "fits_cache", "peak_gbps", "peak_tflops", "note"]
_MEASURED_COLUMNS = ["measured_calls", "measured_bytes", "measured_gbps", "modelled_over_measured"]


def _signatures(g: pd.DataFrame, gi: np.ndarray, ns: np.ndarray, measured: np.ndarray | None,
                nbytes: np.ndarray) -> pd.DataFrame:
    """Per signature (name + input shapes + dtypes), from the groups of identical calls: sums, and rates
    over the summed time; flops/bytes null when any call is unmodelled. With ``measured`` (bytes per
    instance, NaN = not measured; ``nbytes``: modelled bytes per call of each group): ``measured_calls``, ``measured_bytes`` (their sum), ``measured_gbps``
    (over those instances' GPU time) and ``modelled_over_measured`` (their modelled bytes / measured
    bytes). Sorted by GPU time; ``g`` gets a ``signature`` column: its row number in this table."""
    key = ["name", "input_dims", "input_types"]
    cols = key + _SIG_COLUMNS + (_MEASURED_COLUMNS if measured is not None else [])
    if not len(g):
        g["signature"] = pd.Series(dtype="int64")
        return pd.DataFrame(columns=cols)
    x = g.assign(tf=g["flops"] * g["calls"], tb=g["bytes"] * g["calls"], missing=g["bytes"].isna())
    agg = dict(calls=("calls", "sum"), activities=("activities", "sum"), gpu_ns=("gpu_ns", "sum"),
               flops=("tf", "sum"), bytes=("tb", "sum"), missing=("missing", "any"),
               dtype=("dtype", "first"), tensor_core=("tensor_core", "first"), rule=("rule", "first"),
               dtype_source=("dtype_source", "first"), shapes_source=("shapes_source", "first"),
               fits_cache=("fits_cache", "all"), l2_bytes=("l2_bytes", "first"),
               peak_gbps=("peak_gbps", "first"), peak_tflops=("peak_tflops", "first"))
    if measured is not None:
        has = ~np.isnan(measured)
        n = len(g)
        x["m_calls"] = np.bincount(gi, weights=has, minlength=n)
        x["m_bytes"] = np.bincount(gi[has], weights=measured[has], minlength=n)
        x["m_ns"] = np.bincount(gi[has], weights=ns[has], minlength=n)
        x["m_model"] = x["m_calls"].to_numpy() * np.nan_to_num(nbytes)
        x["m_missing"] = (x["m_calls"].to_numpy() > 0) & np.isnan(nbytes)
        agg.update(measured_calls=("m_calls", "sum"), measured_bytes=("m_bytes", "sum"), m_ns=("m_ns", "sum"),
                   m_model=("m_model", "sum"), m_missing=("m_missing", "any"))
    groups = x.groupby(key, dropna=False, sort=False)
    sig = groups.agg(**agg).reset_index()
    sig["_group"] = np.arange(len(sig))  # groups.ngroup() numbers the rows of g in this order
    for col in ("flops", "bytes"):
        sig[col] = sig[col].astype("Int64").mask(sig["missing"])
    for col in ("calls", "activities", "gpu_ns"):
        sig[col] = sig[col].astype("int64")
    _add_rates(sig)
    sig["note"] = _notes(_floats(sig["pct_peak_bw"]), _floats(sig["pct_peak_flops"]), sig["fits_cache"].to_numpy(bool),
                         _floats(sig["bytes"]) / sig["calls"].to_numpy(float), _floats(sig["l2_bytes"]))
    sig["pct_peak_bw"] = sig["pct_peak_bw"].mask((sig["pct_peak_bw"] > 100).fillna(False) & sig["fits_cache"])
    if measured is not None:
        sig["measured_calls"] = sig["measured_calls"].astype("int64")
        mb = sig["measured_bytes"].where(sig["measured_calls"] > 0)
        sig["measured_bytes"] = pd.array(mb.round().astype("Float64"), dtype="Int64")
        sig["measured_gbps"] = mb / sig["m_ns"].where(sig["m_ns"] > 0)
        sig["modelled_over_measured"] = (sig["m_model"] / mb.where(mb > 0)).mask(sig["m_missing"])
    sig = sig.sort_values(["gpu_ns", "name", "input_dims"], ascending=[False, True, True],
                          kind="stable").reset_index(drop=True)
    # by group number, not by key: a trace without shapes has NaN input_dims, and NaN keys never match
    position = np.empty(len(sig), dtype=np.int64)
    position[sig["_group"].to_numpy()] = np.arange(len(sig))
    g["signature"] = position[groups.ngroup().to_numpy()]
    return sig[cols]
