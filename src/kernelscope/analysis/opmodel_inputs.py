"""The recorded inputs of one PyTorch operator call, as ``opmodel``'s rules read them: ``Arg`` (one input:
a tensor with its dtype, shape and strides, a tensor list, or a scalar), parsed from the JSON texts Kineto
records (``parse_args``); the dtype table (``DTYPES``: bytes per element, promotion kind, peak key); the
result type ``Cost``; and the helpers the rules share (required tensors, scalar values, broadcasting,
type promotion). A rule raises ``NoRule`` when the recorded inputs do not fit it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

# Kineto dtype names -> (bytes per element, kind, peak key). kind ranks promotion: bool < int < float < complex.
DTYPES: dict[str, tuple[int, int, str]] = {
    "bool": (1, 0, "fp32"),
    "unsigned char": (1, 1, "fp32"), "signed char": (1, 1, "fp32"),
    "short int": (2, 1, "fp32"), "short": (2, 1, "fp32"),
    "int": (4, 1, "fp32"), "unsigned int": (4, 1, "fp32"),
    "long int": (8, 1, "fp32"), "long": (8, 1, "fp32"), "long long int": (8, 1, "fp32"),
    "c10::Half": (2, 2, "fp16"), "c10::BFloat16": (2, 2, "bf16"),
    "float": (4, 2, "fp32"), "double": (8, 2, "fp64"),
    "c10::Float8_e4m3fn": (1, 2, "fp8"), "c10::Float8_e5m2": (1, 2, "fp8"),
    "c10::Float8_e4m3fnuz": (1, 2, "fp8"), "c10::Float8_e5m2fnuz": (1, 2, "fp8"),
    "c10::complex<c10::Half>": (4, 3, "fp16"), "c10::complex<float>": (8, 3, "fp32"),
    "c10::complex<double>": (16, 3, "fp64"),
}

# c10::ScalarType codes as they appear in concrete inputs (e.g. the dtype argument of _to_copy).
SCALAR_TYPE_CODES = {0: "unsigned char", 1: "signed char", 2: "short int", 3: "int", 4: "long int",
                     5: "c10::Half", 6: "float", 7: "double", 9: "c10::complex<float>",
                     10: "c10::complex<double>", 11: "bool", 15: "c10::BFloat16",
                     23: "c10::Float8_e5m2", 24: "c10::Float8_e4m3fn",
                     25: "c10::Float8_e5m2fnuz", 26: "c10::Float8_e4m3fnuz"}


@dataclass
class Cost:
    """What one operator call costs. ``flops``/``bytes`` None = not modelled (``reason`` says why)."""

    flops: int | None
    bytes: int | None
    dtype: str | None = None  # peak key: bf16 fp16 fp32 tf32 fp8 fp64
    tensor: bool = False  # tensor-core work (GEMM, convolution, attention)
    rule: str | None = None
    reason: str | None = None


@dataclass
class Arg:
    """One recorded input: a tensor (``dtype`` set, ``shape`` a list), a tensor list, or a scalar."""

    type: str
    shape: Any
    strides: Any
    value: str

    @property
    def is_tensor(self) -> bool:
        return self.type in DTYPES and isinstance(self.shape, list)

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.is_tensor else 0

    @property
    def size(self) -> int:
        return DTYPES[self.type][0]

    @property
    def distinct(self) -> int:
        """Elements actually stored: a dimension with stride 0 (broadcast) counts once."""
        if not self.is_tensor:
            return 0
        st = self.strides
        if isinstance(st, list) and len(st) == len(self.shape) and all(isinstance(s, int) for s in st):
            return math.prod(n for n, s in zip(self.shape, st) if s != 0)
        return self.numel

    @property
    def read_bytes(self) -> int:
        return self.distinct * self.size if self.is_tensor else 0


class NoRule(Exception):
    """Raised inside a rule when the recorded inputs do not fit it."""


def parse_args(dims: str | None, types: str | None, strides: str | None,
               concrete: str | None) -> list[Arg]:
    d, t, s, c = (load_list(x) for x in (dims, types, strides, concrete))
    n = max(len(d), len(t))
    return [Arg(t[i] if i < len(t) else "", d[i] if i < len(d) else None,
                s[i] if i < len(s) else None, str(c[i]) if i < len(c) and c[i] is not None else "")
            for i in range(n)]


def load_list(text: str | None) -> list:
    """A JSON list from recorded text; [] when missing, not JSON or not a list."""
    if not isinstance(text, str) or not text:  # missing (None / NaN from a NULL column)
        return []
    try:
        v = json.loads(text)
    except ValueError:
        return []
    return v if isinstance(v, list) else []


def json_value(text: Any) -> Any:
    """A value from JSON text (a list or dict passes through as already decoded); None when missing or
    not JSON."""
    if text is None or isinstance(text, (list, dict)):
        return text
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------- helpers the rules share


def as_float(value: str, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def as_bool(value: str) -> bool | None:
    v = value.strip().lower()
    return True if v == "true" else False if v == "false" else None


def as_int_list(value: str) -> list[int] | None:
    v = value.strip()
    if not v:
        return None
    try:
        x = json.loads(v)
    except ValueError:
        return None
    if isinstance(x, int):
        return [x]
    if isinstance(x, list) and all(isinstance(i, int) for i in x):
        return x
    return None


def code_dtype(value: str) -> str | None:
    try:
        return SCALAR_TYPE_CODES.get(int(value.strip()))
    except (TypeError, ValueError):
        return None


def tensor_args(args: list[Arg]) -> list[Arg]:
    return [a for a in args if a.is_tensor]


def need_tensors(args: list[Arg], *idx: int) -> list[Arg]:
    out = []
    for i in idx:
        if i >= len(args) or not args[i].is_tensor:
            raise NoRule(f"input {i} is not a recorded tensor")
        out.append(args[i])
    return out


def arg_present(args: list[Arg], i: int) -> bool:
    return i < len(args) and args[i].is_tensor


def arg_value(args: list[Arg], i: int) -> str:
    return args[i].value if i < len(args) else ""


def broadcast(shapes: list[list[int]]) -> list[int]:
    """NumPy broadcasting of shapes; a mismatch raises NoRule."""
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, n in enumerate(s, start=nd - len(s)):
            if n != 1:
                if out[i] not in (1, n):
                    raise NoRule(f"shapes {shapes} do not broadcast")
                out[i] = n
    return out


def promote(tensors: list[Arg]) -> str:
    """Result dtype of an elementwise op (PyTorch's rule, simplified): dimensioned tensors decide; a
    0-dim tensor only when it is of a higher kind (a wrapped Python float makes an integer op fp32)."""
    dimmed = [a for a in tensors if a.shape] or tensors
    zero = [a for a in tensors if not a.shape]
    best = _promote_group(dimmed)
    if zero and dimmed is not tensors:
        z = _promote_group(zero)
        if DTYPES[z][1] > DTYPES[best][1]:
            best = "float" if z == "double" and DTYPES[best][1] < 2 else z
    return best


def _promote_group(group: list[Arg]) -> str:
    best = group[0].type
    for a in group[1:]:
        kb, ka = DTYPES[best], DTYPES[a.type]
        if ka[1] > kb[1] or (ka[1] == kb[1] and ka[0] > kb[0]):
            best = a.type
        elif ka[1] == kb[1] == 2 and ka[0] == kb[0] and a.type != best:
            best = "float"  # half with bfloat16 -> float
    return best

