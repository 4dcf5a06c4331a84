"""``kernelscope check`` (CI: a baseline against a new trace under rules, noise-aware, exit 1 on a violation,
Markdown for a pull-request comment) and ``kernelscope mcp`` (the Model Context Protocol server, agents/).

Rules are ``kernelscope diff --fail-on`` rules (analysis/diff.parse_rule and violations: the same parsing and
the same comparison), plus level rules on the new trace's bound shares (``host_wait_share>0.5``). Definitions,
the baseline file and the noise band: docs/metrics.md, "Check"; the CI job: docs/ci.md.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import click

from ..errors import UsageError
from ..storage import catalog
from .app import cli, db_option, db_path, open_db, resolve

LEVEL_METRICS = ("host_wait_share", "dependency_wait_share")  # bound's shares: a bound on the new value
BASELINE_KEY = "kernelscope_check_baseline"


# ------------------------------------------------------------------------------------------- numbers


def trace_numbers(store, trace_id: str, levels: bool) -> dict[str, Any]:
    """One trace's headline numbers (diff's), its steady steps' time spread (steps analysis) and, with
    ``levels``, bound's shares."""
    from ..analysis import get_analysis
    from ..analysis.diff import headline_values
    from ..analysis.result import json_safe

    steps = get_analysis("steps").fn(store, trace_id)
    st = steps.scalars
    out = {"id": trace_id, "name": catalog.trace_names(store, [trace_id]).get(trace_id, trace_id),
           "headline": json_safe(headline_values(store, trace_id)),
           "steps": {k: json_safe(st.get(k)) for k in ("steady_steps", "step_time_median_ns", "step_time_min_ns",
                                                        "step_time_max_ns")}}
    if levels:
        b = get_analysis("bound").fn(store, trace_id).scalars
        out["levels"] = {m: json_safe(b.get(m)) for m in LEVEL_METRICS}
    return out


def step_noise_pct(t: dict) -> float | None:
    """100 (max - min) / median of a trace's steady step times; None with fewer than two steady steps."""
    s = t["steps"]
    if not s.get("steady_steps") or s["steady_steps"] < 2 or not s.get("step_time_median_ns"):
        return None
    return 100.0 * (s["step_time_max_ns"] - s["step_time_min_ns"]) / s["step_time_median_ns"]


def side(traces: list[dict], metrics) -> dict[str, Any]:
    """A side (baseline or new) of one or more traces: per metric the median over its traces, and the noise
    band in % (time metrics: the larger of the traces' spread and the largest step spread; other metrics:
    the traces' spread), None where nothing measures it."""
    values, noise = {}, {}
    steps = [n for n in map(step_noise_pct, traces) if n is not None]
    for m in metrics:
        key = "levels" if m in LEVEL_METRICS else "headline"
        xs = [t.get(key, {}).get(m) for t in traces]
        if not xs or any(x is None for x in xs):
            values[m], noise[m] = None, None
            continue
        med = statistics.median(xs)
        values[m] = int(round(med)) if all(isinstance(x, int) for x in xs) else med
        bands = [100.0 * (max(xs) - min(xs)) / abs(med)] if len(xs) > 1 and med else []
        if m.endswith("_ns") and steps:
            bands.append(max(steps))
        noise[m] = max(bands) if bands else None
    return {"traces": [{"id": t["id"], "name": t["name"]} for t in traces], "values": values, "noise_pct": noise,
            "step_noise_pct": max(steps) if steps else None}


# --------------------------------------------------------------------------------------------- rules


def evaluate(rules, base: dict, new: dict) -> tuple[list[dict], list[dict]]:
    """(headline rows, one verdict per rule): ``pass``, ``fail`` or ``inside_noise`` (the rule is broken but
    the change is within the noise band: not a failure)."""
    import pandas as pd

    from ..analysis.diff import METRICS, violations
    from ..analysis.result import Result

    rows = []
    for m in METRICS:
        a, b = base["values"].get(m), new["values"].get(m)
        if a is None and b is None:
            continue
        noise = [n for n in (base["noise_pct"].get(m), new["noise_pct"].get(m)) if n is not None]
        rows.append({"metric": m, "a": a, "b": b, "delta": None if a is None or b is None else b - a,
                     "delta_pct": None if a in (None, 0) or b is None else 100.0 * (b - a) / a,
                     "noise_pct": max(noise) if noise else None})
    head = pd.DataFrame(rows, columns=["metric", "a", "b", "delta", "delta_pct", "noise_pct"], dtype=object)
    verdicts = []
    for rule in rules:
        if rule.metric in LEVEL_METRICS:
            v = new["values"].get(rule.metric)
            bad = v is None or (v > rule.threshold if rule.op == ">" else v < rule.threshold)
            msg = (f"{rule.text}: {rule.metric} is not available for the new trace." if v is None else
                   f"{rule.text} {'violated' if bad else 'holds'}: new {rule.metric} = {v:.3f}.")
            verdicts.append({"rule": rule.text, "metric": rule.metric, "status": "fail" if bad else "pass",
                             "value": v, "change": None, "noise_pct": None, "message": msg})
            continue
        found = violations(Result("check", "", tables={"headline": head.drop(columns="noise_pct")}), [rule])
        r = next((x for x in rows if x["metric"] == rule.metric), None)
        change = None if r is None else (r["delta_pct"] if rule.percent else r["delta"])
        noise = None if r is None else r["noise_pct"]
        status = "fail" if found else "pass"
        msg = found[0] if found else f"{rule.text} holds: change {_change(change, rule.percent)}."
        if found and change is not None and noise is not None:
            band = noise if rule.percent else noise / 100.0 * abs(r["a"])
            if abs(change) <= band:
                status = "inside_noise"
                msg = (f"{rule.text}: change {_change(change, rule.percent)} is inside the noise "
                       f"(±{noise:.2f}%): not a failure.")
        verdicts.append({"rule": rule.text, "metric": rule.metric, "status": status,
                         "value": None if r is None else r["b"], "change": change, "noise_pct": noise,
                         "message": msg})
    return rows, verdicts


def _change(change, percent: bool) -> str:
    if change is None:
        return "n/a"
    if percent:
        return f"{change:+.2f}%"
    return f"{change:+,}" if isinstance(change, int) else f"{change:+.4g}"


# ------------------------------------------------------------------------------------------ Markdown


def markdown(report: dict) -> str:
    """The check as Markdown for a pull-request comment."""
    ok = report["passed"]
    def names(side_: dict) -> str:
        if "sweep" in side_:
            return f"sweep `{side_['sweep']}` ({len(side_['traces'])} points)"
        return ", ".join(f"`{t['name']}`" for t in side_["traces"])

    lines = [f"### kernelscope check: {'passed' if ok else 'FAILED'}", "",
             f"Baseline {names(report['baseline'])} vs new {names(report['new'])}.", "",
             "| rule | status | detail |", "| --- | --- | --- |"]
    mark = {"pass": "✅ pass", "fail": "❌ fail", "inside_noise": "〰️ inside the noise"}
    for v in report["rules"]:
        lines.append(f"| `{v['rule']}` | {mark[v['status']]} | {v['message'].replace('|', '/')} |")
    by = report["baseline"].get("by")
    point = f"{by} | " if by else ""
    lines += ["", f"| {point}metric | baseline | new | change | noise band |",
              f"| {'--- | ' if by else ''}--- | ---: | ---: | ---: | ---: |"]
    for r in report["headline"]:
        pct = "" if r["delta_pct"] is None else f" ({r['delta_pct']:+.2f}%)"
        noise = "" if r["noise_pct"] is None else f"±{r['noise_pct']:.2f}%"
        label = f"{r['label']} | " if by else ""
        lines.append(f"| {label}{r['metric']} | {_num(r['a'])} | {_num(r['b'])} | {_change(r['delta'], False)}{pct} "
                     f"| {noise} |")
    lines += ["", "Noise band: the spread of repeated traces and of the steady ProfilerSteps within each trace "
              "(docs/metrics.md, Check); a broken rule whose change lies inside it does not fail."]
    return "\n".join(lines) + "\n"


def _num(v) -> str:
    return "n/a" if v is None else (f"{v:,}" if isinstance(v, int) else f"{v:.4g}")


# ------------------------------------------------------------------------------------------- command


def _load_baseline(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the baseline: {exc.strerror or exc}") from None
    except ValueError:
        raise UsageError(f"{path}: not a JSON baseline (write one with `kernelscope check TRACE "
                         "--save-baseline FILE`)") from None
    if not isinstance(data, dict) or data.get(BASELINE_KEY) != 1 or not isinstance(data.get("traces"), list) \
            or not data["traces"]:
        raise UsageError(f"{path}: not a kernelscope check baseline (no '{BASELINE_KEY}': 1 with traces)")
    return data["traces"]


@cli.command()
@click.argument("traces_", nargs=-1, metavar="TRACE...")
@click.option("--baseline", "baseline", multiple=True, metavar="TRACE",
              help="A stored baseline trace (repeatable: repeated runs of the baseline give its noise).")
@click.option("--baseline-file", "baseline_file", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="A baseline JSON written by --save-baseline.")
@click.option("--baseline-sweep", "baseline_sweep", default=None, metavar="NAME",
              help="With --sweep: the baseline sweep (traces labelled sweep=NAME), compared point by point.")
@click.option("--sweep", "sweep", default=None, metavar="NAME",
              help="The new side is the sweep NAME, paired with --baseline-sweep's points by --by.")
@click.option("--by", "by", default="batch", show_default=True, metavar="LABEL",
              help="With --sweep: the numeric label that pairs the points.")
@click.option("--rule", "--fail-on", "rules", multiple=True, metavar="RULE",
              help="`diff --fail-on` rules (\"latency_ns>+5%\", \"tklqt_ns>+10%\", \"busy_ns<-1000\") and level "
                   "rules on the new trace (\"host_wait_share>0.5\"); repeatable.")
@click.option("--save-baseline", "save", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Write TRACE...'s headline numbers and step spread as a baseline JSON and exit.")
@click.option("--markdown", "md", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Also write the result as Markdown (for a pull-request comment).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@db_option
def check(traces_, baseline, baseline_file, baseline_sweep, sweep, by, rules, save, md, as_json, db):
    """Check new TRACE(s) against a baseline under RULEs, for CI: exit 1 when a rule is violated by more
    than the noise.

    The baseline is stored traces (--baseline, repeatable: repeated runs) or a file (--baseline-file, written
    by `kernelscope check TRACE... --save-baseline FILE`). Several TRACEs are repeated runs of the new code.
    A sweep is checked against a baseline sweep point by point: `--sweep NEW --baseline-sweep OLD --by batch`.
    Each side's number is the median over its traces; its noise band is the spread of those traces and of
    each trace's steady ProfilerStep times (docs/metrics.md, Check). A rule broken by a change inside the
    noise band passes, marked "inside the noise".
    """
    from ..analysis.diff import METRICS, parse_rule

    if not (traces_ or sweep):
        raise UsageError("give the new TRACE(s) to check (or to save with --save-baseline FILE), or --sweep NAME.")
    parsed = [parse_rule(r, METRICS + LEVEL_METRICS) for r in rules]
    for r in parsed:
        if r.metric in LEVEL_METRICS and r.percent:
            raise UsageError(f"--rule '{r.text}': {r.metric} is a share of the GPU span; bound its value "
                             f"(e.g. \"{r.metric}>0.5\"), not a % change.")
    levels = any(r.metric in LEVEL_METRICS for r in parsed)
    if not save and not parsed:
        raise UsageError("give at least one --rule (e.g. --rule \"latency_ns>+5%\").")
    if sweep or baseline_sweep:
        if not (sweep and baseline_sweep) or traces_ or baseline or baseline_file or save:
            raise UsageError("a sweep check takes --sweep NEW and --baseline-sweep OLD (paired by --by), and no "
                             "TRACE, --baseline, --baseline-file or --save-baseline.")
        with open_db(db, read_only=True) as store:
            report = sweep_report(store, parsed, baseline_sweep, sweep, by, levels)
    else:
        with open_db(db, read_only=True) as store:
            new_t = [trace_numbers(store, t, levels) for t in resolve(store, traces_)]
            if save:
                _write(save, json.dumps({BASELINE_KEY: 1, "traces": new_t}, indent=2, allow_nan=False) + "\n")
                click.echo(f"wrote baseline {save} ({len(new_t)} trace(s))")
                return
            if bool(baseline) == bool(baseline_file):
                raise UsageError("give one baseline: --baseline TRACE (repeatable) or --baseline-file FILE.")
            base_t = _load_baseline(baseline_file) if baseline_file else \
                [trace_numbers(store, t, False) for t in resolve(store, baseline)]
        metrics = METRICS + LEVEL_METRICS
        base, new = side(base_t, metrics), side(new_t, metrics)
        head, verdicts = evaluate(parsed, base, new)
        report = {"passed": all(v["status"] != "fail" for v in verdicts), "rules": verdicts, "headline": head,
                  "baseline": base, "new": new, "warnings": []}
    if md:
        _write(md, markdown(report))
    if as_json:
        click.echo(json.dumps(report, indent=2, allow_nan=False))
    else:
        for v in report["rules"]:
            click.echo(f"{v['status'].upper():<12}  {v['message']}")
    for w in report["warnings"]:  # e.g. sweep points in one sweep only
        click.echo(f"kernelscope: {w}", err=True)
    if not report["passed"]:
        sys.exit(1)


def sweep_report(store, rules, base_sweep: str, new_sweep: str, by: str, levels: bool) -> dict[str, Any]:
    """Sweep vs baseline sweep: the points paired by ``by`` as `diff --sweeps` pairs them, each pair checked as
    one baseline trace against one new trace (its step spread the band); rows and verdicts carry ``label``."""
    from ..analysis.diff import METRICS
    from ..analysis.diff import diff as diff_fn

    result = diff_fn(store, None, by=by, sweep=base_sweep, sweep_b=new_sweep)
    metrics = METRICS + LEVEL_METRICS
    heads, verdicts, bt, nt = [], [], [], []
    for p in result.scalars["pairs"]:
        ta, tb = trace_numbers(store, p["trace_a"], False), trace_numbers(store, p["trace_b"], levels)
        bt.append({"id": ta["id"], "name": ta["name"], "label": p["label"]})
        nt.append({"id": tb["id"], "name": tb["name"], "label": p["label"]})
        rows, vs = evaluate(rules, side([ta], metrics), side([tb], metrics))
        heads += [{"label": p["label"], **r} for r in rows]
        verdicts += [{"label": p["label"], **v, "message": f"{by}={p['label']}: {v['message']}"} for v in vs]
    return {"passed": all(v["status"] != "fail" for v in verdicts), "rules": verdicts, "headline": heads,
            "baseline": {"sweep": base_sweep, "by": by, "traces": bt},
            "new": {"sweep": new_sweep, "by": by, "traces": nt}, "warnings": list(result.warnings)}


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None


@cli.command()
@click.option("--allow-ingest", is_flag=True,
              help="Add an ingest tool: the agent may add traces to the store (without it the store is only read).")
@db_option
def mcp(allow_ingest, db):
    """Serve the store to an AI agent over the Model Context Protocol (stdio): tools for traces, summary,
    every analysis, recommend, diff, read-only SQL (`kernelscope sql`'s limits) and the schema; every result
    with its definitions and trust, tables paged (docs/agents.md). Needs `pip install 'kernelscope[mcp]'`.
    """
    try:
        from ..agents.server import serve
    except ImportError as exc:  # mcp is an extra
        raise UsageError(f"kernelscope mcp needs the mcp SDK ({exc.name} is missing): "
                         "pip install 'kernelscope[mcp]'") from None
    with open_db(db, read_only=not allow_ingest):  # a missing or foreign store fails here, in one line
        pass
    serve(db_path(db), allow_ingest=allow_ingest)
