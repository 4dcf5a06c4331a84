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

import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernelscope.errors import ParseError
from kernelscope.units import NS_PER_S

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
    """A CSV cell as a number in base units: thousands separators dropped, ``n/a``/``nan``/empty -> None,
    scaled by the unit's prefix (``usecond`` -> ns, ``Kbyte`` -> bytes, ``Ghz`` -> Hz). Non-numbers and
    units kernelscope does not know (``unit_factor`` None) -> None."""
    if text is None:
        return None
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "na", "nan", "-"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    factor = unit_factor(unit or "")
    return None if factor is None else v * factor


#: Units whose values are plain counts (factor 1): what ncu writes for launch and occupancy metrics.
_COUNT_UNITS = frozenset({"", "register/thread", "register", "thread", "block", "warp", "SM", "cycle", "cluster",
                          "pass", "inst", "instruction", "sector", "request", "byte/block"})


def unit_factor(unit: str) -> float | None:
    """Factor to base units: time -> ns, bytes -> bytes, frequency -> Hz, rates (``Gbyte/second``) -> the
    numerator's factor, ``%`` and counts (``_COUNT_UNITS``) 1; None for a unit kernelscope does not know
    (its scale would be a guess)."""
    u = unit.strip()
    if u == "%" or u in _COUNT_UNITS and u != "byte/block":
        return 1.0
    u = u.split("/")[0] if ("/" in u and not u.startswith(("cycle/",))) else u
    m = re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)(second|sec|s)$", u)
    if m:
        return _SCALE[m.group(1)] * NS_PER_S  # to ns
    m = re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)(byte|B)$", u)
    if m:
        return _SCALE[m.group(1)]
    m = re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)hz$", u, re.I)
    if m:
        return _SCALE[m.group(1).upper() if m.group(1) in ("k",) else m.group(1)]
    m = re.match(r"^cycle/([munp]?)s(econd)?$", u)  # cycles per (n)second -> Hz
    if m:
        return {"": 1.0, "m": 1e3, "u": 1e6, "n": 1e9, "p": 1e12}[m.group(1)]
    return None


def _unit_class(unit: str) -> str | None:
    """'%', 'time', 'bytes', 'hz', 'rate' (bytes per second), 'count', or None for a unit not known."""
    u = (unit or "").strip()
    if u == "%":
        return "%"
    if re.match(r"^[kKmunMGT]?(second|sec|s)$", u):
        return "time"
    if re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)(byte|B)(/block)?$", u):
        return "bytes"
    if re.match(r"^[kKMG]?hz$", u, re.I) or re.match(r"^cycle/[munp]?s(econd)?$", u):
        return "hz"
    if re.match(r"^(Ki|Mi|Gi|Ti|[kKmunMGT]?)(byte|B)/(second|s)$", u):
        return "rate"
    if u in _COUNT_UNITS:
        return "count"
    return None


#: NcuKernel field -> the unit class its value must come in.
FIELD_CLASS = {
    "duration_ns": "time", "dram_bytes_read": "bytes", "dram_bytes_write": "bytes", "_smem_static": "bytes",
    "_smem_dynamic": "bytes", "dram_throughput_pct": "%", "sm_throughput_pct": "%", "memory_throughput_pct": "%",
    "achieved_occupancy_pct": "%", "sm_clock_hz": "hz", "dram_clock_hz": "hz", "registers_per_thread": "count",
    "grid_x": "count", "grid_y": "count", "grid_z": "count", "block_x": "count", "block_y": "count",
    "block_z": "count",
}


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
    if len(parts) == 3 and all(p.isdigit() and int(p) < 2**31 for p in parts):
        return int(parts[0]), int(parts[1]), int(parts[2])
    return None, None, None


def _id_cell(text: str | None) -> int | None:
    """An identifier cell (ID, Process ID, Device, ...) as an int; None when empty, not a number, or not
    an integer that fits int64 (``inf``, ``1e308``)."""
    v = parse_value(text)
    if v is None or not math.isfinite(v) or not -(2.0**63) <= v < 2.0**63:
        return None
    return int(round(v))


#: A line of an ncu CSV longer than this is refused (ncu's lines are a few KB: long kernel names).
MAX_LINE_BYTES = 16 << 20


def _lines(src) -> Iterator[str]:
    """Decoded lines of the CSV (``==PROF==``-style and blank lines left out), read block by block: memory
    holds one block and one line, whatever the file's size. UTF-8, else Latin-1 per line."""
    buf = b""
    while True:
        block = src.read(4 << 20)
        buf += block
        parts = buf.split(b"\n")
        buf = parts.pop() if block else b""
        if len(buf) > MAX_LINE_BYTES:
            raise ParseError(f"a line of the CSV is longer than {MAX_LINE_BYTES >> 20} MB; this is not an ncu export")
        for raw in parts:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("latin-1")
            line = line.rstrip("\r")
            if line.strip() and not line.startswith("=="):
                yield line
        if not block:
            return


def read_ncu_csv(path: str | Path) -> NcuReport:
    """Parse an ncu CSV (raw or details page); ParseError with one sentence for anything else.

    Refused: a CSV whose layout is neither page (a details page without its ``Metric Name``/``Metric Value``
    columns, a raw page that repeats kernel IDs or holds none of the metrics read), and a value that is not
    a finite, non-negative number in range (``1e308`` ns, ``inf``). Warned (``NcuReport.warnings``): a unit
    kernelscope does not know for a metric it reads (the value is left out, not guessed), a missing units
    row (values read as base units)."""
    import csv

    from kernelscope.parsers.source import Source

    src = Source(Path(path))
    try:
        lines = _lines(src)
        first = next(lines, None)
        if first is None:
            raise ParseError("the CSV holds no rows besides ncu's ==PROF== lines: ncu profiled no kernel")
        verdict = looks_like_ncu(first.encode())
        if verdict is not True:
            raise ParseError(verdict if isinstance(verdict, str) else (
                "not an Nsight Compute CSV; give the output of `ncu --csv --page raw` or `--page details`"))
        rows = csv.reader(itertools.chain([first], lines))
        try:
            header = next(rows)
            details = {"Metric Name", "Metric Value", "Metric Unit", "Section Name"} & set(header)
            if details:
                missing = [c for c in ("Metric Name", "Metric Value") if c not in header]
                if missing:
                    raise ParseError(
                        f"this ncu details CSV has no {' or '.join(repr(c) for c in missing)} column, so its "
                        "rows (one per kernel and metric) cannot be read; export it again with "
                        "`ncu --csv --page details` (or use `--page raw`)")
                kernels, warnings = _details(header, rows)
                page = "details"
            else:
                kernels, warnings = _raw(header, rows)
                page = "raw"
        except csv.Error as exc:
            raise ParseError(f"the ncu CSV is malformed ({exc}); capture it again") from None
        content_hash = src.sha.hexdigest()
    finally:
        src.close()
    if not kernels:
        raise ParseError("the ncu CSV has a header but no kernel rows; ncu profiled no kernel")
    return NcuReport(page, kernels, content_hash, warnings)


def _ident(h: dict[str, int], r: list[str], index: int) -> NcuKernel:
    def cell(col: str) -> str | None:
        i = h.get(col)
        return r[i] if i is not None and i < len(r) else None

    k = NcuKernel(ncu_id=_id_cell(cell("ID")) if _id_cell(cell("ID")) is not None else index, launch_index=index,
                  name=cell("Kernel Name") or "")
    k.process_id = _id_cell(cell("Process ID"))
    dev = _id_cell(cell("Device"))
    k.device = dev if dev is not None and -(2**31) <= dev < 2**31 else None
    k.context = _id_cell(cell("Context"))
    k.stream = _id_cell(cell("Stream"))
    k.cc = cell("CC")
    k.grid_x, k.grid_y, k.grid_z = _dims(cell("Grid Size"))
    k.block_x, k.block_y, k.block_z = _dims(cell("Block Size"))
    return k


def _value(text: str | None, unit: str, fname: str, metric: str, k: NcuKernel, unknown: dict) -> float | None:
    """One metric cell in base units, checked: None for n/a and for a unit not known for ``fname``'s class
    (recorded in ``unknown``: metric -> unit, for one warning each); ParseError for a value that is not a
    finite, non-negative number that fits its column."""
    cls = _unit_class(unit)
    want = FIELD_CLASS.get(fname, "count")
    if unit.strip() and cls != want and not (want == "count" and cls is not None):
        unknown.setdefault(metric, unit.strip())
        return None
    v = parse_value(text, unit)
    if v is None:
        return None
    limit = 2.0**31 if fname in ("registers_per_thread",) or fname.startswith(("grid_", "block_")) else 2.0**63
    if not math.isfinite(v) or v < 0 or v >= limit:
        raise ParseError(
            f"kernel ID {k.ncu_id} ({k.name[:40]!r}): {metric} is {text.strip()[:40]!r}"
            f"{' ' + unit.strip() if unit.strip() else ''}, not a finite non-negative number in range; the CSV "
            "is damaged or was edited, capture it again")
    return v


#: How the warnings about values left out or read by assumption begin (storage prints and stores them).
GUESS_WARNINGS = ("unit ", "the ncu CSV has no units row")


def _unit_warnings(unknown: dict) -> list[str]:
    return [f"unit {u!r} of {m} is not one kernelscope knows; its values are left out (not guessed)"
            for m, u in sorted(unknown.items())]


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
        total = int(round((st or 0) + (dy or 0)))
        k.shared_memory_bytes = total if total < 2**63 else None


def _raw(header: list[str], rows: Iterator[list[str]]) -> tuple[list[NcuKernel], list[str]]:
    h = {c: i for i, c in enumerate(header)}
    if "Kernel Name" not in h:
        raise ParseError('the ncu CSV has no "Kernel Name" column; give `ncu --csv --page raw` output')
    present = {f: next((c for c in cols if c in h), None) for f, cols in RAW_METRICS.items()}
    if not any(present.values()):
        raise ParseError(
            "the ncu CSV holds none of the metrics kernelscope reads (gpu__time_duration.sum, dram__bytes_*, "
            "*_throughput, launch__*, ...): one row per kernel with no values; give `ncu --csv --page raw` "
            "or `--page details` output")
    units: list[str] | None = None
    warnings = []
    out: list[NcuKernel] = []
    ids: dict[int, int] = {}
    unknown: dict[str, str] = {}
    for r in rows:
        if units is None:
            units = [""] * len(header)
            if (r[h["ID"]] if "ID" in h and len(r) > h["ID"] else "x") == "":
                units = r  # the units row (empty ID cell)
                continue
            warnings.append("the ncu CSV has no units row: values are read as base units (ns, bytes, Hz)")
        if len(r) < len(header) // 2:
            continue
        k = _ident(h, r, len(out))
        if "ID" in h and _id_cell(r[h["ID"]]) is not None:
            kid = _id_cell(r[h["ID"]])
            ids[kid] = ids.get(kid, 0) + 1
            if ids[kid] > 1:
                raise ParseError(
                    f"kernel ID {kid} appears on more than one row: a raw-page CSV has one row per kernel (a "
                    "details page without its Metric Name/Value columns?); export it again with "
                    "`ncu --csv --page raw` or `--page details`")
        vals = {}
        for fname, col in present.items():
            if col is not None and h[col] < len(r):
                unit = units[h[col]] if h[col] < len(units) else ""
                vals[fname] = _value(r[h[col]], unit, fname, col, k, unknown)
        _finish(k, vals)
        out.append(k)
    missing = sorted(f for f, col in present.items() if not f.startswith("_") and col is None)
    if missing:
        warnings.append(f"ncu CSV lacks the metrics for: {', '.join(missing)} (not collected in this capture)")
    return out, warnings + _unit_warnings(unknown)


def _details(header: list[str], rows: Iterator[list[str]]) -> tuple[list[NcuKernel], list[str]]:
    h = {c: i for i, c in enumerate(header)}
    by_id: dict[int, NcuKernel] = {}
    vals: dict[int, dict[str, float | None]] = {}
    wanted: dict[str, dict[str, str]] = {}  # metric name -> {unit class: field}
    for (metric, cls), fname in DETAIL_METRICS.items():
        wanted.setdefault(metric, {})[cls] = fname
    unknown: dict[str, str] = {}
    need = max(h["Metric Value"], h["Metric Name"])
    for r in rows:
        if len(r) <= need:
            continue
        kid = _id_cell(r[h["ID"]]) if "ID" in h else None
        if kid is None:
            continue
        if kid not in by_id:
            by_id[kid] = _ident(h, r, len(by_id))
            vals[kid] = {}
        metric = r[h["Metric Name"]]
        unit = r[h["Metric Unit"]] if "Metric Unit" in h and h["Metric Unit"] < len(r) else ""
        fields = wanted.get(metric)
        if not fields:
            continue
        cls = _unit_class(unit)
        if cls is None:  # a metric we read, in a unit we do not know: left out, said once
            unknown.setdefault(metric, unit.strip())
            continue
        fname = fields.get(cls)
        if fname is not None and vals[kid].get(fname) is None:
            vals[kid][fname] = _value(r[h["Metric Value"]], unit, fname, metric, by_id[kid], unknown)
    out = []
    for kid, k in by_id.items():
        _finish(k, vals[kid])
        out.append(k)
    return out, _unit_warnings(unknown)
