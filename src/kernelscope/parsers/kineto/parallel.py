"""One Kineto trace decoded on every core: ``ParallelKinetoReader`` (``KinetoReader`` with worker processes).

The parent reads the file as ``KinetoReader`` does (its head, the sha256 of the decompressed bytes, gzip
decompressed as a stream, the tail, salvage) and cuts the event array where it does (the last event boundary
of each block, so its buffers, limits and end are the same), but gathers the runs of whole events into chunks
of about ``CHUNK_BYTES`` and hands each chunk to a pool of spawned worker processes (the parent holds DuckDB
threads: never fork it). A worker decodes its chunk with the reader's own typed decoder and
``BatchBuilder`` -- a plain file's chunk it reads itself (``os.pread`` of its byte range), a gzip file's chunk
comes as the parent decompressed it. With a ``part_dir`` (ingest: storage/staging.stage gives the scratch
folder) the worker writes its rows to a Parquet part there itself and the parent yields a ``Part`` (path, rows,
the ``seq`` its first row takes), so no row passes through the parent: on 16 cores a 1 GiB trace's parse and
stage took 3.6 s instead of 6.3 s when every batch came back to be renumbered and written by the parent
(benchmarks/results/ingest-2026-11-28-parts-16core-h100.md). Without one it sends its ``RAW_EVENTS`` batches
back as one Arrow IPC stream, and the parent yields them with ``seq`` renumbered. Either way, in file order,
with the counts added up, every row, id and warning is what the one-process reader gives. At most
``workers + 2`` chunks are in flight, so memory stays flat in the file's size.

Anything off the fast path is the one-process reader's: a chunk whose decode fails in the worker (invalid
JSON to repair, a boundary cut inside a string, a bad time) is decoded again in the parent with
``KinetoReader._decode_run`` at its true byte offset and event number (so repairs, carries and error messages
are the same), and the end of the file (the text after the last boundary, the tail, a truncated file's
salvage) is ``KinetoReader._finish``. While the workers start (~1 s: a Python with pyarrow), the parent decodes on in
process; files estimated under ``MIN_BYTES`` never start a pool. The pool itself is parsers/pool.py's (the ingest
command starts it early, beside its imports and the store's migrations).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from kernelscope.parsers import source
from kernelscope.parsers.kineto.batch import BatchBuilder
from kernelscope.parsers.kineto.fields import RUN_DEC
from kernelscope.parsers.kineto.reader import KinetoReader, max_event_bytes, more
from kernelscope.parsers.kineto.repair import count_null_numbers
from kernelscope.parsers.pool import (
    ENV_WORKERS,
    MIN_BYTES,
    estimated_bytes,
    parse_workers,
    shared,
    shared_pool,
    start_pool,
    stop_fork_server,
    take,
)
from kernelscope.parsers.schema import PART_EVENTS, RAW_EVENTS, Part, TraceMeta
from kernelscope.parsers.source import Source

#: Decompressed bytes per chunk handed to a worker (cut at the last event boundary past it). A worker holds
#: ~10x its chunk while decoding it (Python objects of every event); per-chunk costs are ~1 ms.
CHUNK_BYTES = 4 << 20
#: Whether the parent decodes in process while the pool starts (False: it waits for the pool; tests).
DECODE_WHILE_STARTING = True
_SEQ = RAW_EVENTS.get_field_index("seq")


@dataclass
class _Chunk:
    """A chunk in flight: its worker's future, its byte range, its bytes when they are not the file's own
    (gzip), and the separator text after it (for a carry)."""

    future: Future
    base: int
    length: int
    data: bytes | None
    sep: bytes


class _Gather:
    """The runs of whole events gathered into the next chunk: where it starts, how long it is, the separator
    after its last run and, for a gzip file, its text (a plain file's chunk is read by the worker)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.base, self.length, self.sep = 0, 0, b""
        self.texts: list[bytes] = []

    def add(self, base: int, buf: bytes, run_end: int, sep_end: int, keep_text: bool) -> None:
        if not self.length:
            self.base = base
        elif keep_text:
            self.texts.append(self.sep)
        if keep_text:
            self.texts.append(buf[:run_end])
        self.length = base + run_end - self.base
        self.sep = buf[run_end:sep_end]


class ParallelKinetoReader(KinetoReader):
    """``KinetoReader`` whose event array is decoded by ``workers`` processes (rows identical, in file order).
    With ``workers <= 1``, or a file estimated under ``MIN_BYTES``, it is the one-process reader."""

    def __init__(self, path: str | Path, *, workers: int, chunk_bytes: int | None = None,
                 part_dir: str | Path | None = None, **opts):
        super().__init__(path, **opts)
        self.workers = max(1, int(workers))
        self.chunk_bytes = max(1, int(chunk_bytes or CHUNK_BYTES))
        #: Where workers write their chunks' rows as Parquet parts (``Part`` items are yielded in their place);
        #: None: workers send their batches back (Arrow IPC) and the reader yields only batches.
        self.part_dir = Path(part_dir) if part_dir is not None else None
        self._submitted = 0  # chunks handed to workers (numbers their parts)
        self._pool: ProcessPoolExecutor | None = None
        self._carry: tuple[bytes, int, bytes] | None = None  # (text, its offset, the separator after it)
        self._warming: list[Future] = []
        self._hasher: _HashThread | None = None
        self.chunks = 0  # chunks decoded by workers (reported by the benchmark)
        self.fallbacks = 0  # chunks the parent decoded again itself

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        own = False
        if self.workers > 1 and estimated_bytes(self.path) >= MIN_BYTES:
            self._pool = shared(self.workers)
            own = self._pool is None
            try:
                if own:  # the pool the ingest command started beside its imports, else a new one
                    self._pool = take(self.workers) or start_pool(self.workers)
            except OSError:  # no processes to be had (limits): read in process
                self._pool = None
        try:
            yield from super().__iter__()
        finally:
            if self._hasher is not None:
                self._hasher.close()
            if own and self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                stop_fork_server()
            self._pool = None

    def _source(self) -> Source:
        src = super()._source()
        if self._pool is not None:  # the sha256 of the bytes runs beside the parent's reading (it frees the GIL)
            src.sha = self._hasher = _HashThread(src.sha)
            src.read_ahead()  # and a gzip stream decompresses ahead of it, in a thread of its own
        return src

    def _events(self, src: Source, buf: bytes, base: int, eof: bool) -> Iterator[pa.RecordBatch]:
        pool = self._pool
        if pool is None:
            yield from super()._events(src, buf, base, eof)
            return
        warming = self._warming = [pool.submit(_ready) for _ in range(self.workers)]
        if not DECODE_WHILE_STARTING:
            for f in warming:
                f.exception()
        pending: deque[_Chunk] = deque()
        acc = _Gather()
        plain = not src.gz
        while True:
            if not eof:
                buf, eof = more(src, buf)
            if warming and not self._pool_started(warming):  # the pool is starting: decode in process
                state = yield from self._block_in_process(src, buf, base, eof)
                if state is None:
                    return
                buf, base = state
                continue
            if warming:
                warming = []
                if not self._pool_works():  # this block as the reader would, then the reader's loop
                    state = yield from self._block_in_process(src, buf, base, eof)
                    if state is not None:
                        yield from super()._events(src, *state, eof)
                    return
            if len(buf) > max_event_bytes() + source.BLOCK_BYTES:  # refused where the reader refuses it
                self._flush(acc, pending)
                yield from self._drain(pending, 0)
                buf, base = self._take_carry(buf, base)
                self._check_cap(buf, base)
            if eof:  # the reader's end: the text after the last boundary, then _finish
                self._flush(acc, pending)
                yield from self._drain(pending, 0)
                buf, base = self._take_carry(buf, base)
                self._check_cap(buf, base)
                yield from self._finish(buf, base, src)
                return
            # KinetoReader._step, the run added to the chunk being gathered instead of decoded here
            cut = self._last_boundary(buf)
            if cut is None:
                continue
            run_end = cut + 1
            rest = buf[run_end:]
            rest = rest[rest.index(b"{") :]
            sep_end = len(buf) - len(rest)
            acc.add(base, buf, run_end, sep_end, keep_text=not plain)
            base += sep_end
            buf = rest
            if acc.length >= self.chunk_bytes:
                self._flush(acc, pending)
            yield from self._drain(pending, self.workers + 2)

    def _block_in_process(self, src: Source, buf: bytes, base: int, eof: bool) -> Iterator[pa.RecordBatch]:
        """The one-process reader's loop body for the block just read: returns the new ``(buf, base)``, or None
        when the file is done."""
        self._check_cap(buf, base)
        if eof:
            yield from self._finish(buf, base, src)
            return None
        step = yield from self._step(buf, base)
        return (buf, base) if step is None else step

    def _flush(self, acc: _Gather, pending: deque[_Chunk]) -> None:
        """Hand the gathered chunk to a worker (nothing when empty)."""
        if acc.length:
            data = b"".join(acc.texts) if acc.texts else None
            out = None
            if self.part_dir is not None:
                out = str(self.part_dir / f"part-{self._submitted:06d}.parquet")
            job = (str(self.path), acc.base, acc.length, data, self._submitted, out)
            self._submitted += 1
            fut = self._pool.submit(_decode_chunk, job, self.python_functions, self.batch_rows)
            pending.append(_Chunk(fut, acc.base, acc.length, data, acc.sep))
            acc.reset()

    def _pool_started(self, warming: list[Future]) -> bool:
        """Whether every worker answered its first call (until then the parent decodes in process)."""
        return all(f.done() for f in warming)

    def _take_carry(self, buf: bytes, base: int) -> tuple[bytes, int]:
        """``(buf, base)`` with the piece a chunk's tolerant decode carried put back in front."""
        if self._carry is None:
            return buf, base
        text, at, sep = self._carry
        self._carry = None
        return text + sep + buf, at

    def _pool_works(self) -> bool:
        """Whether the started pool answered (a script without a ``__main__`` guard breaks spawned workers);
        when not, it is shut down and the file is read in process."""
        ok = all(not f.cancelled() and f.exception() is None for f in self._warming)
        if not ok and self._pool is not None:
            if self._pool is not shared(self.workers):
                self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        return ok

    def _drain(self, pending: deque[_Chunk], keep: int) -> Iterator[pa.RecordBatch]:
        """Yield the batches of the chunks in flight, oldest first, until at most ``keep`` remain (and on while
        the oldest is already done)."""
        while pending and (len(pending) > keep or pending[0].future.done()):
            yield from self._collect(pending.popleft())

    def _collect(self, chunk: _Chunk) -> Iterator[pa.RecordBatch]:
        """One chunk's batches, in order: the worker's, renumbered; or, off the fast path, the parent's own
        decode (``_decode_run``) of the chunk, with a carried piece in front when the chunk before left one."""
        if self._carry is None:
            result = _result(chunk.future)
            if result is not None:
                self.chunks += 1
                yield from self._apply(result)
                return
            text, at = self._chunk_bytes(chunk), chunk.base
        else:
            chunk.future.cancel()
            carried, at, sep = self._carry
            self._carry = None
            text = carried + sep + self._chunk_bytes(chunk)
        self.fallbacks += 1
        consumed = yield from self._decode_run(text, at, final=False)
        leftover = text[consumed:]
        if leftover.strip():
            self._carry = (leftover, at + consumed, chunk.sep)

    def _chunk_bytes(self, chunk: _Chunk) -> bytes:
        if chunk.data is not None:
            return chunk.data
        return _pread(str(self.path), chunk.base, chunk.length)

    def _apply(self, result: tuple) -> Iterator[pa.RecordBatch | Part]:
        """A worker's result into this reader: its batches with ``seq`` continued from the rows before (or its
        Parquet part, as a ``Part`` numbered from there), its counts added to the reader's."""
        out, rows, bad_numbers, missing_dur, skipped_python, dropped_notes = result
        b = self._batches
        b.bad_numbers.update(bad_numbers)
        b.missing_dur += missing_dur
        b.skipped_python += skipped_python
        self.meta.dropped_notes.extend(dropped_notes)
        if not rows:
            return
        if isinstance(out, tuple):  # (path, number) of the part the worker wrote
            path, number = out
            yield Part(path, number, rows, b.seq)
            b.seq += rows
            self.meta.events += rows
            return
        for batch in pa.ipc.open_stream(out):
            n = batch.num_rows
            seq = pa.array(np.arange(b.seq, b.seq + n, dtype=np.int64))
            b.seq += n
            self.meta.events += n
            yield batch.set_column(_SEQ, RAW_EVENTS.field(_SEQ), seq)


class _HashThread:
    """A hashlib object updated by a thread, in order (``update`` queues the block, at most a few wait);
    ``hexdigest`` waits for the last one."""

    def __init__(self, sha):
        import queue
        import threading

        self._sha = sha
        self._queue: queue.Queue = queue.Queue(maxsize=4)
        self._thread = threading.Thread(target=self._run, name="kernelscope-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (block := self._queue.get()) is not None:
            self._sha.update(block)

    def update(self, block: bytes) -> None:
        self._queue.put(block)

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def hexdigest(self) -> str:
        self.close()
        return self._sha.hexdigest()


def _ready() -> bool:
    return True


def _result(future: Future) -> tuple | None:
    """A worker's result, or None when it could not decode its chunk (or the pool broke): the parent does."""
    try:
        return future.result()
    except Exception:
        return None


def _pread(path: str, offset: int, length: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        out = os.pread(fd, length, offset)
        while len(out) < length:  # pread may return less than asked
            more = os.pread(fd, length - len(out), offset + len(out))
            if not more:
                break
            out += more
        return out
    finally:
        os.close(fd)


def _decode_chunk(job: tuple, python_functions: bool, batch_rows: int) -> tuple | None:
    """In a worker: decode one chunk of whole events (the fast path of ``KinetoReader._decode_run``) into
    ``RAW_EVENTS`` batches numbered from 0; returns (out, rows, bad_numbers, missing_dur, skipped_python,
    dropped_notes), or None when the chunk needs the parent's tolerant path. ``out`` is the batches as an Arrow
    IPC stream or, when the job names a part file, ``(path, number)`` of the Parquet part written there
    (``PART_EVENTS``, LZ4 as the parent stages; removed again when the chunk fails)."""
    path, offset, length, data, number, part = job
    if data is None:
        data = _pread(path, offset, length)
        if len(data) != length:
            return None
    meta = TraceMeta(format="kineto")
    builder = BatchBuilder(meta, python_functions=python_functions, batch_rows=batch_rows)
    try:
        events = RUN_DEC.decode(b"[" + data + b"]")
        count_null_numbers(data, builder.bad_numbers)
        if part is None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, RAW_EVENTS) as writer:
                for batch in builder.emit(events):
                    writer.write_batch(batch)
            out = sink.getvalue()
        else:
            _write_part(part, number, builder.emit(events))
            out = (part, number)
    except Exception:  # the parent decodes it again and says precisely what is wrong
        if part is not None:
            try:
                os.unlink(part)
            except OSError:
                pass
        return None
    return (out, meta.events, dict(builder.bad_numbers), builder.missing_dur, builder.skipped_python,
            meta.dropped_notes)


def _write_part(path: str, number: int, batches: Iterator[pa.RecordBatch]) -> None:
    """A worker's rows as one Parquet file of ``PART_EVENTS`` (``part`` = ``number`` on every row)."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(path, PART_EVENTS, compression="lz4") as writer:
        for batch in batches:
            col = pa.array(np.full(batch.num_rows, number, dtype=np.int32))
            writer.write_batch(pa.RecordBatch.from_arrays([*batch.columns, col], schema=PART_EVENTS))


__all__ = ["CHUNK_BYTES", "ENV_WORKERS", "MIN_BYTES", "ParallelKinetoReader", "estimated_bytes", "parse_workers",
           "shared_pool"]
