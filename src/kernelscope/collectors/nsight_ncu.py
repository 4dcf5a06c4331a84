"""The Nsight Compute pass of ``kernelscope profile --ncu top:N|REGEX`` and the check of a stored nsys trace against
``nsys stats``. Re-exported by ``collectors/nsight.py`` (its docstring is the API); see there.

Kernel choice: ncu's ``--kernel-name`` matches the kernel's FUNCTION name by default (``--kernel-name-base
function``: no return type, namespace, template arguments or parameters). CUPTI (Kineto, nsys) and ncu demangle
differently (``at::native::(anonymous namespace)::f<(int)4>`` vs ``at::<unnamed>::f<4>``), so a demangled-name
regex built from the trace would miss; the function name (``parsers.ncu.kernel_name_key``) is what both agree on,
and it is what ``storage.ncu`` joins by. ``top:N`` therefore ranks function names by their total GPU time in the
stored trace (all template instantiations of one function together: ncu cannot tell them apart by name).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kernelscope.errors import KernelscopeError, UsageError

from .child import run_child

if TYPE_CHECKING:
    from .nsight import PassResult


def _ncu_parser():
    """parsers/ncu.py, through importlib (collectors and parsers are sibling layers: no static import)."""
    import importlib

    return importlib.import_module("kernelscope.parsers.ncu")


def kernel_name_key(name: str) -> str:
    """``parsers.ncu.kernel_name_key``: a kernel's function name (what ncu's --kernel-name matches, and what
    storage.ncu joins by)."""
    return _ncu_parser().kernel_name_key(name)

#: FLOP counters (per precision: add, mul, fma thread instructions; an FMA is 2 FLOP).
FLOP_METRICS = tuple(f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum"
                     for p in ("f", "d", "h") for op in ("add", "mul", "fma"))
#: What the pass asks ncu for beyond ``--set basic``: for every field parsers/ncu.py reads (``RAW_METRICS``) a metric
#: name it accepts that the shipped H200 capture holds (sample_traces/nsight), DRAM bytes read/written (the Bandwidth
#: page's measured bytes) and the FLOP counters.
NCU_METRICS = (
    "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
    "launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z", "launch__block_dim_x", "launch__block_dim_y",
    "launch__block_dim_z", "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
    "gpc__cycles_elapsed.avg.per_second", "dram__cycles_elapsed.avg.per_second", *FLOP_METRICS,
)
#: At most this many launches are profiled unless the caller says otherwise (each is replayed for every pass).
MAX_LAUNCHES = 500
#: ncu's own defaults, passed explicitly so that what is recorded is what ran.
CLOCK_CONTROL = "base"
CACHE_CONTROL = "all"
SETTINGS_NOTE = ("recorded by kernelscope profile --ncu: clock control '{clock}'{clock_words}, cache control "
                 "'{cache}'{cache_words}{ratio}")


def settings_note(clock_control: str, cache_control: str) -> str:
    """The sentence stored with the ncu rows (``ncu_kernels.settings_note``): the settings the pass ran with and
    what they do to its durations."""
    clock_words = " (clocks locked to base)" if clock_control == "base" else ""
    cache_words = " (caches flushed before each replay pass)" if cache_control == "all" else ""
    ratio = ("; ncu's locked base clocks make its durations about 1.3-2.5x the traced ones (boost clocks): compare "
             "its bytes, not its times" if clock_control == "base" else
             "; ncu's durations still come from replayed, serialised kernels: compare its bytes, not its times")
    return SETTINGS_NOTE.format(clock=clock_control, clock_words=clock_words, cache=cache_control,
                                cache_words=cache_words, ratio=ratio)


def ncu_csv_path(run_dir, name: str) -> Path:
    return Path(run_dir) / f"{name}_ncu.csv"


@dataclass(frozen=True)
class NcuSpec:
    """``--ncu``: ``top`` N function names by GPU time, or ``regex`` over function names."""

    text: str
    top: int | None = None
    regex: str | None = None


def parse_ncu_spec(spec: str) -> NcuSpec:
    """``"top:N"`` (N >= 1) or a regex over kernel function names (Python ``re`` syntax checked; ncu reads it as
    ECMAScript, which agrees on the usual constructs). UsageError in one line otherwise."""
    s = (spec or "").strip()
    if not s:
        raise UsageError("--ncu needs top:N (the N kernels with the most GPU time) or a regex over kernel names.")
    m = re.fullmatch(r"top:(\S*)", s, flags=re.I)
    if m:
        if not m.group(1).isdigit() or int(m.group(1)) < 1:
            raise UsageError(f"--ncu {s}: N must be a whole number >= 1, as in top:5.")
        return NcuSpec(s, top=int(m.group(1)))
    try:
        re.compile(s)
    except re.error as exc:
        raise UsageError(f"--ncu {s}: not a valid regex ({exc}); give top:N or a regex over kernel names.") from None
    return NcuSpec(s, regex=s)


def _escape(name: str) -> str:
    """Every character but [A-Za-z0-9_] backslash-escaped (the same in Python's re and ncu's ECMAScript)."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch == "_") else "\\" + ch for ch in name)


def kernel_regex(names: Iterable[str]) -> str:
    """A regex matching the function names of ``names`` (demangled kernel names or function names) and nothing
    else: ``^(.*::)?(k1|k2)$`` (a namespace prefix allowed, in case ncu keeps one; plain groups, which every regex
    dialect reads)."""
    keys = sorted({kernel_name_key(n) for n in names} - {""})
    if not keys:
        raise UsageError("no kernel names to profile with Nsight Compute.")
    return "^(.*::)?(" + "|".join(_escape(k) for k in keys) + ")$"


@dataclass
class NcuTargets:
    """What the ncu pass profiles: ``regex`` for ``--kernel-name regex:``, the function ``names`` chosen (by GPU
    time, largest first), ``launch_count`` (their launches in the trace, at most the cap), ``launches`` (before
    the cap) and ``gpu_ns`` (their total GPU time in the trace)."""

    regex: str
    names: list[str]
    launch_count: int
    launches: int
    gpu_ns: int
    kernels: list[str] = field(default_factory=list)  # the demangled names covered


def ncu_targets(spec: NcuSpec, kernels, *, max_launches: int = MAX_LAUNCHES) -> NcuTargets:
    """The kernels to profile from the stored trace's ``kernels`` (rows or a DataFrame with ``name``, ``launches``,
    ``gpu_ns``: ``storage.ncu.top_kernels``). UsageError when the trace has no kernel (a CPU run) or none matches
    the regex."""
    rows = ([tuple(r) for r in kernels[["name", "launches", "gpu_ns"]].itertuples(index=False)]
            if hasattr(kernels, "itertuples") else [tuple(r) for r in kernels])
    if not rows:
        raise UsageError("--ncu: the traced run has no GPU kernels to profile (was CUDA available?).")
    by_key: dict[str, list] = {}
    for name, launches, gpu_ns in rows:
        k = by_key.setdefault(kernel_name_key(name), [0, 0, []])
        k[0] += int(launches)
        k[1] += int(gpu_ns or 0)
        k[2].append(name)
    order = sorted(by_key, key=lambda k: (-by_key[k][1], k))
    if spec.top is not None:
        keys = order[: spec.top]
    else:
        keys = [k for k in order if re.search(spec.regex, k)]
        if not keys:
            sample = ", ".join(order[:3])
            raise UsageError(f"--ncu {spec.text}: no kernel of the traced run matches (the regex is matched against "
                             f"function names, e.g. {sample}).")
    launches = sum(by_key[k][0] for k in keys)
    return NcuTargets(kernel_regex(keys), keys, min(launches, max_launches), launches,
                      sum(by_key[k][1] for k in keys), [n for k in keys for n in by_key[k][2]])


def stored_kernels(db, trace_id: str):
    """``storage.ncu.top_kernels`` of a stored trace, reached through importlib (collectors do not import storage
    statically)."""
    import importlib

    open_store = importlib.import_module("kernelscope.storage.store").open_store
    top_kernels = importlib.import_module("kernelscope.storage.ncu").top_kernels
    resolve_trace = importlib.import_module("kernelscope.storage.queries").resolve_trace
    with open_store(db, read_only=True) as store:
        return top_kernels(store, resolve_trace(store, trace_id))


def ncu_prefix(ncu, regex: str, launch_count: int, log_file, *, capture_range: bool = False,
               clock_control: str = CLOCK_CONTROL, cache_control: str = CACHE_CONTROL,
               metrics: Iterable[str] = NCU_METRICS) -> list[str]:
    """``ncu`` writing a raw-page CSV in base units to ``log_file`` (the script's own output stays on stdout), for
    the first ``launch_count`` launches whose function name matches ``regex``, with the given clock and cache
    control, ``--set basic`` plus ``metrics``; with ``capture_range`` only inside cudaProfilerStart/Stop."""
    argv = [str(ncu), "--csv", "--page", "raw", "--print-units", "base", "--log-file", str(log_file),
            "--target-processes", "all", "--kernel-name-base", "function", "--kernel-name", f"regex:{regex}",
            "--launch-count", str(int(launch_count)), "--clock-control", clock_control,
            "--cache-control", cache_control, "--set", "basic", "--metrics", ",".join(metrics)]
    if capture_range:
        argv += ["--profile-from-start", "off"]
    return argv


def ncu_pass(ncu, run_dir, name: str, child_argv: list[str], targets: NcuTargets, *, env=None,
             capture_range: bool = False, clock_control: str = CLOCK_CONTROL, cache_control: str = CACHE_CONTROL,
             timeout: float | None = None) -> PassResult:
    """The ncu pass: ``child_argv`` under ``ncu_prefix``; the CSV is written under a hidden name and moved to
    ``<name>_ncu.csv`` when it holds kernel rows (``ok``; ``returncode`` is ncu's, which is the script's when ncu
    itself worked); the settings, targets and argv are recorded in ``run.json["nsight"]["ncu"]``. No rows: ``ok=False``
    with ncu's last error line, no CSV left."""
    from .nsight import PassResult, _last_line, record_pass, tool_version  # here: nsight re-exports this module

    read_ncu_csv = _ncu_parser().read_ncu_csv
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    final = ncu_csv_path(run_dir, name)
    tmp = run_dir / f".{final.name}.part"
    tmp.unlink(missing_ok=True)
    kw = dict(capture_range=capture_range, clock_control=clock_control, cache_control=cache_control)
    argv = ncu_prefix(ncu, targets.regex, targets.launch_count, tmp, **kw) + list(child_argv)
    info = {"argv": ncu_prefix(ncu, targets.regex, targets.launch_count, final, **kw) + list(child_argv),
            "kernel_names": targets.names, "launch_count": targets.launch_count, "launches_in_trace":
            targets.launches, "clock_control": clock_control, "cache_control": cache_control,
            "settings_note": settings_note(clock_control, cache_control), "version": tool_version(ncu)}
    rc = None
    try:
        # the script's own output passes through; ncu's (the CSV, ==PROF==/==ERROR== lines) goes to tmp
        rc = run_child(argv, env=env, timeout=timeout)  # None: timed out (stopped)
        log = tmp.read_text(encoding="utf-8", errors="replace") if tmp.is_file() else ""
        try:
            rows = len(read_ncu_csv(tmp).kernels) if tmp.is_file() else 0
        except (KernelscopeError, OSError):
            rows = 0
        if rows == 0:
            tool = [ln for ln in log.splitlines() if ln.startswith("==")]
            why = _last_line("\n".join(tool), "timed out" if rc is None else f"exit code {rc}")
            msg = (f"ncu pass failed: {why}" if rc != 0 else
                   f"ncu pass profiled no kernel matching {targets.regex} (ncu: {why})")
            record_pass(run_dir, "ncu", {**info, "ok": False, "error": msg, "returncode": rc})
            return PassResult("ncu", False, [], msg, rc, time.perf_counter() - t0)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    record_pass(run_dir, "ncu", {**info, "ok": True, "csv": final.name, "kernels_profiled": rows, "returncode": rc})
    msg = f"ncu pass: {rows} launches in {final.name}" + (
        "" if rc == 0 else " (ncu timed out)" if rc is None else f" (the script exited with {rc})")
    return PassResult("ncu", True, [final.name], msg, rc, time.perf_counter() - t0)


# ---------------------------------------------------------------- a stored nsys trace vs `nsys stats`

def read_kern_sum(path) -> dict[str, tuple[int, int]]:
    """``nsys stats --report cuda_gpu_kern_sum --format csv`` output: ``{name: (instances, total_ns)}``. Lines
    before the header (nsys's notes) are skipped. UsageError when the file holds no such table."""
    import csv

    text = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    start = next((i for i, ln in enumerate(text) if "Total Time" in ln and "Instances" in ln and "Name" in ln), None)
    if start is None:
        raise UsageError(f"{path}: not `nsys stats --report cuda_gpu_kern_sum --format csv` output (no header with "
                         "Total Time, Instances, Name).")
    out: dict[str, tuple[int, int]] = {}
    for row in csv.DictReader(text[start:]):
        total = next(v for k, v in row.items() if k and k.startswith("Total Time"))
        n, t = int(float(row["Instances"])), int(float(total))
        prev = out.get(row["Name"], (0, 0))
        out[row["Name"]] = (prev[0] + n, prev[1] + t)
    return out


def kern_sum_check(store_or_db, trace_id: str, csv_path) -> dict:
    """A stored trace's kernels against ``nsys stats`` (``read_kern_sum``) of the same report: ``kernels`` and
    ``kernel_ns`` as (stored, stats), ``names`` (distinct names, stored vs stats), ``mismatched`` (names whose
    count or total differs: [name, stored, stats]) and ``equal`` (count and total time equal)."""
    stats = read_kern_sum(csv_path)
    if isinstance(store_or_db, (str, os.PathLike)):
        df = stored_kernels(store_or_db, trace_id)
    else:
        import importlib

        df = importlib.import_module("kernelscope.storage.ncu").top_kernels(store_or_db, trace_id)
    stored = {str(n): (int(c), int(t)) for n, c, t in zip(df["name"], df["launches"], df["gpu_ns"])}
    counts = (sum(c for c, _ in stored.values()), sum(c for c, _ in stats.values()))
    times = (sum(t for _, t in stored.values()), sum(t for _, t in stats.values()))
    bad = [[n, stored.get(n), stats.get(n)] for n in sorted(set(stored) | set(stats)) if stored.get(n) != stats.get(n)]
    return {"trace_id": trace_id, "kernels": counts, "kernel_ns": times, "names": (len(stored), len(stats)),
            "mismatched": bad, "equal": counts[0] == counts[1] and times[0] == times[1]}


def collectors_check(store_or_db, kineto_ref: str, nsys_ref: str) -> dict:
    """Two traces of one run (Kineto and nsys) operator by operator (``storage.ncu.leaf_op_kernels``): ``ops``
    [name, kernels in the Kineto trace, in the nsys trace, GPU ns in each] by name, ``equal_ops``/``total_ops``
    (operators whose kernel counts agree), ``kernel_ns`` (Kineto, nsys) and ``equal`` (every count agrees)."""
    import importlib

    def load(store):
        resolve = importlib.import_module("kernelscope.storage.queries").resolve_trace
        leaf = importlib.import_module("kernelscope.storage.ncu").leaf_op_kernels
        a, b = resolve(store, kineto_ref), resolve(store, nsys_ref)
        return a, b, leaf(store, a), leaf(store, b)

    if isinstance(store_or_db, (str, os.PathLike)):
        with importlib.import_module("kernelscope.storage.store").open_store(store_or_db, read_only=True) as store:
            a, b, ka, kb = load(store)
    else:
        a, b, ka, kb = load(store_or_db)
    da = {r.op: (int(r.kernels), int(r.gpu_ns)) for r in ka.itertuples(index=False)}
    db_ = {r.op: (int(r.kernels), int(r.gpu_ns)) for r in kb.itertuples(index=False)}
    ops = [[op, da.get(op, (0, 0))[0], db_.get(op, (0, 0))[0], da.get(op, (0, 0))[1], db_.get(op, (0, 0))[1]]
           for op in sorted(set(da) | set(db_))]
    same = sum(1 for o in ops if o[1] == o[2])
    return {"kineto": a, "nsys": b, "ops": ops, "equal_ops": same, "total_ops": len(ops),
            "kernel_ns": (sum(v[1] for v in da.values()), sum(v[1] for v in db_.values())), "equal": same == len(ops)}


USAGE = ("usage: python -m kernelscope.collectors.nsight_ncu check-kern-sum DB TRACE CSV | "
         "check-collectors DB KINETO_TRACE NSYS_TRACE")


def _check_main(argv: list[str]) -> int:
    """``python -m kernelscope.collectors.nsight_ncu check-kern-sum DB TRACE CSV`` (``kern_sum_check``) or
    ``check-collectors DB KINETO_TRACE NSYS_TRACE`` (``collectors_check``): prints the check as JSON; exit 0 when
    equal, 1 otherwise, 2 for bad input."""
    import json

    checks = {"check-kern-sum": kern_sum_check, "check-collectors": collectors_check}
    if len(argv) != 4 or argv[0] not in checks:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        res = checks[argv[0]](argv[1], argv[2], argv[3])
    except KernelscopeError as exc:
        print(f"kernelscope: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res))
    return 0 if res["equal"] else 1


__all__ = [
    "CACHE_CONTROL", "CLOCK_CONTROL", "FLOP_METRICS", "MAX_LAUNCHES", "NCU_METRICS", "NcuSpec", "NcuTargets",
    "collectors_check", "kern_sum_check", "kernel_regex", "ncu_csv_path", "ncu_pass", "ncu_prefix", "ncu_targets",
    "parse_ncu_spec", "read_kern_sum", "settings_note", "stored_kernels",
]


if __name__ == "__main__":
    sys.exit(_check_main(sys.argv[1:]))
