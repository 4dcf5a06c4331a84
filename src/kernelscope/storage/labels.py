"""Labels as the user sees them: ``label_value`` turns a stored label (its text and ``value_num``) into the
value JSON shows — a number when it is numeric, an integer when its text is one, else the text. Every place
that prints a label (summary, traces, diff, transition) goes through it, so a label reads the same everywhere.
"""

from __future__ import annotations

import math
from typing import Any


def label_value(text: str, num: float | None) -> Any:
    """A label as JSON shows it: numeric labels (``num``, the stored ``value_num``, not missing) as numbers —
    integers stay integers ("8" -> 8, "0.5" -> 0.5, "1e3" -> 1000.0) — others as their text."""
    if num is None or (isinstance(num, float) and math.isnan(num)):
        return text
    try:
        return int(text)
    except (TypeError, ValueError):
        return float(num)
