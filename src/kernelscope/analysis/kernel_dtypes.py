"""Dtypes and element sizes that kernel names state, for operators the profiler recorded without them:
``kernel_name_dtype`` (the dtype word of a kernel's name, ``KERNEL_DTYPE_PATTERNS``), ``infer_input_types``
(the ``input_types`` of an operator recorded with shapes but no dtypes, from that dtype) and
``element_size_hint`` (a cat kernel's ``OpaqueType<N>``).
"""

from __future__ import annotations

import json
import re

from .opmodel_inputs import DTYPES, load_list

_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")


def element_size_hint(kernel_name: str | None) -> int | None:
    """Element size in bytes from a kernel's ``OpaqueType<N>`` template argument (cat kernels), else None."""
    m = _OPAQUE.search(kernel_name or "")
    return int(m.group(1)) if m else None


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
    d = load_list(dims)
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

