"""Each page through the Flask test client: the index, the layout, and the router and row-click callbacks
through /_dash-update-component as the browser calls them."""

from __future__ import annotations

import json

from kernelscope.analysis.registry import get_analysis
from kernelscope.dashboard.app import create_app
from kernelscope.storage.store import open_store

from .tree import find_json as _find
from .tree import plotly_values as _values


def _deps(client) -> list[dict]:
    r = client.get("/_dash-dependencies")
    assert r.status_code == 200
    return r.get_json()


def _call(client, output: str, inputs: list[dict], state: list[dict] = ()) -> dict:
    dep = next(d for d in _deps(client) if d["output"] == output)
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]}
               for o in output.strip(".").split("...")]
    body = {"output": output, "outputs": outputs if len(outputs) > 1 else outputs[0], "inputs": inputs,
            "changedPropIds": [f"{i['id']}.{i['property']}" for i in inputs[:1]], "state": list(state)}
    assert [f"{i['id']}.{i['property']}" for i in dep["inputs"]] == \
        [f"{i['id']}.{i['property']}" for i in inputs]
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert r.status_code in (200, 204), r.data[:500]
    return r.get_json() if r.status_code == 200 else {}


def _page(client, pathname, search=""):
    resp = _call(client, "page.children", [{"id": "url", "property": "pathname", "value": pathname}],
                 [{"id": "url", "property": "search", "value": search}])
    return resp["response"]["page"]["children"]




def test_index_and_layout(client, dash_store):
    r = client.get("/")
    assert r.status_code == 200 and b"<title>kernelscope</title>" in r.data
    assert client.get("/trace/anything").status_code == 200  # deep links serve the same app shell
    layout = client.get("/_dash-layout").get_json()
    assert _find(layout, "url")["type"] == "Location"
    assert _find(layout, "page") is not None
    assert str(dash_store.db) in json.dumps(layout)


def test_traces_page_over_http(client, dash_store):
    table = _find(_page(client, "/"), "traces-table")
    assert sorted(r["id"] for r in table["props"]["rowData"]) == sorted(dash_store.ids.values())
    assert table["props"]["defaultColDef"]["floatingFilter"] is True


def test_row_click_callback_sets_the_url(client, dash_store):
    tid = dash_store.ids["probe_train"]
    resp = _call(client, "..url.pathname...url.search..",
                 [{"id": "traces-table", "property": "cellClicked",
                   "value": {"rowIndex": 2, "colId": "trace_id", "value": tid, "rowId": tid}}])
    assert resp["response"]["url"] == {"pathname": f"/trace/{tid}", "search": ""}


def test_overview_over_http_matches_summary(client, dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    page = _page(client, f"/trace/{tid}")
    with open_store(dash_store.db, read_only=True) as store:
        s = get_analysis("summary").fn(store, tid).scalars
    for key in ("busy_ns", "gpu_span_ns", "idle_ns", "kernel_time_ns", "kernels", "launches"):
        assert _find(page, f"kpi-{key}")["props"]["data-value"] == str(s[key])
    fig = _find(page, "busy-figure")["props"]["figure"]
    assert len(fig["data"]) == 1
    x, y = _values(fig["data"][0]["x"]), _values(fig["data"][0]["y"])
    assert 1000 < len(x) == len(y) <= 2000  # a 29.6 ms span in <= 2000 bins: ~15 us each
    assert x == sorted(x) and x[0] == 0.0 and x[-1] < s["gpu_span_ns"] / 1e6
    assert 0 < max(y) <= 100 and min(y) >= 0
    assert len(json.dumps(page)) < 2_000_000  # response size stays small (no per-kernel shapes)


def test_messages_over_http(client, dash_store):
    assert _find(_page(client, f"/trace/{dash_store.ids['cpu_only']}"), "msg-no-gpu") is not None
    assert _find(_page(client, "/", "?trace=doesnotexist"), "msg-unknown-trace") is not None


def test_empty_store_over_http(empty_db):
    c = create_app(empty_db).server.test_client()
    assert _find(_page(c, "/"), "msg-empty-store") is not None
