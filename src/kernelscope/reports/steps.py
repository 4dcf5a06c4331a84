"""Steps: figures over the ``steps`` analysis' Result (the per-step breakdown TensorBoard's overview drew and the
step-time line), the table as shown, and the report section. Numbers and definitions: ``analysis.steps`` and
docs/metrics.md "Steps"."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..analysis import cache
from ..storage import catalog
from ..units import NS_PER_MS, ms_text
from .blocks import Section, Table
from .figures import styled
from .missing import shown

#: (category, label, colour) in the analysis' priority order; TensorBoard's names and a similar palette.
CATEGORIES = (
    ("kernel", "Kernel", "#4e79a7"),
    ("memcpy", "Memcpy", "#f28e2b"),
    ("memset", "Memset", "#e15759"),
    ("runtime", "Runtime", "#76b7b2"),
    ("dataloader", "DataLoader", "#59a14f"),
    ("python_gc", "Python GC", "#b07aa1"),
    ("cpu_op", "CPU Exec", "#edc948"),
    ("other", "Other", "#bab0ac"),
)
#: Bar patterns of marked steps.
PATTERNS = {"warmup": "/", "partial": "x"}
#: A warm-up or partial step longer than this many times the longest steady step would flatten the steady steps
#: against a chart scaled to it (a BERT training run: a 6,420 ms warm-up step over steady steps of 40-54 ms):
#: the charts' y axis then fits the steady steps and each step above it has its time written at the top
#: (plotly's autoscale button still shows everything).
FIT_OVER = 2.0


def step_labels(df: pd.DataFrame) -> list[str]:
    """The x label of each step: its number, with '(warm-up)' / '(partial)' when marked."""
    out = []
    for n, w, p in zip(df["step"], df["warmup"], df["partial"]):
        marks = [m for m, on in (("warm-up", w), ("partial", p)) if on]
        out.append(f"{int(n)}" + (f" ({', '.join(marks)})" if marks else ""))
    return out


def _pattern(df: pd.DataFrame) -> list[str]:
    return [PATTERNS["partial"] if p else PATTERNS["warmup"] if w else "" for w, p in zip(df["warmup"], df["partial"])]


def _marked(df: pd.DataFrame) -> np.ndarray:
    """Per step: warm-up or partial (not one of the steady steps)."""
    return (df["warmup"].astype(bool) | df["partial"].astype(bool)).to_numpy()


def _step_ms(df: pd.DataFrame) -> np.ndarray:
    return (df["dur_ns"].astype("int64") / NS_PER_MS).to_numpy()


def fit_steady(fig: go.Figure, df: pd.DataFrame) -> None:
    """Fit ``fig``'s y axis (ms) to the steady steps when a marked step is over ``FIT_OVER`` times the longest of
    them: the range ends at 1.3 times that step and every step above it gets "↑ its time" at the top; nothing
    changes when no step is steady or none is marked."""
    ms, marked = _step_ms(df), _marked(df)
    if marked.all() or not marked.any():
        return
    top = float(ms[~marked].max())
    if top <= 0 or float(ms[marked].max()) <= FIT_OVER * top:
        return
    ceiling = 1.3 * top
    fig.update_yaxes(range=[0, ceiling])
    for label, value in zip(step_labels(df), ms):
        if value > ceiling:
            fig.add_annotation(x=label, y=ceiling, yanchor="top", showarrow=False, text=f"↑ {value:,.3f} ms",
                               font={"size": 11, "color": "#374151"}, bgcolor="rgba(255,255,255,0.8)")
    fig.update_layout(title_text=fig.layout.title.text + "; the axis fits the steady steps, ↑ a step above it")


def breakdown_figure(df: pd.DataFrame) -> go.Figure:
    """Stacked bars, one per step (the ``steps`` table): its span in ms split into the eight categories, in
    priority order from the bottom. Warm-up steps are hatched '/', partial ones 'x'."""
    labels = np.array(step_labels(df), dtype=object)  # arrays, not lists: plotly checks a list item by item
    pattern = np.array(_pattern(df), dtype=object)
    fig = go.Figure()
    for key, label, colour in CATEGORIES:
        ms = (df[f"{key}_ns"].astype("int64") / NS_PER_MS).to_numpy()
        fig.add_trace(go.Bar(x=labels, y=ms, name=label, marker={"color": colour, "pattern": {"shape": pattern}},
                             hovertemplate="step %{x}<br>" + label + ": %{y:.3f} ms<extra></extra>"))
    styled(fig,
        barmode="stack", title={"text": "Step time breakdown (hatched: / warm-up, x partial)", "font": {"size": 14}},
        xaxis={"title": "step", "type": "category"}, yaxis_title="time (ms)", height=380,
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
        legend={"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom", "traceorder": "normal"})
    fit_steady(fig, df)
    return fig


def step_time_figure(df: pd.DataFrame, scalars: dict) -> go.Figure:
    """Step time (``dur_ns``, ms) per step as a line with markers (warm-up and partial steps drawn hollow and
    named in the hover), and the steady steps' median as a dashed line."""
    labels = np.array(step_labels(df), dtype=object)
    ms = _step_ms(df)
    fig = go.Figure(go.Scatter(
        x=labels, y=ms, mode="lines+markers", name="step time", line={"color": "#4e79a7"},
        marker={"size": 8, "symbol": np.where(_marked(df), "circle-open", "circle").astype(object)},
        hovertemplate="step %{x}: %{y:.3f} ms<extra></extra>"))
    med = scalars.get("step_time_median_ns")
    if med is not None:
        fig.add_hline(y=med / NS_PER_MS, line={"dash": "dash", "color": "#6b7280", "width": 1},
                      annotation_text=f"median {med / NS_PER_MS:,.3f} ms", annotation_position="top left")
    styled(fig, title={"text": "Step time (hollow: warm-up or partial)", "font": {"size": 14}},
                xaxis={"title": "step", "type": "category"}, yaxis={"title": "time (ms)", "rangemode": "tozero"},
                height=300, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                showlegend=False)
    fit_steady(fig, df)
    return fig


def spread_text(r) -> str:
    """One sentence: how many steps, which are marked, and the steady steps' spread."""
    s = r.scalars
    n = s.get("step_count") or 0
    if not n:
        return shown(r.warnings[0]) if r.warnings else "No steps."
    marks = []
    why = str(r.trust.get("warmup") or "")
    if s.get("warmup_steps"):
        marks.append(f"{s['warmup_steps']} warm-up")
    elif why.startswith("0: "):  # the schedule warmed up unrecorded: say why the first step is not marked
        marks.append(f"no warm-up step ({why[3:].removesuffix(' (provenance)')})")
    if s.get("partial_steps"):
        marks.append(f"{s['partial_steps']} partial")
    over = f"the {s['steady_steps']} steady step(s)" if s.get("steady_steps") else "all steps (none is steady)"
    cv = s.get("step_time_cv")
    return (f"{n} step(s) ({r.trust.get('source', 'ProfilerStep')})" + (f", {' and '.join(marks)}" if marks else "")
            + f". Over {over}: median {ms_text(s.get('step_time_median_ns'))}, min "
            f"{ms_text(s.get('step_time_min_ns'))}, max {ms_text(s.get('step_time_max_ns'))}"
            + ("" if cv is None else f", CV {100 * cv:.2f}%") + ".")


def table_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The ``steps`` table as the report shows it: step, flags, and every duration in ms."""
    out = pd.DataFrame({"step": [int(v) for v in df["step"]],
                        "marked": [", ".join(m for m, on in (("warm-up", w), ("partial", p)) if on)
                                   for w, p in zip(df["warmup"], df["partial"])]})
    out["step (ms)"] = df["dur_ns"].astype("int64") / NS_PER_MS
    for key, label, _ in CATEGORIES:
        out[f"{label} (ms)"] = df[f"{key}_ns"].astype("int64") / NS_PER_MS
    out["GPU tail (ms)"] = df["gpu_tail_ns"].astype("int64") / NS_PER_MS
    return out


def steps_section(store, trace_ids: list[str], ctx) -> Section | None:
    """Per trace with steps: the spread sentence, the breakdown and step-time figures, the table and the
    reasons steps are marked. Traces without steps are left out (the section is absent when none has any)."""
    blocks: list = []
    for tid in trace_ids:
        r = cache.analysis(store, "steps", tid)
        if not r.scalars.get("step_count"):
            continue
        name = catalog.trace_name(store, tid) or tid
        df = r.tables["steps"]
        blocks.append(f"{name}: {spread_text(r)}")
        for fig in (breakdown_figure(df), step_time_figure(df, r.scalars)) if ctx.figures else ():
            fig.update_layout(title_text=f"{name}: {fig.layout.title.text}")
            blocks.append(fig)
        blocks.append(Table(table_rows(df), f"{name}: time per step (a step's span ends when the GPU work it "
                                            "launched ends; the categories add up to the step)"))
        blocks += [f"{name}: step {int(n)}: {note}" for n, note in zip(df["step"], df["note"]) if note]
        blocks += [f"{name}: warning: {shown(w)}" for w in r.warnings]
    return Section("Steps", "steps", blocks) if blocks else None
