"""A callback that raises on a request nobody meant (a crafted click, a value the page never sends) answers 200
with one sentence above the page and leaves the page as it was: never HTTP 500 and a blank page (issue 11)."""

from __future__ import annotations

import json

from kernelscope.dashboard.app import ERROR_ID, create_app


def _timeline_dep(client):
    return next(d for d in client.get("/_dash-dependencies").get_json() if "timeline-graph.figure" in d["output"])


def test_a_crafted_click_gets_a_sentence_not_a_500(dash_store, caplog):
    client = create_app(dash_store.db).server.test_client()
    assert client.get("/").status_code == 200
    dep = _timeline_dep(client)
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1].split("@")[0]}
               for o in dep["output"].strip(".").split("...")]
    click = {"points": [{"customdata": 1e999, "x": 1e999, "curveNumber": 0, "pointNumber": 0}]}
    body = {"output": dep["output"], "outputs": outputs,
            "inputs": [{**i, "value": click if i["property"] == "clickData" else None} for i in dep["inputs"]],
            "state": [{**s, "value": f"/trace/{dash_store.ids['train_step']}/timeline" if s["property"] == "pathname"
                       else None} for s in dep["state"]],
            "changedPropIds": ["timeline-graph.clickData"]}
    r = client.post("/_dash-update-component", data=json.dumps(body).replace("Infinity", "1e999"),
                    content_type="application/json")
    assert r.status_code == 200, r.data[:300]
    doc = r.get_json()
    banner = json.dumps(doc["sideUpdate"][ERROR_ID])
    assert "could not be drawn from the request" in banner and "Error" in banner
    assert not any(v for v in doc.get("response", {}).values())  # the outputs keep their last state
    assert "a dashboard callback failed" in caplog.text  # the traceback goes to the server log
