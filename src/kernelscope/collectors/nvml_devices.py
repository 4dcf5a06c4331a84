"""NVML devices: the only module that imports ``pynvml``. Loads it once, matches NVML devices to the CUDA
devices in use (by UUID, else PCI address: NVML index order is not CUDA ordinal order when
CUDA_VISIBLE_DEVICES reorders or hides devices), reads their fields (``NvmlDevice``) and static facts for
provenance (``device_info``, ``driver_info``).

Fast fields (one ``nvmlDeviceGetFieldValues`` call): averaged and instant power, the energy counter.
Slow-field groups (one NVML call each, ``SLOW_GROUPS``): sm clock, memory clock, utilisation
(gpu + memory %), memory info, temperature, throttle reasons.

A field a device does not support is null; the first NVMLError for a field marks it unsupported for
that device and it is not asked again.

Tests: with ``KERNELSCOPE_PYNVML=/path/file.py`` set, the module in that file (its ``pynvml``
attribute if it has one) replaces ``pynvml``, also in the sampler process. Not for users.
"""

from __future__ import annotations

import os
import warnings

from ..units import NS_PER_US

pynvml = None  # the one import site; tests replace this attribute with a fake module

_FI_TOTAL_ENERGY = 83  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ
_FI_POWER_AVERAGE = 185  # NVML_FI_DEV_POWER_AVERAGE, mW
_FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT, mW
_FAST_FIELDS = (("power_mw", _FI_POWER_AVERAGE), ("power_instant_mw", _FI_POWER_INSTANT),
                ("energy_mj", _FI_TOTAL_ENERGY))
_CLOCK_SM, _CLOCK_MEM, _TEMPERATURE_GPU = 1, 2, 0
SLOW_GROUPS = ("sm_clock_mhz", "mem_clock_mhz", "util", "mem", "temperature_c", "throttle_reasons")


def _load() -> tuple[object | None, str | None]:
    """Import and initialise pynvml once. Returns (module, None) or (None, reason)."""
    global pynvml
    if pynvml is None and os.environ.get("KERNELSCOPE_PYNVML"):
        import importlib.util

        path = os.environ["KERNELSCOPE_PYNVML"]  # tests only: a fake pynvml in a file
        spec = importlib.util.spec_from_file_location("_kernelscope_fake_pynvml", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        pynvml = getattr(mod, "pynvml", mod)
    if pynvml is None:
        try:
            import pynvml as _mod
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


def _cuda_properties(devices=None) -> list | None:
    """torch's properties of the CUDA devices in use (ordinals ``devices``, default all visible), or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    ordinals = range(torch.cuda.device_count()) if devices is None else devices
    return [torch.cuda.get_device_properties(i) for i in ordinals]


def _cuda_device_uuids(devices=None) -> list[str] | None:
    """UUIDs of the CUDA devices in use, or None."""
    props = _cuda_properties(devices)
    if props is None:
        return None
    return [str(p.uuid) for p in props if getattr(p, "uuid", None) is not None]


_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _cuda_device_pci(devices=None) -> list[tuple | None] | None:
    """(domain, bus, device) PCI ids of the CUDA devices in use, in the same order as their UUIDs."""
    props = _cuda_properties(devices)
    if props is None:
        return None
    ids = [tuple(getattr(p, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")) for p in props]
    return [None if None in t else t for t in ids]


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


class NvmlDevice:
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

    def fast(self, energy: bool = True) -> dict:
        """Averaged/instant power and (unless ``energy`` is false) the energy counter, batched through
        nvmlDeviceGetFieldValues."""
        row = {"power_mw": None, "power_instant_mw": None, "energy_mj": None}
        wanted = [(c, f) for c, f in _FAST_FIELDS if c not in self.unsupported and (energy or c != "energy_mj")]
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
                            row["_ts_ns"] = int(stamp) * NS_PER_US
        if "field_values" in self.unsupported or "power_mw" in self.unsupported:
            if row["power_mw"] is None:
                row["power_mw"] = self._call("power_usage", self.nv.nvmlDeviceGetPowerUsage)
        if energy and row["energy_mj"] is None and ("field_values" in self.unsupported
                                                    or "energy_mj" in self.unsupported):
            row["energy_mj"] = self._call("energy_total", self.nv.nvmlDeviceGetTotalEnergyConsumption)
        return row

    def group_unsupported(self, group: str) -> bool:
        return group in self.unsupported

    def slow_group(self, group: str) -> dict:
        """Read one slow-field group (one NVML call); its columns, None where unsupported."""
        nv = self.nv
        if group == "sm_clock_mhz":
            return {group: self._call(group, nv.nvmlDeviceGetClockInfo, _CLOCK_SM)}
        if group == "mem_clock_mhz":
            return {group: self._call(group, nv.nvmlDeviceGetClockInfo, _CLOCK_MEM)}
        if group == "util":
            util = self._call("util", nv.nvmlDeviceGetUtilizationRates)
            return {"gpu_util_pct": None if util is None else int(util.gpu),
                    "mem_util_pct": None if util is None else int(util.memory)}
        if group == "mem":
            mem = self._call("mem", nv.nvmlDeviceGetMemoryInfo)
            return {"mem_used_bytes": None if mem is None else int(mem.used)}
        if group == "temperature_c":
            return {group: self._call(group, nv.nvmlDeviceGetTemperature, _TEMPERATURE_GPU)}
        if group == "throttle_reasons":
            fn = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                  or nv.nvmlDeviceGetCurrentClocksThrottleReasons)
            return {group: self._call(group, fn)}
        raise ValueError(f"unknown slow-field group {group!r}")

    def slow(self) -> dict:
        """All slow fields at once (``SLOW_GROUPS`` read back to back)."""
        out = {}
        for g in SLOW_GROUPS:
            out.update(self.slow_group(g))
        return out

    def energy_mj(self) -> int | None:
        """The total-energy counter now, mJ (for the un-profiled energy loop)."""
        return self.fast()["energy_mj"]


def open_devices(devices=None) -> tuple[list[NvmlDevice], str | None]:
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
            out.append(NvmlDevice(nv, hit[0], hit[1], hit[2]))
    if not out:
        return [], f"no NVML device matches the CUDA device UUIDs {want}"
    if missing:
        warnings.warn(f"kernelscope: no NVML device for CUDA UUIDs {missing}; no telemetry for them",
                      stacklevel=3)
    return out, None



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

