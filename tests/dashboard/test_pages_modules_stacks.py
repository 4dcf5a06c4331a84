"""The Modules and Stacks pages through the Flask test client (callbacks as the browser posts them), over the
session store of sample files: headline numbers equal tests/reference_modules.py's raw-JSON attribution, the
icicle and the tree table hold every instance path with its GPU time, the metric radio redraws the icicle and
writes ``?metric=`` (a bad value is named above the page), the flame graphs and the source-line table are drawn,
and a trace recorded with torch.profiler's defaults gets the sentence saying how to record modules / stacks."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES
from reference_modules import reference

from .tree import props_by_id

FULL = SAMPLES / "qwen2_train_full" / "trace.json.gz"
DEFAULT = SAMPLES / "qwen2_train_default" / "trace.json.gz"


@pytest.fixture(scope="module")
def client(session_store):
    from kernelscope.dashboard.app import create_app

    return create_app(session_store.db).server.test_client()


def _post(client, body):
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200, r.data[:500]
    assert b"msg-callback-error" not in r.data and b"Traceback" not in r.data
    return r.get_json()["response"]


def _page(client, path, search=""):
    return _post(client, {"output": "page.children", "outputs": {"id": "page", "property": "children"},
                          "inputs": [{"id": "url", "property": "pathname", "value": path}],
                          "changedPropIds": ["url.pathname"],
                          "state": [{"id": "url", "property": "search", "value": search}]})["page"]["children"]


def test_modules_page(client, session_store):
    tid = session_store.ids[FULL]
    ref = reference(str(FULL))
    p = props_by_id(_page(client, f"/trace/{tid}/modules"))
    assert p["kpi-module_kernel_ns"]["data-value"] == str(ref["module_kernel_ns"])
    rows = {r["id"]: r for r in p["modules-tree"]["rowData"]}
    assert set(rows) == set(ref["modules"])
    assert all(r["gpu_ns"] == ref["modules"][k]["gpu_fwd_ns"] + ref["modules"][k]["gpu_bwd_ns"]
               for k, r in rows.items())
    assert rows["Qwen2ForCausalLM_0/Qwen2Model_0/Qwen2DecoderLayer_1"]["label"].strip() == "Qwen2DecoderLayer_1"
    icicle = p["modules-icicle"]["figure"]["data"][0]
    assert dict(zip(icicle["ids"], icicle["values"])) == {k: r["gpu_ns"] for k, r in rows.items()}
    assert p["modules-metric"]["value"] == "gpu_ns"

    dep = next(d for d in client.get("/_dash-dependencies").get_json()
               if any(i["id"] == "modules-metric" for i in d["inputs"]))
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in dep["output"].strip(".").split("...")]
    out = _post(client, {"output": dep["output"], "outputs": outputs,
                         "inputs": [{"id": "modules-metric", "property": "value", "value": "gpu_bwd_ns"}],
                         "state": [{"id": "modules-trace", "property": "data", "value": tid}],
                         "changedPropIds": ["modules-metric.value"]})
    fig = out["modules-icicle"]["figure"]["data"][0]
    assert dict(zip(fig["ids"], fig["values"])) == {k: ref["modules"][k]["gpu_bwd_ns"] for k in rows}
    assert out["url"]["search"] == "?metric=gpu_bwd_ns"

    p = props_by_id(_page(client, f"/trace/{tid}/modules", "?metric=cpu_ns"))
    assert p["modules-metric"]["value"] == "cpu_ns"
    bad = json.dumps(_page(client, f"/trace/{tid}/modules", "?metric=watts"))
    assert "msg-bad-param" in bad and "the module metric" in bad and "modules-icicle" in bad


def test_stacks_page(client, session_store):
    tid = session_store.ids[FULL]
    ref = reference(str(FULL))
    p = props_by_id(_page(client, f"/trace/{tid}/stacks"))
    assert p["kpi-stack_kernel_ns"]["data-value"] == str(ref["stack_kernel_ns"])
    rows = {r["id"]: r for r in p["stacks-lines"]["rowData"]}
    linear = rows["<built-in function linear>"]
    assert (linear["gpu_ns"], linear["kernels"]) == (ref["lines"]["<built-in function linear>"]["gpu_ns"],
                                                      ref["lines"]["<built-in function linear>"]["kernels"])
    src = next(r for r in rows.values() if r["source"].startswith("transformers/models/qwen2/modeling_qwen2.py:"))
    assert src["gpu_ns"] == ref["lines"][src["id"]]["gpu_ns"]
    for fid in ("stacks-gpu-flame", "stacks-cpu-flame"):
        trace = p[fid]["figure"]["data"][0]
        assert trace["type"] == "icicle" and len(trace["ids"]) > 50
    gpu = p["stacks-gpu-flame"]["figure"]["data"][0]
    roots = [v for v, parent in zip(gpu["values"], gpu["parents"]) if parent == ""]
    assert sum(roots) == ref["stack_kernel_ns"]


def test_pages_of_a_trace_without_modules_or_stacks(client, session_store):
    tid = session_store.ids[DEFAULT]
    mods = json.dumps(_page(client, f"/trace/{tid}/modules"))
    assert "msg-no-modules" in mods and "with_modules=True" in mods
    st = json.dumps(_page(client, f"/trace/{tid}/stacks"))
    assert "msg-no-stacks" in st and "with_stack=True" in st


def test_stacks_of_a_cpu_only_trace_say_there_is_no_gpu_flame(tmp_path):
    """A CPU-only trace recorded with with_stack (transformers' T5 on a CPU): the Stacks page drew an empty GPU
    flame graph with axes from -1 to 6; it now says why there is none and draws the CPU one, and the report's
    Call stacks section says the same in words."""
    import edge_traces
    import stores

    from kernelscope.dashboard.app import route
    from kernelscope.reports.report import build
    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.store import open_store

    from .tree import find, texts

    db = stores.empty(tmp_path / "s.duckdb")
    with open_store(db) as store:
        (res,) = ingest_paths(store, [edge_traces.python_functions(tmp_path)], progress=False)
    page = route(db, f"/trace/{res.trace_id}/stacks", "")
    assert find(page, "stacks-gpu-flame") is None and find(page, "stacks-cpu-flame") is not None
    assert texts(find(page, "msg-stacks-no-kernels")).startswith("The trace has no GPU kernels (a CPU-only run)")
    with open_store(db, read_only=True) as store:
        (section,) = [s for s in build(store, [res.trace_id]) if s.anchor == "stacks"]
    assert any(isinstance(b, str) and "has no GPU kernels (a CPU-only run)" in b for b in section.blocks)
    assert len([b for b in section.blocks if type(b).__name__ == "Figure"]) == 1  # the CPU flame graph alone


def test_modules_of_a_cpu_only_trace_are_sized_by_cpu_time(tmp_path):
    """transformers' BERT trained on a CPU under `kernelscope profile --modules --steps 3`: the Modules page sized
    the icicle by GPU kernel time (0 everywhere), drew an empty figure with axes from -1 to 6, and said "0.000 ms
    of 0.000 ms kernel time ran in a module". A trace without kernels is now sized by the forward calls' CPU time
    (the URL's metric still wins), the sentence says why, and the report's icicle is the CPU one."""
    import stores
    from edge_traces import HEAD, _base_tail, _trace, _write

    from kernelscope.dashboard.app import route
    from kernelscope.reports.report import build
    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.store import open_store

    from .tree import find, texts

    def py(name, ts, dur, pid_, parent):
        return json.dumps({"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1, "ts": ts,
                           "dur": dur, "args": {"Python parent id": parent, "Python id": pid_}})
    ev = [py("train.py(9): <module>", 1, 300, 1, None),
          py("nn.Module: Sequential_0", 10, 200, 2, 1), py("nn.Module: Linear_0", 20, 120, 3, 2),
          py("nn.Module: ReLU_0", 150, 30, 4, 2),
          '{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 25.0, "dur": 100.0, '
          '"args": {"External id": 5}}']
    db = stores.empty(tmp_path / "s.duckdb")
    with open_store(db) as store:
        (res,) = ingest_paths(store, [_write(tmp_path, "cpu_modules", _trace(ev, head=HEAD, tail=_base_tail()))],
                              progress=False)
    tid = res.trace_id
    page = route(db, f"/trace/{tid}/modules", "")
    (icicle,) = find(page, "modules-icicle").figure.data
    values = dict(zip(icicle.ids, icicle.values))
    assert values == {"Sequential_0": 200_000, "Sequential_0/Linear_0": 120_000, "Sequential_0/ReLU_0": 30_000}
    assert find(page, "modules-metric").value == "cpu_ns"
    assert "the trace has no GPU kernels (a CPU-only run): the modules are sized by the CPU time" in \
        texts(find(page, "modules-sentence"))
    gpu = find(route(db, f"/trace/{tid}/modules", "?metric=gpu_ns"), "modules-icicle").figure
    assert not gpu.data and "No GPU kernel time" in gpu.layout.annotations[0].text  # asked for: GPU, said empty
    with open_store(db, read_only=True) as store:
        (section,) = [s for s in build(store, [tid]) if s.anchor == "modules"]
    (figure,) = [b for b in section.blocks if type(b).__name__ == "Figure"]
    assert figure.layout.title.text.lower().endswith("modules by cpu time of the forward calls")
