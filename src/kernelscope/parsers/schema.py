"""The contract between parsers and storage: one flat Arrow schema of raw trace events.

Every parser (Kineto JSON, nsys SQLite, ...) yields ``pyarrow.RecordBatch``es of ``RAW_EVENTS`` plus a
metadata dict (``TraceMeta``). Parsers keep raw identifiers and derive nothing: storage splits the rows
into its tables by ``kind`` and derives every link (activity -> launch, launch -> leaf operator, leaf ->
top-level, graph flag, busy intervals) inside the ingest transaction.

Times: ``ts_ns``/``dur_ns`` are integer nanoseconds, exact (parsed from the decimal text, never via
float64 for large values). ``ts_ns`` is relative to ``TraceMeta.base_time_ns`` (0 when the trace's times
are already since the Unix epoch); storage adds the base. ``dur_ns`` may be 0, never null for 'X' events.

``kind`` is the normalised category:

==================  =========================================================================
kind                source categories (Kineto ``cat``; pre-1.12 names in brackets)
==================  =========================================================================
cpu_op              cpu_op [Operator]
annotation          user_annotation, and ProfilerStep#N (phases, not operators)
python              python_function
runtime             cuda_runtime [Runtime] (incl. hipLaunchKernel on ROCm)
driver              cuda_driver (cuLaunchKernel, Triton)
kernel              kernel [Kernel]
memcpy              gpu_memcpy [Memcpy]
memset              gpu_memset [Memset]
gpu_annotation      gpu_user_annotation
sync                cuda_sync
flow                ph 's'/'f'/'t' events (ac2g, async_cpu_to_gpu, async, fwdbwd): flow_id, flow_phase
meta                ph 'M' (process_name, thread_name, ...): the value in ``text``
instant             ph 'i'/'I' events, cpu_instant_event
other               anything else (overhead, Trace, cuda_event, ...): kept, never analysed
==================  =========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

KINDS = (
    "cpu_op",
    "annotation",
    "python",
    "runtime",
    "driver",
    "kernel",
    "memcpy",
    "memset",
    "gpu_annotation",
    "sync",
    "flow",
    "meta",
    "instant",
    "other",
)

#: GPU activities in the METRICS.md sense (never gpu_annotation or sync).
GPU_ACTIVITY_KINDS = ("kernel", "memcpy", "memset")
#: Host calls that can own a correlation id linking to GPU work.
LAUNCH_KINDS = ("runtime", "driver")

_str = pa.string()
_i64 = pa.int64()
_i32 = pa.int32()
_f64 = pa.float64()

RAW_EVENTS = pa.schema(
    [
        pa.field("seq", _i64, nullable=False),  # order in the file, 0-based, for stable ties
        pa.field("kind", _str, nullable=False),
        pa.field("cat", _str),  # raw category text as written
        pa.field("ph", _str),
        pa.field("name", _str),
        pa.field("pid", _i64),  # host: OS pid; GPU: as written (device index, maybe offset on ROCm)
        pa.field("tid", _i64),  # host: OS tid; GPU: stream
        pa.field("pid_text", _str),  # pid when it was not an integer ("Spans", "Traces")
        pa.field("ts_ns", _i64),  # relative to TraceMeta.base_time_ns
        pa.field("dur_ns", _i64),
        pa.field("correlation", _i64),  # args.correlation
        pa.field("external_id", _i64),  # args["External id"]
        pa.field("device", _i32),  # args.device (GPU events), else pid for GPU events
        pa.field("stream", _i64),  # args.stream (hex text parsed), else tid for GPU events
        pa.field("grid_x", _i32),
        pa.field("grid_y", _i32),
        pa.field("grid_z", _i32),
        pa.field("block_x", _i32),
        pa.field("block_y", _i32),
        pa.field("block_z", _i32),
        pa.field("registers_per_thread", _i32),
        pa.field("shared_memory_bytes", _i64),
        pa.field("blocks_per_sm", _f64),
        pa.field("warps_per_sm", _f64),
        pa.field("est_occupancy_pct", _f64),
        pa.field("bytes", _i64),  # memcpy/memset bytes
        pa.field("seq_number", _i64),  # args["Sequence number"] (forward/backward pairing)
        pa.field("fwd_thread_id", _i64),  # args["Fwd thread id"]
        pa.field("ev_idx", _i64),  # args["Ev Idx"] / ["Profiler Event Index"]
        pa.field("input_dims", _str),  # JSON text as written, e.g. "[[8, 16], [16]]"
        pa.field("input_types", _str),  # JSON text
        pa.field("input_strides", _str),  # JSON text
        pa.field("concrete_inputs", _str),  # JSON text
        # [memory] instants (profile_memory=True): args Addr, Bytes (signed: negative = free), the allocator's
        # running Total Allocated / Total Reserved after the event, Device Type (0 CPU, 1 CUDA), Device Id
        pa.field("mem_addr", _i64),
        pa.field("mem_bytes", _i64),
        pa.field("mem_total_allocated_bytes", _i64),
        pa.field("mem_total_reserved_bytes", _i64),
        pa.field("mem_device_type", _i32),
        pa.field("mem_device_id", _i32),
        pa.field("flow_id", _i64),  # flow events: id
        pa.field("flow_phase", _str),  # 's' | 'f' | 't'
        pa.field("text", _str),  # meta events: args.name; collectives: args as JSON text; else null
    ]
)


#: A worker's Parquet part of the staged events (parsers/kineto/parallel.py): ``RAW_EVENTS`` with ``seq`` counted
#: from 0 within the part, then ``part``, the part's number, which the staged view maps to its first ``seq``.
PART_EVENTS = RAW_EVENTS.append(pa.field("part", pa.int32(), nullable=False))


@dataclass(frozen=True)
class Part:
    """Rows a worker wrote to a Parquet file itself (``PART_EVENTS``), where a reader yields it in place of
    batches: they are the events ``seq_base`` .. ``seq_base + rows - 1`` of the trace, in file order."""

    path: str
    number: int
    rows: int
    seq_base: int


@dataclass
class TraceMeta:
    """What a trace says about itself, outside the event list. Filled in fully only after the last batch."""

    format: str  # "kineto" | "nsys" | ...
    base_time_ns: int = 0  # add to every ts_ns
    rank: int | None = None  # distributedInfo.rank; None -> storage stores 0 and notes it
    world_size: int | None = None
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] | None = None
    #: Top-level keys other than traceEvents (schemaVersion, displayTimeUnit, trace_id, ...), JSON-able.
    extra: dict[str, Any] = field(default_factory=dict)
    #: Counted, human-readable notes ("skipped 2 events with NaN ts", "repaired 3 unescaped quotes").
    warnings: list[str] = field(default_factory=list)
    #: Profiler's own notes about lost data (dropped CUPTI records, buffer overflows), verbatim.
    dropped_notes: list[str] = field(default_factory=list)
    events: int = 0  # rows yielded
    #: sha256 hex of the decompressed content (so .json and .json.gz twins hash alike).
    content_hash: str | None = None
    #: A file cut short and read with ``salvage=True``: {"at_byte": end of the last complete event kept,
    #: "read_bytes": (decompressed) bytes read, "events_kept", "gzip", "reason", "base_time_lost"}; else None.
    truncated: dict[str, Any] | None = None


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=RAW_EVENTS)
