"""Repairs of Kineto text that is not valid JSON, and the cleaning of values that are not numbers.

Used by the reader's tolerant path only (the fast path decodes valid text as it is). Every repair is
counted in a ``fixes`` Counter (what -> how many) that becomes one warning per kind:

- a run of events: invalid UTF-8, invalid backslash escapes, comma decimals, bare NaN/Infinity values
  (``repair_run``);
- one event: the above plus, string-aware, unescaped quotes and raw control characters inside strings
  (``repair_event``);
- an event whose ``args`` is not an object (``loose_event``);
- a number arg that is text, ``inf``, ``N/A``, ``null`` or out of range: null, counted under the arg's
  name (``clean_number``, ``count_null_numbers``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from kernelscope.parsers.kineto.fields import DECODE_ERRORS, LOOSE_DEC, NUMERIC_ARG_KEYS, EventTyped

_BAD_ESCAPE = re.compile(rb'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})?')
_COMMA_DECIMAL = re.compile(rb"(:\s*-?\d+),(\d+)(?=\s*[,}\]])")
_NAN_VALUE = re.compile(rb'("(?!ts"|dur")[^"\\]{1,60}"\s*:\s*)[-+]?(?:NaN|Infinity)(?=\s*[,}\]])')
_WS, _COLON, _QUOTE = frozenset(b" \t\n\r\f\v"), ord(":"), ord('"')  # re's \s for bytes
_BAD_NUMBER_TEXT = {"", "inf", "-inf", "+inf", "infinity", "-infinity", "nan", "n/a", "na", "none", "null"}


def repair_run(run: bytes, fixes: Counter) -> bytes | None:
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


def repair_event(text: bytes, fixes: Counter) -> bytes:
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



def clean_number(v: Any, as_int: bool, bad: Counter, col: str) -> int | float | None:
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



def loose_event(text: bytes, fixes: Counter) -> EventTyped | None:
    """An event whose only fault is an ``args`` that is not an object (a list, a string, a number), read
    without args and counted in ``fixes``; None when the text is not one JSON object."""
    try:
        e = LOOSE_DEC.decode(text)
    except DECODE_ERRORS:
        return None
    if isinstance(e.args, dict):  # an object the typed decoder refused: not a case we know how to read
        return None
    fixes["events whose args is not a JSON object read without args"] += 1
    return EventTyped(ph=e.ph, cat=e.cat, name=e.name, pid=e.pid, tid=e.tid, ts=e.ts, dur=e.dur, id=e.id, args=None)



def count_null_numbers(text: bytes, bad: Counter) -> None:
    """Count, under the arg's name, each ``null`` given for a number arg (``NUMERIC_ARG_KEYS``) in ``text``
    (the decoder reads it as absent; the count says it was there): each ``"key" : null`` whose key is 1-40
    characters without a quote or backslash. Found from each ``null`` backwards (a memchr-speed search, then a
    few bytes each), not by a regex tried at every quote: that took half the parse of a trace with stacks."""
    i = text.find(b"null")
    while i >= 0:
        j = i
        while j > 0 and text[j - 1] in _WS:
            j -= 1
        if j > 0 and text[j - 1] == _COLON:
            j -= 1
            while j > 0 and text[j - 1] in _WS:
                j -= 1
            if j > 1 and text[j - 1] == _QUOTE:
                k = text.rfind(b'"', max(0, j - 42), j - 1)  # the key's opening quote: the nearest one before
                key = text[k + 1:j - 1] if k >= 0 else b""
                if key and b"\\" not in key and key in NUMERIC_ARG_KEYS:
                    bad[key.decode()] += 1
        i = text.find(b"null", i + 4)
