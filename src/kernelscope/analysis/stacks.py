"""Python call stacks of one trace recorded with ``with_stack=True``: CPU time and GPU kernel time per frame
path (flame graph data) and per source line.

Definitions (docs/metrics.md, "Call stacks", is the canonical text; every time is an integer number of ns):

- A **frame** is a ``python_function`` event torch.profiler records with ``with_stack=True``, named
  ``file.py(123): function`` (``<built-in ...>`` for C functions; ``nn.Module: Class_k`` for with_modules
  ranges, which appear on the paths too). Frames of one host thread nest by time containment
  (storage/pycontext.py). A **path** is the chain of frames from the thread's outermost frame to one frame;
  ``flame`` has one row per distinct path (``stack_id``, ``parent_stack_id``, ``name`` = its last frame,
  ``depth``).
- **CPU time** of a path ``cpu_ns``: the summed duration of the calls on that path (inclusive wall time on the
  host thread); ``cpu_self_ns`` = ``cpu_ns`` minus the paths one level down. ``python_cpu_ns``: the outermost
  calls' time.
- **GPU kernel time** counts kernels (``kind = 'kernel'``), each with its full duration. A kernel's time goes to
  the path active on its launch call's thread when the call started (the innermost frame open then). Kernels of
  **backward** operators (autograd thread, no Python) go to the path of the operator's forward operator (same
  ``Sequence number``, as the profiler's ``fwdbwd`` flows); ``gpu_bwd_ns`` is that part. ``gpu_ns`` /
  ``kernels`` / ``launches`` of a path include the paths below it; ``gpu_self_ns`` / ``kernels_self`` only
  kernels launched with exactly that path.
- **Source lines** (``lines``): one row per frame name other than nn.Module ranges, with ``file``, ``line`` and
  ``function`` read from ``file.py(123): function`` (null for built-ins). ``gpu_ns``, ``gpu_bwd_ns``,
  ``kernels``, ``launches``: the kernels whose launch path holds the frame, each counted once however often
  the frame recurs on the path; ``gpu_self_ns``: those with the frame innermost; ``gpu_line_self_ns`` (source
  lines only, else 0): those the line launched, itself or through the built-in functions and nn.Module ranges
  below it before the next source line (``F.linear(x, w)``'s kernels are its line's, not only
  ``<built-in function linear>``'s); ``calls``: its calls; ``cpu_ns``: the time of its calls not inside a call
  of the same frame.
- ``stack_kernel_ns``: kernel time with a Python path; ``no_stack_kernel_ns`` = ``kernel_time_ns`` (every
  kernel) minus it: launched with no Python frame open (and no forward operator that had one), or without a
  launch call in the trace.
"""

from __future__ import annotations

import pandas as pd

from ..storage import stacks as ss
from ..storage.pycontext import MODULE_PREFIX
from .result import Result

DESCRIPTION = ("Python call stacks (with_stack): CPU and GPU kernel time per frame path (flame graph) and per "
               "source line (file.py:line function: GPU ms, kernels, launches).")

NO_STACKS = ("this trace has no Python frames: record it with torch.profiler.profile(with_stack=True) (or "
             "kernelscope.profile(with_stack=True)) to attribute time to Python call stacks.")

FLAME_COLUMNS = ["stack_id", "parent_stack_id", "name", "depth", "calls", "cpu_ns", "cpu_self_ns", "gpu_ns",
                 "gpu_self_ns", "gpu_bwd_ns", "kernels", "kernels_self", "launches"]
LINE_COLUMNS = ["frame", "file", "line", "function", "calls", "cpu_ns", "gpu_ns", "gpu_self_ns", "gpu_line_self_ns",
                "gpu_bwd_ns", "kernels", "launches"]
_FRAME_RE = r"^(?P<file>.*)\((?P<line>\d+)\): (?P<function>.*)$"
_TEXT = {"name", "frame", "file", "function"}


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c in _TEXT else "Int64") for c in columns})


def line_self(flame: pd.DataFrame) -> dict[str, int]:
    """Kernel time each source line launched (``gpu_line_self_ns``): every path's own kernel time goes to the
    innermost source line on it, up past built-in functions and nn.Module ranges."""
    is_line = flame["name"].fillna("").str.match(_FRAME_RE).to_numpy(bool)
    parent = {int(k): (None if pd.isna(p) else int(p)) for k, p in zip(flame["stack_id"], flame["parent_stack_id"])}
    line_of = {int(k): (n if ok else None) for k, n, ok in zip(flame["stack_id"], flame["name"], is_line)}
    out: dict[str, int] = {}
    for sid, ns in zip(flame["stack_id"], flame["gpu_self_ns"].fillna(0)):
        s = int(sid) if ns else None
        while s is not None and line_of.get(s) is None:
            s = parent.get(s)
        if s is not None:
            out[line_of[s]] = out.get(line_of[s], 0) + int(ns)
    return out


def line_table(frames: pd.DataFrame, flame: pd.DataFrame | None = None) -> pd.DataFrame:
    """``frame_lines`` rows without nn.Module ranges, with file, line and function parsed from the name and, from
    ``flame``, ``gpu_line_self_ns``."""
    df = frames[~frames["frame"].fillna("").str.startswith(MODULE_PREFIX)].reset_index(drop=True)
    parts = df["frame"].fillna("").str.extract(_FRAME_RE)
    df["file"] = parts["file"].where(parts["file"].notna(), None)
    df["line"] = pd.to_numeric(parts["line"], errors="coerce").astype("Int64")
    df["function"] = parts["function"].where(parts["function"].notna(), df["frame"])
    own = line_self(flame) if flame is not None else {}
    df["gpu_line_self_ns"] = pd.array([own.get(f, 0) for f in df["frame"]], dtype="Int64")
    return df[LINE_COLUMNS]


def stacks(store, trace_id: str) -> Result:
    """Flame graph data and source lines of one trace (definitions in the module docstring)."""
    totals = ss.stack_totals(store, trace_id)
    k = totals["kernel_time_ns"]
    scalars = {"python_calls": totals["python_calls"], "stacks": totals["stacks"], "frames": 0,
               "python_cpu_ns": totals["python_cpu_ns"], "kernel_time_ns": k, "kernels": totals["kernels"],
               "stack_kernel_ns": totals["stack_kernel_ns"], "bwd_kernel_ns": totals["bwd_kernel_ns"],
               "no_stack_kernel_ns": k - totals["stack_kernel_ns"],
               "stack_share": (totals["stack_kernel_ns"] / k) if k and totals["python_calls"] else None}
    trust = {"no_launch_kernel_ns": totals["no_launch_kernel_ns"],
             "backward": "backward kernels attributed to the Python path of their forward operator (same "
                         "Sequence number, as the profiler's fwdbwd flows)"}
    if not totals["python_calls"]:
        return Result(name="stacks", definition=__doc__.strip(), scalars=scalars,
                      tables={"flame": _empty(FLAME_COLUMNS), "lines": _empty(LINE_COLUMNS)},
                      warnings=[NO_STACKS], trust=trust)
    flame = ss.stack_nodes(store, trace_id)
    lines = line_table(ss.frame_lines(store, trace_id), flame)
    scalars["frames"] = len(lines)
    warnings = []
    if k and scalars["no_stack_kernel_ns"]:
        warnings.append(f"{scalars['no_stack_kernel_ns']} of {k} ns of kernel time had no Python frame open at its "
                        "launch (or no launch call in the trace): it is on no path.")
    return Result(name="stacks", definition=__doc__.strip(), scalars=scalars,
                  tables={"flame": flame[FLAME_COLUMNS], "lines": lines},
                  warnings=warnings, trust=trust)
