"""Un-profiled timing and energy, measured before the profiler starts.

Definitions (all durations int ns):

- ``cuda_event`` rows: per timed iteration, the time between two CUDA events recorded around the
  call on the current stream (GPU clock). Only when CUDA is available.
- ``wall`` rows: per timed iteration, ``time.perf_counter_ns()`` around ``synchronize; fn();
  synchronize`` -- the latency a user sees, host overhead included.
- ``energy_loop`` row (one): ``fn`` runs back to back (no per-iteration synchronize) until the NVML
  energy counter (read every k iterations, k ~ 2 ms of work) has stepped at least ``min_energy_steps``
  times and ``energy_min_s`` has passed.
  Average power P = (counter at the last step seen - counter at the first step seen) / (time between
  those two steps); ``dur_ns`` = loop wall time / iterations; ``energy_mj`` = P x dur_ns, the energy
  of one iteration in mJ. Counting from counter steps (not from the loop's edges) avoids the counter's
  refresh lag (20-100 ms) at the edges. ``iteration`` holds the number of loop iterations.
"""

from __future__ import annotations

import time

from ..units import MJ_PER_J, NS_PER_MS, NS_PER_S, mw_to_w, ns_to_s


def _sync(torch, cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def measure(fn, *, warmup: int = 5, iters: int = 20, energy_device=None, energy_min_s: float = 1.5,
            energy_max_s: float = 6.0, min_energy_steps: int = 10) -> tuple[list[dict], dict]:
    """Time ``fn()`` without the profiler. Returns (timings rows, details dict for run.json).

    ``energy_device``: an object with ``energy_mj() -> int | None`` (an nvml device), or None to skip
    the energy loop.
    """
    if warmup < 5 or iters < 20:
        raise ValueError("un-profiled timing needs at least 5 warm-up and 20 timed iterations")
    import torch

    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    _sync(torch, cuda)
    rows: list[dict] = []
    for i in range(iters):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _sync(torch, cuda)
        t0 = time.perf_counter_ns()
        if cuda:
            a.record()
        fn()
        if cuda:
            b.record()
        _sync(torch, cuda)
        t1 = time.perf_counter_ns()
        rows.append({"kind": "wall", "iteration": i, "dur_ns": t1 - t0, "energy_mj": None})
        if cuda:
            rows.append({"kind": "cuda_event", "iteration": i,
                         "dur_ns": round(a.elapsed_time(b) * NS_PER_MS), "energy_mj": None})
    details: dict = {"warmup": warmup, "iters": iters}
    if energy_device is not None and energy_device.energy_mj() is not None:
        walls = sorted(r["dur_ns"] for r in rows if r["kind"] == "wall")
        every = max(1, int(2_000_000 // max(1, walls[len(walls) // 2])))  # a counter read per ~2 ms
        row, info = _energy_loop(fn, torch, cuda, energy_device, energy_min_s, energy_max_s,
                                 min_energy_steps, every)
        details["energy_loop"] = info
        if row is not None:
            rows.append(row)
    return rows, details


def _energy_loop(fn, torch, cuda, dev, min_s, max_s, min_steps, every):
    _sync(torch, cuda)
    t_begin = time.perf_counter_ns()
    e_prev = dev.energy_mj()
    steps = []  # (perf_counter_ns, counter mJ) at each observed counter change
    n = 0
    while True:
        fn()
        n += 1
        if n % every:
            continue
        e = dev.energy_mj()
        now = time.perf_counter_ns()
        if e is not None and e != e_prev:
            steps.append((now, e))
            e_prev = e
        elapsed = ns_to_s(now - t_begin)
        if (len(steps) >= min_steps + 1 and elapsed >= min_s) or elapsed >= max_s:
            break
    _sync(torch, cuda)
    wall = time.perf_counter_ns() - t_begin
    info = {"iterations": n, "wall_ns": wall, "read_every": every, "counter_steps": max(0, len(steps) - 1)}
    if len(steps) < 2 or steps[-1][0] == steps[0][0]:
        info["note"] = "the energy counter did not step twice: no energy per iteration"
        return None, info
    (ta, ea), (tb, eb) = steps[0], steps[-1]
    power_w = mw_to_w((eb - ea) / ns_to_s(tb - ta))  # mJ/s = mW
    per_iter_ns = wall // n
    info.update({"avg_power_w": power_w, "energy_window_ns": tb - ta})
    return {"kind": "energy_loop", "iteration": n, "dur_ns": per_iter_ns,
            "energy_mj": power_w * per_iter_ns / (NS_PER_S / MJ_PER_J)}, info  # W x ns = nJ
