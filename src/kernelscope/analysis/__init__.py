"""Analyses: pure functions ``fn(store, trace_id, **options) -> Result`` that read the store only through
``Store.query`` and draw nothing. ``ANALYSES`` (analysis/registry.py) is the table of them."""

from .registry import ANALYSES, Analysis, get_analysis
from .result import Result

__all__ = ["ANALYSES", "Analysis", "Result", "get_analysis"]
