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
    """What the user asked for: ``by`` groups several traces by a numeric label (a sweep); ``figures``: False
    for a format that leaves figures out (Markdown), so sections neither draw them nor query what only they
    show (in a Markdown report of a sample trace, drawing took ~0.4 of its ~0.7 s)."""
    by: str | None = None
    figures: bool = True
