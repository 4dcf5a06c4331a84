"""Memory page and report section: through the Flask test client (the router callback over HTTP) over the session
store of sample files: the KPI holds the torch.cuda oracle's peak with its operator and module, the curves reach
it, the tables equal the analysis' JSON; no memory events, an unknown ?device= and the report section in words."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest
from conftest import SAMPLES

from kernelscope.analysis.registry import get_analysis
from kernelscope.reports.blocks import Context, Table
from kernelscope.reports.memory import memory_section
from kernelscope.reports.report import SECTIONS
from kernelscope.storage.store import open_store
from kernelscope.units import BYTES_PER_MIB

from .tree import find_json, page_json, plotly_values, text_json

FULL = SAMPLES / "qwen2_train_full" / "trace.json.gz"
DEFAULTS = SAMPLES / "qwen2_train_default" / "trace.json.gz"


@pytest.fixture(scope="module")
def mem_client(session_store):
    from kernelscope.dashboard.app import create_app

    return create_app(session_store.db).server.test_client()


def _js(db, tid) -> dict:
    with open_store(db, read_only=True) as store:
        return json.loads(get_analysis("memory").fn(store, tid).to_json())


def test_page_shows_the_peak_and_the_tables(mem_client, session_store):
    tid = session_store.ids[FULL]
    js = _js(session_store.db, tid)
    page = page_json(mem_client, f"/trace/{tid}/memory")
    k = find_json(page, "kpi-peak_allocated_bytes")["props"]
    assert k["data-value"] == "144241664" == str(js["peak_allocated_bytes"]["cuda:0"])  # info.txt's oracle
    assert k["children"].startswith("137.56 MiB")
    assert (k["data-operator"], k["data-module"]) == ("aten::_log_softmax_backward_data",
                                                      "nn.Module: Qwen2ForCausalLM_0")
    assert "Qwen2ForCausalLM_0" in text_json(find_json(page, "kpi-peak_allocated_bytes-extra"))
    fig = find_json(page, "memory-timeline")["props"]["figure"]
    alloc = [t for t in fig["data"] if t["name"] == "allocated"]
    assert len(alloc) == 2  # cuda:0 and cpu, one row each
    assert max(plotly_values(alloc[0]["y"])) * BYTES_PER_MIB == pytest.approx(144241664)
    peak = [t for t in fig["data"] if t["name"] == "peak"][0]
    assert plotly_values(peak["y"])[0] * BYTES_PER_MIB == pytest.approx(144241664)
    rows = find_json(page, "memory-operators")["props"]["rowData"]
    assert [(r["device"], r["operator"], r["allocs"], r["frees"]) for r in rows] == \
        [(o["device"], o["operator"], o["allocs"], o["frees"]) for o in js["operators"]]
    assert find_json(page, "msg-memory-no-live")  # every block of the step was freed in it
    # ?device= keeps one device's rows
    page = page_json(mem_client, f"/trace/{tid}/memory", "?device=cpu")
    assert {r["device"] for r in find_json(page, "memory-operators")["props"]["rowData"]} == {"cpu"}


def test_no_memory_events_and_a_bad_device(mem_client, session_store):
    page = page_json(mem_client, f"/trace/{session_store.ids[DEFAULTS]}/memory")
    assert "profile_memory=True" in text_json(find_json(page, "msg-memory-none"))
    tid = session_store.ids[FULL]
    page = page_json(mem_client, f"/trace/{tid}/memory", "?device=gpu7")
    assert "gpu7" in text_json(find_json(page, "msg-memory-bad-device")) and find_json(page, "memory-operators")


def test_report_section(session_store):
    assert memory_section in SECTIONS
    with_mem, without = session_store.ids[FULL], session_store.ids[DEFAULTS]
    with open_store(session_store.db, read_only=True) as store:
        sec = memory_section(store, [with_mem, without], Context())
        assert memory_section(store, [without], Context()) is None
    assert sec.anchor == "memory" and sum(isinstance(b, go.Figure) for b in sec.blocks) == 1
    (table,) = [b for b in sec.blocks if isinstance(b, Table)]  # nothing live at the end: no second table
    js = _js(session_store.db, with_mem)
    assert list(table.df["allocs"]) == [o["allocs"] for o in js["operators"][:20]]
    text = " ".join(b for b in sec.blocks if isinstance(b, str))
    assert "137.56 MiB (144,241,664 B) at aten::_log_softmax_backward_data" in text


def test_the_bandwidth_section_says_no_shapes_once(session_store):
    """qwen2_train_default (torch.profiler's defaults, no shapes): the report's bandwidth section says the trace has no
    shapes in its modelled sentence and does not repeat it as a warning (HTA's public trace read it twice)."""
    from kernelscope.analysis.bandwidth import NO_SHAPES
    from kernelscope.reports.roofline import roofline_section

    with open_store(session_store.db, read_only=True) as store:
        tid = session_store.ids[DEFAULTS]
        sec = roofline_section(store, [tid], Context())
    texts = [b for b in sec.blocks if isinstance(b, str)]
    said = NO_SHAPES[0].upper() + NO_SHAPES[1:]
    assert sum(said in t or NO_SHAPES in t for t in texts) == 1, texts
