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
    g_shape, g_type = [], []
    parsed: dict = {}  # a training run repeats its gradients' shapes every step: parse each text once
    for d_text, ty_text in zip(grads["input_dims"], grads["input_types"]):
        try:
            shape, dt = parsed[(d_text, ty_text)]
        except (KeyError, TypeError):
            d, ty = json_value(d_text) or [], json_value(ty_text) or []
            ok = bool(d) and isinstance(d[0], list) and all(isinstance(i, int) for i in d[0])
            shape, dt = d[0] if ok else None, ty[0] if ty and isinstance(ty[0], str) else None
            try:
                parsed[(d_text, ty_text)] = (shape, dt)
            except TypeError:
                pass
        g_shape.append(shape)
        g_type.append(dt)
    g_text = list(grads["input_dims"])
    f_start = fe["start_ns"].to_numpy("int64")
    out: dict[int, ForeachList] = {}
    lists_at: dict = {}
    by_text: dict = {}
    for r in fe.itertuples(index=False):
        names = list(r.kernels) if isinstance(r.kernels, (list, tuple, np.ndarray)) else []
        if not names:
            continue  # no multi_tensor_apply kernel: nothing to model (CPU work, or other kernels)
        i = int(np.searchsorted(g_start, r.start_ns, side="left"))  # AccumulateGrad calls before it: [0, i)
        if not i:
            out[int(r.op_id)] = _none("tensor-list shapes not recorded, and no AccumulateGrad before it in the "
                                      "trace to infer them from")
            continue
        j = int(np.searchsorted(f_start, g_start[i - 1], side="left"))  # _foreach_ ops before the last one
        lo = int(np.searchsorted(g_start, f_start[j - 1], side="right")) if j else 0
        dtypes = {kernel_name_dtype(m.group(1)) if (m := _FUNCTOR_DTYPE.search(n)) else None for n in names}
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        if int(r.other) or dtype is None or dtype == MIXED or dtype not in DTYPES:
            out[int(r.op_id)] = _none("tensor-list shapes not recorded, and its kernels do not name one element "
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
        if not shapes or blocks != int(r.blocks):
            out[int(r.op_id)] = _none(f"tensor-list shapes not recorded; the {len(shapes)} gradients "
                                      f"accumulated before it need {blocks} thread blocks, its kernels ran "
                                      f"{int(r.blocks)}")
            continue
        out[int(r.op_id)] = ForeachList(shapes, dtype, None)
    return out


def explode_foreach(store, t: str, g: pd.DataFrame, gi: np.ndarray, op_ids: np.ndarray) -> pd.DataFrame:
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
    base: dict[int, dict] = {}  # group -> its row (instances of one group share it)
    dims_text: dict = {}  # (group, list, dtype) -> input_dims text (the instances of one step share their list)
    for k, p in enumerate(pos):
        grp = int(gi[p])
        if grp not in base:
            base[grp] = g.iloc[grp].to_dict()
        row = dict(base[grp])
        shapes, dtype, reason = lists.get(int(op_ids[p]), NO_LIST)
        if shapes is not None:
            at = (grp, id(shapes), dtype)  # the lists live in ``lists`` while this runs: ids stay unique
            if at not in dims_text:
                types = json_value(row["input_types"]) or []
                dims = json_value(row["input_dims"]) or [[] for _ in types]
                dims = [shapes if ty == "TensorList" else (dims[x] if x < len(dims) else [])
                        for x, ty in enumerate(types)]
                dims_text[at] = json.dumps(dims)
            row.update(input_dims=dims_text[at], hint=str(DTYPES[dtype][0]), shapes_source="accumulate_grad")
        else:
            row["list_reason"] = reason
        rows.append(row)
        gi[p] = len(g) + k
    g = pd.concat([g, pd.DataFrame(rows)], ignore_index=True)
    keep = np.bincount(gi, minlength=len(g)) > 0
    new_no = np.cumsum(keep) - 1
    gi[:] = new_no[gi]
    return g.loc[keep].reset_index(drop=True)

