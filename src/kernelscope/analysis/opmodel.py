"""FLOPs and minimum bytes of one PyTorch operator call, from the shapes, dtypes, strides and concrete
inputs Kineto records (``cpu_ops.input_dims`` / ``input_types`` / ``input_strides`` / ``concrete_inputs``).

Definitions (docs/metrics.md, "Bandwidth and compute utilisation"):

- **Minimum bytes**: each input tensor read once and each output written once. An input's read counts
  only its distinct elements: a dimension whose stride is 0 (a broadcast / expanded dimension) costs
  nothing. Outputs are not recorded by Kineto and are inferred per operator (elementwise: the broadcast
  shape of the tensor inputs and the promoted dtype; in-place ``op_``: the first input; an ``out=``
  variant, recognised by a trailing tensor beyond the functional schema's arguments: that tensor). Views
  (transpose, view, permute, ...) move no bytes.
- **FLOPs**: GEMM ``2·M·N·K`` (+ ``M·N`` when a bias is added: addmm/baddbmm with ``beta != 0``, linear
  with a bias); convolution ``2·N·C_out·prod(out spatial)·(C_in/groups)·prod(kernel)``; attention
  ``2·B·Hq·Lq·Lk·(D + Dv)`` (QKᵀ and PV; K/V sizes from their own shapes, so grouped-query attention
  reads fewer bytes), halved only when the trace says the call was causal; backward ``2·B·Hq·Lq·Lk·(3D
  + 2Dv)`` (recomputed QKᵀ, dV, dP, dQ, dK). Elementwise, reductions and casts count 1 FLOP per element
  (of the output for elementwise, of the input for reductions); softmax 5, layer/group norm 8, RMS norm
  4, their backwards 3/10/6 per element. These per-element constants are conventions (vector work is
  memory-bound on every supported device either way).
- ``_foreach_*`` (tensor lists): the element rule of ``_foreach`` over list shapes; Kineto records
  none, so the caller supplies them (``bandwidth`` infers them from the trace's ``AccumulateGrad``
  gradients, checked against the multi_tensor_apply kernels' block count) with the element size as
  ``elem_size_hint``.
- ``dtype``: the compute dtype that selects the peak (``bf16``, ``fp16``, ``fp32``, ``tf32``, ``fp8``,
  ``fp64``); ``tensor`` is True for GEMM/convolution/attention, which run against the tensor-core peak
  of that dtype; other work runs against the non-tensor-core fp32 peak.

``model_op`` returns a ``Cost``; ``Cost.bytes is None`` (with ``reason``) when no rule applies.
"""

from __future__ import annotations

import json
import math
import re
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
    d, t, s, c = (_load(x) for x in (dims, types, strides, concrete))
    n = max(len(d), len(t))
    return [Arg(t[i] if i < len(t) else "", d[i] if i < len(d) else None,
                s[i] if i < len(s) else None, str(c[i]) if i < len(c) and c[i] is not None else "")
            for i in range(n)]


def _load(text: str | None) -> list:
    if not isinstance(text, str) or not text:  # missing (None / NaN from a NULL column)
        return []
    try:
        v = json.loads(text)
    except ValueError:
        return []
    return v if isinstance(v, list) else []


# ---------------------------------------------------------------- helpers


def _float(value: str, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _bool(value: str) -> bool | None:
    v = value.strip().lower()
    return True if v == "true" else False if v == "false" else None


def _int_list(value: str) -> list[int] | None:
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


def _code_dtype(value: str) -> str | None:
    try:
        return SCALAR_TYPE_CODES.get(int(value.strip()))
    except (TypeError, ValueError):
        return None


def _tensors(args: list[Arg]) -> list[Arg]:
    return [a for a in args if a.is_tensor]


def _need(args: list[Arg], *idx: int) -> list[Arg]:
    out = []
    for i in idx:
        if i >= len(args) or not args[i].is_tensor:
            raise NoRule(f"input {i} is not a recorded tensor")
        out.append(args[i])
    return out


def _present(args: list[Arg], i: int) -> bool:
    return i < len(args) and args[i].is_tensor


def _value(args: list[Arg], i: int) -> str:
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


# ---------------------------------------------------------------- rules

VIEWS = {"view", "_unsafe_view", "reshape", "_reshape_alias", "transpose", "t", "permute", "expand",
         "expand_as", "slice", "select", "unsqueeze", "squeeze", "as_strided", "narrow", "split",
         "split_with_sizes", "chunk", "unbind", "detach", "alias", "flatten", "unflatten", "view_as",
         "numpy_T", "diagonal", "movedim", "swapaxes", "lift_fresh", "resolve_conj", "resolve_neg",
         "empty", "empty_like", "empty_strided", "_local_scalar_dense_view"}
UNARY = {"abs", "neg", "relu", "silu", "gelu", "sigmoid", "tanh", "exp", "exp2", "log", "log2", "log1p",
         "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "reciprocal", "erf", "erfinv", "sign", "floor",
         "ceil", "round", "trunc", "bitwise_not", "hardtanh", "leaky_relu", "elu", "softplus", "mish",
         "hardswish", "hardsigmoid", "nan_to_num", "square", "logit", "frac"}
BINARY = {"add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow",
          "maximum", "minimum", "where", "lerp", "addcmul", "addcdiv", "clamp", "clamp_min", "clamp_max",
          "masked_fill", "threshold", "threshold_backward", "gelu_backward", "silu_backward",
          "sigmoid_backward", "tanh_backward", "hardtanh_backward", "leaky_relu_backward",
          "bitwise_and", "bitwise_or", "bitwise_xor", "atan2", "hypot", "xlogy", "copysign"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
           "isnan", "isinf", "isfinite"}
REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "linalg_vector_norm", "var", "std",
          "argmax", "argmin", "all", "any", "logsumexp", "nansum"}
SCAN = {"cumsum", "cumprod"}


# Arguments of the functional (non-out) schema of elementwise ops; 1 for unary ops and 2 for binary ops
# unless listed. A call with more arguments whose last one is a tensor is an ``out=`` variant: that
# tensor is the output (written), not an input.
_ARITY = {"add": 3, "sub": 3, "rsub": 3, "where": 3, "lerp": 3, "clamp": 3, "masked_fill": 3,
          "threshold": 3, "threshold_backward": 3, "gelu_backward": 3, "hardtanh": 3, "softplus": 3,
          "addcmul": 4, "addcdiv": 4, "elu": 4, "nan_to_num": 4, "leaky_relu_backward": 4,
          "hardtanh_backward": 4, "native_dropout_backward": 3, "gelu": 2, "leaky_relu": 2, "round": 2,
          "logit": 2}


def _elementwise(base: str, inplace: bool, args: list[Arg]) -> Cost:
    arity = _ARITY.get(base, 1 if base in UNARY or base in ("logical_not", "isnan", "isinf", "isfinite")
                       else 2)
    if not inplace and len(args) > arity and args[-1].is_tensor:
        out, tensors = args[-1], _tensors(args[:-1])
        if not tensors:
            raise NoRule("no tensor inputs recorded")
        return Cost(out.numel, sum(a.read_bytes for a in tensors) + out.numel * out.size, "fp32", False,
                    "elementwise")
    tensors = _tensors(args)
    if not tensors:
        raise NoRule("no tensor inputs recorded")
    if inplace:
        out_shape, out_type = tensors[0].shape, tensors[0].type
        out_n = tensors[0].numel
    else:
        out_shape = broadcast([a.shape for a in tensors])
        out_n = math.prod(out_shape)
        out_type = "bool" if base in COMPARE else promote(tensors)
    nbytes = sum(a.read_bytes for a in tensors) + out_n * DTYPES[out_type][0]
    return Cost(out_n, nbytes, "fp32", False, "elementwise")


def _copy(base: str, args: list[Arg]) -> Cost:
    if base in ("copy_", "copy"):
        dst, src = _need(args, 0, 1)
        return Cost(0, src.read_bytes + dst.numel * dst.size, "fp32", False, "copy")
    if base in ("fill_", "zero_", "zeros_like", "ones_like", "full_like", "fill"):
        (dst,) = _need(args, 0)
        return Cost(0, dst.numel * dst.size, "fp32", False, "fill")
    (src,) = _need(args, 0)
    out_type = src.type
    if base in ("_to_copy", "to"):
        out_type = _code_dtype(_value(args, 1)) or src.type
    return Cost(0, src.read_bytes + src.numel * DTYPES[out_type][0], "fp32", False, "copy")


def _reduce(base: str, args: list[Arg]) -> Cost:
    (x,) = _need(args, 0)
    nd = len(x.shape)
    dims = _int_list(_value(args, 2 if base in ("norm", "linalg_vector_norm") else 1))
    if dims is None or dims == []:
        reduced = x.numel
    else:
        reduced = math.prod(x.shape[d % nd] for d in dims) if nd else 1
    out_n = x.numel // reduced if reduced else 0
    kind = DTYPES[x.type][1]
    if base in ("all", "any"):
        out_type = "bool"
    elif base in ("argmax", "argmin"):
        out_type = "long int"
    elif base in ("sum", "prod", "nansum") and kind < 2:
        out_type = "long int"
    else:
        out_type = x.type
    nbytes = x.read_bytes + out_n * DTYPES[out_type][0]
    if base in ("max", "min") and dims is not None:  # values and indices
        nbytes += out_n * 8
    return Cost(x.numel, nbytes, "fp32", False, "reduction")


def _scan(args: list[Arg]) -> Cost:
    (x,) = _need(args, 0)
    out_type = "long int" if DTYPES[x.type][1] < 2 else x.type
    return Cost(x.numel, x.read_bytes + x.numel * DTYPES[out_type][0], "fp32", False, "scan")


def _softmax(base: str, args: list[Arg]) -> Cost:
    if base.endswith("_backward_data"):
        g, y = _need(args, 0, 1)
        out_type = _code_dtype(_value(args, 3)) or g.type
        return Cost(3 * g.numel, g.read_bytes + y.read_bytes + g.numel * DTYPES[out_type][0], "fp32",
                    False, "softmax")
    (x,) = _need(args, 0)
    out_type = "float" if _bool(_value(args, 2)) else x.type
    return Cost(5 * x.numel, x.read_bytes + x.numel * DTYPES[out_type][0], "fp32", False, "softmax")


def _norm(base: str, args: list[Arg]) -> Cost:
    if base == "native_layer_norm_backward":
        g, x = _need(args, 0, 1)
        reads = sum(args[i].read_bytes for i in (0, 1, 3, 4, 5) if _present(args, i))
        mask = _value(args, 7).replace(" ", "").lower()
        want = [m == "true" for m in mask.strip("[]").split(",")] if mask else [True, True, True]
        writes = x.numel * x.size if want[0] else 0
        for j, i in ((1, 5), (2, 6)):
            if len(want) > j and want[j] and _present(args, i):
                writes += args[i].numel * args[i].size
        return Cost(10 * x.numel, reads + writes, "fp32", False, "norm")
    (x,) = _need(args, 0)
    if base in ("native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm"):
        shape = _int_list(_value(args, 1))
        n = math.prod(shape) if shape else (args[2].numel if _present(args, 2) else None)
        if not n:
            raise NoRule("normalized_shape not recorded")
        rows = x.numel // n
        params = (2, 3) if "layer" in base else (2,)
        reads = x.read_bytes + sum(args[i].read_bytes for i in params if _present(args, i))
        stats = {"native_layer_norm": 2, "_fused_rms_norm": 1}.get(base, 0) * rows * 4
        per = 8 if "layer" in base else 4
        return Cost(per * x.numel, reads + x.numel * x.size + stats, "fp32", False, "norm")
    if base in ("native_group_norm", "group_norm"):
        reads = x.read_bytes + sum(args[i].read_bytes for i in (1, 2) if _present(args, i))
        groups = int(_float(_value(args, 6 if base == "native_group_norm" else 1), 1))
        stats = 2 * x.shape[0] * groups * 4 if base == "native_group_norm" and x.shape else 0
        return Cost(8 * x.numel, reads + x.numel * x.size + stats, "fp32", False, "norm")
    # native_batch_norm / cudnn_batch_norm / _batch_norm_impl_index: input, weight, bias, running mean/var
    reads = sum(args[i].read_bytes for i in range(5) if _present(args, i))
    c = x.shape[1] if len(x.shape) > 1 else 1
    return Cost(8 * x.numel, reads + x.numel * x.size + 2 * c * 4, "fp32", False, "norm")


def _gemm_dtype(a: Arg, tf32: bool) -> str:
    key = DTYPES[a.type][2]
    return "tf32" if key == "fp32" and tf32 else key


def _mm_dims(a: Arg, b: Arg) -> tuple[int, int, int]:
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise NoRule(f"mm shapes {a.shape} x {b.shape}")
    return a.shape[0], b.shape[1], a.shape[1]


def _gemm(base: str, args: list[Arg], tf32: bool) -> Cost:
    if base in ("mm", "_scaled_mm"):
        a, b = _need(args, 0, 1)
        m, n, k = _mm_dims(a, b)
        flops, batch, bias = 2 * m * n * k, 1, None
        out_type = a.type
        if base == "_scaled_mm":
            out_type = _code_dtype(_value(args, 6)) or "c10::BFloat16"
            bias = args[4] if _present(args, 4) else None
        extra = sum(args[i].read_bytes for i in (2, 3) if base == "_scaled_mm" and _present(args, i))
    elif base in ("addmm", "_addmm_activation"):
        c, a, b = _need(args, 0, 1, 2)
        m, n, k = _mm_dims(a, b)
        batch, out_type, extra = 1, a.type, 0
        bias = c if _float(_value(args, 3), 1.0) != 0.0 else None
        flops = 2 * m * n * k + (m * n if base == "_addmm_activation" else 0)
    elif base in ("bmm", "baddbmm"):
        off = 1 if base == "baddbmm" else 0
        a, b = _need(args, off, off + 1)
        if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[2] != b.shape[1] or a.shape[0] != b.shape[0]:
            raise NoRule(f"bmm shapes {a.shape} x {b.shape}")
        batch, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
        flops, out_type, extra = 2 * batch * m * n * k, a.type, 0
        bias = args[0] if off and _float(_value(args, 3), 1.0) != 0.0 else None
    elif base == "linear":
        a, w = _need(args, 0, 1)
        if len(w.shape) != 2 or not a.shape or a.shape[-1] != w.shape[1]:
            raise NoRule(f"linear shapes {a.shape} x {w.shape}")
        k, n = w.shape[1], w.shape[0]
        m, batch, b = a.numel // k, 1, w
        flops, out_type, extra = 2 * m * n * k, a.type, 0
        bias = args[2] if _present(args, 2) and args[2].shape else None
    elif base == "matmul":
        a, b = _need(args, 0, 1)
        sa = [1] + a.shape if len(a.shape) == 1 else a.shape
        sb = b.shape + [1] if len(b.shape) == 1 else b.shape
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2]:
            raise NoRule(f"matmul shapes {a.shape} x {b.shape}")
        m, k, n = sa[-2], sa[-1], sb[-1]
        batch = math.prod(broadcast([sa[:-2], sb[:-2]]))
        flops, out_type, extra, bias = 2 * batch * m * n * k, a.type, 0, None
    else:  # mv / dot
        a, b = _need(args, 0, 1)
        m = a.shape[0] if len(a.shape) == 2 else 1
        k, n, batch = a.shape[-1], 1, 1
        flops, out_type, extra, bias = 2 * m * k, a.type, 0, None
    if bias is not None:
        flops += batch * m * n
        extra += bias.read_bytes
    nbytes = a.read_bytes + b.read_bytes + extra + batch * m * n * DTYPES[out_type][0]
    return Cost(flops, nbytes, _gemm_dtype(a, tf32), True, "gemm")


_CONV_ARGS = {  # name -> (stride, padding, dilation, transposed, output_padding, groups, bias) positions
    "convolution": (3, 4, 5, 6, 7, 8, 2), "_convolution": (3, 4, 5, 6, 7, 8, 2),
    "conv1d": (3, 4, 5, None, None, 6, 2), "conv2d": (3, 4, 5, None, None, 6, 2),
    "conv3d": (3, 4, 5, None, None, 6, 2),
    "cudnn_convolution": (3, 2, 4, None, None, 5, None),
    "cudnn_convolution_transpose": (4, 2, 5, None, 3, 6, None),
    "conv_transpose1d": (3, 4, 7, "T", 5, 6, 2), "conv_transpose2d": (3, 4, 7, "T", 5, 6, 2),
    "conv_transpose3d": (3, 4, 7, "T", 5, 6, 2),
}


def _conv(base: str, args: list[Arg], tf32: bool) -> Cost:
    x, w = _need(args, 0, 1)
    p_s, p_p, p_d, p_t, p_op, p_g, p_b = _CONV_ARGS[base]
    nsp = len(x.shape) - 2
    if nsp < 1 or len(w.shape) != nsp + 2:
        raise NoRule(f"convolution shapes {x.shape} / {w.shape}")

    def vec(pos, default):
        v = _int_list(_value(args, pos)) if isinstance(pos, int) else None
        v = v or [default]
        return v * nsp if len(v) == 1 else v

    stride, pad, dil = vec(p_s, 1), vec(p_p, 0), vec(p_d, 1)
    transposed = p_t == "T" or base == "cudnn_convolution_transpose" or (
        isinstance(p_t, int) and _bool(_value(args, p_t)) is True)
    out_pad = vec(p_op, 0)
    groups = int(_float(_value(args, p_g), 1)) or 1
    n, ksz = x.shape[0], w.shape[2:]
    if transposed:
        c_in, c_out = w.shape[0], w.shape[1] * groups
        out_sp = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
                  for i, s, p, d, k, op in zip(x.shape[2:], stride, pad, dil, ksz, out_pad)]
        flops = 2 * n * c_in * math.prod(x.shape[2:]) * (c_out // groups) * math.prod(ksz)
    else:
        c_out = w.shape[0]
        out_sp = [(i + 2 * p - d * (k - 1) - 1) // s + 1
                  for i, s, p, d, k in zip(x.shape[2:], stride, pad, dil, ksz)]
        flops = 2 * n * c_out * math.prod(out_sp) * w.shape[1] * math.prod(ksz)
    if min(out_sp) <= 0:
        raise NoRule("convolution output would be empty")
    out_n = n * c_out * math.prod(out_sp)
    nbytes = x.read_bytes + w.read_bytes + out_n * x.size
    if isinstance(p_b, int) and _present(args, p_b) and args[p_b].shape:
        flops += out_n
        nbytes += args[p_b].read_bytes
    return Cost(flops, nbytes, _gemm_dtype(x, tf32), True, "convolution")


# forward: layout (q/k/v are inputs 0-2), attn_bias position, is_causal position, causal kind ("bool", or
# "mask" = custom_mask_type != 0), logsumexp written (True, or the position of compute_log_sumexp),
# cumulative-sequence positions (varlen: no rule)
_ATTN_FWD = {
    "scaled_dot_product_attention": ("bhld", 3, 5, "bool", False, ()),
    "_scaled_dot_product_flash_attention": ("bhld", None, 4, "bool", True, ()),
    "_scaled_dot_product_flash_attention_for_cpu": ("bhld", 5, 4, "bool", False, ()),
    "_scaled_dot_product_efficient_attention": ("bhld", 3, 6, "bool", 4, ()),
    "_scaled_dot_product_cudnn_attention": ("bhld", 3, 6, "bool", 4, ()),
    "_cudnn_attention_forward": ("bhld", 3, 10, "bool", 8, (4, 5)),
    "_flash_attention_forward": ("blhd", None, 8, "bool", True, (3, 4)),
    "_efficient_attention_forward": ("blhd", 3, 9, "mask", 10, (4, 5)),
}
# backward: layout, causal pos, causal kind, positions of extra reads (out, lse, bias), cum_seq positions
_ATTN_BWD = {
    "_scaled_dot_product_flash_attention_backward": ("bhld", 11, "bool", (4, 5), (6, 7)),
    "_scaled_dot_product_efficient_attention_backward": ("bhld", 11, "bool", (4, 5, 6), ()),
    "_scaled_dot_product_cudnn_attention_backward": ("bhld", 14, "bool", (4, 5, 8), (9, 10)),
    "_cudnn_attention_backward": ("bhld", 14, "bool", (4, 5, 8), (9, 10)),
    "_flash_attention_backward": ("blhd", 11, "bool", (4, 5), (6, 7)),
    "_efficient_attention_backward": ("blhd", 14, "mask", (4, 5, 10), (6, 7)),
}


def _bhld(a: Arg, layout: str) -> tuple[int, int, int, int]:
    if len(a.shape) != 4:
        raise NoRule(f"attention input of shape {a.shape} (varlen or unbatched) has no rule")
    b, x, y, d = a.shape
    return (b, x, y, d) if layout == "bhld" else (b, y, x, d)


def _causal(args: list[Arg], pos: int, kind: str) -> bool:
    v = _value(args, pos)
    if kind == "mask":  # custom_mask_type: 0 none, 1 causal from top-left, 2 from bottom-right
        return _float(v, 0) != 0
    return _bool(v) is True


def _attention(base: str, args: list[Arg], tf32: bool = False) -> Cost:
    bwd = base in _ATTN_BWD
    off = 1 if bwd else 0
    q, k, v = _need(args, off, off + 1, off + 2)
    if bwd:
        layout, p_causal, ckind, extra_pos, cum = _ATTN_BWD[base]
    else:
        layout, p_bias, p_causal, ckind, lse, cum = _ATTN_FWD[base]
    if any(_present(args, i) and args[i].shape for i in cum):
        raise NoRule("variable-length attention (cumulative sequence lengths) has no rule")
    b, hq, lq, d = _bhld(q, layout)
    bk, hk, lk, dk = _bhld(k, layout)
    _, hv, lv, dv = _bhld(v, layout)
    if bk != b or dk != d or lv != lk or hv != hk or (hk and hq % hk):
        raise NoRule(f"attention shapes q {q.shape} k {k.shape} v {v.shape} do not fit")
    pair = b * hq * lq * lk
    flops = 2 * pair * (3 * d + 2 * dv) if bwd else 2 * pair * (d + dv)
    if _causal(args, p_causal, ckind):
        flops //= 2
    if bwd:
        g = _need(args, 0)[0]
        reads = g.read_bytes + q.read_bytes + k.read_bytes + v.read_bytes
        reads += sum(args[i].read_bytes for i in extra_pos if _present(args, i))
        writes = q.numel * q.size + k.numel * k.size + v.numel * v.size
    else:
        reads = q.read_bytes + k.read_bytes + v.read_bytes
        if p_bias is not None and _present(args, p_bias):
            reads += args[p_bias].read_bytes
        writes = b * hq * lq * dv * q.size
        want_lse = lse if isinstance(lse, bool) else _bool(_value(args, lse)) is True
        if want_lse:
            writes += b * hq * lq * 4
    return Cost(flops, reads + writes, _gemm_dtype(q, tf32), True, "attention")


def _gather(base: str, args: list[Arg]) -> Cost:
    if base == "embedding":
        w, idx = _need(args, 0, 1)
        rows = idx.numel
        row = w.numel // w.shape[0] if w.shape else 0
        return Cost(0, idx.read_bytes + 2 * rows * row * w.size, "fp32", False, "embedding")
    if base == "index_select":
        x, idx = _need(args, 0, 2)
        dim = int(_float(_value(args, 1), 0)) % max(len(x.shape), 1)
        out_n = (x.numel // x.shape[dim] if x.shape and x.shape[dim] else 0) * idx.numel
        return Cost(0, idx.read_bytes + 2 * out_n * x.size, "fp32", False, "embedding")
    if base == "gather":
        x, idx = _need(args, 0, 2)
        return Cost(0, idx.read_bytes + 2 * idx.numel * x.size, "fp32", False, "gather")
    if base == "embedding_dense_backward":
        g, idx = _need(args, 0, 1)
        num = int(_float(_value(args, 2), -1))
        if num < 0 or not g.shape:
            raise NoRule("num_weights not recorded")
        rows = min(idx.numel, num)  # rows touched; the zero fill of the whole table is its own operator
        return Cost(g.numel, g.read_bytes + idx.read_bytes + rows * g.shape[-1] * g.size, "fp32", False,
                    "embedding")
    # nll_loss_forward(self, target, weight, reduction, ignore_index) / nll_loss_backward(grad, self, target, ...)
    if base == "nll_loss_forward":
        x, t = _need(args, 0, 1)
        out_n = 1 if _float(_value(args, 3), 1) != 0 else t.numel
        return Cost(t.numel, t.read_bytes + t.numel * x.size + (out_n + 1) * x.size, "fp32", False, "loss")
    g, x, t = _need(args, 0, 1, 2)  # grad_input is zero-filled by its own operator; one write per row here
    return Cost(t.numel, g.read_bytes + t.read_bytes + t.numel * x.size, "fp32", False, "loss")


_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")


def element_size_hint(kernel_name: str | None) -> int | None:
    """Element size in bytes from a kernel's ``OpaqueType<N>`` template argument (cat kernels), else None."""
    m = _OPAQUE.search(kernel_name or "")
    return int(m.group(1)) if m else None


def _cat(args: list[Arg], elem_size: int | None) -> Cost:
    if not args or args[0].type != "TensorList" or not isinstance(args[0].shape, list) or not args[0].shape:
        raise NoRule("tensor-list shapes not recorded by the profiler")
    if not elem_size:
        raise NoRule("tensor-list element dtype not recorded (and no kernel names it)")
    shapes, strides = args[0].shape, args[0].strides if isinstance(args[0].strides, list) else []
    parts = [Arg("unsigned char", s, strides[i] if i < len(strides) else None, "")
             for i, s in enumerate(shapes) if isinstance(s, list)]
    out_n = sum(p.numel for p in parts)
    return Cost(0, elem_size * (sum(p.distinct for p in parts) + out_n), "fp32", False, "cat")


FOREACH_CHUNK = 65536  # elements per thread block of PyTorch's multi_tensor_apply (kChunkSize)


def foreach_chunks(shapes: list[list[int]]) -> int:
    """Thread blocks PyTorch's ``multi_tensor_apply`` launches for a tensor list (summed over its
    launches): one per started chunk of ``FOREACH_CHUNK`` elements of each tensor."""
    return sum(-(-math.prod(s) // FOREACH_CHUNK) for s in shapes)


def _foreach(base: str, args: list[Arg], elem_size: int | None) -> Cost:
    """``_foreach_*`` over tensor lists: every list of one call has the same shapes. N = elements of one
    list. Elementwise families (in place or not) read each tensor-list argument once and write one
    list: ``(lists + 1)·N`` elements, N FLOPs, except ``addcmul`` with two same-shaped multiplicand
    lists, read as one list (torch.optim's only use is ``addcmul_(state, grads, grads)``, the squared
    gradient, so the second read is of the same memory; a lower bound either way); ``copy_`` reads
    one list and writes one (2·N); ``zero_`` writes one (N); ``norm`` reads one (N) and writes one
    value per tensor. 0-dim tensor arguments (a tensor scalar) add their element."""
    lists = [a for a in args if a.type == "TensorList"]
    if not lists or not all(isinstance(a.shape, list) and a.shape and all(isinstance(s, list) for s in a.shape)
                            for a in lists):
        raise NoRule("tensor-list shapes not recorded by the profiler")
    if not elem_size:
        raise NoRule("tensor-list element dtype not recorded")
    n = sum(math.prod(s) for s in lists[0].shape)
    if any(sum(math.prod(s) for s in a.shape) != n for a in lists[1:]):
        raise NoRule("tensor lists of different sizes")
    scalars = sum(a.read_bytes for a in args if a.is_tensor)
    stem = base[len("_foreach_"):].rstrip("_")
    if stem == "zero":
        return Cost(0, n * elem_size, "fp32", False, "foreach")
    if stem == "copy":
        return Cost(0, 2 * n * elem_size, "fp32", False, "foreach")
    if stem == "norm":
        return Cost(n, (n + len(lists[0].shape)) * elem_size + scalars, "fp32", False, "foreach")
    reads = len(lists)
    if stem == "addcmul" and len(lists) == 3 and lists[1].shape == lists[2].shape:
        reads = 2  # tensor1 is tensor2 in every torch.optim call (v += c * g * g): read once
    if stem in UNARY or stem in BINARY:
        return Cost(n, (reads + 1) * n * elem_size + scalars, "fp32", False, "foreach")
    raise NoRule(f"no rule for {base}")


# Dtype words in kernel names -> the Kineto dtype name they stand for. Used only for operators recorded
# with shapes but without dtypes (Nsight Systems NVTX ranges from emit_nvtx): see ``kernel_name_dtype``.
# A word must not be glued to a preceding letter ("bf16" is not "f16", "tfloat32" is not "float").
# Every fp8 spelling maps to e4m3fn: both fp8 formats have 1-byte elements and one peak.
KERNEL_DTYPE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?<![a-z])bfloat16(?![0-9])", "c10::BFloat16"),        # __nv_bfloat16, c10::BFloat16
    (r"(?<![a-z])bf16(?![0-9])", "c10::BFloat16"),            # sm90_xmma_gemm_bf16bf16_...
    (r"(?<![a-z])(?:__)?half(?![a-z])", "c10::Half"),         # __half, __half2, c10::Half
    (r"(?<![a-z])(?:fp|f)16(?![0-9])", "c10::Half"),          # f16, fp16
    (r"(?<![a-z])float16(?![0-9])", "c10::Half"),             # float16
    (r"(?<![a-z])hgemm", "c10::Half"),                        # cuBLAS hgemm
    (r"(?<![a-z])float(?!8|16|64|_e[45]m)", "float"),         # float, float4, float32
    (r"(?<![a-z])t?(?:fp|f)32(?![0-9])", "float"),            # f32, fp32, tf32 (fp32 storage)
    (r"(?<![a-z])tfloat32", "float"),                         # cutlass::tfloat32_t
    (r"(?<![a-z])sgemm", "float"),                            # cuBLAS sgemm
    (r"(?<![a-z])double(?![a-z])", "double"),
    (r"(?<![a-z])(?:fp|f)64(?![0-9])", "double"),             # f64, fp64
    (r"(?<![a-z])dgemm", "double"),                           # cuBLAS dgemm
    (r"(?<![a-z])(?:fp8|f8|float8)", "c10::Float8_e4m3fn"),  # fp8, float8, c10::Float8_e4m3fn
    (r"e4m3|e5m2", "c10::Float8_e4m3fn"),                     # __nv_fp8_e4m3, float_e5m2_t
)
_KERNEL_DTYPE_RES = tuple((re.compile(p, re.IGNORECASE), t) for p, t in KERNEL_DTYPE_PATTERNS)
MIXED = "mixed"  # a kernel name naming more than one dtype (casts, mixed-precision GEMMs)

# Operators whose inputs do not share one dtype (integer indices, targets, casts): never given a dtype
# from kernel names.
NO_DTYPE_INFERENCE = frozenset({
    "embedding", "embedding_backward", "embedding_dense_backward", "index_select", "gather", "scatter",
    "scatter_add", "index", "index_put", "index_put_", "index_add", "index_copy", "nll_loss_forward",
    "nll_loss_backward", "nll_loss", "cross_entropy_loss", "_to_copy", "to", "copy_", "copy",
    "masked_fill", "masked_fill_", "where", "argmax", "argmin", "topk", "sort", "multinomial",
    "_local_scalar_dense", "nonzero", "bincount", "_embedding_bag", "embedding_bag",
})


def kernel_name_dtype(kernel_name: str | None) -> str | None:
    """The Kineto dtype name a kernel's name states (``KERNEL_DTYPE_PATTERNS``): None when it names
    none (memset, memcpy, ``sgemm``-less cuBLAS kernels), ``MIXED`` when it names more than one."""
    found = {t for r, t in _KERNEL_DTYPE_RES if r.search(kernel_name or "")}
    return found.pop() if len(found) == 1 else (MIXED if found else None)


def infer_input_types(name: str, dims: str | None, dtype: str) -> str | None:
    """``input_types`` JSON for an operator recorded with shapes (``dims``) but no dtypes: every input
    with a non-empty shape is a tensor of ``dtype`` (a list of shapes: a ``TensorList``); an input with
    an empty shape is taken as a non-tensor (a 0-dim tensor is indistinguishable from a scalar and costs
    one element). None when no inference is allowed: no shapes, an unknown dtype, or an operator whose
    inputs do not share a dtype (``NO_DTYPE_INFERENCE``)."""
    base = name.split("::", 1)[1].split(".", 1)[0] if isinstance(name, str) and "::" in name else None
    d = _load(dims)
    if base is None or base in NO_DTYPE_INFERENCE or dtype not in DTYPES or not d:
        return None
    types = []
    for s in d:
        if isinstance(s, list) and s and all(isinstance(i, list) for i in s):
            types.append("TensorList")
        elif isinstance(s, list) and s and all(isinstance(i, int) for i in s):
            types.append(dtype)
        else:
            types.append("")
    return json.dumps(types)


def model_op(name: str, dims: str | None, types: str | None, strides: str | None, concrete: str | None,
             *, elem_size_hint: int | None = None, tf32_matmul: bool = False,
             tf32_conv: bool = True) -> Cost:
    """FLOPs and minimum bytes of one call of operator ``name`` (module docstring has the rules).

    ``tf32_matmul``/``tf32_conv``: whether fp32 GEMMs/convolutions were allowed to use TF32 tensor cores
    (they then run against the TF32 peak). ``elem_size_hint``: element size for tensor-list inputs
    whose dtype Kineto does not record (``cat``: from the kernel name; ``_foreach_*``: from the
    gradients the list shapes were inferred from), given by the caller.
    """
    base = name.split("::", 1)[1] if isinstance(name, str) and name.startswith("aten::") else None
    if base is None:
        if name in ("record_param_comms",) or (isinstance(name, str) and name.startswith(("c10d::", "nccl:"))):
            return Cost(None, None, reason="collective communication (interconnect traffic, not modelled)")
        return Cost(None, None, reason="not an aten operator (no rule)")
    base = base.split(".", 1)[0]
    args = parse_args(dims, types, strides, concrete)
    inplace = base.endswith("_") and not base.startswith("_") and base not in ("copy_", "fill_", "zero_")
    stem = base[:-1] if inplace else base
    try:
        if base in VIEWS:
            return Cost(0, 0, None, False, "view")
        if base.startswith("_foreach_"):
            return _foreach(base, args, elem_size_hint)
        if stem in UNARY or stem in BINARY or stem in COMPARE or base == "native_dropout_backward":
            return _elementwise(stem, inplace, args)
        if base == "native_dropout":
            (x,) = _need(args, 0)
            return Cost(x.numel, x.read_bytes + x.numel * (x.size + 1), "fp32", False, "elementwise")
        if base in ("copy_", "copy", "fill_", "zero_", "fill", "clone", "contiguous", "_to_copy", "to",
                    "zeros_like", "ones_like", "full_like"):
            return _copy(base, args)
        if base in REDUCE:
            return _reduce(base, args)
        if base in SCAN:
            return _scan(args)
        if base in ("softmax", "_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
                    "_log_softmax_backward_data"):
            return _softmax(base, args)
        if base in ("native_layer_norm", "layer_norm", "native_layer_norm_backward", "rms_norm",
                    "_fused_rms_norm", "native_group_norm", "group_norm", "native_batch_norm",
                    "cudnn_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training"):
            return _norm(base, args)
        if base in ("mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "linear", "matmul", "mv", "dot",
                    "_scaled_mm"):
            return _gemm(base, args, tf32_matmul)
        if base in _CONV_ARGS:
            return _conv(base, args, tf32_conv)
        if base in _ATTN_FWD or base in _ATTN_BWD:
            return _attention(base, args)
        if base in ("embedding", "index_select", "gather", "embedding_dense_backward", "nll_loss_forward",
                    "nll_loss_backward"):
            return _gather(base, args)
        if base in ("cat", "stack", "_cat"):
            return _cat(args, elem_size_hint)
    except NoRule as e:
        return Cost(None, None, reason=str(e))
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        return Cost(None, None, reason=f"recorded inputs do not fit the {base} rule ({type(e).__name__})")
    return Cost(None, None, reason="no rule for this operator")
