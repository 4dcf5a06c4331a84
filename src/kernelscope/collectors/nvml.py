"""NVML telemetry: the only module that imports ``pynvml``.

A background thread samples every GPU in use, matched to CUDA devices by UUID (NVML index order is
not CUDA ordinal order when CUDA_VISIBLE_DEVICES reorders or hides devices).

Parquet / Arrow schema (``TELEMETRY_SCHEMA``, the store's ``telemetry`` table minus ``trace_id``):

================  =======  ==============================================================
column            type     meaning
================  =======  ==============================================================
device_uuid       string   NVML UUID, e.g. ``GPU-0f3c...``
device_index      int32    NVML index at capture time
ts_ns             int64    epoch ns of the fast-field read (see below)
power_mw          int64    averaged power, mW (``NVML_FI_DEV_POWER_AVERAGE``; else nvmlDeviceGetPowerUsage)
power_instant_mw  int64    instantaneous power, mW (``NVML_FI_DEV_POWER_INSTANT``)
energy_mj         int64    total energy counter since driver load, mJ
sm_clock_mhz      int32    SM clock, MHz                   (slow fields: set every slow period,
mem_clock_mhz     int32    memory clock, MHz                null on the rows in between)
gpu_util_pct      int32    % of the last sample window in which a kernel ran
mem_util_pct      int32    % of the window in which device memory was read or written
mem_used_bytes    int64    device memory used, bytes
temperature_c     int32    GPU temperature, deg C
throttle_reasons  int64    bit mask of nvmlClocksEventReason* (clock throttle reasons)
================  =======  ==============================================================

``ts_ns`` is NVML's own timestamp of the field values (epoch us, x 1000) when it lies within the
call (1 ms slack), else ``time.time_ns()`` right after the call returns: NVML's stamp does not move
when this thread waits for the GIL after the call (up to the 5 ms switch interval on a busy host).

A field a device does not support is null; the first NVMLError for a field marks it unsupported for
that device and it is not asked again. Any other failure of one sample is counted and skipped.
"""

from __future__ import annotations

import threading
import time
import warnings

import pyarrow as pa

pynvml = None  # the one import site; tests replace this attribute with a fake module

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

_FI_TOTAL_ENERGY = 83  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ
_FI_POWER_AVERAGE = 185  # NVML_FI_DEV_POWER_AVERAGE, mW
_FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT, mW
_FAST_FIELDS = (("power_mw", _FI_POWER_AVERAGE), ("power_instant_mw", _FI_POWER_INSTANT),
                ("energy_mj", _FI_TOTAL_ENERGY))
_CLOCK_SM, _CLOCK_MEM, _TEMPERATURE_GPU = 1, 2, 0


def _load() -> tuple[object | None, str | None]:
    """Import and initialise pynvml once. Returns (module, None) or (None, reason)."""
    global pynvml
    if pynvml is None:
        try:
            import pynvml as _mod  # noqa: PLC0415 - the one import site
        except ImportError:
            return None, "pynvml (nvidia-ml-py) is not installed"
        pynvml = _mod
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML could not be initialised ({e})"
    return pynvml, None


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def normalize_uuid(u) -> str:
    """Lower-case hex UUID without a ``GPU-``/``MIG-`` prefix, so torch and NVML spellings compare."""
    s = _text(u).strip().lower()
    for p in ("gpu-", "mig-"):
        if s.startswith(p):
            s = s[len(p):]
    return s


def _cuda_device_uuids(devices=None) -> list[str] | None:
    """UUIDs of the CUDA devices in use (torch ordinals ``devices``, default all visible), or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    ordinals = range(torch.cuda.device_count()) if devices is None else devices
    out = []
    for i in ordinals:
        u = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        if u is not None:
            out.append(str(u))
    return out


_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _cuda_device_pci(devices=None) -> list[tuple | None] | None:
    """(domain, bus, device) PCI ids of the CUDA devices in use, in the same order as their UUIDs."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    ordinals = range(torch.cuda.device_count()) if devices is None else devices
    out = []
    for i in ordinals:
        p = torch.cuda.get_device_properties(i)
        ids = tuple(getattr(p, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
        out.append(None if None in ids else ids)
    return out


def _parse_bus_id(bus_id) -> tuple | None:
    """NVML ``"00000000:19:00.0"`` -> (0, 0x19, 0)."""
    try:
        dom, bus, rest = _text(bus_id).split(":")
        return int(dom, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


def _field_value(fv):
    """Value of one c_nvmlFieldValue_t by its valueType; None when the field failed."""
    if getattr(fv, "nvmlReturn", 0) != 0 or fv.valueType not in _VALUE_ATTR:
        return None
    return getattr(fv.value, _VALUE_ATTR[fv.valueType])


class _Device:
    """One NVML device and the set of fields found unsupported on it."""

    def __init__(self, nv, index: int, handle, uuid: str):
        self.nv, self.index, self.handle, self.uuid = nv, index, handle, uuid
        self.unsupported: set[str] = set()

    def _call(self, field: str, fn, *args):
        if field in self.unsupported:
            return None
        try:
            return fn(self.handle, *args)
        except self.nv.NVMLError:
            self.unsupported.add(field)
            return None

    def fast(self) -> dict:
        """Averaged/instant power and the energy counter, batched through nvmlDeviceGetFieldValues."""
        row = {"power_mw": None, "power_instant_mw": None, "energy_mj": None}
        wanted = [(c, f) for c, f in _FAST_FIELDS if c not in self.unsupported]
        if wanted and "field_values" not in self.unsupported:
            try:
                vals = self.nv.nvmlDeviceGetFieldValues(self.handle, [f for _, f in wanted])
            except self.nv.NVMLError:
                self.unsupported.add("field_values")
            else:
                for (col, _), fv in zip(wanted, vals):
                    v = _field_value(fv)
                    if v is None:
                        self.unsupported.add(col)
                    else:
                        row[col] = int(v)
                        stamp = getattr(fv, "timestamp", 0)  # NVML's own read time, epoch us
                        if stamp and "_ts_ns" not in row:
                            row["_ts_ns"] = int(stamp) * 1000
        if "field_values" in self.unsupported or "power_mw" in self.unsupported:
            if row["power_mw"] is None:
                row["power_mw"] = self._call("power_usage", self.nv.nvmlDeviceGetPowerUsage)
        if row["energy_mj"] is None and ("field_values" in self.unsupported or "energy_mj" in self.unsupported):
            row["energy_mj"] = self._call("energy_total", self.nv.nvmlDeviceGetTotalEnergyConsumption)
        return row

    def slow(self) -> dict:
        nv = self.nv
        util = self._call("util", nv.nvmlDeviceGetUtilizationRates)
        mem = self._call("mem", nv.nvmlDeviceGetMemoryInfo)
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return {
            "sm_clock_mhz": self._call("sm_clock_mhz", nv.nvmlDeviceGetClockInfo, _CLOCK_SM),
            "mem_clock_mhz": self._call("mem_clock_mhz", nv.nvmlDeviceGetClockInfo, _CLOCK_MEM),
            "gpu_util_pct": None if util is None else int(util.gpu),
            "mem_util_pct": None if util is None else int(util.memory),
            "mem_used_bytes": None if mem is None else int(mem.used),
            "temperature_c": self._call("temperature_c", nv.nvmlDeviceGetTemperature, _TEMPERATURE_GPU),
            "throttle_reasons": self._call("throttle_reasons", reasons_fn),
        }

    def energy_mj(self) -> int | None:
        """The total-energy counter now, mJ (for the un-profiled energy loop)."""
        return self.fast()["energy_mj"]


def open_devices(devices=None) -> tuple[list[_Device], str | None]:
    """NVML devices matching the CUDA devices in use, by UUID.

    ``devices``: None (all CUDA-visible devices), a list of CUDA ordinals, or a list of UUID strings.
    Returns (devices, None) or ([], reason).
    """
    nv, reason = _load()
    if nv is None:
        return [], reason
    if devices is not None and all(isinstance(d, str) for d in devices):
        want = list(devices)
    else:
        want = _cuda_device_uuids(devices)
        if want is None:
            return [], "no CUDA device is visible to torch"
    by_uuid, by_pci = {}, {}
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        u = _text(nv.nvmlDeviceGetUUID(h))
        by_uuid[normalize_uuid(u)] = (i, h, u)
        try:
            by_pci[_parse_bus_id(nv.nvmlDeviceGetPciInfo(h).busId)] = (i, h, u)
        except Exception:
            pass
    pci = None
    out, missing = [], []
    for k, u in enumerate(want):
        hit = by_uuid.get(normalize_uuid(u))
        if hit is None and not (devices and isinstance(devices[0], str)):
            # UUIDs differ (e.g. a MIG instance): fall back to the PCI address of the CUDA device
            pci = _cuda_device_pci(devices) if pci is None else pci
            if pci and k < len(pci) and pci[k] is not None:
                hit = by_pci.get(pci[k])
        if hit is None:
            missing.append(u)
        else:
            out.append(_Device(nv, hit[0], hit[1], hit[2]))
    if not out:
        return [], f"no NVML device matches the CUDA device UUIDs {want}"
    if missing:
        warnings.warn(f"kernelscope: no NVML device for CUDA UUIDs {missing}; no telemetry for them",
                      stacklevel=3)
    return out, None


class Sampler:
    """Background-thread NVML sampler.

    Every ``period_ms`` it reads the fast fields of each device and stamps the row with
    ``time.time_ns()``; every ``slow_period_ms`` it also reads the slow fields. ``stop()`` returns the
    samples as a ``pyarrow.Table`` with ``TELEMETRY_SCHEMA``. ``achieved_period_ms`` is the mean time
    between consecutive samples of a device (its median over devices), measured, not assumed.
    """

    reason = None

    def __init__(self, devices: list[_Device], period_ms: float = 10, slow_period_ms: float = 100):
        self.devices = devices
        self.period_s = period_ms / 1e3
        self.slow_period_s = slow_period_ms / 1e3
        self.period_ms, self.slow_period_ms = period_ms, slow_period_ms
        self.rows: list[tuple] = []
        self.errors = 0
        self.nvml_stamped = 0
        self.achieved_period_ms = None
        self.max_gap_ms = None
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> "Sampler":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kernelscope-nvml", daemon=True)
        self._thread.start()
        return self

    def _sample(self, slow: bool) -> None:
        for d in self.devices:
            try:
                before = time.time_ns()
                row = d.fast()
                after = time.time_ns()
                # NVML stamps field values when it reads them; that time is immune to this thread
                # waiting for the GIL after the call. Used when it lies within the call (1 ms slack).
                nv_ts = row.pop("_ts_ns", None)
                if nv_ts is not None and before - 1_000_000 <= nv_ts <= after + 1_000_000:
                    ts = nv_ts
                    self.nvml_stamped += 1
                else:
                    ts = after
                row.update(d.slow() if slow else {})
            except Exception:  # a driver hiccup must not kill the sampler
                self.errors += 1
                continue
            self.rows.append((d.uuid, d.index, ts, row["power_mw"], row["power_instant_mw"],
                              row["energy_mj"], row.get("sm_clock_mhz"), row.get("mem_clock_mhz"),
                              row.get("gpu_util_pct"), row.get("mem_util_pct"),
                              row.get("mem_used_bytes"), row.get("temperature_c"),
                              row.get("throttle_reasons")))

    def _run(self) -> None:
        next_fast = next_slow = time.monotonic()
        while True:
            now = time.monotonic()
            slow = now >= next_slow
            if slow:
                next_slow = max(next_slow + self.slow_period_s, now)
            self._sample(slow)
            next_fast = max(next_fast + self.period_s, time.monotonic())  # no burst after a stall
            if self._stop.wait(max(0.0, next_fast - time.monotonic())):
                break

    def stop(self) -> pa.Table:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        cols = list(zip(*self.rows)) if self.rows else [[] for _ in TELEMETRY_SCHEMA]
        table = pa.table([pa.array(c, type=f.type) for c, f in zip(cols, TELEMETRY_SCHEMA)],
                         schema=TELEMETRY_SCHEMA)
        periods, gaps = [], []
        for d in self.devices:
            ts = [r[2] for r in self.rows if r[0] == d.uuid]
            if len(ts) >= 2:
                periods.append((ts[-1] - ts[0]) / (len(ts) - 1) / 1e6)
                gaps.append(max(b - a for a, b in zip(ts, ts[1:])) / 1e6)
        if periods:
            periods.sort()
            self.achieved_period_ms = periods[len(periods) // 2]
            self.max_gap_ms = max(gaps)
        return table

    def info(self) -> dict:
        return {"kind": "thread", "period_ms": self.period_ms, "slow_period_ms": self.slow_period_ms,
                "achieved_period_ms": self.achieved_period_ms, "max_gap_ms": self.max_gap_ms,
                "samples": len(self.rows), "errors": self.errors, "reason": None,
                "nvml_stamped": self.nvml_stamped,
                "devices": [{"uuid": d.uuid, "nvml_index": d.index,
                             "unsupported": sorted(d.unsupported)} for d in self.devices]}


class NullSampler:
    """Stands in when there is no NVML or no GPU: says once why, returns an empty table."""

    achieved_period_ms = None
    max_gap_ms = None
    devices: list = []

    def __init__(self, reason: str, quiet: bool = False):
        self.reason, self.quiet = reason, quiet

    def start(self) -> "NullSampler":
        if not self.quiet:
            warnings.warn(f"kernelscope: no GPU telemetry: {self.reason}", stacklevel=2)
        return self

    def stop(self) -> pa.Table:
        return TELEMETRY_SCHEMA.empty_table()

    def info(self) -> dict:
        return {"kind": "null", "achieved_period_ms": None, "samples": 0, "reason": self.reason}


def make_sampler(devices=None, period_ms: float = 10, slow_period_ms: float = 100,
                 quiet: bool = False) -> Sampler | NullSampler:
    """A Sampler for the CUDA devices in use, or a NullSampler saying why there is none."""
    devs, reason = open_devices(devices)
    if not devs:
        return NullSampler(reason, quiet=quiet)
    return Sampler(devs, period_ms=period_ms, slow_period_ms=slow_period_ms)


def device_info(devices=None) -> list[dict]:
    """Static NVML facts per device for provenance; a fact the device does not report is None."""
    devs, _ = open_devices(devices)
    nv = pynvml
    out = []
    for d in devs:
        def get(fn_name, *args, _d=d):
            fn = getattr(nv, fn_name, None)
            if fn is None:
                return None
            try:
                v = fn(_d.handle, *args)
            except Exception:
                return None
            return _text(v) if isinstance(v, bytes) else v

        pci = get("nvmlDeviceGetPciInfo")
        mig = get("nvmlDeviceGetMigMode")
        ecc = get("nvmlDeviceGetEccMode")
        out.append({
            "nvml_index": d.index, "uuid": d.uuid, "name": get("nvmlDeviceGetName"),
            "pci_bus_id": None if pci is None else _text(pci.busId),
            "power_limit_mw": get("nvmlDeviceGetEnforcedPowerLimit"),
            "sm_clock_mhz": get("nvmlDeviceGetClockInfo", _CLOCK_SM),
            "mem_clock_mhz": get("nvmlDeviceGetClockInfo", _CLOCK_MEM),
            "sm_clock_max_mhz": get("nvmlDeviceGetMaxClockInfo", _CLOCK_SM),
            "mem_clock_max_mhz": get("nvmlDeviceGetMaxClockInfo", _CLOCK_MEM),
            "mig_mode": None if mig is None else list(mig),  # [current, pending]
            "ecc_mode": None if ecc is None else list(ecc),
        })
    return out


def driver_info() -> dict:
    """Driver version and the CUDA version the driver supports (e.g. 13000 -> "13.0")."""
    nv, reason = _load()
    if nv is None:
        return {"reason": reason}
    out = {}
    try:
        out["driver_version"] = _text(nv.nvmlSystemGetDriverVersion())
    except Exception:
        out["driver_version"] = None
    try:
        v = int(nv.nvmlSystemGetCudaDriverVersion())
        out["driver_cuda_version"] = f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        out["driver_cuda_version"] = None
    return out
