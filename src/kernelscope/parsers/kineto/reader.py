"""Streaming reader for PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip (``KinetoReader``).

How it reads (memory stays flat as the file grows):

1. The (decompressed) file is read in blocks of ``source.BLOCK_BYTES``; a sha256 of the decompressed bytes
   is updated as it goes (``TraceMeta.content_hash``: a ``.json`` and its ``.json.gz`` twin hash alike).
2. The *head* (everything before ``"traceEvents": [``) is decoded as a small JSON object (``toplevel``).
3. The event array is cut at the last ``}`` ``,`` ``{`` boundary of each buffer; the run of whole events
   before it is decoded with ONE typed msgspec decoder (``fields``: Structs holding only the fields we keep)
   and turned into one Arrow batch of ``RAW_EVENTS`` (``batch``). A cut that fell inside a string makes the
   decode fail; the run then goes through a slower tolerant path (cheap whole-run repairs, then event by
   event with repairs: ``repair``) and any trailing incomplete piece is carried into the next buffer.
4. At the end of the file the array's closing ``]`` is located and the *tail* keys (``baseTimeNanoseconds``,
   ``traceName``, ... in torch <= 2.6) are decoded; ``TraceMeta`` is complete after the last batch. With
   ``salvage=True`` a file cut inside the array keeps every complete event before the cut.

Times: ``ts``/``dur`` are microseconds written as decimal text; they are converted to integer ns from the
text itself (never via float64), rounding half away from zero past the third fractional digit. ``ts_ns`` is
relative to ``TraceMeta.base_time_ns`` exactly as the file writes it.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from kernelscope.errors import ParseError
from kernelscope.parsers import source
from kernelscope.parsers.kineto.batch import BatchBuilder
from kernelscope.parsers.kineto.fields import (
    DECODE_ERRORS,
    ONE_DEC,
    RUN_DEC,
    EventTyped,
)
from kernelscope.parsers.kineto.repair import (
    count_null_numbers,
    loose_event,
    repair_event,
    repair_run,
)
from kernelscope.parsers.kineto.toplevel import TopLevel, tail_ok
from kernelscope.parsers.schema import TraceMeta
from kernelscope.parsers.source import SALVAGE_HINT, Source
from kernelscope.units import BYTES_PER_MIB

#: How far into the file ``"traceEvents"`` must appear.
HEAD_LIMIT = 64 << 20
#: How many boundary pieces one event may span before the tolerant path gives up on it.
MAX_MERGE = 64
#: How far from the end of the file the closing ']' of traceEvents is looked for first (the keys after the array
#: are short; a longer tail falls to the slow path).
TAIL_SCAN_BYTES = 1 << 20
#: The largest one event (or the text after the last event) may be, in decompressed bytes: a trace whose
#: text runs past it without an event boundary is refused, so memory stays a small multiple of this cap
#: (plus BLOCK_BYTES) whatever the file holds (a 1 GiB name grew the reader to 8 GB before). Real events are
#: KBs (the largest seen: shapes of foreach ops, a few hundred KB). Env KERNELSCOPE_MAX_EVENT_MB overrides.
MAX_EVENT_BYTES = 16 << 20

_BOUNDARY_BACK = re.compile(rb"\}\s*,\s*\Z")
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_NAN_TIME = re.compile(rb'"(?:ts|dur)"\s*:\s*-?(?:NaN|Infinity|nan|inf)')


def max_event_bytes() -> int:
    """MAX_EVENT_BYTES, or ``$KERNELSCOPE_MAX_EVENT_MB`` MB when set to a positive number."""
    env = os.environ.get("KERNELSCOPE_MAX_EVENT_MB", "").strip()
    try:
        mb = float(env) if env else 0.0
    except ValueError:
        mb = 0.0
    return int(mb * BYTES_PER_MIB) if mb > 0 and math.isfinite(mb) else MAX_EVENT_BYTES


def more(src: Source, buf: bytes) -> tuple[bytes, bool]:
    """``buf`` with the source's next block appended, and whether the source has ended (no block came)."""
    block = src.read()
    return buf + block, not block


class KinetoReader:
    """Iterate a Kineto trace as ``RAW_EVENTS`` record batches; ``meta`` is complete after iteration.

    ``python_functions=False`` drops ``python_function`` events (counted in ``meta.warnings``).
    ``batch_rows`` caps the rows per yielded batch. ``salvage=True`` reads a file cut short (a job killed while
    writing it; a gzip stream cut mid-way is decompressed as far as it goes): every complete event before the
    cut is kept and ``meta.truncated`` says where the file ended and how many events were kept; a file cut
    before its first event is still refused.
    """

    def __init__(self, path: str | Path, *, python_functions: bool = True, batch_rows: int = 65536,
                 salvage: bool = False):
        self.path = Path(path)
        self.salvage = bool(salvage)
        self.python_functions = python_functions
        self.batch_rows = max(1, int(batch_rows))
        self.meta = TraceMeta(format="kineto")
        self._fixes: Counter = Counter()  # repairs of invalid JSON: what -> how many
        self._top = TopLevel(self.meta, self._fixes)
        self._batches = BatchBuilder(self.meta, python_functions=python_functions, batch_rows=self.batch_rows)
        self._started = False
        self._bare = False  # the file is a bare array of events (PyTorch 1.8's export), no top-level object

    # -- public

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._started:
            raise RuntimeError("a KinetoReader can be iterated once")
        self._started = True
        src = self._source()
        try:
            yield from self._read(src)
        except RecursionError:  # msgspec's depth guard: JSON nested past Python's recursion limit
            raise ParseError(
                f"JSON nested too deeply (over {sys.getrecursionlimit()} levels) near byte {src.offset}; "
                "no trace nests like this, re-export the trace"
            ) from None
        finally:
            src.close()

    def _source(self) -> Source:
        """The file's decompressed bytes (``parallel.ParallelKinetoReader`` hashes them in a thread)."""
        return Source(self.path, salvage=self.salvage)

    # -- the stream: head, event array, tail

    def _read(self, src: Source) -> Iterator[pa.RecordBatch]:
        buf = b""
        eof = False
        first_checked = False
        while True:
            if not eof:
                buf, eof = more(src, buf)
            if not first_checked:
                stripped = buf.lstrip()
                if stripped.startswith(b"\xef\xbb\xbf"):  # UTF-8 BOM
                    buf = stripped[3:]
                    stripped = buf.lstrip()
                if stripped:
                    first_checked = True
                    c = stripped[:1]
                    if c == b"[":  # a bare array of events (PyTorch 1.8, TensorBoard's own samples): no keys
                        self._bare = True
                        base = src.offset - len(stripped) + 1  # absolute offset just after the '['
                        yield from self._events(src, stripped[1:], base, eof)
                        self._finalise(src)
                        return
                    if c != b"{":
                        raise ParseError(
                            "not JSON: the file starts with neither '{' nor '[' (binary or another format); "
                            "give a torch.profiler .json or .json.gz trace"
                        )
                elif eof:
                    raise ParseError(
                        "the file is empty" + (" after decompression" if src.gz else "") + "; it holds no trace"
                    )
            m = self._top.find_trace_events(buf)
            if m is not None:
                head, after = m
                self._top.apply(head, "before traceEvents")
                buf = after
                break
            if eof:
                self._top.no_trace_events(buf)
            if len(buf) > HEAD_LIMIT:
                raise ParseError(
                    f"no \"traceEvents\" key in the first {HEAD_LIMIT >> 20} MB; this is not a torch.profiler trace"
                )
        # buf now starts just after "traceEvents": ; expect '['
        while not buf.lstrip() and not eof:
            block = src.read()
            eof = not block
            buf = buf.lstrip() + block  # whitespace is dropped as it comes: memory stays one block
        body = buf.lstrip()
        if not body.startswith(b"["):
            if not body:
                raise ParseError(
                    f"the file ends right after the traceEvents key at byte {src.offset} (truncated before its "
                    "first event: nothing to salvage); re-export the trace"
                )
            raise ParseError('"traceEvents" is not an array; this is not a torch.profiler trace')
        base = src.offset - len(buf) + (len(buf) - len(body)) + 1  # absolute offset of buf[0]
        yield from self._events(src, body[1:], base, eof)
        self._finalise(src)

    def _events(self, src: Source, buf: bytes, base: int, eof: bool) -> Iterator[pa.RecordBatch]:
        """The event array from ``buf`` (just after its '[', at absolute offset ``base``) to the end of the
        file, one block at a time (``parallel.ParallelKinetoReader`` overrides it)."""
        while True:
            if not eof:
                buf, eof = more(src, buf)
            self._check_cap(buf, base)
            if eof:
                yield from self._finish(buf, base, src)
                return
            step = yield from self._step(buf, base)
            if step is not None:
                buf, base = step

    def _check_cap(self, buf: bytes, base: int) -> None:
        """Refuse a buffer with no event end within the cap (``max_event_bytes``) before memory grows."""
        cap = max_event_bytes()
        if len(buf) > cap + source.BLOCK_BYTES:
            raise ParseError(
                f"event {self._batches.seq} at byte {base} runs past {cap / BYTES_PER_MIB:g} MB without ending "
                "(the limit for one event; set KERNELSCOPE_MAX_EVENT_MB to raise it); a trace event this large "
                "is damaged or not a trace"
            )

    def _step(self, buf: bytes, base: int) -> Iterator[pa.RecordBatch]:
        """Decode the whole events of ``buf`` (up to its last boundary) in this process; returns the new
        ``(buf, base)``: what follows them, with any piece the tolerant path could not finish yet carried in
        front; None when ``buf`` holds no boundary (one event longer than the buffer: read more)."""
        cut = self._last_boundary(buf)
        if cut is None:
            return None
        run, rest = buf[: cut + 1], buf[cut + 1 :]
        rest = rest[rest.index(b"{") :]
        consumed = yield from self._decode_run(run, base, final=False)
        leftover = run[consumed:]
        if leftover.strip():
            # carry: the tolerant path could not finish the last pieces yet
            sep = buf[len(run) : len(buf) - len(rest)]
            rest = leftover + sep + rest
        return rest, base + len(buf) - len(rest)

    def _last_boundary(self, buf: bytes) -> int | None:
        """Index of the '}' of the last ``} , {`` in buf, or None."""
        pos = len(buf)
        while True:
            pos = buf.rfind(b"{", 0, pos)
            if pos <= 0:
                return None
            if _BOUNDARY_BACK.search(buf, max(0, pos - 256), pos):
                j = buf.rfind(b"}", 0, pos)
                return j
            # fall through: this '{' was inside an event

    # -- events

    def _decode_run(self, run: bytes, base: int, *, final: bool) -> Iterator[pa.RecordBatch]:
        """Decode a run of whole events (text between '[' and ']' without them); yield batches.

        Returns how many bytes of ``run`` were consumed (the rest is carried when not final).
        """
        if not run.strip():
            return len(run)
        try:
            events = RUN_DEC.decode(b"[" + run + b"]")
        except DECODE_ERRORS:
            fixes: Counter = Counter()
            fixed = repair_run(run, fixes)
            events = None
            if fixed is not None:
                try:
                    events = RUN_DEC.decode(b"[" + fixed + b"]")
                    self._fixes.update(fixes)
                except DECODE_ERRORS:
                    events = None
            if events is None:
                return (yield from self._decode_pieces(run, base, final=final))
        count_null_numbers(run, self._batches.bad_numbers)
        yield from self._batches.emit(events)
        return len(run)

    def _decode_pieces(self, run: bytes, base: int, *, final: bool) -> Iterator[pa.RecordBatch]:
        starts = [0] + [m.end() - 1 for m in _BOUNDARY.finditer(run)]
        ends = [m.start() + 1 for m in _BOUNDARY.finditer(run)] + [len(run)]
        good: list[EventTyped] = []
        i = 0
        while i < len(starts):
            ev = None
            for j in range(i, min(len(starts), i + MAX_MERGE)):
                piece = run[starts[i] : ends[j]].strip()
                fixes: Counter = Counter()
                try:
                    ev = ONE_DEC.decode(piece)
                except DECODE_ERRORS:
                    try:
                        ev = ONE_DEC.decode(repair_event(piece, fixes))
                    except DECODE_ERRORS:
                        ev = loose_event(piece, fixes)
                if ev is not None:
                    self._fixes.update(fixes)
                    count_null_numbers(piece, self._batches.bad_numbers)
                    good.append(ev)
                    i = j + 1
                    break
            if ev is None:
                at = base + starts[i]
                piece = run[starts[i] : ends[min(len(ends) - 1, i)]]
                if not final and len(starts) - i < MAX_MERGE:
                    yield from self._batches.emit(good)
                    return starts[i]
                if _NAN_TIME.search(piece):
                    raise ParseError(
                        f"event {self._batches.seq + len(good)} at byte {at} has a NaN or Infinity time; "
                        "times must be numbers, re-export the trace"
                    )
                raise ParseError(
                    f"event {self._batches.seq + len(good)} at byte {at} is not valid JSON and could not be repaired; "
                    "re-export the trace"
                )
        yield from self._batches.emit(good)
        return len(run)

    def _finish(self, buf: bytes, base: int, src: Source) -> Iterator[pa.RecordBatch]:
        """At EOF: buf holds the last events, ']', the tail keys and the closing '}'."""
        # Fast path: the array's closing ']' is the last one whose right side is a valid tail ('}' or
        # ', "key": ...}') and whose left side decodes. Scan candidates from the end: the tail is short,
        # while the events before it hold thousands of ']' (shapes), so a forward scan is quadratic.
        # A key after the array may hold an array of objects itself (``"deviceProperties": [{..}, {..}]`` written
        # after traceEvents): its ']' also has a valid tail and a left side whose last piece is an object, so
        # the candidate whose left side decodes strictly wins; the tolerant check (repairs of the last pieces)
        # only decides for the last candidate when none does.
        k, candidates, chosen = len(buf), [], None
        while len(candidates) < 8 and len(buf) - k < TAIL_SCAN_BYTES:
            k = buf.rfind(b"]", 0, k)
            if k < 0:
                break
            right = buf[k + 1 :].strip()
            if self._bare:  # the array's ']' ends the file
                if right:
                    continue
                tail = b"{}"
            elif right == b"}":
                tail = b"{}"
            elif right.startswith(b",") and right.endswith(b"}") and tail_ok(b"{" + right[1:]):
                tail = b"{" + right[1:]
            else:
                continue
            left = buf[:k].rstrip()
            if left and not left.endswith(b"}"):
                continue
            if self._events_ok(left, tolerant=False):
                chosen = (left, tail)
                break
            candidates.append((left, tail))
        if chosen is None and candidates and self._events_ok(candidates[0][0]):
            chosen = candidates[0]
        if chosen is not None:  # else the slow path below finds the precise error
            left, tail = chosen
            yield from self._decode_run(left, base, final=True)
            self._top.apply(tail, "after traceEvents")
            return
        bad_events_at = None  # a ']' followed by a valid tail, but the events before it do not decode
        truncated_tail, salvage_left, salvage_right = False, b"", b""
        for k in _positions(buf, b"]"):
            left = buf[:k].rstrip()
            if left and not left.endswith(b"}"):
                continue
            right = buf[k + 1 :].strip()
            if self._bare:  # the fast path found no ']' ending the file after events that decode
                if not right and self._events_ok(left):
                    yield from self._decode_run(left, base, final=True)
                    return
                if not right:
                    bad_events_at = left
                continue
            if not right.endswith(b"}"):
                end = right.rfind(b"}")
                if end >= 0 and self._events_ok(left):
                    head = right[: end + 1]
                    if head == b"}" or (head.startswith(b",") and tail_ok(b"{" + head[1:])):
                        raise ParseError(
                            f"unexpected text after the end of the top-level JSON object (near byte "
                            f"{base + k + 1 + len(head)}); remove it or re-export the trace"
                        )
                if self._events_ok(left):
                    truncated_tail, salvage_left, salvage_right = True, left, right
                continue
            if right == b"}":
                tail = b"{}"
            elif right.startswith(b","):
                tail = b"{" + right[1:]
            else:
                continue
            if not self._events_ok(left):
                bad_events_at = left if tail_ok(tail) else bad_events_at
                continue
            yield from self._decode_run(left, base, final=True)
            self._top.apply(tail, "after traceEvents")
            return
        if bad_events_at is not None:  # raises the precise error for the bad event
            yield from self._decode_pieces(bad_events_at, base, final=True)
        if truncated_tail:
            if self.salvage:
                yield from self._decode_run(salvage_left, base, final=True)
                # the keys after the array, when only the closing brace is missing, are still read
                tail = b"{" + salvage_right[1:] + b"}" if salvage_right.startswith(b",") else b"{}"
                if tail_ok(tail):
                    self._top.apply(tail, "after traceEvents")
                self._mark_truncated(src, base + len(salvage_left), "ends in the keys after the event array")
                return
            raise ParseError(
                f"the file ends at byte {src.offset} before the closing brace of the top-level object "
                f"(truncated); {SALVAGE_HINT}, or re-export the trace"
            )
        if self.salvage:
            yield from self._salvage(buf, base, src)
            return
        m = _NAN_TIME.search(buf)
        if m:
            raise ParseError(
                f"an event near byte {base + m.start()} has a NaN or Infinity time; times must be numbers, "
                "re-export the trace"
            )
        raise ParseError(
            f"the file ends inside the traceEvents array at byte {src.offset} (truncated: the job was probably "
            f"killed while writing it); {SALVAGE_HINT}, or re-export the trace"
        )

    def _salvage(self, buf: bytes, base: int, src: Source) -> Iterator[pa.RecordBatch]:
        """At EOF inside the event array (``salvage``): decode the complete events of ``buf`` and drop the
        piece the cut left (an event's first part); an event before it that does not decode is still an error."""
        text = buf.rstrip()
        if text.endswith(b","):
            text = text[:-1].rstrip()
        consumed = yield from self._decode_run(text, base, final=False)
        if self.meta.events == 0:
            raise ParseError(
                f"the file ends at byte {src.offset} inside its first event (truncated before any complete "
                "event: nothing to salvage); re-export the trace"
            )
        kept = text[:consumed].rstrip()
        if kept.endswith(b","):
            kept = kept[:-1].rstrip()
        self._mark_truncated(src, base + len(kept), "ends inside the event array")

    def _mark_truncated(self, src: Source, at_byte: int, where: str) -> None:
        reason = src.cut + f"; the text {where}" if src.cut else f"the text {where}"
        self.meta.truncated = {
            "at_byte": int(at_byte), "read_bytes": int(src.offset), "events_kept": int(self.meta.events),
            "gzip": bool(src.gz), "reason": reason,
            "base_time_lost": "baseTimeNanoseconds" not in self._top.seen,
        }

    def _events_ok(self, left: bytes, tolerant: bool = True) -> bool:
        """Whether ``[left]`` decodes (perhaps after repairs): then the ']' candidate closes the array.
        ``tolerant``: also when only its last pieces decode (the rest is checked when decoded for real)."""
        if not left:
            return True
        try:
            RUN_DEC.decode(b"[" + left + b"]")
            return True
        except DECODE_ERRORS:
            pass
        fixed = repair_run(left, Counter())
        if fixed is not None:
            try:
                RUN_DEC.decode(b"[" + fixed + b"]")
                return True
            except DECODE_ERRORS:
                pass
        if not tolerant:
            return False
        # tolerant: some suffix of whole pieces must decode as one (repaired) event, and the rest
        # is checked when it is decoded for real
        starts = [0] + [m.end() - 1 for m in _BOUNDARY.finditer(left)]
        for s in reversed(starts[-MAX_MERGE:]):
            try:
                ONE_DEC.decode(repair_event(left[s:].strip(), Counter()))
                return True
            except DECODE_ERRORS:
                if loose_event(left[s:].strip(), Counter()) is not None:
                    return True
                continue
        return False

    def _finalise(self, src: Source) -> None:
        meta = self.meta
        meta.content_hash = src.sha.hexdigest()
        w = meta.warnings
        for what, count in sorted(self._fixes.items()):
            if count:
                w.append(f"repaired invalid JSON: {count} {what}")
        for key, count in sorted(self._batches.bad_numbers.items()):
            w.append(f"{count} non-numeric values (inf, N/A, null, empty) in {key!r} read as null")
        if self._batches.missing_dur:
            w.append(f"{self._batches.missing_dur} complete ('X') events without dur read as dur 0")
        if self._batches.skipped_python:
            w.append(f"skipped {self._batches.skipped_python} python_function events (python_functions=False)")
        if src.cut and not meta.truncated:  # --salvage: the JSON text is whole, only the gzip end is missing
            w.append(f"{src.cut}; the JSON text before it is complete (read with --salvage)")




def _positions(buf: bytes, ch: bytes) -> Iterator[int]:
    i = buf.find(ch)
    while i >= 0:
        yield i
        i = buf.find(ch, i + 1)



def read_kineto(path: str | Path, **opts: Any) -> KinetoReader:
    """A reader for one Kineto trace; iterate it for batches, then read ``.meta``."""
    return KinetoReader(path, **opts)
