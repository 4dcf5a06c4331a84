"""How a missing number is shown: "n/a", with the reason when one is known ("n/a: no telemetry").

The analyses return ``null`` (None) for a number that is not defined or cannot be trusted (a window shorter
than ten counter steps, a trace without telemetry or GPU activity, ...) and usually say why in their
warnings or trust section. Pages and reports never show that ``null`` as it is: every builder that formats
a value that may be missing goes through :func:`na` / :func:`value_or_na`, and analysis sentences shown to
a reader go through :func:`shown`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

NA = "n/a"

_NULL = re.compile(r"\bnull\b")


def is_missing(value: Any) -> bool:
    """None or a float NaN (what pandas gives for a null)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def na(reason: str | None = None) -> str:
    """'n/a', or 'n/a: <reason>' (a trailing full stop of the reason is dropped)."""
    reason = (reason or "").strip().rstrip(".")
    return f"{NA}: {reason}" if reason else NA


def value_or_na(value: Any, fmt: Callable[[Any], str], reason: str | None = None) -> str:
    """``fmt(value)``, or :func:`na` with ``reason`` when the value is missing."""
    return na(reason) if is_missing(value) else fmt(value)


def kpi_parts(value: Any, fmt: Callable[[Any], str], reason: str, extra: str = "") -> tuple[str, str]:
    """(value text, the line under it) of a headline number: ``(fmt(value), extra)``, or ``("n/a",
    reason)`` when the value is missing (the page shows the reason right under the "n/a")."""
    return (NA, reason) if is_missing(value) else (fmt(value), extra)


def shown(text: str) -> str:
    """An analysis' sentence (a warning, a reason) as shown to a reader: the JSON word ``null`` said as
    ``n/a`` (identifiers such as ``nullable`` are left alone)."""
    return _NULL.sub(NA, text)
