"""Operators page: the table's numbers against the analyses' JSON and a hand computation, CPU time against
the stored rows, the selection callback as a plain function and through the Flask test client, the
Timeline link, and the empty cases."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from kernelscope.analysis.registry import get_analysis
from kernelscope.dashboard.app import create_app, route
from kernelscope.dashboard.pages import operators as page

from .tree import find, ns_columns, texts


def _table(result, name):
    """An analysis's table as its JSON output has it (the CLI's --format json), by name."""
    doc = json.loads(result.to_json())
    return {r["name"]: r for r in doc[name]}


def test_leaf_table_equals_the_analyses(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    df, _ = page.operator_table(store, tid, "leaf")
    per = _table(get_analysis("launch").fn(store, tid), "per_leaf_op")
    bw = get_analysis("bandwidth").fn(store, tid)
    sigs = bw.tables["per_signature"]
    rows = {r["name"]: r for r in df.to_dict("records")}
    kinds = {f: k for f, _, k in page.COLUMNS}
    assert kinds["cpu_ns"] == kinds["gpu_union_ns"] == kinds["tklqt_ns"] == "ms"  # ns held, ms shown
    for name, p in per.items():
        if name is None:
            continue
        r = rows[name]
        assert r["kernels"] == p["kernels"] and r["calls_gpu"] == p["calls"]
        assert r["tklqt_ns"] == p["tklqt_ns"] and r["gpu_union_ns"] == p["gpu_union_ns"]  # shown in ms
    # one signature: GB/s and % of peak are the analysis's own values
    one = sigs.groupby("name").filter(lambda g: len(g) == 1 and g["bytes"].notna().all())
    assert len(one) >= 3
    for s in one.itertuples():
        pct = s.pct_peak_flops if s.bound == "compute" else s.pct_peak_bw
        assert rows[s.name]["gbps"] == round(s.achieved_gbps, 1) and rows[s.name]["pct_peak"] == round(pct, 1)
    # aten::mm has five GEMM shapes: by hand, FLOPs add up and GB/s = summed bytes / summed GPU time
    mm = sigs[sigs["name"] == "aten::mm"]
    assert len(mm) == 5 and mm["bytes"].notna().all()
    assert rows["aten::mm"]["gflop"] == round(int(mm["flops"].sum()) / 1e9, 3)
    assert rows["aten::mm"]["gbps"] == round(int(mm["bytes"].sum()) / int(mm["gpu_ns"].sum()), 1)
    pct = [f if b == "compute" else m for f, m, b in zip(mm["pct_peak_flops"], mm["pct_peak_bw"], mm["bound"])]
    want = sum(p * g for p, g in zip(pct, mm["gpu_ns"])) / int(mm["gpu_ns"].sum())
    assert rows["aten::mm"]["pct_peak"] == round(want, 1)


def test_cpu_time_equals_the_rows(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    ops = store.query("SELECT name, depth, dur_ns FROM cpu_ops WHERE trace_id = $t", {"t": tid})
    leaf, _ = page.operator_table(store, tid, "leaf")
    top, _ = page.operator_table(store, tid, "top")
    for name in ("aten::mm", "aten::linear", "aten::mul"):
        mine = ops[ops["name"] == name]
        r = leaf[leaf["name"] == name].iloc[0]
        assert r["count"] == len(mine) and r["cpu_ns"] == int(mine["dur_ns"].sum())
    lin = ops[(ops["name"] == "aten::linear") & (ops["depth"] == 0)]
    r = top[top["name"] == "aten::linear"].iloc[0]
    assert r["count"] == len(lin) and r["cpu_ns"] == int(lin["dur_ns"].sum())
    per = _table(get_analysis("launch").fn(store, tid), "per_op")
    assert r["tklqt_ns"] == per["aten::linear"]["tklqt_ns"]
    assert top["gbps"].isna().all()  # modelled per leaf operator only


def test_select_lists_kernels_and_links_the_timeline(dash_store, store):
    tid = dash_store.ids["llama_prefill_b8"]
    children, search = page.select(dash_store.db, tid, {"rowIndex": 0, "colId": "name", "rowId": "aten::mm"},
                                   "leaf", "?level=leaf")
    assert parse_qs(search.lstrip("?")) == {"level": ["leaf"], "op": ["aten::mm"]}
    div = page.html.Div(children)
    link = find(div, "operators-timeline-link")
    assert link.href == f"/trace/{tid}/timeline?op=aten%3A%3Amm"
    kt = find(div, "operator-kernels")
    per = _table(get_analysis("launch").fn(store, tid), "per_leaf_op")
    assert sum(r["count"] for r in kt.rowData if r["kind"] == "kernel") == per["aten::mm"]["kernels"]
    # totals by hand from the stored rows
    want = store.query("SELECT sum(dur_ns) AS d FROM gpu_activities WHERE trace_id = $t AND leaf_op_id IN "
                       "(SELECT op_id FROM cpu_ops WHERE trace_id = $t AND name = 'aten::mm')", {"t": tid})
    assert sum(r["total_ns"] for r in kt.rowData) == int(want["d"].iloc[0])
    assert ns_columns(kt) == {"total_ns": (1_000_000, 3), "mean_ns": (1000, 2)}  # shown in ms and µs
    assert page.select(dash_store.db, tid, None, "leaf", "") is None


def test_layout_restores_the_selection(dash_store):
    tid = dash_store.ids["llama_prefill_b8"]
    tree = route(dash_store.db, f"/trace/{tid}/operators", "?op=aten::mm")
    assert find(tree, "operators-table").selectedRows == {"ids": ["aten::mm"]}
    assert "Kernels of aten::mm" in texts(find(tree, "operators-detail"))
    top = route(dash_store.db, f"/trace/{tid}/operators", "?level=top")
    assert find(top, "operators-level").value == "top"
    assert "aten::linear" in [r["name"] for r in find(top, "operators-table").rowData]


def test_relevel(dash_store):
    tid = dash_store.ids["llama_prefill_b8"]
    assert page.relevel(dash_store.db, tid, "leaf", "") is None  # already shown
    children, search = page.relevel(dash_store.db, tid, "top", "?op=aten::linear")
    assert parse_qs(search.lstrip("?")) == {"op": ["aten::linear"], "level": ["top"]}
    assert find(page.html.Div(children), "operators-table").selectedRows == {"ids": ["aten::linear"]}


def test_cpu_only_and_empty_messages(dash_store, store):
    cpu = route(dash_store.db, f"/trace/{dash_store.ids['cpu_only']}/operators", "")
    assert find(cpu, "msg-no-gpu") is not None
    assert "no CPU operators" not in texts(cpu)
    tid = dash_store.ids["llama_prefill_b8"]
    tree = page.html.Div(page.detail(store, tid, "aten::view", "leaf"))
    assert find(tree, "msg-op-no-kernels") is not None


def test_select_over_http(dash_store):
    client = create_app(dash_store.db).server.test_client()
    tid = dash_store.ids["llama_prefill_b1"]
    deps = client.get("/_dash-dependencies").get_json()
    out = next(d["output"] for d in deps if "operators-detail.children" in d["output"])
    body = {"output": out, "outputs": [{"id": "operators-detail", "property": "children"},
                                       {"id": "url", "property": "search"}],
            "inputs": [{"id": "operators-table", "property": "cellClicked",
                        "value": {"rowIndex": 0, "colId": "name", "value": "aten::mm", "rowId": "aten::mm"}}],
            "state": [{"id": "operators-level", "property": "value", "value": "leaf"},
                      {"id": "operators-trace", "property": "data", "value": tid},
                      {"id": "url", "property": "search", "value": ""}],
            "changedPropIds": ["operators-table.cellClicked"]}
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200
    resp = r.get_json()["response"]
    assert resp["url"]["search"] == "?op=aten%3A%3Amm"
    assert "operator-kernels" in json.dumps(resp["operators-detail"])
