"""The figures of an analysis Result, by analysis name: the same builders the dashboard pages and the report use,
for callers that hold a Result (the notebook API, ``kernelscope.notebook``).

``FIGURES`` maps an analysis name to ``fn(store, trace_ids, result) -> list[go.Figure]`` (``trace_ids``: the
traces the Result was computed on; some builders read binned series from the store). An analysis without an
entry has no figure (its tables are the view). Add a figure: one entry here, using the page's builders.
"""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go

from . import bound as _bound
from . import launch as _launch
from . import steps as _steps


def _steps_figs(store, ids, r) -> list[go.Figure]:
    df = r.tables["steps"]
    return [_steps.breakdown_figure(df), _steps.step_time_figure(df, r.scalars)] if len(df) else []


def _launch_figs(store, ids, r) -> list[go.Figure]:
    if not _launch.has_launches(r.scalars):
        return []
    figs = [_launch.distribution_figure(r.tables["distribution"]),
            _launch.tklqt_by_operator_figure(r.tables["per_op"])]
    if not r.tables["launch_bound"].empty:
        figs.append(_launch.launch_bound_figure(r.tables["launch_bound"]))
    return figs


def _whatif_figs(store, ids, r) -> list[go.Figure]:
    have = any(v is not None for _, v in _launch.whatif_rows(r.scalars))
    return [_launch.whatif_figure(r.scalars)] if have else []


def _idle_figs(store, ids, r) -> list[go.Figure]:
    from .data import busy_bins
    from .figures import busy_fraction_figure

    bins, span_ns, width = busy_bins(store, ids[0])
    return [busy_fraction_figure(bins, span_ns, width)] if span_ns else []


def _bandwidth_figs(store, ids, r) -> list[go.Figure]:
    from .roofline import roofline_figure

    sig = r.tables.get("per_signature")
    return [roofline_figure(sig, r.scalars.get("device_peaks"))] if sig is not None and len(sig) else []


def _power_figs(store, ids, r) -> list[go.Figure]:
    from . import power as _power

    if not _power.has_telemetry(store, ids[0]):
        return []
    figs = [_power.power_timeline_figure(_power.telemetry_bins(store, ids[0]), _power.busy_shading(store, ids[0]),
                                         r.scalars.get("trace_window_ns"))]
    phases = _power.phase_energy_figure(r.tables.get("phases"))
    return figs + ([phases] if phases is not None else [])


def _transition_figs(store, ids, r) -> list[go.Figure]:
    from .sweep import sweep_figure

    pts = r.tables.get("points")
    return [sweep_figure(pts, r.scalars)] if pts is not None and len(pts) else []


def _diff_figs(store, ids, r) -> list[go.Figure]:
    from .compare import groups_figure, headline_figure

    figs = [headline_figure(r.tables["headline"], r.scalars.get("by"))]
    return figs + ([groups_figure(r.tables["groups"])] if len(r.tables["groups"]) else [])


def _comm_figs(store, ids, r) -> list[go.Figure]:
    from .ranks import breakdown_figure

    ranks = r.tables.get("ranks")
    return [breakdown_figure(ranks)] if ranks is not None and len(ranks) else []


def _modules_figs(store, ids, r) -> list[go.Figure]:
    from .modules import module_icicle

    return [module_icicle(r.tables["tree"])] if len(r.tables["tree"]) else []


def _stacks_figs(store, ids, r) -> list[go.Figure]:
    from .stacks import flame_figure

    flame = r.tables["flame"]
    return [flame_figure(flame, "gpu_ns"), flame_figure(flame, "cpu_ns")] if len(flame) else []


def _memory_figs(store, ids, r) -> list[go.Figure]:
    from .memory import has_memory, memory_figure

    return [memory_figure(r)] if has_memory(r) else []


FIGURES: dict[str, Callable[..., list[go.Figure]]] = {
    "steps": _steps_figs,
    "launch": _launch_figs,
    "whatif": _whatif_figs,
    "bound": lambda store, ids, r: _bound.bound_figures(r),
    "idle": _idle_figs,
    "bandwidth": _bandwidth_figs,
    "power": _power_figs,
    "transition": _transition_figs,
    "diff": _diff_figs,
    "comm": _comm_figs,
    "modules": _modules_figs,
    "stacks": _stacks_figs,
    "memory": _memory_figs,
}


def figures(store, trace_ids: list[str], result) -> list[go.Figure]:
    """The figures of ``result`` (computed on ``trace_ids``); [] for an analysis without figures."""
    fn = FIGURES.get(result.name)
    return fn(store, list(trace_ids), result) if fn is not None else []
