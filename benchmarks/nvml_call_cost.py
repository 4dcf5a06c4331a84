"""CPU and wall time of each NVML call the sampler makes (300 calls each, device 0), then the CPU of the process and
the thread sampler over 5 s of an idle GPU. Needs a GPU and NVML: ``python benchmarks/nvml_call_cost.py``.

Found with it (H200, driver 580, 2026-11-28): reading the energy counter (field 83, or
nvmlDeviceGetTotalEnergyConsumption) costs 4 ms of CPU, every other call 1-6 us; results in
benchmarks/results/sampler-energy-2026-11-28-h200.md."""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernelscope.collectors.nvml import make_sampler
from kernelscope.collectors.nvml_devices import _load  # the one pynvml import site


def cost(name: str, fn, n: int = 300) -> None:
    fn()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        fn()
    cpu, wall = (time.process_time() - c0) / n * 1e3, (time.perf_counter() - w0) / n * 1e3
    print(f"{name:38s} cpu {cpu:7.3f} ms  wall {wall:7.3f} ms")


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    nv, why = _load()
    if nv is None:
        raise SystemExit(f"nvml_call_cost: {why}")
    h = nv.nvmlDeviceGetHandleByIndex(0)
    for name, fields in (("avg,instant,energy", [185, 186, 83]), ("avg", [185]), ("instant", [186]),
                         ("energy", [83]), ("avg,instant", [185, 186])):
        cost(f"FieldValues({name})", lambda f=fields: nv.nvmlDeviceGetFieldValues(h, f))
    cost("GetPowerUsage", lambda: nv.nvmlDeviceGetPowerUsage(h))
    cost("GetTotalEnergyConsumption", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h))
    cost("GetClockInfo(sm)", lambda: nv.nvmlDeviceGetClockInfo(h, 1))
    cost("GetUtilizationRates", lambda: nv.nvmlDeviceGetUtilizationRates(h))
    cost("GetMemoryInfo", lambda: nv.nvmlDeviceGetMemoryInfo(h))
    cost("GetTemperature", lambda: nv.nvmlDeviceGetTemperature(h, 0))
    for mode in ("process", "thread"):
        c0, ch0 = time.process_time(), children_cpu_s()
        s = make_sampler(mode=mode).start()
        time.sleep(5)
        t = s.stop()
        print(f"{mode} sampler, 5 s idle: {t.num_rows} rows, {s.info().get('energy_reads')} counter reads; "
              f"CPU here {(time.process_time() - c0) * 1e3:.0f} ms, in child processes "
              f"{(children_cpu_s() - ch0) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
