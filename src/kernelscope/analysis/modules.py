"""nn.Module tree of one trace recorded with ``with_modules=True``: calls, CPU time and GPU kernel time per
module instance, per instance path and per module class, backward kernels rolled up to their forward module.

Definitions (docs/metrics.md, "Modules", is the canonical text; every time is an integer number of ns):

- A **module call** is an ``nn.Module: <Class>_<k>`` range that torch.profiler records with
  ``with_modules=True`` (a ``python_function`` event on the thread that ran the forward). ``<Class>_<k>`` is the
  **instance**: the class name and the profiler's per-class instance index (Qwen2DecoderLayer_3 is the fourth
  Qwen2DecoderLayer the profiler saw). The trace holds no attribute names (``model.layers.3.self_attn``), so a
  module is named by its **instance path**: the instances of the module calls enclosing it, outermost first
  (``Qwen2ForCausalLM_0/Qwen2Model_0/Qwen2DecoderLayer_3/Qwen2Attention_3``). Nesting is time containment on the
  thread (storage/pycontext.py).
- **CPU time** ``cpu_ns`` (inclusive): the summed duration of the module's calls (its forward, wall time on
  the host thread); ``cpu_self_ns`` = ``cpu_ns`` minus the durations of the module calls directly inside it.
  ``cpu_bwd_ns``: the summed duration of the outermost backward operators (autograd's ``evaluate_function``
  ranges) whose forward operator ran inside the module (inclusive of its children).
- **GPU kernel time** counts kernels (``kind = 'kernel'``; not memcpy/memset), each with its full duration (a
  sum, not a union). A kernel belongs to the innermost module call open on its launch call's thread when the
  launch call started (**forward**, ``gpu_fwd_ns``). A kernel launched by a **backward** operator (on the
  autograd thread, which runs no Python) is **rolled up** to the module of that operator's forward operator:
  the forward operator with the same ``Sequence number`` (the one the profiler's ``fwdbwd`` flow points to)
  (``gpu_bwd_ns``). ``gpu_ns = gpu_fwd_ns + gpu_bwd_ns``, inclusive of the module's children;
  ``gpu_self_ns``: only the kernels whose innermost module is this one. ``kernels``, ``launches``: how many
  kernels and launch calls (inclusive).
- **Per instance** (``instances``): the sums over the instance's calls; **per class** (``classes``): the sums
  over its instances' calls, inclusive numbers counting a call nested inside a call of the same class once (at
  the outer call); ``instances`` counts the class's distinct instances.
- ``module_kernel_ns``: kernel time inside some module (forward or rolled up); ``outside_kernel_ns`` the rest
  of the kernel time with a launch call (optimizer steps, the loss seed, gradient accumulation, ops outside the model);
  ``outside`` lists it by top-level operator; ``trust.no_launch_kernel_ns`` is the kernel time without a launch
  call in the trace (queued before the profiler started: not attributable). ``module_kernel_ns +
  outside_kernel_ns + trust.no_launch_kernel_ns = kernel_time_ns`` (every kernel).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..storage import modules as sm
from ..units import ns_to_ms
from .result import Result

DESCRIPTION = ("nn.Module tree (with_modules): calls, CPU time and forward/backward GPU kernel time per module "
               "instance, instance path and class.")

NO_MODULES = ("this trace has no nn.Module ranges: record it with torch.profiler.profile(with_stack=True, "
              "with_modules=True) (an eager model's module ranges come from the Python tracer that with_stack=True "
              "turns on; with_modules=True alone does not record them) or kernelscope.profile(with_modules=True), "
              "which turns both on, to see time per module.")

#: torch.compile's wrapper (torch._dynamo's OptimizedModule): the model it wraps runs as compiled graphs.
COMPILED_CLASS = "OptimizedModule"

_SUMS = ["cpu_ns", "cpu_self_ns", "cpu_bwd_ns", "gpu_fwd_ns", "gpu_bwd_ns", "gpu_ns", "gpu_self_ns", "kernels",
         "launches"]
_SELF = ["cpu_self_ns", "gpu_self_ns"]
TREE_COLUMNS = ["path", "parent_path", "module", "class", "depth", "calls", *_SUMS]
INSTANCE_COLUMNS = ["module", "class", "paths", "calls", *_SUMS]
CLASS_COLUMNS = ["class", "instances", "calls", *_SUMS]
OUTSIDE_COLUMNS = ["top_op", "backward", "kernels", "gpu_ns"]


def _empty(columns: list[str]) -> pd.DataFrame:
    text = {"path", "parent_path", "module", "class", "top_op"}
    return pd.DataFrame({c: pd.Series(dtype="object" if c in text else "bool" if c == "backward" else "int64")
                         for c in columns})


def _ints(df: pd.DataFrame, cols) -> pd.DataFrame:
    for c in cols:
        df[c] = df[c].fillna(0).astype("int64")
    return df


def tree_table(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per instance path, in the order the paths first started (a depth-first order)."""
    g = calls.groupby("path", sort=False)
    out = g.agg(module=("module", "first"), klass=("class", "first"), depth=("depth", "first"),
                calls=("call_id", "size"), first=("start_ns", "min"),
                **{c: (c, "sum") for c in _SUMS}).reset_index().rename(columns={"klass": "class"})
    out["parent_path"] = out["path"].str.rpartition("/")[0].replace("", None)
    out = out.sort_values(["first", "depth"], kind="stable")
    return _ints(out[TREE_COLUMNS].reset_index(drop=True), ["depth", "calls", *_SUMS])


def instance_table(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per module instance, most GPU time first."""
    out = calls.groupby("module", sort=False).agg(
        klass=("class", "first"), paths=("path", "nunique"), calls=("call_id", "size"),
        **{c: (c, "sum") for c in _SUMS}).reset_index().rename(columns={"klass": "class"})
    out = out.sort_values(["gpu_ns", "cpu_ns", "module"], ascending=[False, False, True], kind="stable")
    return _ints(out[INSTANCE_COLUMNS].reset_index(drop=True), ["paths", "calls", *_SUMS])


def class_table(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per module class, most GPU time first; inclusive sums over the calls not nested in a call of the
    same class, self sums over every call."""
    outer = calls[~calls["nested_in_same_class"].astype(bool)]
    incl = [c for c in _SUMS if c not in _SELF]
    a = outer.groupby("class", sort=False)[incl].sum()
    b = calls.groupby("class", sort=False).agg(instances=("module", "nunique"), calls=("call_id", "size"),
                                               **{c: (c, "sum") for c in _SELF})
    out = b.join(a, how="left").reset_index()
    out = out.sort_values(["gpu_ns", "cpu_ns", "class"], ascending=[False, False, True], kind="stable")
    return _ints(out[CLASS_COLUMNS].reset_index(drop=True), ["instances", "calls", *_SUMS])


def compiled_note(tree: pd.DataFrame) -> str | None:
    """A sentence when torch.compile ran some module (a child of an OptimizedModule): the modules inside it run as
    its compiled graphs and record no ranges, so their GPU time is its self time (a torch.compile'd ViT-B/16 on an
    H100 showed two modules, OptimizedModule_0 over ViTForImageClassification_0, and no word why)."""
    wrapped = tree[tree["parent_path"].isin(tree.loc[tree["class"] == COMPILED_CLASS, "path"])]
    if not len(wrapped):
        return None
    ms = ns_to_ms(int(wrapped["gpu_self_ns"].sum()))
    names = list(dict.fromkeys(wrapped["module"]))
    named = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"torch.compile ran {named}: the modules inside a compiled module run as its compiled graphs and record "
            f"no module ranges (only what runs outside them, at graph breaks, does), so {ms:,.3f} ms of GPU time is "
            "the compiled module's self time; profile the model without torch.compile for time per inner module.")


def modules(store, trace_id: str) -> Result:
    """Module tree, instances and classes of one trace (definitions in the module docstring)."""
    totals = sm.module_totals(store, trace_id)
    base: dict[str, Any] = {"kernel_time_ns": totals["kernel_time_ns"], "kernels": totals["kernels"]}
    trust = {"no_launch_kernel_ns": totals["no_launch_kernel_ns"],
             "naming": "modules are named by instance path (class + the profiler's per-class index); the trace "
                       "records no attribute names such as layers.3.self_attn",
             "backward": "backward kernels rolled up to the module of their forward operator (same Sequence "
                         "number, as the profiler's fwdbwd flows)"}
    if sm.module_call_count(store, trace_id) == 0:
        return Result(name="modules", definition=__doc__.strip(),
                      scalars={"module_calls": 0, "module_instances": 0, "module_classes": 0, **base,
                               "module_kernel_ns": 0, "outside_kernel_ns": totals["kernel_time_ns"],
                               "bwd_kernel_ns": totals["bwd_kernel_ns"], "module_share": None,
                               "top_module": None},
                      tables={"tree": _empty(TREE_COLUMNS), "instances": _empty(INSTANCE_COLUMNS),
                              "classes": _empty(CLASS_COLUMNS), "outside": _empty(OUTSIDE_COLUMNS)},
                      warnings=[NO_MODULES], trust=trust)
    calls = sm.module_calls(store, trace_id)
    tree = tree_table(calls)
    roots = tree[tree["depth"] == 0].sort_values("gpu_ns", ascending=False, kind="stable")
    k = totals["kernel_time_ns"]
    warnings = []
    if int(totals["no_launch_kernel_ns"]):
        warnings.append(f"{totals['no_launch_kernel_ns']} ns of kernels have no launch call in the trace (launched "
                        "before the profiler started): they are in no module and not in kernel_time_ns.")
    note = compiled_note(tree)
    if note:
        warnings.append(note)
    return Result(
        name="modules", definition=__doc__.strip(),
        scalars={"module_calls": len(calls), "module_instances": int(calls["module"].nunique()),
                 "module_classes": int(calls["class"].nunique()), **base,
                 "module_kernel_ns": totals["module_kernel_ns"], "outside_kernel_ns": totals["outside_kernel_ns"],
                 "bwd_kernel_ns": totals["bwd_kernel_ns"],
                 "module_share": (totals["module_kernel_ns"] / k) if k else None,
                 "top_module": str(roots["module"].iloc[0]) if len(roots) else None},
        tables={"tree": tree, "instances": instance_table(calls), "classes": class_table(calls),
                "outside": sm.outside_modules(store, trace_id)[OUTSIDE_COLUMNS]},
        warnings=warnings, trust=trust)
