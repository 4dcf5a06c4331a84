"""``kernelscope report``: one self-contained HTML file (or a Markdown summary) for one or more traces.

A report is a list of sections. Each entry of ``SECTIONS`` is a function
``section(store, trace_ids, ctx) -> Section | None`` (``reports/blocks.py``) (None: nothing to say for these
traces, e.g. no sweep with one trace). Sections hold blocks in order: text (a paragraph), ``Table`` (a DataFrame with a
caption) or a Plotly figure from the shared figure builders (``reports/figures*.py``), so the dashboard
and the report draw the same pictures. HTML embeds plotly.js once (inline, so the file opens offline);
Markdown keeps the text and tables and leaves the figures out (for a pull request).

Add a section: write its function in a module of this package and add one line to ``SECTIONS``.
"""

from __future__ import annotations

import datetime as _dt
import html
import re

import pandas as pd
import plotly.graph_objects as go

from .. import __version__
from ..analysis import cache
from ..storage import catalog
from . import bound as _bound  # issue 5: launch, bound-ness, sweep
from . import launch as _launch
from . import memory as _memory  # issue 13: memory
from . import modules as _modules  # issue 13: modules, call stacks
from . import operators as _operators  # the Operators page's table, top rows
from . import power as _power  # issue 5: bandwidth/roofline, power
from . import roofline as _roofline
from . import stacks as _stacks
from . import steps as _steps
from . import sweep as _sweep
from .blocks import Context, Section, Table
from .missing import na, shown
from .overview import overview_section

#: Sections shown only when the trace recorded their data: (analysis, section title, the scalar that counts it).
#: When no trace of the report has it, the report ends by saying so, with the analysis' own how-to-record line.
OPTIONAL = [("steps", "Steps", "step_count"), ("modules", "Modules", "module_calls"),
            ("stacks", "Call stacks", "python_calls"), ("memory", "Memory", "memory_events")]


def not_recorded_section(store, trace_ids: list[str], ctx) -> Section | None:
    """The optional sections left out because no trace here recorded their data, each with how to record it."""
    lines = []
    for name, title, count in OPTIONAL:
        results = [cache.analysis(store, name, tid) for tid in trace_ids]
        if not any(r.scalars.get(count) for r in results):
            why = shown(next((w for r in results for w in r.warnings), ""))
            lines.append(f"{title}: {why[:1].upper()}{why[1:]}" if why else title)
    return Section("Not in this report", "not-recorded", lines) if lines else None


# One line per section, in report order.
SECTIONS = [
    overview_section,
    _bound.extras_section,  # TKLQT with q, energy, profiler inflation, categories, recommendations
    _launch.launch_section,
    _bound.bound_section,
    _sweep.sweep_section,  # only with several traces or --by
    _roofline.roofline_section,
    _operators.operators_section,  # every trace with CPU operators; a CPU-only trace's only account of its time
    _power.power_section,
    _steps.steps_section,
    _modules.modules_section,  # only for traces recorded with with_modules
    _stacks.stacks_section,  # only for traces recorded with with_stack
    _memory.memory_section,  # only for traces recorded with profile_memory
    not_recorded_section,  # the optional sections above that no trace here recorded, and how to record them
]


#: The analyses whose whole Results the sections read, longest first: for a report of one trace, computed at
#: once, one per core, before the sections (``cache.prefetch``); without it the headline's recommendations
#: computed launch and bound as parts, and their sections then the whole ones again. Not for several traces:
#: the sections read trace after trace, so the first traces' entries left the cache (``MAX_ENTRIES``) before
#: they were read (8 llama_prefill traces: 183 computations instead of 143, +30% CPU).
PREFETCH = ("bandwidth", "bound", "launch", "whatif", "summary", "kernels")


def build(store, trace_ids: list[str], by: str | None = None, figures: bool = True) -> list[Section]:
    """Every section that has something to say about ``trace_ids``, in ``SECTIONS`` order; ``figures=False``
    leaves every figure out (the other blocks are the same)."""
    ctx = Context(by=by, figures=figures)
    if len(trace_ids) == 1:
        cache.prefetch(store, trace_ids[0], PREFETCH)
    out = []
    for fn in SECTIONS:
        section = fn(store, list(trace_ids), ctx)
        if section is not None and section.blocks:
            out.append(section)
    if len(trace_ids) == 1:  # the sections name the trace each sentence is of; a one-trace report's title does
        (name,) = catalog.trace_names(store, trace_ids).values()
        for section in out:
            section.blocks = [_without_name(b, f"{name}: ") for b in section.blocks]
    return out


#: A sentence's first word when it is a plain lower-case word (not "aten::fill_", "torch.compile" or "q").
_LOWER_WORD = re.compile(r"[a-z]{2,}(?=[ :,(])")


def _without_name(block, prefix: str):
    """``block`` without the trace-name ``prefix`` its text, caption or figure title starts with, the sentence
    then opening with a capital ("mtia_rank_0: no GPU activity ..." -> "No GPU activity ...")."""
    def cut(text):
        if not (isinstance(text, str) and text.startswith(prefix)):
            return text
        text = text[len(prefix):]
        return text[0].upper() + text[1:] if _LOWER_WORD.match(text) else text

    if isinstance(block, str):
        return cut(block)
    if isinstance(block, Table):
        return Table(block.df, cut(block.caption))
    if isinstance(block, go.Figure) and block.layout.title.text:
        block.update_layout(title_text=cut(block.layout.title.text))
    return block


def _fmt_cell(v) -> str:
    """A table cell as shown: numbers with thousands separators, a missing value as 'n/a' (a section
    that knows why puts 'n/a: <reason>' in the cell itself)."""
    if v is None or v is pd.NA or (isinstance(v, float) and pd.isna(v)):
        return na()
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return shown(str(v))


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in t.df.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt_cell(v))}</td>" for v in row) + "</tr>"
                   for row in t.df.astype(object).itertuples(index=False))
    cap = f"<caption>{html.escape(t.caption)}</caption>" if t.caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


_STYLE = """
body { font-family: system-ui, -apple-system, sans-serif; margin: 24px auto; max-width: 1200px; color: #111827;
       padding: 0 16px; }
h1 { margin-bottom: 4px; } .meta { color: #6b7280; font-size: 13px; }
nav a { margin-right: 14px; font-size: 14px; }
section { border-top: 1px solid #e5e7eb; margin-top: 24px; }
table { border-collapse: collapse; margin: 10px 0 16px; font-size: 13px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid #e5e7eb; padding: 3px 8px; text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f4f6; } td:first-child, th:first-child { text-align: left; }
"""


def render_html(sections: list[Section], title: str) -> str:
    """One HTML document: plotly.js inline once, every figure as a div that uses it."""
    from plotly.offline import get_plotlyjs

    parts = []
    for s in sections:
        body = []
        for b in s.blocks:
            if isinstance(b, go.Figure):
                body.append(b.to_html(full_html=False, include_plotlyjs=False,
                                      config={"displaylogo": False, "responsive": True}))
            elif isinstance(b, Table):
                body.append(_html_table(b))
            else:
                body.append(f"<p>{html.escape(shown(str(b)))}</p>")
        parts.append(f'<section id="{s.anchor}"><h2>{html.escape(s.title)}</h2>{"".join(body)}</section>')
    toc = "".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in sections)
    made = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style><script type=\"text/javascript\">{get_plotlyjs()}</script></head><body>"
            f"<h1>{html.escape(title)}</h1><p class=\"meta\">kernelscope {__version__} · {made}</p>"
            f"<nav>{toc}</nav>{''.join(parts)}</body></html>")


def _md_table(t: Table) -> str:
    cols = [str(c) for c in t.df.columns]
    lines = ([f"**{t.caption}**", ""] if t.caption else []) + [
        "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in t.df.astype(object).itertuples(index=False):
        lines.append("| " + " | ".join(_fmt_cell(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def render_markdown(sections: list[Section], title: str) -> str:
    """Text and tables of every section; figures are left out."""
    out = [f"# {title}", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        for b in s.blocks:
            if isinstance(b, Table):
                out += [_md_table(b), ""]
            elif isinstance(b, str):
                out += [shown(b), ""]
    return "\n".join(out).rstrip() + "\n"


def report(store, trace_ids: list[str], by: str | None = None, fmt: str = "html",
           title: str | None = None) -> str:
    """The report of ``trace_ids`` as text in ``fmt`` ('html' or 'md'). With ``by`` (a sweep) the traces
    appear in the order of that numeric label, ties by name; otherwise in the order given."""
    if by:
        trace_ids = _sweep.order_by_label(store, list(trace_ids), by)
    if title is None:
        names = list(catalog.trace_names(store, trace_ids).values())  # only their count and a lone one show
        title = "kernelscope report: " + (names[0] if len(names) == 1 else f"{len(names)} traces")
    sections = build(store, trace_ids, by, figures=fmt == "html")  # Markdown shows no figure
    return render_html(sections, title) if fmt == "html" else render_markdown(sections, title)
