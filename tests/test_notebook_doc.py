"""docs/notebook.md runs: every ```python block, in order, in one namespace, from a folder holding the repo's
sample_traces/ and a copy of the session store of sample_traces/compiled (so the page's ingest finds the trace
already stored: no ingest here). The numbers its comments quote are checked against what the blocks computed,
and a Result displays its numbers and its figures through IPython's display (a stand-in module records them)."""

from __future__ import annotations

import re
import sys
import types

import plotly.graph_objects as go
from conftest import ROOT, compiled_copy

from kernelscope.notebook import NotebookResult, NotebookStore

DOC = ROOT / "docs" / "notebook.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_notebook_doc_runs(tmp_path, monkeypatch):
    compiled_copy(tmp_path / "kernelscope.duckdb")
    (tmp_path / "sample_traces").symlink_to(ROOT / "sample_traces")
    monkeypatch.chdir(tmp_path)
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    ns: dict = {}
    for i, code in enumerate(blocks):
        if i == len(blocks) - 1:  # before the last block closes the store: display a Result as Jupyter would
            shown = []
            fake = types.ModuleType("IPython.display")
            fake.HTML = lambda text: ("html", text)
            fake.display = shown.append
            monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
            monkeypatch.setitem(sys.modules, "IPython.display", fake)
            ns["steps"]._ipython_display_()
            assert shown[0][0] == "html" and "step_time_median_ns" in shown[0][1]
            assert [type(x) for x in shown[1:]] == [go.Figure, go.Figure]
        exec(compile(code, f"docs/notebook.md block {i + 1}", "exec"), ns)
    store, steps = ns["store"], ns["steps"]
    assert isinstance(store, NotebookStore) and isinstance(steps, NotebookResult)
    assert list(ns["traces"]["name"]) == ["compiled"]
    assert list(ns["top"]["n"]) == [30, 30, 30] and store.con is None  # the last block closed the store
    # the numbers the comments quote
    assert len(ns["kernels"]) == 210 and tuple(ns["by_name"].iloc[0]) == (30, 1_305_368)
    assert (steps.scalars["step_count"], steps.scalars["step_time_median_ns"], steps.scalars["steady_steps"]) == \
        (30, 191_869, 29)
    assert (len(ns["launch"].figures()), ns["launch"].scalars["tklqt_ns"]) == (2, 3_612_300)
    assert (tmp_path / "steps.html").stat().st_size > 0
    # the tables are the store's rows: every kernel of the trace, as the steps analysis counted them
    assert int(ns["per_step"]["kernel_ns"].sum()) <= int(ns["kernels"]["dur_ns"].sum())
    assert int(ns["per_step"]["activities"].sum()) == 210 + 30  # the kernels and one memset per step


def test_notebook_store_edges(tmp_path):
    import pytest

    import kernelscope
    from kernelscope.errors import UsageError

    db = compiled_copy(tmp_path / "ks.duckdb")
    with kernelscope.open_store(db, read_only=True) as store:
        assert isinstance(store, NotebookStore) and store.con is not None  # still the storage Store
        tid = store.trace_id()  # the only trace
        assert len(store.table("launches", tid, limit=5)) == 5
        k = store.table("kernels")
        assert set(k["kind"]) == {"kernel"} and list(k["start_ns"]) == sorted(k["start_ns"])
        assert len(k) == store.analyze("summary").scalars["kernels"]
        with pytest.raises(UsageError, match="no table named"):
            store.table("nope")
        with pytest.raises(UsageError, match="read-only"):
            store.ingest(ROOT / "sample_traces" / "compiled")
        r = store.analyze("steps", warmup=0)
        assert r.scalars["warmup_steps"] == 0 and "steps (30×" in repr(r)
        assert store.analyze("comm", [tid]).name == "comm"  # a multi-trace analysis takes a list
