"""Call stacks: flame graphs (plotly icicles, root at the bottom) of CPU time and of GPU kernel time over the
Python frame paths of the ``stacks`` analysis, its source-line table as shown, and the report section (only for
traces recorded with ``with_stack=True``). Definitions: analysis/stacks.py and docs/metrics.md "Call stacks"."""

from __future__ import annotations

import posixpath

import pandas as pd
import plotly.graph_objects as go

from ..analysis import cache
from ..storage import catalog
from ..storage import stacks as ss
from ..storage.pycontext import MODULE_PREFIX
from ..units import NS_PER_MS
from .blocks import Section, Table
from .missing import shown

#: What a flame graph can size its boxes by: column of the flame table -> words.
METRICS = {"cpu_ns": "CPU time", "gpu_ns": "GPU kernel time"}
#: Most boxes drawn (the largest paths; a path is drawn only with its parent).
MAX_NODES = 1500
#: Paths below this share of the total are left out of the drawing (not of the numbers).
MIN_SHARE = 0.001
#: Source lines in the report's table.
REPORT_LINES = 25


def has_stacks(store, trace_id: str) -> bool:
    """Whether the trace has Python frames (checked before running the analysis)."""
    return ss.python_call_count(store, trace_id) > 0


def _ms(ns) -> str:
    return f"{int(ns) / NS_PER_MS:,.3f} ms"


def frame_label(name) -> str:
    """``function (file.py:123)`` for ``dir/file.py(123): function``; other names as they are."""
    text = "" if name is None or name != name else str(name)
    head, sep, fn = text.partition("): ")
    if sep and "(" in head:
        path, _, line = head.rpartition("(")
        if line.isdigit():
            return f"{fn} ({posixpath.basename(path)}:{line})"
    return text


#: Box colours of a flame graph by the kind of frame (``frame_kind``).
KIND_COLORS = {"module": "#f59e0b", "builtin": "#9ca3af", "torch": "#6366f1", "library": "#10b981", "user": "#ef4444"}
_LIBRARIES = ("site-packages/", "dist-packages/", "transformers/", "accelerate/", "peft/", "diffusers/", "triton/")


def frame_kind(name) -> str:
    """'module' (an nn.Module range), 'builtin' (``<built-in ...>``), 'torch' (a file under torch/), 'library'
    (another installed package) or 'user' (any other file: the user's own code)."""
    text = "" if name is None or name != name else str(name)
    if text.startswith(MODULE_PREFIX):
        return "module"
    if text.startswith("<"):
        return "builtin"
    if text.startswith("torch/") or "/torch/" in text:
        return "torch"
    return "library" if any(lib in text for lib in _LIBRARIES) else "user"


def drawn_paths(flame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The paths a flame graph draws: value > 0 and at least ``MIN_SHARE`` of the roots' total, at most
    ``MAX_NODES`` of the largest, each only with its parent drawn."""
    df = flame[flame[metric] > 0]
    if df.empty:
        return df
    total = int(df.loc[df["parent_stack_id"].isna(), metric].sum()) or int(df[metric].max())
    df = df[df[metric] >= total * MIN_SHARE].sort_values([metric, "depth"], ascending=[False, True], kind="stable")
    df = df.head(MAX_NODES)
    kept = df[df["parent_stack_id"].isna()]
    for depth in sorted(df["depth"].unique()):
        level = df[(df["depth"] == depth) & df["parent_stack_id"].notna()]
        kept = pd.concat([kept, level[level["parent_stack_id"].isin(kept["stack_id"])]])
    return kept.sort_values(["depth", metric], ascending=[True, False], kind="stable")


#: In place of the GPU flame graph of a trace without kernels (a CPU-only run): an empty chart said it worse.
NO_KERNELS = "the trace has no GPU kernels (a CPU-only run), so no GPU time by Python path."


def flame_figure(flame: pd.DataFrame, metric: str = "gpu_ns", title: str | None = None) -> go.Figure:
    """A flame graph of ``metric`` (``METRICS``): one box per frame path, callers below callees, width the
    path's inclusive time, colour by ``frame_kind`` (your code red, libraries green, torch indigo, nn.Module
    ranges amber, built-ins grey); hover names the frame and its CPU and GPU time."""
    metric = metric if metric in METRICS else "gpu_ns"
    fig = go.Figure()
    fig.update_layout(title=title or f"Python frames by {METRICS[metric]}", height=560,
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})
    df = drawn_paths(flame, metric) if flame is not None and len(flame) else pd.DataFrame()
    if df.empty:
        fig.add_annotation(text=f"No {METRICS[metric]} on any Python path.", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        return fig
    ids = [str(int(s)) for s in df["stack_id"]]
    parents = ["" if pd.isna(p) else str(int(p)) for p in df["parent_stack_id"]]
    custom = [[str(n), _ms(c), _ms(g), _ms(b), int(k)]
              for n, c, g, b, k in zip(df["name"], df["cpu_ns"], df["gpu_ns"], df["gpu_bwd_ns"], df["kernels"])]
    fig.add_trace(go.Icicle(
        ids=ids, parents=parents, labels=[frame_label(n) for n in df["name"]], values=[int(v) for v in df[metric]],
        branchvalues="total", customdata=custom, tiling={"orientation": "v", "flip": "y"}, maxdepth=40,
        marker={"colors": [KIND_COLORS[frame_kind(n)] for n in df["name"]]},
        hovertemplate=("<b>%{customdata[0]}</b><br>CPU %{customdata[1]}<br>GPU %{customdata[2]} (backward "
                       "%{customdata[3]})<br>%{customdata[4]} kernels<extra></extra>")))
    return fig


def trunk(lines: pd.DataFrame, stack_kernel_ns) -> pd.Series:
    """The lines every kernel with a Python path was launched under and none was launched by (the script's
    ``<module>``, ``main``, a runner's frames): a table ranked by GPU time would open with them, all equal."""
    if not stack_kernel_ns:
        return pd.Series(False, index=lines.index)
    made = (lines["gpu_self_ns"] > 0) | (lines["gpu_line_self_ns"] > 0)
    return ((lines["gpu_ns"] == stack_kernel_ns) & ~made).fillna(False).astype(bool)


def trunk_sentence(lines: pd.DataFrame, stack_kernel_ns) -> str | None:
    """The trunk lines ``line_rows`` leaves out, in words (outermost and innermost); None when there are none."""
    t = lines[trunk(lines, stack_kernel_ns)]
    if t.empty:
        return None
    src = line_rows(t)["source"]  # equal GPU time: the outermost (most CPU time) first
    where = f"{src.iloc[0]}" if len(t) == 1 else f"from {src.iloc[0]} to {src.iloc[-1]}"
    return (f"{len(t):,} line{'s' if len(t) != 1 else ''} that every kernel was launched under (and none by) "
            f"{'are' if len(t) != 1 else 'is'} left out of the table, {where}.")


def line_rows(lines: pd.DataFrame, limit: int | None = None, source_only: bool = False,
              stack_kernel_ns=None) -> pd.DataFrame:
    """The source-line table as shown: ``source`` (file.py:123 function), most GPU time first; ``source_only``
    leaves out built-ins; given ``stack_kernel_ns``, the ``trunk`` lines are left out."""
    df = lines[lines["file"].notna()] if source_only else lines
    df = df[~trunk(df, stack_kernel_ns)]
    df = df.sort_values(["gpu_ns", "cpu_ns"], ascending=False, kind="stable")
    if limit is not None:
        df = df.head(limit)
    df = df.copy()
    has_file = df["file"].notna()
    df["source"] = df["frame"].astype(object)
    df.loc[has_file, "source"] = (df.loc[has_file, "file"].astype(str) + ":" + df.loc[has_file, "line"].astype(str)
                                  + " " + df.loc[has_file, "function"].astype(str))
    df["id"] = df["frame"]
    return df.reset_index(drop=True)


def summary_sentence(result) -> str:
    s = result.scalars
    k = s.get("kernel_time_ns") or 0
    share = f" ({100.0 * s['stack_kernel_ns'] / k:.1f}%)" if k else ""
    return (f"{s['python_calls']:,} Python calls on {s['stacks']:,} distinct paths; {_ms(s['stack_kernel_ns'])} of "
            f"{_ms(k)} kernel time was launched with a Python path{share}, {_ms(s['bwd_kernel_ns'])} of it by "
            "backward operators, attributed to their forward operator's path.")


def stacks_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace with Python frames: the sentence, GPU and CPU flame graphs and the top source lines; None
    when no trace has any."""
    blocks: list = []
    for tid in trace_ids:
        if not has_stacks(store, tid):
            continue
        name = catalog.trace_name(store, tid)
        name = name if name is not None else tid
        r = cache.analysis(store, "stacks", tid)
        blocks.append(f"{name}: " + summary_sentence(r))
        if not r.scalars.get("kernel_time_ns"):
            blocks.append(f"{name}: {NO_KERNELS}")
        elif ctx.figures:
            blocks.append(flame_figure(r.tables["flame"], "gpu_ns", f"{name}: GPU kernel time by Python path"))
        if ctx.figures:
            blocks.append(flame_figure(r.tables["flame"], "cpu_ns", f"{name}: CPU time by Python path"))
        rows = line_rows(r.tables["lines"], REPORT_LINES, source_only=True,
                         stack_kernel_ns=r.scalars.get("stack_kernel_ns"))
        said = trunk_sentence(r.tables["lines"], r.scalars.get("stack_kernel_ns"))
        if said:
            blocks.append(f"{name}: {said}")
        if len(rows):
            blocks.append(Table(pd.DataFrame({
                "source": rows["source"], "GPU ms": rows["gpu_ns"] / NS_PER_MS,
                "self GPU ms": rows["gpu_line_self_ns"] / NS_PER_MS,
                "backward GPU ms": rows["gpu_bwd_ns"] / NS_PER_MS, "kernels": rows["kernels"],
                "launches": rows["launches"], "calls": rows["calls"], "CPU ms": rows["cpu_ns"] / NS_PER_MS}),
                f"{name}: source lines by GPU kernel time launched under them (top {REPORT_LINES}; self: launched "
                "by the line, itself or through the built-in functions it called)"))
        blocks += [f"{name}: warning: {shown(w)}" for w in r.warnings]
    return Section("Call stacks", "stacks", blocks) if blocks else None
