"""A trace's own rows: its id (from the content hash), its ``traces`` row (a ``TraceRecord``) and its labels, and
``TraceInput``, what a caller brings with a trace besides its events (name, run, provenance, labels, an insert
of its own).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import __version__
from ..errors import UsageError
from .inserts import insert_rows
from .labels import label_number
from .staging import Staged


def hash_file(path: pathlib.Path) -> str:
    """sha256 of the decompressed content (fallback when the parser gives no content hash)."""
    import gzip

    h = hashlib.sha256()
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


#: File stems too generic to tell traces apart (what export_chrome_trace scripts usually write): such a trace is
#: named after its folder instead ("qwen2_train_default", not one more "trace").
GENERIC_STEMS = frozenset({"trace", "traces", "profile", "kineto", "pt.trace"})


def trace_name(path: pathlib.Path) -> str:
    name = path.name
    for suffix in (".json.gz", ".json", ".sqlite.gz", ".gz", ".sqlite", ".nsys-rep", ".parquet"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)] or name
            folder = path.resolve().parent.name
            return folder if stem.lower() in GENERIC_STEMS and folder else stem
    return name


def new_trace_id(con, content_hash: str) -> str:
    """First 12 hex digits of the content hash, 4 more per collision with another content."""
    n = 12
    while n < len(content_hash):
        cand = content_hash[:n]
        rows = con.execute("SELECT content_hash FROM traces WHERE trace_id = ?", [cand]).fetchall()
        row = rows[0] if rows else None
        if row is None or row[0] == content_hash:
            return cand
        n += 4
    return content_hash


def stored_id(con, content_hash: str) -> str | None:
    row = con.execute(
        "SELECT trace_id FROM traces WHERE content_hash = ? LIMIT 1", [content_hash]
    ).fetchall()
    return row[0][0] if row else None


def to_json(value) -> str | None:
    if value is None:
        return None
    return json.dumps(value, default=str, allow_nan=False)


def insert_labels(con, trace_id: str, labels: dict | None) -> None:
    """Replace the given keys' labels on a trace: value_text always, value_num when numeric."""
    if not labels:
        return
    rows = []
    for key, value in labels.items():
        key = str(key).strip()
        if not key:
            raise UsageError("a label needs a non-empty key, as key=value")
        text = value if isinstance(value, str) else json.dumps(value) if value is not None else ""
        if isinstance(value, bool):
            text = "true" if value else "false"
        rows.append((trace_id, key, text, label_number(text)))
    if rows:
        con.execute("DELETE FROM labels WHERE trace_id = ? AND list_contains(?, key)", [trace_id, [r[1] for r in rows]])
    insert_rows(con, "labels", rows)


@dataclass(frozen=True)
class TraceInput:
    """What comes with a trace besides its events: its ``name`` (else the file's name without its suffixes),
    the ``run_id`` and ``provenance`` of the collector run that recorded it, ``labels``, an ``extra(con,
    trace_id)`` insert run inside its transaction (a run directory's telemetry and timings) and the ``host``
    its run directory records (rank clock offsets)."""

    name: str | None = None
    run_id: str | None = None
    provenance: dict | None = None
    labels: dict | None = None
    extra: Callable[[Any, str], None] | None = None
    host: str | None = None


@dataclass(frozen=True)
class RankOf:
    """A trace's place in a run of many ranks: its rank, where that came from, and the run's world size."""

    rank: int
    rank_source: str
    world_size: int


@dataclass(frozen=True)
class TraceRecord:
    """One row of ``traces`` (schema/001_init.sql and 008 say what each column holds)."""

    trace_id: str
    name: str
    source: str
    content_hash: str
    format: str
    run_id: str | None
    rank: int
    world_size: int | None
    rank_source: str
    base_time_ns: int
    start_ns: int | None
    end_ns: int | None
    device_properties: list
    distributed_info: Any
    provenance: Any
    meta: dict
    warnings: list
    dropped_notes: list
    clock_offset_ns: int | None
    events: int
    facts: dict

    @classmethod
    def build(cls, trace_id: str, path: pathlib.Path, content_hash: str, meta, staged: Staged, rows: int,
              warnings: list, given: TraceInput, rank: RankOf | None = None) -> TraceRecord:
        """The row of a trace parsed from ``path`` (``meta``: the parser's TraceMeta; ``rows``: events staged,
        the count when the parser gives none); a trace outside a run takes its rank from the trace, else 0."""
        if rank is None:
            rank = RankOf(meta.rank if meta.rank is not None else 0,
                          "distributedInfo" if meta.rank is not None else "default", meta.world_size)
        return cls(
            trace_id=trace_id, name=given.name or trace_name(path), source=os.path.abspath(path),
            content_hash=content_hash, format=meta.format, run_id=given.run_id, rank=int(rank.rank),
            world_size=rank.world_size, rank_source=rank.rank_source, base_time_ns=staged.base,
            start_ns=staged.start_ns, end_ns=staged.end_ns, device_properties=meta.device_properties or [],
            distributed_info=meta.distributed_info, provenance=given.provenance, meta=meta.extra or {},
            warnings=warnings, dropped_notes=list(meta.dropped_notes or []), clock_offset_ns=staged.offset,
            events=int(meta.events or rows), facts=staged.facts or {},
        )

    def insert(self, con) -> None:
        """INSERT the row (``ingested_ns`` now, ``kernelscope_version`` this one)."""
        facts = self.facts
        con.execute(
            """INSERT INTO traces (trace_id, name, source, content_hash, format, run_id, rank,
                   world_size, rank_source, base_time_ns, start_ns, end_ns, device_properties,
                   distributed_info, provenance, meta, warnings, dropped_notes, clock_offset_ns,
                   events, ingested_ns, kernelscope_version, truncated, negative_durations, set_aside)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                self.trace_id, self.name, self.source, self.content_hash, self.format, self.run_id, self.rank,
                self.world_size, self.rank_source, self.base_time_ns, self.start_ns, self.end_ns,
                to_json(self.device_properties), to_json(self.distributed_info), to_json(self.provenance),
                to_json(self.meta), to_json(self.warnings), to_json(self.dropped_notes), self.clock_offset_ns,
                self.events, time.time_ns(), __version__, to_json(facts.get("truncated")),
                to_json(facts.get("negative_durations") or {}), to_json(facts.get("set_aside") or {}),
            ],
        )
