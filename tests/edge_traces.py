"""Hand-made minimal Kineto traces, one per edge case, shared by the parser and storage tests.

Each builder is ``def NAME(tmp_path) -> Path``: it writes one small trace (text written by hand, so
invalid-JSON cases are exactly what they say) and returns its path. ``EDGE_CASES`` maps name -> builder for
traces that must parse; ``BAD_CASES`` maps name -> builder for inputs that must be refused with ParseError.
Times in the comments are what the parser must produce (ns, relative to baseTimeNanoseconds when present).
"""

from __future__ import annotations

import gzip
from pathlib import Path

HEAD = '{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132}],\n'
BASE = 1790857026000000000


def _write(tmp_path: Path, name: str, data: str | bytes, *, gz: bool = False) -> Path:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path = Path(tmp_path) / (name + (".json.gz" if gz else ".json"))
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def _trace(events: list[str], *, head: str = HEAD, tail: str = "") -> str:
    """Kineto layout: head keys, then traceEvents one event per chunk, then tail keys."""
    body = ",\n  ".join(events)
    return head + '  "traceEvents": [\n  ' + body + "\n  ]" + tail + "\n}\n"


def _base_tail() -> str:
    return f',\n  "traceName": "t.json",\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {BASE}'


# A launch + kernel pair, modern layout, times relative to BASE.
_OP = ('{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11, "ts": 4381781706609.561, '
       '"dur": 20.5, "args": {"External id": 5, "Sequence number": 3, "Fwd thread id": 0, "Ev Idx": 0, '
       '"Input Dims": [[8, 16], [16, 4]], "Input type": ["float", "float"], "Input Strides": [[16, 1], [4, 1]], '
       '"Concrete Inputs": ["", ""]}}')  # fmt: skip
_LAUNCH = ('{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, '
           '"ts": 4381781706610.000, "dur": 4.25, "args": {"External id": 5, "cbid": 211, "correlation": 100}}')
_KERNEL = ('{"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 4381781706620.100, '
           '"dur": 1.234, "args": {"External id": 5, "queued": 0, "device": 0, "context": 1, "stream": 7, '
           '"correlation": 100, "registers per thread": 32, "shared memory": 1024, "blocks per SM": 0.5, '
           '"warps per SM": 2.0, "grid": [64, 2, 1], "block": [128, 1, 1], "est. achieved occupancy %": 12}}')  # fmt: skip


def base_time_after_events(tmp_path):
    """torch <= 2.6: baseTimeNanoseconds after traceEvents. op ts_ns 4381781706609561, kernel dur 1234."""
    return _write(tmp_path, "base_after", _trace([_OP, _LAUNCH, _KERNEL], tail=_base_tail()))


def device_properties_after_events(tmp_path):
    """A writer that puts keys holding arrays of objects after traceEvents (json.dump of a dict built with
    traceEvents first): eight GPUs' ``deviceProperties`` after the array, their ``}, {`` looking like event
    boundaries and their ']' like its end. Same rows as base_time_after_events."""
    gpus = ", ".join(f'{{"id": {i}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912}}'
                     for i in range(8))
    tail = f',\n  "deviceProperties": [{gpus}],\n  "distributedInfo": {{"rank": 0, "world_size": 1}}' + _base_tail()
    return _write(tmp_path, "props_after", _trace([_OP, _LAUNCH, _KERNEL], head='{\n  "schemaVersion": 1,\n',
                                                  tail=tail))


def base_time_before_events(tmp_path):
    """torch >= 2.7: baseTimeNanoseconds in the head. Same rows as base_time_after_events."""
    head = HEAD + f'  "baseTimeNanoseconds": {BASE},\n  "displayTimeUnit": "ms",\n'
    return _write(tmp_path, "base_before", _trace([_OP, _LAUNCH, _KERNEL], head=head))


def epoch_float_ts(tmp_path):
    """Fractional µs since the epoch, no base: kernel ts 1700000000000000.123 -> 1700000000000000123 ns,
    dur 1.234 -> 1234 ns (float64 would be off by up to ~125 ns)."""
    ev = [
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
        '"ts": 1700000000000000.001, "dur": 3.999, "args": {"correlation": 9}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1700000000000000.123, '
        '"dur": 1.234, "args": {"device": 0, "stream": 7, "correlation": 9}}',
    ]
    return _write(tmp_path, "epoch_float", _trace(ev, head="{\n"))


def int_us_ts(tmp_path):
    """Older torch: integer µs since the epoch. ts 1600000000000000 -> 1600000000000000000, dur 5 -> 5000."""
    ev = [
        '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1600000000000000, '
        '"dur": 5, "args": {"External id": 1}}',
        '{"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7, "ts": 1600000000000010, '
        '"dur": 0, "args": {"device": 0, "stream": 7, "correlation": 2}}',
    ]
    return _write(tmp_path, "int_us", _trace(ev, head='{\n  "schemaVersion": 1,\n'))


def distributed_info(tmp_path):
    """distributedInfo: rank 3 of 8."""
    head = HEAD + ('  "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8, "pg_count": 1, '
                   '"pg_config": [], "nccl_version": "2.21.5"},\n')  # fmt: skip
    return _write(tmp_path, "dist", _trace([_OP, _LAUNCH, _KERNEL], head=head, tail=_base_tail()))


def no_distributed_info(tmp_path):
    """No distributedInfo: rank and world_size None (storage stores rank 0), never an error."""
    return _write(tmp_path, "nodist", _trace([_OP], tail=_base_tail()))


def cpu_only(tmp_path):
    """CPU-only trace: no deviceProperties, no GPU events; two ops and a ProfilerStep."""
    ev = [
        '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 5, "tid": 5, '
        '"ts": 100.000, "dur": 50.000, "args": {"External id": 1}}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 5, "tid": 5, "ts": 110.000, "dur": 3.000, '
        '"args": {"External id": 2}}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::clamp_min", "pid": 5, "tid": 5, "ts": 111.000, '
        '"dur": 1.500, "args": {"External id": 3}}',
    ]
    return _write(tmp_path, "cpu_only", _trace(ev, head="{\n", tail=_base_tail()))


def cuda_driver_triton(tmp_path):
    """torch.compile: Triton kernel launched by cuLaunchKernel (cuda_driver -> kind driver)."""
    ev = [
        '{"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 1, "tid": 1, "ts": 10.000, '
        '"dur": 5.093, "args": {"External id": 7, "cbid": 307, "correlation": 179}}',
        '{"ph": "X", "cat": "kernel", "name": "triton_poi_fused_add_0", "pid": 0, "tid": 7, "ts": 20.000, '
        '"dur": 2.000, "args": {"External id": 7, "device": 0, "stream": 7, "correlation": 179, '
        '"grid": [16, 1, 1], "block": [256, 1, 1]}}',
    ]
    return _write(tmp_path, "triton", _trace(ev, tail=_base_tail()))


def cuda_graph(tmp_path):
    """One cudaGraphLaunch correlation (300) covering three kernels."""
    ev = [
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 10.000, '
        '"dur": 8.000, "args": {"External id": 2, "correlation": 300}}',
    ] + [
        f'{{"ph": "X", "cat": "kernel", "name": "g{i}", "pid": 0, "tid": 7, "ts": {20 + i}.000, "dur": 0.500, '
        f'"args": {{"device": 0, "stream": 7, "correlation": 300, "External id": 2}}}}'
        for i in range(3)
    ]
    return _write(tmp_path, "graph", _trace(ev, tail=_base_tail()))


def rocm_hip(tmp_path):
    """ROCm: hipLaunchKernel under cuda_runtime; GPU pid 4 offset by CPU agents, args.device 1; stream '0x1a'."""
    ev = [
        '{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 77, "tid": 77, "ts": 10.000, '
        '"dur": 6.000, "args": {"External id": 3, "correlation": 41, "grid": [1024, 1, 1], "block": [256, 1, 1]}}',
        '{"ph": "X", "cat": "kernel", "name": "Cijk_Ailk_Bljk", "pid": 4, "tid": 26, "ts": 30.000, '
        '"dur": 9.000, "args": {"device": 1, "stream": "0x1a", "correlation": 41}}',
        '{"ph": "X", "cat": "kernel", "name": "elementwise", "pid": 4, "tid": 5, "ts": 40.000, "dur": 1.000, '
        '"args": {"correlation": 42}}',
    ]
    return _write(tmp_path, "rocm", _trace(ev, tail=_base_tail()))


def pre_1_12_categories(tmp_path):
    """torch < 1.12 names: Operator, Runtime, Kernel, Memcpy, Memset; flow cat 'async';
    'Profiler Event Index' for Ev Idx; integer epoch µs."""
    ev = [
        '{"ph": "X", "cat": "Operator", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 1600000000000100, '
        '"dur": 30, "args": {"External id": 9, "Profiler Event Index": 4}}',
        '{"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 1600000000000105, '
        '"dur": 10, "args": {"correlation": 12, "external id": 9}}',
        '{"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, '
        '"ts": 1600000000000120, "dur": 4, "args": {"device": 0, "stream": 7, "correlation": 12, "bytes": 4096}}',
        '{"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 1600000000000130, '
        '"dur": 1, "args": {"device": 0, "stream": 7, "correlation": 13, "bytes": 512}}',
        '{"ph": "X", "cat": "Kernel", "name": "old_kernel", "pid": 0, "tid": 7, "ts": 1600000000000140, '
        '"dur": 2, "args": {"device": 0, "stream": 7, "correlation": 14}}',
        '{"ph": "s", "id": 12, "pid": 1, "tid": 1, "ts": 1600000000000105, "cat": "async", "name": "launch"}',
        '{"ph": "f", "id": 12, "pid": 0, "tid": 7, "ts": 1600000000000120, "cat": "async", "name": "launch", '
        '"bp": "e"}',
        '{"ph": "X", "cat": "Operator", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 1600000000000000, '
        '"dur": 500, "args": {}}',
    ]
    return _write(tmp_path, "pre112", _trace(ev, head="{\n"))


def flows_variants(tmp_path):
    """Flows: ac2g s/f, torch 1.13 async_cpu_to_gpu, fwdbwd s/f, a 't' step and a hex-string id."""
    ev = [
        '{"ph": "s", "id": 100, "pid": 1, "tid": 1, "ts": 10.000, "cat": "ac2g", "name": "ac2g"}',
        '{"ph": "f", "id": 100, "pid": 0, "tid": 7, "ts": 20.000, "cat": "ac2g", "name": "ac2g", "bp": "e"}',
        '{"ph": "s", "id": 101, "pid": 1, "tid": 1, "ts": 11.000, "cat": "async_cpu_to_gpu", "name": "async_gpu"}',
        '{"ph": "t", "id": 101, "pid": 1, "tid": 1, "ts": 12.000, "cat": "async_cpu_to_gpu", "name": "async_gpu"}',
        '{"ph": "f", "id": 101, "pid": 0, "tid": 7, "ts": 21.000, "cat": "async_cpu_to_gpu", "name": "async_gpu"}',
        '{"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 5.000, "cat": "fwdbwd", "name": "fwdbwd"}',
        '{"ph": "f", "id": 1, "pid": 1, "tid": 2, "ts": 50.000, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"}',
        '{"ph": "s", "id": "0x1f", "pid": 1, "tid": 1, "ts": 13.000, "cat": "ac2g", "name": "ac2g"}',
    ]
    return _write(tmp_path, "flows", _trace(ev, tail=_base_tail()))


def python_functions(tmp_path):
    """with_stack: three python_function events and one cpu_op (python_functions=False keeps 1 row)."""
    ev = [
        '{"ph": "X", "cat": "python_function", "name": "train.py(10): main", "pid": 1, "tid": 1, '
        '"ts": 1.000, "dur": 100.000, "args": {"Python parent id": null, "Python id": 1, "Ev Idx": 0}}',
        '{"ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1500): _call_impl", '
        '"pid": 1, "tid": 1, "ts": 2.000, "dur": 50.000, "args": {"Python parent id": 1, "Python id": 2}}',
        '{"ph": "X", "cat": "python_function", "name": "<built-in method mm>", "pid": 1, "tid": 1, '
        '"ts": 3.000, "dur": 10.000, "args": {"Python parent id": 2, "Python id": 3}}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 3.500, "dur": 9.000, '
        '"args": {"External id": 4}}',
    ]
    return _write(tmp_path, "pyfunc", _trace(ev, tail=_base_tail()))


def multi_stream_multi_device(tmp_path):
    """Kernels on (device 0, stream 7), (device 0, stream 13), (device 1, stream 7); a memcpy on dev 1."""
    ev = [
        '{"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 10.000, "dur": 1.000, '
        '"args": {"device": 0, "stream": 7, "correlation": 1}}',
        '{"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 13, "ts": 10.500, "dur": 1.000, '
        '"args": {"device": 0, "stream": 13, "correlation": 2}}',
        '{"ph": "X", "cat": "kernel", "name": "c", "pid": 1, "tid": 7, "ts": 10.250, "dur": 1.000, '
        '"args": {"device": 1, "stream": 7, "correlation": 3}}',
        '{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 1, "tid": 7, '
        '"ts": 12.000, "dur": 1.088, "args": {"device": 1, "stream": 7, "correlation": 4, "bytes": 131072, '
        '"memory bandwidth (GB/s)": 120.47}}',
    ]
    return _write(tmp_path, "multi", _trace(ev, tail=_base_tail()))


def same_stream_overlap(tmp_path):
    """Two kernels on stream 7 that overlap (PDL): both kept as written."""
    ev = [
        '{"ph": "X", "cat": "kernel", "name": "first", "pid": 0, "tid": 7, "ts": 10.000, "dur": 5.000, '
        '"args": {"device": 0, "stream": 7, "correlation": 1}}',
        '{"ph": "X", "cat": "kernel", "name": "second", "pid": 0, "tid": 7, "ts": 13.000, "dur": 5.000, '
        '"args": {"device": 0, "stream": 7, "correlation": 2}}',
    ]
    return _write(tmp_path, "overlap", _trace(ev, tail=_base_tail()))


def inf_na_null_args(tmp_path):
    """Numeric args holding "inf", "N/A", null and "": read as null, counted in warnings."""
    ev = [
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.000, "dur": 1.000, '
        '"args": {"device": 0, "stream": 7, "correlation": 1, "registers per thread": null, '
        '"shared memory": "", "blocks per SM": "N/A", "warps per SM": 4.5, "est. achieved occupancy %": "inf", '
        '"grid": [1, 1, 1], "block": [32, 1, 1]}}',
    ]
    return _write(tmp_path, "infna", _trace(ev, tail=_base_tail()))


def unescaped_quote_name(tmp_path):
    """with_stack + dynamo: a name with unescaped quotes -> repaired to: f(x="a")."""
    ev = [
        '{"ph": "X", "cat": "python_function", "name": "f(x="a")", "pid": 1, "tid": 1, "ts": 1.000, '
        '"dur": 2.000}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.500, "dur": 1.000}',
    ]
    return _write(tmp_path, "quote", _trace(ev, tail=_base_tail()))


def raw_newline_name(tmp_path):
    """A python_function name with a raw newline and tab inside the string -> repaired to 'a\\nb\\tc'."""
    ev = [
        '{"ph": "X", "cat": "python_function", "name": "a\nb\tc", "pid": 1, "tid": 1, "ts": 1.000, "dur": 2.000}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.500, "dur": 1.000}',
    ]
    return _write(tmp_path, "newline", _trace(ev, tail=_base_tail()))


def windows_backslash(tmp_path):
    """Windows paths with single back-slashes (invalid escapes): name reads C:\\Users\\me\\work\\model.py(3): f.
    Segments that happen to be valid escapes (\\t, \\n) cannot be told apart and decode as such."""
    ev = [
        '{"ph": "X", "cat": "python_function", "name": "C:\\Users\\me\\work\\model.py(3): f", "pid": 1, "tid": 1, '
        '"ts": 1.000, "dur": 2.000}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.500, "dur": 1.000}',
    ]
    return _write(tmp_path, "winpath", _trace(ev, tail=_base_tail()))


def non_utf8_name(tmp_path):
    """A Latin-1 byte (0xE9) in a name: replaced by U+FFFD, counted."""
    text = _trace(
        [
            '{"ph": "X", "cat": "cpu_op", "name": "caf@", "pid": 1, "tid": 1, "ts": 1.000, "dur": 2.000}',
            '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.500, "dur": 1.000}',
        ],
        tail=_base_tail(),
    )
    return _write(tmp_path, "latin1", text.encode("utf-8").replace(b"caf@", b"caf\xe9"))


def comma_decimal(tmp_path):
    """A locale that writes decimal commas: "ts": 1,500 and "dur": 2,250 -> 1500 ns and 2250 ns."""
    ev = [
        '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1,500, "dur": 2,250}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 5.000, "dur": 1.000}',
    ]
    return _write(tmp_path, "comma", _trace(ev, tail=_base_tail()))


def string_pids(tmp_path):
    """pids "Spans", "Traces" and "" -> pid null, pid_text kept; overhead pid -1 stays -1."""
    ev = [
        '{"ph": "X", "cat": "Trace", "ts": 1.000, "dur": 100.000, "pid": "Spans", "tid": "PyTorch Profiler", '
        '"name": "PyTorch Profiler (0)", "args": {"Op count": 0}}',
        '{"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", '
        '"tid": "Trace PyTorch Profiler", "ts": 1.000}',
        '{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 101.000}',
        '{"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0, "ts": 5.000, '
        '"dur": 3.000}',
    ]
    return _write(tmp_path, "strpid", _trace(ev, tail=_base_tail()))


def meta_events(tmp_path):
    """ph M events: process_name / thread_name / thread_sort_index -> kind meta, value in text."""
    ev = [
        '{"name": "process_name", "ph": "M", "ts": 1.000, "pid": 464, "tid": 0, "args": {"name": "python3"}}',
        '{"name": "thread_name", "ph": "M", "ts": 1.000, "pid": 464, "tid": 487, '
        '"args": {"name": "thread 487 (pt_autograd_0)"}}',
        '{"name": "thread_sort_index", "ph": "M", "ts": 1.000, "pid": 464, "tid": 487, '
        '"args": {"sort_index": 487}}',
    ]
    return _write(tmp_path, "meta", _trace(ev, tail=_base_tail()))


def collectives(tmp_path):
    """record_param_comms and an NCCL kernel carrying collective args -> text holds them as JSON."""
    coll = ('"Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, '
            '"Group size": 8, "dtype": "Float", "In split size": "[]", "Out split size": "[]", '
            '"Process Group Name": "0", "Process Group Description": "default_pg", '
            '"Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]", "Rank": 3')  # fmt: skip
    ev = [
        '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 1.000, '
        f'"dur": 5.000, "args": {{"External id": 2, {coll}}}}}',
        '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 20, '
        f'"ts": 3.000, "dur": 40.000, "args": {{"device": 0, "stream": 20, "correlation": 7, {coll}}}}}',
    ]
    return _write(tmp_path, "coll", _trace(ev, tail=_base_tail()))


def profiler_steps(tmp_path):
    """ProfilerStep#N: user_annotation (modern) and cpu_op (older) both -> annotation; gpu_user_annotation
    -> gpu_annotation; cuda_sync -> sync; cuda_event and cpu_instant_event kinds."""
    ev = [
        '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1, "ts": 1.000, '
        '"dur": 10.000}',
        '{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#8", "pid": 1, "tid": 1, "ts": 12.000, "dur": 10.000}',
        '{"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": 2.000, '
        '"dur": 3.000, "args": {"External id": 3}}',
        '{"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 6.000, "dur": 1.000, '
        '"args": {"device": 0, "stream": 7, "correlation": 9}}',
        '{"ph": "X", "cat": "cuda_event", "name": "cudaEventRecord", "pid": 1, "tid": 1, "ts": 7.000, '
        '"dur": 0.100}',
        '{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 8.000, "s": "t", '
        '"args": {"Bytes": 512}}',
    ]
    return _write(tmp_path, "steps", _trace(ev, tail=_base_tail()))


def zero_dur_and_missing_dur(tmp_path):
    """dur 0 stays 0; an 'X' event with no dur reads as 0 with a warning."""
    ev = [
        '{"ph": "X", "cat": "kernel", "name": "k0", "pid": 0, "tid": 7, "ts": 10.000, "dur": 0, '
        '"args": {"device": 0, "stream": 7, "correlation": 1}}',
        '{"ph": "X", "cat": "cpu_op", "name": "nodur", "pid": 1, "tid": 1, "ts": 11.000}',
    ]
    return _write(tmp_path, "zerodur", _trace(ev, tail=_base_tail()))


def dropped_records(tmp_path):
    """The profiler's own notes about lost data, as a top-level key and as an instant event: kept verbatim."""
    ev = [
        '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.000, "dur": 1.000}',
        '{"name": "CUPTI dropped 12 activity records (buffer overflow)", "ph": "i", "s": "g", "pid": "Traces", '
        '"tid": "", "ts": 2.000}',
    ]
    tail = _base_tail() + ',\n  "cupti_dropped_records": 12'
    return _write(tmp_path, "dropped", _trace(ev, tail=tail))


def tricky_strings(tmp_path):
    """Names that contain the event-boundary text '}, {' and ']' and an escaped quote: must not break the
    cutter (tests read it with tiny blocks)."""
    ev = [
        '{"ph": "X", "cat": "cpu_op", "name": "weird}, {\\"ph\\": ] name", "pid": 1, "tid": 1, "ts": 1.000, '
        '"dur": 1.000}',
        '{"ph": "X", "cat": "cpu_op", "name": "a}, {b", "pid": 1, "tid": 1, "ts": 2.000, "dur": 1.000}',
        '{"ph": "X", "cat": "cpu_op", "name": "end ]}", "pid": 1, "tid": 1, "ts": 3.000, "dur": 1.000}',
    ]
    return _write(tmp_path, "tricky", _trace(ev, tail=_base_tail()))


def empty_events(tmp_path):
    """traceEvents: [] -> no rows, meta still read."""
    return _write(tmp_path, "noevents", _trace([], tail=_base_tail()).replace("[\n  \n  ]", "[]"))


def gzip_twin(tmp_path):
    """The base_time_after_events trace, gzip-compressed (same content hash as the plain file)."""
    return _write(tmp_path, "base_after", _trace([_OP, _LAUNCH, _KERNEL], tail=_base_tail()), gz=True)


EDGE_CASES = {
    f.__name__: f
    for f in (
        base_time_after_events, device_properties_after_events, base_time_before_events, epoch_float_ts,
        int_us_ts, distributed_info, no_distributed_info, cpu_only, cuda_driver_triton, cuda_graph, rocm_hip, pre_1_12_categories,
        flows_variants, python_functions, multi_stream_multi_device, same_stream_overlap, inf_na_null_args,
        unescaped_quote_name, raw_newline_name, windows_backslash, non_utf8_name, comma_decimal, string_pids,
        meta_events, collectives, profiler_steps, zero_dur_and_missing_dur, dropped_records, tricky_strings,
        empty_events, gzip_twin,
    )
}  # fmt: skip


# --------------------------------------------------------------------------------------------- bad inputs

_GOOD = _trace([_OP, _LAUNCH, _KERNEL], tail=_base_tail())


def _bad(name: str, data: str | bytes, *, gz: bool = False):
    def build(tmp_path) -> Path:
        return _write(tmp_path, "bad_" + name, data, gz=gz)

    build.__name__ = name
    return build


def _cut_at(marker: str, offset: int = 0) -> str:
    i = _GOOD.index(marker) + offset
    return _GOOD[:i]


def _corrupt_gzip() -> bytes:
    z = bytearray(gzip.compress(_GOOD.encode()))
    for i in range(12, 40):
        z[i] ^= 0x5A
    return bytes(z)


def _bad_crc() -> bytes:
    z = bytearray(gzip.compress(_GOOD.encode()))
    z[-8] ^= 0xFF
    return bytes(z)


def _event_trace(ev: str) -> str:
    return _trace([_OP, ev, _KERNEL], tail=_base_tail())


BAD_CASES = {
    b.__name__: b
    for b in (
        _bad("empty_file", b""),
        _bad("whitespace_only", b" \n\t\n"),
        _bad("empty_gzip", b"", gz=True),
        _bad("corrupt_gzip", _corrupt_gzip()),
        _bad("truncated_gzip", gzip.compress(_GOOD.encode())[:-30]),
        _bad("gzip_bad_crc", _bad_crc()),
        _bad("gzip_header_only", gzip.compress(_GOOD.encode())[:10]),
        _bad("truncated_in_head", _cut_at('"deviceProperties"', 10)),
        _bad("truncated_after_key", _cut_at('"traceEvents"', 15)),
        _bad("truncated_in_first_event", _cut_at('"aten::mm"', 4)),
        _bad("truncated_in_last_event", _cut_at('"gemm_kernel"', 30)),
        _bad("truncated_between_events", _cut_at('{"ph": "X", "cat": "kernel"')),
        _bad("truncated_after_array", _cut_at(',\n  "traceName"')),
        _bad("truncated_in_tail", _cut_at('"baseTimeNanoseconds"', 10)),
        _bad("truncated_before_closing_brace", _GOOD.rstrip()[:-1]),
        _bad("root_string", '"traceEvents"'),
        _bad("root_number", "42\n"),
        _bad("no_trace_events", '{"schemaVersion": 1, "displayTimeUnit": "ms"}'),
        _bad("trace_events_object", '{"traceEvents": {"ph": "X"}}'),
        _bad("trace_events_null", '{"traceEvents": null}'),
        _bad("trace_events_string", '{"traceEvents": "[]"}'),
        _bad("nan_ts", _event_trace('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": NaN, "dur": 1}')),
        _bad("infinity_dur", _event_trace('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": Infinity}')),
        _bad("string_nan_ts", _event_trace('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": "NaN", "dur": 1}')),
        _bad("object_ts", _event_trace('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": {"v": 1}, "dur": 1}')),
        _bad("x_without_ts", _event_trace('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "dur": 1}')),
        _bad("garbage_event", _event_trace('{"ph": "X", "cat": :: "cpu_op" ,, }')),
        _bad("event_not_object", _event_trace("12345")),
        _bad("binary_file", bytes(range(256)) * 4),
        _bad("png_file", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64),
        _bad("sqlite_file", b"SQLite format 3\x00" + b"\x00" * 100),
        _bad("utf16_file", _GOOD.encode("utf-16")),
        _bad("bad_base_time", _GOOD.replace(f'"baseTimeNanoseconds": {BASE}', '"baseTimeNanoseconds": "soon"')),
        _bad("unterminated_string_at_end", _GOOD[: _GOOD.index('"gemm_kernel"') + 5]),
        _bad("trailing_garbage", _GOOD + "garbage"),
        _bad("head_not_json", '{"schemaVersion": 1 2 3, "traceEvents": []}'),
    )
}  # fmt: skip


def probe_counts_by_kind(events: list[dict]) -> dict[str, int]:
    """Independent (stdlib) kind count for a parsed traceEvents list, per the table in parsers/schema.py."""
    cat_kind = {
        "cpu_op": "cpu_op", "user_annotation": "annotation", "python_function": "python",
        "cuda_runtime": "runtime", "cuda_driver": "driver", "kernel": "kernel", "gpu_memcpy": "memcpy",
        "gpu_memset": "memset", "gpu_user_annotation": "gpu_annotation", "cuda_sync": "sync",
        "cpu_instant_event": "instant",
    }  # fmt: skip
    out: dict[str, int] = {}
    for e in events:
        ph = e.get("ph")
        if ph == "M":
            k = "meta"
        elif ph in ("s", "f", "t"):
            k = "flow"
        elif ph in ("i", "I"):
            k = "instant"
        else:
            k = cat_kind.get(e.get("cat"), "other")
            if str(e.get("name", "")).startswith("ProfilerStep#") and k == "cpu_op":
                k = "annotation"
        out[k] = out.get(k, 0) + 1
    return out


__all__ = ["EDGE_CASES", "BAD_CASES", "probe_counts_by_kind"]
