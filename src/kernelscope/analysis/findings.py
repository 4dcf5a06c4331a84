"""What every rule of recommend builds a finding from (rules.py, rule_gemm.py): the severity of a share, a cited
number (``_ev``) and the finding itself."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..units import ns_to_ms
from .result import py_scalar


def severity(share: float) -> str:
    return "high" if share >= 0.5 else "medium" if share >= 0.2 else "low"


def _ev(analysis: str, key: str, value: Any, row: dict[str, Any] | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"analysis": analysis, "key": key, "value": py_scalar(value)}  # np.float64 printed as such
    if row is not None:
        e["row"] = row
    return e


def _num(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _ms(ns: float) -> str:
    return f"{ns_to_ms(ns):.2f} ms"


def _finding(rule: str, share: float, message: str, evidence: list, saving_ns: int | None = None) -> dict:
    return {"rule": rule, "severity": severity(share), "message": message, "saving_ns": saving_ns,
            "evidence": evidence}
