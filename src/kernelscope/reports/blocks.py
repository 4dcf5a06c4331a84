"""The pieces a report section is made of (see ``reports/report.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Table:
    """A table block: ``df`` as shown (columns already named with units), a caption above it."""
    df: pd.DataFrame
    caption: str = ""


@dataclass
class Section:
    title: str
    anchor: str  # the section's HTML id: lower-case, no spaces
    blocks: list = field(default_factory=list)  # str | Table | go.Figure


@dataclass
class Context:
    """What the user asked for: ``by`` groups several traces by a numeric label (a sweep)."""
    by: str | None = None
