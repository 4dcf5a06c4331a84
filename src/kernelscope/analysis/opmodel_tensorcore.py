"""``opmodel``'s rules for tensor-core work: GEMM (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``linear``,
``matmul``, ``mv``, ``dot``, ``_scaled_mm``, and the grouped GEMM of mixture-of-experts layers, ``_grouped_mm`` and
``_scaled_grouped_mm``), convolution (forward and transposed) and attention
(scaled-dot-product, flash, efficient and cuDNN kernels, forward and backward). Each returns a ``Cost`` with
``tensor=True`` and the dtype whose tensor-core peak applies (fp32 as ``tf32`` when TF32 was allowed).
"""

from __future__ import annotations

import math

from .opmodel_inputs import (
    DTYPES,
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
)


def _gemm_dtype(a: Arg, tf32: bool) -> str:
    key = DTYPES[a.type][2]
    return "tf32" if key == "fp32" and tf32 else key


def _mm_dims(a: Arg, b: Arg) -> tuple[int, int, int]:
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise NoRule(f"mm shapes {a.shape} x {b.shape}")
    return a.shape[0], b.shape[1], a.shape[1]


#: Grouped GEMM: (position of ``offs``, of ``out_dtype``) in the recorded inputs.
GROUPED_ARGS = {"_grouped_mm": (2, 4), "_scaled_grouped_mm": (4, 7)}


def _grouped_dims(a: Arg, b: Arg) -> tuple[int, int, int, int]:
    """``(groups in the output, m, n, k)`` of ``_grouped_mm(a, b, offs)``, whose FLOPs are ``2·m·n·k`` summed over
    the groups. 2-D x 3-D: ``offs`` splits a's rows among b's experts ([M, K] x [G, K, N] -> [M, N]); 3-D x 2-D:
    it splits b's columns ([G, M, K] x [K, N] -> [M, N]); 2-D x 2-D: it splits the shared K (the weight gradient,
    [M, K] x [K, N] -> [G, M, N]); 3-D x 3-D: a batch. The offsets are taken to cover every row (column, K), as
    a router's token counts do."""
    sa, sb = a.shape, b.shape
    if len(sa) == 2 and len(sb) == 3 and sa[1] == sb[1]:
        return 1, sa[0], sb[2], sa[1]
    if len(sa) == 3 and len(sb) == 2 and sa[2] == sb[0]:
        return 1, sa[1], sb[1], sa[2]
    if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0]:
        return 0, sa[0], sb[1], sa[1]  # 0: the output has one [M, N] per group, G from offs
    if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0] and sa[2] == sb[1]:
        return sa[0], sa[1], sb[2], sa[2]
    raise NoRule(f"grouped mm shapes {sa} x {sb}")


def grouped_gemm(base: str, args: list[Arg], tf32: bool) -> Cost:
    a, b = need_tensors(args, 0, 1)
    p_offs, p_out = GROUPED_ARGS[base]
    out_groups, m, n, k = _grouped_dims(a, b)
    if out_groups == 0:
        (offs,) = need_tensors(args, p_offs)
        out_groups = offs.numel
    out_type = code_dtype(arg_value(args, p_out)) or (a.type if base == "_grouped_mm" else "c10::BFloat16")
    extra = sum(args[i].read_bytes for i in (2, 3) if base == "_scaled_grouped_mm" and arg_present(args, i))
    batch = out_groups if len(a.shape) == 3 and len(b.shape) == 3 else 1
    flops = 2 * m * n * k * batch
    nbytes = a.read_bytes + b.read_bytes + extra + out_groups * m * n * DTYPES[out_type][0]
    return Cost(flops, nbytes, _gemm_dtype(a, tf32), True, "gemm")


def gemm(base: str, args: list[Arg], tf32: bool) -> Cost:
    if base in GROUPED_ARGS:
        return grouped_gemm(base, args, tf32)
    if base in ("mm", "_scaled_mm"):
        a, b = need_tensors(args, 0, 1)
        m, n, k = _mm_dims(a, b)
        flops, batch, bias = 2 * m * n * k, 1, None
        out_type = a.type
        if base == "_scaled_mm":
            out_type = code_dtype(arg_value(args, 6)) or "c10::BFloat16"
            bias = args[4] if arg_present(args, 4) else None
        extra = sum(args[i].read_bytes for i in (2, 3) if base == "_scaled_mm" and arg_present(args, i))
    elif base in ("addmm", "_addmm_activation"):
        c, a, b = need_tensors(args, 0, 1, 2)
        m, n, k = _mm_dims(a, b)
        batch, out_type, extra = 1, a.type, 0
        bias = c if as_float(arg_value(args, 3), 1.0) != 0.0 else None
        flops = 2 * m * n * k + (m * n if base == "_addmm_activation" else 0)
    elif base in ("bmm", "baddbmm"):
        off = 1 if base == "baddbmm" else 0
        a, b = need_tensors(args, off, off + 1)
        if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[2] != b.shape[1] or a.shape[0] != b.shape[0]:
            raise NoRule(f"bmm shapes {a.shape} x {b.shape}")
        batch, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
        flops, out_type, extra = 2 * batch * m * n * k, a.type, 0
        bias = args[0] if off and as_float(arg_value(args, 3), 1.0) != 0.0 else None
    elif base == "linear":
        a, w = need_tensors(args, 0, 1)
        if len(w.shape) != 2 or not a.shape or a.shape[-1] != w.shape[1]:
            raise NoRule(f"linear shapes {a.shape} x {w.shape}")
        k, n = w.shape[1], w.shape[0]
        m, batch, b = a.numel // k, 1, w
        flops, out_type, extra = 2 * m * n * k, a.type, 0
        bias = args[2] if arg_present(args, 2) and args[2].shape else None
    elif base == "matmul":
        a, b = need_tensors(args, 0, 1)
        sa = [1] + a.shape if len(a.shape) == 1 else a.shape
        sb = b.shape + [1] if len(b.shape) == 1 else b.shape
        if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2]:
            raise NoRule(f"matmul shapes {a.shape} x {b.shape}")
        m, k, n = sa[-2], sa[-1], sb[-1]
        batch = math.prod(broadcast([sa[:-2], sb[:-2]]))
        flops, out_type, extra, bias = 2 * batch * m * n * k, a.type, 0, None
    else:  # mv / dot
        a, b = need_tensors(args, 0, 1)
        m = a.shape[0] if len(a.shape) == 2 else 1
        k, n, batch = a.shape[-1], 1, 1
        flops, out_type, extra, bias = 2 * m * k, a.type, 0, None
    if bias is not None:
        flops += batch * m * n
        extra += bias.read_bytes
    nbytes = a.read_bytes + b.read_bytes + extra + batch * m * n * DTYPES[out_type][0]
    return Cost(flops, nbytes, _gemm_dtype(a, tf32), True, "gemm")


CONV_ARGS = {  # name -> (stride, padding, dilation, transposed, output_padding, groups, bias) positions
    "convolution": (3, 4, 5, 6, 7, 8, 2), "_convolution": (3, 4, 5, 6, 7, 8, 2),
    "conv1d": (3, 4, 5, None, None, 6, 2), "conv2d": (3, 4, 5, None, None, 6, 2),
    "conv3d": (3, 4, 5, None, None, 6, 2),
    "cudnn_convolution": (3, 2, 4, None, None, 5, None),
    "cudnn_convolution_transpose": (4, 2, 5, None, 3, 6, None),
    "conv_transpose1d": (3, 4, 7, "T", 5, 6, 2), "conv_transpose2d": (3, 4, 7, "T", 5, 6, 2),
    "conv_transpose3d": (3, 4, 7, "T", 5, 6, 2),
}


def conv(base: str, args: list[Arg], tf32: bool) -> Cost:
    x, w = need_tensors(args, 0, 1)
    p_s, p_p, p_d, p_t, p_op, p_g, p_b = CONV_ARGS[base]
    nsp = len(x.shape) - 2
    if nsp < 1 or len(w.shape) != nsp + 2:
        raise NoRule(f"convolution shapes {x.shape} / {w.shape}")

    def vec(pos, default):
        v = as_int_list(arg_value(args, pos)) if isinstance(pos, int) else None
        v = v or [default]
        return v * nsp if len(v) == 1 else v

    stride, pad, dil = vec(p_s, 1), vec(p_p, 0), vec(p_d, 1)
    transposed = p_t == "T" or base == "cudnn_convolution_transpose" or (
        isinstance(p_t, int) and as_bool(arg_value(args, p_t)) is True)
    out_pad = vec(p_op, 0)
    groups = int(as_float(arg_value(args, p_g), 1)) or 1
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
    if isinstance(p_b, int) and arg_present(args, p_b) and args[p_b].shape:
        flops += out_n
        nbytes += args[p_b].read_bytes
    return Cost(flops, nbytes, _gemm_dtype(x, tf32), True, "convolution")


# forward: layout (q/k/v are inputs 0-2), attn_bias position, is_causal position, causal kind ("bool", or
# "mask" = custom_mask_type != 0), logsumexp written (True, or the position of compute_log_sumexp),
# cumulative-sequence positions (varlen: no rule)
ATTN_FWD = {
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
ATTN_BWD = {
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
    v = arg_value(args, pos)
    if kind == "mask":  # custom_mask_type: 0 none, 1 causal from top-left, 2 from bottom-right
        return as_float(v, 0) != 0
    return as_bool(v) is True


def attention(base: str, args: list[Arg], tf32: bool = False) -> Cost:
    bwd = base in ATTN_BWD
    off = 1 if bwd else 0
    q, k, v = need_tensors(args, off, off + 1, off + 2)
    if bwd:
        layout, p_causal, ckind, extra_pos, cum = ATTN_BWD[base]
    else:
        layout, p_bias, p_causal, ckind, lse, cum = ATTN_FWD[base]
    if any(arg_present(args, i) and args[i].shape for i in cum):
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
        g = need_tensors(args, 0)[0]
        reads = g.read_bytes + q.read_bytes + k.read_bytes + v.read_bytes
        reads += sum(args[i].read_bytes for i in extra_pos if arg_present(args, i))
        writes = q.numel * q.size + k.numel * k.size + v.numel * v.size
    else:
        reads = q.read_bytes + k.read_bytes + v.read_bytes
        if p_bias is not None and arg_present(args, p_bias):
            reads += args[p_bias].read_bytes
        writes = b * hq * lq * dv * q.size
        want_lse = lse if isinstance(lse, bool) else as_bool(arg_value(args, lse)) is True
        if want_lse:
            writes += b * hq * lq * 4
    return Cost(flops, reads + writes, _gemm_dtype(q, tf32), True, "attention")

