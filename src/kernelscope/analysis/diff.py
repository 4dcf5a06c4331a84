"""Compare two traces (A = before, B = after), or two sweeps point by point.

Definitions (docs/metrics.md, "Diff", is the canonical text; times are int ns; delta = B - A,
``delta_pct`` = 100 (B - A) / A, null when A is 0 or either side is null):

- Only ``kind = 'kernel'`` activities count. Kernels are matched in four passes, all in SQL:
  1. **signature**: leaf operator name + ``input_dims`` + ``input_types`` (kernels with a leaf operator);
     a signature present in both traces is one group.
  2. **operator**: the remaining kernels by leaf operator name + ``input_types`` (the shapes changed, the
     operator and dtypes did not: a padded vocabulary, another batch size); one group per such key in both.
  3. **kernel**: the remaining kernels by normalised kernel name: template arguments ``<...>`` and argument
     lists ``(...)`` removed (innermost first, nested up to 12 deep), a leading ``void`` dropped, and for
     Triton kernels (``triton_...``) the trailing ``_N`` index / hash removed (``triton_poi_fused_add_0`` ->
     ``triton_poi_fused_add``); a name present in both is one group.
  4. **category**: the kernels still left, by kernel category (the kernels analysis' rules); a category
     present in both is one group.
  Kernels left after the four passes are grouped by normalised name with ``status`` ``removed`` (only in A)
  or ``added`` (only in B); matched groups have ``status`` ``matched``.
- ``groups`` table: ``level`` (signature|operator|kernel|category), ``key``, ``status``, ``count_a``,
  ``count_b``, ``time_a_ns``, ``time_b_ns``, ``delta_ns``, ``delta_pct``, and for groups not matched by
  signature ``largest_a`` / ``largest_b``: the member (signature, else normalised kernel name) of most time on
  each side (null on a side without kernels); sorted by |delta_ns|.
- ``headline`` table: one row per metric (``kernels``, ``kernel_time_ns``, ``busy_ns``, ``gpu_span_ns``,
  ``idle_ns``, ``latency_ns`` from the summary analysis; ``tklqt_ns``, ``mean_queue_depth`` from the launch
  analysis when both traces have them) with ``a``, ``b``, ``delta``, ``delta_pct``.
- Sweeps: points of sweep A and sweep B are paired by the numeric label ``by`` (default ``batch``); each
  table gains a ``label`` column; labels present in one sweep only are listed in a warning.
- ``--fail-on "METRIC OP THRESHOLD"``: METRIC a headline metric, OP ``>`` or ``<``, THRESHOLD a signed
  number, ending in ``%`` for a relative change (``delta_pct``) or without it for an absolute change
  (``delta``, ns for times). ``latency_ns>+5%`` is violated when B's latency exceeds A's by more than 5%;
  ``busy_ns<-1000`` when B's busy time is more than 1000 ns below A's. A metric that is null on either side
  violates the rule (it cannot be checked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from ..errors import UsageError
from ..storage.labels import label_value
from . import kernels as kernels_mod
from . import launch as launch_mod
from . import summary as summary_mod
from .result import Result

DESCRIPTION = ("Two traces (or two sweeps --by batch): kernel groups matched by operator signature, "
               "normalised kernel name, category; count/time deltas, added/removed, headline changes.")
DEFINITION = __doc__.strip()

SUMMARY_METRICS = ("kernels", "kernel_time_ns", "busy_ns", "gpu_span_ns", "idle_ns", "latency_ns")
LAUNCH_METRICS = ("tklqt_ns", "mean_queue_depth")
METRICS = SUMMARY_METRICS + LAUNCH_METRICS
_NEST = 12
_TRITON_RE = r"^(triton_[A-Za-z0-9_]*?)(_[0-9][0-9A-Za-z]*)+$"


def normalised_name_sql(col: str) -> str:
    """SQL expression: the normalised kernel name of ``col`` (see the module docstring)."""
    expr = col
    for _ in range(_NEST):
        expr = f"regexp_replace({expr}, '<[^<>()]*>|\\([^<>()]*\\)', '', 'g')"
    expr = f"trim(regexp_replace(trim({expr}), '^void ', ''))"
    return f"regexp_replace({expr}, '{_TRITON_RE}', '\\1')"


def _groups_sql() -> tuple[str, dict]:
    case, params = kernels_mod.category_case("name", "op_name")
    norm = normalised_name_sql("coalesce(name, '')")
    # Kernels are first grouped per side by (kernel name, leaf operator name, shapes, dtypes): n kernels of
    # summed duration t; signatures, normalised names and categories are then built per group, not per row.
    one_side = """
      SELECT {side} AS side, a.name, o.name AS op_name, o.input_dims, o.input_types,
             count(*) AS n, sum(a.dur_ns) AS t
      FROM gpu_activities a
      LEFT JOIN (SELECT sig_id, name, input_dims, input_types FROM op_signatures WHERE trace_id = {tid}) o
        ON o.sig_id = a.leaf_sig_id
      WHERE a.trace_id = {tid} AND a.kind = 'kernel'
      GROUP BY ALL"""
    # Names are normalised and categorised once per distinct (kernel name, leaf operator name), not per row.
    sql = f"""
    WITH k00 AS ({one_side.format(side="'A'", tid="$a")} UNION ALL {one_side.format(side="'B'", tid="$b")}),
    k0 AS (SELECT side, n, t, name, op_name,
                  CASE WHEN op_name IS NULL THEN NULL
                       ELSE op_name || ' ' || coalesce(input_dims, '') || ' ' || coalesce(input_types, '') END AS sig,
                  CASE WHEN op_name IS NULL THEN NULL ELSE op_name || ' ' || coalesce(input_types, '') END AS opk
           FROM k00),
    d AS (SELECT name, op_name, {norm} AS norm, {case} AS cat
          FROM (SELECT DISTINCT name, op_name FROM k0)),
    k AS (SELECT k0.side, k0.n, k0.t, k0.sig, k0.opk, d.norm, d.cat FROM k0 JOIN d
          ON d.name IS NOT DISTINCT FROM k0.name AND d.op_name IS NOT DISTINCT FROM k0.op_name),
    l1 AS (SELECT sig FROM k WHERE sig IS NOT NULL GROUP BY sig HAVING count(DISTINCT side) = 2),
    k2 AS (SELECT * FROM k WHERE sig IS NULL OR sig NOT IN (SELECT sig FROM l1)),
    l2 AS (SELECT opk FROM k2 WHERE opk IS NOT NULL GROUP BY opk HAVING count(DISTINCT side) = 2),
    k3 AS (SELECT * FROM k2 WHERE opk IS NULL OR opk NOT IN (SELECT opk FROM l2)),
    l3 AS (SELECT norm FROM k3 GROUP BY norm HAVING count(DISTINCT side) = 2),
    k4 AS (SELECT * FROM k3 WHERE norm NOT IN (SELECT norm FROM l3)),
    l4 AS (SELECT cat FROM k4 GROUP BY cat HAVING count(DISTINCT side) = 2),
    keyed AS (
      SELECT side, n, t, coalesce(sig, norm) AS member,
        CASE WHEN sig IN (SELECT sig FROM l1) THEN 'signature'
             WHEN opk IN (SELECT opk FROM l2) THEN 'operator'
             WHEN norm IN (SELECT norm FROM l3) THEN 'kernel'
             WHEN cat IN (SELECT cat FROM l4) THEN 'category' ELSE 'kernel' END AS level,
        CASE WHEN sig IN (SELECT sig FROM l1) THEN sig
             WHEN opk IN (SELECT opk FROM l2) THEN opk
             WHEN norm IN (SELECT norm FROM l3) THEN norm
             WHEN cat IN (SELECT cat FROM l4) THEN cat ELSE norm END AS key
      FROM k
    ),
    m AS (  -- per group and side, each member's (signature, else kernel name) time: the largest is named
      SELECT level, key, side, member, sum(t) AS t FROM keyed GROUP BY ALL
    ),
    largest AS (
      SELECT level, key, arg_max(member, t) FILTER (WHERE side = 'A') AS largest_a,
             arg_max(member, t) FILTER (WHERE side = 'B') AS largest_b
      FROM m GROUP BY level, key
    ),
    g AS (
      SELECT level, key,
             CAST(coalesce(sum(n) FILTER (WHERE side = 'A'), 0) AS BIGINT) AS count_a,
             CAST(coalesce(sum(n) FILTER (WHERE side = 'B'), 0) AS BIGINT) AS count_b,
             CAST(coalesce(sum(t) FILTER (WHERE side = 'A'), 0) AS BIGINT) AS time_a_ns,
             CAST(coalesce(sum(t) FILTER (WHERE side = 'B'), 0) AS BIGINT) AS time_b_ns
      FROM keyed GROUP BY level, key
    )
    SELECT level, key,
           CASE WHEN count_a = 0 THEN 'added' WHEN count_b = 0 THEN 'removed' ELSE 'matched' END AS status,
           count_a, count_b, time_a_ns, time_b_ns, time_b_ns - time_a_ns AS delta_ns,
           CASE WHEN time_a_ns > 0 THEN 100.0 * (time_b_ns - time_a_ns) / time_a_ns END AS delta_pct,
           CASE WHEN level <> 'signature' THEN largest_a END AS largest_a,
           CASE WHEN level <> 'signature' THEN largest_b END AS largest_b
    FROM g JOIN largest USING (level, key) ORDER BY abs(time_b_ns - time_a_ns) DESC, level, key
    """
    return sql, params


def _headline_values(store, trace_id: str) -> dict:
    """The headline metrics of one trace: summary's and launch's scalars of the same names, computed by
    their light functions (summary.headline, launch.tklqt) rather than the full analyses."""
    out = dict(summary_mod.headline(store, trace_id))
    lr = launch_mod.tklqt(store, trace_id)
    for m in LAUNCH_METRICS:
        out[m] = lr.get(m)
    return {m: out.get(m) for m in METRICS}


headline_values = _headline_values  # public: `kernelscope check` and the MCP server read the same numbers


def _delta_pct(a, b):
    if a is None or b is None or a == 0:
        return None
    return 100.0 * (b - a) / a


def _pair(store, a: str, b: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    sql, params = _groups_sql()
    groups = store.query(sql, {**params, "a": a, "b": b})
    va = _headline_values(store, a)
    vb = va if b == a else _headline_values(store, b)
    rows = []
    for m in METRICS:
        x, y = va[m], vb[m]
        if m in LAUNCH_METRICS and (x is None or y is None):
            continue  # the launch numbers exist only where both traces have matched launches
        rows.append({"metric": m, "a": x, "b": y, "delta": None if x is None or y is None else y - x,
                     "delta_pct": _delta_pct(x, y)})
    # object dtype: integer ns stay exact ints next to the float mean_queue_depth
    return pd.DataFrame(rows, columns=["metric", "a", "b", "delta", "delta_pct"], dtype=object), groups


def _sweep_points(store, sweep: str, by: str) -> dict:
    df = store.query(
        "SELECT l.trace_id, l.value_num, l.value_text FROM labels l JOIN labels s ON s.trace_id = l.trace_id "
        "AND s.key = 'sweep' AND s.value_text = $sweep WHERE l.key = $by AND l.value_num IS NOT NULL "
        "ORDER BY l.value_num, l.trace_id", {"sweep": sweep, "by": by})
    if not len(df):
        raise UsageError(f"no trace is labelled sweep={sweep} with a numeric label '{by}'; label traces with "
                         f"`kernelscope label TRACE sweep={sweep} {by}=N`.")
    dup = df[df.duplicated("value_num", keep=False)]
    if len(dup):
        raise UsageError(f"sweep {sweep} has several traces with {by}={dup['value_text'].iloc[0]}; keep one "
                         "trace per point (`kernelscope rm TRACE`).")
    return {float(v): (t, txt) for t, v, txt in zip(df["trace_id"], df["value_num"], df["value_text"])}


def diff(store, trace_ids: list[str] | None = None, by: str = "batch", sweep: str | None = None,
         sweep_b: str | None = None) -> Result:
    """Diff of trace_ids = [A, B], or of the sweeps ``sweep`` (A) and ``sweep_b`` (B) paired by label ``by``."""
    warnings: list[str] = []
    if sweep is not None or sweep_b is not None:
        if trace_ids or sweep is None or sweep_b is None:
            raise UsageError("a sweep diff takes two sweep names and no TRACEs: `kernelscope diff SWEEP_A "
                             "SWEEP_B --sweeps` (or `analyze diff --sweep A -o sweep_b=B`).")
        pa_, pb_ = _sweep_points(store, sweep, by), _sweep_points(store, sweep_b, by)
        common = sorted(set(pa_) & set(pb_))
        only = sorted(set(pa_) ^ set(pb_))
        if not common:
            raise UsageError(f"sweeps {sweep} and {sweep_b} share no value of '{by}'; choose another --by.")
        if only:
            warnings.append(f"{by} values in one sweep only (not compared): "
                            f"{', '.join(str(label_value(*(pa_.get(v) or pb_[v])[1:], v)) for v in only)}.")
        heads, groups, pairs = [], [], []
        for v in common:
            (ta, txt), (tb, _) = pa_[v], pb_[v]
            lab = label_value(txt, v)
            h, g = _pair(store, ta, tb)
            heads.append(h.assign(label=lab))
            groups.append(g.assign(label=lab))
            pairs.append({"label": lab, "trace_a": ta, "trace_b": tb})
        head, grp = pd.concat(heads, ignore_index=True), pd.concat(groups, ignore_index=True)
        scalars = {"mode": "sweeps", "a": sweep, "b": sweep_b, "by": by, "pairs": pairs}
    else:
        ids = list(trace_ids or [])
        if len(ids) != 2:
            raise UsageError(f"diff compares exactly two traces (A then B); got {len(ids)}.")
        head, grp = _pair(store, ids[0], ids[1])
        scalars = {"mode": "traces", "a": ids[0], "b": ids[1], "by": None, "pairs": None}
    n = grp["status"].value_counts()
    scalars.update({"matched_groups": int(n.get("matched", 0)), "added_groups": int(n.get("added", 0)),
                    "removed_groups": int(n.get("removed", 0))})
    by_level = grp[grp["status"] == "matched"].groupby("level")[["count_a", "count_b"]].sum()
    trust = {f"kernels_matched_by_{lv}": {"a": int(r.count_a), "b": int(r.count_b)}
             for lv, r in by_level.iterrows()}
    trust["matching"] = ("signature, then operator and dtypes, then normalised kernel name, then category; "
                         "the rest added/removed")
    if "tklqt_ns" not in set(head["metric"]):
        warnings.append("tklqt_ns and mean_queue_depth are left out: a trace has no matched launches.")
    return Result(name="diff", definition=DEFINITION, scalars=scalars,
                  tables={"headline": head, "groups": grp}, warnings=warnings, trust=trust)


@dataclass(frozen=True)
class Rule:
    """A --fail-on rule: METRIC OP THRESHOLD (relative in % when ``percent``)."""

    text: str
    metric: str
    op: str
    threshold: float
    percent: bool


_RULE_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*([<>])\s*([+-]?\d+(?:\.\d+)?)\s*(%?)\s*$")


def parse_rule(text: str, metrics: tuple[str, ...] = METRICS) -> Rule:
    """Parse ``METRIC OP THRESHOLD`` (e.g. ``latency_ns>+5%``), METRIC one of ``metrics``; a bad expression is a
    UsageError."""
    m = _RULE_RE.match(text)
    if not m:
        raise UsageError(f"--fail-on '{text}' is not METRIC>THRESHOLD or METRIC<THRESHOLD; write it like "
                         "\"latency_ns>+5%\" or \"busy_ns<-1000\".")
    if m.group(1) not in metrics:
        raise UsageError(f"--fail-on '{text}': unknown metric '{m.group(1)}'; known: {', '.join(metrics)}.")
    return Rule(text.strip(), m.group(1), m.group(2), float(m.group(3)), m.group(4) == "%")


def violations(result: Result, rules: list[Rule]) -> list[str]:
    """One line per (rule, point) the diff violates, naming the values; empty when every rule holds."""
    head = result.tables["headline"]
    out = []
    for rule in rules:
        rows = head[head["metric"] == rule.metric]
        if not len(rows):
            out.append(f"{rule.text}: {rule.metric} is not available for these traces.")
            continue
        for r in rows.to_dict("records"):
            where = f" at {result.scalars['by']}={r['label']}" if "label" in r else ""
            change = r["delta_pct"] if rule.percent else r["delta"]
            if change is None or pd.isna(change):
                out.append(f"{rule.text}{where}: cannot be checked (A={r['a']}, B={r['b']}).")
                continue
            bad = change > rule.threshold if rule.op == ">" else change < rule.threshold
            if bad:
                shown = f"{change:+.2f}%" if rule.percent else f"{change:+}"
                out.append(f"{rule.text} violated{where}: {rule.metric} A={r['a']} B={r['b']} change {shown}.")
    return out
