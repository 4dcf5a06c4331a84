"""Measured DRAM bytes beside the bandwidth analysis' modelled ones: from its ``measured_bytes`` argument, else
Nsight Compute rows matched to the trace's kernels (``storage.ncu.measured_dram_bytes``), per instance
(``measured_per_instance``), summed over the measured instances (``measured_scalars``), and Nsight Compute's rows with
their operator (``measured_kernels_table``, ``measured_note``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import UsageError
from ..storage.ncu import measured_dram_bytes


@dataclass
class Measured:
    """Measured DRAM bytes: per instance (NaN where not measured), per operator (``op_id, measured_bytes``,
    plus ``ncu_duration_ns`` from Nsight Compute), per kernel (Nsight Compute rows; None when given as the
    ``measured_bytes`` argument)."""

    per_instance: np.ndarray
    per_op: pd.DataFrame
    per_kernel: pd.DataFrame | None


def measured_per_instance(store, trace_id: str, measured_bytes: pd.DataFrame | None,
                          op_ids: np.ndarray) -> Measured | None:
    """Measured bytes per instance (``op_ids``: the instances' operators): the ``measured_bytes`` argument,
    else Nsight Compute rows in the store (``storage.ncu.measured_dram_bytes``); None when neither has any."""
    per_kernel = None
    if measured_bytes is not None:
        if not {"op_id", "measured_bytes"} <= set(measured_bytes.columns):
            raise UsageError("measured bytes need the columns op_id and measured_bytes (one row per operator).")
        per_op = measured_bytes[["op_id", "measured_bytes"]]
    else:
        per_kernel, per_op = measured_dram_bytes(store, trace_id)
    if per_op is None:
        return None
    m = per_op.dropna(subset=["measured_bytes"])
    m_op, m_bytes = m["op_id"].to_numpy("int64"), m["measured_bytes"].to_numpy("int64")
    by_op = np.argsort(op_ids, kind="stable")
    at = np.searchsorted(op_ids[by_op], m_op)
    hit = at < len(by_op)
    hit[hit] = op_ids[by_op][at[hit]] == m_op[hit]
    per_instance = np.full(len(op_ids), np.nan)
    per_instance[by_op[at[hit]]] = m_bytes[hit]
    return Measured(per_instance, per_op, per_kernel)


def measured_scalars(measured: Measured, modelled_bytes_per_instance: np.ndarray) -> dict[str, Any]:
    """``measured_instances``, ``measured_bytes``, ``measured_modelled_bytes`` and ``modelled_over_measured``
    over the instances with a measurement (the modelled sum is null when any of them is unmodelled)."""
    has = ~np.isnan(measured.per_instance)
    measured_sum = int(measured.per_instance[has].sum())
    modelled = modelled_bytes_per_instance[has]
    modelled_sum = int(np.nansum(modelled)) if np.isfinite(modelled).all() else None
    return {"measured_instances": int(has.sum()), "measured_bytes": measured_sum,
            "measured_modelled_bytes": modelled_sum,
            "modelled_over_measured": (modelled_sum / measured_sum if modelled_sum is not None and measured_sum
                                       else None)}


def measured_kernels_table(per_kernel: pd.DataFrame, g: pd.DataFrame, group_of: np.ndarray,
                           op_ids: np.ndarray) -> pd.DataFrame:
    """``measured_kernels``: the Nsight Compute rows with the name and signature of their operator (``g``: the
    groups table; ``group_of``, ``op_ids``: each instance's group and operator)."""
    by_op = np.argsort(op_ids, kind="stable")
    kernel_ops = per_kernel["op_id"].to_numpy("int64")
    at = np.minimum(np.searchsorted(op_ids[by_op], kernel_ops), max(len(by_op) - 1, 0))
    found = op_ids[by_op][at] == kernel_ops if len(by_op) else np.zeros(len(kernel_ops), bool)
    group = np.where(found, group_of[by_op[at]], -1) if len(by_op) else np.full(len(kernel_ops), -1)
    df = per_kernel.assign(name=[g["name"].iloc[j] if j >= 0 else None for j in group],
                           signature=pd.array([g["signature"].iloc[j] if j >= 0 else None for j in group],
                                              dtype="Int64"))
    return df[["activity_id", "op_id", "name", "signature", "kernel", "dur_ns", "ncu_duration_ns",
               "dram_bytes_read", "dram_bytes_write", "measured_bytes", "cache_control", "clock_control"]]


def measured_note(per_kernel: pd.DataFrame) -> str:
    """What Nsight Compute's DRAM bytes are, with the cache and clock control settings they were taken with."""
    settings = sorted({f"cache control '{a}', clock control '{b}'"
                       for a, b in zip(per_kernel["cache_control"], per_kernel["clock_control"])})
    return (f"measured bytes are Nsight Compute's DRAM bytes ({'; '.join(settings)}): ncu runs "
            "each kernel alone (cache control 'all' flushes the caches first), writes still in "
            "L2 when a kernel ends and re-reads served by L2 are not DRAM traffic, so measured "
            "bytes can fall below the modelled minimum, and extra passes can push them above; "
            "measured_gbps divides them by the traced GPU time." + (
                " Its durations (ncu_duration_ns) are about 1.3-2.5x the traced ones: clock control 'base' locks "
                "the clocks to base, below the boost clocks a traced run gets."
                if any(c == "base" for c in per_kernel["clock_control"]) else ""))
