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


def _peek(path: Path, n: int = 4096) -> bytes:
    """The first ``n`` decompressed bytes of a file, ParseError on unreadable/corrupt input."""
    from kernelscope.parsers.kineto import _Source

    src = _Source(path)
    try:
        return src.read(n)
    finally:
        src.close()


def detect_format(path: str | Path) -> str:
    """The trace format of a file by its content: ``"kineto"`` for a JSON document (the Kineto reader
    gives the precise error when it is JSON but not a trace), ``"nsys"`` for an SQLite file (the nsys
    reader says when it is not an nsys export) or a ``.nsys-rep`` report, ``"ncu"`` for an Nsight Compute
    CSV. ParseError for anything else."""
    if Path(path).name.endswith(".nsys-rep"):
        return "nsys"
    head = _peek(Path(path)).lstrip()
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
        "not a trace: the file does not start with '{' (binary, another format, or JSON that is not an object); "
        "give a torch.profiler .json or .json.gz trace"
    )


def open_trace(path: str | Path, *, python_functions: bool = True) -> Any:
    """A reader for ``path`` (iterate it for ``RAW_EVENTS`` batches; ``.meta`` is complete afterwards)."""
    fmt = detect_format(path)
    if fmt == "kineto":
        from kernelscope.parsers.kineto import KinetoReader

        return KinetoReader(path, python_functions=python_functions)
    if fmt == "nsys":
        from kernelscope.parsers.nsys import NsysReader

        return NsysReader(path)
    if fmt == "ncu":
        raise ParseError(
            "this is an Nsight Compute CSV (per-kernel metrics, not a timeline); ingest it with "
            "kernelscope.storage.ncu.ingest_ncu (or `kernelscope ingest` once it dispatches .csv files)"
        )
    raise ParseError(f"unsupported trace format {fmt!r}")  # pragma: no cover - detect_format raises first
