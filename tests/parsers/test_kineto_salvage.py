"""--salvage at the parser: every truncated case of tests/edge_traces.py's bad inputs (refused without it) keeps
exactly the complete events before the cut, or is still refused when there are none; meta.truncated says where."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import edge_traces as et

from kernelscope.errors import ParseError
from kernelscope.parsers import open_trace

#: case -> (events kept, baseTimeNanoseconds recovered), or the word the refusal must hold.
SALVAGED = {
    "truncated_gzip": (3, False),  # the gzip stream loses its last 30 bytes: the text ends in the tail keys
    "truncated_in_last_event": (2, False),
    "truncated_between_events": (2, False),
    "truncated_after_array": (3, False),
    "truncated_in_tail": (3, False),
    "truncated_before_closing_brace": (3, True),  # only '}' is missing: the tail keys are read
    "unterminated_string_at_end": (2, False),
}
REFUSED = {
    "truncated_in_head": "traceEvents",
    "truncated_after_key": "nothing to salvage",
    "truncated_in_first_event": "nothing to salvage",
    "gzip_header_only": "nothing to salvage",
}


def test_every_truncated_case_is_covered():
    cut = {n for n in et.BAD_CASES if "truncated" in n or n in ("gzip_header_only", "unterminated_string_at_end")}
    assert cut == set(SALVAGED) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(SALVAGED))
def test_salvage_keeps_the_complete_events(tmp_path, name):
    path = et.BAD_CASES[name](tmp_path)
    with pytest.raises(ParseError) as info:  # refused without --salvage, and told about it
        list(open_trace(path))
    assert "--salvage" in str(info.value) or "closing brace" in str(info.value)
    reader = open_trace(path, salvage=True)
    table = pa.Table.from_batches(list(reader))
    kept, base_read = SALVAGED[name]
    cut = reader.meta.truncated
    assert table.num_rows == kept == cut["events_kept"]
    assert table.column("name").to_pylist() == ["aten::mm", "cudaLaunchKernel", "gemm_kernel"][:kept]
    assert cut["at_byte"] <= cut["read_bytes"] and cut["gzip"] is (name == "truncated_gzip")
    assert cut["base_time_lost"] is (not base_read)
    assert reader.meta.base_time_ns == (et.BASE if base_read else 0)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_salvage_still_refuses_a_cut_before_any_event(tmp_path, name):
    path = et.BAD_CASES[name](tmp_path)
    with pytest.raises(ParseError) as info:
        list(open_trace(path, salvage=True))
    assert REFUSED[name] in str(info.value)


def test_gzip_cut_mid_stream_keeps_what_decompresses(tmp_path):
    """A large gzip trace cut at a third of its compressed bytes: events up to the cut, from many blocks."""
    events = [et._OP, et._LAUNCH, et._KERNEL] * 20_000
    text = et._trace(events, tail=et._base_tail()).encode()
    z = gzip.compress(text)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(z[: len(z) // 3])
    reader = open_trace(path, salvage=True)
    n = sum(b.num_rows for b in reader)
    cut = reader.meta.truncated
    assert n == cut["events_kept"] and 1000 < n < 60_000
    assert "before its end marker" in cut["reason"] and cut["read_bytes"] > len(text) // 10
    # what was kept is exactly the events wholly inside the decompressed prefix
    prefix = text[: cut["read_bytes"]]
    assert n == prefix.count(b'"ph": "X"') - (0 if prefix.rstrip().endswith(b"}") else 1)


def test_damaged_gzip_block_is_a_cut_too(tmp_path):
    text = et._trace([et._OP, et._LAUNCH, et._KERNEL] * 20_000, tail=et._base_tail()).encode()
    z = bytearray(gzip.compress(text))
    for i in range(len(z) // 2, len(z) // 2 + 64):
        z[i] ^= 0xA5
    path = tmp_path / "damaged.json.gz"
    path.write_bytes(bytes(z))
    reader = open_trace(path, salvage=True)
    n = sum(b.num_rows for b in reader)
    assert n == reader.meta.truncated["events_kept"] > 0 and "damaged" in reader.meta.truncated["reason"]
