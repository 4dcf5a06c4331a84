"""Provenance: what a run ran on, recorded with every run (stored in ``traces.provenance``).

NVML facts come through ``collectors.nvml_devices`` (the one pynvml import site). Every missing fact is None.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import warnings


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def warn_launch_blocking() -> str | None:
    """Warn loudly when CUDA_LAUNCH_BLOCKING is set: every launch then waits, timings are not real."""
    v = os.environ.get("CUDA_LAUNCH_BLOCKING")
    if v not in (None, "", "0"):
        warnings.warn(
            f"kernelscope: CUDA_LAUNCH_BLOCKING={v} is set: every kernel launch waits for the GPU, so "
            "launch overhead, host-wait and latency numbers of this run are NOT representative; unset it.",
            stacklevel=3,
        )
    return v


def torch_flags(torch) -> dict:
    """The torch settings that decide which kernels run (TF32 tensor cores for fp32 GEMMs and convolutions, cuDNN
    autotuning): what bandwidth's FLOP peaks and recommend read. A script sets them at its top, after a
    profile has started: ``profile`` reads them again when it stops (``flags_at_start`` keeps any that differed)."""
    return {"tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic)}


def collect(devices=None, nvml: bool = True) -> dict:
    """A JSON-able dict of host, GPU, driver, CUDA, torch and flag facts."""
    # The root package is always loaded before this module; reading its attribute (rather than
    # `from kernelscope import ...`) keeps collectors free of an import edge to the root, which
    # re-exports the upper layers.
    version = getattr(sys.modules.get("kernelscope"), "__version__", None)
    prov: dict = {
        "kernelscope_version": version,
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "env": {k: os.environ.get(k) for k in ("CUDA_LAUNCH_BLOCKING", "CUDA_VISIBLE_DEVICES",
                                                "NVIDIA_TF32_OVERRIDE", "PYTORCH_CUDA_ALLOC_CONF")},
    }
    try:
        import torch
    except ImportError:
        prov["torch"] = None
        return prov
    prov["torch"] = torch.__version__
    prov["cuda_runtime"] = torch.version.cuda
    prov["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    prov.update(torch_flags(torch))
    gpus = []
    if torch.cuda.is_available():
        ordinals = range(torch.cuda.device_count()) if devices is None else devices
        for i in ordinals:
            p = torch.cuda.get_device_properties(i)
            gpus.append({
                "cuda_index": i, "name": p.name, "uuid": str(getattr(p, "uuid", "")) or None,
                "capability": f"{p.major}.{p.minor}", "memory_bytes": int(p.total_memory),
                "sm_count": p.multi_processor_count,
                "pci_bus_id": getattr(p, "pci_bus_id", None),
            })
    prov["gpus"] = gpus
    if nvml and gpus:
        from . import nvml_devices as _nvml

        prov.update(_nvml.driver_info())
        info = {_nvml.normalize_uuid(d["uuid"]): d for d in _nvml.device_info(devices)}
        for g in gpus:
            g["nvml"] = info.get(_nvml.normalize_uuid(g["uuid"] or ""))
    return prov
