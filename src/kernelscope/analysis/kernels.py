"""Kernel time by category, top kernels, tensor-core share, short kernels, duration histograms, occupancy;
and (``idle``) GPU busy/idle over time.

Definitions (docs/metrics.md, "Kernels" and "Idle over time", is the canonical text; times are int ns):

- Only ``kind = 'kernel'`` activities count (memcpy/memset are not kernels). ``kernel_time_ns`` = sum of
  kernel durations.
- **Category** of a kernel: the first matching rule of ``data/kernel_categories.csv``. Rules on the kernel's
  leaf operator name (``match = op``) are tried first, then rules on the kernel name (``match = kernel``,
  case-insensitive); a kernel no rule matches is ``other``. Categories: gemm, attention, elementwise,
  reduction, norm, memory, communication, triton, other. Every kernel gets exactly one category, so the
  category times add up to ``kernel_time_ns``.
- **Tensor-core kernel**: its name matches ``TENSOR_CORE_RE`` (wgmma/hmma/imma/qmma/xmma/tensorop, the
  mma tile shapes 16816/1688/884, cuBLASLt's nvjet, FlashAttention/cuDNN SDPA, Blackwell's tcgen05,
  TensorRT-LLM's fmhaSm90/Sm100 kernels; AMD's matrix cores: hipBLASLt's ``_MI16x16..``, CK's ``xdl``,
  MIOpen's ``gtcx``, ``mfma``; Triton's flash attention ``attn_fwd``/``attn_bwd``), or it is a gemm or
  attention kernel on FP8/FP4 elements (``LOW_PRECISION_RE``: e4m3/e5m2/e2m1, which only tensor cores
  compute); and not ``SIMT_RE``
  (ffma, sgemm, dgemm, simt, gemv: FP32 FMA code paths). ``tensor_core_share`` = their time / kernel time;
  ``tensor_core_share_of_gemm_attention`` = their time / time of gemm + attention kernels.
- ``short_kernel_share``: share of kernel time in kernels shorter than ``short_ns`` (default 10 000 ns);
  ``short_graph_kernel_ns``: the part of their time that ran inside CUDA graphs (no launch call each).
- ``duration_histogram``: log2 bins, bin ``b`` holds durations in ``[2^b, 2^(b+1))`` ns (0 ns goes to b=0).
- ``est_sm_efficiency``: time-weighted mean of ``min(blocks_per_sm, 1)`` (the fraction of SMs given at
  least one block, Kineto's estimate) over kernels that carry ``blocks_per_sm``.
  ``est_occupancy_pct``: time-weighted mean of Kineto's ``est. achieved occupancy %`` over kernels where
  it is > 0 (Kineto writes 0 when it cannot estimate, e.g. cluster launches); both with coverage.
"""

from __future__ import annotations

import csv
import functools
import uuid
from importlib import resources
from typing import Any

import pandas as pd

from ..errors import UsageError
from .result import Result

DESCRIPTION = "Kernel time by category, top-k, tensor-core share, short kernels, histograms, occupancy."
IDLE_DESCRIPTION = "GPU busy and idle time over the GPU span, binned (<= 2000 bins), and idle-gap histogram."

CATEGORIES = ("gemm", "attention", "elementwise", "reduction", "norm", "memory", "communication",
              "triton", "other")
#: AMD: hipBLASLt/Tensile GEMMs name their MFMA instruction (``..._MI16x16x1_...``; without it they run on the
#: vector ALUs), Composable Kernel its XDLops (``xdl``), MIOpen's XDLops implicit GEMMs are ``igemm_*_gtcx*`` (its
#: dlops ones ``gtc_``), others ``mfma``; Triton's flash attention is ``attn_fwd``.
TENSOR_CORE_RE = (r"wgmma|hmma|imma|qmma|xmma|tensorop|16816|1688|884|nvjet|flash|sdpa|tcgen05|fmhasm\d|"
                  r"_mi\d+x\d+|xdl|gtcx|mfma|attn_fwd|attn_bwd")
#: FP8/FP4 element types: a matrix product (gemm or attention category) on them runs on tensor cores (no other
#: unit computes them); a quantisation or cast kernel naming them does not.
LOW_PRECISION_RE = r"e4m3|e5m2|e2m1"
SIMT_RE = r"ffma|sgemm|dgemm|simt|gemv"
MAX_BINS = 2000


@functools.lru_cache(maxsize=1)
def category_rules() -> tuple[tuple[str, str, str, str], ...]:
    """(match, pattern, category, source) rows of data/kernel_categories.csv, in file order."""
    text = resources.files("kernelscope.data").joinpath("kernel_categories.csv").read_text(encoding="utf-8")
    rows = []
    for r in csv.DictReader(text.splitlines()):
        if r["match"] not in ("op", "kernel") or r["category"] not in CATEGORIES:
            raise ValueError(f"kernel_categories.csv: bad rule {r!r}")
        rows.append((r["match"], r["pattern"], r["category"], r["source"]))
    return tuple(rows)


def category_case(kernel_col: str, op_col: str) -> tuple[str, dict[str, str]]:
    """A SQL CASE expression giving the category of a kernel, and its $named parameters.

    ``kernel_col``/``op_col`` are SQL expressions (chosen by the caller, never user input) for the kernel
    name and the leaf operator name (NULL when none). Operator rules come first, then kernel-name rules.
    """
    rules = category_rules()
    ordered = [r for r in rules if r[0] == "op"] + [r for r in rules if r[0] == "kernel"]
    parts, params = [], {}
    for i, (match, pattern, category, _src) in enumerate(ordered):
        params[f"cat_p{i}"] = pattern
        params[f"cat_c{i}"] = category
        if match == "op":
            parts.append(f"WHEN {op_col} IS NOT NULL AND regexp_matches({op_col}, $cat_p{i}) THEN $cat_c{i}")
        else:
            parts.append(f"WHEN regexp_matches(coalesce({kernel_col}, ''), $cat_p{i}, 'i') THEN $cat_c{i}")
    return "CASE " + " ".join(parts) + " ELSE 'other' END", params


def tensor_core_sql(kernel_col: str, category_col: str) -> str:
    """SQL boolean: the kernel name (and category) say it runs on tensor cores (see the module docstring)."""
    name = f"coalesce({kernel_col}, '')"
    low = f"{category_col} IN ('gemm', 'attention') AND regexp_matches({name}, '{LOW_PRECISION_RE}', 'i')"
    return (f"((regexp_matches({name}, '{TENSOR_CORE_RE}', 'i') OR ({low})) "
            f"AND NOT regexp_matches({name}, '{SIMT_RE}', 'i'))")


# Kernels are grouped by (kernel name, leaf operator name, log2 duration bin, short flag) once into a
# connection-local temporary table; the category rules and the tensor-core test then run once per distinct
# (kernel name, operator name) pair, not once per kernel, and every table is a sum over the groups
# (n = kernels in the group, t = their summed dur_ns, the *_w / *_t columns the weighted means' parts). The
# float parts are compensated sums (fsum): a plain sum depends on the order DuckDB's threads add the rows in,
# and est_sm_efficiency changed in its last digit from run to run.
_GROUPS_SQL = """
CREATE TEMP TABLE {g} AS
WITH k AS (
  SELECT a.name, o.name AS op_name, CAST(floor(log2(greatest(a.dur_ns, 1))) AS INTEGER) AS bin,
         a.dur_ns < $short AS short, a.is_graph AS graph, count(*) AS n, sum(a.dur_ns) AS t,
         fsum(a.dur_ns * least(a.blocks_per_sm, 1.0)) FILTER (WHERE a.blocks_per_sm IS NOT NULL) AS sm_w,
         sum(a.dur_ns) FILTER (WHERE a.blocks_per_sm IS NOT NULL) AS sm_t,
         fsum(a.dur_ns * a.est_occupancy_pct) FILTER (WHERE a.est_occupancy_pct > 0) AS occ_w,
         sum(a.dur_ns) FILTER (WHERE a.est_occupancy_pct > 0) AS occ_t,
         count(*) FILTER (WHERE a.est_occupancy_pct = 0) AS occ_zero
  FROM gpu_activities a
  LEFT JOIN (SELECT sig_id, name FROM op_signatures WHERE trace_id = $t) o ON o.sig_id = a.leaf_sig_id
  WHERE a.trace_id = $t AND a.kind = 'kernel'
  GROUP BY ALL
), d AS (
  SELECT name, op_name, category, {tc} AS tensor_core
  FROM (SELECT name, op_name, {case} AS category FROM (SELECT DISTINCT name, op_name FROM k))
)
SELECT k.*, d.category, d.tensor_core
FROM k JOIN d ON d.name IS NOT DISTINCT FROM k.name AND d.op_name IS NOT DISTINCT FROM k.op_name
"""


def _groups_sql(g: str) -> tuple[str, dict]:
    case, params = category_case("name", "op_name")
    return _GROUPS_SQL.format(g=g, case=case, tc=tensor_core_sql("name", "category")), params


_SQL_CATEGORIES = """
SELECT category, CAST(sum(n) AS BIGINT) AS kernels, CAST(sum(t) AS BIGINT) AS time_ns,
       CAST(sum(t) FILTER (WHERE tensor_core) AS BIGINT) AS tensor_core_ns,
       CAST(sum(t) FILTER (WHERE short) AS BIGINT) AS short_ns
FROM {g} GROUP BY category ORDER BY time_ns DESC, category
"""

_SQL_TOTALS = """
SELECT CAST(coalesce(sum(n), 0) AS BIGINT) AS kernels, CAST(coalesce(sum(t), 0) AS BIGINT) AS kernel_time_ns,
       CAST(coalesce(sum(t) FILTER (WHERE tensor_core), 0) AS BIGINT) AS tensor_core_ns,
       CAST(coalesce(sum(t) FILTER (WHERE category IN ('gemm', 'attention')), 0) AS BIGINT)
           AS gemm_attention_ns,
       CAST(coalesce(sum(n) FILTER (WHERE short), 0) AS BIGINT) AS short_kernels,
       CAST(coalesce(sum(t) FILTER (WHERE short), 0) AS BIGINT) AS short_kernel_ns,
       CAST(coalesce(sum(t) FILTER (WHERE short AND graph), 0) AS BIGINT) AS short_graph_kernel_ns,
       fsum(sm_w) / nullif(sum(sm_t), 0) AS est_sm_efficiency,
       CAST(coalesce(sum(sm_t), 0) AS BIGINT) AS sm_eff_ns,
       fsum(occ_w) / nullif(sum(occ_t), 0) AS est_occupancy_pct,
       CAST(coalesce(sum(occ_t), 0) AS BIGINT) AS occupancy_ns,
       CAST(coalesce(sum(occ_zero), 0) AS BIGINT) AS occupancy_zero_kernels
FROM {g}
"""

_SQL_TOP = """
WITH n AS (
  SELECT name, any_value(category) AS category, bool_or(tensor_core) AS tensor_core,
         CAST(sum(n) AS BIGINT) AS kernels, CAST(sum(t) AS BIGINT) AS time_ns
  FROM {g} GROUP BY name
), r AS (
  SELECT *, row_number() OVER (ORDER BY time_ns DESC, name) AS rank FROM n
)
SELECT rank, name, category, tensor_core, kernels, time_ns FROM r WHERE rank <= $top
UNION ALL
SELECT NULL, 'others', NULL, NULL, CAST(sum(kernels) AS BIGINT), CAST(sum(time_ns) AS BIGINT)
FROM r WHERE rank > $top HAVING count(*) > 0
ORDER BY rank NULLS LAST
"""

_SQL_HIST = """
SELECT category, bin, CAST(pow(2, bin) AS BIGINT) AS lo_ns, CAST(pow(2, bin + 1) AS BIGINT) AS hi_ns,
       CAST(sum(n) AS BIGINT) AS kernels, CAST(sum(t) AS BIGINT) AS time_ns
FROM (SELECT 'all' AS category, bin, n, t FROM {g} UNION ALL SELECT category, bin, n, t FROM {g})
GROUP BY category, bin ORDER BY category = 'all' DESC, category, bin
"""


def _share(part, whole) -> float | None:
    return None if not whole else part / whole


def _compute_capability(store, trace_id: str) -> str | None:
    """The lowest compute capability ('7.0') among the trace's deviceProperties; None when it does not say."""
    from .summary import trace_device_properties

    ccs = [(p["computeMajor"], p["computeMinor"] if isinstance(p["computeMinor"], int) else 0)
           for p in trace_device_properties(store, trace_id)
           if isinstance(p["computeMajor"], int) and not isinstance(p["computeMajor"], bool)]
    if not ccs:
        return None
    major, minor = min(ccs)
    return f"{major}.{minor}"


def kernels(store, trace_id: str, top: int = 10, short_ns: int = 10_000) -> Result:
    """Kernel time by category and the other kernel numbers (definitions in the module docstring)."""
    top, short_ns = _positive_int("top", top), _positive_int("short_ns", short_ns)
    g = f"kernel_groups_{uuid.uuid4().hex}"
    sql, params = _groups_sql(g)
    store.query(sql, dict(params, t=trace_id, short=short_ns))
    try:
        tot = store.query(_SQL_TOTALS.format(g=g)).iloc[0].to_dict()
        cats = store.query(_SQL_CATEGORIES.format(g=g))
        top_df = store.query(_SQL_TOP.format(g=g), {"top": top})
        hist = store.query(_SQL_HIST.format(g=g))
    finally:
        store.query(f"DROP TABLE IF EXISTS {g}")
    kt = int(tot["kernel_time_ns"])
    present = set(cats["category"])
    missing = [c for c in CATEGORIES if c not in present]
    if missing:
        cats = pd.concat([cats, pd.DataFrame({"category": missing, "kernels": 0, "time_ns": 0,
                                              "tensor_core_ns": 0, "short_ns": 0})], ignore_index=True)
    for col in ("time_ns", "tensor_core_ns", "short_ns", "kernels"):
        cats[col] = cats[col].fillna(0).astype("int64")
    cats["share"] = cats["time_ns"] / kt if kt else float("nan")
    top_df["share"] = top_df["time_ns"] / kt if kt else float("nan")

    def num(key):
        v = tot[key]
        return None if v is None or pd.isna(v) else float(v)

    scalars: dict[str, Any] = {
        "kernels": int(tot["kernels"]),
        "kernel_time_ns": kt,
        "category_time_ns": {r.category: int(r.time_ns) for r in cats.itertuples()},
        "tensor_core_ns": int(tot["tensor_core_ns"]),
        "tensor_core_share": _share(int(tot["tensor_core_ns"]), kt),
        "tensor_core_share_of_gemm_attention": _share(int(tot["tensor_core_ns"]), int(tot["gemm_attention_ns"])),
        "short_ns": short_ns,
        "short_kernels": int(tot["short_kernels"]),
        "short_kernel_ns": int(tot["short_kernel_ns"]),
        "short_kernel_share": _share(int(tot["short_kernel_ns"]), kt),
        "short_graph_kernel_ns": int(tot["short_graph_kernel_ns"]),
        "est_sm_efficiency": num("est_sm_efficiency"),
        "est_occupancy_pct": num("est_occupancy_pct"),
        "compute_capability": _compute_capability(store, trace_id),
    }
    trust = {
        "sm_efficiency_coverage": _share(int(tot["sm_eff_ns"]), kt),
        "occupancy_coverage": _share(int(tot["occupancy_ns"]), kt),
        "occupancy_zero_kernels": int(tot["occupancy_zero_kernels"]),
        "other_share": _share(int(cats.loc[cats.category == "other", "time_ns"].sum()), kt),
        "rules": "data/kernel_categories.csv: operator rules first, then kernel-name rules",
    }
    warnings = []
    if not kt:
        warnings.append("the trace has no kernels: shares are null.")
    if tot["occupancy_zero_kernels"]:
        warnings.append(f"{int(tot['occupancy_zero_kernels'])} kernels carry est. occupancy 0 (Kineto could "
                        "not estimate it); they are left out of est_occupancy_pct.")
    return Result(name="kernels", definition=__doc__.strip(), scalars=scalars,
                  tables={"categories": cats, "top_kernels": top_df, "duration_histogram": hist},
                  warnings=warnings, trust=trust)


# ------------------------------------------------------------------------------------------------ idle

_SQL_SPANS = """
SELECT device, min(start_ns) AS first_ns, max(end_ns) AS last_ns,
       CAST(max(end_ns) - min(start_ns) AS BIGINT) AS gpu_span_ns,
       CAST(sum(end_ns - start_ns) AS BIGINT) AS busy_ns, count(*) AS intervals
FROM busy_intervals WHERE trace_id = $t GROUP BY device ORDER BY device
"""

# Each busy interval is cut into the bins it touches (unnest over its first..last bin), so the work grows
# with intervals + bins, not intervals x bins. Bin i of a device covers [first + i*w, first + (i+1)*w).
_SQL_TIMELINE = """
WITH s AS (
  SELECT device, min(start_ns) AS first_ns, max(end_ns) AS last_ns FROM busy_intervals
  WHERE trace_id = $t GROUP BY device
), w AS (
  SELECT device, first_ns, last_ns,
         CAST(greatest(1, (last_ns - first_ns + $bins - 1) // $bins) AS BIGINT) AS width FROM s
), iv AS (
  SELECT b.device, b.start_ns, b.end_ns, w.first_ns, w.width,
         unnest(range((b.start_ns - w.first_ns) // w.width,
                      (b.end_ns - 1 - w.first_ns) // w.width + 1)) AS bin
  FROM busy_intervals b JOIN w ON w.device = b.device
  WHERE b.trace_id = $t AND b.end_ns > b.start_ns
), busy AS (
  SELECT device, bin,
         CAST(sum(least(end_ns, first_ns + (bin + 1) * width) - greatest(start_ns, first_ns + bin * width))
              AS BIGINT) AS busy_ns
  FROM iv GROUP BY device, bin
), bins AS (
  SELECT device, first_ns, last_ns, width, unnest(range(0, (last_ns - first_ns + width - 1) // width)) AS bin
  FROM w
)
SELECT bins.device, bins.bin, bins.first_ns + bins.bin * bins.width AS start_ns,
       CAST(least(bins.first_ns + (bins.bin + 1) * bins.width, bins.last_ns) - (bins.first_ns + bins.bin * bins.width)
            AS BIGINT) AS bin_ns,
       CAST(coalesce(busy.busy_ns, 0) AS BIGINT) AS busy_ns
FROM bins LEFT JOIN busy ON busy.device = bins.device AND busy.bin = bins.bin
ORDER BY bins.device, bins.bin
"""

_SQL_GAP_HIST = """
WITH g AS (
  SELECT device, start_ns - lag(end_ns) OVER (PARTITION BY device ORDER BY start_ns) AS gap_ns
  FROM busy_intervals WHERE trace_id = $t
)
SELECT device, CAST(floor(log2(gap_ns)) AS INTEGER) AS bin,
       CAST(pow(2, floor(log2(gap_ns))) AS BIGINT) AS lo_ns, CAST(pow(2, floor(log2(gap_ns)) + 1) AS BIGINT) AS hi_ns,
       count(*) AS gaps, CAST(sum(gap_ns) AS BIGINT) AS idle_ns
FROM g WHERE gap_ns > 0 GROUP BY ALL ORDER BY device, bin
"""


def idle(store, trace_id: str, bins: int = 200) -> Result:
    """GPU busy/idle over time per device (definitions in docs/metrics.md, "Idle over time").

    The GPU span of each device is cut into ``bins`` equal bins of integer width ``ceil(span / bins)`` ns
    (at most 2000; the last bin may be shorter); ``busy_ns`` of a bin is the overlap of the busy union with
    it, ``idle_ns = bin_ns - busy_ns``. Idle gaps (between consecutive busy intervals) get a log2 histogram.
    """
    bins = _positive_int("bins", bins)
    if bins > MAX_BINS:
        raise UsageError(f"bins={bins} is too many; give at most {MAX_BINS}.")
    spans = store.query(_SQL_SPANS, {"t": trace_id})
    timeline = store.query(_SQL_TIMELINE, {"t": trace_id, "bins": bins})
    timeline["idle_ns"] = (timeline["bin_ns"] - timeline["busy_ns"]).astype("int64")
    timeline["busy_share"] = timeline["busy_ns"] / timeline["bin_ns"].where(timeline["bin_ns"] > 0)
    gaps = store.query(_SQL_GAP_HIST, {"t": trace_id})
    busy = int(spans["busy_ns"].sum()) if len(spans) else 0
    span_sum = int(spans["gpu_span_ns"].sum()) if len(spans) else 0
    scalars = {
        "busy_ns": busy,
        "idle_ns": span_sum - busy if len(spans) else None,
        "gpu_span_ns": span_sum if len(spans) else None,
        "busy_share": _share(busy, span_sum),
        "bins": bins,
        "idle_gaps": int(gaps["gaps"].sum()) if len(gaps) else 0,
    }
    spans["idle_ns"] = spans["gpu_span_ns"] - spans["busy_ns"]
    warnings = [] if len(spans) else ["the trace has no GPU activity: no timeline."]
    return Result(name="idle", definition=(idle.__doc__ or "").strip(), scalars=scalars,
                  tables={"devices": spans, "timeline": timeline, "gap_histogram": gaps},
                  warnings=warnings, trust={"devices": len(spans)})


def _positive_int(name: str, value) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        v = 0
    if v < 1 or v != value:
        raise UsageError(f"option {name}={value!r} must be a positive whole number.")
    return v
