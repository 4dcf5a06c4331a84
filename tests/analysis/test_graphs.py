"""graphs analysis on the real eager/graph sample pair and the compiled sample (properties; exact counts
come from the capture script: 200 ops per step, alternating mul/add)."""

from __future__ import annotations

import pytest

from kernelscope.analysis.graphs import graphs
from kernelscope.errors import UsageError
from kernelscope.storage.store import open_store


def _id(session_store, name):
    for path, tid in session_store.ids.items():
        if name in str(path):
            return tid
    pytest.fail(f"sample {name} not present")


def test_replays_match_the_eager_twin(session_store):
    g, e = _id(session_store, "small_kernels_graph"), _id(session_store, "small_kernels_eager")
    with open_store(session_store.db, read_only=True) as s:
        d = graphs(s, g, eager=e).to_dict()
        assert d["graph_launches"] >= 1 and d["matched_share"] == 1.0
        ops = {r["attributed_to"] for r in d["graph_ops"]}
        assert ops == {"aten::mul", "aten::add"}
        # every replay kernel attributed exactly once
        assert sum(r["kernel_time_ns"] for r in d["graph_ops"]) == sum(r["kernel_time_ns"] for r in d["replays"])
        # n_ops = 200 alternating mul/add: as many mul kernels as add kernels
        k = {r["attributed_to"]: r["kernels"] for r in d["graph_ops"]}
        assert k["aten::mul"] == k["aten::add"]
        # without the twin: attributed to the replay's annotation, categorised by kernel name
        d2 = graphs(s, g).to_dict()
        assert d2["matched_kernels"] == 0
        assert all(r["source"] == "annotation" and r["category"] == "elementwise" for r in d2["graph_ops"])
        with pytest.raises(UsageError):
            graphs(s, g, eager=g)


def test_triton_regions_and_compile_overhead(session_store):
    c = _id(session_store, "compiled")
    with open_store(session_store.db, read_only=True) as s:
        d = graphs(s, c).to_dict()
        assert d["triton_kernels"] > 0 and d["trust"]["triton_kernels_without_region"] == 0
        assert all(r["region"].startswith("## Call CompiledFxGraph") for r in d["triton_regions"])
        for r in d["compile_overhead"]:
            assert r["guard_ns"] > 0 and r["compiled_calls"] == 1
            assert 0 < r["compiled_launch_ns"] < r["compiled_call_ns"]
            assert r["compiled_call_overhead_ns"] == r["compiled_call_ns"] - r["compiled_launch_ns"]
