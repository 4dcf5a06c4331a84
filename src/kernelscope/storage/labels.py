"""Labels, read one way everywhere: ``parse_label`` splits ``key=value``, ``label_number`` is the number a
label's text stores as ``value_num`` (a finite decimal, else None), and ``label_value`` turns a stored label (its
text and ``value_num``) into the value JSON shows — a number when it is numeric, an integer when its text is one,
else the text. Ingest, ``label``, summary, traces, diff and transition all go through these.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import UsageError

_NUM_RE = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")


def label_number(text: str) -> float | None:
    """The numeric value of a label's text: a finite decimal number, else None ("8" -> 8.0)."""
    if not _NUM_RE.match(text):
        return None
    v = float(text)
    return v if math.isfinite(v) else None


def parse_label(text: str) -> tuple[str, str, float | None]:
    """``"batch=8"`` -> ``("batch", "8", 8.0)``; the number is None when the value is not numeric."""
    key, sep, value = str(text).partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"label {text!r} is not key=value (e.g. batch=8)")
    return key, value, label_number(value)


def label_value(text: str, num: float | None) -> Any:
    """A label as JSON shows it: numeric labels (``num``, the stored ``value_num``, not missing) as numbers —
    integers stay integers ("8" -> 8, "0.5" -> 0.5, "1e3" -> 1000.0) — others as their text."""
    if num is None or (isinstance(num, float) and math.isnan(num)):
        return text
    try:
        return int(text)
    except (TypeError, ValueError):
        return float(num)


def typed_label(text: str) -> Any:
    """A label's text as JSON shows it (``label_value`` of the number it stores): an integer or a finite float
    when it reads as one, else the text (``kernelscope traces --json`` and the MCP ``traces`` tool)."""
    return label_value(text, label_number(text))
