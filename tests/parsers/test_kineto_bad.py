"""Bad inputs: each is refused with ParseError (one sentence, no path prefix), never another exception."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import edge_traces as et

from kernelscope.errors import ParseError
from kernelscope.parsers import open_trace
from kernelscope.parsers.kineto import read_kineto

#: A word each message must contain (what is wrong), so a wrong reason fails the test.
EXPECT = {
    "empty_file": "empty", "whitespace_only": "empty", "empty_gzip": "empty", "corrupt_gzip": "gzip",
    "truncated_gzip": "truncated", "gzip_bad_crc": "gzip", "gzip_header_only": "truncated",
    "truncated_in_head": "truncated", "truncated_after_key": "truncated", "truncated_in_first_event": "truncated",
    "truncated_in_last_event": "truncated", "truncated_between_events": "truncated",
    "truncated_after_array": "closing brace", "truncated_in_tail": "closing brace",
    "truncated_before_closing_brace": "closing brace",
    "root_string": "'{'", "root_number": "'{'", "no_trace_events": "no \"traceEvents\"",
    "trace_events_object": "not an array", "trace_events_null": "not an array", "trace_events_string": "not an array",
    "nan_ts": "NaN", "infinity_dur": "NaN or Infinity", "string_nan_ts": "not a number", "object_ts": "not a number",
    "x_without_ts": "no ts", "garbage_event": "not valid JSON", "event_not_object": "not valid JSON",
    "binary_file": "'{'", "png_file": "'{'", "sqlite_file": "SQLite", "utf16_file": "'{'",
    "bad_base_time": "baseTimeNanoseconds", "unterminated_string_at_end": "truncated",
    "trailing_garbage": "after the end", "head_not_json": "not valid JSON",
}  # fmt: skip


def test_every_bad_case_has_an_expectation():
    assert set(EXPECT) == set(et.BAD_CASES) and len(EXPECT) >= 25


@pytest.mark.parametrize("name", sorted(et.BAD_CASES))
def test_bad_input_raises_parse_error(tmp_path, name):
    path = et.BAD_CASES[name](tmp_path)
    with pytest.raises(ParseError) as info:
        list(open_trace(path))
    msg = str(info.value)
    assert EXPECT[name] in msg, msg
    assert "\n" not in msg and str(path) not in msg and msg.count(";") >= 1


@pytest.mark.parametrize("name", sorted(et.BAD_CASES))
def test_bad_input_direct_reader_also_parse_error(tmp_path, name):
    """The reader alone (without detect_format first) refuses too."""
    path = et.BAD_CASES[name](tmp_path)
    with pytest.raises(ParseError):
        list(read_kineto(path))


def test_missing_file_is_parse_error(tmp_path):
    with pytest.raises(ParseError, match="cannot open"):
        list(read_kineto(tmp_path / "nope.json"))


def test_bad_event_deep_in_a_big_file_is_located(tmp_path, monkeypatch):
    """A broken event after many good ones: ParseError names the event index (not 'truncated')."""
    import kernelscope.parsers.source as source

    monkeypatch.setattr(source, "BLOCK_BYTES", 4096)
    good = '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1.000, "dur": 1.000}'
    events = [good] * 500 + ['{"ph": "X", "cat": "cpu_op", "name": "op" "pid": 1, "ts": 1, ]'] + [good] * 500
    path = tmp_path / "deep.json"
    path.write_text(et._trace(events, tail=et._base_tail()))
    with pytest.raises(ParseError, match="event 500 at byte"):
        list(read_kineto(path))
