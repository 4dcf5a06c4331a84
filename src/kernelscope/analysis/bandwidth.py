"""Bandwidth and compute utilisation per leaf operator: FLOPs, minimum bytes, achieved rates, % of peak,
roofline bound.

Definitions (docs/metrics.md, "Bandwidth and compute utilisation"; the per-operator rules are in ``opmodel``):

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
- An operator whose GPU work is all copies between host and device memory (memcpy HtoD/DtoH: ``model.cuda()``,
  ``.cpu()``, ``.item()``) is unmodelled, reason ``HOST_COPY_REASON``: the host link bounds its rate, and a % of
  the DRAM peak would call it slow.
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
- Above 100% of a peak: only a byte rate above the DRAM peak is explained, and only when the bytes beyond
  what DRAM moves at its peak in the operator's time fit in the last-level cache (``cache_explains``; always
  so when all of them fit, ``fits_cache``): those were read from cache. Such a row's
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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import UsageError
from ..units import BYTES_PER_MIB, GFLOP_PER_TFLOP
from .bandwidth_measured import (
    Measured,
    measured_kernels_table,
    measured_note,
    measured_per_instance,
    measured_scalars,
)
from .bandwidth_tables import (
    add_rates,
    cache_explains,
    floats,
    notes,
    repeat_per_instance,
    signatures_table,
    top_instances,
)
from .device_peaks import (
    PEAK_COLUMNS,
    PEAKS_ENV,
    load_peaks,
    match_device,
    peak_row_summary,
    peak_tflops_column,
)
from .foreach_lists import explode_foreach, foreach_lists
from .kernel_dtypes import MIXED, infer_input_types, kernel_name_dtype
from .opmodel import model_op
from .opmodel_inputs import json_value
from .result import Result

__all__ = ["DEFAULT_INSTANCES", "DESCRIPTION", "PEAKS_ENV", "PEAK_COLUMNS", "bandwidth", "device_names",
           "foreach_lists", "load_peaks", "match_device"]

DESCRIPTION = "FLOPs and minimum bytes per leaf operator, achieved GB/s and TFLOP/s, % of device peak, roofline."


# Leaf operator instances, one row each (leaf_instances, schema 013: its GPU time, the union of its activity
# intervals, and the element-size hint its kernels give, cat kernels naming OpaqueType<N>), with their group's
# number (``grp``, from 0 in the order of the signature (op_signatures: name and recorded inputs, schema 006),
# the hint, the kernel-name dtype and the device): the groups are read and modelled once, the instances stay
# flat arrays (in no particular order: every table breaks ties by op id).
_SQL_INSTANCES = """
WITH hc AS (  -- operators whose GPU work is all copies with one end in host memory (memcpy names: CUDA's
              -- "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)"; ROCm's "CopyHostToDevice")
  SELECT leaf_op_id AS op_id FROM gpu_activities
  WHERE trace_id = $t AND leaf_op_id IS NOT NULL
  GROUP BY 1 HAVING bool_and(kind = 'memcpy' AND regexp_matches(name, '(?i)HtoD|DtoH|HostToDevice|DeviceToHost'))
), inst AS (
  SELECT li.sig_id, li.hint, {kdt} AS kdtype, li.device, hc.op_id IS NOT NULL AS host_copy, li.op_id,
         li.activities, li.gpu_ns
  FROM leaf_instances li LEFT JOIN hc ON hc.op_id = li.op_id {kjoin}
  WHERE li.trace_id = $t AND li.sig_id IS NOT NULL  -- no cpu_ops row: no signature (and no inputs to model)
), grps AS (  -- the few distinct groups, numbered in order; each instance finds its number by a join on them
  SELECT CAST(row_number() OVER (ORDER BY sig_id, hint, kdtype, device, host_copy) - 1 AS BIGINT) AS grp, *
  FROM (SELECT DISTINCT sig_id, hint, kdtype, device, host_copy FROM inst)
)
SELECT g.grp, i.* FROM inst i JOIN grps g
  ON g.sig_id = i.sig_id AND g.hint IS NOT DISTINCT FROM i.hint AND g.kdtype IS NOT DISTINCT FROM i.kdtype
     AND g.device IS NOT DISTINCT FROM i.device AND g.host_copy = i.host_copy
"""
#: The reason a host-device copy is not modelled against the device's memory bandwidth.
HOST_COPY_REASON = ("a copy between host and device memory: its rate is bound by the host link (PCIe or "
                    "NVLink-C2C), not by the GPU's memory bandwidth, so no % of the DRAM peak applies")
_SQL_SIGNATURES = """
SELECT sig_id, name, input_dims, input_types, input_strides, concrete_inputs FROM op_signatures
WHERE trace_id = $t ORDER BY sig_id
"""

# Without kernel-name evidence every kernel's dtype word is NULL; with it, an instance's is the one dtype the
# names of its kernels state ('mixed' when they state several), from the ($kn, $kd) pairs computed in Python
# (kernel_name_dtype: RE2 has no look-behind).
_NO_EVIDENCE = {"kdt": "CAST(NULL AS VARCHAR)", "kjoin": ""}
_EVIDENCE = {"kdt": "kd.kdtype", "kjoin": """LEFT JOIN (
    SELECT a.leaf_op_id AS op_id, CASE WHEN count(DISTINCT e.dt) > 1 THEN 'mixed' ELSE min(e.dt) END AS kdtype
    FROM gpu_activities a JOIN (SELECT unnest($kn) AS kname, unnest($kd) AS dt) e ON e.kname = a.name
    WHERE a.trace_id = $t AND a.leaf_op_id IS NOT NULL GROUP BY 1) kd ON kd.op_id = li.op_id"""}

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


# ---------------------------------------------------------------- records passed between the steps


@dataclass
class Instances:
    """Leaf operator instances as flat arrays, one entry per instance. ``group_of``: the row of its group (of
    identical calls) in the groups table; ``gpu_ns``: the union of its activity intervals."""

    group_of: np.ndarray
    op_id: np.ndarray
    activities: np.ndarray
    gpu_ns: np.ndarray


@dataclass
class AbovePeak:
    """Instances above a peak (DRAM or dense FLOP): all of them, those explained by the cache (above the DRAM
    peak only, the bytes beyond what DRAM moves in their time fitting in the last-level cache), and the rest."""

    instances: int
    cache_served: int
    unexplained: int


def device_names(store, trace_id: str) -> tuple[dict[int, str], dict[str, Any]]:
    """{device index: name} from the trace's deviceProperties (else the collector's provenance gpus),
    and the provenance dict (empty when absent)."""
    df = store.query(_SQL_TRACE, {"t": trace_id})
    if len(df) == 0:
        return {}, {}
    props, prov = json_value(df.iloc[0]["device_properties"]) or [], json_value(df.iloc[0]["provenance"]) or {}
    names: dict[int, str] = {}
    for gpu in prov.get("gpus") or [] if isinstance(prov, dict) else []:
        if isinstance(gpu, dict) and gpu.get("name") is not None:
            names[int(gpu.get("cuda_index", len(names)))] = str(gpu["name"])
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict) and p.get("name"):
            names[int(p.get("id", 0))] = str(p["name"])
    return names, prov if isinstance(prov, dict) else {}


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
    top = _top_option(instances)
    unattributed = store.query(_SQL_UNATTRIBUTED, {"t": trace_id}).iloc[0]
    names, prov = device_names(store, trace_id)
    peak_table = load_peaks(peaks)
    warnings: list[str] = []

    # One row per group of identical calls: model it once, attach the device's peaks.
    evidence = _kernel_name_dtypes(store, trace_id) if infer_dtypes else {}
    inst, groups = _read_groups(store, trace_id, evidence)
    if infer_lists and len(groups):
        groups = explode_foreach(store, trace_id, groups, inst.group_of, inst.op_id)
    _model_groups(groups, tf32_matmul=bool(prov.get("tf32_matmul", False)),
                  tf32_conv=bool(prov.get("tf32_cudnn", True)))
    dev_rows = _match_devices(groups, unattributed, names, peak_table, device, warnings)
    _attach_peaks(groups, dev_rows)
    _sum_instances(groups, inst)
    add_rates(groups)  # intensity and bound are properties of a group (same calls, same peaks)
    above = _above_peak(groups, inst)

    measured = measured_per_instance(store, trace_id, measured_bytes, inst.op_id)
    bytes_per_call = floats(groups["bytes"])
    sig = signatures_table(groups, inst.group_of, inst.gpu_ns, None if measured is None else measured.per_instance,
                           bytes_per_call)
    signature_of = groups["signature"].to_numpy("int64")[inst.group_of] if len(groups) else np.zeros(0, "int64")
    per_instance = _per_instance_table(groups, inst, signature_of, top, measured)

    modelled = groups["bytes"].notna().to_numpy(bool)
    total_gpu_ns = int(inst.gpu_ns.sum())
    modelled_gpu_ns = int(groups.loc[modelled, "gpu_ns"].sum())
    unmodelled = _unmodelled_table(groups.loc[~modelled], total_gpu_ns)
    modelled_groups = groups.loc[modelled]
    flops = int((modelled_groups["flops"].astype("int64") * modelled_groups["calls"]).sum())
    bytes_moved = int((modelled_groups["bytes"].astype("int64") * modelled_groups["calls"]).sum())
    warnings += _model_warnings(groups, above, unattributed)
    unattributed_gpu_ns = int(unattributed["ns"])
    scalars = {
        "gpu_ns": total_gpu_ns,
        "modelled_gpu_ns": modelled_gpu_ns,
        "modelled_share": modelled_gpu_ns / total_gpu_ns if total_gpu_ns else None,
        "unattributed_gpu_ns": unattributed_gpu_ns,
        "modelled_share_of_all": (modelled_gpu_ns / (total_gpu_ns + unattributed_gpu_ns)
                                  if total_gpu_ns + unattributed_gpu_ns else None),
        "flops": flops,
        "bytes": bytes_moved,
        "achieved_gbps": bytes_moved / modelled_gpu_ns if modelled_gpu_ns else None,
        "achieved_tflops": flops / modelled_gpu_ns / GFLOP_PER_TFLOP if modelled_gpu_ns else None,
        "instances": int(len(inst.op_id)),
        "instances_shown": int(len(per_instance)),
        "signatures": int(len(sig)),
        "above_peak": above.instances,
        "above_peak_cache": above.cache_served,
        "above_peak_unexplained": above.unexplained,
        "device_peaks": {str(d): peak_row_summary(r) for d, r in dev_rows.items()},
        "tf32_matmul": bool(prov.get("tf32_matmul", False)),
        "shapes_recorded": shapes_recorded(groups),
    }
    tables = {"per_instance": per_instance, "per_signature": sig, "unmodelled": unmodelled}
    if measured is not None:
        scalars.update(measured_scalars(measured, bytes_per_call[inst.group_of]))
        if measured.per_kernel is not None:
            tables["measured_kernels"] = measured_kernels_table(measured.per_kernel, groups, inst.group_of,
                                                                inst.op_id)
            warnings.append(measured_note(measured.per_kernel))
    matched = {d: r for d, r in dev_rows.items() if r}
    trust = {
        "instances_modelled": int(groups.loc[modelled, "calls"].sum()),
        "instances_unmodelled": int(groups.loc[~modelled, "calls"].sum()),
        "devices_matched": len(matched),
        "devices_unmatched": len(dev_rows) - len(matched),
        "tf32_from": "provenance" if "tf32_matmul" in prov else "default (off for matmul, on for cuDNN)",
        "measured_bytes": measured is not None,
        "measured_from": ("argument" if measured_bytes is not None else "ncu" if measured is not None else None),
        "instances_dtype_from_kernel_name": int(groups.loc[_dtype_from_names(groups), "calls"].sum()),
        "instances_dtype_conflicting": int(groups.loc[_dtype_conflicting(groups), "calls"].sum()),
        "instances_lists_from_accumulate_grad": int(groups.loc[_lists_from_grads(groups), "calls"].sum()),
    }
    if not len(inst.op_id):
        warnings.append("no GPU activity is attributed to a leaf operator: nothing to model.")
    return Result(name="bandwidth", definition=__doc__.strip(), scalars=scalars, tables=tables,
                  warnings=warnings, trust=trust)


# ---------------------------------------------------------------- the steps


#: Why a call without input shapes is unmodelled (not that no rule exists: a rule needs the shapes): none were
#: recorded, or (REGION_REASON) the trace has shapes and this operator is a region, not a call with tensor inputs.
NO_SHAPES_REASON = "input shapes not recorded (torch.profiler records them with record_shapes=True)"
REGION_REASON = ("no input shapes on this operator, though the trace has shapes: a region (a torch.compile region "
                 "replaying a CUDA graph, a record_function range), not an operator with tensor inputs")
#: Why nothing is modelled in a trace torch.profiler recorded with its defaults (a warning, and the pages' sentence).
NO_SHAPES = ("the trace was recorded without shapes (torch.profiler's default, record_shapes=False): no operator's "
             "FLOPs or bytes can be modelled; profile with record_shapes=True (or `kernelscope profile`) for "
             "bandwidth and roofline numbers.")


def shapes_recorded(groups: pd.DataFrame) -> bool:
    """False when the trace has operators with GPU time and none of them carries input shapes."""
    return not (len(groups) and groups["input_dims"].isna().all())


def _top_option(instances: int | str) -> int | None:
    """``instances`` as the number of ``per_instance`` rows per signature (None: all)."""
    if isinstance(instances, str) and instances.strip().lower() == "all":
        return None
    if isinstance(instances, (int, np.integer)) and not isinstance(instances, bool) and instances >= 0:
        return int(instances)
    raise UsageError(f"instances must be a whole number >= 0 or 'all', not {instances!r} "
                     "(e.g. -o instances=all).")


def _kernel_name_dtypes(store, trace_id: str) -> dict[str, str]:
    """{kernel name: the dtype it states} for kernels of operators recorded with shapes but no dtypes."""
    evidence = {}
    if int(store.query(_SQL_ANY_UNTYPED, {"t": trace_id}).iloc[0]["n"]):
        for kernel in store.query(_SQL_UNTYPED_KERNELS, {"t": trace_id})["name"]:
            if (dtype := kernel_name_dtype(kernel)) is not None:
                evidence[kernel] = dtype
    return evidence


def _read_groups(store, trace_id: str, evidence: dict[str, str]) -> tuple[Instances, pd.DataFrame]:
    """The instances (flat arrays sorted by group) and the groups table: one row per group of identical calls
    (signature, element-size hint, kernel-name dtype, device), its columns from its first instance."""
    if evidence:
        table = store.query_arrow(_SQL_INSTANCES.format(**_EVIDENCE),
                                  {"t": trace_id, "kn": list(evidence), "kd": list(evidence.values())})
    else:
        table = store.query_arrow(_SQL_INSTANCES.format(**_NO_EVIDENCE), {"t": trace_id})
    group_of = table.column("grp").to_numpy().astype("int64") if table.num_rows else np.zeros(0, "int64")
    flat = {c: np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype="int64")
            for c in ("op_id", "activities", "gpu_ns")}
    # by group (a stable sort: radix on 16-bit ints when there are fewer than 32767 groups, the usual case)
    order = np.argsort(group_of.astype(np.int16) if len(group_of) and group_of.max() < 32767 else group_of,
                       kind="stable")
    inst = Instances(group_of[order], flat["op_id"][order], flat["activities"][order], flat["gpu_ns"][order])
    starts = (np.flatnonzero(np.r_[True, inst.group_of[1:] != inst.group_of[:-1]]) if len(inst.group_of)
              else np.zeros(0, "int64"))
    starts = order[starts]  # a row of each group in the fetched table
    heads = table.select(["sig_id", "hint", "kdtype", "device", "host_copy"]).take(starts)
    sigs = store.query_arrow(_SQL_SIGNATURES, {"t": trace_id})  # sig_id = row number (0, 1, ...)
    sigs = (sigs.take(np.asarray(heads.column("sig_id").to_numpy(), dtype="int64")) if len(starts)
            else sigs.slice(0, 0))
    groups = pa.table({**{c: sigs.column(c) for c in ("name", "input_dims", "input_types", "input_strides",
                                                 "concrete_inputs")},
                  **{c: heads.column(c) for c in ("hint", "kdtype", "device", "host_copy")}}).to_pandas()
    groups["shapes_source"] = pd.Series(["trace"] * len(groups), dtype="object")
    groups["list_reason"] = pd.Series([None] * len(groups), dtype="object")
    return inst, groups


def _dtype_sources(groups: pd.DataFrame) -> tuple[list, list]:
    """Per group: the input types to model with and where their dtypes come from: ``trace`` (recorded),
    ``kernel_name`` (recorded shapes without dtypes, given the one dtype the group's kernel names state:
    ``opmodel.infer_input_types``), or None (no dtype known)."""
    types, sources = [], []
    for r in groups.itertuples(index=False):
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


def _reason(cost, list_reason, no_dims: bool, trace_has_dims: bool) -> str | None:
    """Why a call is unmodelled: its _foreach_ list's reason, else no shapes (either reason), else its rule's."""
    if cost.bytes is not None or not (isinstance(list_reason, str) or no_dims):
        return cost.reason
    return list_reason if isinstance(list_reason, str) else REGION_REASON if trace_has_dims else NO_SHAPES_REASON


def _model_groups(groups: pd.DataFrame, *, tf32_matmul: bool, tf32_conv: bool) -> None:
    """``flops``, ``bytes``, ``dtype``, ``tensor_core``, ``rule``, ``reason`` and ``dtype_source`` of one call
    of each group (``opmodel.model_op``)."""
    types, sources = _dtype_sources(groups)
    memo: dict = {}  # model_op is a function of its arguments: groups with equal ones (the _foreach_ instances
    costs = []       # of one optimizer step in every recorded step) are modelled once
    for r, ty in zip(groups.itertuples(index=False), types):
        hint = int(r.hint) if isinstance(r.hint, str) else None
        args = (r.name, r.input_dims, ty, r.input_strides, r.concrete_inputs)
        try:
            cost = memo[args + (hint,)]
        except KeyError:
            cost = memo[args + (hint,)] = model_op(*args, elem_size_hint=hint, tf32_matmul=tf32_matmul,
                                                   tf32_conv=tf32_conv)
        except TypeError:  # an unhashable argument: modelled alone
            cost = model_op(*args, elem_size_hint=hint, tf32_matmul=tf32_matmul, tf32_conv=tf32_conv)
        costs.append(cost)
    groups["flops"] = pd.array([c.flops for c in costs], dtype="Int64")
    groups["bytes"] = pd.array([c.bytes for c in costs], dtype="Int64")
    groups["dtype"] = pd.Series([c.dtype for c in costs], dtype="object")
    groups["tensor_core"] = pd.Series([c.tensor for c in costs], dtype=bool)
    groups["rule"] = pd.Series([c.rule for c in costs], dtype="object")
    no_dims = groups["input_dims"].isna().to_numpy(bool)
    has_dims = not no_dims.all()
    groups["reason"] = pd.Series([_reason(c, lr, nd, has_dims) for c, lr, nd in
                                  zip(costs, groups["list_reason"], no_dims)], dtype="object")
    groups["dtype_source"] = pd.Series(sources, dtype="object")
    host = groups["host_copy"].to_numpy(bool) if len(groups) else np.zeros(0, bool)
    groups.loc[host, ["flops", "bytes"]] = pd.NA  # a host-device copy: unmodelled, with its reason
    groups.loc[host, "reason"] = HOST_COPY_REASON


def _match_devices(groups: pd.DataFrame, unattributed: pd.Series, names: dict[int, str], peak_table: list,
                   device: str | None, warnings: list[str]) -> dict[int, dict[str, Any] | None]:
    """{device: its peak row, None when not in the table (with a warning)} for every device with GPU
    activity, also one whose activities have no operator (a graph-only trace)."""
    dev_rows: dict[int, dict[str, Any] | None] = {}
    un_devices = unattributed["devices"] if isinstance(unattributed["devices"], (list, np.ndarray)) else []
    devices = {int(x) for x in groups["device"].dropna().unique()} | {int(x) for x in un_devices}
    for d in sorted(devices):
        name = device or names.get(d) or (next(iter(names.values())) if len(names) == 1 else None)
        dev_rows[d] = match_device(name, peak_table)
        if dev_rows[d] is None:
            warnings.append(f"device {d} ({name or 'no name in the trace'}) is not in the device-peak table: "
                            f"no % of peak and no bound; add a row with peaks=PATH or ${PEAKS_ENV}.")
    return dev_rows


def _attach_peaks(groups: pd.DataFrame, dev_rows: dict[int, dict[str, Any] | None]) -> None:
    """Per group, its device's peaks: ``peak_gbps`` (DRAM), ``peak_tflops`` (the dense peak its dtype and
    tensor-core use select), ``l2_bytes`` (last-level cache) and ``fits_cache`` (its bytes fit in it)."""
    peak_gbps, peak_tflops, l2_bytes = [], [], []
    for d, dtype, tensor_core in zip(groups["device"], groups["dtype"], groups["tensor_core"]):
        row = dev_rows.get(int(d)) if d is not None and not pd.isna(d) else None
        column = peak_tflops_column(dtype, tensor_core)
        peak_gbps.append(row["mem_bw_gbps"] if row else None)
        peak_tflops.append(row.get(column) if row and column else None)
        l2_bytes.append(row["l2_mb"] * BYTES_PER_MIB if row and row.get("l2_mb") else None)
    groups["peak_gbps"] = pd.array(peak_gbps, dtype="Float64")
    groups["peak_tflops"] = pd.array(peak_tflops, dtype="Float64")
    groups["l2_bytes"] = pd.array(l2_bytes, dtype="Float64")
    groups["fits_cache"] = (groups["bytes"].astype("Float64") <= groups["l2_bytes"]).fillna(False).astype(bool)


def _sum_instances(groups: pd.DataFrame, inst: Instances) -> None:
    """Per group sums over its instances: ``calls``, ``gpu_ns``, ``activities`` (float sums are exact below
    2**53 ns)."""
    n = len(groups)
    groups["calls"] = np.bincount(inst.group_of, minlength=n).astype("int64")
    groups["gpu_ns"] = np.bincount(inst.group_of, weights=inst.gpu_ns, minlength=n).astype("int64") if n else []
    groups["activities"] = (np.bincount(inst.group_of, weights=inst.activities, minlength=n).astype("int64") if n
                            else [])


def _above_peak(groups: pd.DataFrame, inst: Instances) -> AbovePeak:
    """Above-peak counts over every instance: an instance is above a peak when its GPU time is shorter than
    the time the peak needs for its group's bytes (FLOPs): gpu_ns < bytes / peak_gbps. Sets
    ``groups["cache_explains"]`` (every call of the group above the DRAM peak is explained), which
    signatures_table reads."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ns_at_peak_bw = np.nan_to_num(floats(groups["bytes"]) / floats(groups["peak_gbps"]), nan=-1.0)
        ns_at_peak_flops = np.nan_to_num(floats(groups["flops"]) / (floats(groups["peak_tflops"]) * GFLOP_PER_TFLOP),
                                         nan=-1.0)
    gpu_ns, group_of = inst.gpu_ns, inst.group_of
    ran = gpu_ns > 0
    over_bw = (gpu_ns < ns_at_peak_bw[group_of]) & ran
    over_flops = (gpu_ns < ns_at_peak_flops[group_of]) & ran
    explained = cache_explains(floats(groups["bytes"])[group_of], gpu_ns.astype(float),
                               floats(groups["peak_gbps"])[group_of], floats(groups["l2_bytes"])[group_of])
    # per group: every call above the DRAM peak is explained (signatures_table's rows say so)
    groups["cache_explains"] = np.bincount(group_of, weights=over_bw & ~explained, minlength=len(groups)) == 0
    above = int((over_bw | over_flops).sum())
    unexplained = int(((over_bw & ~explained) | over_flops).sum())
    return AbovePeak(above, above - unexplained, unexplained)


def _per_instance_table(groups: pd.DataFrame, inst: Instances, signature_of: np.ndarray, top: int | None,
                        measured: Measured | None) -> pd.DataFrame:
    """``per_instance``: the top instances of each signature by GPU time (ties: lower op id), or all, by op id,
    with their group's model and their own rates."""
    op_ids = inst.op_id
    keep = np.arange(len(op_ids)) if top is None else top_instances(inst.group_of, signature_of, op_ids,
                                                                    inst.gpu_ns, top)
    keep = keep[np.argsort(op_ids[keep], kind="stable")]
    kept_group = inst.group_of[keep]  # the group of each kept instance
    df = pd.DataFrame({"op_id": op_ids[keep], "name": repeat_per_instance(groups["name"], kept_group),
                       "signature": signature_of[keep], "device": groups["device"].to_numpy()[kept_group],
                       "activities": inst.activities[keep], "gpu_ns": inst.gpu_ns[keep]})
    for col in ("flops", "bytes"):
        df[col] = groups[col].take(kept_group).reset_index(drop=True)
    df["dtype"] = repeat_per_instance(groups["dtype"], kept_group)
    df["tensor_core"] = groups["tensor_core"].to_numpy(bool)[kept_group]
    df["rule"] = repeat_per_instance(groups["rule"], kept_group)
    df["dtype_source"] = repeat_per_instance(groups["dtype_source"], kept_group)
    df["shapes_source"] = repeat_per_instance(groups["shapes_source"], kept_group)
    bytes_moved, flops = floats(groups["bytes"])[kept_group], floats(groups["flops"])[kept_group]
    peak_gbps, peak_tflops = floats(groups["peak_gbps"])[kept_group], floats(groups["peak_tflops"])[kept_group]
    fits_cache = groups["fits_cache"].to_numpy(bool)[kept_group]
    with np.errstate(divide="ignore", invalid="ignore"):
        gpu_ns = np.where(inst.gpu_ns[keep] > 0, inst.gpu_ns[keep].astype(float), np.nan)
        achieved_gbps, achieved_tflops = bytes_moved / gpu_ns, flops / gpu_ns / GFLOP_PER_TFLOP
        pct_peak_bw, pct_peak_flops = 100 * achieved_gbps / peak_gbps, 100 * achieved_tflops / peak_tflops
    df["achieved_gbps"], df["achieved_tflops"] = achieved_gbps, achieved_tflops
    df["pct_peak_flops"] = pct_peak_flops
    df["intensity"] = floats(groups["intensity"])[kept_group]
    df["bound"] = repeat_per_instance(groups["bound"], kept_group)
    df["fits_cache"] = fits_cache
    df["peak_gbps"], df["peak_tflops"] = peak_gbps, peak_tflops
    l2_bytes = floats(groups["l2_bytes"])[kept_group]
    explained = cache_explains(bytes_moved, gpu_ns, peak_gbps, l2_bytes)
    df["note"] = notes(pct_peak_bw, pct_peak_flops, explained, bytes_moved, l2_bytes, peak_gbps * gpu_ns)
    df["pct_peak_bw"] = np.where((pct_peak_bw > 100) & explained, np.nan, pct_peak_bw)  # cache-served: see note
    if measured is not None:
        measured_bytes = measured.per_instance[keep]
        mk = pd.array(np.where(np.isnan(measured_bytes), 0, measured_bytes).astype("int64"), dtype="Int64")
        mk[np.isnan(measured_bytes)] = pd.NA
        df["measured_bytes"] = mk
        with np.errstate(divide="ignore", invalid="ignore"):
            df["measured_gbps"] = measured_bytes / gpu_ns
            df["modelled_over_measured"] = bytes_moved / np.where(measured_bytes > 0, measured_bytes, np.nan)
        if measured.per_kernel is not None and "ncu_duration_ns" in measured.per_op.columns:
            d = measured.per_op.set_index("op_id")["ncu_duration_ns"]
            df["ncu_duration_ns"] = pd.array(d.reindex(df["op_id"]).to_numpy(), dtype="Int64")
    return df


def _unmodelled_table(unmodelled_groups: pd.DataFrame, total_gpu_ns: int) -> pd.DataFrame:
    """``unmodelled``: per operator name and reason, the calls and GPU time of groups no rule models."""
    df = (unmodelled_groups.groupby(["name", "reason"], dropna=False, sort=False)
          .agg(calls=("calls", "sum"), gpu_ns=("gpu_ns", "sum")).reset_index()
          .sort_values(["gpu_ns", "name"], ascending=[False, True], kind="stable"))
    df["gpu_ns"] = df["gpu_ns"].astype("int64")
    df["calls"] = df["calls"].astype("int64")
    df["share"] = df["gpu_ns"] / total_gpu_ns if total_gpu_ns else float("nan")
    return df[["name", "calls", "gpu_ns", "share", "reason"]].reset_index(drop=True)


def _dtype_from_names(groups: pd.DataFrame) -> np.ndarray:
    return groups["dtype_source"].eq("kernel_name").to_numpy(bool)


def _dtype_conflicting(groups: pd.DataFrame) -> np.ndarray:
    untyped = (groups["input_types"].isna() & groups["input_dims"].notna()).to_numpy(bool)
    return untyped & groups["kdtype"].eq(MIXED).fillna(False).to_numpy(bool)


def _lists_from_grads(groups: pd.DataFrame) -> np.ndarray:
    return groups["shapes_source"].eq("accumulate_grad").to_numpy(bool)


def _model_warnings(groups: pd.DataFrame, above: AbovePeak, unattributed: pd.Series) -> list[str]:
    """What the model's numbers need said beside them, in this order: above-peak instances, dtypes from
    kernel names or in conflict, tensor lists from gradients, no shapes, GPU work with no leaf operator."""
    warnings = []
    if above.cache_served:
        warnings.append(f"{above.cache_served} operator instances move their modelled bytes faster than the DRAM "
                        "peak (above 100% of it); the bytes beyond what DRAM moves at its peak in their time fit in "
                        "the device's last-level cache, so inputs written just before were read from cache, not "
                        "DRAM: their pct_peak_bw is null and 'note' says why.")
    if above.unexplained:
        warnings.append(f"{above.unexplained} operator instances exceed 100% of a device peak without a cache "
                        "explanation (a modelling or peak-table error): read their numbers with care.")
    from_names, conflicting = _dtype_from_names(groups), _dtype_conflicting(groups)
    from_grads = _lists_from_grads(groups)
    if from_names.any():
        warnings.append(f"{int(groups.loc[from_names, 'calls'].sum())} operator instances "
                        f"({int(groups.loc[from_names, 'gpu_ns'].sum())} ns) were recorded without dtypes; "
                        "their dtype was taken from the dtype word their kernels' names agree on "
                        "(dtype_source = 'kernel_name').")
    if conflicting.any():
        warnings.append(f"{int(groups.loc[conflicting, 'calls'].sum())} operator instances recorded without "
                        "dtypes have kernels whose names state different dtypes (casts, mixed precision): "
                        "no dtype inferred, left unmodelled.")
    if from_grads.any():
        warnings.append(f"{int(groups.loc[from_grads, 'calls'].sum())} _foreach_ operator instances "
                        f"({int(groups.loc[from_grads, 'gpu_ns'].sum())} ns) were given the tensor lists of the "
                        "gradients accumulated before them (shapes_source = 'accumulate_grad'; the "
                        "profiler records no tensor-list shapes), checked against their kernels' thread blocks.")
    if not shapes_recorded(groups):
        warnings.append(NO_SHAPES)
    if int(unattributed["ns"]):
        warnings.append(f"{int(unattributed['n'])} GPU activities ({int(unattributed['ns'])} ns) have no leaf "
                        "operator (CUDA-graph replays or launches outside the trace) and are not modelled.")
    return warnings
