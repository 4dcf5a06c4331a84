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

Here: ``model_op`` and the rules for vector work (views, elementwise, copies, reductions, scans, softmax,
norms, gathers, ``cat``, ``_foreach_*``). Elsewhere: the recorded inputs and shared helpers
(``opmodel_inputs``), GEMM/convolution/attention (``opmodel_tensorcore``), dtypes from kernel names
(``kernel_dtypes``).
"""

from __future__ import annotations

import math

from .kernel_dtypes import (
    KERNEL_DTYPE_PATTERNS,
    MIXED,
    NO_DTYPE_INFERENCE,
    element_size_hint,
    infer_input_types,
    kernel_name_dtype,
)
from .opmodel_inputs import (
    DTYPES,
    SCALAR_TYPE_CODES,
    Arg,
    Cost,
    NoRule,
    arg_present,
    arg_value,
    as_bool,
    as_float,
    as_int_list,
    broadcast,
    code_dtype,
    need_tensors,
    parse_args,
    promote,
    tensor_args,
)
from .opmodel_tensorcore import ATTN_BWD, ATTN_FWD, CONV_ARGS, attention, conv, gemm

__all__ = [
    "DTYPES", "FOREACH_CHUNK", "KERNEL_DTYPE_PATTERNS", "MIXED", "NO_DTYPE_INFERENCE", "SCALAR_TYPE_CODES", "Arg",
    "Cost", "NoRule", "broadcast", "element_size_hint", "foreach_chunks", "infer_input_types", "kernel_name_dtype",
    "model_op", "parse_args", "promote",
]

# ---------------------------------------------------------------- rules for vector work

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
        out, tensors = args[-1], tensor_args(args[:-1])
        if not tensors:
            raise NoRule("no tensor inputs recorded")
        return Cost(out.numel, sum(a.read_bytes for a in tensors) + out.numel * out.size, "fp32", False,
                    "elementwise")
    tensors = tensor_args(args)
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
        dst, src = need_tensors(args, 0, 1)
        return Cost(0, src.read_bytes + dst.numel * dst.size, "fp32", False, "copy")
    if base in ("fill_", "zero_", "zeros_like", "ones_like", "full_like", "fill"):
        (dst,) = need_tensors(args, 0)
        return Cost(0, dst.numel * dst.size, "fp32", False, "fill")
    (src,) = need_tensors(args, 0)
    out_type = src.type
    if base in ("_to_copy", "to"):
        out_type = code_dtype(arg_value(args, 1)) or src.type
    return Cost(0, src.read_bytes + src.numel * DTYPES[out_type][0], "fp32", False, "copy")


def _reduce(base: str, args: list[Arg]) -> Cost:
    (x,) = need_tensors(args, 0)
    nd = len(x.shape)
    dims = as_int_list(arg_value(args, 2 if base in ("norm", "linalg_vector_norm") else 1))
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
    (x,) = need_tensors(args, 0)
    out_type = "long int" if DTYPES[x.type][1] < 2 else x.type
    return Cost(x.numel, x.read_bytes + x.numel * DTYPES[out_type][0], "fp32", False, "scan")


def _softmax(base: str, args: list[Arg]) -> Cost:
    if base.endswith("_backward_data"):
        g, y = need_tensors(args, 0, 1)
        out_type = code_dtype(arg_value(args, 3)) or g.type
        return Cost(3 * g.numel, g.read_bytes + y.read_bytes + g.numel * DTYPES[out_type][0], "fp32",
                    False, "softmax")
    (x,) = need_tensors(args, 0)
    out_type = "float" if as_bool(arg_value(args, 2)) else x.type
    return Cost(5 * x.numel, x.read_bytes + x.numel * DTYPES[out_type][0], "fp32", False, "softmax")


def _norm(base: str, args: list[Arg]) -> Cost:
    if base == "native_layer_norm_backward":
        g, x = need_tensors(args, 0, 1)
        reads = sum(args[i].read_bytes for i in (0, 1, 3, 4, 5) if arg_present(args, i))
        mask = arg_value(args, 7).replace(" ", "").lower()
        want = [m == "true" for m in mask.strip("[]").split(",")] if mask else [True, True, True]
        writes = x.numel * x.size if want[0] else 0
        for j, i in ((1, 5), (2, 6)):
            if len(want) > j and want[j] and arg_present(args, i):
                writes += args[i].numel * args[i].size
        return Cost(10 * x.numel, reads + writes, "fp32", False, "norm")
    (x,) = need_tensors(args, 0)
    if base in ("native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm"):
        shape = as_int_list(arg_value(args, 1))
        n = math.prod(shape) if shape else (args[2].numel if arg_present(args, 2) else None)
        if not n:
            raise NoRule("normalized_shape not recorded")
        rows = x.numel // n
        params = (2, 3) if "layer" in base else (2,)
        reads = x.read_bytes + sum(args[i].read_bytes for i in params if arg_present(args, i))
        stats = {"native_layer_norm": 2, "_fused_rms_norm": 1}.get(base, 0) * rows * 4
        per = 8 if "layer" in base else 4
        return Cost(per * x.numel, reads + x.numel * x.size + stats, "fp32", False, "norm")
    if base in ("native_group_norm", "group_norm"):
        reads = x.read_bytes + sum(args[i].read_bytes for i in (1, 2) if arg_present(args, i))
        groups = int(as_float(arg_value(args, 6 if base == "native_group_norm" else 1), 1))
        stats = 2 * x.shape[0] * groups * 4 if base == "native_group_norm" and x.shape else 0
        return Cost(8 * x.numel, reads + x.numel * x.size + stats, "fp32", False, "norm")
    # native_batch_norm / cudnn_batch_norm / _batch_norm_impl_index: input, weight, bias, running mean/var
    reads = sum(args[i].read_bytes for i in range(5) if arg_present(args, i))
    c = x.shape[1] if len(x.shape) > 1 else 1
    return Cost(8 * x.numel, reads + x.numel * x.size + 2 * c * 4, "fp32", False, "norm")



def _gathered(table: Arg, idx: Arg, out_n: int, rule: str) -> Cost:
    """Read the indices and the gathered elements, write them: the table's elements are read at most once
    (gathering more elements than the table holds repeats some, served from cache), so the reads are bounded
    by the table's size."""
    return Cost(0, idx.read_bytes + min(out_n, table.numel) * table.size + out_n * table.size, "fp32", False, rule)


def _gather(base: str, args: list[Arg]) -> Cost:
    if base == "embedding":
        w, idx = need_tensors(args, 0, 1)
        row = w.numel // w.shape[0] if w.shape else 0
        return _gathered(w, idx, idx.numel * row, "embedding")
    if base == "index_select":
        x, idx = need_tensors(args, 0, 2)
        dim = int(as_float(arg_value(args, 1), 0)) % max(len(x.shape), 1)
        out_n = (x.numel // x.shape[dim] if x.shape and x.shape[dim] else 0) * idx.numel
        return _gathered(x, idx, out_n, "embedding")
    if base == "gather":
        x, idx = need_tensors(args, 0, 2)
        return _gathered(x, idx, idx.numel, "gather")
    if base == "embedding_dense_backward":
        g, idx = need_tensors(args, 0, 1)
        num = int(as_float(arg_value(args, 2), -1))
        if num < 0 or not g.shape:
            raise NoRule("num_weights not recorded")
        rows = min(idx.numel, num)  # rows touched; the zero fill of the whole table is its own operator
        return Cost(g.numel, g.read_bytes + idx.read_bytes + rows * g.shape[-1] * g.size, "fp32", False,
                    "embedding")
    # nll_loss_forward(self, target, weight, reduction, ignore_index) / nll_loss_backward(grad, self, target, ...)
    if base == "nll_loss_forward":
        x, t = need_tensors(args, 0, 1)
        out_n = 1 if as_float(arg_value(args, 3), 1) != 0 else t.numel
        return Cost(t.numel, t.read_bytes + t.numel * x.size + (out_n + 1) * x.size, "fp32", False, "loss")
    g, x, t = need_tensors(args, 0, 1, 2)  # grad_input is zero-filled by its own operator; one write per row here
    return Cost(t.numel, g.read_bytes + t.read_bytes + t.numel * x.size, "fp32", False, "loss")


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
            (x,) = need_tensors(args, 0)
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
                    "_scaled_mm", "_grouped_mm", "_scaled_grouped_mm"):
            return gemm(base, args, tf32_matmul)
        if base in CONV_ARGS:
            return conv(base, args, tf32_conv)
        if base in ATTN_FWD or base in ATTN_BWD:
            return attention(base, args)
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
