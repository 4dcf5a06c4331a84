"""`kernelscope report`: one self-contained HTML file / a Markdown summary built from the section list."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from kernelscope.analysis.registry import get_analysis
from kernelscope.cli import cli
from kernelscope.reports.blocks import Table
from kernelscope.reports.report import report
from kernelscope.storage.store import open_store


def _run(*args):
    return CliRunner().invoke(cli, list(args))


def test_html_is_self_contained_with_plotly_once(dash_store, tmp_path):
    out = tmp_path / "r.html"
    ids = [dash_store.ids["llama_prefill_b1"], dash_store.ids["cpu_only"]]
    r = _run("report", "--db", str(dash_store.db), *ids, "-o", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert out.stat().st_size <= 10_000_000 and f"{len(ids)} traces" in r.output
    assert text.count("window.Plotly") >= 1 and len(re.findall(r"<script[^>]*src=", text)) == 0
    assert text.count("Plotly v") <= 2  # the library is inlined once, not per figure
    assert 'id="overview"' in text and "no GPU activity" in text
    overview = text[text.index('<section id="overview">'):]
    overview = overview[:overview.index("</section>")]
    assert overview.count('class="plotly-graph-div"') == 1  # one busy figure: the CPU-only trace has none


def test_headline_numbers_equal_the_summary(dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    with open_store(dash_store.db, read_only=True) as store:
        md = report(store, [tid], fmt="md")
        s = get_analysis("summary").fn(store, tid).scalars
    header, _, row = [ln for ln in md.splitlines() if ln.startswith("|")][:3]
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    for col, key in [("GPU span (ms)", "gpu_span_ns"), ("GPU busy (ms)", "busy_ns"), ("latency (ms)", "latency_ns")]:
        assert cells[col] == f"{s[key] / 1e6:,.3f}"
    assert cells["kernels"] == f"{s['kernels']:,}" and cells["id"] == tid


@pytest.mark.parametrize("args, words", [
    (["llama_prefill_b1"], "needs a file"),
    (["--sweep", "x", "llama_prefill_b1", "-o", "r.html"], "not both"),
    (["-o", "r.html"], "give one to `kernelscope report`"),  # no TRACE, and the store holds several
    (["--sweep", "no_such_sweep", "-o", "r.html"], "no trace carries"),
    (["no_such_trace", "-o", "r.html"], "no_such_trace"),
])
def test_bad_requests_one_line_and_no_file(dash_store, tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    r = _run("report", "--db", str(dash_store.db), *args)
    assert r.exit_code != 0 and words in r.output and len(r.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_sections_a_trace_did_not_record_are_named_with_how_to_record_them(dash_store, session_store):
    """train_step (our collector: ProfilerStep ranges, no modules, stacks or memory) gets a closing section naming
    the three views it lacks and the profiler option for each; qwen2_train_full (every option on, but one step
    recorded without prof.step()) names Steps alone."""
    from kernelscope.reports.report import build

    with open_store(dash_store.db, read_only=True) as store:
        titles = {s.title: s for s in build(store, [dash_store.ids["train_step"]])}
    assert "Steps" in titles and "Modules" not in titles and "Memory" not in titles
    lines = titles["Not in this report"].blocks
    assert [b.split(":")[0] for b in lines] == ["Modules", "Call stacks", "Memory"]
    assert all(b.split(": ", 1)[1][0].isupper() for b in lines)  # "Modules: This trace ...", as Steps' line reads
    assert "with_modules=True" in lines[0] and "with_stack=True" in lines[1] and "profile_memory=True" in lines[2]
    full = next(t for p, t in session_store.ids.items() if str(p).endswith("qwen2_train_full/trace.json.gz"))
    with open_store(session_store.db, read_only=True) as store:
        titles = {s.title: s for s in build(store, [full])}
    assert {"Modules", "Call stacks", "Memory"} <= set(titles) and "Steps" not in titles
    (line,) = titles["Not in this report"].blocks
    assert line.startswith("Steps: ") and "prof.step()" in line


def test_markdown_leaves_figures_out_without_drawing_them(session_store):
    """A Markdown report builds its sections with figures=False: no section draws a figure, and the text and
    tables are those of the sections built with figures (every section that draws one is exercised: the
    overview, extras, launch, bound, roofline, power, steps of a collector run; modules, stacks and memory of
    qwen2_train_full; the sweep of three llama_prefill batches). Fails if leaving a figure out also drops or changes a
    block around it, or if a section still draws one."""
    import plotly.graph_objects as go

    from kernelscope.reports.report import build, render_markdown

    ids = {p.parent.name: t for p, t in session_store.ids.items() if p.name == "trace.json.gz"}
    cases = [([ids["train_step"]], None), ([ids["qwen2_train_full"]], None),
             ([ids[f"llama_prefill_b{b}"] for b in (1, 8, 64)], "batch")]  # three points draw every sweep figure
    drawn = set()
    with open_store(session_store.db, read_only=True) as store:
        for trace_ids, by in cases:
            full, bare = build(store, trace_ids, by), build(store, trace_ids, by, figures=False)
            drawn |= {s.anchor for s in full if any(isinstance(b, go.Figure) for b in s.blocks)}
            assert not [s.anchor for s in bare if any(isinstance(b, go.Figure) for b in s.blocks)]
            assert render_markdown(bare, "t") == render_markdown(full, "t"), trace_ids
    assert {"overview", "extras", "launch", "bound", "sweep", "roofline", "power", "steps", "modules", "stacks",
            "memory"} <= drawn, drawn


def test_a_one_trace_report_does_not_repeat_the_trace_name(dash_store):
    """Every sentence, table caption and figure title of a section names the trace it is of ("llama_decode: 2 of 2
    kernels have a launch call ..."): needed when a report holds several traces, noise when it holds one (a
    TraceLens trace's 63-character name opened 40 paragraphs of its Markdown report). A one-trace report leaves
    the name to its title; a report of two keeps it on every block."""
    import plotly.graph_objects as go

    from kernelscope.reports.report import build
    from kernelscope.storage import catalog

    def texts(sections):
        for s in sections:
            for b in s.blocks:
                yield b if isinstance(b, str) else b.caption if isinstance(b, Table) else \
                    b.layout.title.text if isinstance(b, go.Figure) else None

    with open_store(dash_store.db, read_only=True) as store:
        ids = [dash_store.ids["train_step"], dash_store.ids["llama_prefill_b1"]]
        names = catalog.trace_names(store, ids)
        one = [t for t in texts(build(store, ids[:1])) if t]
        two = [t for t in texts(build(store, ids)) if t]
    first = names[ids[0]]
    assert len(one) > 20 and not [t for t in one if t.startswith(f"{first}: ")]
    assert not [t for t in one if re.match(r"[a-z]{2,}[ :,(]", t)]  # "no telemetry ..." -> "No telemetry ..."
    assert any(t.startswith("Warning: ") for t in one) or any(t.startswith("No ") for t in one)
    assert any(t.startswith("2 of 2 ") or "kernels have a launch call" in t for t in one)
    named = [t for t in two if t.startswith(f"{first}: ")]
    assert len(named) > 10 and any(t.startswith(f"{names[ids[1]]}: ") for t in two)
