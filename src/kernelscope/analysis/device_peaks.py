"""Device peaks: the package table ``data/device_peaks.csv`` (each row names its datasheet) and a user's table
searched before it (``peaks=PATH`` or ``$KERNELSCOPE_DEVICE_PEAKS``), matched by regular expression against a
device name (``match_device``), and which of a row's peaks a piece of work runs against
(``peak_tflops_column``: the tensor-core peak of its dtype for GEMM, convolution and attention, the
non-tensor-core fp32 peak for everything else).
"""

from __future__ import annotations

import csv
import io
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UsageError

PEAKS_ENV = "KERNELSCOPE_DEVICE_PEAKS"
PEAK_COLUMNS = ("mem_bw_gbps", "fp64_tflops", "fp32_tflops", "fp32_matrix_tflops", "fp16_tflops",
                "bf16_tflops", "fp8_tflops", "l2_mb")
# operator peak key -> device-table column (tensor-core work); every other operator uses fp32_tflops.
_TENSOR_COLUMN = {"bf16": "bf16_tflops", "fp16": "fp16_tflops", "tf32": "fp32_matrix_tflops",
                  "fp32": "fp32_tflops", "fp8": "fp8_tflops", "fp64": "fp64_tflops"}


def peak_tflops_column(dtype: Any, tensor_core: bool) -> str | None:
    """The device-table column of the dense peak that work of ``dtype`` runs against (None without a dtype)."""
    if not isinstance(dtype, str):
        return None
    return _TENSOR_COLUMN.get(dtype) if tensor_core else "fp32_tflops"


def peak_row_summary(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A matched peak row as the bandwidth analysis' ``device_peaks`` scalar shows it (None when unmatched)."""
    if not row:
        return None
    return {"device": row["device"], "mem_bw_gbps": row["mem_bw_gbps"], **{c: row[c] for c in PEAK_COLUMNS[1:]},
            "source": row["source"]}


def load_peaks(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Device-peak rows: the user's table (``path``, else ``$KERNELSCOPE_DEVICE_PEAKS``) first, then the
    package's ``data/device_peaks.csv``. Columns: device, match (regex, case-insensitive), mem_bw_gbps,
    fp64/fp32/fp32_matrix/fp16/bf16/fp8 dense TFLOP/s (empty = not supported), source."""
    rows: list[dict[str, Any]] = []
    user = path or os.environ.get(PEAKS_ENV)
    if user:
        p = Path(user)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot read the device-peak table {p} ({e.strerror}); pass a readable CSV "
                             f"with the columns of kernelscope's data/device_peaks.csv.") from None
        rows += _parse_peaks(text, str(p))
    text = resources.files("kernelscope").joinpath("data", "device_peaks.csv").read_text("utf-8")
    return rows + _parse_peaks(text, "data/device_peaks.csv")


def _parse_peaks(text: str, where: str) -> list[dict[str, Any]]:
    out = []
    reader = csv.DictReader(io.StringIO(text))
    missing = {"device", "match", "mem_bw_gbps"} - set(reader.fieldnames or [])
    if missing:
        raise UsageError(f"device-peak table {where} lacks the column(s) {', '.join(sorted(missing))}; "
                         "copy the header of kernelscope's data/device_peaks.csv.")
    for n, r in enumerate(reader, start=2):
        row: dict[str, Any] = {"device": r["device"], "match": r["match"], "source": r.get("source") or where}
        try:
            row["regex"] = re.compile(r["match"], re.IGNORECASE)
            for c in PEAK_COLUMNS:
                v = (r.get(c) or "").strip()
                row[c] = float(v) if v else None
        except (re.error, ValueError) as e:
            raise UsageError(f"device-peak table {where}, line {n}: {e}; fix the regex or the number.") from None
        if not row["mem_bw_gbps"]:
            raise UsageError(f"device-peak table {where}, line {n}: mem_bw_gbps must be a positive number.")
        out.append(row)
    return out


def match_device(name: str | None, peaks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first peak row whose ``match`` regex is found in the device name; None if none."""
    if not name:
        return None
    return next((r for r in peaks if r["regex"].search(name)), None)

