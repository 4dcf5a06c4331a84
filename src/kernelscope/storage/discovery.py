"""What ingest finds in the paths it is given: files, collector run directories, Nsight Systems Parquet exports
and Nsight Compute CSVs (``collect_paths``), and why a path cannot be read (``path_problem``).
"""

from __future__ import annotations

import os
import pathlib


def trace_suffixes() -> tuple[str, ...]:
    try:
        from ..parsers import TRACE_SUFFIXES

        return tuple(TRACE_SUFFIXES)
    except ImportError:
        return (".json", ".json.gz")


#: The files a collector run directory holds besides telemetry: its record and its trace.
RUN_RECORD = "run.json"
RUN_TRACES = ("trace.json.gz", "trace.json")


def is_run_dir(folder) -> bool:
    """A collector run directory: run.json beside trace.json.gz or trace.json. A run.json that is there but
    is not a regular file (a FIFO, a dangling link) still makes it one, so that reading it refuses it in one
    line instead of ingesting the trace without its record."""
    folder = pathlib.Path(folder)
    return os.path.lexists(folder / RUN_RECORD) and not (folder / RUN_RECORD).is_dir() and any(
        (folder / n).is_file() for n in RUN_TRACES)


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
    run.json and trace.json(.gz) are never ingested on their own; any other file whose name ends in a
    trace suffix is a 'file' (a stray run.json is not a trace and is left out); a ``.csv``/``.csv.gz``
    whose content is an Nsight Compute export is an 'ncu' (as ``ingest FILE`` takes it; other CSVs,
    e.g. ``nsys stats`` output, are left out). Only regular files are taken in a walk (FIFOs, devices,
    dangling links and symlink loops are left out). A given run directory, or a given file inside one
    that is its run.json or trace, is that 'run'. An Nsight Systems Parquet export
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
                if not f.name.endswith(suffixes):
                    if _is_ncu_csv(f):
                        found.append(("ncu", f))
                    continue
                if is_run_dir(f.parent):
                    if f.name == RUN_RECORD or f.name in RUN_TRACES:
                        found.append(("run", f.parent))
                        continue
                elif f.name == RUN_RECORD:
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
