"""The hostile-input corpus: inputs nobody meant well, each with what the real CLI must answer.

Each case is ``name -> Case(family, build)``; ``build(tmp, ctx)`` writes its input under ``tmp`` and returns a
``Spec``: the CLI arguments (``{db}`` stands for the store the case runs against), the exit code, text the one
stderr line must contain (the input's path, or what was wrong), a regex for the reason, and bounds on wall time
and peak memory. ``tests/test_hostile.py`` runs every case through ``tests/hostile_harness.py`` (one forked
child per case: real file descriptors, real exit code, its own peak RSS) and checks that the store's row counts
(every table) are unchanged, or for a store file that is itself the input, that its bytes are.

Families: kineto (bad JSON, wrong types, duplicates, nesting, sizes), gzip/binary, paths (FIFO, symlink loop,
devices, empty directories), nsys (SQLite variants), ncu (CSV variants), run (run.json and telemetry), store
(damaged or foreign store files). ``tolerated`` cases are odd but readable input that must be ingested (exit 0,
no stderr, one more trace) rather than refused.

Sizes: the inputs that are 1 GiB decompressed are written as sparse files or as gzip files of repeated
members (a few MB on disk), so building the corpus takes a few seconds.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import edge_traces as et

ROOT = Path(__file__).resolve().parents[1]
NSIGHT = ROOT / "sample_traces" / "nsight"
RUN = ROOT / "sample_traces" / "compiled"

#: Peak RSS growth (MB) a case may add over the harness's own footprint: no case may grow with its input.
MEM_MB = 400
#: The 1 GiB inputs: a small multiple of the 16 MB per-event cap (kineto.MAX_EVENT_BYTES), not of the file.
BIG_MEM_MB = 300
TIME_S = 30.0
GiB = 1 << 30
MiB = 1 << 20


@dataclass
class Spec:
    argv: list[str]
    names: str  # the stderr line must contain this
    code: int = 1
    match: str = ""  # regex the stderr line must match
    own_db: Path | None = None  # the store file is the input: its bytes must not change
    timeout_s: float = TIME_S
    mem_mb: int = MEM_MB
    env: dict = field(default_factory=dict)
    tolerated: bool = False  # readable: exit 0, no stderr, exactly one more trace


@dataclass
class Ctx:
    seed: Path  # a store with one trace (sample_traces/compiled), never written by a case


@dataclass
class Case:
    family: str
    build: Callable[[Path, Ctx], Spec]


CASES: dict[str, Case] = {}


def case(family: str, name: str | None = None):
    def deco(fn):
        CASES[name or fn.__name__] = Case(family, fn)
        return fn
    return deco


def ingest(path: Path, *, match: str = "", code: int = 1, names: str | None = None, **kw) -> Spec:
    return Spec(["ingest", str(path), "--db", "{db}"], names if names is not None else str(path), code, match, **kw)


def write(tmp: Path, name: str, data: bytes | str) -> Path:
    p = tmp / name
    p.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return p


def gz_members(tmp: Path, name: str, head: bytes, fill: bytes, times: int, tail: bytes) -> Path:
    """A gzip file of members head, fill x times, tail (gzip readers concatenate members): 1 GiB of text
    decompressed from a few MB on disk."""
    one = gzip.compress(fill, compresslevel=9)
    p = tmp / name
    with open(p, "wb") as f:
        f.write(gzip.compress(head))
        for _ in range(times):
            f.write(one)
        f.write(gzip.compress(tail))
    return p


EV = ('{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.000, "dur": 2.000, '
      '"args": {"External id": 1}}')


# ----------------------------------------------------------------------------------------- kineto: existing

def _edge(name):
    def build(tmp, ctx):
        return ingest(et.BAD_CASES[name](tmp))
    return build


for _name in et.BAD_CASES:
    CASES[f"kineto_{_name}"] = Case("kineto", _edge(_name))


@case("kineto")
def kineto_duplicate_correlations(tmp, ctx):
    """Two runtime calls sharing correlation 7 (two processes' traces merged into one file)."""
    from storage.kineto_build import kern, op, rt, write_trace

    return ingest(write_trace(tmp / "duplicate_correlations.json", [
        op("aten::add", 0, 50, 1), rt("cudaLaunchKernel", 10, 5, 7, 1), kern("k", 20, 3, 7, 1),
        op("aten::mul", 100, 50, 2), rt("cudaLaunchKernel", 110, 5, 7, 2), kern("k2", 120, 3, 7, 2),
    ]))


# ------------------------------------------------------------------------------------------ kineto: sizes

_NAME_HEAD = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "'
_NAME_TAIL = b'", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'
_CAP = r"runs past 16 MB without ending"


@case("size")
def huge_name_1gib_gzip(tmp, ctx):
    """One event whose name is 1 GiB of 'a' (the issue's case grew RSS to 8.3 GB)."""
    p = gz_members(tmp, "huge_name.json.gz", _NAME_HEAD, b"a" * (16 * MiB), 64, _NAME_TAIL)
    return ingest(p, match=_CAP, mem_mb=BIG_MEM_MB)


@case("size")
def huge_name_1gib_sparse(tmp, ctx):
    """The same in a plain 1 GiB file (sparse: NUL bytes, no disk)."""
    p = tmp / "huge_name_sparse.json"
    with open(p, "wb") as f:
        f.write(_NAME_HEAD)
        f.seek(GiB, 1)
        f.write(_NAME_TAIL)
    return ingest(p, match=_CAP, mem_mb=BIG_MEM_MB)


@case("size")
def huge_name_64mib_plain(tmp, ctx):
    p = write(tmp, "huge_name_64m.json", _NAME_HEAD + b"b" * (64 * MiB) + _NAME_TAIL)
    return ingest(p, match=_CAP, mem_mb=BIG_MEM_MB)


@case("size")
def huge_args_string_1gib_gzip(tmp, ctx):
    head = (b'{"traceEvents": [' + EV.encode() + b', {"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, '
            b'"ts": 5, "dur": 1, "args": {"Concrete Inputs": ["')
    p = gz_members(tmp, "huge_args.json.gz", head, b"7" * (16 * MiB), 64, b'"]}}]}')
    return ingest(p, match=_CAP, mem_mb=BIG_MEM_MB)


@case("size")
def huge_head_string_gzip(tmp, ctx):
    """80 MiB before the traceEvents key: refused at the 64 MB head limit."""
    p = gz_members(tmp, "huge_head.json.gz", b'{"x": "', b"h" * (16 * MiB), 5, b'", "traceEvents": []}')
    return ingest(p, match="traceEvents", mem_mb=BIG_MEM_MB)


@case("size")
def huge_tail_string_gzip(tmp, ctx):
    p = gz_members(tmp, "huge_tail.json.gz", b'{"traceEvents": [' + EV.encode() + b'], "traceName": "',
                   b"t" * (16 * MiB), 16, b'"}')
    return ingest(p, match=_CAP, mem_mb=BIG_MEM_MB)


@case("size")
def whitespace_after_key_80mib_gzip(tmp, ctx):
    """80 MiB of spaces between the traceEvents key and a value that is not an array: read block by block."""
    p = gz_members(tmp, "ws_key.json.gz", b'{"traceEvents":', b" " * (16 * MiB), 5, b"7}")
    return ingest(p, match="not an array", mem_mb=BIG_MEM_MB)


@case("size")
def whitespace_between_events_64mib_gzip(tmp, ctx):
    p = gz_members(tmp, "ws_events.json.gz", b'{"traceEvents": [' + EV.encode(), b" " * (16 * MiB), 4,
                   b", " + EV.encode() + b"]}")
    return ingest(p, match=_CAP, mem_mb=BIG_MEM_MB)


@case("size")
def gzip_bomb_of_nuls_1gib(tmp, ctx):
    p = gz_members(tmp, "nul_bomb.json.gz", b"", b"\x00" * (16 * MiB), 64, b"")
    return ingest(p, match="not JSON|not a trace", mem_mb=BIG_MEM_MB)


@case("size")
def ts_with_100k_digits(tmp, ctx):
    ev = '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1' + "0" * 100_000 + ', "dur": 1}'
    return ingest(write(tmp, "ts_digits.json", '{"traceEvents": [' + ev + "]}"), match=r"\bts\b")


@case("size")
def dur_1e400(tmp, ctx):
    ev = '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 1e400}'
    return ingest(write(tmp, "dur_1e400.json", '{"traceEvents": [' + ev + "]}"), match=r"\bdur\b")


# ------------------------------------------------------------------------------------- kineto: nesting

def _nested(depth: int, leaf: str = "1") -> str:
    return '{"a": ' * depth + leaf + "}" * depth


@case("nesting")
def args_nested_1500_deep(tmp, ctx):
    ev = '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": ' + _nested(1500) + "}"
    return ingest(write(tmp, "deep_args.json", '{"traceEvents": [' + EV + ", " + ev + "]}"), match="nested too deeply")


@case("nesting")
def input_dims_nested_100k_deep(tmp, ctx):
    ev = ('{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"Input Dims": '
          + "[" * 100_000 + "]" * 100_000 + "}}")
    return ingest(write(tmp, "deep_dims.json", '{"traceEvents": [' + ev + "]}"), match="nested too deeply")


@case("nesting")
def events_array_nested_5000_deep(tmp, ctx):
    return ingest(write(tmp, "deep_events.json", '{"traceEvents": [' + "[" * 5000 + "]" * 5000 + "]}"))


@case("nesting")
def head_nested_5000_deep(tmp, ctx):
    text = '{"deviceProperties": ' + _nested(5000) + ', "traceEvents": [' + EV + "]}"
    return ingest(write(tmp, "deep_head.json", text), match="nested too deeply|not valid JSON")


@case("nesting")
def tail_nested_5000_deep(tmp, ctx):
    text = '{"traceEvents": [' + EV + '], "distributedInfo": ' + _nested(5000) + "}"
    return ingest(write(tmp, "deep_tail.json", text), match="nested too deeply|not valid JSON")


@case("nesting")
def rank_head_nested_5000_deep_in_a_directory(tmp, ctx):
    """A directory walk peeks at each trace's distributedInfo to group ranks: that peek must not recurse."""
    d = tmp / "ranks"
    d.mkdir()
    p = write(d, "trace_rank0.json", '{"distributedInfo": ' + _nested(5000) + ', "traceEvents": [' + EV + "]}")
    return ingest(d, names=str(p), match="nested too deeply")


# ---------------------------------------------------------------------------------- kineto: duplicates

@case("duplicates")
def trace_events_twice_second_a_number(tmp, ctx):
    """The issue's case: exited 0 with an empty trace."""
    return ingest(write(tmp, "dup_events.json", '{"traceEvents": [], "traceEvents": 7}'), match="second \"traceEvents\"")


@case("duplicates")
def trace_events_twice_both_arrays(tmp, ctx):
    return ingest(write(tmp, "dup_events2.json", '{"traceEvents": [' + EV + '], "traceEvents": [' + EV + "]}"),
                  match="second \"traceEvents\"")


@case("duplicates")
def trace_events_number_then_array(tmp, ctx):
    return ingest(write(tmp, "dup_events3.json", '{"traceEvents": 7, "traceEvents": [' + EV + "]}"),
                  match="not an array")


@case("duplicates")
def base_time_in_head_and_tail_differ(tmp, ctx):
    text = ('{"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [' + EV
            + '], "baseTimeNanoseconds": 1800000000000000000}')
    return ingest(write(tmp, "dup_base.json", text), match="baseTimeNanoseconds.*twice")


@case("duplicates")
def base_time_twice_in_head(tmp, ctx):
    text = ('{"baseTimeNanoseconds": 1, "baseTimeNanoseconds": 2, "traceEvents": [' + EV + "]}")
    return ingest(write(tmp, "dup_base_head.json", text), match="baseTimeNanoseconds.*twice")


@case("duplicates")
def distributed_info_twice_in_tail(tmp, ctx):
    text = ('{"traceEvents": [' + EV + '], "distributedInfo": {"rank": 0, "world_size": 2}, '
            '"distributedInfo": {"rank": 1, "world_size": 2}}')
    return ingest(write(tmp, "dup_dist.json", text), match="distributedInfo.*twice")


@case("duplicates")
def device_properties_head_and_tail_differ(tmp, ctx):
    text = ('{"deviceProperties": [{"id": 0, "name": "A"}], "traceEvents": [' + EV
            + '], "deviceProperties": [{"id": 0, "name": "B"}]}')
    return ingest(write(tmp, "dup_devprops.json", text), match="deviceProperties.*twice")


# -------------------------------------------------------------------------- kineto: structure, encoding

@case("kineto")
def trace_events_a_number(tmp, ctx):
    return ingest(write(tmp, "te_number.json", '{"traceEvents": 7}'), match="not an array")


@case("kineto")
def trace_events_true(tmp, ctx):
    return ingest(write(tmp, "te_true.json", '{"traceEvents": true}'), match="not an array")


@case("kineto")
def root_null(tmp, ctx):
    return ingest(write(tmp, "root_null.json", "null"))


@case("kineto")
def root_true(tmp, ctx):
    return ingest(write(tmp, "root_true.json", "true"))


@case("kineto")
def trace_events_nested_in_other_key(tmp, ctx):
    return ingest(write(tmp, "nested_te.json", '{"data": {"traceEvents": [' + EV + "]}}"))


@case("kineto")
def only_open_brace(tmp, ctx):
    return ingest(write(tmp, "open_brace.json", "{"))


@case("kineto")
def unbalanced_array(tmp, ctx):
    return ingest(write(tmp, "unbalanced.json", '{"traceEvents": [}'))


@case("kineto")
def two_objects(tmp, ctx):
    return ingest(write(tmp, "two_objects.json", '{"traceEvents": [' + EV + ']}{"traceEvents": []}'))


@case("kineto")
def js_comment(tmp, ctx):
    return ingest(write(tmp, "comment.json", '{"traceEvents": [ // events\n' + EV + "]}"))


@case("kineto")
def single_quoted_json(tmp, ctx):
    return ingest(write(tmp, "single_quotes.json", "{'traceEvents': [{'ph': 'X', 'ts': 1, 'dur': 1}]}"))


@case("encoding")
def bom_only(tmp, ctx):
    return ingest(write(tmp, "bom_only.json", b"\xef\xbb\xbf"))


@case("encoding")
def bom_then_garbage(tmp, ctx):
    return ingest(write(tmp, "bom_garbage.json", b"\xef\xbb\xbfgarbage"))


@case("encoding")
def utf16le_without_bom(tmp, ctx):
    return ingest(write(tmp, "utf16le.json", et._GOOD.encode("utf-16-le")))


@case("encoding")
def utf32(tmp, ctx):
    return ingest(write(tmp, "utf32.json", et._GOOD.encode("utf-32")))


@case("encoding")
def invalid_utf8_outside_strings(tmp, ctx):
    return ingest(write(tmp, "bad_utf8.json", b'{"traceEvents": [\xff\xfe]}'))


@case("encoding")
def nul_bytes_only(tmp, ctx):
    return ingest(write(tmp, "nuls.json", b"\x00" * 4096))


@case("encoding")
def nul_between_tokens(tmp, ctx):
    return ingest(write(tmp, "nul_tokens.json", b'{"traceEvents": [\x00' + EV.encode() + b"]}"))


@case("encoding")
def nul_in_key(tmp, ctx):
    return ingest(write(tmp, "nul_key.json", b'{"trace\x00Events": [' + EV.encode() + b"]}"))


# ----------------------------------------------------------------- kineto: wrong types in the time fields

_K = ('{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": TS, "dur": DUR, '
      '"args": {"device": 0, "stream": 7, "correlation": 100}}')
_BAD_TIMES = {"string": '"12"', "object": '{"v": 1}', "list": "[1]", "true": "true", "null": "null",
              "huge": "1" + "0" * 30, "1e300": "1.5e300", "minus_1e30": "-1e30", "nan": "NaN", "infinity": "Infinity",
              "minus_infinity": "-Infinity"}


def _time_case(which: str, label: str, token: str):
    def build(tmp, ctx):
        ev = _K.replace("TS", token if which == "ts" else "20.1").replace("DUR", token if which == "dur" else "1.5")
        p = write(tmp, f"{which}_{label}.json", '{"traceEvents": [' + EV + ", " + ev + "]}")
        return ingest(p, match=rf"\b{which}\b|time")
    return build


for _which in ("ts", "dur"):
    for _label, _token in _BAD_TIMES.items():
        if _which == "ts" and _label in ("object", "nan"):
            continue  # already in edge_traces.BAD_CASES (object_ts, nan_ts)
        if _which == "dur" and _label == "infinity":
            continue  # edge_traces infinity_dur
        CASES[f"{_which}_{_label}"] = Case("types", _time_case(_which, _label, _token))


@case("types")
def base_time_huge(tmp, ctx):
    return ingest(write(tmp, "base_huge.json", '{"baseTimeNanoseconds": 1' + "0" * 30 + ', "traceEvents": [' + EV + "]}"),
                  match="baseTimeNanoseconds")


@case("types")
def base_time_object(tmp, ctx):
    return ingest(write(tmp, "base_obj.json", '{"baseTimeNanoseconds": {"ns": 1}, "traceEvents": [' + EV + "]}"),
                  match="baseTimeNanoseconds")


@case("types")
def base_time_float_nan_text(tmp, ctx):
    return ingest(write(tmp, "base_nan.json", '{"baseTimeNanoseconds": "NaN", "traceEvents": [' + EV + "]}"),
                  match="baseTimeNanoseconds")


# -------------------------------------------------------------- kineto: wrong types that are read as null

def _tolerated(name: str, ev: str):
    def build(tmp, ctx):
        return ingest(write(tmp, name + ".json", '{"traceEvents": [' + EV + ", " + ev + "]}"), code=0,
                      names="", tolerated=True)
    return build


_KT = ('{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20.1, "dur": 1.5, '
       '"args": {"device": DEV, "stream": STREAM, "correlation": CORR, "grid": GRID, "External id": EXT}}')
_ARGS_OK = {"DEV": "0", "STREAM": "7", "CORR": "100", "GRID": "[1, 1, 1]", "EXT": "5"}
for _key, _bad in {"DEV": ["1" + "0" * 30, "NaN"], "STREAM": ['"s7"'], "CORR": ['"abc"', "1" + "0" * 25, "Infinity"],
                   "GRID": ["[[1], 2]"]}.items():
    for _i, _val in enumerate(_bad):
        _ev = _KT
        for k, v in _ARGS_OK.items():
            _ev = _ev.replace(k, _val if k == _key else v)
        CASES[f"tolerated_arg_{_key.lower()}_{_i}"] = Case("tolerated", _tolerated(f"arg_{_key.lower()}_{_i}", _ev))
for _i, _ev in enumerate([
    '{"ph": "X", "cat": "cpu_op", "name": {"n": 1}, "pid": 1, "tid": 1, "ts": 3, "dur": 1}',
    '{"ph": "X", "cat": 7, "name": "n", "pid": [1], "tid": {"t": 1}, "ts": 3, "dur": 1}',
    '{"ph": 5, "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": [1, 2]}',
    '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": "text"}',
    '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": "1' + "0" * 30 + '", "tid": -1e30, "ts": 3, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1' + "0" * 30 + ', "tid": -1' + "0" * 30 + ', "ts": 3, "dur": 1}',
]):
    CASES[f"tolerated_field_{_i}"] = Case("tolerated", _tolerated(f"field_{_i}", _ev))


# ----------------------------------------------------------------------------------------- gzip, binary

@case("binary")
def bzip2_named_gz(tmp, ctx):
    import bz2

    return ingest(write(tmp, "bz2.json.gz", bz2.compress(et._GOOD.encode())))


@case("binary")
def xz_named_gz(tmp, ctx):
    import lzma

    return ingest(write(tmp, "xz.json.gz", lzma.compress(et._GOOD.encode())))


@case("binary")
def zstd_magic(tmp, ctx):
    return ingest(write(tmp, "zstd.json", b"\x28\xb5\x2f\xfd" + os.urandom(512)))


@case("binary")
def zip_file(tmp, ctx):
    import zipfile

    p = tmp / "trace.zip.json"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("trace.json", et._GOOD)
    return ingest(p)


@case("binary")
def gzip_of_random_bytes(tmp, ctx):
    return ingest(write(tmp, "gz_random.json.gz", gzip.compress(os.urandom(8192))))


@case("binary")
def gzip_member_then_garbage(tmp, ctx):
    return ingest(write(tmp, "gz_garbage.json.gz", gzip.compress(et._GOOD.encode()) + b"GARBAGE" * 10))


@case("binary")
def gzip_two_members_second_truncated(tmp, ctx):
    second = gzip.compress(b" " * 1000)
    return ingest(write(tmp, "gz_two.json.gz", gzip.compress(et._GOOD.encode()) + second[:-12]))


@case("binary")
def elf_executable(tmp, ctx):
    return ingest(write(tmp, "elf.json", Path(sys.executable).resolve().read_bytes()[:65536]))


@case("binary")
def random_bytes_1mib(tmp, ctx):
    return ingest(write(tmp, "random.json", os.urandom(MiB)))


# ------------------------------------------------------------------------------------------------ paths

@case("paths")
def fifo_as_file(tmp, ctx):
    """A named pipe nobody writes to: open() would block forever (the issue's hang)."""
    p = tmp / "fifo.json"
    os.mkfifo(p)
    return ingest(p, match="FIFO", timeout_s=20)


@case("paths")
def symlink_loop(tmp, ctx):
    a, b = tmp / "loop_a.json", tmp / "loop_b.json"
    os.symlink(b, a)
    os.symlink(a, b)
    return ingest(a, match="symlink loop")


@case("paths")
def dangling_symlink(tmp, ctx):
    p = tmp / "dangling.json"
    os.symlink(tmp / "nowhere.json", p)
    return ingest(p, match="no such file")


@case("paths")
def missing_file(tmp, ctx):
    return ingest(tmp / "missing.json", match="no such file")


@case("paths")
def char_device_dev_zero(tmp, ctx):
    return ingest(Path("/dev/zero"), match="device", timeout_s=20)


@case("paths")
def unreadable_regular_file(tmp, ctx):
    """A regular file whose read fails (EIO). The tests run as root, whom chmod 000 does not stop, so the
    permission-denied case is this one: /proc/self/mem is a regular file that cannot be read from offset 0."""
    return ingest(Path("/proc/self/mem"), match="cannot read")


@case("paths")
def unix_socket(tmp, ctx):
    p = tmp / "sock.json"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()
    return ingest(p, match="socket")


@case("paths")
def empty_directory(tmp, ctx):
    d = tmp / "empty_dir"
    d.mkdir()
    return ingest(d, match="no traces found")


@case("paths")
def nested_empty_directories(tmp, ctx):
    d = tmp / "nested_empty"
    (d / "a" / "b" / "c").mkdir(parents=True)
    return ingest(d, match="no traces found")


@case("paths")
def directory_of_non_traces(tmp, ctx):
    d = tmp / "non_traces"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    (d / "stats.csv").write_text("Time (%),Total Time (ns),Name\n1,2,k\n")
    (d / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return ingest(d, match="no traces found")


@case("paths")
def directory_with_only_a_fifo(tmp, ctx):
    d = tmp / "fifo_dir"
    d.mkdir()
    os.mkfifo(d / "trace.json")
    return ingest(d, match="no traces found", timeout_s=20)


@case("paths")
def directory_with_only_a_symlink_loop(tmp, ctx):
    d = tmp / "loop_dir"
    d.mkdir()
    os.symlink(d / "b.json", d / "a.json")
    os.symlink(d / "a.json", d / "b.json")
    return ingest(d, match="no traces found")


@case("paths")
def directory_with_a_stray_run_json(tmp, ctx):
    """run.json without its trace: not a run directory and no trace."""
    d = tmp / "run_without_trace"
    d.mkdir()
    shutil.copy(RUN / "run.json", d / "run.json")
    return ingest(d, match="no traces found")


@case("paths")
def newline_in_file_name(tmp, ctx):
    p = write(tmp, "new\nline.json", b"garbage")
    return ingest(p, names="line.json")


@case("paths")
def non_utf8_file_name(tmp, ctx):
    p = Path(os.fsdecode(bytes(tmp) + b"/caf\xe9.json"))
    p.write_bytes(b"garbage")
    return ingest(p, names="caf")


# ------------------------------------------------------------------------------------------------- nsys

def _nsys_sqlite(tmp: Path, name: str) -> Path:
    p = tmp / name
    p.write_bytes(gzip.decompress((NSIGHT / "encoder2_nvtx.sqlite.gz").read_bytes()))
    return p


_NSYS_EDITS = {
    "kernel_start_text": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 1",
    "kernel_end_text": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = 'e' WHERE rowid = 2",
    "kernel_grid_text": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 'big' WHERE rowid = 1",
    "kernel_grid_2e40": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 1099511627776 WHERE rowid = 1",
    "kernel_start_1e300": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9.9e300 WHERE rowid = 1",
    "kernel_start_2e62": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9000000000000000000 WHERE rowid = 1",
    "kernel_correlation_fraction": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 1.5 WHERE rowid = 1",
    "kernel_device_blob": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = x'0102' WHERE rowid = 1",
    "kernel_name_id_text": "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 'zz' WHERE rowid = 1",
    "runtime_global_tid_text": "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = 't' WHERE rowid = 1",
    "runtime_event_class_text": "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET eventClass = 'z' WHERE rowid = 1",
    "nvtx_global_tid_text": "UPDATE NVTX_EVENTS SET globalTid = 't' WHERE rowid = 1",
    "nvtx_start_text": "UPDATE NVTX_EVENTS SET start = 's' WHERE rowid = 1",
    "memset_bytes_text": "UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET bytes = 'b' WHERE rowid = 1",
    "sync_type_text": "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET syncType = 'b' WHERE rowid = 1",
    "overhead_global_tid_text": "UPDATE PROFILER_OVERHEAD SET globalTid = 'b' WHERE rowid = 1",
    "thread_names_text": "UPDATE ThreadNames SET globalTid = 'b' WHERE rowid = 1",
    "processes_pid_text": "UPDATE PROCESSES SET pid = 'b' WHERE rowid = 1",
    "session_start_text": "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'now'",
    "gpu_id_text": "UPDATE TARGET_INFO_GPU SET id = 'g'",
    "cuda_device_text": "UPDATE TARGET_INFO_CUDA_DEVICE SET gpuId = 'b'",
    "string_value_blob": "UPDATE StringIds SET value = x'ff00fe' WHERE rowid = 1",
    "nvtx_text_blob": "UPDATE NVTX_EVENTS SET text = x'00ff' WHERE rowid = 1",
    "no_string_ids": "DROP TABLE StringIds",
}


def _nsys_edit(label: str, sql: str):
    def build(tmp, ctx):
        p = _nsys_sqlite(tmp, f"nsys_{label}.sqlite")
        con = sqlite3.connect(p)
        con.execute(sql)
        con.commit()
        con.close()
        return ingest(p, match="nsys|Nsight Systems")
    return build


for _label, _sql in _NSYS_EDITS.items():
    CASES[f"nsys_{_label}"] = Case("nsys", _nsys_edit(_label, _sql))


@case("nsys")
def nsys_sqlite_without_tables(tmp, ctx):
    p = tmp / "no_tables.sqlite"
    sqlite3.connect(p).close()
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a)")
    con.execute("DROP TABLE t")
    con.commit()
    con.close()
    return ingest(p, match="not an Nsight Systems export")


@case("nsys")
def nsys_zero_byte_sqlite(tmp, ctx):
    return ingest(write(tmp, "zero.sqlite", b""), match="empty")


@case("nsys")
def nsys_only_string_ids(tmp, ctx):
    p = tmp / "only_strings.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO StringIds VALUES (1, 'k')")
    con.commit()
    con.close()
    return ingest(p, match="not an Nsight Systems export")


@case("nsys")
def nsys_sqlite_of_another_program(tmp, ctx):
    p = tmp / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.execute("INSERT INTO users VALUES (1, 'a')")
    con.commit()
    con.close()
    return ingest(p, match="not an Nsight Systems export")


@case("nsys")
def nsys_sqlite_truncated_half(tmp, ctx):
    p = _nsys_sqlite(tmp, "truncated.sqlite")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return ingest(p, match="damaged|truncated")


@case("nsys")
def nsys_sqlite_corrupt_pages(tmp, ctx):
    p = _nsys_sqlite(tmp, "corrupt.sqlite")
    data = bytearray(p.read_bytes())
    for i in range(4096, len(data), 4096):  # every page's header, past the first
        data[i : i + 16] = b"\xa5" * 16
    p.write_bytes(bytes(data))
    return ingest(p, match="damaged|truncated|not an Nsight")


@case("nsys")
def nsys_sqlite_gz_truncated(tmp, ctx):
    data = (NSIGHT / "encoder2_nvtx.sqlite.gz").read_bytes()
    return ingest(write(tmp, "nsys_cut.sqlite.gz", data[: len(data) // 2]), match="gzip")


@case("nsys")
def nsys_header_only(tmp, ctx):
    return ingest(write(tmp, "header_only.sqlite", b"SQLite format 3\x00"), match="SQLite|damaged|Nsight")


@case("nsys")
def nsys_rep_not_a_report(tmp, ctx):
    """A .nsys-rep that is garbage (and, on this machine, no `nsys` to export it)."""
    return ingest(write(tmp, "fake.nsys-rep", b"not a report"), match="nsys")


@case("nsys")
def nsys_parquet_dir_with_a_corrupt_table(tmp, ctx):
    d = tmp / "pq_corrupt"
    shutil.copytree(NSIGHT / "encoder2_nvtx_pq", d)
    (d / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    return ingest(d, match="Parquet")


@case("nsys")
def nsys_parquet_dir_with_an_empty_string_table(tmp, ctx):
    d = tmp / "pq_empty_strings"
    shutil.copytree(NSIGHT / "encoder2_nvtx_pq", d)
    (d / "StringIds.parquet").write_bytes(b"")
    return ingest(d, match="Parquet|StringIds")


@case("nsys")
def nsys_parquet_dir_with_text_in_an_int_column(tmp, ctx):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp / "pq_text"
    shutil.copytree(NSIGHT / "encoder2_nvtx_pq", d)
    t = pq.read_table(d / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    i = t.column_names.index("start")
    t = t.set_column(i, "start", pa.array(["x"] * t.num_rows))
    pq.write_table(t, d / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    return ingest(d, match="CUPTI_ACTIVITY_KIND_KERNEL.start")


@case("nsys")
def parquet_dir_not_nsys(tmp, ctx):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp / "pq_other"
    d.mkdir()
    pq.write_table(pa.table({"a": [1, 2]}), d / "things.parquet")
    return ingest(d, match="not an Nsight Systems export")


# -------------------------------------------------------------------------------------------------- ncu

def _csv_rows(name: str) -> list[list[str]]:
    import csv
    import io

    text = gzip.decompress((NSIGHT / name).read_bytes()).decode()
    lines = [ln for ln in text.splitlines() if not ln.startswith("==")]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def _write_csv(tmp: Path, name: str, rows) -> Path:
    import csv
    import io

    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return write(tmp, name, out.getvalue())


def _raw_with(value: str, unit: str | None = None):
    def build(tmp, ctx):
        rows = _csv_rows("encoder2_ncu_raw.csv.gz")
        i = rows[0].index("gpu__time_duration.sum")
        rows[2][i] = value
        if unit is not None:
            rows[1][i] = unit
        return ingest(_write_csv(tmp, f"ncu_raw_{abs(hash(value)) % 10**6}.csv", rows),
                      match="gpu__time_duration.sum")
    return build


for _label, _value in {"1e308": "1e308", "minus_1e308": "-1e308", "inf": "inf", "minus_inf": "-inf",
                       "1e30": "1e30", "negative": "-5"}.items():
    CASES[f"ncu_raw_duration_{_label}"] = Case("ncu", _raw_with(_value))


@case("ncu")
def ncu_details_duration_1e308_msecond(tmp, ctx):
    rows = _csv_rows("encoder2_ncu_details.csv.gz")
    h = rows[0]
    for r in rows[1:]:
        if r[h.index("Metric Name")] == "Duration":
            r[h.index("Metric Value")], r[h.index("Metric Unit")] = "1e308", "msecond"
    return ingest(_write_csv(tmp, "ncu_det_1e308.csv", rows), match="Duration")


@case("ncu")
def ncu_details_without_value_columns(tmp, ctx):
    """The issue's case: stored as 1,114 'kernels' (20 real)."""
    rows = _csv_rows("encoder2_ncu_details.csv.gz")
    drop = {rows[0].index("Metric Unit"), rows[0].index("Metric Value")}
    return ingest(_write_csv(tmp, "ncu_det_novalues.csv", [[c for j, c in enumerate(r) if j not in drop]
                                                            for r in rows]), match="Metric Value")


@case("ncu")
def ncu_details_without_metric_name(tmp, ctx):
    rows = _csv_rows("encoder2_ncu_details.csv.gz")
    drop = rows[0].index("Metric Name")
    return ingest(_write_csv(tmp, "ncu_det_noname.csv", [[c for j, c in enumerate(r) if j != drop] for r in rows]),
                  match="Metric Name")


@case("ncu")
def ncu_raw_repeated_ids(tmp, ctx):
    rows = _csv_rows("encoder2_ncu_raw.csv.gz")
    return ingest(_write_csv(tmp, "ncu_raw_dup.csv", rows[:3] + rows[2:3]), match="more than one row")


@case("ncu")
def ncu_raw_without_metric_columns(tmp, ctx):
    rows = _csv_rows("encoder2_ncu_raw.csv.gz")
    keep = [i for i, c in enumerate(rows[0]) if "__" not in c and c not in ("Estimated Speedup",)]
    return ingest(_write_csv(tmp, "ncu_raw_nometrics.csv", [[r[i] for i in keep] for r in rows]),
                  match="none of the metrics")


@case("ncu")
def ncu_raw_header_only(tmp, ctx):
    return ingest(_write_csv(tmp, "ncu_raw_header.csv", _csv_rows("encoder2_ncu_raw.csv.gz")[:1]),
                  match="no kernel rows")


@case("ncu")
def ncu_raw_header_and_units_only(tmp, ctx):
    return ingest(_write_csv(tmp, "ncu_raw_units.csv", _csv_rows("encoder2_ncu_raw.csv.gz")[:2]),
                  match="no kernel rows")


@case("ncu")
def ncu_details_header_only(tmp, ctx):
    return ingest(_write_csv(tmp, "ncu_det_header.csv", _csv_rows("encoder2_ncu_details.csv.gz")[:1]),
                  match="no kernel rows")


@case("ncu")
def ncu_prof_lines_only(tmp, ctx):
    return ingest(write(tmp, "ncu_prof.csv", "==PROF== Connected to process 1\n==PROF== Disconnected\n"),
                  match="profiled no kernel")


@case("ncu")
def ncu_csv_not_from_ncu(tmp, ctx):
    return ingest(write(tmp, "stats.csv", "Time (%),Total Time (ns),Name\n1,2,k\n"), match="not an Nsight Compute")


@case("ncu")
def ncu_field_larger_than_csv_limit(tmp, ctx):
    rows = _csv_rows("encoder2_ncu_raw.csv.gz")[:3]
    rows[2][rows[0].index("Kernel Name")] = "k" * 300_000
    return ingest(_write_csv(tmp, "ncu_bigfield.csv", rows), match="malformed|field")


@case("ncu")
def ncu_line_of_20mib_without_newline(tmp, ctx):
    head = '"ID","Process ID","Process Name","Host Name","Kernel Name","gpu__time_duration.sum"\n"0","1","p","h","'
    return ingest(write(tmp, "ncu_longline.csv", head + "x" * (20 * MiB)), match="longer than")


@case("ncu")
def ncu_gz_truncated(tmp, ctx):
    data = (NSIGHT / "encoder2_ncu_raw.csv.gz").read_bytes()
    return ingest(write(tmp, "ncu_cut.csv.gz", data[: len(data) // 2]), match="gzip")


@case("tolerated")
def tolerated_ncu_unknown_unit(tmp, ctx):
    """A unit kernelscope does not know: ingested, the value left out, a warning on the line (stdout)."""
    rows = _csv_rows("encoder2_ncu_raw.csv.gz")
    rows[1][rows[0].index("gpu__time_duration.sum")] = "fortnight"
    return ingest(_write_csv(tmp, "ncu_unit.csv", rows), code=0, names="", tolerated=True)


@case("tolerated")
def tolerated_ncu_nan_value(tmp, ctx):
    """ncu writes n/a for a metric it could not compute; nan is read the same way (missing), not as a number."""
    rows = _csv_rows("encoder2_ncu_raw.csv.gz")
    rows[2][rows[0].index("gpu__time_duration.sum")] = "nan"
    return ingest(_write_csv(tmp, "ncu_nan.csv", rows), code=0, names="", tolerated=True)


@case("ncu")
def ncu_directory_with_only_a_bad_ncu_csv(tmp, ctx):
    """ingest DIR takes Nsight Compute CSVs like ingest FILE (the issue: it skipped them), bad ones included."""
    d = tmp / "ncu_dir"
    d.mkdir()
    rows = _csv_rows("encoder2_ncu_raw.csv.gz")
    rows[2][rows[0].index("gpu__time_duration.sum")] = "inf"
    p = _write_csv(d, "bad_ncu.csv", rows)
    return ingest(d, names=str(p), match="gpu__time_duration.sum")


# ------------------------------------------------------------------------------------- run directories

def _run_dir(tmp: Path, name: str, run_json: bytes | str | None = None, fields: dict | None = None) -> Path:
    d = tmp / name
    shutil.copytree(RUN, d)
    if run_json is not None:
        (d / "run.json").write_bytes(run_json.encode() if isinstance(run_json, str) else run_json)
    elif fields:
        data = json.loads((RUN / "run.json").read_text())
        data.update(fields)
        (d / "run.json").write_text(json.dumps(data))
    return d


def _run_case(match: str, run_json=None, fields: dict | None = None):
    def build(tmp, ctx):
        return ingest(_run_dir(tmp, "run", run_json, fields), match=match)
    return build


for _label, (_match, _rj, _fields) in {
    "labels_a_list": ("'labels' must be an object", None, {"labels": ["batch", 8]}),
    "labels_a_string": ("'labels' must be an object", None, {"labels": "batch=8"}),
    "labels_a_number": ("'labels' must be an object", None, {"labels": 8}),
    "labels_empty_key": ("empty key", None, {"labels": {" ": 1}}),
    "name_a_number": ("'name' must be a string", None, {"name": 5}),
    "name_a_list": ("'name' must be a string", None, {"name": ["a"]}),
    "run_id_a_list": ("'run_id' must be a string", None, {"run_id": [1]}),
    "run_id_an_object": ("'run_id' must be a string", None, {"run_id": {"id": 1}}),
    "provenance_a_string": ("'provenance' must be an object", None, {"provenance": "gpu"}),
    "timings_a_string": ("'timings' must be a list", None, {"timings": "fast"}),
    "timing_without_kind": ("needs a 'kind'", None, {"timings": [{"dur_ns": 5}]}),
    "timing_iteration_text": ("'iteration' must be an integer", None, {"timings": [{"kind": "wall", "iteration": "x"}]}),
    "timing_dur_1e30": ("'dur_ns' must be an integer", None, {"timings": [{"kind": "wall", "dur_ns": 10**30}]}),
    "timing_dur_fraction": ("'dur_ns' must be an integer", None, {"timings": [{"kind": "wall", "dur_ns": 1.5}]}),
    "timing_energy_text": ("'energy_mj' must be a number", None, {"timings": [{"kind": "wall", "energy_mj": "x"}]}),
    "provenance_nan": ("NaN or Infinity", '{"provenance": {"power_limit_w": NaN}}', {}),
    "labels_infinity": ("NaN or Infinity", '{"labels": {"batch": Infinity}}', {}),
    "not_json": ("not valid JSON", "{nope", {}),
    "empty_file": ("not valid JSON", "", {}),
    "a_list": ("must hold a JSON object", "[1, 2]", {}),
    "invalid_utf8": ("not valid JSON", b'{"name": "caf\xe9"}', {}),
    "nested_100k_deep": ("nested too deeply|not valid JSON", "[" * 100_000 + "]" * 100_000, {}),
}.items():
    CASES[f"run_json_{_label}"] = Case("run", _run_case(_match, _rj, _fields))


@case("run")
def run_json_is_a_fifo(tmp, ctx):
    d = tmp / "run_fifo"
    shutil.copytree(RUN, d)
    (d / "run.json").unlink()
    os.mkfifo(d / "run.json")
    return ingest(d, match="FIFO", timeout_s=20)


@case("run")
def run_telemetry_not_parquet(tmp, ctx):
    d = _run_dir(tmp, "run_bad_telemetry")
    (d / "telemetry.parquet").write_bytes(b"not parquet at all")
    return ingest(d, match="Parquet")


@case("run")
def run_telemetry_is_a_fifo(tmp, ctx):
    d = _run_dir(tmp, "run_fifo_telemetry")
    (d / "telemetry.parquet").unlink()
    os.mkfifo(d / "telemetry.parquet")
    return ingest(d, match="FIFO", timeout_s=20)


@case("run")
def run_telemetry_without_ts_column(tmp, ctx):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = _run_dir(tmp, "run_telemetry_nots")
    pq.write_table(pa.table({"power_mw": [1, 2]}), d / "telemetry.parquet")
    return ingest(d, match="ts_ns")


@case("run")
def run_trace_is_garbage(tmp, ctx):
    d = _run_dir(tmp, "run_bad_trace")
    (d / "trace.json.gz").write_bytes(gzip.compress(b"garbage"))
    return ingest(d)


# ------------------------------------------------------------------------------------------ store files

def _store_case(make: Callable[[Path, Ctx], Path], argv: list[str] | None = None, code: int = 3,
                match: str = "", names: str | None = None):
    def build(tmp, ctx):
        p = make(tmp, ctx)
        args = [a.replace("{store}", str(p)) for a in (argv or ["traces", "--db", "{store}"])]
        return Spec(args, names if names is not None else str(p), code, match, own_db=p)
    return build


def _copy_seed(tmp: Path, ctx: Ctx, name: str) -> Path:
    p = tmp / name
    shutil.copy(ctx.seed, p)
    return p


def _truncated(tmp, ctx):
    p = _copy_seed(tmp, ctx, "truncated.duckdb")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return p


def _corrupt_header_block(tmp, ctx):
    p = _copy_seed(tmp, ctx, "corrupt_header.duckdb")
    data = bytearray(p.read_bytes())
    data[12288 : 12288 + 4096] = bytes(b ^ 0xA5 for b in data[12288 : 12288 + 4096])
    p.write_bytes(bytes(data))
    return p


def _corrupt_data_blocks(tmp, ctx):
    """Every data block past the first 256 KB damaged: the open may succeed, reading rows may not."""
    p = _copy_seed(tmp, ctx, "corrupt_data.duckdb")
    data = bytearray(p.read_bytes())
    for off in range(12288 + 262144, len(data), 262144):
        data[off + 100 : off + 4196] = bytes(b ^ 0xA5 for b in data[off + 100 : off + 4196])
    p.write_bytes(bytes(data))
    return p


def _text_file(tmp, ctx):
    return write(tmp, "text.duckdb", "this is not a database\n")


def _sqlite_file(tmp, ctx):
    p = tmp / "lite.duckdb"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    return p


def _random_file(tmp, ctx):
    return write(tmp, "random.duckdb", os.urandom(300_000))


def _empty_file(tmp, ctx):
    return write(tmp, "empty.duckdb", b"")


def _foreign_duckdb(tmp, ctx):
    import duckdb

    p = tmp / "foreign.duckdb"
    con = duckdb.connect(str(p))
    con.execute("CREATE TABLE other (a INTEGER)")
    con.close()
    return p


def _newer_schema(tmp, ctx):
    import duckdb

    p = _copy_seed(tmp, ctx, "newer.duckdb")
    con = duckdb.connect(str(p))
    con.execute("INSERT INTO schema_version VALUES (999, '999_future.sql', 0)")
    con.close()
    return p


def _directory(tmp, ctx):
    d = tmp / "store_dir"
    d.mkdir()
    return d


def _fifo_store(tmp, ctx):
    p = tmp / "fifo.duckdb"
    os.mkfifo(p)
    return p


_SMALL = str(ROOT / "sample_traces" / "small_kernels_graph" / "trace.json.gz")
for _label, (_make, _argv, _code, _match) in {
    "truncated_traces": (_truncated, None, 3, "damaged"),
    "truncated_summary": (_truncated, ["summary", "compiled", "--db", "{store}"], 3, "damaged"),
    "truncated_ingest": (_truncated, ["ingest", _SMALL, "--db", "{store}"], 3, "damaged"),
    "corrupt_header_traces": (_corrupt_header_block, None, 3, "damaged"),
    "corrupt_header_ingest": (_corrupt_header_block, ["ingest", _SMALL, "--db", "{store}"], 3, "damaged"),
    "corrupt_data_analyze": (_corrupt_data_blocks, ["analyze", "launch", "compiled", "--db", "{store}"], 3, "damaged"),
    "corrupt_data_summary": (_corrupt_data_blocks, ["summary", "compiled", "--db", "{store}"], 3, "damaged"),
    "corrupt_data_report": (_corrupt_data_blocks, ["report", "compiled", "--format", "md", "--db", "{store}"], 3,
                            "damaged"),
    "corrupt_data_rm": (_corrupt_data_blocks, ["rm", "compiled", "--db", "{store}"], 3, "damaged"),
    "corrupt_data_sql": (_corrupt_data_blocks, ["sql", "SELECT count(*), sum(dur_ns) FROM gpu_activities",
                                                "--db", "{store}"], 3, "damaged"),
    "corrupt_data_label": (_corrupt_data_blocks, ["label", "compiled", "a=1", "--db", "{store}"], 3, "damaged"),
    "corrupt_data_export": (_corrupt_data_blocks, ["export", "--parquet", "{store}.export", "--db", "{store}"], 3,
                            "damaged"),
    "text_file": (_text_file, None, 3, "not a kernelscope store"),
    "text_file_ingest": (_text_file, ["ingest", _SMALL, "--db", "{store}"], 3, "not a kernelscope store"),
    "sqlite_file": (_sqlite_file, None, 3, "SQLite"),
    "sqlite_file_ingest": (_sqlite_file, ["ingest", _SMALL, "--db", "{store}"], 3, "SQLite"),
    "random_bytes": (_random_file, None, 3, "not a kernelscope store|damaged"),
    "empty_file": (_empty_file, None, 3, "store"),
    "foreign_duckdb": (_foreign_duckdb, None, 3, "not a kernelscope store"),
    "newer_schema": (_newer_schema, None, 3, "upgrade kernelscope"),
    "directory": (_directory, None, 3, "directory"),
    "directory_ingest": (_directory, ["ingest", _SMALL, "--db", "{store}"], 3, "directory"),
    "fifo": (_fifo_store, None, 3, "FIFO|regular file"),
    "dev_null": (lambda tmp, ctx: Path("/dev/null"), None, 3, "regular file|not a kernelscope store"),
}.items():
    CASES[f"store_{_label}"] = Case("store", _store_case(_make, _argv, _code, _match))


@case("store")
def store_missing_read_only(tmp, ctx):
    p = tmp / "absent.duckdb"
    return Spec(["traces", "--db", str(p)], str(p), 3, "no store", own_db=p)


@case("store")
def store_in_missing_folder(tmp, ctx):
    p = tmp / "no" / "such" / "folder" / "s.duckdb"
    return Spec(["ingest", _SMALL, "--db", str(p)], str(p), 3, "does not exist", own_db=p)


__all__ = ["CASES", "Case", "Ctx", "Spec"]
