"""Reader for Nsight Compute CSV exports: ``ncu --csv --page raw`` (one row per kernel, one column per
metric, a units row under the header) and ``ncu --csv --page details`` (one row per kernel x metric, with
``Section Name``/``Metric Name``/``Metric Unit``/``Metric Value`` columns). Plain or gzip.

Tolerated: interleaved lines starting with ``==`` (``==PROF==``, ``==WARNING==``, ``==ERROR==``), thousands
separators (``"3,161,184,210.53"``), ``n/a``, and unit-scaled values (when not captured with
``--print-units base``): every value is normalised to base units by its unit (bytes, ns, Hz, %).

Per kernel (``NcuKernel``; units in the names): name, grid, block, registers per thread, shared memory
per block (static + dynamic, bytes), ``duration_ns`` (``gpu__time_duration.sum`` / "Duration"), DRAM bytes
read/written (``dram__bytes_read.sum`` / ``dram__bytes_write.sum``; only when the capture collected them --
ncu's default "basic" set does not), DRAM throughput % of peak (``gpu__dram_throughput`` / "DRAM
Throughput"), SM throughput % of peak (``sm__throughput`` / "Compute (SM) Throughput"), memory throughput %
(``gpu__compute_memory_throughput`` / "Memory Throughput"), achieved occupancy % (``sm__warps_active
.avg.pct_of_peak_sustained_active`` / "Achieved Occupancy"), and the SM and DRAM clocks ncu ran at (Hz).

Capture settings are not written into the CSV: unless told otherwise, ncu's defaults are assumed and
recorded as such (``--cache-control all``: caches flushed before each replay pass; ``--clock-control
base``: clocks locked to base), so its durations are longer than a profiler's at boost clocks.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelscope.errors import ParseError

DEFAULT_CACHE_CONTROL = "all"
DEFAULT_CLOCK_CONTROL = "base"
DEFAULT_SETTINGS_NOTE = (
    "capture settings not recorded in the CSV; ncu defaults assumed (--cache-control all flushes caches "
    "before each pass, --clock-control base locks clocks to base): durations are not comparable to a "
    "profiler's at boost clocks"
)

_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "m": 1e-3, "u": 1e-6, "n": 1e-9, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4}

#: raw-page metric columns (first found wins) -> NcuKernel field
RAW_METRICS = {
    "duration_ns": ("gpu__time_duration.sum", "gpu__time_duration.avg"),
    "dram_bytes_read": ("dram__bytes_read.sum",),
    "dram_bytes_write": ("dram__bytes_write.sum",),
    "dram_throughput_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                            "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "memory_throughput_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "registers_per_thread": ("launch__registers_per_thread",),
    "grid_x": ("launch__grid_dim_x",), "grid_y": ("launch__grid_dim_y",), "grid_z": ("launch__grid_dim_z",),
    "block_x": ("launch__block_dim_x",), "block_y": ("launch__block_dim_y",), "block_z": ("launch__block_dim_z",),
    "_smem_static": ("launch__shared_mem_per_block_static",),
    "_smem_dynamic": ("launch__shared_mem_per_block_dynamic",),
    "sm_clock_hz": ("sm__cycles_elapsed.avg.per_second", "gpc__cycles_elapsed.avg.per_second"),
    "dram_clock_hz": ("dram__cycles_elapsed.avg.per_second",),
}
#: details-page (Metric Name, required unit class) -> NcuKernel field
DETAIL_METRICS = {
    ("Duration", "time"): "duration_ns",
    ("DRAM Throughput", "%"): "dram_throughput_pct",
    ("Compute (SM) Throughput", "%"): "sm_throughput_pct",
    ("Memory Throughput", "%"): "memory_throughput_pct",
    ("Achieved Occupancy", "%"): "achieved_occupancy_pct",
    ("Registers Per Thread", "count"): "registers_per_thread",
    ("Static Shared Memory Per Block", "bytes"): "_smem_static",
    ("Dynamic Shared Memory Per Block", "bytes"): "_smem_dynamic",
    ("SM Frequency", "hz"): "sm_clock_hz",
    ("DRAM Frequency", "hz"): "dram_clock_hz",
    ("DRAM Bytes Read", "bytes"): "dram_bytes_read",
    ("DRAM Bytes Write", "bytes"): "dram_bytes_write",
}
_INT_FIELDS = {"duration_ns", "dram_bytes_read", "dram_bytes_write", "registers_per_thread", "grid_x", "grid_y",
               "grid_z", "block_x", "block_y", "block_z", "_smem_static", "_smem_dynamic"}


@dataclass
class NcuKernel:
    """One profiled kernel launch. Times ns, sizes bytes, rates %, clocks Hz; None when not captured."""

    ncu_id: int
    launch_index: int  # 0-based order in the file (ncu's launch order)
    name: str
    process_id: int | None = None
    device: int | None = None
    context: int | None = None
    stream: int | None = None
    cc: str | None = None
    grid_x: int | None = None
    grid_y: int | None = None
    grid_z: int | None = None
    block_x: int | None = None
    block_y: int | None = None
    block_z: int | None = None
    registers_per_thread: int | None = None
    shared_memory_bytes: int | None = None
    duration_ns: int | None = None
    dram_bytes_read: int | None = None
    dram_bytes_write: int | None = None
    dram_throughput_pct: float | None = None
    sm_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    sm_clock_hz: float | None = None
    dram_clock_hz: float | None = None


@dataclass
class NcuReport:
    page: str  # 'raw' | 'details'
    kernels: list[NcuKernel]
    content_hash: str
    warnings: list[str] = field(default_factory=list)


def looks_like_ncu(head: bytes) -> bool | str | None:
    """True for the start of an ncu CSV; a one-line error for a CSV that is not from ncu; None when the
    bytes do not look like CSV at all."""
    text = head.decode("utf-8", "replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    rest = [ln for ln in lines if not ln.startswith("==")]
    if lines and not rest and lines[0].startswith("==PROF=="):
        return True
    if not rest:
        return None
    first = rest[0]
    if first.startswith('"ID","Process ID"') or ('"Kernel Name"' in first and first.startswith('"ID"')):
        return True
    if "," in first and not first.lstrip().startswith(("{", "[")):
        return (
            "a CSV file that is not an Nsight Compute export (its header does not start with "
            '"ID","Process ID"); give the output of `ncu --csv --page raw` or `--page details`'
        )
    return None


def parse_value(text: str | None, unit: str | None = "") -> float | None:
    """A CSV cell as a number in base units: thousands separators dropped, ``n/a``/empty -> None,
    scaled by the unit's prefix (``usecond`` -> ns, ``Kbyte`` -> bytes, ``Ghz`` -> Hz). Non-numbers -> None."""
    if text is None:
        return None
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "na", "nan", "-"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return v * unit_factor(unit or "")


def unit_factor(unit: str) -> float:
    """Factor to base units: time -> ns, bytes -> bytes, frequency -> Hz, everything else 1."""
    u = unit.strip()
    if not u or u == "%":
        return 1.0
    u = u.split("/")[0] if ("/" in u and not u.startswith(("cycle/",))) else u
    m = re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)(second|sec|s)$", u)
    if m:
        return _SCALE[m.group(1)] * 1e9  # to ns
    m = re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)(byte|B)$", u)
    if m:
        return _SCALE[m.group(1)]
    m = re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)hz$", u, re.I)
    if m:
        return _SCALE[m.group(1).upper() if m.group(1) in ("k",) else m.group(1)]
    m = re.match(r"^cycle/([munp]?)s(econd)?$", u)  # cycles per (n)second -> Hz
    if m:
        return {"": 1.0, "m": 1e3, "u": 1e6, "n": 1e9, "p": 1e12}[m.group(1)]
    return 1.0


def _unit_class(unit: str) -> str:
    u = (unit or "").strip()
    if u == "%":
        return "%"
    if re.match(r"^[kKmunMGT]?(second|sec|s)$", u):
        return "time"
    if re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)(byte|B)(/block)?$", u):
        return "bytes"
    if re.match(r"^[kKMG]?hz$", u, re.I) or u.startswith("cycle/"):
        return "hz"
    return "count"


def kernel_name_key(name: str) -> str:
    """The kernel's function name without return type, namespaces, template and call arguments.

    ncu and CUPTI demangle differently (``at::native::f<(int)4>`` vs ``at::f<4>``), so matching uses
    this key: ``"void at::native::vectorized_elementwise_kernel<(int)4, ...>(int, T2, T3)"`` ->
    ``"vectorized_elementwise_kernel"``.
    """
    s = (name or "").strip().replace("<unnamed>", "").replace("(anonymous namespace)", "")
    if s.startswith("void "):
        s = s[5:]
    cut = len(s)
    for ch in "<(":
        i = s.find(ch)
        if i >= 0:
            cut = min(cut, i)
    s = s[:cut]
    return s.rsplit("::", 1)[-1].strip()


def _dims(text: str | None) -> tuple[int | None, int | None, int | None]:
    """``"(1,024, 2, 1)"`` -> (1024, 2, 1): items are separated by ", ", commas inside are thousands."""
    parts = [p.replace(",", "").strip() for p in (text or "").strip().strip("()").split(", ")]
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1]), int(parts[2])
    return None, None, None


def _int(text: str | None) -> int | None:
    v = parse_value(text)
    return None if v is None else int(round(v))


def read_ncu_csv(path: str | Path) -> NcuReport:
    """Parse an ncu CSV (raw or details page); ParseError with one sentence for anything else."""
    from kernelscope.parsers.kineto import _Source

    src = _Source(Path(path))
    try:
        chunks = []
        while True:
            block = src.read(4 << 20)
            if not block:
                break
            chunks.append(block)
        content_hash = src.sha.hexdigest()
    finally:
        src.close()
    data = b"".join(chunks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    if not lines:
        raise ParseError("the CSV holds no rows besides ncu's ==PROF== lines: ncu profiled no kernel")
    verdict = looks_like_ncu(lines[0].encode())
    if verdict is not True:
        raise ParseError(verdict if isinstance(verdict, str) else (
            "not an Nsight Compute CSV; give the output of `ncu --csv --page raw` or `--page details`"))
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines))))
    except csv.Error as exc:
        raise ParseError(f"the ncu CSV is malformed ({exc}); capture it again") from None
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        kernels, warnings = _details(header, rows[1:])
        page = "details"
    else:
        kernels, warnings = _raw(header, rows[1:])
        page = "raw"
    if not kernels:
        raise ParseError("the ncu CSV has a header but no kernel rows; ncu profiled no kernel")
    return NcuReport(page, kernels, content_hash, warnings)


def _ident(h: dict[str, int], r: list[str], index: int) -> NcuKernel:
    def cell(col: str) -> str | None:
        i = h.get(col)
        return r[i] if i is not None and i < len(r) else None

    k = NcuKernel(ncu_id=_int(cell("ID")) if _int(cell("ID")) is not None else index, launch_index=index,
                  name=cell("Kernel Name") or "")
    k.process_id = _int(cell("Process ID"))
    k.device = _int(cell("Device"))
    k.context = _int(cell("Context"))
    k.stream = _int(cell("Stream"))
    k.cc = cell("CC")
    k.grid_x, k.grid_y, k.grid_z = _dims(cell("Grid Size"))
    k.block_x, k.block_y, k.block_z = _dims(cell("Block Size"))
    return k


def _finish(k: NcuKernel, vals: dict[str, float | None]) -> None:
    for name, v in vals.items():
        if v is None:
            continue
        if name in _INT_FIELDS:
            v = int(round(v))
        if not name.startswith("_"):
            setattr(k, name, v)
    st, dy = vals.get("_smem_static"), vals.get("_smem_dynamic")
    if st is not None or dy is not None:
        k.shared_memory_bytes = int(round((st or 0) + (dy or 0)))


def _raw(header: list[str], rows: list[list[str]]) -> tuple[list[NcuKernel], list[str]]:
    h = {c: i for i, c in enumerate(header)}
    if "Kernel Name" not in h:
        raise ParseError('the ncu CSV has no "Kernel Name" column; give `ncu --csv --page raw` output')
    units = [""] * len(header)
    if rows and (rows[0][h["ID"]] if "ID" in h and len(rows[0]) > h["ID"] else "x") == "":
        units, rows = rows[0], rows[1:]  # the units row (empty ID cell)
    missing = sorted(f for f, cols in RAW_METRICS.items() if not f.startswith("_") and not any(c in h for c in cols))
    out = []
    for idx, r in enumerate(rows):
        if len(r) < len(header) // 2:
            continue
        k = _ident(h, r, idx)
        vals = {}
        for fname, cols in RAW_METRICS.items():
            col = next((c for c in cols if c in h), None)
            if col is not None and h[col] < len(r):
                vals[fname] = parse_value(r[h[col]], units[h[col]] if h[col] < len(units) else "")
        _finish(k, vals)
        out.append(k)
    warnings = [f"ncu CSV lacks the metrics for: {', '.join(missing)} (not collected in this capture)"] if missing else []
    return out, warnings


def _details(header: list[str], rows: list[list[str]]) -> tuple[list[NcuKernel], list[str]]:
    h = {c: i for i, c in enumerate(header)}
    by_id: dict[int, NcuKernel] = {}
    vals: dict[int, dict[str, float | None]] = {}
    for r in rows:
        if len(r) <= h["Metric Value"]:
            continue
        kid = _int(r[h["ID"]]) if "ID" in h else None
        if kid is None:
            continue
        if kid not in by_id:
            by_id[kid] = _ident(h, r, len(by_id))
            vals[kid] = {}
        metric, unit = r[h["Metric Name"]], r[h["Metric Unit"]] if "Metric Unit" in h else ""
        fname = DETAIL_METRICS.get((metric, _unit_class(unit)))
        if fname is not None and vals[kid].get(fname) is None:
            vals[kid][fname] = parse_value(r[h["Metric Value"]], unit)
    out = []
    for kid, k in by_id.items():
        _finish(k, vals[kid])
        out.append(k)
    return out, []
