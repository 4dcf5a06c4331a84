"""What ingest finds in the paths it is given: files, collector run directories, Nsight Systems Parquet exports
and Nsight Compute CSVs (``collect_paths``), the passes a run directory holds (``run_parts``), and why a path
cannot be read (``path_problem``).
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass


def trace_suffixes() -> tuple[str, ...]:
    try:
        from ..parsers import TRACE_SUFFIXES

        return tuple(TRACE_SUFFIXES)
    except ImportError:
        return (".json", ".json.gz")


#: The files a collector run directory holds besides telemetry: its record and its trace.
RUN_RECORD = "run.json"
RUN_TRACES = ("trace.json.gz", "trace.json")
#: The files of a run directory's Nsight passes (collectors/nsight.py), top level only: nsys's SQLite export
#: (a second trace of the run), nsys's report (kept beside it, never ingested: the export is) and ncu's CSV
#: (joined to the run's trace).
NSYS_EXPORT_SUFFIXES = (".sqlite", ".sqlite.gz")
NSYS_REPORT_SUFFIX = ".nsys-rep"
NCU_PART_SUFFIXES = ("_ncu.csv", "_ncu.csv.gz")


@dataclass(frozen=True)
class RunParts:
    """What a run directory holds, by pass: the Kineto trace (None without), nsys SQLite exports, nsys reports
    and ncu CSVs (each sorted by name)."""

    kineto: pathlib.Path | None
    nsys: tuple[pathlib.Path, ...] = ()
    reports: tuple[pathlib.Path, ...] = ()
    ncu: tuple[pathlib.Path, ...] = ()


def _nsight_files(folder: pathlib.Path) -> list[pathlib.Path]:
    try:
        return sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith(".") and f.name.endswith(
            (*NSYS_EXPORT_SUFFIXES, NSYS_REPORT_SUFFIX, *NCU_PART_SUFFIXES)))
    except OSError:
        return []


def run_parts(folder) -> RunParts:
    """The passes of a run directory (``RunParts``); a run of the Kineto pass only has ``kineto`` alone."""
    folder = pathlib.Path(folder)
    files = _nsight_files(folder)
    return RunParts(
        kineto=next((folder / n for n in RUN_TRACES if (folder / n).is_file()), None),
        nsys=tuple(f for f in files if f.name.endswith(NSYS_EXPORT_SUFFIXES)),
        reports=tuple(f for f in files if f.name.endswith(NSYS_REPORT_SUFFIX)),
        ncu=tuple(f for f in files if f.name.endswith(NCU_PART_SUFFIXES)),
    )


def is_run_part(path) -> bool:
    """A file that belongs to the run directory it sits in (its run.json, trace or an Nsight pass's file)."""
    path = pathlib.Path(path)
    name = path.name
    ours = name == RUN_RECORD or name in RUN_TRACES or (not name.startswith(".") and name.endswith(
        (*NSYS_EXPORT_SUFFIXES, NSYS_REPORT_SUFFIX, *NCU_PART_SUFFIXES)))
    return ours and is_run_dir(path.parent)


def is_run_dir(folder) -> bool:
    """A collector run directory: run.json beside trace.json.gz or trace.json, or beside an nsys SQLite export
    (a run of the nsys pass alone). A run.json that is there but is not a regular file (a FIFO, a dangling link)
    still makes it one, so that reading it refuses it in one line instead of ingesting the trace without its
    record."""
    folder = pathlib.Path(folder)
    if not os.path.lexists(folder / RUN_RECORD) or (folder / RUN_RECORD).is_dir():
        return False
    return any((folder / n).is_file() for n in RUN_TRACES) or any(
        f.name.endswith(NSYS_EXPORT_SUFFIXES) for f in _nsight_files(folder))


def path_problem(path) -> str | None:
    """Why a path given to ingest cannot be read, in words, or None for a regular file or a directory:
    missing, a symlink loop, or not a regular file (a FIFO would block the reader forever, a device never
    ends)."""
    import errno
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop (too many levels of symbolic links); point it at a trace file"
        if exc.errno == errno.ENOENT:
            return "no such file or directory" + (" (a dangling symlink)" if os.path.islink(path) else "")
        return f"cannot read it ({exc.strerror})"
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    return f"{what}, not a regular file; give a trace file (copy the data into a file first)"


def _is_ncu_csv(path: pathlib.Path) -> bool:
    """A ``.csv``/``.csv.gz`` whose first bytes are an Nsight Compute export (other CSVs are not traces)."""
    from ..errors import KernelscopeError
    from ..parsers import NCU_SUFFIXES, _peek
    from ..parsers.ncu import looks_like_ncu

    if not path.name.endswith(NCU_SUFFIXES):
        return False
    try:
        return looks_like_ncu(_peek(path)) is True
    except (KernelscopeError, OSError):
        return False


def collect_paths(paths, empty: list | None = None) -> list[tuple[str, pathlib.Path]]:
    """What to ingest, as ('run', folder), ('file', path), ('export', folder) or ('ncu', csv), in the
    order given (walks sorted).

    A directory is walked recursively: a run directory in it (``is_run_dir``) is one 'run'; its
    run.json, trace.json(.gz) and Nsight passes' files (``is_run_part``) are never ingested on their own;
    any other file whose name ends in a trace suffix is a 'file' (a stray run.json is not a trace and is
    left out); a ``.csv``/``.csv.gz`` whose content is an Nsight Compute export is an 'ncu' (as ``ingest
    FILE`` takes it; other CSVs, e.g. ``nsys stats`` output, are left out). Only regular files are taken
    in a walk (FIFOs, devices, dangling links and symlink loops are left out). A given run directory, or a
    given file inside one that is its run.json or trace, is that 'run'. An Nsight Systems Parquet export
    (``parsers.parquet_dir_kind`` 'nsys'; given, or met in a walk) is one ('export', folder), read by
    ``ingest_file``; a given folder of Parquet files only is one too (its reader says it is not an nsys
    export). Each item appears once. ``empty``, when given, receives each given directory in which
    nothing was found.
    """
    from ..parsers import parquet_dir_kind

    suffixes = trace_suffixes()
    out: list[tuple[str, pathlib.Path]] = []
    seen: set[tuple[str, pathlib.Path]] = set()

    def add(kind: str, path: pathlib.Path) -> None:
        key = (kind, pathlib.Path(os.path.realpath(path)))  # realpath: no error on a symlink loop
        if key not in seen:
            seen.add(key)
            out.append((kind, path))

    for p in map(pathlib.Path, paths):
        if p.is_dir():
            if is_run_dir(p):
                add("run", p)
                continue
            if parquet_dir_kind(p) is not None:
                add("export", p)
                continue
            found = []
            for f in p.rglob("*"):
                if f.is_dir() and parquet_dir_kind(f) == "nsys":
                    found.append(("export", f))
                    continue
                if not f.is_file():
                    continue
                if is_run_part(f):
                    found.append(("run", f.parent))
                    continue
                if not f.name.endswith(suffixes):
                    if _is_ncu_csv(f):
                        found.append(("ncu", f))
                    continue
                if f.name == RUN_RECORD:  # a stray run.json (a run directory's was taken above)
                    continue
                found.append(("file", f))
            if not found and empty is not None:
                empty.append(p)
            for kind, f in sorted(set(found), key=lambda kf: (str(kf[1]), kf[0])):
                add(kind, f)
        elif (p.name == RUN_RECORD or p.name in RUN_TRACES) and is_run_dir(p.parent):
            add("run", p.parent)
        else:
            add("file", p)
    return out


def expand_paths(paths) -> list[pathlib.Path]:
    """The plain trace files ``collect_paths`` finds (run directories and their files left out)."""
    return [p for kind, p in collect_paths(paths) if kind == "file"]
