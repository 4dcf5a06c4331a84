"""NVML telemetry sampling: ``make_sampler`` and the samplers, the telemetry schema, the achieved period.

A sampler polls every GPU in use (``nvml_devices``: the only module that imports ``pynvml``, matching
NVML devices to CUDA devices by UUID). Two modes, same output: ``"process"`` (default: a child ``python -m
kernelscope.collectors.nvml`` polling on its own GIL) and ``"thread"`` (a background thread here).
``make_sampler(mode=...)`` picks one; without NVML or a GPU it gives a ``NullSampler`` that says why.

Parquet / Arrow schema (``TELEMETRY_SCHEMA``, the store's ``telemetry`` table minus ``trace_id``):

================  =======  ==============================================================
column            type     meaning
================  =======  ==============================================================
device_uuid       string   NVML UUID, e.g. ``GPU-0f3c...``
device_index      int32    NVML index at capture time
ts_ns             int64    epoch ns of the fast-field read (see below)
power_mw          int64    averaged power, mW (``NVML_FI_DEV_POWER_AVERAGE``; else nvmlDeviceGetPowerUsage)
power_instant_mw  int64    instantaneous power, mW (``NVML_FI_DEV_POWER_INSTANT``)
energy_mj         int64    total energy counter since driver load, mJ (null on the ticks that skip it: below)
sm_clock_mhz      int32    SM clock, MHz                   (slow fields: each read once per slow
mem_clock_mhz     int32    memory clock, MHz                period, one group per tick, so on
                                                            different rows; null on the others)
gpu_util_pct      int32    % of the last sample window in which a kernel ran
mem_util_pct      int32    % of the window in which device memory was read or written
mem_used_bytes    int64    device memory used, bytes
temperature_c     int32    GPU temperature, deg C
throttle_reasons  int64    bit mask of nvmlClocksEventReason* (clock throttle reasons)
================  =======  ==============================================================

``ts_ns`` is NVML's own timestamp of the field values (epoch us, x 1000) when it lies within the
call (1 ms slack), else ``time.time_ns()`` right after the call returns: NVML's stamp does not move
Slow fields (``nvml_devices.SLOW_GROUPS``) are read one group per tick, each once per slow period. Any
failure of one sample other than an unsupported field is counted and skipped.

The energy counter is read when its next change is due (``_CounterSchedule``): on an H200 with driver 580 one
read of it costs 4 ms of CPU (every other field a few microseconds) while it changes every 100 ms, so reading
it on every 10 ms tick kept 40% of a core busy. Its change points, all that the power analysis uses of it, are
still seen within one tick.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pyarrow as pa

from kernelscope.collectors.nvml_devices import (
    SLOW_GROUPS,
    NvmlDevice,
    device_info,
    driver_info,
    normalize_uuid,
    open_devices,
)
from kernelscope.errors import UsageError
from kernelscope.units import MS_PER_S, NS_PER_MS, NS_PER_S, ns_to_ms

__all__ = [
    "DEFAULT_MODE", "MODES", "SLOW_GROUPS", "TELEMETRY_SCHEMA", "NullSampler", "ProcessSampler", "Sampler",
    "device_info", "driver_info", "interval_stats", "make_sampler", "normalize_uuid", "open_devices",
]

TELEMETRY_SCHEMA = pa.schema(
    [
        ("device_uuid", pa.string()),
        ("device_index", pa.int32()),
        ("ts_ns", pa.int64()),
        ("power_mw", pa.int64()),
        ("power_instant_mw", pa.int64()),
        ("energy_mj", pa.int64()),
        ("sm_clock_mhz", pa.int32()),
        ("mem_clock_mhz", pa.int32()),
        ("gpu_util_pct", pa.int32()),
        ("mem_util_pct", pa.int32()),
        ("mem_used_bytes", pa.int64()),
        ("temperature_c", pa.int32()),
        ("throttle_reasons", pa.int64()),
    ]
)

def _rows_to_table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[] for _ in TELEMETRY_SCHEMA]
    return pa.table([pa.array(c, type=f.type) for c, f in zip(cols, TELEMETRY_SCHEMA)],
                    schema=TELEMETRY_SCHEMA)


def interval_stats(table: pa.Table, window: tuple[int, int] | None = None) -> dict:
    """Achieved sampling period from the stored timestamps, pooled over devices.

    An interval is the time between two consecutive samples of one device (ms). With ``window`` =
    (start_ns, end_ns) in epoch ns, only intervals that overlap the window count, so a gap that
    straddles either end is included. Returns ``median_ms``, ``p95_ms`` (nearest rank), ``max_ms``,
    ``intervals`` (how many), ``samples`` (samples inside the window, or all) and ``window_ms``;
    the statistics are None with fewer than one interval.
    """
    by_dev: dict[str, list[int]] = {}
    for u, t in zip(table.column("device_uuid").to_pylist(), table.column("ts_ns").to_pylist()):
        by_dev.setdefault(u, []).append(t)
    gaps, inside = [], 0
    for ts in by_dev.values():
        ts.sort()
        for a, b in zip(ts, ts[1:]):
            if window is None or (b > window[0] and a < window[1]):
                gaps.append(ns_to_ms(b - a))
        inside += len(ts) if window is None else sum(window[0] <= t <= window[1] for t in ts)
    gaps.sort()
    out = {"median_ms": None, "p95_ms": None, "max_ms": None, "intervals": len(gaps), "samples": inside,
           "window_ms": None if window is None else ns_to_ms(window[1] - window[0])}
    if gaps:
        n = len(gaps)
        mid = (gaps[(n - 1) // 2] + gaps[n // 2]) / 2
        out.update(median_ms=mid, p95_ms=gaps[max(0, math.ceil(0.95 * n) - 1)], max_ms=gaps[-1])
    return out


class _CounterSchedule:
    """When to read one device's energy counter. Until it has changed four times it is read on every tick; then from two
    periods before its next change is due (the last change plus the second shortest of its last eight intervals, the
    shortest while it has fewer than four) until it changes, so each change is still seen on the first tick after
    it. Near the shortest, not the median: an interval measured too long (two changes seen as one, a sampler starved
    across a change) would open the next window late and skip ticks, while one measured too short only opens it
    early (more reads). With the median, two too long among the first few were enough (a test that read late skipped
    four ticks after a change in the full suite on the loaded 2-core machine; the schedule could then settle into
    alternating 5 and 195 ms intervals). Not the shortest itself: one change dated early (the sampler starved just
    before it, so the last read that did not show it was long before) measures one interval too short, and for the
    next eight changes every window opened that much early (the full suite on the loaded 2-core machine: 100 of 140
    ticks read the counter in a test that allows 70%). A counter that changes every few ticks is read on every tick.
    A change is dated by the last read that did not show it (the earliest it can have happened): dated by the read
    that saw it, a sampler starved for a while (a busy machine) saw a change 65 ms late, opened its next window as
    late and skipped the ticks after that change. That read's time is NVML's stamp of its values or, without one,
    when the call began: the time after it returns can be tens of ms after the values were read (the thread
    descheduled in between), and dating by it opened the next window as late (seen on a loaded 2-core machine: 11
    ticks after a change skipped)."""

    def __init__(self, period_s: float):
        self.margin_ns = round(2 * period_s * NS_PER_S)
        self.value = None
        self.read_ns = None
        self.changed_ns = None
        self.steps: list[int] = []

    def due(self, now_ns: int) -> bool:
        if len(self.steps) < 3:
            return True
        steps = sorted(self.steps)
        return now_ns >= self.changed_ns + steps[1 if len(steps) >= 4 else 0] - self.margin_ns

    def saw(self, read_ns: int, value: int | None) -> None:
        """One read of the counter: ``read_ns`` is no later than when its value was read."""
        if value is None:
            return
        if self.value is not None and value != self.value:
            at = self.read_ns if self.read_ns is not None else read_ns
            if self.changed_ns is not None:
                self.steps = [*self.steps[-7:], at - self.changed_ns]
            self.changed_ns = at
        self.value = value
        self.read_ns = read_ns


class _Ticker:
    """One sampling tick for all devices; shared by the thread and the process sampler.

    Each tick reads the fast fields of every device first (its row's ``ts_ns``), then at most one
    slow-field group per device (``SLOW_GROUPS``, in turn), so a slow read delays the next fast read
    by one NVML call at most. Every ``slow_period_s`` a new round of all groups is queued (only when
    the previous round is done), so each slow field is read once per slow period, on its own row.
    """

    def __init__(self, devices: list[NvmlDevice], slow_period_s: float, period_s: float):
        self.devices = devices
        self.slow_period_s = slow_period_s
        self.rows: list[tuple] = []
        self.errors = 0
        self.nvml_stamped = 0
        self.energy_reads = 0
        self._energy = {d.uuid: _CounterSchedule(period_s) for d in devices}
        self._pending = {d.uuid: [] for d in devices}
        self._next_slow = None

    def tick(self) -> None:
        now = time.monotonic()
        if self._next_slow is None or now >= self._next_slow:
            for d in self.devices:
                if not self._pending[d.uuid]:
                    self._pending[d.uuid] = list(SLOW_GROUPS)
            self._next_slow = max((self._next_slow or now) + self.slow_period_s, now)
        fast = []
        for d in self.devices:
            counter = self._energy[d.uuid]
            try:
                before = time.time_ns()
                energy = counter.due(before)
                row = d.fast(energy=energy)
                after = time.time_ns()
            except Exception:  # a driver hiccup must not kill the sampler
                self.errors += 1
                continue
            # NVML stamps field values when it reads them; that time is immune to this process
            # waiting (GIL, scheduler) after the call. Used when it lies within the call (1 ms slack).
            nv_ts = row.pop("_ts_ns", None)
            if nv_ts is not None and before - NS_PER_MS <= nv_ts <= after + NS_PER_MS:
                row["ts"] = read_at = nv_ts
                self.nvml_stamped += 1
            else:
                row["ts"], read_at = after, before
            if energy:
                self.energy_reads += 1
                counter.saw(read_at, row["energy_mj"])
            fast.append((d, row))
        for d, row in fast:
            queue = self._pending[d.uuid]
            while queue:
                group = queue.pop(0)
                if not d.group_unsupported(group):
                    try:
                        row.update(d.slow_group(group))
                    except Exception:
                        self.errors += 1
                    break
            self.rows.append((d.uuid, d.index, row["ts"], row["power_mw"], row["power_instant_mw"],
                              row["energy_mj"], row.get("sm_clock_mhz"), row.get("mem_clock_mhz"),
                              row.get("gpu_util_pct"), row.get("mem_util_pct"),
                              row.get("mem_used_bytes"), row.get("temperature_c"),
                              row.get("throttle_reasons")))


class _SamplerBase:
    """What the thread and process samplers share: parameters, result table, measured period."""

    kind = "?"
    reason = None

    def __init__(self, devices: list[NvmlDevice], period_ms: float = 10, slow_period_ms: float = 100):
        self.devices = devices
        self.period_ms, self.slow_period_ms = period_ms, slow_period_ms
        self.period_s, self.slow_period_s = period_ms / MS_PER_S, slow_period_ms / MS_PER_S
        self.table = TELEMETRY_SCHEMA.empty_table()
        self.errors = 0
        self.nvml_stamped = 0
        self.energy_reads = 0
        self.achieved_period_ms = None
        self.max_gap_ms = None
        self.unsupported = {d.uuid: sorted(d.unsupported) for d in devices}

    def _finish(self, table: pa.Table) -> pa.Table:
        self.table = table
        st = interval_stats(table)
        self.achieved_period_ms, self.max_gap_ms = st["median_ms"], st["max_ms"]
        return table

    @property
    def rows(self) -> list:
        return self.table.to_pylist()

    def period_stats(self, window: tuple[int, int] | None = None) -> dict:
        """``interval_stats`` of the samples taken so far (call after ``stop()``)."""
        return interval_stats(self.table, window)

    def info(self) -> dict:
        st = self.period_stats()
        return {"kind": self.kind, "period_ms": self.period_ms, "slow_period_ms": self.slow_period_ms,
                "achieved_period_ms": self.achieved_period_ms, "p95_period_ms": st["p95_ms"],
                "max_gap_ms": self.max_gap_ms, "samples": self.table.num_rows, "errors": self.errors,
                "reason": self.reason, "nvml_stamped": self.nvml_stamped,
                "energy_reads": self.energy_reads,
                "devices": [{"uuid": d.uuid, "nvml_index": d.index,
                             "unsupported": self.unsupported.get(d.uuid, [])} for d in self.devices]}


def _loop(ticker: _Ticker, period_s: float, wait_stop) -> None:
    """Tick every ``period_s`` until ``wait_stop(timeout_s)`` returns True; no burst after a stall."""
    next_t = time.monotonic()
    while True:
        ticker.tick()
        next_t = max(next_t + period_s, time.monotonic())
        if wait_stop(max(0.0, next_t - time.monotonic())):
            break


class Sampler(_SamplerBase):
    """NVML sampler on a background thread of this process (``mode="thread"``).

    Every ``period_ms`` a ``_Ticker`` tick; ``stop()`` returns the samples as a ``pyarrow.Table``
    with ``TELEMETRY_SCHEMA``. ``achieved_period_ms`` is the median interval between consecutive
    samples of a device, ``max_gap_ms`` the largest (measured, not assumed). The thread needs the GIL
    for every tick, so a busy interpreter (e.g. torch.profiler post-processing) delays it.
    """

    kind = "thread"

    def __init__(self, devices, period_ms: float = 10, slow_period_ms: float = 100):
        super().__init__(devices, period_ms, slow_period_ms)
        self._ticker = _Ticker(devices, self.slow_period_s, self.period_s)
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> Sampler:
        self._stop.clear()
        self._ticker = _Ticker(self.devices, self.slow_period_s, self.period_s)
        self._thread = threading.Thread(target=_loop, args=(self._ticker, self.period_s, self._stop.wait),
                                        name="kernelscope-nvml", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> pa.Table:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.errors, self.nvml_stamped = self._ticker.errors, self._ticker.nvml_stamped
        self.energy_reads = self._ticker.energy_reads
        self.unsupported = {d.uuid: sorted(d.unsupported) for d in self.devices}
        return self._finish(_rows_to_table(self._ticker.rows))


_START_TIMEOUT_S = 60.0  # a cold interpreter + pyarrow import on a loaded host


class ProcessSampler(_SamplerBase):
    """NVML sampler in a child process (``mode="process"``): polls on its own interpreter and GIL.

    ``start()`` runs ``python -m kernelscope.collectors.nvml --out FILE --period-ms P
    --slow-period-ms S UUID...`` and returns once the child has taken its first sample (it prints
    ``ready``). The child samples with the same ``_Ticker`` as the thread sampler, keeps the rows in
    memory (nothing is sent while the workload runs), and on ``stop`` (a line on its stdin, or stdin
    closed) writes them to FILE as an Arrow IPC file and prints one JSON line of counters. If the
    child cannot start, this sampler warns once and returns an empty table, like the null sampler.
    """

    kind = "process"

    def __init__(self, devices, period_ms: float = 10, slow_period_ms: float = 100):
        super().__init__(devices, period_ms, slow_period_ms)
        self._proc = None
        self._out = None
        self.startup_s = None

    def _fail(self, why: str) -> None:
        self.reason = f"the sampler process failed: {why}"
        warnings.warn(f"kernelscope: no GPU telemetry: {self.reason}", stacklevel=3)
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.communicate()  # reaps the child and closes its pipes
        self._proc = None

    def start(self) -> ProcessSampler:
        fd, self._out = tempfile.mkstemp(prefix="kernelscope-nvml-", suffix=".arrow")
        os.close(fd)
        cmd = [sys.executable, "-m", "kernelscope.collectors.nvml", "--out", self._out,
               "--period-ms", repr(self.period_ms), "--slow-period-ms", repr(self.slow_period_ms),
               *[d.uuid for d in self.devices]]
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # kernelscope importable in the child
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        t0 = time.perf_counter()
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        ready, _, _ = select.select([self._proc.stdout], [], [], _START_TIMEOUT_S)
        line = self._proc.stdout.readline().decode(errors="replace").strip() if ready else ""
        if line != "ready":
            self._fail(line or f"no 'ready' within {_START_TIMEOUT_S:.0f} s")
        self.startup_s = time.perf_counter() - t0
        return self

    def stop(self) -> pa.Table:
        proc, self._proc = self._proc, None
        table = TELEMETRY_SCHEMA.empty_table()
        if proc is not None:
            try:
                out, _ = proc.communicate(b"stop\n", timeout=_START_TIMEOUT_S)
                counters = json.loads(out.decode().strip().splitlines()[-1])
                with pa.memory_map(self._out) as src:
                    table = pa.ipc.open_file(src).read_all()
            except Exception as e:  # child died or hung: keep the run, say why
                if proc.poll() is None:
                    proc.kill()
                proc.communicate()
                self.reason = f"the sampler process returned no samples ({type(e).__name__}: {e})"
                warnings.warn(f"kernelscope: no GPU telemetry: {self.reason}", stacklevel=2)
            else:
                self.errors, self.nvml_stamped = counters["errors"], counters["nvml_stamped"]
                self.energy_reads = counters["energy_reads"]
                self.unsupported = counters["unsupported"]
        if self._out is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._out)
            self._out = None
        return self._finish(table)

    def info(self) -> dict:
        out = super().info()
        out["startup_s"] = self.startup_s
        return out


class NullSampler:
    """Stands in when there is no NVML or no GPU: says once why, returns an empty table."""

    kind = "null"
    achieved_period_ms = None
    max_gap_ms = None
    devices: list = []

    def __init__(self, reason: str, quiet: bool = False):
        self.reason, self.quiet = reason, quiet

    def start(self) -> NullSampler:
        if not self.quiet:
            warnings.warn(f"kernelscope: no GPU telemetry: {self.reason}", stacklevel=2)
        return self

    def stop(self) -> pa.Table:
        return TELEMETRY_SCHEMA.empty_table()

    def period_stats(self, window=None) -> dict:
        return interval_stats(TELEMETRY_SCHEMA.empty_table(), window)

    def info(self) -> dict:
        return {"kind": "null", "achieved_period_ms": None, "samples": 0, "reason": self.reason}


# Default sampler: "process". Decided by the H200 capture (sample_traces/, thread sampler, 10 ms
# target): inside profiled runs the thread's intervals reached 50-60 ms around the end of every trace
# (torch.profiler post-processing holds the GIL), so the window needed for ">= 1 sample per 20 ms of
# traced time" was missed; a child process does not wait for this interpreter's GIL.
# benchmarks/sampler_overhead.py measures both modes' overhead and period, profiler on and off.
DEFAULT_MODE = "process"
MODES = ("process", "thread")


def make_sampler(devices=None, period_ms: float = 10, slow_period_ms: float = 100,
                 quiet: bool = False, mode: str | None = None):
    """A sampler for the CUDA devices in use, or a NullSampler saying why there is none.

    ``mode``: ``"process"`` (``ProcessSampler``), ``"thread"`` (``Sampler``) or None for
    ``DEFAULT_MODE``. Devices are matched (by UUID) in this process; the child gets their NVML UUIDs.
    """
    mode = DEFAULT_MODE if mode is None else mode
    if mode not in MODES:
        raise UsageError(f"sampler mode {mode!r} is not one of {list(MODES)}; pass mode='process' or 'thread'.")
    devs, reason = open_devices(devices)
    if not devs:
        return NullSampler(reason, quiet=quiet)
    cls = ProcessSampler if mode == "process" else Sampler
    return cls(devs, period_ms=period_ms, slow_period_ms=slow_period_ms)


def _child_main(argv: list[str]) -> int:
    """The sampler process: ``python -m kernelscope.collectors.nvml --out FILE [--period-ms P]
    [--slow-period-ms S] UUID...`` (see ``ProcessSampler``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kernelscope.collectors.nvml")
    ap.add_argument("--out", required=True)
    ap.add_argument("--period-ms", type=float, default=10)
    ap.add_argument("--slow-period-ms", type=float, default=100)
    ap.add_argument("uuids", nargs="+")
    a = ap.parse_args(argv)
    devs, reason = open_devices(a.uuids)
    if not devs:
        print(f"no NVML device: {reason}", flush=True)
        return 1
    _rows_to_table([])  # pa.array imports pandas (~0.4 s): pay it before "ready", not in stop()
    ticker = _Ticker(devs, a.slow_period_ms / MS_PER_S, a.period_ms / MS_PER_S)
    ticker.tick()
    print("ready", flush=True)
    stdin = sys.stdin.buffer

    def wait_stop(timeout_s: float) -> bool:
        return bool(select.select([stdin], [], [], timeout_s)[0])  # a line or EOF on stdin: stop

    _loop(ticker, a.period_ms / MS_PER_S, wait_stop)
    table = _rows_to_table(ticker.rows)
    with pa.OSFile(a.out, "wb") as sink, pa.ipc.new_file(sink, TELEMETRY_SCHEMA) as w:
        w.write_table(table)
    print(json.dumps({"samples": table.num_rows, "errors": ticker.errors,
                      "nvml_stamped": ticker.nvml_stamped, "energy_reads": ticker.energy_reads,
                      "unsupported": {d.uuid: sorted(d.unsupported) for d in devs}}), flush=True)
    return 0


if __name__ == "__main__":
    _code = _child_main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(_code)  # the output is written; skip interpreter teardown (it adds ~0.5 s to stop())
