"""Callbacks and page layouts as plain functions, on a real store."""

from __future__ import annotations

import pandas as pd
import pytest

from kernelscope.analysis.bound import idle_split
from kernelscope.analysis.registry import get_analysis
from kernelscope.analysis.summary import summary
from kernelscope.dashboard.app import route, trace_ref
from kernelscope.dashboard.pages import overview, traces
from kernelscope.storage.queries import list_traces
from kernelscope.storage.store import open_store

from .tree import find, ns_columns, shown_ms, texts


def _summary(db, tid):
    with open_store(db, read_only=True) as store:
        return get_analysis("summary").fn(store, tid), idle_split(store, tid)


def test_trace_ref_from_path_or_query():
    assert trace_ref("/", "") is None
    assert trace_ref("/", None) is None
    assert trace_ref("/trace/abc123", "") == "abc123"
    assert trace_ref("/trace/abc123/", "") == "abc123"
    assert trace_ref("/", "?trace=llama_prefill_b1") == "llama_prefill_b1"
    assert trace_ref("/trace/a%20b", "") == "a b"


def test_traces_page_lists_every_trace_with_its_numbers(dash_store):
    page = route(dash_store.db, "/", "")
    table = find(page, traces.TABLE_ID)
    assert table is not None and table.defaultColDef["floatingFilter"] is True  # a filter cell per column
    by_id = {r["id"]: r for r in table.rowData}
    assert set(by_id) == set(dash_store.ids.values())
    with open_store(dash_store.db, read_only=True) as store:
        ref = list_traces(store).set_index("trace_id")
    for tid, row in by_id.items():
        assert row["trace_id"] == tid and row["name"] == ref.loc[tid, "name"]
        assert row["kernels"] == ref.loc[tid, "kernels"]
        span = ref.loc[tid, "gpu_span_ns"]
        assert row["gpu_span_ns"] == (None if pd.isna(span) else int(span))
        assert shown_ms(table, row, "gpu_span_ns") == (None if pd.isna(span) else round(int(span) / 1e6, 3))
    assert by_id[dash_store.ids["two_devices"]]["devices"] == "0, 1"
    headers = {c["field"]: c["headerName"] for c in table.columnDefs}
    assert headers["devices"] == "GPU device ids"  # indices, not a count: "GPU devices: 0" read as none
    assert by_id[dash_store.ids["cpu_only"]]["gpu_span_ns"] is None
    assert "batch=1" in by_id[dash_store.ids["llama_prefill_b1"]]["labels"]


def test_clicking_a_row_opens_that_trace_whatever_the_filter():
    # cellClicked as the grid sends it: rowIndex is the index in the shown (filtered/sorted) rows, rowId the id.
    assert traces.open_trace({"rowIndex": 0, "colId": "name", "value": "x", "rowId": "d79dc1ba9fce"}) \
        == "/trace/d79dc1ba9fce"
    assert traces.open_trace(None) is None
    assert traces.open_trace({"rowIndex": 0, "colId": "trace_id"}) is None


@pytest.mark.parametrize("name", ["llama_prefill_b1", "compiled", "probe_train", "two_devices", "nsys"])
def test_overview_numbers_equal_the_summary(dash_store, name):
    tid = dash_store.ids[name]
    page = route(dash_store.db, f"/trace/{tid}", "")
    result, split = _summary(dash_store.db, tid)
    s = result.scalars
    for key, _label, kind, _d in overview.KPIS:
        el = find(page, f"kpi-{key}")
        assert el is not None, key
        raw = getattr(el, "data-value")
        assert raw == ("" if s[key] is None else str(s[key])), key
        if kind == "ns" and s[key] is not None:
            assert el.children == f"{s[key] / 1e6:,.3f} ms"
    hw = find(page, "kpi-host_wait_share")
    assert getattr(hw, "data-value") == str(int(split["host_wait_ns"].sum()))
    assert hw.children == f"{100 * split['host_wait_ns'].sum() / split['gpu_span_ns'].sum():.1f}%"
    fig = find(page, "busy-figure").figure
    assert len(fig.data) == s["devices_count"]
    assert max(max(t.y) for t in fig.data) > 0
    # Tables: top kernels as the summary ranks them, times in ms.
    tk = result.tables["top_kernels"]
    grid = find(page, "top-kernels")
    rows = grid.rowData
    assert [r["name"] for r in rows] == list(tk["name"])
    assert ns_columns(grid) == {"total_ns": (1_000_000, 3), "mean_ns": (1000, 2)}  # shown in ms and µs
    assert [shown_ms(grid, r, "total_ns") for r in rows] == [round(v / 1e6, 3) for v in tk["total_ns"]]
    if result.tables["top_operators"].empty:  # the two-device edge trace has no CPU operators
        assert "No kernel in this trace is attributed to a CPU operator" in texts(find(page, "msg-no-operators"))
        assert find(page, "top-operators") is None
    else:
        ops = find(page, "top-operators").rowData
        assert [r["name"] for r in ops] == list(result.tables["top_operators"]["name"])
        assert find(page, "msg-no-operators") is None


def test_overview_trust_in_words(dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    result, _ = _summary(dash_store.db, tid)
    words = texts(find(route(dash_store.db, f"/trace/{tid}", ""), "trust"))
    kl = result.trust["kernels_with_launch"]["count"]
    k = result.scalars["kernels"]
    assert f"{kl:,} of {k:,} kernels have a launch call in the trace" in words
    ops = result.trust["ops_with_kernels"]
    assert f"{ops['top_level_ops']:,} of {ops['top_level_ops_total']:,} top-level CPU operators" in words


def test_trust_sentences_name_the_problems():
    trust = {"kernels_with_launch": {"count": 1274, "pct": 70.154}, "negative_launch_times": 3,
             "graph_kernels": 12, "dropped_notes": ["x", "y"], "ext_id_disagreements": {"count": 0}}
    got = overview.trust_sentences(trust, {"kernels": 1816})
    assert "1,274 of 1,816 kernels have a launch call in the trace (70.2%)." in got
    assert any(t.startswith("3 GPU activities start before their launch call") for t in got)
    assert any(t.startswith("12 kernels ran inside CUDA graphs") for t in got)
    assert any("(2 notes)" in t for t in got)
    assert not any("External id" in t for t in got)
    # the parser's notes are said as they are, not as a repair (BERT on an H200: the one note was a nesting)
    nesting = ("7 operators/annotations/runtime calls are not nested in the interval that encloses their start on "
               "their thread (partial overlap); their links follow the count of intervals open at their start")
    assert overview.trust_sentences({"parser_warnings": [nesting]}, {})[-1] == f"Parser note: {nesting}."
    four = overview.trust_sentences({"parser_warnings": ["a.", "b", "c", "d"]}, {})[-1]
    assert four == "Parser notes: a; b; c (1 more in `kernelscope summary`)."


def test_query_string_and_prefix_and_name_open_the_same_overview(dash_store):
    tid = dash_store.ids["compiled"]
    for path, search in ((f"/trace/{tid}", ""), ("/", f"?trace={tid}"), (f"/trace/{tid[:6]}", ""),
                         ("/", "?trace=compiled")):
        page = route(dash_store.db, path, search)
        assert tid in texts(page), (path, search)
        assert find(page, "kpi-busy_ns") is not None


def test_cpu_only_trace_says_so_and_draws_nothing(dash_store):
    page = route(dash_store.db, f"/trace/{dash_store.ids['cpu_only']}", "")
    assert "no GPU activity" in texts(find(page, "msg-no-gpu"))
    assert find(page, "busy-figure") is None
    assert find(page, "kpi-host_wait_share") is None
    assert getattr(find(page, "kpi-gpu_span_ns"), "data-value") == ""
    assert find(page, "kpi-gpu_span_ns").children == "n/a"  # and why, under it (issue 11)
    assert find(page, "kpi-cpu_ops").children == "2"


def test_unknown_trace_unknown_page_empty_and_missing_store(dash_store, empty_db, tmp_path):
    msg = find(route(dash_store.db, "/trace/ffffffffffff", ""), "msg-unknown-trace")
    assert "No trace matches 'ffffffffffff' in this store." in texts(msg)
    assert find(route(dash_store.db, "/operators", ""), "msg-no-page") is not None
    tid = dash_store.ids["llama_prefill_b1"]
    for ref in (tid, "llama_prefill_b1"):  # a stored trace and a page it does not have: that page is named
        page = route(dash_store.db, f"/trace/{ref}/kernels", "")
        assert find(page, "msg-unknown-trace") is None
        said = texts(find(page, "msg-no-page"))
        assert said.startswith(f"Trace {tid} has no page 'kernels': its pages are overview, timeline,"), said
        assert "/ranks (a run's ranks and their collectives)" in said  # where `analyze comm` is drawn
        assert find(page, "nav-overview") is not None  # the trace's own pages, one click away
        assert find(page, "nav-overview").className == ""  # none marked: this is none of them
    assert find(route(dash_store.db, "/trace/ffffffffffff/kernels", ""), "msg-unknown-trace") is not None
    empty = find(route(empty_db, "/", ""), "msg-empty-store")
    assert "has no traces yet" in texts(empty)
    assert "No trace matches" in texts(route(empty_db, "/trace/abc", ""))
    missing = find(route(tmp_path / "nope.duckdb", "/", ""), "msg-store-error")
    assert "no store at" in texts(missing)
    (tmp_path / "junk.duckdb").write_text("not a database")
    assert "not a kernelscope store" in texts(route(tmp_path / "junk.duckdb", "/", ""))


def test_ambiguous_prefix_is_a_sentence(dash_store):
    ids = list(dash_store.ids.values())
    # Find the longest shared prefix of two ids; with 5 random ids a 1-character prefix is likely shared.
    shared = next((a[:1] for a in ids for b in ids if a != b and a[:1] == b[:1]), None)
    if shared is None:
        pytest.skip("no two trace ids share a first character in this store")
    assert "ambiguous" in texts(find(route(dash_store.db, f"/trace/{shared}", ""), "msg-unknown-trace"))


def test_page_and_state_from_the_url():
    from kernelscope.dashboard.app import page_name, url_params
    assert trace_ref("/trace/abc/overview", "") == "abc" and page_name("/trace/abc/overview") == "overview"
    assert page_name("/trace/abc") == "overview" and page_name("/") == "traces"
    assert trace_ref("/trace/x/notapage", "") == "x/notapage"  # an unknown page is part of the reference
    assert url_params("?trace=a&op=aten%3A%3Amm&t0=5&t0=7") == {"op": "aten::mm", "t0": "7"}


def test_the_traces_page_marks_a_truncated_trace(tmp_path):
    """A trace kept by ingest --salvage says TRUNCATED in the traces table too, not only in its trust section."""
    import corpus

    from kernelscope.storage.ingest import ingest_paths

    db = tmp_path / "t.duckdb"
    with open_store(db) as store:
        (res,) = ingest_paths(store, [corpus.truncated(tmp_path)], progress=False, salvage=True)
        assert res.status == "ingested", res.message
    with open_store(db, read_only=True) as store:
        got = traces.rows(store).set_index("trace_id")["notes"]
    assert got[res.trace_id].startswith("TRUNCATED at byte ")


def test_kernel_time_above_busy_says_it_is_a_sum(dash_store):
    """ddp_rank0 ran its NCCL all-reduce beside compute kernels: kernel time (30.25 ms) exceeds the GPU span
    (28.94 ms), which the KPI explains under the number; a trace on one stream (train_step) says nothing there."""
    with open_store(dash_store.db, read_only=True) as store:
        s = {n: summary(store, dash_store.ids[n]).scalars for n in ("ddp_rank0", "train_step")}
    assert s["ddp_rank0"]["kernel_time_ns"] > s["ddp_rank0"]["gpu_span_ns"]
    assert s["train_step"]["kernel_time_ns"] <= s["train_step"]["busy_ns"]
    for name, said in (("ddp_rank0", "a sum: kernels overlap on streams"), ("train_step", "")):
        page = route(dash_store.db, f"/trace/{dash_store.ids[name]}", "")
        assert find(page, "kpi-kernel_time_ns-extra").children == said, name
