"""The report's launch, bound-ness, extras (TKLQT with q, energy, profiler inflation, recommendations) and
sweep sections: present with the analyses' numbers; the sweep only with several traces or --by."""

from __future__ import annotations

import pytest

from kernelscope.analysis.registry import get_analysis
from kernelscope.reports import bound as rb
from kernelscope.reports import launch as rl
from kernelscope.reports import sweep as rs
from kernelscope.reports.blocks import Context, Table
from kernelscope.reports.report import SECTIONS, build, report


def _md_rows(md: str, heading: str) -> list[dict]:
    """The first Markdown table after ``heading`` as row dicts."""
    lines = md[md.index(heading):].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| "))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(header, [c.strip() for c in ln.strip("|").split("|")])))
    return rows


def test_sections_registered_in_order():
    names = [f.__name__ for f in SECTIONS]
    for fn in (rb.extras_section, rl.launch_section, rb.bound_section, rs.sweep_section):
        assert fn.__name__ in names
    assert names.index("launch_section") < names.index("bound_section") < names.index("sweep_section")


def test_one_trace_has_launch_bound_extras_but_no_sweep(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    md = report(store, [tid], fmt="md")
    assert "## Launch overhead" in md and "## Bound-ness" in md and "## Sweep" not in md
    ls = get_analysis("launch").fn(store, tid).scalars
    ws = get_analysis("whatif").fn(store, tid).scalars
    (row,) = _md_rows(md, "## Launch overhead")
    assert row["TKLQT: sum over kernels (ms)"] == f"{round(ls['tklqt_ns'] / 1e6, 3):,.3f}"
    assert row["mean queue depth q"] == f"{ls['mean_queue_depth']:,.3f}"
    assert row["what-if predicted (ms)"] == f"{round(ws['predicted_ns'] / 1e6, 3):,.3f}"
    assert row["GPU idle in gaps >= 1 ms (ms)"] == "0.000"  # back-to-back prefill launches
    long_ns = get_analysis("whatif").fn(store, dash_store.ids["ddp_rank1"]).scalars["long_idle_ns"]
    (ddp,) = _md_rows(report(store, [dash_store.ids["ddp_rank1"]], fmt="md"), "## Launch overhead")
    assert long_ns >= 1_000_000 and ddp["GPU idle in gaps >= 1 ms (ms)"] == f"{long_ns / 1e6:,.3f}"
    # the split adds up to TKLQT (ms, 3 decimals: within rounding)
    parts = sum(float(row[c].replace(",", "")) for c in ["api (ms)", "queue (ms)", "dispatch (ms)"])
    assert abs(parts - ls["tklqt_ns"] / 1e6) < 0.002
    bs = get_analysis("bound").fn(store, tid).scalars
    assert f"{bs['host_wait_ns'] / 1e6:,.3f} ms host wait ({100 * bs['host_wait_share']:.1f}%" in md
    (extra,) = _md_rows(md, "## Launch queue, energy, inflation")
    assert extra["TKLQT: sum over kernels (ms)"] == row["TKLQT: sum over kernels (ms)"]
    ps = get_analysis("power").fn(store, tid).scalars
    assert extra["energy is"] == "per iteration"
    assert extra["energy (J)"] == f"{round(ps['energy_per_iteration_mj'] / 1000, 3):,.3f}"
    p = get_analysis("transition").fn(store, [tid], by="batch").tables["points"].iloc[0]
    assert extra["profiler inflation (×)"] == f"{round(p['inflation'], 3):,.3f}"
    # second way: latency per iteration / un-profiled time, both in the transition's point row
    assert p["inflation"] == pytest.approx(p["latency_per_iter_ns"] / p["unprofiled_ns"])


def test_sweep_section_only_with_several_traces_or_by(dash_store, store):
    ids = [dash_store.ids[n] for n in ("llama_prefill_b1", "llama_prefill_b8", "llama_prefill_b128")]
    assert rs.sweep_section(store, ids[:1], Context()) is None
    titles = [s.title for s in build(store, ids[:1])]
    assert "Sweep" not in titles and "Launch overhead" in titles and "Bound-ness" in titles
    sec = rs.sweep_section(store, ids, Context())
    r = get_analysis("transition").fn(store, ids, by="batch")
    t = r.scalars["transition"]
    assert t is not None
    assert any(f"between batch={t['last_cpu_bound']} (last CPU-bound) and batch={t['first_gpu_bound']}" in b
               for b in sec.blocks if isinstance(b, str))
    (table,) = [b for b in sec.blocks if isinstance(b, Table)]
    assert list(table.df["batch"]) == [1, 8, 128]
    assert list(table.df["TKLQT: sum over kernels (ms)"]) == [round(v / 1e6, 3) for v in r.tables["points"]["tklqt_ns"]]
    assert list(table.df.columns).index("q") < list(table.df.columns).index("TKLQT: sum over kernels (ms)")
    assert list(table.df["regime"]) == list(r.tables["points"]["regime"])
    # with --by and one trace: a sweep of one point, said in words
    one = rs.sweep_section(store, ids[:1], Context(by="batch"))
    assert one is not None and any("A sweep of 1 point" in b for b in one.blocks if isinstance(b, str))
    # several traces without the label: the analysis' reason, not a traceback
    bad = rs.sweep_section(store, [dash_store.ids["cpu_only"], dash_store.ids["nsys"]], Context())
    assert "no numeric label 'batch'" in bad.blocks[0]


def test_html_report_with_sweep_figure(dash_store, store):
    ids = [dash_store.ids[n] for n in ("llama_prefill_b1", "llama_prefill_b8", "llama_prefill_b128")]
    html = report(store, ids, fmt="html")
    for anchor in ("launch", "bound", "sweep", "extras"):
        assert f'<section id="{anchor}">' in html
    sweep_html = html[html.index('<section id="sweep">'):]
    sweep_html = sweep_html[:sweep_html.index("</section>")]
    assert sweep_html.count('class="plotly-graph-div"') == 1
    assert len(html.encode()) <= 10_000_000


def test_cpu_only_sections_say_so(dash_store, store):
    tid = dash_store.ids["cpu_only"]
    md = report(store, [tid], fmt="md")
    assert "there is no launch overhead to show" in md
    assert "\nNo GPU activity (a CPU-only trace)" in md  # a sentence of a one-trace report opens with a capital
    assert "No energy: the trace has no telemetry" in md
    assert "\nNo GPU activity: no recommendation" in md


def test_inflation_names_a_whole_process_timing(tmp_path):
    """`kernelscope profile` of a script without kernelscope.range("step") regions stores one 'process_wall'
    timing of the un-profiled run. The report said 'there is no un-profiled timing either' about such a trace (a
    ViT training loop profiled on an H100 whose profile line had printed the overhead); it now says the run was
    timed as a whole process, how long, and how to time iterations. Without that row the old sentence stays."""
    import stores  # tests/ is on sys.path (tests/conftest.py)
    from conftest import SAMPLES

    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.store import open_store

    db = stores.empty(tmp_path / "s.duckdb")
    bare = tmp_path / "t.json.gz"  # the trace alone: beside its run.json it would bring that run's timings
    bare.write_bytes((SAMPLES / "train_step" / "trace.json.gz").read_bytes())
    with open_store(db) as st:
        (res,) = ingest_paths(st, [bare], progress=False)
        tid = res.trace_id
        assert rb.inflation(st, tid)[2] == "no un-profiled timing"
        st.con.execute("INSERT INTO timings VALUES (?, 'process_wall', NULL, 4753946156, NULL)", [tid])
        value, sentence, why = rb.inflation(st, tid)
    assert value is None and why == "un-profiled run timed as a whole process"
    assert sentence.startswith("No profiler inflation per iteration: the un-profiled run was timed as a whole "
                               "process (4,753.946 ms), not per step; mark the loop with kernelscope.range")


def test_inflation_also_per_steady_step_when_steps_were_left_out(dash_store, store):
    """Whisper under kernelscope profile (H200) read 'Profiler inflation 9.14×' (its first step held 7.4 s of
    model set-up) while `profile` said +49% per region; the sentence now also gives the ratio per steady step
    (1.26× there). By hand here: the median duration of the steps table's steady rows over the median
    un-profiled cuda_event time; no such sentence when every step is steady."""
    import statistics

    tid = dash_store.ids["compiled"]
    df = get_analysis("steps").fn(store, tid).tables["steps"]
    steady = df[~df["warmup"] & ~df["partial"]]
    assert 0 < len(steady) < len(df)
    median = statistics.median(int(v) for v in steady["dur_ns"])
    unp = statistics.median(int(v) for v in store.query(
        "SELECT dur_ns FROM timings WHERE trace_id = $t AND kind = 'cuda_event'", {"t": tid})["dur_ns"])
    sentence = rb.inflation(store, tid)[1]
    assert sentence.endswith(f" Per steady step (steps analysis: the median of {len(steady)} of {len(df)} steps, "
                             f"warm-up and partial ones left out): {median / 1e6:,.3f} ms, {median / unp:.2f}×.")
    one = dash_store.ids["train_step"]  # one step, steady: nothing to add
    assert "Per steady step" not in rb.inflation(store, one)[1]


def test_inflation_from_the_collectors_step_overhead(tmp_path):
    """`kernelscope profile` of a script without kernelscope.range regions now measures its overhead step by step
    (run.json overhead.profiler, basis 'step', kept in the trace's provenance); the report's and the Overview's
    profiler inflation give that number instead of 'timed as a whole process'. A 'process' basis says nothing
    per step, and the whole-process sentence stays."""
    import json

    import stores  # tests/ is on sys.path (tests/conftest.py)
    from conftest import SAMPLES

    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.store import open_store

    step = {"basis": "step", "rule": "optimizer", "n": 3, "profiled_median_ns": 14_700_000,
            "unprofiled_median_ns": 10_000_000, "pct": 47.0}
    process = {"basis": "process", "n": 1, "profiled_wall_ns": 9_000_000_000, "unprofiled_wall_ns": 8_000_000_000,
               "pct": 12.5}
    faster = {**step, "profiled_median_ns": 9_000_000, "pct": -10.0}  # noise, not a negative cost
    out = []
    for i, overhead in enumerate((step, process, faster)):
        run = tmp_path / f"run{i}"
        run.mkdir()
        (run / "trace.json.gz").write_bytes((SAMPLES / "train_step" / "trace.json.gz").read_bytes())
        (run / "run.json").write_text(json.dumps({
            "name": f"r{i}", "provenance": {"profiler_overhead": overhead},
            "timings": [{"kind": "process_wall", "iteration": 0, "dur_ns": 4753946156, "energy_mj": None}]}))
        db = stores.empty(tmp_path / f"s{i}.duckdb")
        with open_store(db) as st:
            (res,) = ingest_paths(st, [run], progress=False)
            out.append(rb.inflation(st, res.trace_id))
    (value, sentence, why), (value2, _sentence2, why2), (value3, sentence3, _why3) = out
    assert value3 == pytest.approx(0.9) and sentence3 == (
        "Profiler inflation under the noise: kernelscope profile measured the median of 3 recorded steps (9.000 ms) "
        "below the un-profiled run's same steps (10.000 ms), 0.90×; a step is not faster for being profiled, so "
        "they vary more than the profiler costs.")
    assert value == pytest.approx(1.47) and why == ""
    assert sentence == ("Profiler inflation 1.47× per step, as kernelscope profile measured it: the median of 3 "
                        "recorded steps (14.700 ms) against the un-profiled run's same steps (10.000 ms).")
    assert value2 is None and why2 == "un-profiled run timed as a whole process"


def test_no_energy_says_why_once():
    """Mixtral's Overview and report read "No energy: n/a: the window (194.6 ms) is shorter than 10 counter
    steps ..."; the sentence gives the reason after "No energy:" without a second "n/a"."""
    from types import SimpleNamespace

    from kernelscope.reports.bound import energy

    r = SimpleNamespace(scalars={"energy_source": "energy_counter", "trace_window_ns": 194_600_000},
                        trust={"min_window_ns": 1_000_000_000, "counter_step_ns": 100_000_000})
    assert energy(r) == (None, "", "No energy: the window (194.6 ms) is shorter than 10 counter steps "
                                   "(10 × 100.0 ms = 1,000.0 ms).")


def test_operators_section_is_a_cpu_only_traces_account_of_its_time(dash_store, store):
    """torch.profiler's defaults on a CPU (T5: 21,269 events) gave a report of n/a's and nothing on where the time
    went. The Operators section lists the top operators by CPU time (a CPU-only trace shows only calls and CPU
    time), each equal to the sum of its calls' durations read from the store by hand; a GPU trace's table opens
    with the operator of most GPU time, the launch analysis' per leaf operator, in the page's order."""
    from kernelscope.reports.operators import REPORT_ROWS, operators_section

    tid = dash_store.ids["cpu_only"]
    [table] = [b for b in operators_section(store, [tid], Context()).blocks if isinstance(b, Table)]
    assert list(table.df.columns) == ["operator", "calls", "CPU time (ms)"]
    hand = store.query("SELECT name, count(*) AS n, sum(dur_ns) / 1e6 AS ms FROM cpu_ops WHERE trace_id = $t "
                       "GROUP BY name ORDER BY ms DESC, name", {"t": tid})
    top = hand.head(min(REPORT_ROWS, len(hand)))
    assert sorted(zip(table.df["operator"], table.df["calls"])) == sorted(zip(top["name"], top["n"]))
    assert list(table.df["CPU time (ms)"]) == sorted(table.df["CPU time (ms)"], reverse=True)
    assert table.df["CPU time (ms)"].tolist() == [round(x, 3) for x in top["ms"]]
    assert "by CPU time (no GPU work in this trace)" in table.caption

    tid = dash_store.ids["llama_prefill_b8"]
    [table] = [b for b in operators_section(store, [tid], Context()).blocks if isinstance(b, Table)]
    per = get_analysis("launch").fn(store, tid).tables["per_leaf_op"]
    per = per[per["name"].notna()].groupby("name")["gpu_union_ns"].sum()
    assert table.df["operator"].iloc[0] == per.idxmax()
    assert table.df["GPU time (ms)"].iloc[0] == round(per.max() / 1e6, 3)
    assert "by GPU time, then CPU time" in table.caption
    assert "## Operators" in report(store, [tid], fmt="md")
