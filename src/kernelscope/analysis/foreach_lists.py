"""Tensor lists of ``_foreach_*`` operators (optimizer steps), which Kineto does not record: inferred from the
gradients ``AccumulateGrad`` recorded before them and checked against their multi_tensor_apply kernels'
thread blocks (``foreach_lists``), and given to the bandwidth analysis' groups of calls
(``explode_foreach``). The rule is in docs/metrics.md, "Tensor lists of _foreach_ operators".
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from .kernel_dtypes import MIXED, kernel_name_dtype
from .opmodel import foreach_chunks
from .opmodel_inputs import DTYPES, json_value

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


class ForeachList(NamedTuple):
    """The tensor list inferred for one ``_foreach_*`` operator: ``shapes`` (None when none was inferred,
    ``reason`` then says why) and the element ``dtype``."""

    shapes: list | None
    dtype: str | None
    reason: str | None


NO_LIST = ForeachList(None, None, None)


def _none(reason: str) -> ForeachList:
    return ForeachList(None, None, reason)

_FUNCTOR_DTYPE = re.compile(r"Functor<\s*([^,<>]+)")


def foreach_lists(store, trace_id: str) -> dict[int, ForeachList]:
    """Tensor lists of the trace's ``_foreach_*`` operators, which Kineto does not record:
    ``{op_id: ForeachList(shapes, dtype, reason)}``, ``shapes`` None and a ``reason`` when none is inferred.

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
    g_text = grads["input_dims"].tolist()  # plain lists: iterating Arrow-backed columns costs ~2 us a value
    g_shape, g_type = [], []
    parsed: dict = {}  # a training run repeats its gradients' shapes every step: parse each text once
    for texts in zip(g_text, grads["input_types"].tolist()):  # VARCHAR columns: str or None, hashable
        if texts not in parsed:
            d, ty = json_value(texts[0]) or [], json_value(texts[1]) or []
            ok = bool(d) and isinstance(d[0], list) and all(isinstance(i, int) for i in d[0])
            parsed[texts] = (d[0] if ok else None, ty[0] if ty and isinstance(ty[0], str) else None)
        shape, dt = parsed[texts]
        g_shape.append(shape)
        g_type.append(dt)
    f_start = fe["start_ns"].to_numpy("int64")
    # For every operator at once: AccumulateGrad calls before it are [0, i); the _foreach_ operators before the
    # last of those are [0, j); the gradients after the last of those start at lo.
    i_all = np.searchsorted(g_start, f_start, side="left")
    if len(g_start):
        j_all = np.searchsorted(f_start, g_start[np.maximum(i_all - 1, 0)], side="left")
        lo_all = np.where(j_all > 0, np.searchsorted(g_start, f_start[np.maximum(j_all - 1, 0)], side="right"), 0)
    else:  # no gradient at all: every operator with kernels says so (i = 0)
        lo_all = np.zeros(len(f_start), "int64")
    out: dict[int, ForeachList] = {}
    lists_at: dict = {}
    by_text: dict = {}
    dtype_of: dict = {}  # kernel names -> the one dtype their functors name (every step repeats its kernels)
    for op_id, kernels, other, n_blocks, i, lo in zip(fe["op_id"].tolist(), fe["kernels"].tolist(),
                                                       fe["other"].tolist(), fe["blocks"].tolist(),
                                                       i_all.tolist(), lo_all.tolist()):
        names = tuple(kernels) if isinstance(kernels, (list, tuple, np.ndarray)) else ()
        if not names:
            continue  # no multi_tensor_apply kernel: nothing to model (CPU work, or other kernels)
        if not i:
            out[int(op_id)] = _none("tensor-list shapes not recorded, and no AccumulateGrad before it in the "
                                    "trace to infer them from")
            continue
        if names not in dtype_of:
            dtypes = {kernel_name_dtype(m.group(1)) if (m := _FUNCTOR_DTYPE.search(n)) else None for n in names}
            dtype_of[names] = dtypes.pop() if len(dtypes) == 1 else None
        dtype = dtype_of[names]
        if int(other) or dtype is None or dtype == MIXED or dtype not in DTYPES:
            out[int(op_id)] = _none("tensor-list shapes not recorded, and its kernels do not name one element "
                                    "dtype (or include other kernels)")
            continue
        if (lo, i, dtype) not in lists_at:  # the _foreach_ calls of one optimizer step share their list,
            ks = [k for k in range(lo, i) if g_type[k] == dtype and g_shape[k] is not None]
            text = tuple(g_text[k] for k in ks)  # and every step of a run has one of equal content: one object
            if text not in by_text:
                got = [g_shape[k] for k in ks]
                by_text[text] = (got, foreach_chunks(got))
            lists_at[(lo, i, dtype)] = by_text[text]
        shapes, blocks = lists_at[(lo, i, dtype)]
        if not shapes:  # "the 0 gradients ... need 0 thread blocks" told a user nothing: say what is missing
            recorded = any(g_shape[k] is not None for k in range(lo, i))
            out[int(op_id)] = _none(
                f"tensor-list shapes not recorded, and no gradient accumulated before it is {dtype}" if recorded
                else "tensor-list shapes not recorded, and the AccumulateGrad calls before it have no shapes "
                     "either (recorded without record_shapes=True)")
            continue
        if blocks != int(n_blocks):
            out[int(op_id)] = _none(f"tensor-list shapes not recorded; the {len(shapes)} gradients "
                                    f"accumulated before it need {blocks} thread blocks, its kernels ran "
                                    f"{int(n_blocks)}")
            continue
        out[int(op_id)] = ForeachList(shapes, dtype, None)
    return out


def explode_foreach(store, t: str, g: pd.DataFrame, gi: np.ndarray, op_ids: np.ndarray) -> pd.DataFrame:
    """Move every ``_foreach_*`` instance to a group row of its own group and what it got: the inferred tensor
    lists in ``input_dims`` (``shapes_source = 'accumulate_grad'``, ``hint`` = element size) or the reason none
    was inferred (``list_reason``); instances of one group that got the same (every step of a run: the same
    list) share that row. ``gi`` (group of each instance) is updated in place; emptied groups are dropped and
    the rest renumbered."""
    is_fe = g["name"].map(lambda n: isinstance(n, str) and n.startswith("aten::_foreach_")).to_numpy(bool)
    if not is_fe.any():
        return g
    lists = foreach_lists(store, t)
    pos = np.flatnonzero(is_fe[gi])
    rows = []
    row_of: dict = {}  # (group, what its instance got) -> the new row's number
    for p in pos:
        grp = int(gi[p])
        shapes, dtype, reason = lists.get(int(op_ids[p]), NO_LIST)
        # the lists live in ``lists`` while this runs, and lists of equal content are one object: ids stay unique
        got = (grp, id(shapes), dtype) if shapes is not None else (grp, None, reason)
        if got not in row_of:
            row = g.iloc[grp].to_dict()
            if shapes is not None:
                types = json_value(row["input_types"]) or []
                dims = json_value(row["input_dims"]) or [[] for _ in types]
                dims = [shapes if ty == "TensorList" else (dims[x] if x < len(dims) else [])
                        for x, ty in enumerate(types)]
                row.update(input_dims=json.dumps(dims), hint=str(DTYPES[dtype][0]), shapes_source="accumulate_grad")
            else:
                row["list_reason"] = reason
            row_of[got] = len(g) + len(rows)
            rows.append(row)
        gi[p] = row_of[got]
    g = pd.concat([g, pd.DataFrame(rows)], ignore_index=True)
    keep = np.bincount(gi, minlength=len(g)) > 0
    new_no = np.cumsum(keep) - 1
    gi[:] = new_no[gi]
    return g.loc[keep].reset_index(drop=True)

