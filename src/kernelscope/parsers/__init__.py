"""Trace parsers: each turns one file into ``RAW_EVENTS`` Arrow batches plus a ``TraceMeta``.

``open_trace(path)`` picks the parser by content (``detect_format``) and returns a reader with ``.meta`` and
batch iteration. Parsers derive nothing: storage links and splits the rows (see ``schema.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelscope.errors import ParseError

#: File names a directory walk picks up as traces (Kineto JSON, nsys SQLite exports and reports).
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz", ".nsys-rep")
#: Nsight Compute CSV exports (per-kernel metrics, not timelines: storage.ncu ingests them). Not walked
#: by default: a directory of CSVs may hold other tables (nsys stats output, ...).
NCU_SUFFIXES = (".csv", ".csv.gz")
#: Tables whose ``<name>.parquet`` marks a directory as an ``nsys export --type parquetdir`` output.
NSYS_PARQUET_MARKERS = ("StringIds", "TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT", "NVTX_EVENTS",
                        "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")


def parquet_dir_kind(path: str | Path) -> str | None:
    """What a directory is as a trace: ``"nsys"`` when it holds one of Nsight Systems' tables as
    ``<TABLE>.parquet`` (``NSYS_PARQUET_MARKERS``: an ``nsys export --type parquetdir``, perhaps
    incomplete), ``"parquet"`` when it holds only ``.parquet`` files (at least one) but none of those, None
    otherwise (not a directory, or a directory of other things: walk it)."""
    p = Path(path)
    if not p.is_dir():
        return None
    try:
        entries = list(p.iterdir())
    except OSError:
        return None
    names = {e.name for e in entries if e.is_file()}
    if any(f"{m}.parquet" in names for m in NSYS_PARQUET_MARKERS):
        return "nsys"
    if entries and all(e.is_file() and e.name.endswith(".parquet") for e in entries):
        return "parquet"
    return None


def _peek(path: Path, n: int = 4096, salvage: bool = False) -> bytes:
    """The first ``n`` decompressed bytes of a file, ParseError on unreadable/corrupt input (``salvage``: what
    decompresses before a cut gzip stream ends)."""
    from kernelscope.parsers.source import Source

    src = Source(path, salvage=salvage)
    try:
        head = src.read(n)
    finally:
        src.close()
    if not head and src.cut:
        raise ParseError(f"{src.cut}: nothing decompresses (truncated before its first event: nothing to "
                         "salvage); copy the file again")
    return head


def detect_format(path: str | Path, salvage: bool = False) -> str:
    """The trace format of a file by its content: ``"kineto"`` for a JSON document (the Kineto reader
    gives the precise error when it is JSON but not a trace), ``"nsys"`` for an SQLite file (the nsys
    reader says when it is not an nsys export) or a ``.nsys-rep`` report, ``"ncu"`` for an Nsight Compute
    CSV, ``"nsys"`` for a directory that is an ``nsys export --type parquetdir`` (``parquet_dir_kind``).
    ParseError for anything else."""
    if Path(path).name.endswith(".nsys-rep"):
        return "nsys"
    if Path(path).is_dir():
        kind = parquet_dir_kind(path)
        if kind == "nsys":
            return "nsys"
        if kind == "parquet":
            raise ParseError(
                "this directory of Parquet files is not an Nsight Systems export (none of StringIds, "
                "TARGET_INFO_SESSION_START_TIME, CUPTI_ACTIVITY_KIND_*.parquet); give the output of "
                "`nsys export --type parquetdir`"
            )
        raise ParseError(
            "this is a directory, not a trace file, and not an `nsys export --type parquetdir` output; "
            "give a trace file, or a directory to `kernelscope ingest` (it walks directories)"
        )
    head = _peek(Path(path), salvage=salvage).lstrip()
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:].lstrip()
    if head[:1] in (b"{", b"["):
        return "kineto"
    if head.startswith(b"SQLite format 3\x00"):
        return "nsys"
    from kernelscope.parsers.ncu import looks_like_ncu

    verdict = looks_like_ncu(head)
    if verdict is True:
        return "ncu"
    if verdict is not None:
        raise ParseError(verdict)
    if not head:
        raise ParseError("the file is empty after decompression; it holds no trace")
    raise ParseError(
        "not a trace: the file starts with neither '{' nor '[' (binary, another format, or JSON that is neither "
        "an object nor an array of events); "
        "give a torch.profiler .json or .json.gz trace"
    )


def open_trace(path: str | Path, *, python_functions: bool = True, salvage: bool = False) -> Any:
    """A reader for ``path`` (iterate it for ``RAW_EVENTS`` batches; ``.meta`` is complete afterwards).
    ``salvage``: keep the complete events of a Kineto trace cut short (``KinetoReader``); other formats
    ignore it."""
    fmt = detect_format(path, salvage=salvage)
    if fmt == "kineto":
        from kernelscope.parsers.kineto import KinetoReader

        return KinetoReader(path, python_functions=python_functions, salvage=salvage)
    if fmt == "nsys":
        from kernelscope.parsers.nsys import NsysReader

        return NsysReader(path)
    if fmt == "ncu":
        raise ParseError(
            "this is an Nsight Compute CSV (per-kernel metrics, not a timeline); ingest it with "
            "kernelscope.storage.ncu.ingest_ncu (or `kernelscope ingest` once it dispatches .csv files)"
        )
    raise ParseError(f"unsupported trace format {fmt!r}")  # pragma: no cover - detect_format raises first
