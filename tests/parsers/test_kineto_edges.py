"""Kineto parser on one hand-made trace per edge case (tests/edge_traces.py): exact rows and values."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import edge_traces as et

from kernelscope.errors import ParseError
from kernelscope.parsers import detect_format, kineto, open_trace, source
from kernelscope.parsers.schema import RAW_EVENTS


def read(path, **opts):
    r = kineto.read_kineto(path, **opts)
    batches = list(r)
    for b in batches:
        assert b.schema.equals(RAW_EVENTS)
    rows = pa.Table.from_batches(batches, schema=RAW_EVENTS).to_pylist()
    return rows, r.meta


def by_name(rows):
    return {r["name"]: r for r in rows}


def test_there_are_enough_edge_cases():
    assert len(et.EDGE_CASES) >= 15 and len(et.BAD_CASES) >= 25


@pytest.mark.parametrize("name", sorted(et.EDGE_CASES))
def test_every_edge_case_parses_with_seq_in_file_order(tmp_path, name):
    path = et.EDGE_CASES[name](tmp_path)
    assert detect_format(path) == "kineto"
    rows, meta = read(path)
    assert [r["seq"] for r in rows] == list(range(len(rows)))
    assert meta.events == len(rows)
    assert len(meta.content_hash) == 64


@pytest.mark.parametrize("builder", ["base_time_after_events", "base_time_before_events",
                                     "device_properties_after_events"])
def test_base_time_before_or_after_events(tmp_path, builder):
    rows, meta = read(et.EDGE_CASES[builder](tmp_path))
    assert meta.base_time_ns == et.BASE
    op, launch, kern = rows
    assert (op["kind"], op["ts_ns"], op["dur_ns"]) == ("cpu_op", 4381781706609561, 20500)
    assert (launch["kind"], launch["ts_ns"], launch["dur_ns"], launch["correlation"]) == (
        "runtime", 4381781706610000, 4250, 100)  # fmt: skip
    assert (kern["kind"], kern["ts_ns"], kern["dur_ns"]) == ("kernel", 4381781706620100, 1234)
    assert (kern["device"], kern["stream"], kern["correlation"], kern["external_id"]) == (0, 7, 100, 5)
    assert (kern["grid_x"], kern["grid_y"], kern["grid_z"], kern["block_x"], kern["block_y"]) == (64, 2, 1, 128, 1)
    assert (kern["registers_per_thread"], kern["shared_memory_bytes"]) == (32, 1024)
    assert (kern["blocks_per_sm"], kern["warps_per_sm"], kern["est_occupancy_pct"]) == (0.5, 2.0, 12.0)
    assert op["input_dims"] == "[[8, 16], [16, 4]]"
    assert json.loads(op["input_types"]) == ["float", "float"]
    assert json.loads(op["input_strides"]) == [[16, 1], [4, 1]]
    assert json.loads(op["concrete_inputs"]) == ["", ""]
    assert (op["seq_number"], op["fwd_thread_id"], op["ev_idx"]) == (3, 0, 0)
    assert op["device"] is None and op["stream"] is None
    assert meta.extra["displayTimeUnit"] == "ms" and meta.extra["schemaVersion"] == 1
    assert meta.extra.get("traceName") == (None if builder == "base_time_before_events" else "t.json")
    if builder == "device_properties_after_events":  # read from after the array: the writer put them there
        assert [(d["id"], d["name"]) for d in meta.device_properties] == [(i, "NVIDIA H100 80GB HBM3") for i in range(8)]
        assert meta.distributed_info == {"rank": 0, "world_size": 1}
    else:
        assert meta.device_properties == [{"id": 0, "name": "NVIDIA H200", "numSms": 132}]
    assert meta.warnings == []


def test_epoch_float_ts_is_exact(tmp_path):
    rows, meta = read(et.epoch_float_ts(tmp_path))
    assert meta.base_time_ns == 0
    launch, kern = rows
    assert launch["ts_ns"] == 1700000000000000001 and launch["dur_ns"] == 3999
    assert kern["ts_ns"] == 1700000000000000123 and kern["dur_ns"] == 1234
    # float64 would not be exact here: the test would catch a float path
    assert round(1700000000000000.123 * 1000) != 1700000000000000123


def test_epoch_ns_resolution_ts_take_the_vectorised_path(tmp_path, monkeypatch):
    """16 digits before the point and 3 after (torch's and HTA's traces since ~2024) are read by Arrow's decimal
    cast, not one by one in Python (0.44 s of a 68k-event wild trace's 0.78 s parse went there); the int64 edge
    still goes to the exact path and its one-line error."""
    from kernelscope.parsers.kineto import batch

    def no_slow(*a):
        raise AssertionError("the per-event path")

    with monkeypatch.context() as m:
        m.setattr(batch, "_times_slow", no_slow)
        rows, _ = read(et.epoch_float_ts(tmp_path))
    assert [(r["ts_ns"], r["dur_ns"]) for r in rows] == [(1700000000000000001, 3999), (1700000000000000123, 1234)]
    texts = [b"9223372036854775.807", b"-9223372036854775.808", b"1.0005"]
    assert batch._times(texts, "ts", 0).to_pylist() == [2**63 - 1, -(2**63), 1001]  # the last: exact path, rounded
    with pytest.raises(ParseError, match="too large for int64 nanoseconds"):
        batch._times([b"1.0", b"9223372036854775.808"], "ts", 0)


def test_int_us_ts(tmp_path):
    rows, _ = read(et.int_us_ts(tmp_path))
    assert [(r["ts_ns"], r["dur_ns"]) for r in rows] == [(1600000000000000000, 5000), (1600000000000010000, 0)]


def test_distributed_info_and_absence(tmp_path):
    _, meta = read(et.distributed_info(tmp_path))
    assert (meta.rank, meta.world_size) == (3, 8)
    assert meta.distributed_info["backend"] == "nccl"
    _, meta = read(et.no_distributed_info(tmp_path))
    assert (meta.rank, meta.world_size, meta.distributed_info) == (None, None, None)


def test_cpu_only(tmp_path):
    rows, meta = read(et.cpu_only(tmp_path))
    assert [r["kind"] for r in rows] == ["annotation", "cpu_op", "cpu_op"]
    assert meta.device_properties == []
    assert all(r["device"] is None for r in rows)


def test_cuda_driver_triton(tmp_path):
    launch, kern = read(et.cuda_driver_triton(tmp_path))[0]
    assert (launch["kind"], launch["correlation"], launch["external_id"]) == ("driver", 179, 7)
    assert (kern["kind"], kern["correlation"], kern["grid_x"], kern["block_x"]) == ("kernel", 179, 16, 256)


def test_cuda_graph_one_correlation_many_kernels(tmp_path):
    rows, _ = read(et.cuda_graph(tmp_path))
    assert [r["kind"] for r in rows] == ["runtime", "kernel", "kernel", "kernel"]
    assert {r["correlation"] for r in rows} == {300}
    assert [r["ts_ns"] for r in rows[1:]] == [20000, 21000, 22000]


def test_rocm_device_from_args_and_hex_stream(tmp_path):
    launch, k1, k2 = read(et.rocm_hip(tmp_path))[0]
    assert launch["kind"] == "runtime" and launch["name"] == "hipLaunchKernel"
    assert (k1["pid"], k1["device"], k1["stream"]) == (4, 1, 0x1A)
    assert (k2["device"], k2["stream"]) == (4, 5)  # no args: pid / tid


def test_pre_1_12_categories(tmp_path):
    rows, _ = read(et.pre_1_12_categories(tmp_path))
    assert [r["kind"] for r in rows] == ["cpu_op", "runtime", "memcpy", "memset", "kernel", "flow", "flow", "annotation"]
    assert rows[0]["ev_idx"] == 4
    assert (rows[2]["bytes"], rows[3]["bytes"]) == (4096, 512)
    assert [(r["flow_id"], r["flow_phase"], r["cat"]) for r in rows[5:7]] == [(12, "s", "async"), (12, "f", "async")]


def test_flow_variants(tmp_path):
    rows, _ = read(et.flows_variants(tmp_path))
    assert {r["kind"] for r in rows} == {"flow"}
    assert [(r["cat"], r["flow_id"], r["flow_phase"]) for r in rows] == [
        ("ac2g", 100, "s"), ("ac2g", 100, "f"),
        ("async_cpu_to_gpu", 101, "s"), ("async_cpu_to_gpu", 101, "t"), ("async_cpu_to_gpu", 101, "f"),
        ("fwdbwd", 1, "s"), ("fwdbwd", 1, "f"), ("ac2g", 0x1F, "s"),
    ]  # fmt: skip
    assert all(r["dur_ns"] is None for r in rows)


def test_python_functions_kept_or_skipped(tmp_path):
    path = et.python_functions(tmp_path)
    rows, meta = read(path)
    assert [r["kind"] for r in rows] == ["python", "python", "python", "cpu_op"]
    rows, meta = read(path, python_functions=False)
    assert [r["name"] for r in rows] == ["aten::mm"] and rows[0]["seq"] == 0
    assert meta.events == 1
    assert any("skipped 3 python_function" in w for w in meta.warnings)
    r = open_trace(path, python_functions=False)
    assert sum(b.num_rows for b in r) == 1


def test_multi_stream_multi_device(tmp_path):
    rows, _ = read(et.multi_stream_multi_device(tmp_path))
    assert [(r["name"], r["device"], r["stream"]) for r in rows] == [
        ("a", 0, 7), ("b", 0, 13), ("c", 1, 7), ("Memcpy DtoD (Device -> Device)", 1, 7)]  # fmt: skip
    assert rows[3]["kind"] == "memcpy" and rows[3]["bytes"] == 131072 and rows[3]["dur_ns"] == 1088


def test_same_stream_overlap_kept(tmp_path):
    a, b = read(et.same_stream_overlap(tmp_path))[0]
    assert a["ts_ns"] + a["dur_ns"] > b["ts_ns"] and a["stream"] == b["stream"] == 7


def test_inf_na_null_args_are_null_and_counted(tmp_path):
    (k,), meta = read(et.inf_na_null_args(tmp_path))
    assert k["registers_per_thread"] is None and k["shared_memory_bytes"] is None
    assert k["blocks_per_sm"] is None and k["est_occupancy_pct"] is None
    assert k["warps_per_sm"] == 4.5 and k["grid_x"] == 1 and k["block_x"] == 32
    assert len(meta.warnings) == 4 and all(w.startswith("1 non-numeric") for w in meta.warnings)


@pytest.mark.parametrize(
    "builder, name, warning",
    [
        ("unescaped_quote_name", 'f(x="a")', "2 unescaped quotes"),
        ("raw_newline_name", "a\nb\tc", "2 raw control characters"),
        ("windows_backslash", "C:\\Users\\me\\work\\model.py(3): f", "4 invalid backslash escapes"),
        ("non_utf8_name", "caf\ufffd", "1 invalid UTF-8"),
    ],
)
def test_invalid_json_repaired_and_counted(tmp_path, builder, name, warning):
    rows, meta = read(et.EDGE_CASES[builder](tmp_path))
    assert [r["name"] for r in rows] == [name, "aten::add"]
    assert [r["ts_ns"] for r in rows] == [1000, 1500]
    assert len(meta.warnings) == 1 and warning in meta.warnings[0], meta.warnings


def test_comma_decimals_repaired(tmp_path):
    rows, meta = read(et.comma_decimal(tmp_path))
    assert [(r["ts_ns"], r["dur_ns"]) for r in rows] == [(1500, 2250), (5000, 1000)]
    assert "2 comma decimal" in meta.warnings[0]


def test_string_pids(tmp_path):
    rows, _ = read(et.string_pids(tmp_path))
    assert [(r["pid"], r["pid_text"], r["tid"]) for r in rows] == [
        (None, "Spans", None), (None, "Traces", None), (None, "", None), (-1, None, 0)]  # fmt: skip
    assert [r["kind"] for r in rows] == ["other", "instant", "instant", "other"]


def test_meta_events(tmp_path):
    rows, _ = read(et.meta_events(tmp_path))
    assert [(r["kind"], r["name"], r["text"]) for r in rows] == [
        ("meta", "process_name", "python3"), ("meta", "thread_name", "thread 487 (pt_autograd_0)"),
        ("meta", "thread_sort_index", "487")]  # fmt: skip


def test_collective_args_as_json_text(tmp_path):
    op, kern = read(et.collectives(tmp_path))[0]
    for r in (op, kern):
        d = json.loads(r["text"])
        assert d["Collective name"] == "allreduce" and d["In msg nelems"] == 1048576 and d["Group size"] == 8
        assert d["Process Group Ranks"] == "[0, 1, 2, 3, 4, 5, 6, 7]" and d["Rank"] == 3 and len(d) == 11
    assert kern["stream"] == 20


def test_profiler_steps_and_other_kinds(tmp_path):
    rows, _ = read(et.profiler_steps(tmp_path))
    assert [r["kind"] for r in rows] == ["annotation", "annotation", "gpu_annotation", "sync", "other", "instant"]
    assert (rows[2]["device"], rows[2]["stream"]) == (0, 7)  # gpu_annotation: pid / tid


def test_zero_and_missing_dur(tmp_path):
    rows, meta = read(et.zero_dur_and_missing_dur(tmp_path))
    assert [r["dur_ns"] for r in rows] == [0, 0]
    assert meta.warnings == ["1 complete ('X') events without dur read as dur 0"]


def test_dropped_record_notes_kept_verbatim(tmp_path):
    _, meta = read(et.dropped_records(tmp_path))
    assert meta.dropped_notes == ["CUPTI dropped 12 activity records (buffer overflow)", "cupti_dropped_records: 12"]


@pytest.mark.parametrize("block", [7, 64, 200, 1 << 22])
def test_cutter_survives_boundary_text_in_strings(tmp_path, monkeypatch, block):
    monkeypatch.setattr(source, "BLOCK_BYTES", block)
    rows, meta = read(et.tricky_strings(tmp_path))
    assert [r["name"] for r in rows] == ['weird}, {"ph": ] name', "a}, {b", "end ]}"]
    assert [r["ts_ns"] for r in rows] == [1000, 2000, 3000]
    assert meta.base_time_ns == et.BASE and meta.warnings == []


def test_empty_event_list(tmp_path):
    rows, meta = read(et.empty_events(tmp_path))
    assert rows == [] and meta.events == 0 and meta.base_time_ns == et.BASE


def test_gzip_twin_hashes_alike(tmp_path):
    plain = et.base_time_after_events(tmp_path)
    gz = et.gzip_twin(tmp_path)
    rows_p, meta_p = read(plain)
    rows_g, meta_g = read(gz)
    assert rows_p == rows_g
    assert meta_p.content_hash == meta_g.content_hash
    import hashlib

    assert meta_p.content_hash == hashlib.sha256(plain.read_bytes()).hexdigest()


@pytest.mark.parametrize("block", [5, 50, 333])
@pytest.mark.parametrize("name", sorted(et.EDGE_CASES))
def test_tiny_blocks_give_the_same_rows(tmp_path, monkeypatch, name, block):
    path = et.EDGE_CASES[name](tmp_path)
    want, meta_want = read(path)
    monkeypatch.setattr(source, "BLOCK_BYTES", block)
    got, meta_got = read(path)
    assert got == want
    assert (meta_got.base_time_ns, meta_got.warnings, meta_got.content_hash) == (
        meta_want.base_time_ns, meta_want.warnings, meta_want.content_hash)  # fmt: skip


def test_batch_rows_caps_batches(tmp_path):
    r = kineto.read_kineto(et.cuda_graph(tmp_path), batch_rows=3)
    assert [b.num_rows for b in r] == [3, 1]


def test_null_number_counts_equal_the_definition_on_random_text():
    """count_null_numbers (a backwards look from each `null`) counts what its definition, the regex
    `"key"\\s*:\\s*null` with a key of 1-40 characters without quote or backslash, finds: on random mixes of
    keys, whitespace, quotes, backslashes and nulls, and on the edges (41-character keys, an escaped quote)."""
    import random
    import re
    from collections import Counter

    from kernelscope.parsers.kineto.fields import NUMERIC_ARG_KEYS
    from kernelscope.parsers.kineto.repair import count_null_numbers

    definition = re.compile(rb'"([^"\\]{1,40})"\s*:\s*null')

    def expected(text):
        return Counter(m.group(1).decode() for m in definition.finditer(text) if m.group(1) in NUMERIC_ARG_KEYS)

    keys = sorted(NUMERIC_ARG_KEYS) + [b"x" * 40, b"y" * 41, b"a\\b", b"null", b""]
    parts = [b'"', b"\\", b":", b" ", b"\n\t", b"null", b"1", b",", b"{", b"}"]
    rng = random.Random(7)
    for _ in range(3000):
        text = b"".join(rng.choice([b'"' + rng.choice(keys) + b'"', *parts]) for _ in range(rng.randint(1, 30)))
        got = Counter()
        count_null_numbers(text, got)
        assert got == expected(text), text
    key = sorted(NUMERIC_ARG_KEYS)[0]
    got = Counter()
    count_null_numbers(b'{"' + key + b'" :\n null, "' + key + b'":null, "\\"' + key + b'": null}', got)
    assert got == {key.decode(): 3} == expected(b'{"' + key + b'" :\n null, "' + key + b'":null, "\\"' + key + b'": null}')


def test_pretty_printed_args_are_stored_on_one_line(tmp_path):
    """A trace written with indentation (TraceLens' test traces are): its raw JSON args (Input Dims, types,
    strides, concrete inputs) come out on one line, values unchanged; a one-line trace keeps its text as is."""
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0,
          "args": {"Input Dims": [[8, 16], [16, 4]], "Input type": ["float", "c10::BFloat16"],
                   "Input Strides": [[16, 1], [4, 1]], "Concrete Inputs": ["", "a \\n b"]}}
    doc = {"schemaVersion": 1, "traceEvents": [ev]}
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(doc, indent=2))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(doc))
    (row,), _ = read(pretty)
    assert row["input_dims"] == "[[8,16],[16,4]]" and row["input_strides"] == "[[16,1],[4,1]]"
    assert row["input_types"] == '["float","c10::BFloat16"]'
    assert json.loads(row["concrete_inputs"]) == ["", "a \\n b"]  # an escaped line break inside a string stays
    (row,), _ = read(plain)
    assert row["input_dims"] == "[[8, 16], [16, 4]]"


def test_pytorch_1_8_names_of_shapes_and_devices(tmp_path):
    """TensorBoard's 2021 test and sample traces: operators' shapes under "Input dims" (not "Input Dims") and the
    devices under "computeProperties" (not "deviceProperties"). Both read as their later names; where the later
    name is also present it wins."""
    ops = [{"ph": "X", "cat": "Operator", "name": f"aten::mm{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
            "args": args} for i, args in enumerate([
                {"Input dims": [[8, 16], [16, 4]], "Input type": ["float", "float"]},
                {"Input Dims": [[2, 2]]},
                {"Input Dims": [[3, 3]], "Input dims": [[9, 9]]},
                {}])]
    dev = [{"id": 0, "name": "Tesla V100-DGXS-32GB", "major": 7, "minor": 0, "multiProcessorCount": 80}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schemaVersion": 1, "computeProperties": dev, "traceEvents": ops}))
    rows, meta = read(path)
    dims = [r["input_dims"] for r in rows]
    assert dims == ["[[8, 16], [16, 4]]", "[[2, 2]]", "[[3, 3]]", None], dims  # as written
    assert meta.device_properties == dev
    path.write_text(json.dumps({"schemaVersion": 1, "computeProperties": dev, "traceEvents": ops,
                                "deviceProperties": [{**dev[0], "name": "H200"}]}))
    assert read(path)[1].device_properties[0]["name"] == "H200"
