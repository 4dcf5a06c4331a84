"""Rule 13 of recommend, ``unaligned_gemm`` (recommend.py's docstring): 16-bit GEMMs with a dimension off the
tensor cores' alignment, far below the FLOP/s the trace's aligned GEMMs reach."""

from __future__ import annotations

import statistics
from typing import Any

from .findings import _ev, _finding, _ms, _num
from .opmodel_inputs import json_value
from .result import Result

#: Elements in 16 bytes: cuBLAS's fastest tensor-core kernels want every GEMM dimension a multiple of it.
GEMM_ALIGN = {"fp16": 8, "bf16": 8, "fp8": 16}
UNALIGNED_SHARE_MIN = 0.05  # the unaligned GEMMs' share of GPU time worth a finding
UNALIGNED_PCT_MAX = 50.0  # an unaligned GEMM at half its peak FLOP/s or more is not what is held back
PAD_TO = 64  # the padding advised: a multiple of 64 suits every tile shape


def _list(text: Any) -> list:
    v = json_value(text)
    return v if isinstance(v, list) else []


def leading_dims(name: str, dims_text: Any, strides_text: Any) -> list[int]:
    """The leading dimensions of a GEMM's operands and output (the row lengths in memory that the tensor-core kernels
    load along): each matrix input's from its strides (a row-major one's ``strides[-2]``, a transposed one's
    ``strides[-1]``), else, without strides, its last dimension; and the output's, N. GPT-2's LM head on an H100:
    ``[[8192, 768], [768, 50257]]`` (N = 50,257), ``[[8192, 50257], [50257, 768]]`` (K) and ``[[50257, 8192],
    [8192, 768]]`` of strides ``[[1, 50257], [768, 1]]`` (a transposed operand: M) all ran at 9-15% of peak."""
    shapes, strides = _list(dims_text), _list(strides_text)
    mats = [(i, sh) for i, sh in enumerate(shapes) if isinstance(sh, list) and len(sh) >= 2
            and all(isinstance(d, int) for d in sh[-2:])]
    out = []
    for i, sh in mats:
        st = strides[i] if i < len(strides) and isinstance(strides[i], list) and len(strides[i]) == len(sh) else None
        if st is None or not all(isinstance(x, int) for x in st[-2:]):
            out.append(sh[-1])  # no strides recorded: the row length of a row-major operand
        elif (st[-1] == 1 or st[-2] == 1) and sh[-1] > 1 and sh[-2] > 1:  # (an [M, 1] scale is no matrix)
            out.append(st[-2] if st[-1] == 1 else st[-1])
    if mats:  # the output [M, N] is written row-major: N (linear's weight is [N, K])
        out.append(mats[1][1][-2] if name == "aten::linear" and len(mats) > 1 else mats[-1][1][-1])
    return out


def rule_unaligned_gemm(res: dict[str, Result]) -> list[dict]:
    """bandwidth ``per_signature`` compute-bound GEMM rows in fp16/bf16 (fp8) with a leading dimension
    (``leading_dims``) not a multiple of 8 (16) and ``pct_peak_flops`` < UNALIGNED_PCT_MAX, together >=
    UNALIGNED_SHARE_MIN of GPU time: one finding. Saving: each one's time at the median ``pct_peak_flops`` of the
    trace's other GEMMs of its dtype (null when none).

    GPT-2 small's fp16 step on an H100 (10 steps): its three LM-head GEMMs (50,257 a leading dimension of each) at
    9-15% of peak, 23% of GPU time, the other fp16 GEMMs at a median of 66%: predicted saving 133.40 ms. Padded to
    50,304 on the same card they took 25.11 ms instead of 162.47 (137.36 ms saved), the median step 57.86 ms instead
    of 71.43, and the rule was silent."""
    bw = res["bandwidth"]
    total, sig = _num(bw.scalars.get("gpu_ns")), bw.tables["per_signature"]
    if not total or sig.empty or not {"rule", "dtype", "pct_peak_flops"} <= set(sig.columns):
        return []
    hits, aligned = [], {}
    for r in sig.sort_values("gpu_ns", ascending=False, kind="stable").itertuples(index=False):
        align, pct = GEMM_ALIGN.get(r.dtype), _num(r.pct_peak_flops)
        if r.rule != "gemm" or align is None or pct is None or r.bound != "compute":  # the bandwidth model's GEMMs
            continue  # (a memory-bound GEMV of a decode step, M = 1, is not held back by FLOP/s)
        lds = leading_dims(r.name, r.input_dims, getattr(r, "input_strides", None))
        off = sorted({d for d in lds if d % align})
        if not off:
            aligned.setdefault(r.dtype, []).append(pct)
        elif pct < UNALIGNED_PCT_MAX:
            hits.append((r, off, pct))
    share = sum(r.gpu_ns for r, _, _ in hits) / total
    if share < UNALIGNED_SHARE_MIN:
        return []
    ev, parts, saving = [_ev("bandwidth", "gpu_ns", bw.scalars["gpu_ns"])], [], 0
    for r, off, pct in hits:
        row = {"name": r.name, "input_dims": r.input_dims, "input_types": r.input_types}
        ev += [_ev("bandwidth", "per_signature.gpu_ns", r.gpu_ns, row),
               _ev("bandwidth", "per_signature.pct_peak_flops", r.pct_peak_flops, row)]
        ref = statistics.median(aligned[r.dtype]) if r.dtype in aligned else None
        saving = None if saving is None or ref is None or ref <= pct else saving + int(r.gpu_ns * (1 - pct / ref))
        pad = ", ".join(f"{d:,} -> {-(-d // PAD_TO) * PAD_TO:,}" for d in off)
        parts.append(f"{r.name} {r.input_dims} ({r.dtype}, {pct:.0f}% of peak FLOP/s, {_ms(r.gpu_ns)}; {pad})")
    dtypes = sorted({r.dtype for r, _, _ in hits})
    medians = "; ".join(f"{d} {statistics.median(aligned[d]):.0f}%" for d in dtypes if d in aligned)
    msg = (f"{len(hits)} compute-bound 16-bit GEMM signature(s) with a leading dimension off the tensor cores' "
           f"alignment (a multiple of 8 elements, fp8 16) take {share:.0%} of GPU time at low FLOP/s (bandwidth): "
           + "; ".join(parts[:3]) + (f"; and {len(parts) - 3} more" if len(parts) > 3 else "")
           + ". The GEMM libraries' fastest tensor-core kernels (cuBLAS; hipBLASLt's matrix cores alike) load along "
           f"the leading dimensions and want them aligned: pad that dimension to a multiple of {PAD_TO} as shown (a "
           "vocabulary of 50,257 to 50,304, say)"
           + (f"; the trace's other GEMMs of that precision reach a median of {medians} of peak, at which these "
              f"would take {_ms(saving)} less." if medians and saving else "."))
    return [_finding("unaligned_gemm", share, msg, ev, saving or None)]
