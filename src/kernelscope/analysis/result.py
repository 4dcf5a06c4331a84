"""The one result shape every analysis returns.

``Result`` carries a name, a plain-words definition (formula, units, which events count), scalar
numbers, named tables (pandas DataFrames), warnings, and a trust section (how far the numbers can be
believed: matched launches, dropped records, ...). The CLI's ``--format json`` prints ``to_json()``,
``--format csv --table NAME`` prints one table, and the report and dashboard read the same object.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pandas as pd

from ..errors import UsageError


def py_scalar(v: Any) -> Any:
    """One numpy/pandas scalar -> plain Python; missing (None, NaN, NA, NaT) -> None."""
    if v is None:
        return None
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        return v
    return v.item() if hasattr(v, "item") else v


def int_or_none(v: Any) -> int | None:
    """One numpy/pandas/Python number as int; missing (None, NaN, NA) -> None."""
    return None if v is None or pd.isna(v) else int(v)


def json_safe(value: Any) -> Any:
    """Convert numpy/pandas scalars and containers to plain JSON values.

    Integers stay integers (int64 ns are never turned into floats), NaN/NA/NaT become ``None``,
    dict keys become strings.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, pd.DataFrame):
        return table_records(value)
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if hasattr(value, "tolist"):  # numpy arrays and numpy scalars
        return json_safe(value.tolist())
    if value is pd.NaT or value is pd.NA:
        return None
    if hasattr(value, "isoformat"):  # datetime, date, pandas Timestamp
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return [json_safe(v) for v in sorted(value, key=str)]
    return str(value)


def table_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A DataFrame as a list of JSON-safe row dicts (ints stay ints, missing values become null)."""
    cols = [str(c) for c in df.columns]
    return [{c: json_safe(v) for c, v in zip(cols, row)} for row in column_rows(df)]


def column_rows(df: pd.DataFrame):
    """The rows of ``df`` as tuples, the values ``itertuples`` gives (Python scalars for numpy columns, NA for
    missing), read a column at a time: ``itertuples`` converts an Arrow-backed column one element at a time
    (2,000 rows x 8 columns: 7.3 ms against 0.9 ms; 3 rows: 0.43 against 0.16 ms)."""
    if not df.shape[1]:
        return iter([()] * len(df))
    return zip(*(column.tolist() for _name, column in df.items()))


@dataclass
class Result:
    """What an analysis returns: ``name``, ``definition``, ``scalars``, ``tables``, ``warnings``, ``trust``."""

    name: str
    definition: str
    scalars: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    trust: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame:
        """One named table; an unknown name is a user error listing the names that exist."""
        if name not in self.tables:
            have = ", ".join(sorted(self.tables)) or "none"
            raise UsageError(f"analysis '{self.name}' has no table '{name}'; its tables: {have}.")
        return self.tables[name]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: ``analysis`` (the name), the scalars and the tables (as lists of row dicts)
        at the top level, then ``trust``, ``warnings`` and ``definition``."""
        out: dict[str, Any] = {"analysis": self.name}
        out.update(json_safe(self.scalars))
        for tname, df in self.tables.items():
            if tname in out:
                raise ValueError(f"table name {tname!r} collides with a scalar of {self.name!r}")
            out[tname] = table_records(df)
        out["trust"] = json_safe(self.trust)
        out["warnings"] = list(self.warnings)
        out["definition"] = self.definition
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)
