"""The energy counter read on every tick (a thread sampler with its schedule forced on, as every sampler did before
2026-11-28) against the scheduled reads of the default process sampler, side by side over 8 s of alternating GPU
load (0.5 s of bf16 matmuls, 0.5 s asleep): rows, counter reads, the change points both saw and how far apart in
time, and the energy of 0.5, 1 and 2 s windows from each. Needs a CUDA GPU and NVML:
``python benchmarks/sampler_energy_ab.py``. Results: benchmarks/results/sampler-energy-2026-11-28-h200.md."""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernelscope.collectors import nvml


def changes(table) -> tuple[np.ndarray, np.ndarray, int]:
    """Times and values of the counter's change points, and how many rows read it."""
    pairs = [(t, e) for t, e in zip(table.column("ts_ns").to_pylist(), table.column("energy_mj").to_pylist())
             if e is not None]
    ts, e = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    at = np.nonzero(np.diff(e) != 0)[0] + 1
    return ts[at], e[at], len(pairs)


def main() -> None:
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    old = nvml.make_sampler(mode="thread").start()
    for schedule in old._ticker._energy.values():
        schedule.due = lambda now: True
    ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    new = nvml.make_sampler(mode="process").start()
    end = time.time() + 8
    while time.time() < end:
        busy = time.time() + 0.5
        while time.time() < busy:
            x @ x
        torch.cuda.synchronize()
        time.sleep(0.5)
    a, b = old.stop(), new.stop()
    ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"process sampler CPU {(ch1.ru_utime + ch1.ru_stime - ch0.ru_utime - ch0.ru_stime) * 1e3:.0f} ms")
    (at, ae, an), (bt, be, bn) = changes(a), changes(b)
    for name, t, n, ct in (("every tick", a, an, at), ("scheduled", b, bn, bt)):
        print(f"{name:10s} rows {t.num_rows:5d}  counter reads {n:5d}  changes {len(ct):4d}  "
              f"median step {np.median(np.diff(ct)) / 1e6:.2f} ms")
    common = sorted(set(ae) & set(be))
    d = np.array([(bt[list(be).index(v)] - at[list(ae).index(v)]) / 1e6 for v in common])
    print(f"changes both saw: {len(common)}; scheduled minus every-tick time: median {np.median(d):.2f} ms, "
          f"p5 {np.percentile(d, 5):.2f}, p95 {np.percentile(d, 95):.2f}, max |d| {np.abs(d).max():.2f} ms")
    lo, hi, errs = max(at[0], bt[0]), min(at[-1], bt[-1]), []
    for w in (0.5e9, 1e9, 2e9):
        for s in np.arange(lo, hi - w, 0.25e9):
            ea = np.interp(s + w, at, ae) - np.interp(s, at, ae)
            eb = np.interp(s + w, bt, be) - np.interp(s, bt, be)
            errs.append(abs(eb - ea) / ea * 100)
    print(f"window energies, scheduled vs every tick: {len(errs)} windows, median |diff| {np.median(errs):.3f}%, "
          f"max {np.max(errs):.3f}%")


if __name__ == "__main__":
    main()
