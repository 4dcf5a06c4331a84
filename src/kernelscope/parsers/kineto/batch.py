"""Decoded Kineto events -> ``RAW_EVENTS`` Arrow batches (``BatchBuilder``).

The typed decoder (``fields.RUN_DEC``) gives a list of Structs; ``BatchBuilder.to_batch`` transposes them
into columns in C (``astuple`` + ``zip``) and builds every column with Arrow, vectorised: ``kind`` from
``ph``/``cat`` (``CAT_KIND``), exact integer ns from the decimal µs text of ``ts``/``dur``, GPU placement
(args.device / args.stream, else pid / tid), and one column per arg of ``fields.ARG_FIELDS``. Values that
are not what their column holds are read as null and counted (``bad_numbers``, by arg name).
"""

from __future__ import annotations

import decimal
import gc
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kernelscope.errors import ParseError
from kernelscope.parsers.kineto.fields import (
    ARG_FIELDS,
    ARGS_ATTRS,
    COLLECTIVE_FIELDS,
    DIMS_FIELDS,
    JSON_FIELDS,
    META_FIELDS,
    NO_ARGS,
    ArgField,
    EventTyped,
    Raw,
)
from kernelscope.parsers.kineto.repair import clean_number
from kernelscope.parsers.schema import RAW_EVENTS, TraceMeta
from kernelscope.units import us_text_to_ns

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
_DROPPED_TEXT = re.compile(
    r"(dropp?ed|lost)\b.*\b(record|event|activit)|(record|event|activit)\w*\s+(were\s+)?(dropp?ed|lost)|overflow", re.I
)
#: µs with 3 fractional digits; its unscaled value is the time in ns. 19 digits: epoch µs at ns resolution
#: ("1712195495519689.047", torch's and HTA's traces since ~2024) have 16 before the point; the unscaled value
#: fits int64 only below 2^63 ns, checked against these bounds.
_DEC_US = pa.decimal128(19, 3)
_DEC_US_MAX = pa.scalar(decimal.Decimal("9223372036854775.807"), _DEC_US)
_DEC_US_MIN = pa.scalar(decimal.Decimal("-9223372036854775.808"), _DEC_US)
_astuple = msgspec.structs.astuple

def _by_column(fields) -> dict[str, tuple[ArgField, ...]]:
    """Fields by the column they fill, first field first: a later one is an older name of the same arg, used where
    the first is absent (``ev_idx``: "Ev Idx", else "Profiler Event Index"; ``input_dims``: "Input Dims", else
    PyTorch 1.8's "Input dims")."""
    out: dict[str, tuple[ArgField, ...]] = {}
    for f in fields:
        out[f.column] = (*out.get(f.column, ()), f)
    return out


#: ``number`` args by column; ``device``/``stream`` are placement, built apart.
_NUMBER_COLUMNS = _by_column(f for f in ARG_FIELDS if f.read == "number")
_DEVICE, _STREAM = _NUMBER_COLUMNS.pop("device")[0], _NUMBER_COLUMNS.pop("stream")[0]
_JSON_COLUMNS = _by_column(JSON_FIELDS)
#: The args whose presence makes an event a collective (its collective args kept as JSON in ``text``).
_COLLECTIVE_MARKERS = ("coll_name", "pg_name")


class BatchBuilder:
    """Turns decoded events into ``RAW_EVENTS`` batches of at most ``batch_rows`` rows, numbering them
    (``seq``) and counting what it read around: ``bad_numbers`` (arg name -> values read as null),
    ``missing_dur`` ('X' events without dur, read as 0), ``skipped_python`` (``python_functions=False``).
    The profiler's own notes about lost data go to ``meta.dropped_notes``; ``meta.events`` counts rows."""

    def __init__(self, meta: TraceMeta, *, python_functions: bool = True, batch_rows: int = 65536):
        self.meta = meta
        self.python_functions = python_functions
        self.batch_rows = batch_rows
        self.seq = 0
        self.bad_numbers: Counter = Counter()
        self.missing_dur = 0
        self.skipped_python = 0

    def emit(self, events: list[EventTyped]) -> Iterator[pa.RecordBatch]:
        if not events:
            return
        if not self.python_functions:
            n = len(events)
            events = [e for e in events if e.cat != "python_function"]
            self.skipped_python += n - len(events)
        for lo in range(0, len(events), self.batch_rows):
            batch = self.to_batch(events[lo : lo + self.batch_rows])
            self.meta.events += batch.num_rows
            yield batch

    def to_batch(self, evs: list[EventTyped]) -> pa.RecordBatch:
        """One Arrow batch from decoded events: the Structs are transposed into columns in C
        (``astuple`` + ``zip``), then every column is built and converted by Arrow, vectorised."""
        n = len(evs)
        seq0 = self.seq
        self.seq += n
        ph_l, cat_l, name_l, pid_l, tid_l, ts_l, dur_l, id_l, args_l = _columns(evs)
        cols: dict[str, pa.Array] = {"seq": pa.array(np.arange(seq0, seq0 + n, dtype=np.int64))}
        ph = cols["ph"] = _str_array(ph_l)
        cols["cat"] = _str_array(cat_l)
        name = cols["name"] = _str_array(name_l)
        kind = cols["kind"] = _kinds(ph, cols["cat"], name)
        args = [NO_ARGS if a is None else a for a in args_l]
        arg_values = dict(zip(ARGS_ATTRS, _columns(args)))  # args attribute -> its values, one per row
        self._times_columns(cols, ts_l, dur_l, seq0)
        cols["pid"], cols["tid"], cols["pid_text"] = _pid_tid(pid_l, tid_l)
        cols["device"], cols["stream"] = self._placement(kind, cols["pid"], cols["tid"], arg_values)
        cols["flow_id"], cols["flow_phase"] = self._flows(kind, ph, id_l)
        cols["text"] = _text(kind, args, arg_values)
        self._dropped_notes(kind, name_l, args)
        cols.update(self._arg_columns(arg_values))
        return pa.RecordBatch.from_arrays([cols[c] for c in RAW_EVENTS.names], schema=RAW_EVENTS)

    def _times_columns(self, cols: dict[str, pa.Array], ts_l: list, dur_l: list, seq0: int) -> None:
        """``ts_ns`` and ``dur_ns`` (decimal text -> exact ns): a complete ('X') event without ts is refused,
        one without dur is read as 0 (counted in ``missing_dur``)."""
        ts_ns = _times(ts_l, "ts", seq0)
        dur_ns = _times(dur_l, "dur", seq0)
        is_x = pc.fill_null(pc.equal(cols["ph"], "X"), False)
        if ts_ns.null_count:
            missing = pc.and_(is_x, pc.is_null(ts_ns))
            if pc.any(missing).as_py():
                i = pc.index(missing, True).as_py()
                raise ParseError(
                    f"event {seq0 + i} (a complete 'X' event, {str(cols['name'][i].as_py())[:60]!r}) has no ts; "
                    "every complete event needs a start time, re-export the trace"
                )
        if dur_ns.null_count:
            missing = pc.and_(is_x, pc.is_null(dur_ns))
            k = pc.sum(missing).as_py() or 0
            if k:
                self.missing_dur += k
                dur_ns = pc.if_else(missing, 0, dur_ns)
        cols["ts_ns"], cols["dur_ns"] = ts_ns, dur_ns

    def _placement(self, kind: pa.Array, pid: pa.Array, tid: pa.Array,
                   arg_values: dict[str, tuple]) -> tuple[pa.Array, pa.Array]:
        """GPU placement: ``device`` = args.device, else the pid; ``stream`` = args.stream, else the tid; null
        for host events. An event of a category no kind maps keeps its args.device (never the pid): storage
        counts such events on a device as device events set aside (other accelerators, device ranges)."""
        gpu = pc.is_in(kind, value_set=_GPU_KINDS_ARR)
        args_device = _num_array(arg_values[_DEVICE.attr], _DEVICE.type, self.bad_numbers, _DEVICE.key)
        device = pc.if_else(
            gpu, pc.coalesce(args_device, _cast_or_null(pid, _DEVICE.type)),
            pc.if_else(pc.equal(kind, "other"), args_device, pa.scalar(None, _DEVICE.type)),
        )
        args_stream = _num_array(arg_values[_STREAM.attr], _STREAM.type, self.bad_numbers, _STREAM.key)
        stream = pc.if_else(gpu, pc.coalesce(args_stream, tid), pa.scalar(None, _STREAM.type))
        return device, stream

    def _flows(self, kind: pa.Array, ph: pa.Array, id_l: list) -> tuple[pa.Array, pa.Array]:
        """``flow_id`` (the event's id) and ``flow_phase`` (its ph) of flow events; null elsewhere."""
        i64, s = pa.int64(), pa.string()
        is_flow = pc.equal(kind, "flow")
        if not pc.any(is_flow).as_py():
            return pa.nulls(len(kind), i64), pa.nulls(len(kind), s)
        flow_id = pc.if_else(is_flow, _num_array(id_l, i64, self.bad_numbers, "flow id"), pa.scalar(None, i64))
        return flow_id, pc.if_else(is_flow, ph, pa.scalar(None, s))

    def _dropped_notes(self, kind: pa.Array, name_l: list, args: list) -> None:
        """The profiler's own notes about lost data (instant, meta or uncategorised events whose name says
        records were dropped), verbatim with their args, into ``meta.dropped_notes``."""
        for i in pc.indices_nonzero(pc.is_in(kind, value_set=_NOTE_KINDS_ARR)).to_pylist():
            nm = name_l[i]
            if isinstance(nm, str) and _DROPPED_TEXT.search(nm):
                a = args[i]
                self.meta.dropped_notes.append(nm if a is NO_ARGS else f"{nm} {msgspec.json.encode(a).decode()}")

    def _arg_columns(self, arg_values: dict[str, tuple]) -> dict[str, pa.Array]:
        """The columns filled from one arg each (``fields.ARG_FIELDS``): numbers, dims, raw JSON texts."""
        n = len(arg_values[ARGS_ATTRS[0]])
        bad = self.bad_numbers
        out: dict[str, pa.Array] = {}
        for column, (first, *older) in _NUMBER_COLUMNS.items():
            values = arg_values[first.attr]
            for f in older:  # an older name of the same arg: used where the current one is absent
                if arg_values[f.attr].count(None) != n:
                    values = [v if v is not None else o for v, o in zip(values, arg_values[f.attr])]
            out[column] = _num_array(values, first.type, bad, first.key)
        for f in DIMS_FIELDS:
            out[f"{f.column}_x"], out[f"{f.column}_y"], out[f"{f.column}_z"] = _dims(arg_values[f.attr], bad, f.key)
        for column, (first, *older) in _JSON_COLUMNS.items():
            raws = arg_values[first.attr]
            for f in older:  # an older name of the same arg: used where the current one is absent
                raws = [r if len(r) else o for r, o in zip(raws, arg_values[f.attr])]
            out[column] = _one_line(_raw_strings(raws))
        return out


def _times(raws: list[Raw], which: str, seq0: int) -> pa.Array:
    """Decimal µs texts -> exact int64 ns (null where absent). Vectorised: Arrow reads the texts as
    decimal128(19, 3) µs -- exact, and an error for anything it cannot hold exactly (more than 3
    fractional digits, 10^16 µs or more, non-numbers) -- whose unscaled integer, inside int64, is the ns
    value. Otherwise every text goes through ``units.us_text_to_ns`` one by one (it rounds past the third
    digit and says which event is not a number or too large)."""
    text = _raw_strings(raws)
    if (pc.max(pc.binary_length(text)).as_py() or 0) > 40:  # pyarrow's decimal cast reads a 1,000-digit
        return _times_slow(text, which, seq0)  # number as 0 (seen with 26.0): the exact path instead
    try:
        dec = pc.cast(text, _DEC_US)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _times_slow(text, which, seq0)
    lo_hi = pc.min_max(dec)
    if lo_hi["max"].is_valid and (pc.greater(lo_hi["max"], _DEC_US_MAX).as_py()
                                  or pc.less(lo_hi["min"], _DEC_US_MIN).as_py()):
        return _times_slow(text, which, seq0)  # past int64 ns: its one-line error
    n = len(dec)
    low = np.frombuffer(dec.buffers()[1], np.int64, count=2 * n, offset=16 * dec.offset)[::2]
    return pa.Array.from_buffers(
        pa.int64(), n, [_validity(dec), pa.py_buffer(np.ascontiguousarray(low))], null_count=dec.null_count
    )

def _times_slow(text: pa.Array, which: str, seq0: int) -> pa.Array:
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


def _num_array(vals: list, typ: pa.DataType, bad: Counter, col: str) -> pa.Array:
    """Values -> a ``typ`` array; what is not a number of that type is null, counted in ``bad[col]``."""
    try:
        return pa.array(vals, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
        as_int = pa.types.is_integer(typ)
        cleaned = [clean_number(v, as_int, bad, col) for v in vals]
        try:
            return pa.array(cleaned, typ)
        except (pa.ArrowInvalid, OverflowError):  # out of int32 range
            bad[col] += sum(1 for v in cleaned if v is not None)
            return pa.nulls(len(vals), typ)


def _raw_strings(raws: list[Raw]) -> pa.Array:
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


def _one_line(text: pa.Array) -> pa.Array:
    """Raw JSON texts of a pretty-printed trace (``"Input Dims": [\n  [\n    4, ...``, as TraceLens' test traces are
    written) on one line: each line break goes with the whitespace around it. A JSON string holds no raw line
    break, so no value changes; a trace written on one line (Kineto's own) is returned as it is."""
    if not pc.any(pc.match_substring(text, "\n")).as_py():
        return text
    return pc.replace_substring_regex(text, r"\s*\n\s*", "")


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


def _kinds(ph: pa.Array, cat: pa.Array, name: pa.Array) -> pa.Array:
    """``kind`` per row: by ``ph`` (flow, meta, instant), else by ``cat`` (CAT_KIND, case-insensitive,
    else "other"); a ``ProfilerStep#N`` cpu_op is an annotation (a phase, not an operator). Looked up once
    per distinct value, then spread with ``take``."""
    cats = cat.dictionary_encode()
    by_cat = pa.array([CAT_KIND.get(c) or _other_kind(c) for c in cats.dictionary.to_pylist()], pa.string())
    kind = by_cat.take(cats.indices).fill_null("other")
    phs = ph.dictionary_encode()
    by_ph = [_PH_KIND.get(p) for p in phs.dictionary.to_pylist()]
    if any(by_ph):
        kind = pc.coalesce(pa.array(by_ph, pa.string()).take(phs.indices), kind)
    step = pc.and_(pc.equal(kind, "cpu_op"), pc.fill_null(pc.starts_with(name, "ProfilerStep#"), False))
    if pc.any(step).as_py():
        kind = pc.if_else(step, "annotation", kind)
    return kind


def _pid_tid(pid_l: list, tid_l: list) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``pid``, ``tid`` (int64) and ``pid_text``: a pid that is not an integer ("Spans", "Traces", or an
    integer past int64) is kept as text, its ``pid`` null."""
    i64, s = pa.int64(), pa.string()
    try:
        pid = pa.array(pid_l, i64)
        pid_text = pa.nulls(len(pid_l), s)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pid_text = pa.array([None if type(p) is int and -(2**63) <= p < 2**63 else _text_pid(p)
                             for p in pid_l], s)  # an integer past int64 is kept as text
        pid = _ints(pid_l)
    try:
        tid = pa.array(tid_l, i64)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        tid = _ints(tid_l)
    return pid, tid, pid_text


def _ints(vals: list) -> pa.Array:
    """int64 of a column that is not all integers (Kineto's few "Spans"/"Traces" pids put every batch holding
    them here): integers as they are, the rest through ``_int_or_none`` (an integer past int64 too)."""
    try:
        return pa.array([v if type(v) is int else _int_or_none(v) for v in vals], pa.int64())
    except (pa.ArrowInvalid, OverflowError):
        return pa.array([_int_or_none(v) for v in vals], pa.int64())


def _text(kind: pa.Array, args: list, arg_values: dict[str, tuple]) -> pa.Array:
    """``text``: a meta event's value (``fields.META_FIELDS``, the first present; JSON unless a string), a
    collective's args as JSON (``fields.COLLECTIVE_FIELDS`` present); null elsewhere. Few rows: visited one
    by one."""
    n = len(args)
    text: list = [None] * n
    for i in pc.indices_nonzero(pc.equal(kind, "meta")).to_pylist():
        a = args[i]
        v = next((getattr(a, attr) for attr in META_FIELDS if getattr(a, attr) is not None), None)
        text[i] = v if isinstance(v, str) or v is None else msgspec.json.encode(v).decode()
    markers = [arg_values[attr] for attr in _COLLECTIVE_MARKERS]
    if any(m.count(None) != n for m in markers):
        for i in [i for i, ms in enumerate(zip(*markers)) if any(m is not None for m in ms)]:
            a = args[i]
            text[i] = msgspec.json.encode(
                {key: getattr(a, attr) for attr, key in COLLECTIVE_FIELDS if getattr(a, attr) is not None}
            ).decode()
    return pa.array(text, pa.string())


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



def _str_array(vals: list) -> pa.Array:
    try:
        return pa.array(vals, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if v is None or isinstance(v, str) else msgspec.json.encode(v).decode() for v in vals])

