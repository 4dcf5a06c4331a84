"""Nsight Systems and Nsight Compute passes of ``kernelscope profile --nsys/--ncu``: everything Nsight-specific.

CUPTI allows one profiler per process, so the runner runs the script once per collector: a Kineto pass, then an
nsys pass (the script under ``nsys profile``, emit_nvtx on in the child), then an ncu pass (the script under
``ncu``, after the Kineto trace is stored: the kernels to profile come from it). The runner owns the processes;
this module builds the command lines, checks the tools, exports, and records what it ran in the run dir.

API (the runner codes against these names):

Tools
- ``find_tool(kind, explicit=None, *, option=None) -> Path``: ``kind`` "nsys" | "ncu"; ``explicit`` (``--nsys PATH``,
  ``--ncu-path PATH``; a folder holding the tool works), else PATH, else the usual install folders
  (``INSTALL_GLOBS``), newest version first (``install_candidates``). UsageError in one line naming what to
  install and ``option`` (default ``PATH_OPTIONS[kind]``) when absent or when ``explicit`` is not an executable.
- ``check_nsys_importer(nsys)``: nsys's SQLite export runs its QdstrmImporter, which needs libdw.so.1; checked
  with ``ldd`` on the importer next to nsys (else by loading libdw.so.1) BEFORE the script runs. UsageError
  naming the Debian/Ubuntu package (libdw1) and LD_LIBRARY_PATH.

nsys pass (run dir files: ``<name>.nsys-rep`` kept, ``<name>.sqlite`` ingested; ``nsys_paths``)
- ``nsys_prefix(nsys, out_base, capture_range) -> list[str]``: ``nsys profile --trace=cuda,nvtx --sample=none
  --cpuctxsw=none --force-overwrite=true -o OUT`` (+ ``--capture-range=cudaProfilerApi --capture-range-end=stop``
  when ``capture_range``: a schedule was given). Append the child's argv.
- ``child_nvtx(capture_range=False, schedule=None, *, nvtx=True)``: context manager for the runner's CHILD process
  of the nsys pass (and, with ``nvtx=False``, of the ncu pass). Enables ``torch.autograd.profiler.emit_nvtx(
  record_shapes=True)`` for the script (needs CUDA: without it one line says the ranges are off); yields an
  ``NvtxPass`` with ``start()``/``stop()`` (``torch.cuda.profiler`` start/stop: the capture range) and
  ``step()`` (call once per script step; with ``schedule=(wait, warmup, active[, repeat])`` it calls start() when
  the first active step begins and stop() after the last one of the first cycle). Without a capture range
  start/stop/step do nothing.
- ``nsys_export(nsys, rep) -> Path``: ``nsys export --type sqlite`` next to the report (the report is kept);
  KernelscopeError in one line when the export fails.
- ``nsys_pass(nsys, run_dir, name, child_argv, *, env=None, capture_range=False) -> PassResult``: the whole pass
  (prefix + run + export + record in run.json), for a runner that wants one call. ``PassResult.ok``: the pass
  wrote its files; ``returncode``: the tool's exit code (the script's when the tool worked).

ncu pass (run dir file ``<name>_ncu.csv``; ``ncu_csv_path``)
- ``parse_ncu_spec(spec) -> NcuSpec``: ``"top:N"`` (N kernel names by total GPU time in the stored trace) or a
  regex on kernel FUNCTION names (ncu's default ``--kernel-name-base function``: no return type, namespace,
  template or parameters, e.g. ``vectorized_elementwise_kernel``). UsageError for ``top:0``, ``top:x``, a bad
  regex.
- ``ncu_targets(spec, kernels) -> NcuTargets``: ``kernels``: rows (name, launches, gpu_ns) of the stored trace's
  kernels, as ``storage.ncu.top_kernels(store, trace_id)`` returns them (reach it with ``stored_kernels(db,
  trace_id)`` here, which imports storage through importlib). Gives ``regex`` (for ``--kernel-name``),
  ``names`` and ``launch_count`` (the chosen kernels' launches in the trace, at most ``MAX_LAUNCHES``).
- ``kernel_regex(names) -> str``: ``^(.*::)?(a|b|...)$`` over the function names (``parsers.ncu.kernel_name_key``) of
  demangled kernel names, every non-word character escaped.
- ``ncu_prefix(ncu, regex, launch_count, log_file, *, capture_range=False, clock_control="base",
  cache_control="all") -> list[str]``: ``ncu --csv --page raw --print-units base --log-file OUT --kernel-name-base
  function --kernel-name regex:... --launch-count K --clock-control C --cache-control C --set basic --metrics
  NCU_METRICS`` (+ ``--profile-from-start off`` with a capture range). The CSV goes to ``log_file`` (not
  stdout, where the script prints).
- ``ncu_pass(ncu, run_dir, name, child_argv, targets, *, env=None, capture_range=False, ...) -> PassResult``: the
  whole pass, the CSV written to a hidden name and renamed when it holds kernel rows, settings recorded in
  run.json.

Recording: ``record_pass(run_dir, kind, info)`` merges ``info`` into ``run.json["nsight"][kind]`` (atomic
replace). The storage side (``storage.rundir.ingest_run_all``) reads ``run.json["nsight"]["ncu"]``
``clock_control``/``cache_control`` and stores them with the ncu rows.

Checking a stored nsys trace: ``kern_sum_check(db, trace_id, csv) -> dict`` compares the stored trace's kernel
count and total kernel time with ``nsys stats --report cuda_gpu_kern_sum --format csv`` output (also
``python -m kernelscope.collectors.nsight_ncu check-kern-sum DB TRACE CSV``); ``collectors_check(db, kineto, nsys)``
compares the Kineto and nsys traces of one run per leaf operator (kernel counts and GPU time; ``check-collectors DB
KINETO NSYS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelscope.errors import KernelscopeError, UsageError

from .child import run_child

# ---------------------------------------------------------------- finding the tools

#: Where each tool is looked for after PATH, in order; within one pattern the newest version comes first.
INSTALL_GLOBS = {
    "nsys": ("/usr/local/cuda/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
             "/opt/nvidia/nsight-systems/*/target-linux-x64/nsys", "/usr/local/cuda/nsight-systems-*/bin/nsys",
             "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys"),
    "ncu": ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/nsight-compute-*/ncu"),
}
TOOL_NAMES = {"nsys": "Nsight Systems (nsys)", "ncu": "Nsight Compute (ncu)"}
#: The option that gives a tool's path, as the CLI spells it (named in the one-line messages).
PATH_OPTIONS = {"nsys": "--nsys PATH", "ncu": "--ncu-path PATH"}


def _version_key(path: Path) -> tuple:
    """Newest first: the numbers in the path (``2025.3.1`` > ``2024.6.2``), compared as tuples."""
    return tuple(int(n) for n in re.findall(r"\d+", str(path)))


def install_candidates(kind: str) -> list[Path]:
    """The install-folder paths of ``kind`` that exist, in ``INSTALL_GLOBS`` order, newest version first."""
    import glob

    out: list[Path] = []
    for pattern in INSTALL_GLOBS[kind]:
        found = sorted((Path(p) for p in glob.glob(pattern)), key=_version_key, reverse=True)
        found = [p / kind if p.is_dir() else p for p in found]  # a folder named like the tool holds it
        out += [p for p in found if p not in out]
    return out


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_tool(kind: str, explicit: str | os.PathLike | None = None, *, option: str | None = None) -> Path:
    """The ``nsys``/``ncu`` to run: ``explicit`` (a file, or a folder holding the tool), else the first on PATH,
    else the first of ``install_candidates``. UsageError (one line: what to install, and the option that gives
    the path) when there is none."""
    if kind not in INSTALL_GLOBS:
        raise ValueError(f"kind must be 'nsys' or 'ncu', not {kind!r}")
    option = option or PATH_OPTIONS[kind]
    if explicit is not None and str(explicit) != "":
        p = Path(explicit).expanduser()
        if p.is_dir():
            p = p / kind
        if not _executable(p):
            what = "is not executable" if p.is_file() else "does not exist"
            raise UsageError(f"{TOOL_NAMES[kind]} at {p} {what}; give the path of the {kind} executable "
                             f"with {option}.")
        return p
    on_path = shutil.which(kind)
    if on_path:
        return Path(on_path)
    for p in install_candidates(kind):
        if _executable(p):
            return p
    where = ", ".join(INSTALL_GLOBS[kind])
    url = "nsight-systems" if kind == "nsys" else "nsight-compute"
    raise UsageError(f"{TOOL_NAMES[kind]} not found on PATH or in {where}: install it "
                     f"(https://developer.nvidia.com/{url}) or give its path with {option}.")


# ---------------------------------------------------------------- nsys's importer and libdw

#: The command that lists a binary's shared libraries (tests point it at a fake).
LDD = "ldd"
LIBDW = "libdw.so.1"
LIBDW_HINT = (f"install the Debian/Ubuntu package libdw1 (apt-get install libdw1) or put the folder holding "
              f"{LIBDW} on LD_LIBRARY_PATH")


def find_importer(nsys: Path) -> Path | None:
    """nsys's QdstrmImporter (it turns the capture into the report that ``nsys export`` reads): beside nsys, or in
    a sibling folder (``host-linux-x64``) of nsys's folder or of its parent."""
    here = Path(nsys).resolve().parent
    for base in (here, here.parent, here.parent.parent):
        for cand in [base / "QdstrmImporter", *sorted(base.glob("*/QdstrmImporter"))]:
            if cand.is_file():
                return cand
    return None


def check_nsys_importer(nsys) -> None:
    """UsageError (one line) when nsys's importer cannot load its libraries: ``ldd`` on the QdstrmImporter next to
    nsys lists a library 'not found' (libdw.so.1 names its package); without the importer or ``ldd``, whether
    libdw.so.1 loads at all. Cheap (no capture): run it before the script."""
    importer = find_importer(Path(nsys))
    ldd = shutil.which(LDD) if not os.path.isabs(LDD) else (LDD if _executable(Path(LDD)) else None)
    if importer is not None and ldd:
        try:
            out = subprocess.run([ldd, str(importer)], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        missing = [ln.split()[0] for ln in out.splitlines() if "not found" in ln and ln.split()]
        if any(m.startswith("libdw.so") for m in missing):
            raise UsageError(f"nsys's importer ({importer}) needs {LIBDW}, which is missing: {LIBDW_HINT}.")
        if missing:
            raise UsageError(f"nsys's importer ({importer}) cannot load {', '.join(missing)}: install the packages "
                             "that provide them or put their folder on LD_LIBRARY_PATH.")
        return
    import ctypes

    try:
        ctypes.CDLL(LIBDW)
    except OSError:
        raise UsageError(f"nsys's SQLite export needs {LIBDW}, which is missing: {LIBDW_HINT}.") from None


# ---------------------------------------------------------------- the nsys pass

@dataclass(frozen=True)
class NsysPaths:
    """The nsys pass's files in a run dir: ``base`` (nsys -o), ``rep`` (kept), ``sqlite`` (ingested)."""

    base: Path
    rep: Path
    sqlite: Path


def nsys_paths(run_dir, name: str) -> NsysPaths:
    base = Path(run_dir) / name
    return NsysPaths(base, base.with_name(name + ".nsys-rep"), base.with_name(name + ".sqlite"))


def nsys_prefix(nsys, out_base, capture_range: bool) -> list[str]:
    """``nsys profile`` with CUDA and NVTX tracing, no CPU sampling or context switches, to ``out_base``
    (.nsys-rep added by nsys); with ``capture_range`` only between cudaProfilerStart and the first Stop."""
    argv = [str(nsys), "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
            "--force-overwrite=true", "-o", str(out_base)]
    if capture_range:
        argv += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    return argv


class NvtxPass:
    """The capture range of the nsys (or ncu) pass in the child: ``start()``/``stop()`` call
    ``torch.cuda.profiler.start/stop`` once each (nothing without a capture range or CUDA); ``step()`` counts the
    script's steps against ``schedule`` = (wait, warmup, active[, repeat]): start when the first active step
    begins (after wait + warmup steps), stop when the first cycle's active steps are done. With ``name_steps``
    (the nsys pass) each recorded step is an NVTX start/end range named ``ProfilerStep#N`` as the Kineto pass
    names it, so the Nsight trace has the same steps (a start/end range, not push/pop: a step boundary can fall
    inside an operator's push/pop range, an optimizer's post-step hook, which a push would unbalance)."""

    def __init__(self, capture_range: bool = False, schedule: tuple | None = None, name_steps: bool = False):
        self.capture_range = bool(capture_range)
        self.schedule = tuple(schedule) if schedule else None
        self.name_steps = name_steps
        self.steps = 0
        self.started = False
        self.stopped = False
        self._range = None
        if self.schedule and self._begin() == 0:
            self.start()
            self._open_step()

    def _begin(self) -> int:
        wait, warmup = self.schedule[0], self.schedule[1]
        return int(wait) + int(warmup)

    def _cuda(self):
        import torch

        return torch if torch.cuda.is_available() else None

    def start(self) -> None:
        if self.capture_range and not self.started:
            self.started = True
            torch = self._cuda()
            if torch is not None:
                torch.cuda.synchronize()
                torch.cuda.profiler.start()

    def stop(self) -> None:
        if self.capture_range and self.started and not self.stopped:
            self.stopped = True
            torch = self._cuda()
            if torch is not None:
                torch.cuda.synchronize()
                self._close_step(torch)
                torch.cuda.profiler.stop()

    def _open_step(self) -> None:
        torch = self._cuda()
        if self.name_steps and self.started and not self.stopped and torch is not None:
            try:
                self._range = torch.cuda.nvtx.range_start(f"ProfilerStep#{self.steps}")
            except Exception:  # no NVTX here: the steps go unnamed, the script runs on
                self.name_steps, self._range = False, None

    def _close_step(self, torch) -> None:
        if self._range is not None:
            rid, self._range = self._range, None
            try:
                torch.cuda.nvtx.range_end(rid)
            except Exception:
                self.name_steps = False

    def step(self) -> None:
        self.steps += 1
        if not self.schedule:
            return
        begin = self._begin()
        if self.steps == begin:
            self.start()
            self._open_step()
        elif self.steps == begin + int(self.schedule[2]):
            self.stop()
        elif self._range is not None:  # a host-side range from step() to step(), as Kineto's ProfilerStep#N
            self._close_step(self._cuda())
            self._open_step()


@contextlib.contextmanager
def child_nvtx(capture_range: bool = False, schedule: tuple | None = None, *, nvtx: bool = True):
    """In the child of the nsys pass: NVTX ranges for every PyTorch operator (``emit_nvtx(record_shapes=True)``,
    ``nvtx=False`` for the ncu pass) around the script; yields an ``NvtxPass`` (the capture range). On exit a
    range still open is stopped. Without CUDA (emit_nvtx needs it) the script runs without NVTX ranges and one
    line on stderr says so."""
    import sys

    import torch

    if nvtx and not torch.cuda.is_available():
        sys.stderr.write("kernelscope: no CUDA device: the nsys pass runs the script without NVTX operator ranges\n")
        nvtx = False
    ctx = torch.autograd.profiler.emit_nvtx(record_shapes=True) if nvtx else contextlib.nullcontext()
    rng = NvtxPass(capture_range, schedule, name_steps=nvtx)
    try:
        with ctx:
            yield rng
    finally:
        rng.stop()


def _last_line(text: str | bytes | None, default: str) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or [default])[-1][:300]


def nsys_export(nsys, rep, *, timeout: float | None = None) -> Path:
    """``nsys export --type sqlite`` of ``rep`` to ``<rep stem>.sqlite`` beside it (written under a hidden folder
    first, then moved: never half-written); the report is kept. KernelscopeError in one line on failure (libdw
    named when it is the cause)."""
    rep = Path(rep)
    stem = rep.name[: -len(".nsys-rep")] if rep.name.endswith(".nsys-rep") else rep.stem
    final = rep.with_name(stem + ".sqlite")
    tmp_dir = rep.with_name(f".{stem}.export")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir()
    try:
        tmp = tmp_dir / (stem + ".sqlite")
        argv = [str(nsys), "export", "--type", "sqlite", "--force-overwrite=true", "-o", str(tmp), str(rep)]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as exc:
            raise KernelscopeError(f"nsys export of {rep} could not run: {exc}") from None
        if p.returncode != 0 or not tmp.is_file():
            out = (p.stderr or "") + (p.stdout or "")
            why = _last_line(out, f"exit code {p.returncode}")
            hint = f"; {LIBDW_HINT}" if "libdw" in out else ""
            raise KernelscopeError(f"nsys export of {rep} failed: {why}{hint}; the report is kept.")
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return final


@dataclass
class PassResult:
    """What one Nsight pass left: ``ok``, the files it wrote in the run dir, one line saying what happened, the
    tool's exit code and the seconds it took."""

    kind: str
    ok: bool
    files: list[str] = field(default_factory=list)
    message: str = ""
    returncode: int | None = None
    seconds: float = 0.0


def record_pass(run_dir, kind: str, info: dict) -> None:
    """Merge ``info`` into ``run.json["nsight"][kind]`` (read, update, atomic replace; run.json is created with
    only this key when it is not there yet)."""
    path = Path(run_dir) / "run.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise KernelscopeError(f"{path}: cannot record the {kind} pass in run.json ({exc}); fix or remove it") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nsight", {}), dict):
        raise KernelscopeError(f"{path}: run.json is not a kernelscope run record; cannot record the {kind} pass")
    doc.setdefault("nsight", {}).setdefault(kind, {}).update(info)
    tmp = path.with_name(f".run.json.{kind}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def tool_version(tool) -> str | None:
    """The first line of ``tool --version`` that names a version, or None."""
    try:
        out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in out.splitlines() if "version" in ln.lower()]
    return lines[-1] if lines else None


def nsys_pass(nsys, run_dir, name: str, child_argv: list[str], *, env=None, capture_range: bool = False,
              timeout: float | None = None) -> PassResult:
    """The nsys pass: ``child_argv`` under ``nsys_prefix`` (the report written under a hidden folder, moved into
    the run dir when complete), ``nsys_export`` to SQLite, and ``record_pass(run_dir, "nsys", ...)``. A failure
    comes back as ``ok=False`` with one line; what was written before it is kept."""
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    final = nsys_paths(run_dir, name)
    stage = run_dir / ".nsys-pass"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    tmp = nsys_paths(stage, name)
    argv = nsys_prefix(nsys, tmp.base, capture_range) + list(child_argv)
    info = {"argv": nsys_prefix(nsys, final.base, capture_range) + list(child_argv), "capture_range": capture_range,
            "version": tool_version(nsys)}
    try:
        rc = run_child(argv, env=env, timeout=timeout)  # None: timed out (stopped)
        if not tmp.rep.is_file():
            why = ("nsys wrote no report" + (f" (exit code {rc})" if rc is not None else " (timed out)")
                   + ("; with a capture range nothing is recorded unless the script reaches the schedule's active "
                      "steps" if capture_range else ""))
            record_pass(run_dir, "nsys", {**info, "ok": False, "error": why, "returncode": rc})
            return PassResult("nsys", False, [], why, rc, time.perf_counter() - t0)
        os.replace(tmp.rep, final.rep)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    files = [final.rep.name]
    try:
        nsys_export(nsys, final.rep, timeout=timeout)
        files.append(final.sqlite.name)
        ok, msg = True, f"nsys pass: {final.rep.name} and {final.sqlite.name}" + (
            f" (the script exited with {rc})" if rc else "")
    except KernelscopeError as exc:
        ok, msg = False, str(exc)
    record_pass(run_dir, "nsys", {**info, "ok": ok, "report": final.rep.name,
                                  "sqlite": final.sqlite.name if ok else None, "returncode": rc,
                                  **({} if ok else {"error": msg})})
    return PassResult("nsys", ok, files, msg, rc, time.perf_counter() - t0)


# The ncu pass and the nsys stats check live in nsight_ncu.py (this file's size); their names are this module's too.
from .nsight_ncu import (  # noqa: E402
    CACHE_CONTROL,
    CLOCK_CONTROL,
    FLOP_METRICS,
    MAX_LAUNCHES,
    NCU_METRICS,
    NcuSpec,
    NcuTargets,
    collectors_check,
    kern_sum_check,
    kernel_regex,
    ncu_csv_path,
    ncu_pass,
    ncu_prefix,
    ncu_targets,
    parse_ncu_spec,
    read_kern_sum,
    settings_note,
    stored_kernels,
)

__all__ = [
    "CACHE_CONTROL", "CLOCK_CONTROL", "FLOP_METRICS", "INSTALL_GLOBS", "LDD", "MAX_LAUNCHES", "NCU_METRICS",
    "NcuSpec", "NcuTargets", "NsysPaths", "NvtxPass", "PassResult", "check_nsys_importer", "child_nvtx",
    "collectors_check", "find_importer", "find_tool", "install_candidates", "kern_sum_check", "kernel_regex",
    "ncu_csv_path", "ncu_pass", "ncu_prefix", "ncu_targets", "nsys_export", "nsys_pass", "nsys_paths", "nsys_prefix",
    "parse_ncu_spec", "read_kern_sum", "record_pass", "settings_note", "stored_kernels", "tool_version",
]
