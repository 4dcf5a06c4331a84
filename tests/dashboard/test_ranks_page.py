"""Ranks page: layout over a store of two runs (the 2-GPU fixture and a hand-built 2 ms straggler pair):
breakdown bars that add up to each rank's GPU span, the skew heat map's waits, the straggler table,
the run list, and the messages for no run / an unknown run; the router serves /ranks?run=."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import ddp2_copy

from kernelscope.analysis.comm import comm
from kernelscope.dashboard.pages import ranks as page
from kernelscope.reports import ranks as rr
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from storage.ranks_build import straggler_pair  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    path = ddp2_copy(tmp / "s.duckdb")  # sample_traces/ddp2 ingested (ingest_paths) once per session
    with open_store(path) as store:
        ingest_paths(store, [straggler_pair(tmp / "straggle")])
    return path


def _find(tree, comp_id):
    if hasattr(tree, "to_plotly_json"):
        tree = tree.to_plotly_json()
    if isinstance(tree, dict):
        props = tree.get("props", {})
        if props.get("id") == comp_id:
            return tree
        return _find(props.get("children"), comp_id)
    if isinstance(tree, (list, tuple)):
        for t in tree:
            hit = _find(t, comp_id)
            if hit is not None:
                return hit
    return None


def _json(component):
    return json.loads(json.dumps(component.to_plotly_json(), default=lambda o: o.to_plotly_json()))


def _run(store, name):
    return store.con.execute("SELECT run_id FROM runs WHERE name = ?", [name]).fetchone()[0]


def test_breakdown_adds_up_to_span(db):
    with open_store(db, read_only=True) as store:
        run = _run(store, "ddp2")
        tree = _json(page.layout(store, {"run": run}))
        want = comm(store, run=run).tables["ranks"]
    fig = _find(tree, "ranks-breakdown")["props"]["figure"]
    names = [t["name"] for t in fig["data"]]
    assert names == ["compute", "exposed communication", "exposed memcpy", "idle"]
    for i, r in enumerate(want.itertuples()):
        total = sum(t["x"][i] if isinstance(t["x"], list) else _decode(t["x"])[i] for t in fig["data"])
        assert total == pytest.approx(r.gpu_span_ns / 1e6, rel=1e-9)
    assert _find(tree, "ranks-kpi-3")["props"]["children"][1]["props"]["children"] == "rank 1"


def _decode(arr):
    import base64

    import numpy as np
    return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=arr["dtype"]).tolist()


def test_straggler_heatmap_and_table(db):
    with open_store(db, read_only=True) as store:
        tree = _json(page.layout(store, {"run": _run(store, "straggle")}))
    heat = _find(tree, "ranks-skew")["props"]["figure"]["data"][0]
    z = heat["z"] if isinstance(heat["z"], list) else heat["z"]
    assert heat["y"] == ["rank 0", "rank 1"] and heat["x"] == ["0:0", "0:1"]
    flat = [v for row in (z if isinstance(z, list) else []) for v in row] if isinstance(z, list) else None
    if flat is None:  # typed array, row-major
        flat = _decode(z)
    assert flat == [0.0, 2.0, 0.0, 0.0]  # rank 0 waited 2 ms at the second allreduce; rank 1 never
    rows = _find(tree, "ranks-straggler-table")["props"]["rowData"]
    assert rows[0]["instance"] == "0:1" and rows[0]["straggler"] == 1
    assert rows[0]["start skew ms"] == pytest.approx(2.0) and rows[1]["start skew ms"] == 0


def test_run_list_and_messages(db, tmp_path):
    with open_store(db, read_only=True) as store:
        tree = _json(page.layout(store, {}))
        assert len(_find(tree, "ranks-run-list")["props"]["children"]) == 2
        bad = _json(page.layout(store, {"run": "nope"}))
        assert "no single run matches 'nope'" in json.dumps(_find(bad, "msg-unknown-run"))
    with open_store(tmp_path / "e.duckdb") as empty:
        assert _find(_json(page.layout(empty, {})), "msg-no-runs") is not None
    with open_store(db, read_only=True) as store:
        st = rr.straggler_table(comm(store, run=_run(store, "ddp2")).tables["collectives"])
        assert list(st["start skew ms"]) == sorted(st["start skew ms"], reverse=True)


def test_router_serves_the_page(db):
    from kernelscope.dashboard.app import STORE_PAGES, create_app

    if "ranks" not in STORE_PAGES:
        pytest.fail("dashboard/app.py lacks the STORE_PAGES entry 'ranks'")
    client = create_app(db).server.test_client()
    deps = client.get("/_dash-dependencies").get_json()
    dep = next(d for d in deps if d["output"] == "page.children")
    with open_store(db, read_only=True) as store:
        run = _run(store, "straggle")
    inputs = [{"id": "url", "property": "pathname", "value": "/ranks"}]
    state = [{"id": "url", "property": "search", "value": f"?run={run}"}]
    assert [i["id"] for i in dep["inputs"]] == ["url"]
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"}, "inputs": inputs,
            "changedPropIds": ["url.pathname"], "state": state}
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200
    tree = r.get_json()["response"]["page"]["children"]
    assert _find(tree, "ranks-skew") is not None and _find(tree, "ranks-straggler-table") is not None
