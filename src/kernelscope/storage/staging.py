"""A trace's staged events: the scratch folder next to the store, the Parquet file the parser's batches are
written to by a writer thread and the parts parse workers wrote themselves (``stage``: ``StagedFiles``), the
TEMP VIEWs every derivation reads (``raw_view``), and what is
derived from them before anything is inserted (``derive_staged``: links, the launch table, the checks; a
``Staged`` record). Both ingest paths use it: one file (storage/onetrace.py) and each rank worker
(storage/rankrun.py).
"""

from __future__ import annotations

import pathlib
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa

from ..errors import ParseError
from ..parsers.schema import RAW_EVENTS, Part
from . import derive, rawfacts


@dataclass(frozen=True)
class StagedFiles:
    """A trace's staged events: ``raw``, the Parquet file of the batches the reader yielded (``RAW_EVENTS``,
    ``seq`` as numbered), and ``parts``, the Parquet files its worker processes wrote themselves (``Part``:
    each part's ``seq`` counted from 0, its first event's number ``seq_base``); ``rows`` in all."""

    rows: int
    raw: pathlib.Path
    parts: tuple[Part, ...] = ()


def stage(reader, path: pathlib.Path, on_batch=None) -> StagedFiles:
    """Stream every batch of ``reader`` into the Parquet file ``path`` (RAW_EVENTS); returns the staged files.

    A writer thread encodes Parquet (pyarrow releases the GIL) while the parser, which holds it, decodes
    the next block: the two overlap on two cores. At most two batches wait in between, so memory holds a
    few batches whatever the trace's size. A parser error stops the writer and propagates.

    A reader with a ``part_dir`` (the parallel Kineto reader) gets ``path``'s folder: its workers write their
    rows to Parquet parts there and it yields ``Part`` records for them, so the rows of a many-core parse
    never pass through this process.
    """
    import queue
    import threading

    import pyarrow.parquet as pq

    pending: queue.Queue = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def write() -> None:
        try:
            with pq.ParquetWriter(str(path), RAW_EVENTS, compression="lz4") as writer:
                while (batch := pending.get()) is not None:
                    writer.write_batch(batch)
        except BaseException as exc:  # reported to the parser's thread; keep draining so it never blocks
            failure.append(exc)
            while pending.get() is not None:
                pass

    if hasattr(reader, "part_dir"):
        reader.part_dir = pathlib.Path(path).parent
    writer = threading.Thread(target=write, name="kernelscope-stage", daemon=True)
    writer.start()
    rows = 0
    parts: list[Part] = []
    try:
        for batch in reader:
            if failure:
                break
            if isinstance(batch, Part):
                parts.append(batch)
                rows += batch.rows
                if on_batch is not None:
                    on_batch(rows)
                continue
            if batch.num_rows == 0:
                continue
            if batch.schema != RAW_EVENTS:
                batch = conform(batch)
            pending.put(batch)
            rows += batch.num_rows
            if on_batch is not None:
                on_batch(rows)
    finally:
        pending.put(None)
        writer.join()
    if failure:
        raise failure[0]
    return StagedFiles(rows, pathlib.Path(path), tuple(parts))


@contextmanager
def scratch(store):
    """A scratch folder next to the store (same disk, no /tmp quota), ``.<store name>.ingest-*``,
    removed afterwards, also on failure; DuckDB's TEMP views over its files are dropped too.

    We hold the store's write lock, so an older folder of that name was left by a killed ingest of
    this store: it is removed first.
    """
    import shutil
    import tempfile

    store_path = pathlib.Path(store.path).resolve()
    prefix = f".{store_path.name}.ingest-"
    for stale in store_path.parent.glob(prefix + "*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    try:
        folder = tempfile.mkdtemp(prefix=prefix, dir=store_path.parent)
    except OSError:
        folder = tempfile.mkdtemp(prefix="kernelscope-ingest-")
    try:
        yield pathlib.Path(folder)
    finally:
        drop_staging(store.con)
        shutil.rmtree(folder, ignore_errors=True)


def sql_path(path: pathlib.Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def conform(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Reorder/cast a batch to RAW_EVENTS (missing nullable columns become null)."""
    cols = []
    for f in RAW_EVENTS:
        idx = batch.schema.get_field_index(f.name)
        if idx < 0:
            if not f.nullable:
                raise ParseError(f"parser batch lacks the required column {f.name!r}")
            cols.append(pa.nulls(batch.num_rows, f.type))
        else:
            cols.append(batch.column(idx).cast(f.type))
    return pa.RecordBatch.from_arrays(cols, schema=RAW_EVENTS)


def drop_staging(con) -> None:
    for t in ("ks_raw", "ks_raw_in", "ks_open", "ks_links", "ks_launch"):
        try:
            con.execute(f"DROP VIEW IF EXISTS {t}")
        except Exception:
            pass


def raw_view(con, staged: StagedFiles) -> None:
    """TEMP VIEWs over the staged events (``stage``'s files): ``ks_raw_in`` as parsed (a worker's part with
    each ``seq`` moved on by its part's first number) and ``ks_raw``, which every derivation reads, with each
    negative duration read as 0 (``raw_facts`` counts them first): a kernel, call or operator cannot end before
    it starts, and a negative one made sums negative (kernel_time_ns = -154,399 ns) and broke the nesting of
    operators."""
    sql = f"SELECT * FROM read_parquet({sql_path(staged.raw)})"
    if staged.parts:  # seq + the first number of its part: a list indexed by part number (gaps hold 0)
        files = ", ".join(sql_path(pathlib.Path(p.path)) for p in staged.parts)
        bases = [0] * (max(p.number for p in staged.parts) + 1)
        for p in staged.parts:
            bases[p.number] = p.seq_base
        sql += (f" UNION ALL SELECT * EXCLUDE (part) REPLACE (seq + ({bases}::BIGINT[])[part + 1] AS seq) "
                f"FROM read_parquet([{files}])")
    con.execute(f"CREATE OR REPLACE TEMP VIEW ks_raw_in AS {sql}")
    con.execute("CREATE OR REPLACE TEMP VIEW ks_raw AS SELECT * REPLACE "
                "(CASE WHEN dur_ns < 0 THEN 0 ELSE dur_ns END AS dur_ns) FROM ks_raw_in")


@dataclass(frozen=True)
class Staged:
    """What the staged trace says before its rows are inserted: its time base, the links that cross (items not
    nested in the interval enclosing their start), the timed events without a timestamp, the telemetry clock
    offset (and why it is not set), its span, and ``facts`` (``rawfacts.raw_facts``, stored in ``traces``)."""

    base: int
    crossing: int
    untimed: int
    offset: int | None
    offset_note: str | None
    start_ns: int | None
    end_ns: int | None
    facts: dict


def derive_staged(con, folder, meta, source, facts: dict, clock=None) -> Staged:
    """Refuse repeated correlations, derive the links and the launch table (TEMP VIEWs ``ks_links``,
    ``ks_launch``, their rows in Parquet files in ``folder``) and read what the trace row needs. ``clock``: an
    ingest clock to lap (one file's KERNELSCOPE_TIMINGS)."""
    lap = clock.lap if clock is not None else (lambda _name: None)
    rawfacts.check_correlations(con, str(source))
    crossing = derive.derive_links(con, folder)
    lap("links")
    derive.build_launch_table(con, folder)
    lap("launch table")
    untimed = rawfacts.untimed_count(con)
    base = int(meta.base_time_ns or 0)
    offset, note = rawfacts.clock_offset(con, base)
    start_ns, end_ns = rawfacts.trace_span(con, base)
    lap("checks")
    return Staged(base, crossing, untimed, offset, note, start_ns, end_ns, facts)


def trace_warnings(meta, staged: Staged, in_run: bool = False) -> list[str]:
    """The warnings stored with a trace: the parser's, then crossing links, untimed events, the clock marker's
    note and the raw facts' sentences (``rawfacts.facts_warnings``). A rank of a run (``in_run``) says the
    crossing links without how they were followed and puts the clock note before the facts, as runs always
    have."""
    warnings = list(meta.warnings or [])
    if staged.crossing:
        warnings.append(
            f"{staged.crossing} operators/annotations/runtime calls are not nested in the interval that "
            "encloses their start on their thread (partial overlap)"
            + ("" if in_run else "; their links follow the count of intervals open at their start")
        )
    if staged.untimed:
        warnings.append(f"{staged.untimed} timed events had no timestamp; kept in other_events only")
    notes = [staged.offset_note] if staged.offset_note else []
    facts = rawfacts.facts_warnings(staged.facts, meta)
    warnings.extend(notes + facts if in_run else facts + notes)
    return warnings
