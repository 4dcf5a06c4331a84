"""Streaming reader for PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip.

How it reads (memory stays flat as the file grows):

1. The (decompressed) file is read in blocks of ``BLOCK_BYTES``; a sha256 of the decompressed bytes is
   updated as it goes (``TraceMeta.content_hash``: a ``.json`` and its ``.json.gz`` twin hash alike).
2. The *head* (everything before ``"traceEvents": [``) is decoded as a small JSON object.
3. The event array is cut at the last ``}`` ``,`` ``{`` boundary of each buffer; the run of whole events
   before it is decoded with ONE typed msgspec decoder (Structs holding only the fields we keep) and turned
   into one Arrow batch of ``RAW_EVENTS``. A cut that fell inside a string makes the decode fail; the run then
   goes through a slower tolerant path (cheap whole-run repairs, then event by event with repairs) and any
   trailing incomplete piece is carried into the next buffer.
4. At the end of the file the array's closing ``]`` is located and the *tail* keys (``baseTimeNanoseconds``,
   ``traceName``, ... in torch <= 2.6) are decoded; ``TraceMeta`` is complete after the last batch.

Times: ``ts``/``dur`` are microseconds written as decimal text; they are converted to integer ns from the
text itself (never via float64), rounding half away from zero past the third fractional digit. ``ts_ns`` is
relative to ``TraceMeta.base_time_ns`` exactly as the file writes it.
"""

from __future__ import annotations

import gc
import gzip
import hashlib
import math
import re
import sys
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kernelscope.errors import ParseError
from kernelscope.parsers.schema import RAW_EVENTS, TraceMeta
from kernelscope.units import us_text_to_ns

#: Decompressed bytes read per block.
BLOCK_BYTES = 4 << 20
#: How far into the file ``"traceEvents"`` must appear.
HEAD_LIMIT = 64 << 20
#: How many boundary pieces one event may span before the tolerant path gives up on it.
MAX_MERGE = 64
#: The largest one event (or the text after the last event) may be, in decompressed bytes: a trace whose
#: text runs past it without an event boundary is refused, so memory stays a small multiple of this cap
#: (plus BLOCK_BYTES) whatever the file holds (a 1 GiB name grew the reader to 8 GB before). Real events are
#: KBs (the largest seen: shapes of foreach ops, a few hundred KB). Env KERNELSCOPE_MAX_EVENT_MB overrides.
MAX_EVENT_BYTES = 16 << 20

_Raw = msgspec.Raw


def _f(name: str) -> Any:
    return msgspec.field(default=None, name=name)


def _raw(name: str) -> Any:
    return msgspec.field(default=_Raw(), name=name)


class _Args(msgspec.Struct, gc=False):
    """The ``args`` keys we keep. Numeric ones are ``Any`` so that "inf"/"N/A" never break a decode."""

    correlation: Any = None
    external_id: Any = _f("External id")
    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = _f("registers per thread")
    shared_memory: Any = _f("shared memory")
    blocks_per_sm: Any = _f("blocks per SM")
    warps_per_sm: Any = _f("warps per SM")
    occupancy: Any = _f("est. achieved occupancy %")
    nbytes: Any = _f("bytes")
    seq_number: Any = _f("Sequence number")
    fwd_thread_id: Any = _f("Fwd thread id")
    ev_idx: Any = _f("Ev Idx")
    ev_idx_old: Any = _f("Profiler Event Index")
    input_dims: _Raw = _raw("Input Dims")
    input_types: _Raw = _raw("Input type")
    input_strides: _Raw = _raw("Input Strides")
    concrete_inputs: _Raw = _raw("Concrete Inputs")
    name: Any = None  # meta events
    labels: Any = None  # process_labels meta events
    sort_index: Any = None
    # Collectives (record_param_comms, NCCL kernels).
    coll_name: Any = _f("Collective name")
    in_nelems: Any = _f("In msg nelems")
    out_nelems: Any = _f("Out msg nelems")
    group_size: Any = _f("Group size")
    dtype: Any = None
    pg_name: Any = _f("Process Group Name")
    pg_desc: Any = _f("Process Group Description")
    pg_ranks: Any = _f("Process Group Ranks")
    in_split: Any = _f("In split size")
    out_split: Any = _f("Out split size")
    rank: Any = _f("Rank")


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: _Raw = _Raw()
    dur: _Raw = _Raw()
    id: Any = None
    args: Any = None  # _Args | None, see _ARGS_DEC


class _EventTyped(_Event, gc=False):
    args: _Args | None = None


_RUN_DEC = msgspec.json.Decoder(list[_EventTyped])
_ONE_DEC = msgspec.json.Decoder(_EventTyped)
_LOOSE_DEC = msgspec.json.Decoder(_Event)  # args: Any
_ANY_DEC = msgspec.json.Decoder()
_NO_ARGS = _Args()
#: µs with 3 fractional digits; its unscaled value (< 10^18) is the time in ns and fits int64.
_DEC_US = pa.decimal128(18, 3)
_ARGS_FIELDS = _Args.__struct_fields__
_astuple = msgspec.structs.astuple
_DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)

_COLLECTIVE_KEYS = (
    ("coll_name", "Collective name"),
    ("in_nelems", "In msg nelems"),
    ("out_nelems", "Out msg nelems"),
    ("group_size", "Group size"),
    ("dtype", "dtype"),
    ("pg_name", "Process Group Name"),
    ("pg_desc", "Process Group Description"),
    ("pg_ranks", "Process Group Ranks"),
    ("in_split", "In split size"),
    ("out_split", "Out split size"),
    ("rank", "Rank"),
)

#: Kineto ``cat`` -> ``kind`` (schema.py's table); pre-1.12 names included.
CAT_KIND = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "python_function": "python",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_sync": "sync",
    "cpu_instant_event": "instant",
}
GPU_KINDS = frozenset({"kernel", "memcpy", "memset", "gpu_annotation", "sync"})
_GPU_KINDS_ARR = pa.array(sorted(GPU_KINDS))
_NOTE_KINDS_ARR = pa.array(["instant", "other", "meta"])
_PH_KIND = {"M": "meta", "s": "flow", "f": "flow", "t": "flow", "i": "instant", "I": "instant"}

_BOUNDARY_BACK = re.compile(rb"\}\s*,\s*\Z")
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*')
_BAD_ESCAPE = re.compile(rb'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})?')
_COMMA_DECIMAL = re.compile(rb"(:\s*-?\d+),(\d+)(?=\s*[,}\]])")
_NAN_VALUE = re.compile(rb'("(?!ts"|dur")[^"\\]{1,60}"\s*:\s*)[-+]?(?:NaN|Infinity)(?=\s*[,}\]])')
_NAN_TIME = re.compile(rb'"(?:ts|dur)"\s*:\s*-?(?:NaN|Infinity|nan|inf)')
_NULL_KEY = re.compile(rb'"([^"\\]{1,40})"\s*:\s*null')
_DROPPED = re.compile(rb"drop|lost|overflow", re.I)
_DROPPED_TEXT = re.compile(r"(dropp?ed|lost)\b.*\b(record|event|activit)|(record|event|activit)\w*\s+(were\s+)?(dropp?ed|lost)|overflow", re.I)

_NUMERIC_ARG_KEYS = {
    b"correlation", b"External id", b"device", b"stream", b"registers per thread", b"shared memory",
    b"blocks per SM", b"warps per SM", b"est. achieved occupancy %", b"bytes", b"Sequence number",
    b"Fwd thread id", b"Ev Idx", b"Profiler Event Index",
}  # fmt: skip
_BAD_NUMBER_TEXT = {"", "inf", "-inf", "+inf", "infinity", "-infinity", "nan", "n/a", "na", "none", "null"}


# --------------------------------------------------------------------------------------------- reading


def max_event_bytes() -> int:
    """MAX_EVENT_BYTES, or ``$KERNELSCOPE_MAX_EVENT_MB`` MB when set to a positive number."""
    import os

    env = os.environ.get("KERNELSCOPE_MAX_EVENT_MB", "").strip()
    try:
        mb = float(env) if env else 0.0
    except ValueError:
        mb = 0.0
    return int(mb * (1 << 20)) if mb > 0 and math.isfinite(mb) else MAX_EVENT_BYTES


def check_regular_file(path: Path) -> None:
    """ParseError unless ``path`` is a regular file (or a link to one): a FIFO would block ``open`` forever,
    a device (/dev/zero) never ends, a symlink loop cannot be opened."""
    import errno
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ParseError("a symlink loop (too many levels of symbolic links); point it at a trace file") from None
        raise ParseError(f"cannot open the file ({exc.strerror}); check the path and permissions") from None
    if stat.S_ISDIR(mode):
        raise ParseError("this is a directory, not a trace file")
    if not stat.S_ISREG(mode):
        what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise ParseError(f"{what}, not a regular file; give a trace file (copy the data into a file first)")


class _Source:
    """Decompressed byte blocks of a file (gzip detected by magic bytes), hashing as it reads.

    ``salvage``: a gzip stream that ends before its end marker, or whose data turns corrupt, gives the bytes
    that decompress before that point and then ends, with ``cut`` saying why (else None), instead of an error.
    """

    def __init__(self, path: Path, salvage: bool = False):
        self.path = path
        self.sha = hashlib.sha256()
        self.offset = 0  # decompressed bytes handed out so far
        self.cut: str | None = None
        check_regular_file(path)
        try:
            raw = open(path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise ParseError(f"cannot open the file ({exc.strerror}); check the path and permissions") from None
        magic = raw.read(2)
        raw.seek(0)
        self.gz = magic == b"\x1f\x8b"
        self._raw = raw
        if self.gz and salvage:
            self._f = _GzipSalvage(raw, self)
        else:
            self._f = gzip.GzipFile(fileobj=raw, mode="rb") if self.gz else raw
        if not magic:
            self.close()
            raise ParseError("the file is empty (0 bytes); it holds no trace")

    def read(self, n: int = BLOCK_BYTES) -> bytes:
        try:
            block = self._f.read(n)
        except EOFError:
            raise ParseError("the gzip stream is truncated (it ends before its end marker: cut while being written "
                             f"or copied); {SALVAGE_HINT}, or copy the file again") from None
        except gzip.BadGzipFile as exc:
            raise ParseError(f"the gzip file is damaged ({exc}); copy the file again") from None
        except zlib.error as exc:
            raise ParseError(f"the gzip data is corrupt ({exc}); copy the file again") from None
        except OSError as exc:
            raise ParseError(f"cannot read the file ({exc}); check the file") from None
        self.sha.update(block)
        self.offset += len(block)
        return block

    def close(self) -> None:
        try:
            if self._f is not self._raw:
                self._f.close()
        finally:
            self._raw.close()


#: What a refusal of a cut file suggests (``kernelscope ingest --salvage``).
SALVAGE_HINT = "`kernelscope ingest --salvage` keeps every complete event before the cut"


class _GzipSalvage:
    """A gzip stream (one or more members) decompressed with zlib, handing out what decompresses up to a cut
    (the stream ends before a member's end marker) or a damaged block, then ending; ``src.cut`` says which.
    Reads at most 1 MB of compressed input and ``n`` bytes of output at a time."""

    def __init__(self, raw, src: _Source):
        self._raw = raw
        self._src = src
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._in = b""
        self._fed = 0  # compressed bytes given to the decompressors
        self._member_done = False  # the last member ended cleanly and no byte of another was read yet
        self._done = False

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n and not self._done:
            if not self._in:
                self._in = self._raw.read(1 << 20)
                if not self._in:
                    if not self._member_done:
                        self._src.cut = (f"the gzip stream ends at compressed byte {self._fed:,} before its end "
                                         "marker")
                    self._done = True
                    break
            if self._member_done and not self._in.strip(b"\x00"):  # zero padding after the last member
                self._in = b""
                continue
            data = self._in
            try:
                chunk = self._d.decompress(data, n - len(out))
            except zlib.error as exc:
                self._src.cut = f"the gzip data is damaged near compressed byte {self._fed:,} ({exc})"
                self._done = True
                break
            out += chunk
            if self._d.eof:
                rest = self._d.unused_data
                self._fed += len(data) - len(rest)
                self._in = rest
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._member_done = True
            else:
                rest = self._d.unconsumed_tail
                self._fed += len(data) - len(rest)
                self._in = rest
                if data:
                    self._member_done = False
        return bytes(out)

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------- repairs


def _repair_run(run: bytes, fixes: Counter) -> bytes | None:
    """Cheap whole-run repairs: invalid UTF-8, invalid backslash escapes, comma decimals. None: no change."""
    out = run
    try:
        out.decode("utf-8")
    except UnicodeDecodeError:
        text = out.decode("utf-8", "replace")
        fixes["invalid UTF-8 byte sequences replaced by U+FFFD"] += text.count("\ufffd") - run.decode(
            "utf-8", "ignore"
        ).count("\ufffd")
        out = text.encode("utf-8")
    n = 0

    def esc(m: re.Match) -> bytes:
        nonlocal n
        if m.group(1) is None:
            n += 1
            return b"\\\\"
        return m.group(0)

    if b"\\" in out:
        out = _BAD_ESCAPE.sub(esc, out)
        if n:
            fixes["invalid backslash escapes (e.g. Windows paths) doubled"] += n
    out, k = _COMMA_DECIMAL.subn(rb"\1.\2", out)
    if k:
        fixes["comma decimal separators read as points"] += k
    out = _null_nan_values(out, fixes)
    return None if out == run else out


def _null_nan_values(text: bytes, fixes: Counter) -> bytes:
    """Bare NaN/Infinity tokens (not JSON; Python's json.dumps writes them) as the value of a key other
    than ts/dur -> null, counted. A time that is NaN stays an error (``_NAN_TIME``)."""
    if b"NaN" not in text and b"Infinity" not in text:
        return text
    out, k = _NAN_VALUE.subn(rb"\1null", text)
    if k:
        fixes["NaN/Infinity values (not JSON) of non-time keys read as null"] += k
    return out


_VALID_AFTER_COMMA = frozenset(b'"{[-0123456789tfn')


def _repair_event(text: bytes, fixes: Counter) -> bytes:
    """Thorough repair of ONE event's text: string-aware rewrite of unescaped quotes, raw control
    characters and invalid escapes inside strings; then the whole-run repairs."""
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError:
        s = text.decode("utf-8", "replace")
        fixes["invalid UTF-8 byte sequences replaced by U+FFFD"] += max(1, s.count("\ufffd"))
    out: list[str] = []
    i, n, in_str = 0, len(s), False
    while i < n:
        c = s[i]
        if not in_str:
            out.append(c)
            in_str = c == '"'
            i += 1
            continue
        if c == "\\":
            nxt = s[i + 1 : i + 2]
            if nxt and nxt in '"\\/bfnrt':
                out.append(s[i : i + 2])
                i += 2
                continue
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6] or ""):
                out.append(s[i : i + 6])
                i += 6
                continue
            fixes["invalid backslash escapes (e.g. Windows paths) doubled"] += 1
            out.append("\\\\")
            i += 1
            continue
        if c == '"':
            j = i + 1
            while j < n and s[j] in " \t\r\n":
                j += 1
            nxt = s[j : j + 1]
            closes = nxt in (":", "}", "]", "")
            if nxt == ",":
                k = j + 1
                while k < n and s[k] in " \t\r\n":
                    k += 1
                closes = k >= n or ord(s[k]) in _VALID_AFTER_COMMA
            if closes:
                out.append(c)
                in_str = False
            else:
                fixes["unescaped quotes inside strings escaped"] += 1
                out.append('\\"')
            i += 1
            continue
        if ord(c) < 0x20:
            fixes["raw control characters inside strings escaped"] += 1
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, f"\\u{ord(c):04x}"))
            i += 1
            continue
        out.append(c)
        i += 1
    fixed = "".join(out).encode("utf-8")
    fixed2, k = _COMMA_DECIMAL.subn(rb"\1.\2", fixed)
    if k:
        fixes["comma decimal separators read as points"] += k
    return _null_nan_values(fixed2, fixes)


# --------------------------------------------------------------------------------------------- values


def _clean_number(v: Any, as_int: bool, bad: Counter, col: str) -> int | float | None:
    if v is None:
        return None
    if isinstance(v, bool):
        bad[col] += 1
        return None
    if isinstance(v, str):
        t = v.strip()
        if t.lower() in _BAD_NUMBER_TEXT:
            bad[col] += 1
            return None
        try:
            v = int(t, 0) if as_int else float(t)
        except ValueError:
            try:
                v = float(t)
            except ValueError:
                bad[col] += 1
                return None
    if isinstance(v, float):
        if not math.isfinite(v):
            bad[col] += 1
            return None
        if as_int:
            if not v.is_integer():
                bad[col] += 1
                return None
            return int(v)
        return v
    if isinstance(v, int):
        return v if not as_int or -(2**63) <= v < 2**63 else None
    bad[col] += 1
    return None


def _num_array(vals: list, typ: pa.DataType, bad: Counter, col: str) -> pa.Array:
    try:
        return pa.array(vals, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
        as_int = pa.types.is_integer(typ)
        cleaned = [_clean_number(v, as_int, bad, col) for v in vals]
        try:
            return pa.array(cleaned, typ)
        except (pa.ArrowInvalid, OverflowError):  # out of int32 range
            bad[col] += sum(1 for v in cleaned if v is not None)
            return pa.nulls(len(vals), typ)


def _raw_strings(raws: list[_Raw]) -> pa.Array:
    """Raw JSON texts -> a string array (null where the key was absent), without a Python call per row."""
    n = len(raws)
    lens = np.array(list(map(len, raws)), dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    data = b"".join(raws)
    valid = lens > 0
    binary = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [pa.array(valid).buffers()[1], pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    try:
        return binary.cast(pa.large_string()).cast(pa.string())
    except pa.ArrowInvalid:  # invalid UTF-8 (only reachable through repaired runs)
        return pa.array([bytes(r).decode("utf-8", "replace") if r else None for r in raws], pa.string())


def _validity(arr: pa.Array) -> pa.Buffer | None:
    """The validity bitmap of ``arr`` re-based to offset 0 (None when it has no nulls)."""
    if arr.null_count == 0:
        return None
    if arr.offset == 0:
        return arr.buffers()[0]
    return pc.is_valid(arr).buffers()[1]


def _dims(vals: list, bad: Counter, col: str) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``[x, y, z]`` lists -> three int32 columns (only rows that have the key are visited)."""
    n = len(vals)
    try:  # fast path: every value absent or a list of exactly 3 int32 (or null) items
        lists = pa.array(vals, pa.list_(pa.int32()))
        if lists.null_count == n:
            return pa.nulls(n, pa.int32()), pa.nulls(n, pa.int32()), pa.nulls(n, pa.int32())
        lo, hi = pc.min_max(pc.list_value_length(lists)).values()
        if lo.as_py() == hi.as_py() == 3:
            return tuple(pc.list_element(lists, d) for d in range(3))  # type: ignore[return-value]
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
        pass
    out: list[list] = [[None] * n, [None] * n, [None] * n]
    for i in [i for i, v in enumerate(vals) if v is not None]:
        v = vals[i]
        if isinstance(v, list):
            for d in range(min(3, len(v))):
                out[d][i] = v[d]
        else:
            bad[col] += 1
    return tuple(_num_array(o, pa.int32(), bad, col) for o in out)  # type: ignore[return-value]


def _cast_or_null(arr: pa.Array, typ: pa.DataType) -> pa.Array:
    try:
        return arr.cast(typ)
    except pa.ArrowInvalid:
        return pa.array([v if v is not None and -(2**31) <= v < 2**31 else None for v in arr.to_pylist()], typ)


def _other_kind(cat: Any) -> str:
    return CAT_KIND.get(cat.lower(), "other") if isinstance(cat, str) else "other"


def _columns(structs: list) -> list[tuple]:
    """Transpose Structs into one tuple of values per field, in C. The row tuples are short-lived and
    hold no cycles, so the cyclic GC (which their allocation would trigger over and over) is paused."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return list(zip(*map(_astuple, structs)))
    finally:
        if paused:
            gc.enable()


def _kinds(ph: pa.Array, cat: pa.Array) -> pa.Array:
    """``kind`` per row: by ``ph`` (flow, meta, instant), else by ``cat`` (CAT_KIND, case-insensitive,
    else "other"). Looked up once per distinct value, then spread with ``take``."""
    cats = cat.dictionary_encode()
    by_cat = pa.array([CAT_KIND.get(c) or _other_kind(c) for c in cats.dictionary.to_pylist()], pa.string())
    kind = by_cat.take(cats.indices).fill_null("other")
    phs = ph.dictionary_encode()
    by_ph = [_PH_KIND.get(p) for p in phs.dictionary.to_pylist()]
    if any(by_ph):
        kind = pc.coalesce(pa.array(by_ph, pa.string()).take(phs.indices), kind)
    return kind


# --------------------------------------------------------------------------------------------- reader


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
        self._seq = 0
        self._fixes: Counter = Counter()
        self._bad_numbers: Counter = Counter()
        self._skipped_python = 0
        self._missing_dur = 0
        self._started = False
        self._top_seen: dict[str, Any] = {}  # top-level keys met so far (head, then tail)

    # -- public

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._started:
            raise RuntimeError("a KinetoReader can be iterated once")
        self._started = True
        src = _Source(self.path, salvage=self.salvage)
        try:
            yield from self._read(src)
        except RecursionError:  # msgspec's depth guard: JSON nested past Python's recursion limit
            raise ParseError(
                f"JSON nested too deeply (over {sys.getrecursionlimit()} levels) near byte {src.offset}; "
                "no trace nests like this, re-export the trace"
            ) from None
        finally:
            src.close()

    # -- head / tail

    def _read(self, src: _Source) -> Iterator[pa.RecordBatch]:
        buf = b""
        eof = False
        first_checked = False
        while True:
            if not eof:
                block = src.read()
                if not block:
                    eof = True
                buf += block
            if not first_checked:
                stripped = buf.lstrip()
                if stripped.startswith(b"\xef\xbb\xbf"):  # UTF-8 BOM
                    buf = stripped[3:]
                    stripped = buf.lstrip()
                if stripped:
                    first_checked = True
                    c = stripped[:1]
                    if c == b"[":
                        raise ParseError(
                            "the top-level JSON value is an array of events, not an object with a traceEvents "
                            "key: a bare Chrome trace, or PyTorch 1.8's first Kineto export, which kernelscope "
                            "does not read; re-record with PyTorch >= 1.9 (or wrap the array as "
                            "{\"traceEvents\": [...]})"
                        )
                    if c != b"{":
                        raise ParseError(
                            "not JSON: the file does not start with '{' (binary or another format); "
                            "give a torch.profiler .json or .json.gz trace"
                        )
                elif eof:
                    raise ParseError(
                        "the file is empty" + (" after decompression" if src.gz else "") + "; it holds no trace"
                    )
            m = self._find_trace_events(buf)
            if m is not None:
                head, after = m
                self._apply_top(head, "before traceEvents")
                buf = after
                break
            if eof:
                self._no_trace_events(buf)
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
        buf = body[1:]
        cap = max_event_bytes()
        while True:
            if not eof:
                block = src.read()
                if not block:
                    eof = True
                buf += block
            if len(buf) > cap + BLOCK_BYTES:  # no event ends within the cap: refuse before memory grows
                raise ParseError(
                    f"event {self._seq} at byte {base} runs past {cap / (1 << 20):g} MB without ending (the "
                    "limit for one event; set KERNELSCOPE_MAX_EVENT_MB to raise it); a trace event this large "
                    "is damaged or not a trace"
                )
            if eof:
                yield from self._finish(buf, base, src)
                break
            cut = self._last_boundary(buf)
            if cut is None:
                continue  # one event longer than the buffer: read more
            run, rest = buf[: cut + 1], buf[cut + 1 :]
            rest = rest[rest.index(b"{") :]
            consumed = yield from self._decode_run(run, base, final=False)
            leftover = run[consumed:]
            if leftover.strip():
                # carry: the tolerant path could not finish the last pieces yet
                sep = buf[len(run) : len(buf) - len(rest)]
                rest = leftover + sep + rest
            base += len(buf) - len(rest)
            buf = rest
        self._finalise(src)

    def _find_trace_events(self, buf: bytes) -> tuple[bytes, bytes] | None:
        for m in _TRACE_EVENTS_KEY.finditer(buf):
            head = buf[: m.start()].strip()
            # head is '{' + keys + ',' : check it decodes, so a match inside a string is skipped
            if head == b"{":
                return b"{}", buf[m.end() :]
            if head.endswith(b","):
                try:
                    _ANY_DEC.decode(head[:-1] + b"}")
                except _DECODE_ERRORS:
                    obj = self._tolerant_object(head[:-1] + b"}")
                    if obj is None:
                        continue
                return head[:-1] + b"}", buf[m.end() :]
        return None

    def _no_trace_events(self, buf: bytes) -> None:
        if _TRACE_EVENTS_KEY.search(buf):
            raise ParseError('the keys before "traceEvents" are not valid JSON; re-export the trace')
        try:
            obj = _ANY_DEC.decode(buf)
        except _DECODE_ERRORS:
            raise ParseError(
                f"the file ends at byte {len(buf)} before any \"traceEvents\" key (truncated or not a "
                "torch.profiler trace); re-export the trace"
            ) from None
        if isinstance(obj, dict):
            raise ParseError('the JSON object has no "traceEvents" key; this is not a torch.profiler trace')
        raise ParseError("the top-level JSON value is not an object; this is not a torch.profiler trace")

    def _tolerant_object(self, text: bytes) -> dict | None:
        fixes: Counter = Counter()
        try:
            obj = _ANY_DEC.decode(_repair_event(text, fixes))
        except _DECODE_ERRORS:
            return None
        if not isinstance(obj, dict):
            return None
        self._fixes.update(fixes)
        return obj

    def _apply_top(self, text: bytes, where: str) -> None:
        try:
            obj = _ANY_DEC.decode(text)
        except _DECODE_ERRORS:
            obj = self._tolerant_object(text)
            if obj is None:
                raise ParseError(f"the keys {where} are not valid JSON; re-export the trace") from None
        if not isinstance(obj, dict):
            raise ParseError(f"the keys {where} are not a JSON object; re-export the trace")
        meta = self.meta
        self._check_top_keys(text, obj, where)
        for key, value in obj.items():
            if key == "traceEvents":
                raise ParseError(
                    'the top-level object has a second "traceEvents" key (after the event array); a trace '
                    "has one, re-export the trace"
                )
            if key == "baseTimeNanoseconds":
                try:
                    if isinstance(value, bool):
                        raise TypeError
                    meta.base_time_ns = int(value) if not isinstance(value, str) else int(value.strip())
                except (TypeError, ValueError, OverflowError):
                    raise ParseError(
                        f"baseTimeNanoseconds is not an integer ({str(value)[:40]!r}); fix or remove the key"
                    ) from None
                if not -(2**62) <= meta.base_time_ns < 2**62:
                    raise ParseError(
                        f"baseTimeNanoseconds ({str(value)[:40]}) is out of range for epoch nanoseconds; fix or "
                        "remove the key"
                    )
            elif key == "deviceProperties":
                meta.device_properties = [d for d in value if isinstance(d, dict)] if isinstance(value, list) else []
            elif key == "distributedInfo":
                if isinstance(value, dict):
                    meta.distributed_info = value
                    meta.rank = _opt_int(value.get("rank"))
                    meta.world_size = _opt_int(value.get("world_size"))
            else:
                meta.extra[key] = value
                if _DROPPED.search(key.encode()):
                    meta.dropped_notes.append(f"{key}: {msgspec.json.encode(value).decode()}")

    def _check_top_keys(self, text: bytes, obj: dict, where: str) -> None:
        """Duplicate top-level keys (JSON decoders keep the last one silently): a key kernelscope reads
        (``_READ_TOP_KEYS``) given twice with different values is refused; any other repeat is a warning."""
        repeated = [(k, None) for k in _duplicate_keys(text)]
        repeated += [(k, obj[k]) for k in obj if k in self._top_seen]
        for key, value in repeated:
            first = self._top_seen.get(key, value)
            if key in _READ_TOP_KEYS and (value is None or first != value):
                raise ParseError(
                    f"the top-level key {key!r} appears twice ({where}) with values that differ or cannot be "
                    "compared; kernelscope cannot tell which is right, remove one"
                )
            note = f"the top-level key {key!r} appears more than once; the last value is kept"
            if note not in self.meta.warnings:
                self.meta.warnings.append(note)
        self._top_seen.update(obj)

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
            events = _RUN_DEC.decode(b"[" + run + b"]")
        except _DECODE_ERRORS:
            fixes: Counter = Counter()
            fixed = _repair_run(run, fixes)
            events = None
            if fixed is not None:
                try:
                    events = _RUN_DEC.decode(b"[" + fixed + b"]")
                    self._fixes.update(fixes)
                except _DECODE_ERRORS:
                    events = None
            if events is None:
                return (yield from self._decode_pieces(run, base, final=final))
        self._count_nulls(run)
        yield from self._emit(events, base)
        return len(run)

    def _decode_pieces(self, run: bytes, base: int, *, final: bool) -> Iterator[pa.RecordBatch]:
        starts = [0] + [m.end() - 1 for m in _BOUNDARY.finditer(run)]
        ends = [m.start() + 1 for m in _BOUNDARY.finditer(run)] + [len(run)]
        good: list[_EventTyped] = []
        i = 0
        while i < len(starts):
            ev = None
            for j in range(i, min(len(starts), i + MAX_MERGE)):
                piece = run[starts[i] : ends[j]].strip()
                fixes: Counter = Counter()
                try:
                    ev = _ONE_DEC.decode(piece)
                except _DECODE_ERRORS:
                    try:
                        ev = _ONE_DEC.decode(_repair_event(piece, fixes))
                    except _DECODE_ERRORS:
                        ev = _loose_event(piece, fixes)
                if ev is not None:
                    self._fixes.update(fixes)
                    self._count_nulls(piece)
                    good.append(ev)
                    i = j + 1
                    break
            if ev is None:
                at = base + starts[i]
                piece = run[starts[i] : ends[min(len(ends) - 1, i)]]
                if not final and len(starts) - i < MAX_MERGE:
                    yield from self._emit(good, base)
                    return starts[i]
                if _NAN_TIME.search(piece):
                    raise ParseError(
                        f"event {self._seq + len(good)} at byte {at} has a NaN or Infinity time; "
                        "times must be numbers, re-export the trace"
                    )
                raise ParseError(
                    f"event {self._seq + len(good)} at byte {at} is not valid JSON and could not be repaired; "
                    "re-export the trace"
                )
        yield from self._emit(good, base)
        return len(run)

    def _finish(self, buf: bytes, base: int, src: _Source) -> Iterator[pa.RecordBatch]:
        """At EOF: buf holds the last events, ']', the tail keys and the closing '}'."""
        # Fast path: the array's closing ']' is the last one whose right side is a valid tail ('}' or
        # ', "key": ...}') and whose left side decodes. Scan candidates from the end: the tail is short,
        # while the events before it hold thousands of ']' (shapes), so a forward scan is quadratic.
        k = len(buf)
        while True:
            k = buf.rfind(b"]", 0, k)
            if k < 0:
                break
            right = buf[k + 1 :].strip()
            if right == b"}":
                tail = b"{}"
            elif right.startswith(b",") and right.endswith(b"}") and _tail_ok(b"{" + right[1:]):
                tail = b"{" + right[1:]
            else:
                continue
            left = buf[:k].rstrip()
            if left and not left.endswith(b"}"):
                continue
            if not self._events_ok(left):
                break  # the slow path below finds the precise error
            yield from self._decode_run(left, base, final=True)
            self._apply_top(tail, "after traceEvents")
            return
        bad_events_at = None  # a ']' followed by a valid tail, but the events before it do not decode
        truncated_tail, salvage_left, salvage_right = False, b"", b""
        for k in _positions(buf, b"]"):
            left = buf[:k].rstrip()
            if left and not left.endswith(b"}"):
                continue
            right = buf[k + 1 :].strip()
            if not right.endswith(b"}"):
                end = right.rfind(b"}")
                if end >= 0 and self._events_ok(left):
                    head = right[: end + 1]
                    if head == b"}" or (head.startswith(b",") and _tail_ok(b"{" + head[1:])):
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
                bad_events_at = left if _tail_ok(tail) else bad_events_at
                continue
            yield from self._decode_run(left, base, final=True)
            self._apply_top(tail, "after traceEvents")
            return
        if bad_events_at is not None:  # raises the precise error for the bad event
            yield from self._decode_pieces(bad_events_at, base, final=True)
        if truncated_tail:
            if self.salvage:
                yield from self._decode_run(salvage_left, base, final=True)
                # the keys after the array, when only the closing brace is missing, are still read
                tail = b"{" + salvage_right[1:] + b"}" if salvage_right.startswith(b",") else b"{}"
                if _tail_ok(tail):
                    self._apply_top(tail, "after traceEvents")
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

    def _salvage(self, buf: bytes, base: int, src: _Source) -> Iterator[pa.RecordBatch]:
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

    def _mark_truncated(self, src: _Source, at_byte: int, where: str) -> None:
        reason = src.cut + f"; the text {where}" if src.cut else f"the text {where}"
        self.meta.truncated = {
            "at_byte": int(at_byte), "read_bytes": int(src.offset), "events_kept": int(self.meta.events),
            "gzip": bool(src.gz), "reason": reason,
            "base_time_lost": "baseTimeNanoseconds" not in self._top_seen,
        }

    def _events_ok(self, left: bytes) -> bool:
        """Whether ``[left]`` decodes (perhaps after repairs): then the ']' candidate closes the array."""
        if not left:
            return True
        try:
            _RUN_DEC.decode(b"[" + left + b"]")
            return True
        except _DECODE_ERRORS:
            pass
        fixed = _repair_run(left, Counter())
        if fixed is not None:
            try:
                _RUN_DEC.decode(b"[" + fixed + b"]")
                return True
            except _DECODE_ERRORS:
                pass
        # tolerant: some suffix of whole pieces must decode as one (repaired) event, and the rest
        # is checked when it is decoded for real
        starts = [0] + [m.end() - 1 for m in _BOUNDARY.finditer(left)]
        for s in reversed(starts[-MAX_MERGE:]):
            try:
                _ONE_DEC.decode(_repair_event(left[s:].strip(), Counter()))
                return True
            except _DECODE_ERRORS:
                if _loose_event(left[s:].strip(), Counter()) is not None:
                    return True
                continue
        return False

    def _count_nulls(self, text: bytes) -> None:
        if b"null" not in text:
            return
        for m in _NULL_KEY.finditer(text):
            if m.group(1) in _NUMERIC_ARG_KEYS:
                self._bad_numbers[m.group(1).decode()] += 1

    def _emit(self, events: list[_EventTyped], base: int) -> Iterator[pa.RecordBatch]:
        if not events:
            return
        if not self.python_functions:
            n = len(events)
            events = [e for e in events if e.cat != "python_function"]
            self._skipped_python += n - len(events)
        for lo in range(0, len(events), self.batch_rows):
            batch = self._to_batch(events[lo : lo + self.batch_rows])
            self.meta.events += batch.num_rows
            yield batch

    def _to_batch(self, evs: list[_EventTyped]) -> pa.RecordBatch:
        """One Arrow batch from decoded events: the Structs are transposed into columns in C
        (``astuple`` + ``zip``), then every column is built and converted by Arrow, vectorised."""
        n = len(evs)
        seq0 = self._seq
        self._seq += n
        bad = self._bad_numbers
        i32, i64, f64, s = pa.int32(), pa.int64(), pa.float64(), pa.string()
        ph_l, cat_l, name_l, pid_l, tid_l, ts_l, dur_l, id_l, args_l = _columns(evs)
        ph = _str_array(ph_l)
        cat = _str_array(cat_l)
        name = _str_array(name_l)
        kind = _kinds(ph, cat)
        step = pc.and_(pc.equal(kind, "cpu_op"), pc.fill_null(pc.starts_with(name, "ProfilerStep#"), False))
        if pc.any(step).as_py():
            kind = pc.if_else(step, "annotation", kind)
        A = [_NO_ARGS if a is None else a for a in args_l]
        a_col = dict(zip(_ARGS_FIELDS, _columns(A)))  # args field -> its values, one per row

        # times: decimal text -> exact ns
        ts_ns = self._times(ts_l, "ts", seq0)
        dur_ns = self._times(dur_l, "dur", seq0)
        is_x = pc.fill_null(pc.equal(ph, "X"), False)
        if ts_ns.null_count:
            missing = pc.and_(is_x, pc.is_null(ts_ns))
            if pc.any(missing).as_py():
                i = pc.index(missing, True).as_py()
                raise ParseError(
                    f"event {seq0 + i} (a complete 'X' event, {str(name[i].as_py())[:60]!r}) has no ts; "
                    "every complete event needs a start time, re-export the trace"
                )
        if dur_ns.null_count:
            missing = pc.and_(is_x, pc.is_null(dur_ns))
            k = pc.sum(missing).as_py() or 0
            if k:
                self._missing_dur += k
                dur_ns = pc.if_else(missing, 0, dur_ns)

        # pid / tid: integers, or text ("Spans", "Traces") kept in pid_text
        try:
            pid = pa.array(pid_l, i64)
            pid_text = pa.nulls(n, s)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            pid_text = pa.array([None if type(p) is int and -(2**63) <= p < 2**63 else _text_pid(p)  # noqa: E721
                                 for p in pid_l], s)  # an integer past int64 is kept as text
            pid = pa.array([_int_or_none(p) for p in pid_l], i64)
        try:
            tid = pa.array(tid_l, i64)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            tid = pa.array([_int_or_none(t) for t in tid_l], i64)

        # GPU placement: args.device / args.stream, else pid / tid
        gpu = pc.is_in(kind, value_set=_GPU_KINDS_ARR)
        none_i32 = pa.scalar(None, i32)
        none_i64 = pa.scalar(None, i64)
        args_device = _num_array(a_col["device"], i32, bad, "device")
        # an event of a category no kind maps keeps its args.device (never the pid): storage counts such
        # events on a device as device events set aside (other accelerators, device ranges)
        device = pc.if_else(
            gpu, pc.coalesce(args_device, _cast_or_null(pid, i32)),
            pc.if_else(pc.equal(kind, "other"), args_device, none_i32),
        )
        stream = pc.if_else(gpu, pc.coalesce(_num_array(a_col["stream"], i64, bad, "stream"), tid), none_i64)

        # flows
        is_flow = pc.equal(kind, "flow")
        if pc.any(is_flow).as_py():
            flow_id = pc.if_else(is_flow, _num_array(id_l, i64, bad, "flow id"), none_i64)
            flow_phase = pc.if_else(is_flow, ph, pa.scalar(None, s))
        else:
            flow_id, flow_phase = pa.nulls(n, i64), pa.nulls(n, s)

        # text: meta values, collective args (few rows: visited one by one)
        text: list = [None] * n
        for i in pc.indices_nonzero(pc.equal(kind, "meta")).to_pylist():
            a = A[i]
            v = a.name if a.name is not None else (a.labels if a.labels is not None else a.sort_index)
            text[i] = v if isinstance(v, str) or v is None else msgspec.json.encode(v).decode()
        coll_name, pg_name = a_col["coll_name"], a_col["pg_name"]
        if coll_name.count(None) != n or pg_name.count(None) != n:
            for i in [i for i, (c, p) in enumerate(zip(coll_name, pg_name)) if c is not None or p is not None]:
                a = A[i]
                text[i] = msgspec.json.encode(
                    {key: getattr(a, attr) for attr, key in _COLLECTIVE_KEYS if getattr(a, attr) is not None}
                ).decode()

        # the profiler's own notes about lost data
        for i in pc.indices_nonzero(pc.is_in(kind, value_set=_NOTE_KINDS_ARR)).to_pylist():
            nm = name_l[i]
            if isinstance(nm, str) and _DROPPED_TEXT.search(nm):
                a = A[i]
                self.meta.dropped_notes.append(nm if a is _NO_ARGS else f"{nm} {msgspec.json.encode(a).decode()}")

        ev_idx, ev_idx_old = a_col["ev_idx"], a_col["ev_idx_old"]
        if ev_idx_old.count(None) != n:
            ev_idx = [e if e is not None else o for e, o in zip(ev_idx, ev_idx_old)]
        gx, gy, gz = _dims(a_col["grid"], bad, "grid")
        bx, by, bz = _dims(a_col["block"], bad, "block")
        cols = [
            pa.array(np.arange(seq0, seq0 + n, dtype=np.int64)),
            kind,
            cat,
            ph,
            name,
            pid,
            tid,
            pid_text,
            ts_ns,
            dur_ns,
            _num_array(a_col["correlation"], i64, bad, "correlation"),
            _num_array(a_col["external_id"], i64, bad, "External id"),
            device,
            stream,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            _num_array(a_col["registers"], i32, bad, "registers per thread"),
            _num_array(a_col["shared_memory"], i64, bad, "shared memory"),
            _num_array(a_col["blocks_per_sm"], f64, bad, "blocks per SM"),
            _num_array(a_col["warps_per_sm"], f64, bad, "warps per SM"),
            _num_array(a_col["occupancy"], f64, bad, "est. achieved occupancy %"),
            _num_array(a_col["nbytes"], i64, bad, "bytes"),
            _num_array(a_col["seq_number"], i64, bad, "Sequence number"),
            _num_array(a_col["fwd_thread_id"], i64, bad, "Fwd thread id"),
            _num_array(ev_idx, i64, bad, "Ev Idx"),
            _raw_strings(a_col["input_dims"]),
            _raw_strings(a_col["input_types"]),
            _raw_strings(a_col["input_strides"]),
            _raw_strings(a_col["concrete_inputs"]),
            flow_id,
            flow_phase,
            pa.array(text, s),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=RAW_EVENTS)

    def _times(self, raws: list[_Raw], which: str, seq0: int) -> pa.Array:
        """Decimal µs texts -> exact int64 ns (null where absent). Vectorised: Arrow reads the texts as
        decimal128(18, 3) µs -- exact, and an error for anything it cannot hold exactly (more than 3
        fractional digits, 10^15 µs or more, non-numbers) -- whose unscaled integer is the ns value.
        Otherwise every text goes through ``units.us_text_to_ns`` one by one."""
        text = _raw_strings(raws)
        if (pc.max(pc.binary_length(text)).as_py() or 0) > 40:  # pyarrow's decimal cast reads a 1,000-digit
            return self._times_slow(text, which, seq0)  # number as 0 (seen with 26.0): the exact path instead
        try:
            dec = pc.cast(text, _DEC_US)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return self._times_slow(text, which, seq0)
        n = len(dec)
        low = np.frombuffer(dec.buffers()[1], np.int64, count=2 * n, offset=16 * dec.offset)[::2]
        return pa.Array.from_buffers(
            pa.int64(), n, [_validity(dec), pa.py_buffer(np.ascontiguousarray(low))], null_count=dec.null_count
        )

    def _times_slow(self, text: pa.Array, which: str, seq0: int) -> pa.Array:
        out = []
        for i, t in enumerate(text.to_pylist()):
            if t is None:
                out.append(None)
                continue
            try:
                out.append(us_text_to_ns(t))
            except (ValueError, ArithmeticError):
                raise ParseError(
                    f"event {seq0 + i} has a {which} that is not a number ({t[:40]}); "
                    "times must be numbers in microseconds, re-export the trace"
                ) from None
        try:
            return pa.array(out, pa.int64())
        except OverflowError:
            raise ParseError(
                f"a {which} near event {seq0} is too large for int64 nanoseconds; re-export the trace"
            ) from None

    def _finalise(self, src: _Source) -> None:
        meta = self.meta
        meta.content_hash = src.sha.hexdigest()
        w = meta.warnings
        for what, count in sorted(self._fixes.items()):
            if count:
                w.append(f"repaired invalid JSON: {count} {what}")
        for key, count in sorted(self._bad_numbers.items()):
            w.append(f"{count} non-numeric values (inf, N/A, null, empty) in {key!r} read as null")
        if self._missing_dur:
            w.append(f"{self._missing_dur} complete ('X') events without dur read as dur 0")
        if self._skipped_python:
            w.append(f"skipped {self._skipped_python} python_function events (python_functions=False)")
        if src.cut and not meta.truncated:  # --salvage: the JSON text is whole, only the gzip end is missing
            w.append(f"{src.cut}; the JSON text before it is complete (read with --salvage)")


#: Top-level keys whose value kernelscope uses: given twice with different values, the trace is refused.
_READ_TOP_KEYS = frozenset({"traceEvents", "baseTimeNanoseconds", "deviceProperties", "distributedInfo"})


def _duplicate_keys(text: bytes) -> list[str]:
    """Keys that appear more than once in the outermost JSON object of ``text`` ([] when it does not parse
    strictly: the caller has decoded it already, perhaps after repairs)."""
    import json

    last: list = []

    def hook(pairs):
        last[:] = [pairs]  # called innermost first: the last call is the outermost object
        return dict(pairs)

    try:
        json.loads(text, object_pairs_hook=hook)
    except (ValueError, RecursionError):
        return []
    counts = Counter(k for k, _ in (last[0] if last else []))
    return [k for k, n in counts.items() if n > 1]


def _loose_event(text: bytes, fixes: Counter) -> _EventTyped | None:
    """An event whose only fault is an ``args`` that is not an object (a list, a string, a number), read
    without args and counted in ``fixes``; None when the text is not one JSON object."""
    try:
        e = _LOOSE_DEC.decode(text)
    except _DECODE_ERRORS:
        return None
    if isinstance(e.args, dict):  # an object the typed decoder refused: not a case we know how to read
        return None
    fixes["events whose args is not a JSON object read without args"] += 1
    return _EventTyped(ph=e.ph, cat=e.cat, name=e.name, pid=e.pid, tid=e.tid, ts=e.ts, dur=e.dur, id=e.id, args=None)


def _positions(buf: bytes, ch: bytes) -> Iterator[int]:
    i = buf.find(ch)
    while i >= 0:
        yield i
        i = buf.find(ch, i + 1)


def _tail_ok(tail: bytes) -> bool:
    try:
        return isinstance(_ANY_DEC.decode(tail), dict)
    except _DECODE_ERRORS:
        return False


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, str):
        try:
            i = int(v.strip(), 0)
        except ValueError:
            return None
        return i if -(2**63) <= i < 2**63 else None
    if isinstance(v, float) and v.is_integer() and -(2.0**63) <= v < 2.0**63:
        return int(v)
    return None


def _text_pid(p: Any) -> str | None:
    """pid_text: a pid that is not an integer ("Spans", "Traces", ""), as written."""
    if p is None:
        return None
    if isinstance(p, str):
        return None if p.strip().lstrip("-").isdigit() else p
    return str(p)


def _opt_int(v: Any) -> int | None:
    try:
        return None if v is None or isinstance(v, bool) else int(v)
    except (TypeError, ValueError):
        return None


def _str_array(vals: list) -> pa.Array:
    try:
        return pa.array(vals, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if v is None or isinstance(v, str) else msgspec.json.encode(v).decode() for v in vals])


def read_kineto(path: str | Path, **opts: Any) -> KinetoReader:
    """A reader for one Kineto trace; iterate it for batches, then read ``.meta``."""
    return KinetoReader(path, **opts)
