"""A fake ``pynvml`` for sampler tests: devices with fixed UUIDs, scripted failures and stalls.

Only what ``kernelscope.collectors.nvml_devices`` calls is implemented. Each device's averaged power is
``1000 * (index + 1)`` mW and instant power ``1000 * (index + 1) + 1`` so rows can be traced back to
their device; the energy counter rises by 10 mJ per read, or (``energy_step_ms``) by 10 mJ at every multiple
of that many ms of the epoch clock, as a real counter that refreshes on its own cadence; ``late_return_ms``
makes a read of it within 10 ms before its next change return that many ms after it read the value (a sampler
thread descheduled in between, as on a loaded machine).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace


class NVMLError(Exception):
    def __init__(self, code=3):
        super().__init__(f"NVML error {code}")
        self.value = code


class _FieldValue:
    def __init__(self, field_id, ret, value_type=0, value=0, timestamp=0):
        self.fieldId = field_id
        self.timestamp = timestamp
        self.nvmlReturn = ret
        self.valueType = value_type
        self.value = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=0, sllVal=0, siVal=0, usVal=0)
        if value_type == 1:
            self.value.uiVal = value
        elif value_type == 3:
            self.value.ullVal = value


class FakeNVML:
    """``FakeNVML(["GPU-aaa", "GPU-bbb"])``; ``unsupported_fields`` (NVML field ids answering
    NOT_SUPPORTED), ``unsupported_calls`` (function names raising NVMLError), ``stall`` = (function name,
    call number, seconds) to block one call."""

    def __init__(self, uuids, unsupported_fields=(), unsupported_calls=(), stall=None, init_error=None,
                 stamp=None, stall_file=None, energy_step_ms=None, late_return_ms=None):
        self.uuids = list(uuids)
        self.unsupported_fields = set(unsupported_fields)
        self.unsupported_calls = set(unsupported_calls)
        self.stall = stall
        self.init_error = init_error
        self.stamp = stamp  # None: no NVML timestamps; "read": read time in us; "bogus": 12345 us
        self.stamps_us: list[int] = []
        self.calls: dict[str, int] = {}
        self.stall_end_ns = None
        self.stall_file = stall_file  # where to write stall_end_ns (read by tests of the sampler process)
        self.energy = {i: 1_000_000 for i in range(len(uuids))}
        self.energy_step_ms = energy_step_ms
        self.late_return_ms = late_return_ms
        self.lock = threading.Lock()
        self.NVMLError = NVMLError

    def _enter(self, fn_name):
        with self.lock:
            self.calls[fn_name] = self.calls.get(fn_name, 0) + 1
            n = self.calls[fn_name]
        if self.stall and self.stall[0] == fn_name and self.stall[1] == n:
            time.sleep(self.stall[2])
            self.stall_end_ns = time.time_ns()
            if self.stall_file:
                with open(self.stall_file, "w") as f:
                    f.write(str(self.stall_end_ns))
        if fn_name in self.unsupported_calls:
            raise NVMLError(3)

    # -- library ---------------------------------------------------------------------------------
    def nvmlInit(self):
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return b"580.00.01"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetCount(self):
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetUUID(self, h):
        return self.uuids[h[1]].encode()

    def nvmlDeviceGetName(self, h):
        return b"Fake H100"

    # -- fast fields -----------------------------------------------------------------------------
    def nvmlDeviceGetFieldValues(self, h, field_ids):
        self._enter("nvmlDeviceGetFieldValues")
        i = h[1]
        ts = {None: 0, "bogus": 12345}.get(self.stamp, time.time_ns() // 1000)
        if self.stamp == "read":
            self.stamps_us.append(ts)
            time.sleep(0.002)  # the call returns 2 ms after NVML read the values
        out = []
        for f in field_ids:
            if f in self.unsupported_fields:
                out.append(_FieldValue(f, 3))
            elif f == 185:
                out.append(_FieldValue(f, 0, 1, 1000 * (i + 1), ts))
            elif f == 186:
                out.append(_FieldValue(f, 0, 1, 1000 * (i + 1) + 1, ts))
            elif f == 83 and self.energy_step_ms:
                step_ns, now = round(self.energy_step_ms * 1e6), time.time_ns()
                out.append(_FieldValue(f, 0, 3, 10 * (now // step_ns), ts))
                if self.late_return_ms and step_ns - now % step_ns <= 10_000_000:
                    time.sleep(self.late_return_ms / 1000)
            elif f == 83:
                with self.lock:
                    self.energy[i] += 10
                    e = self.energy[i]
                out.append(_FieldValue(f, 0, 3, e, ts))
            else:
                out.append(_FieldValue(f, 2))
        return out

    def nvmlDeviceGetPowerUsage(self, h):
        self._enter("nvmlDeviceGetPowerUsage")
        return 777

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._enter("nvmlDeviceGetTotalEnergyConsumption")
        return self.energy[h[1]]

    # -- slow fields -----------------------------------------------------------------------------
    def nvmlDeviceGetClockInfo(self, h, kind):
        self._enter("nvmlDeviceGetClockInfo")
        return 1980 if kind == 1 else 2619

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == 1 else 2619

    def nvmlDeviceGetUtilizationRates(self, h):
        self._enter("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        self._enter("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=5 * 2**30, total=80 * 2**30, free=75 * 2**30)

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._enter("nvmlDeviceGetTemperature")
        return 55

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._enter("nvmlDeviceGetCurrentClocksEventReasons")
        return 4

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{h[1] + 1:02X}:00.0".encode())

    def nvmlDeviceGetMigMode(self, h):
        raise NVMLError(3)

    def nvmlDeviceGetEccMode(self, h):
        return [1, 1]
