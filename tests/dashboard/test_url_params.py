"""Hostile URL parameters (issue 11): every page, through the Flask test client, answers 200 with the page
and one sentence naming what was wrong with the URL (never 500, a blank page); the Perfetto export answers
400 with a sentence; a body over the cap gets 413 and a short message; nothing long is echoed back.

Before the fix: t0/t1 of nan, inf or 1e309 gave 500 on the Timeline and the aligned Ranks timeline, a NUL in
a trace reference 500 on every page that resolves one, a Unicode digit as op or coll 500, and the export
of a nan/inf window 500. Which values count as bad is written out here per kind, not read from
params.SPECS, so a weaker check there fails these tests."""

from __future__ import annotations

import json

import pytest

from kernelscope.dashboard import params as P
from kernelscope.dashboard.app import MAX_BODY_BYTES, route
from kernelscope.dashboard.pages import ranks, timeline

from .tree import find, find_json, text_json, texts

NUMBERS_BAD = ["nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1e309", "1e13", "abc", "1,5"]
TEXT_BAD = ["\x00", "a\x00b", "tab\there", "x" * 300]
ID_BAD = ["9" * 30, "²", "٣"]  # 30 digits (beyond int64), a superscript and an Arabic-Indic digit
INSTANCE_BAD = ["0:" + "9" * 30, "0:²", "no-colon", "0:1.5"]

# (parameter, bad values, values that must pass: the page renders them without the sentence)
CASES = {
    "t0": (NUMBERS_BAD + TEXT_BAD, ["0", "0.25", "-3", "1e3"]),
    "t1": (NUMBERS_BAD + TEXT_BAD, ["5", "12.5"]),
    "op": (ID_BAD + TEXT_BAD, ["aten::mm", "12", "nan"]),
    "coll": (INSTANCE_BAD + TEXT_BAD, ["0:1", "default_pg:3"]),
    "sel": (["gpu", "gpu:", "gpu:-1", "gpu:1.5", "kernel:3", "gpu:" + "9" * 30, "gpu:²"] + TEXT_BAD,
            ["gpu:1", "api:12", "ann:0", "cpu:7"]),
    "find": (TEXT_BAD, ["gemm", "aten::mm", "no such kernel"]),
    "sig": (["-1", "1.5", "9" * 30, "nan", "x"] + TEXT_BAD, ["0", "3"]),
    "bins": (["7", "0", "-50", "9" * 30, "nan"] + TEXT_BAD, ["50", "2000"]),
    "level": (["middle", "LEAF"] + TEXT_BAD, ["leaf", "top"]),
    "metric": (["watts", "GPU_NS", "gpu"] + TEXT_BAD, ["gpu_ns", "cpu_ns"]),
    "view": (["table"] + TEXT_BAD, ["timeline"]),
    "run": (TEXT_BAD, ["nosuchrun"]),
    "a": (TEXT_BAD, ["nosuchtrace"]),
    "b": (TEXT_BAD, ["nosuchtrace"]),
    "sweep": (TEXT_BAD, ["nosuch"]),
    "sweep_a": (TEXT_BAD, ["llama_prefill"]),
    "sweep_b": (TEXT_BAD, ["llama_prefill"]),
    "by": (TEXT_BAD, ["batch"]),
    "point": (TEXT_BAD, ["8"]),
    "trace": (TEXT_BAD, []),
    "device": (TEXT_BAD, ["cuda:0", "cpu"]),
    "phase": (TEXT_BAD, ["forward"]),
    "warmup": (["-1", "1.5", "9" * 30, "nan", "x"] + TEXT_BAD, ["0", "2"]),
}

# the parameters each page reads (every page also gets a parameter it does not read)
PAGE_PARAMS = {
    "overview": ["t0"], "launch": ["sig"], "power": ["bins"],
    "timeline": ["t0", "t1", "op", "sel", "find"], "operators": ["level", "op"], "bound": ["bins"], "bandwidth": ["sig"],
    "compare": ["a", "b", "sweep_a", "sweep_b", "by"], "sweep": ["sweep", "by", "point"],
    "ranks": ["run", "view", "t0", "t1", "coll"], "traces": ["trace"], "modules": ["metric"],
    "memory": ["device"], "steps": ["phase", "warmup"],
}


def test_every_page_parameter_is_declared_once():
    """Every parameter a page reads has one declaration; the cases above cover each of them."""
    assert set(CASES) == set(P.SPECS)
    assert {p for ps in PAGE_PARAMS.values() for p in ps} <= set(P.SPECS)


def _post(client, pathname, search):
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": pathname}],
            "changedPropIds": ["url.pathname"], "state": [{"id": "url", "property": "search", "value": search}]}
    return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")


def _path(dash_store, page):
    if page == "traces":
        return "/"
    if page in ("compare", "sweep", "ranks"):
        return f"/{page}"
    tid = dash_store.ids["ddp_rank0" if page == "timeline" else "train_step"]
    return f"/trace/{tid}/{page}"


def _extra(dash_store, page, name):
    """Other parameters a case needs to reach the code that reads ``name``."""
    if page == "ranks" and name not in ("run", "view"):
        return "&view=timeline"  # the store's one run: the aligned timeline
    if page == "timeline" and name == "op":
        return "&t0=0&t1=2"  # a window small enough to draw events and look the selection up
    if page == "compare" and name == "by":
        return "&sweep_a=llama_prefill&sweep_b=llama_prefill"
    if page == "sweep" and name == "point":
        return "&sweep=llama_prefill"
    return ""


def _sentence(tree) -> str:
    msg = find_json(tree, "msg-bad-param")
    return "" if msg is None else text_json(msg)


@pytest.mark.parametrize("page", list(PAGE_PARAMS))
def test_a_bad_value_gives_the_page_and_one_sentence(client, dash_store, page):
    from urllib.parse import quote

    for name in PAGE_PARAMS[page]:
        bad, good = CASES[name]
        for value in bad:
            search = f"?{name}={quote(value)}" + _extra(dash_store, page, name)
            r = _post(client, _path(dash_store, page), search)
            assert r.status_code == 200, (page, name, value, r.status_code)
            tree = r.get_json()["response"]["page"]["children"]
            sentence = _sentence(tree)
            assert sentence.startswith("Ignored in the URL: ") and f"({name}=" in sentence, (page, name, value)
            assert len(sentence) < 400  # a long value is cut, never echoed whole
            rest = json.dumps(tree)
            assert "x" * 100 not in rest and "\\u0000" not in rest, (page, name, value)
            if page not in ("traces", "compare", "sweep", "ranks") and name != "trace":
                assert find_json(tree, "nav-overview") is not None  # the page itself is there
        for value in good:
            search = f"?{name}={quote(value)}" + _extra(dash_store, page, name)
            r = _post(client, _path(dash_store, page), search)
            assert r.status_code == 200, (page, name, value)
            assert _sentence(r.get_json()["response"]["page"]["children"]) == "", (page, name, value)


@pytest.mark.parametrize("ref", ["\x00", "abc\x00", "%00", "ab%00cd", "a" * 5000])
def test_a_bad_trace_reference_is_one_sentence(client, dash_store, ref):
    for path, search in ((f"/trace/{ref}", ""), (f"/trace/{ref}/timeline", "?t0=nan"), ("/", f"?trace={ref}")):
        r = _post(client, path, search)
        assert r.status_code == 200, (path, search)
        tree = r.get_json()["response"]["page"]["children"]
        text = text_json(tree)
        assert "trace reference" in text or "Ignored in the URL" in text, text[:300]
        assert "a" * 100 not in json.dumps(tree)


def test_unknown_page_is_one_sentence_without_echoing_the_path(client):
    r = _post(client, "/" + "p" * 1_000_000, "")
    assert r.status_code == 200 and len(r.data) < 5000
    assert "There is no page at" in text_json(r.get_json()["response"]["page"]["children"])


def test_non_text_url_values_do_not_break_the_router(client):
    for pathname, search in ((7, None), (None, ["?t0=1"]), ({"a": 1}, {"b": 2})):
        body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
                "inputs": [{"id": "url", "property": "pathname", "value": pathname}],
                "changedPropIds": ["url.pathname"],
                "state": [{"id": "url", "property": "search", "value": search}]}
        r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
        assert r.status_code == 200, (pathname, search)


@pytest.mark.parametrize("query", ["t0=nan&t1=5", "t0=0&t1=inf", "t0=1e309", "t1=-1e309", "t0=abc",
                                   "t0=-inf&t1=nan", "t0=%00"])
def test_the_perfetto_export_refuses_a_bad_window_in_one_sentence(client, dash_store, query):
    r = client.get(f"/export/{dash_store.ids['train_step']}/perfetto.json?{query}")
    assert r.status_code == 400, (query, r.status_code)
    text = r.get_data(as_text=True)
    assert text.startswith("Cannot export: ") and text.count("\n") == 1 and "t" in text


def test_the_perfetto_export_still_exports(client, dash_store):
    r = client.get(f"/export/{dash_store.ids['train_step']}/perfetto.json?t0=0&t1=3")
    assert r.status_code == 200
    assert json.loads(r.data)["traceEvents"]


@pytest.mark.parametrize("ref", ["%00", "ab%00", "a" * 400])
def test_the_perfetto_export_refuses_a_bad_trace_reference(client, ref):
    r = client.get(f"/export/{ref}/perfetto.json")
    assert r.status_code in (400, 404), r.status_code
    assert r.get_data(as_text=True).startswith("Cannot export: ") and len(r.data) < 300


def test_a_body_over_the_cap_gets_413_and_a_short_message(client):
    big = b'{"output": "page.children", "inputs": [{"value": "' + b"x" * (10 * 1024 * 1024) + b'"}]}'
    r = client.post("/_dash-update-component", data=big, content_type="application/json")
    assert r.status_code == 413
    assert len(r.data) < 300 and b"xxxx" not in r.data
    assert r.get_data(as_text=True).startswith("kernelscope: the request body is larger than")
    assert MAX_BODY_BYTES < 10 * 1024 * 1024


def test_callbacks_read_the_url_through_the_same_checks(dash_store):
    """The Timeline's zoom/click callback and the Ranks zoom callback get the browser's URL as it is:
    a bad t0 or op there is dropped (before: 500 on the next zoom)."""
    tid = dash_store.ids["ddp_rank0"]
    out = timeline.update(dash_store.db, tid, "?t0=nan&t1=inf&op=%C2%B2",
                          relayout={"xaxis.range[0]": 0.0, "xaxis.range[1]": 2.0})
    assert out is not None and out[3] in ("events", "binned")
    assert "t0=0.000000" in out[-1] and "op=" not in out[-1]
    out = ranks.update_timeline(dash_store.db, "?view=timeline&t0=1e309&coll=0:%C2%B2",
                                {"xaxis.range[0]": 0.0, "xaxis.range[1]": 5.0})
    assert out is not None and "coll" not in out[-1]


def test_route_puts_the_sentence_above_the_page(dash_store):
    tid = dash_store.ids["train_step"]
    page = route(dash_store.db, f"/trace/{tid}/bound", "?bins=7&t0=nan")
    msg = find(page, "msg-bad-param")
    assert msg is not None
    text = texts(msg)
    assert "the bin count (bins='7') is not one of 50, 100, 200, 500, 1000, 2000" in text
    assert "the window start t0 (t0='nan') is not a finite number of ms" in text
    assert find(page, "bound-kpis") is not None or find(page, "bound-page") is not None


def test_params_unit():
    p = P.url_params("?t0=0.5&t1=nan&op=12&op=aten%3A%3Amm&token=secret&zzz=1&sig=")
    assert dict(p) == {"t0": "0.5", "op": "aten::mm"}  # last op wins; unknown, empty and token dropped
    assert len(p.problems) == 1 and "t1" in p.problems[0]
    assert P.ms(p, "t0") == 0.5 and P.ms(p, "t1") is None
    assert P.url_params("?" + "t0=1&" * 5000).problems  # a query string too long is not read at all
    assert P.url_params(None) == {} and P.url_params(17) == {}
    assert P.shown("x" * 500).endswith("…'") and len(P.shown("x" * 500)) == 60
    assert P.shown("a\x00b") == "'a\\x00b'"
