"""What the Kineto reader keeps of an event: ``ARG_FIELDS``, the one table of the ``args`` keys it reads
(name in the trace -> ``RAW_EVENTS`` column, and how the value is read), and the msgspec Structs and
decoders built from it.

Every other place that needs an arg name takes it from this table: the typed decoder (``Args``), the batch
builder (which column each value fills, with which type), the tolerant path's count of ``null`` numbers
(``NUMERIC_ARG_KEYS``), the collective text (``COLLECTIVE_FIELDS``) and the meta text (``META_FIELDS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import pyarrow as pa

#: How an arg value is read. ``number``: cleaned into ``type`` (``inf``, ``N/A``, ``null`` -> null, counted
#: under the arg's name); ``dims``: an ``[x, y, z]`` list into ``<column>_x/_y/_z`` (int32); ``json``: the
#: raw JSON text as written; ``meta``: the value of a meta event (``text``); ``collective``: one key of a
#: collective's args, kept together as JSON in ``text``.
ArgRead = Literal["number", "dims", "json", "meta", "collective"]


@dataclass(frozen=True)
class ArgField:
    """One ``args`` key: ``attr`` is its Struct attribute, ``key`` its name in the trace, ``column`` the
    ``RAW_EVENTS`` column it fills (``device``/``stream`` are placement: the batch builder falls back to
    pid/tid), ``type`` the Arrow type of a ``number``."""

    attr: str
    key: str
    column: str
    read: ArgRead
    type: pa.DataType | None = None


_I32, _I64, _F64 = pa.int32(), pa.int64(), pa.float64()

#: The args keys kept, in Struct order (the order also fixes how an args object is written back as JSON in
#: a dropped-records note).
ARG_FIELDS: tuple[ArgField, ...] = (
    ArgField("correlation", "correlation", "correlation", "number", _I64),
    ArgField("external_id", "External id", "external_id", "number", _I64),
    ArgField("device", "device", "device", "number", _I32),
    ArgField("stream", "stream", "stream", "number", _I64),
    ArgField("grid", "grid", "grid", "dims"),
    ArgField("block", "block", "block", "dims"),
    ArgField("registers", "registers per thread", "registers_per_thread", "number", _I32),
    ArgField("shared_memory", "shared memory", "shared_memory_bytes", "number", _I64),
    ArgField("blocks_per_sm", "blocks per SM", "blocks_per_sm", "number", _F64),
    ArgField("warps_per_sm", "warps per SM", "warps_per_sm", "number", _F64),
    ArgField("occupancy", "est. achieved occupancy %", "est_occupancy_pct", "number", _F64),
    ArgField("nbytes", "bytes", "bytes", "number", _I64),
    ArgField("seq_number", "Sequence number", "seq_number", "number", _I64),
    ArgField("fwd_thread_id", "Fwd thread id", "fwd_thread_id", "number", _I64),
    ArgField("ev_idx", "Ev Idx", "ev_idx", "number", _I64),
    # the older name of the same index: used where "Ev Idx" is absent, its bad values counted as "Ev Idx"
    ArgField("ev_idx_old", "Profiler Event Index", "ev_idx", "number", _I64),
    # allocator events ([memory] instants of profile_memory=True): Bytes is signed (negative: a free)
    ArgField("mem_addr", "Addr", "mem_addr", "number", _I64),
    ArgField("mem_bytes", "Bytes", "mem_bytes", "number", _I64),
    ArgField("mem_total_allocated", "Total Allocated", "mem_total_allocated_bytes", "number", _I64),
    ArgField("mem_total_reserved", "Total Reserved", "mem_total_reserved_bytes", "number", _I64),
    ArgField("mem_device_type", "Device Type", "mem_device_type", "number", _I32),
    ArgField("mem_device_id", "Device Id", "mem_device_id", "number", _I32),
    ArgField("input_dims", "Input Dims", "input_dims", "json"),
    # PyTorch 1.8-1.9's name of the same shapes: used where "Input Dims" is absent
    ArgField("input_dims_old", "Input dims", "input_dims", "json"),
    ArgField("input_types", "Input type", "input_types", "json"),
    ArgField("input_strides", "Input Strides", "input_strides", "json"),
    ArgField("concrete_inputs", "Concrete Inputs", "concrete_inputs", "json"),
    # meta events (process_name, thread_name, process_labels, process_sort_index): the first present
    ArgField("name", "name", "text", "meta"),
    ArgField("labels", "labels", "text", "meta"),
    ArgField("sort_index", "sort_index", "text", "meta"),
    # collectives (record_param_comms, NCCL kernels)
    ArgField("coll_name", "Collective name", "text", "collective"),
    ArgField("in_nelems", "In msg nelems", "text", "collective"),
    ArgField("out_nelems", "Out msg nelems", "text", "collective"),
    ArgField("group_size", "Group size", "text", "collective"),
    ArgField("dtype", "dtype", "text", "collective"),
    ArgField("pg_name", "Process Group Name", "text", "collective"),
    ArgField("pg_desc", "Process Group Description", "text", "collective"),
    ArgField("pg_ranks", "Process Group Ranks", "text", "collective"),
    ArgField("in_split", "In split size", "text", "collective"),
    ArgField("out_split", "Out split size", "text", "collective"),
    ArgField("rank", "Rank", "text", "collective"),
)

#: The columns filled from one ``number`` arg each (``device``/``stream`` are placement, ``ev_idx`` has two).
PLAIN_NUMBERS = tuple(f for f in ARG_FIELDS if f.read == "number" and f.column not in ("device", "stream", "ev_idx"))
#: Keys of the ``number`` args, as bytes: a ``null`` given for one of them is counted as a bad number.
NUMERIC_ARG_KEYS = frozenset(f.key.encode() for f in ARG_FIELDS if f.read == "number")
#: (attr, key) of the collective args, in the order their JSON text lists them.
COLLECTIVE_FIELDS = tuple((f.attr, f.key) for f in ARG_FIELDS if f.read == "collective")
#: Attributes of the meta args, in the order the first present one is taken.
META_FIELDS = tuple(f.attr for f in ARG_FIELDS if f.read == "meta")
#: Attributes of the ``dims`` and ``json`` args.
DIMS_FIELDS = tuple(f for f in ARG_FIELDS if f.read == "dims")
JSON_FIELDS = tuple(f for f in ARG_FIELDS if f.read == "json")

Raw = msgspec.Raw


def _struct_field(f: ArgField) -> tuple[str, Any, Any]:
    """A Struct field of ``f``: raw JSON text for ``json`` args (no decoding cost, kept as written), any
    value otherwise (numbers are ``Any`` so that "inf"/"N/A" never break a decode)."""
    if f.read == "json":
        return f.attr, Raw, msgspec.field(default=Raw(), name=f.key)
    return f.attr, Any, msgspec.field(default=None, name=f.key)


#: The ``args`` keys we keep (``ARG_FIELDS``), as a Struct the typed decoder fills.
Args = msgspec.defstruct("Args", [_struct_field(f) for f in ARG_FIELDS], gc=False, module=__name__)


class Event(msgspec.Struct, gc=False):
    """The event keys we keep; ``args`` as any JSON value (the loose decoder)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Raw = Raw()
    dur: Raw = Raw()
    id: Any = None
    args: Any = None


class EventTyped(Event, gc=False):
    """An event whose ``args`` is decoded into ``Args`` (the typed decoder)."""

    args: Args | None = None  # type: ignore[valid-type]


RUN_DEC = msgspec.json.Decoder(list[EventTyped])
ONE_DEC = msgspec.json.Decoder(EventTyped)
LOOSE_DEC = msgspec.json.Decoder(Event)  # args: Any
ANY_DEC = msgspec.json.Decoder()
NO_ARGS = Args()
ARGS_ATTRS = Args.__struct_fields__
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)
