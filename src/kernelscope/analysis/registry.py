"""The table of analyses. The CLI's ``analyze --list`` / ``analyze NAME TRACE``, the report's sections and
the dashboard's pages all read ``ANALYSES``.

To add an analysis: write ``analysis/<name>.py`` with a function ``fn(store, trace_id, **options) ->
Result`` whose docstring states its definitions, and add one ``Analysis`` row to ``_TABLE`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UsageError
from . import (
    bandwidth,
    bound,
    comm,
    diff,
    graphs,
    kernels,
    launch,
    memory,
    modules,
    power,
    recommend,
    stacks,
    steps,
    summary,
    transition,
    whatif,
)
from .result import Result


@dataclass(frozen=True)
class Analysis:
    name: str
    description: str  # one line, shown by `kernelscope analyze --list`
    fn: Callable[..., Result]  # fn(store, trace_id, **options) -> Result
    # multi: fn(store, trace_ids: list[str] | None, by=..., sweep=..., **options) -> one Result over
    # several traces (None = the analysis picks the traces itself, e.g. every trace with a label).
    multi: bool = False


_TABLE = [
    Analysis("summary", summary.DESCRIPTION, summary.summary),
    Analysis("launch", launch.DESCRIPTION, launch.launch),
    Analysis("whatif", whatif.DESCRIPTION, whatif.whatif),
    Analysis("kernels", kernels.DESCRIPTION, kernels.kernels),
    Analysis("idle", kernels.IDLE_DESCRIPTION, kernels.idle),
    Analysis("graphs", graphs.DESCRIPTION, graphs.graphs),
    Analysis("power", power.DESCRIPTION, power.power),
    Analysis("bound", bound.DESCRIPTION, bound.bound),
    Analysis("transition", transition.DESCRIPTION, transition.transition, multi=True),
    Analysis("bandwidth", bandwidth.DESCRIPTION, bandwidth.bandwidth),
    Analysis("recommend", recommend.DESCRIPTION, recommend.recommend),
    Analysis("diff", diff.DESCRIPTION, diff.diff, multi=True),
    Analysis("comm", comm.DESCRIPTION, comm.comm, multi=True),
    Analysis("modules", modules.DESCRIPTION, modules.modules),
    Analysis("stacks", stacks.DESCRIPTION, stacks.stacks),
    Analysis("memory", memory.DESCRIPTION, memory.memory),
    Analysis("steps", steps.DESCRIPTION, steps.steps),
]

ANALYSES: dict[str, Analysis] = {a.name: a for a in _TABLE}


def get_analysis(name: str) -> Analysis:
    """The registered analysis called ``name``; an unknown name is a user error listing the known ones."""
    try:
        return ANALYSES[name]
    except KeyError:
        known = ", ".join(sorted(ANALYSES))
        raise UsageError(
            f"no analysis named '{name}'; known analyses: {known} (see `kernelscope analyze --list`)."
        ) from None
