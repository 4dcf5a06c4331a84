"""Modules: the nn.Module tree of the ``modules`` analysis drawn as an icicle, its rows as a tree table, and the
report section (only for traces recorded with ``with_modules=True``). Definitions: analysis/modules.py and
docs/metrics.md "Modules"."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..analysis import cache
from ..storage import catalog
from ..storage import modules as sm
from ..units import NS_PER_MS
from .blocks import Section, Table
from .missing import shown

#: What the icicle can size its boxes by: column of the tree table -> words.
METRICS = {
    "gpu_ns": "GPU kernel time (forward + backward rolled up)",
    "gpu_fwd_ns": "GPU kernel time, forward",
    "gpu_bwd_ns": "GPU kernel time, backward (rolled up to the forward module)",
    "cpu_ns": "CPU time of the forward calls",
}
DEFAULT_METRIC = "gpu_ns"
#: Said for a trace without GPU kernels (a CPU-only run): its modules are drawn by CPU time instead.
NO_KERNELS = ("the trace has no GPU kernels (a CPU-only run): the modules are sized by the CPU time of their "
              "forward calls")
#: Indentation of one tree level in the table's module column (non-breaking spaces survive HTML and the grid).
_INDENT = "\u00a0\u00a0\u00a0"


def default_metric(result) -> str:
    """What the icicle sizes by when nothing is asked: GPU kernel time, or the forward calls' CPU time for a
    trace with no kernel (a CPU-only run: every GPU box would be 0, an empty figure with axes from -1 to 6)."""
    return DEFAULT_METRIC if (result.scalars.get("kernel_time_ns") or 0) > 0 else "cpu_ns"


def has_modules(store, trace_id: str) -> bool:
    """Whether the trace has nn.Module ranges (checked before running the analysis)."""
    return sm.module_call_count(store, trace_id) > 0


def _ms(ns) -> str:
    return f"{int(ns) / NS_PER_MS:,.3f} ms"


def tree_rows(tree: pd.DataFrame) -> pd.DataFrame:
    """The tree table as shown: ``label`` is the instance indented by depth, ``id`` the path (row id)."""
    df = tree.copy()
    df["label"] = [_INDENT * int(d) + str(m) for d, m in zip(df["depth"], df["module"])]
    df["id"] = df["path"]
    return df


def _branch_values(ids: list, parents: list, values: list) -> tuple[list, str]:
    """(values, branchvalues) for a plotly hierarchy: 'total' when every parent's value covers its children's
    sum; otherwise each node's own remainder (clipped at 0) with 'remainder', so the figure still draws."""
    child_sum: dict = {}
    for p, v in zip(parents, values):
        if p:
            child_sum[p] = child_sum.get(p, 0) + v
    if all(child_sum.get(i, 0) <= v for i, v in zip(ids, values)):
        return values, "total"
    return [max(0, v - child_sum.get(i, 0)) for i, v in zip(ids, values)], "remainder"


def module_icicle(tree: pd.DataFrame, metric: str = DEFAULT_METRIC, title: str | None = None) -> go.Figure:
    """The module tree as an icicle: one box per instance path, sized by ``metric`` (a ``METRICS`` column,
    inclusive), outermost modules on top; hover shows forward, backward and CPU time and kernels."""
    metric = metric if metric in METRICS else DEFAULT_METRIC
    fig = go.Figure()
    fig.update_layout(title=title or f"Modules by {METRICS[metric]}", margin={"l": 10, "r": 10, "t": 50, "b": 10},
                      height=520)
    if tree is None or tree.empty or not int(tree[metric].sum()):
        fig.add_annotation(text=f"No {METRICS[metric]} in any module.", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        return fig
    ids = list(tree["path"])
    parents = ["" if pd.isna(p) else str(p) for p in tree["parent_path"]]
    known = set(ids)
    parents = [p if p in known else "" for p in parents]
    values, branch = _branch_values(ids, parents, [int(v) for v in tree[metric]])
    custom = [[_ms(g), _ms(f), _ms(b), _ms(c), int(k), str(cl)]
              for g, f, b, c, k, cl in zip(tree["gpu_ns"], tree["gpu_fwd_ns"], tree["gpu_bwd_ns"], tree["cpu_ns"],
                                           tree["kernels"], tree["class"])]
    fig.add_trace(go.Icicle(
        ids=ids, parents=parents, labels=list(tree["module"]), values=values, branchvalues=branch,
        customdata=custom, sort=False, tiling={"orientation": "v"}, maxdepth=6, root={"color": "#c7d2fe"},
        hovertemplate=("<b>%{id}</b><br>class %{customdata[5]}<br>GPU %{customdata[0]} (forward %{customdata[1]}, "
                       "backward %{customdata[2]})<br>CPU %{customdata[3]}<br>%{customdata[4]} kernels"
                       "<extra></extra>")))
    return fig


def class_rows(classes: pd.DataFrame) -> pd.DataFrame:
    """The classes table as the report shows it (ms, most GPU time first)."""
    return pd.DataFrame({
        "class": classes["class"], "instances": classes["instances"], "calls": classes["calls"],
        "GPU ms": classes["gpu_ns"] / NS_PER_MS, "forward ms": classes["gpu_fwd_ns"] / NS_PER_MS,
        "backward ms": classes["gpu_bwd_ns"] / NS_PER_MS, "CPU ms": classes["cpu_ns"] / NS_PER_MS,
        "kernels": classes["kernels"]})


def summary_sentence(result) -> str:
    """Module coverage of the kernel time in words."""
    s = result.scalars
    k = s.get("kernel_time_ns") or 0
    share = f" ({100.0 * s['module_kernel_ns'] / k:.1f}%)" if k else ""
    where = (f"{_ms(s['module_kernel_ns'])} of {_ms(k)} kernel time ran in a module{share} (backward kernels rolled "
             f"up to their forward module), {_ms(s['outside_kernel_ns'])} outside every module" if k else NO_KERNELS)
    return (f"{s['module_calls']:,} module calls of {s['module_instances']:,} instances and {s['module_classes']:,} "
            f"classes; {where}. Modules are named by instance path (class + the profiler's index): the trace has no "
            "attribute names.")


def modules_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace with module ranges: the coverage sentence, the icicle and the classes table; None when no
    trace has any."""
    blocks: list = []
    for tid in trace_ids:
        if not has_modules(store, tid):
            continue
        name = catalog.trace_name(store, tid)
        name = name if name is not None else tid
        r = cache.analysis(store, "modules", tid)
        blocks.append(f"{name}: " + summary_sentence(r))
        blocks += [f"{name}: warning: {shown(w)}" for w in r.warnings]  # before the figure they qualify
        if ctx.figures:
            metric = default_metric(r)
            blocks.append(module_icicle(r.tables["tree"], metric, title=f"{name}: modules by " + (
                "GPU kernel time" if metric == DEFAULT_METRIC else METRICS[metric])))
        blocks.append(Table(class_rows(r.tables["classes"]), f"{name}: time per module class"))
    return Section("Modules", "modules", blocks) if blocks else None
