"""Memory: the allocator's view of a trace recorded with ``profile_memory=True`` (docs/metrics.md "Memory" is the
canonical text; every size is in bytes, every time integer ns).

- Events: the ``[memory]`` instants torch.profiler writes at each allocation and free of a device's allocator,
  with ``Bytes`` (signed: > 0 allocated, < 0 freed), ``Addr``, and the allocator's running ``Total Allocated``
  and ``Total Reserved`` of that device just after the event. A device is (``Device Type``, ``Device Id``),
  labelled ``cuda:N`` (type 1) or ``cpu`` (type 0: the CPU allocator, a separate row).
- ``series``: allocated and reserved bytes after each event, per device (``t_ns`` = time since the trace's
  start). A device with more than ``max_points`` events is cut into ``max_points // 4`` equal time bins that
  keep their events of highest and lowest allocated, of highest reserved, and their last event: the exact
  peaks and each bin's closing level survive the downsampling.
- ``peak_allocated_bytes`` (per device) = the maximum ``Total Allocated`` over the device's events inside the
  trace window; ``peak_reserved_bytes`` likewise. When the window covers a step this equals
  ``torch.cuda.max_memory_allocated()`` over that step (after ``reset_peak_memory_stats``). The peak event is
  the first one reaching that maximum; its **operator** is the innermost cpu_op on the event's thread whose range
  holds it (``start <= t < end``), with its top-level operator; its **module** is the innermost
  ``nn.Module: X_k`` range (``with_modules=True``) on that thread holding the event, else its operator's module
  (the innermost module range holding the operator's start; for a backward operator on the autograd thread, its
  forward operator's: the one with the backward node's ``Sequence number``, as the Modules analysis maps them);
  ``module_via`` says which.
- ``operators``: per device and operator name, the events whose innermost operator it is (self, not its
  children's): ``allocs``/``alloc_bytes`` (positive ``Bytes``), ``frees``/``freed_bytes`` (negative, as
  positive numbers), ``net_bytes = alloc_bytes - freed_bytes``. Events outside every operator form the row
  ``(no operator)``, so each column sums to the device's totals.
- ``live_at_end`` (leak suspects): blocks allocated inside the window and not freed by its end (an allocation
  whose next event at the same device and address is not a free), largest first (at most ``live_limit`` rows),
  with the allocating operator, its top-level operator and module. ``live_at_end_bytes`` per device sums all
  such blocks. Frees of blocks allocated before the window are counted in trust.
- ``device_memory_bytes``: a CUDA device's memory (``totalGlobalMem`` of the trace's deviceProperties entry with
  its id; null when the trace does not say), and ``peak_share_of_device`` = ``peak_allocated_bytes`` / it, per
  device in ``device_memory`` (recommend's ``memory_at_limit`` reads them).
- Allocator stalls: ``idle_ns`` = the GPU idle time (the gaps of each device's busy union inside its GPU span,
  as the idle analysis counts them), ``allocator_idle_ns`` = the part of it that overlaps the union of the
  allocator's runtime/driver calls (``cudaMalloc``, ``cudaFree``, ``cuMemAlloc``, ``cuMemFree``, their
  async/host/pool variants) on any thread; ``allocator_idle_share = allocator_idle_ns / idle_ns`` (null
  without idle time). Per device in ``allocator_idle``.

A trace without ``[memory]`` events says how to record them; a trace stored before kernelscope kept them (its
instants are stored without their args) says to ingest it again.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..errors import UsageError
from ..storage import memory as mem
from .result import Result, int_or_none
from .result import py_scalar as _py

DESCRIPTION = "Allocated/reserved memory over time, the peak with its operator and module, per-op allocs, leaks."
DEFINITION = __doc__.strip()

NO_EVENTS = ("the trace has no memory events: record them with torch.profiler.profile(profile_memory=True) "
             "(record_shapes=True and with_modules=True name the tensors' operators and modules).")
OLD_STORE = ("the trace was ingested before memory events were kept: re-ingest it (kernelscope ingest FILE) "
             "to see its memory.")
MAX_POINTS = 4000
LIVE_LIMIT = 200


def _positive(name: str, value: Any, least: int) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        v = -1
    if v < least or v != value:
        raise UsageError(f"option {name}={value!r} must be a whole number of at least {least}.")
    return v


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _empty(state: dict[str, int], reason: str) -> Result:
    return Result(name="memory", definition=DEFINITION,
                  scalars={"memory_events": state["events"], "peak_allocated_bytes": {}, "peak_reserved_bytes": {},
                           "live_at_end_bytes": {}},
                  warnings=[reason], trust={"memory_instants": state["instants"]})


def _with_modules(store, trace_id: str, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (with ``event_id``) plus ``module`` and ``module_via`` (null where no module range applies)."""
    mods = mem.event_modules(store, trace_id, [int(i) for i in df["event_id"].dropna()])
    out = df.merge(mods, on="event_id", how="left")
    for c in ("module", "module_via"):
        out[c] = [None if pd.isna(v) else v for v in out[c]]
    return out


def _device_memory(store, trace_id: str) -> dict[int, int]:
    """{CUDA device id: its memory in bytes} from the trace's deviceProperties (``id``, ``totalGlobalMem``)."""
    from .summary import trace_device_properties

    return {p["id"]: p["totalGlobalMem"] for p in trace_device_properties(store, trace_id)
            if isinstance(p.get("id"), int) and isinstance(p.get("totalGlobalMem"), int)
            and not isinstance(p.get("totalGlobalMem"), bool) and p["totalGlobalMem"] > 0}


def memory(store, trace_id: str, max_points: int = MAX_POINTS, live_limit: int = LIVE_LIMIT) -> Result:
    """Memory over time, its peak, allocations per operator, live-at-end blocks and allocator stalls (see the
    module docstring for the definitions)."""
    max_points = _positive("max_points", max_points, 8)
    live_limit = _positive("live_limit", live_limit, 1)
    state = mem.memory_state(store, trace_id)
    if state["events"] == 0:
        return _empty(state, OLD_STORE if state["instants"] else NO_EVENTS)
    start = store.con.execute("SELECT start_ns FROM traces WHERE trace_id = $t", {"t": trace_id}).fetchone()[0]
    start = int(start or 0)

    devices = mem.memory_devices(store, trace_id)
    peaks = _with_modules(store, trace_id, mem.memory_peaks(store, trace_id))
    peaks["t_ns"] = peaks["ts_ns"] - start
    series = mem.memory_series(store, trace_id, max_points)
    series.insert(3, "t_ns", series["ts_ns"] - start)
    ops = mem.op_allocations(store, trace_id)
    live, live_totals, unmatched_frees = mem.live_at_end(store, trace_id, live_limit)
    live = _with_modules(store, trace_id, live)
    live.insert(2, "t_ns", live["ts_ns"] - start)
    alloc_idle, calls = mem.allocator_idle(store, trace_id)
    alloc_idle["allocator_idle_share"] = [
        _share(int(a), int(i)) for a, i in zip(alloc_idle["allocator_idle_ns"], alloc_idle["idle_ns"])]

    capacity = _device_memory(store, trace_id)
    devices["device_memory_bytes"] = pd.array(
        [capacity.get(int(i)) if int(t) == 1 else None for t, i in zip(devices["device_type"], devices["device_id"])],
        dtype="Int64")
    devices["peak_share_of_device"] = [
        float(p) / c if c is not pd.NA and c and not pd.isna(p) else None
        for p, c in zip(devices["peak_allocated_bytes"], devices["device_memory_bytes"])]
    live_by_dev = dict(zip(live_totals["device"], live_totals["bytes"]))
    devices["live_at_end_blocks"] = [int(dict(zip(live_totals["device"], live_totals["blocks"])).get(d, 0))
                                     for d in devices["device"]]
    devices["live_at_end_bytes"] = [int(live_by_dev.get(d, 0)) for d in devices["device"]]
    cols = ["device", "operator", "top_operator", "module", "module_via", "t_ns", "ts_ns", "event_id", "tid",
            "bytes", "reserved_at_peak_bytes"]
    devices = devices.merge(peaks[cols].rename(columns={
        "operator": "peak_operator", "top_operator": "peak_top_operator", "module": "peak_module",
        "module_via": "peak_module_via", "t_ns": "peak_t_ns", "ts_ns": "peak_ts_ns", "event_id": "peak_event_id",
        "tid": "peak_tid", "bytes": "peak_event_bytes"}), on="device", how="left")

    idle_ns = int(alloc_idle["idle_ns"].sum()) if len(alloc_idle) else 0
    allocator_idle_ns = int(alloc_idle["allocator_idle_ns"].sum()) if len(alloc_idle) else 0
    gpu = devices[devices.device_type == 1]
    first = (gpu if len(gpu) else devices).head(1).to_dict("records")
    first = first[0] if first else {}
    scalars = {
        "memory_events": state["events"],
        "devices": list(devices["device"]),
        "peak_allocated_bytes": {d: int_or_none(v) for d, v in zip(devices["device"], devices["peak_allocated_bytes"])},
        "peak_reserved_bytes": {d: int_or_none(v) for d, v in zip(devices["device"], devices["peak_reserved_bytes"])},
        "peak_device": first.get("device"),
        "peak_operator": _py(first.get("peak_operator")),
        "peak_module": _py(first.get("peak_module")),
        "live_at_end_bytes": {d: int(v) for d, v in zip(devices["device"], devices["live_at_end_bytes"])},
        "idle_ns": idle_ns if len(alloc_idle) else None,
        "allocator_idle_ns": allocator_idle_ns if len(alloc_idle) else None,
        "allocator_idle_share": _share(allocator_idle_ns, idle_ns),
        "allocator_calls": calls["calls"],
        "allocator_call_ns": calls["call_ns"],
    }
    trust = {
        "events_without_operator": state["without_op"],
        "events_without_totals": state["incomplete"],
        "frees_of_blocks_allocated_before_window": unmatched_frees,
        "series_downsampled": bool(len(series) < int(devices["events"].sum())),
        "out_of_memory_events": state["oom"],
    }
    warnings = []
    if state["oom"]:
        warnings.append(f"{state['oom']} out-of-memory event(s): an allocation failed inside the window.")
    if state["incomplete"]:
        warnings.append(f"{state['incomplete']} memory event(s) lack Bytes or Total Allocated (an older torch): "
                        "they are left out of the series and the peak.")
    if not len(devices):
        warnings.append("no memory event carries the allocator's totals: no series and no peak.")
    return Result(name="memory", definition=DEFINITION, scalars=scalars,
                  tables={"device_memory": devices, "series": series, "operators": ops, "live_at_end": live,
                          "allocator_idle": alloc_idle},
                  warnings=warnings, trust=trust)
