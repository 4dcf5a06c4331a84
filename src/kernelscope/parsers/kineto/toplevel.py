"""The JSON object around a Kineto trace's event array: the keys before ``"traceEvents": [`` (the *head*)
and after its closing ``]`` (the *tail*: ``baseTimeNanoseconds``, ``traceName``, ... in torch <= 2.6),
read into ``TraceMeta`` (``TopLevel``).

A key kernelscope reads (``READ_TOP_KEYS``) given twice with different values is refused; any other
repeated key is a warning. Keys whose name speaks of dropped or lost data go to ``meta.dropped_notes``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, NoReturn

import msgspec

from kernelscope.errors import ParseError
from kernelscope.parsers.kineto.fields import ANY_DEC, DECODE_ERRORS
from kernelscope.parsers.kineto.repair import repair_event
from kernelscope.parsers.schema import TraceMeta

TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*')
_DROPPED = re.compile(rb"drop|lost|overflow", re.I)
#: Top-level keys whose value kernelscope uses: given twice with different values, the trace is refused.
READ_TOP_KEYS = frozenset({"traceEvents", "baseTimeNanoseconds", "deviceProperties", "computeProperties",
                           "distributedInfo"})


class TopLevel:
    """Reads the head and the tail into ``meta``; ``seen`` holds the top-level keys met so far (head, then
    tail); repairs of a head or tail that is not valid JSON are counted in ``fixes``."""

    def __init__(self, meta: TraceMeta, fixes: Counter):
        self.meta = meta
        self.fixes = fixes
        self.seen: dict[str, Any] = {}

    def find_trace_events(self, buf: bytes) -> tuple[bytes, bytes] | None:
        for m in TRACE_EVENTS_KEY.finditer(buf):
            head = buf[: m.start()].strip()
            # head is '{' + keys + ',' : check it decodes, so a match inside a string is skipped
            if head == b"{":
                return b"{}", buf[m.end() :]
            if head.endswith(b","):
                try:
                    ANY_DEC.decode(head[:-1] + b"}")
                except DECODE_ERRORS:
                    obj = self._tolerant_object(head[:-1] + b"}")
                    if obj is None:
                        continue
                return head[:-1] + b"}", buf[m.end() :]
        return None

    def no_trace_events(self, buf: bytes) -> NoReturn:
        if TRACE_EVENTS_KEY.search(buf):
            raise ParseError('the keys before "traceEvents" are not valid JSON; re-export the trace')
        try:
            obj = ANY_DEC.decode(buf)
        except DECODE_ERRORS:
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
            obj = ANY_DEC.decode(repair_event(text, fixes))
        except DECODE_ERRORS:
            return None
        if not isinstance(obj, dict):
            return None
        self.fixes.update(fixes)
        return obj

    def apply(self, text: bytes, where: str) -> None:
        try:
            obj = ANY_DEC.decode(text)
        except DECODE_ERRORS:
            obj = self._tolerant_object(text)
            if obj is None:
                raise ParseError(f"the keys {where} are not valid JSON; re-export the trace") from None
        if not isinstance(obj, dict):
            raise ParseError(f"the keys {where} are not a JSON object; re-export the trace")
        meta = self.meta
        self._check_keys(text, obj, where)
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
            elif key == "deviceProperties" or (key == "computeProperties" and "deviceProperties" not in self.seen):
                # computeProperties: Kineto's name for the same list in 2021 (TensorBoard's test traces)
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

    def _check_keys(self, text: bytes, obj: dict, where: str) -> None:
        """Duplicate top-level keys (JSON decoders keep the last one silently): a key kernelscope reads
        (``READ_TOP_KEYS``) given twice with different values is refused; any other repeat is a warning."""
        repeated = [(k, None) for k in duplicate_keys(text)]
        repeated += [(k, obj[k]) for k in obj if k in self.seen]
        for key, value in repeated:
            first = self.seen.get(key, value)
            if key in READ_TOP_KEYS and (value is None or first != value):
                raise ParseError(
                    f"the top-level key {key!r} appears twice ({where}) with values that differ or cannot be "
                    "compared; kernelscope cannot tell which is right, remove one"
                )
            note = f"the top-level key {key!r} appears more than once; the last value is kept"
            if note not in self.meta.warnings:
                self.meta.warnings.append(note)
        self.seen.update(obj)


def duplicate_keys(text: bytes) -> list[str]:
    """Keys that appear more than once in the outermost JSON object of ``text`` ([] when it does not parse
    strictly: the caller has decoded it already, perhaps after repairs)."""
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



def tail_ok(tail: bytes) -> bool:
    try:
        return isinstance(ANY_DEC.decode(tail), dict)
    except DECODE_ERRORS:
        return False



def _opt_int(v: Any) -> int | None:
    try:
        return None if v is None or isinstance(v, bool) else int(v)
    except (TypeError, ValueError):
        return None

