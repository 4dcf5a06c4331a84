"""The conformance matrix (issue 11): every registered analysis, report, diff, export, dashboard page and
dashboard callback over every trace of the corpus (tests/corpus.py). Each either works or says in one sentence
why it cannot (a one-line ``kernelscope: ...`` and a non-zero exit; a message on the page); none prints a
traceback or answers 500. Summaries obey invariants.

A new analysis joins by being registered (analysis/registry.py), a new page by being routed
(dashboard/app.py TRACE_PAGES / STORE_PAGES), a new trace variant by being added to corpus.VARIANTS.

The corpus is ingested once per session into a template store; commands run in-process through click's runner
against that store (read-only commands) or a copy of it (export).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import corpus
import pytest
import stores
from click.testing import CliRunner
from dashboard.tree import props_by_id

from kernelscope.analysis.registry import ANALYSES
from kernelscope.cli import cli
from kernelscope.errors import KernelscopeError

_LINE = re.compile(r"^(ingested|skipped)\s+(\S+)\s+", re.M)
SINGLE = sorted(n for n, a in ANALYSES.items() if not a.multi)
EXIT_CODES = {c.exit_code for c in (KernelscopeError, *KernelscopeError.__subclasses__())} | {
    s.exit_code for c in KernelscopeError.__subclasses__() for s in c.__subclasses__()}


@dataclass(frozen=True)
class Ingested:
    """What `kernelscope ingest` of one variant said (of click's Result)."""
    stdout: str
    stderr: str
    exit_code: int


@dataclass
class Corpus:
    db: Path
    ids: dict[str, list[str]] = field(default_factory=dict)  # variant -> trace ids
    ingest: dict[str, Ingested] = field(default_factory=dict)  # variant -> what its ingest said


def _ingest_corpus(db: Path) -> tuple[dict, dict]:
    runner = CliRunner()
    ids, said = {}, {}
    for v in corpus.VARIANTS:
        folder = db.parent / "src" / v.name
        folder.mkdir(parents=True)
        target = v.build(folder)
        res = runner.invoke(cli, ["ingest", str(target), *v.ingest_args, "--db", str(db)])
        said[v.name] = Ingested(res.stdout, res.stderr, res.exit_code)
        ids[v.name] = [m.group(2) for m in _LINE.finditer(res.stdout)]
    return ids, said


@pytest.fixture(scope="session")
def conf() -> Corpus:
    """The corpus ingested once per session (tests/stores.py); this process's copy of the store."""
    db, (ids, said) = stores.template("corpus", _ingest_corpus)
    return Corpus(db=db, ids=dict(ids), ingest=dict(said))


def _ok_or_one_line(res, what: str) -> None:
    """Exit 0, or a user error: one `kernelscope: ` line on stderr and a KernelscopeError exit code."""
    text = (res.stdout or "") + (res.stderr or "")
    assert "Traceback" not in text, f"{what}: {text[-2000:]}"
    if res.exit_code == 0:
        return
    assert isinstance(res.exception, SystemExit) or res.exception is None, \
        f"{what}: {type(res.exception).__name__}: {res.exception}"
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("kernelscope: "), f"{what}: {res.stderr!r}"
    assert res.exit_code in EXIT_CODES, f"{what}: exit {res.exit_code}"


def _first(conf: Corpus, name: str) -> str:
    ids = conf.ids.get(name) or []
    if not ids:
        pytest.fail(f"{name} did not ingest: {conf.ingest[name].stderr or conf.ingest[name].stdout}")
    return ids[0]


def _run(conf: Corpus, *args: str):
    return CliRunner().invoke(cli, [*args, "--db", str(conf.db)])


NAMES = [v.name for v in corpus.VARIANTS]


@pytest.mark.parametrize("name", NAMES)
def test_every_variant_ingests(conf, name):
    res = conf.ingest[name]
    text = res.stdout + res.stderr
    assert "Traceback" not in text, text[-2000:]
    assert res.exit_code == 0, f"{name}: {res.stderr}"
    assert conf.ids[name], res.stdout


@pytest.mark.parametrize("name", NAMES)
def test_summary_invariants(conf, name):
    tid = _first(conf, name)
    res = _run(conf, "summary", tid, "--format", "json")
    _ok_or_one_line(res, f"summary {name}")
    assert res.exit_code == 0
    s = json.loads(res.stdout)
    for key, value in s.items():
        if key.endswith("_ns") and value is not None:
            assert value >= 0, f"{name}: {key} = {value}"
    for key in ("kernels", "memcpys", "memsets", "launches", "cpu_ops"):
        assert s[key] is None or s[key] >= 0
    for d in s["devices"]:  # several devices: the top-level busy/idle are sums over devices, the span overall
        if d.get("busy_ns") is not None and d.get("gpu_span_ns") is not None:
            assert 0 <= d["busy_ns"] <= d["gpu_span_ns"], f"{name}: device {d}"
            assert d["idle_ns"] == d["gpu_span_ns"] - d["busy_ns"], f"{name}: device {d}"
    if s["devices_count"] == 1 and s.get("gpu_span_ns") is not None:
        assert s["busy_ns"] <= s["gpu_span_ns"] and s["idle_ns"] == s["gpu_span_ns"] - s["busy_ns"]
    if s.get("latency_ns") is not None and s.get("gpu_span_ns") is not None and s["devices_count"] == 1:
        assert s["exposed_host_ns"] is None or s["exposed_host_ns"] >= 0
    if s.get("kernel_time_ns") is not None and s.get("busy_ns") is not None and s["kernels"]:
        assert s["kernel_time_ns"] >= 0
    trust = s["trust"]
    for key, value in trust.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key.endswith(("_ns", "kernels")):
            assert value >= 0, f"{name}: trust.{key} = {value}"
    matched = (trust.get("kernels_with_launch") or {}).get("count")
    if matched is not None:
        assert matched <= s["kernels"]


@pytest.mark.parametrize("name", NAMES)
def test_every_analysis_works_or_says_why(conf, name, capsys):
    """Every registered single-trace analysis, computed once in-process and rendered in every CLI format (the
    CLI path itself is exercised on three variants below). Computed through the process's result cache, as the
    report and the dashboard compute them: this is the variant's first check that runs them (the matrix runs
    variant by variant), and its report and pages then reuse these Results."""
    from kernelscope.analysis import cache
    from kernelscope.cli.render import emit_result as _emit_result
    from kernelscope.storage.store import open_store

    tid = _first(conf, name)
    with open_store(conf.db, read_only=True) as store:
        for analysis in SINGLE:
            try:
                result = cache.analysis(store, analysis, tid)
            except KernelscopeError as exc:  # says why it cannot, in one sentence
                assert str(exc).strip() and "\n" not in str(exc).strip(), f"{analysis} {name}: {exc!r}"
                continue
            doc = json.loads(result.to_json())  # strict JSON: NaN/Infinity would not parse back as numbers
            assert doc and "NaN" not in json.dumps(doc), f"{analysis} {name}"
            for fmt in ("table", "csv"):
                _emit_result(result, fmt, None)
            for table in result.tables:
                _emit_result(result, "csv", table)
            out = capsys.readouterr()
            assert "Traceback" not in out.out + out.err


@pytest.mark.parametrize("analysis", SINGLE)
@pytest.mark.parametrize("name", ["empty", "cpu_only", "qwen2_defaults"])
def test_analyze_command(conf, name, analysis):
    tid = _first(conf, name)
    for fmt in ("json", "table"):
        _ok_or_one_line(_run(conf, "analyze", analysis, tid, "--format", fmt), f"analyze {analysis} {name} {fmt}")


@pytest.mark.parametrize("fmt", ["html", "md"])
@pytest.mark.parametrize("name", NAMES)
def test_report(conf, name, fmt, tmp_path):
    tid = _first(conf, name)
    out = tmp_path / f"r.{fmt}"
    res = _run(conf, "report", tid, "-o", str(out), "--format", fmt)
    _ok_or_one_line(res, f"report {fmt} {name}")
    if res.exit_code == 0:
        text = out.read_text()
        assert len(text) > 200 and "Traceback" not in text
        assert "null" not in re.sub(r"<script.*?</script>", "", text, flags=re.S) if fmt == "html" else True


@pytest.mark.parametrize("name", NAMES)
def test_diff_against_a_real_trace(conf, name):
    a = _first(conf, "no_shapes")
    b = _first(conf, name)
    for args in (("diff", a, b), ("diff", b, a, "--format", "json")):
        _ok_or_one_line(_run(conf, *args), f"{' '.join(args[:1])} {name}")


@pytest.mark.parametrize("name", NAMES)
def test_export(conf, name, tmp_path):
    tid = _first(conf, name)
    res = _run(conf, "export", "--parquet", str(tmp_path / "pq"), "--run", tid)
    _ok_or_one_line(res, f"export {name}")


def test_multi_trace_analyses_over_the_whole_corpus(conf):
    every = [t for ids in conf.ids.values() for t in ids]
    for args in (("analyze", "transition", *every[:6], "--by", "batch"),
                 ("analyze", "transition", "--sweep", "nope"),
                 ("analyze", "comm", *conf.ids["partial_ranks"]),
                 ("analyze", "comm", _first(conf, "cpu_only")),
                 ("analyze", "diff", _first(conf, "empty"), _first(conf, "cpu_only")),
                 ("report", *every[:4], "--by", "batch", "-o", str(conf.db.parent / "multi.html")),
                 ("traces", "--format", "csv"), ("traces", "--format", "json"), ("traces",)):
        _ok_or_one_line(_run(conf, *args), " ".join(args[:2]))


# -- the dashboard: every page and every callback a page fires, through the Flask client -------------------

@pytest.fixture(scope="module")
def client(conf):
    pytest.importorskip("dash")
    from kernelscope.dashboard.app import create_app

    c = create_app(conf.db).server.test_client()
    assert c.get("/").status_code == 200
    return c


def _post(client, body: dict):
    return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")


def _page(client, pathname: str, search: str = ""):
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": pathname}],
            "changedPropIds": ["url.pathname"], "state": [{"id": "url", "property": "search", "value": search}]}
    r = _post(client, body)
    assert r.status_code == 200, f"{pathname}: {r.status_code} {r.data[:300]!r}"
    assert b"msg-callback-error" not in r.data, f"{pathname}: {r.data[:800]!r}"
    return r.get_json()["response"]["page"]["children"]


def _fire_page_callbacks(client, pathname: str, tree) -> int:
    """Fire every callback whose inputs and states all live on this page (or are the URL), with the page's own
    values, as the browser does when the page loads. Returns how many fired."""
    props = props_by_id(tree)
    url = {"pathname": pathname, "search": "", "href": "http://localhost" + pathname, "hash": ""}
    fired = 0
    for dep in client.get("/_dash-dependencies").get_json():
        if dep["output"] == "page.children" or dep.get("clientside_function"):
            continue  # the router is fired above; clientside callbacks run in the browser
        deps = dep["inputs"] + dep["state"]
        if any(not isinstance(d["id"], str) for d in deps):
            continue  # pattern-matching ids: fired by their own pages' tests
        if not dep["inputs"] or not all(d["id"] in props or d["id"] == "url" for d in deps):
            continue
        if all(d["id"] == "url" for d in dep["inputs"]) and not any(d["id"] in props for d in deps):
            continue  # a callback of another page listening to the URL alone

        def value(d):
            return url.get(d["property"]) if d["id"] == "url" else props[d["id"]].get(d["property"])

        outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in dep["output"].strip(".").split("...")]
        body = {"output": dep["output"], "outputs": outputs if len(outputs) > 1 else outputs[0],
                "inputs": [{**d, "value": value(d)} for d in dep["inputs"]],
                "state": [{**d, "value": value(d)} for d in dep["state"]],
                "changedPropIds": [f"{dep['inputs'][0]['id']}.{dep['inputs'][0]['property']}"]}
        r = _post(client, body)
        assert r.status_code in (200, 204), f"{pathname} -> {dep['output']}: {r.status_code} {r.data[:500]!r}"
        assert b"Traceback" not in r.data
        assert b"msg-callback-error" not in r.data, f"{pathname} -> {dep['output']}: {r.data[:800]!r}"  # app.callback_error
        fired += 1
    return fired


@pytest.mark.parametrize("name", NAMES)
def test_every_trace_page_and_its_callbacks(conf, client, name):
    from kernelscope.dashboard.app import TRACE_PAGES

    tid = _first(conf, name)
    fired = 0
    for page in TRACE_PAGES:
        path = f"/trace/{tid}/{page}"
        tree = _page(client, path)
        assert "Traceback" not in json.dumps(tree)
        fired += _fire_page_callbacks(client, path, tree)
    assert fired >= 1


def test_store_pages_and_their_callbacks(conf, client):
    from kernelscope.dashboard.app import STORE_PAGES

    every = [t for ids in conf.ids.values() for t in ids]
    for page in STORE_PAGES:
        for search in ("", f"?a={every[0]}&b={every[1]}", f"?by=batch&traces={','.join(every[:5])}",
                       f"?run={every[0]}"):
            tree = _page(client, f"/{page}", search)
            assert "Traceback" not in json.dumps(tree)
            _fire_page_callbacks(client, f"/{page}", tree)
    _fire_page_callbacks(client, "/", _page(client, "/"))


def test_a_trace_with_device_events_is_never_called_cpu_only(conf, client, tmp_path):
    """accelerator_only holds only another accelerator's device events: every page and the report say what was
    set aside, and never call it a CPU-only trace (issue 11); the real CPU-only trace still is one."""
    from kernelscope.dashboard.app import TRACE_PAGES

    def said(tid: str) -> str:
        text = [json.dumps(_page(client, f"/trace/{tid}/{page}")) for page in TRACE_PAGES]
        out = tmp_path / f"{tid}.md"
        res = _run(conf, "report", tid, "-o", str(out), "--format", "md")
        assert res.exit_code == 0, res.stderr
        return " ".join(text) + out.read_text() + _run(conf, "summary", tid).stdout + _run(conf, "summary", tid).stderr

    acc = said(_first(conf, "accelerator_only"))
    assert "mtia_ccp_events" in acc
    assert "CPU-only trace" not in acc.replace("not a CPU-only trace", "")
    assert "a CPU-only trace" in said(_first(conf, "cpu_only"))


def test_bandwidth_says_how_to_get_numbers_from_a_trace_without_shapes(conf):
    """torch.profiler's defaults record no shapes: bandwidth models nothing and says why and what to do."""
    from kernelscope.analysis.bandwidth import bandwidth
    from kernelscope.storage.store import open_store

    with open_store(conf.db, read_only=True) as store:
        no = bandwidth(store, _first(conf, "qwen2_defaults"))
        yes = bandwidth(store, _first(conf, "qwen2_full"))
    assert no.scalars["modelled_gpu_ns"] == 0 and any("record_shapes=True" in w for w in no.warnings)
    assert yes.scalars["modelled_gpu_ns"] > 0 and not any("without shapes" in w for w in yes.warnings)
    assert no.scalars["shapes_recorded"] is False and yes.scalars["shapes_recorded"] is True


def test_bandwidth_page_and_report_say_first_that_the_trace_has_no_shapes(conf, client, tmp_path):
    """The page's one message above the (empty) roofline and the report's modelled sentence name the cause
    and the fix, not only a warning at the bottom (a newcomer's trace of torch.profiler's defaults)."""
    from dashboard.tree import find_json, text_json

    no, yes = _first(conf, "qwen2_defaults"), _first(conf, "qwen2_full")
    page = _page(client, f"/trace/{no}/bandwidth")
    msg = find_json(page, "msg-bw-nothing-modelled")
    assert msg is not None and "record_shapes=True" in text_json(msg)
    assert text_json(page).count("record_shapes=True") == 1  # said there, not again in the warnings below
    assert find_json(_page(client, f"/trace/{yes}/bandwidth"), "msg-bw-nothing-modelled") is None
    out = tmp_path / "r.md"
    assert _run(conf, "report", no, "-o", str(out), "--format", "md").exit_code == 0
    sentence = next(ln for ln in out.read_text().splitlines() if "of leaf-operator GPU time" in ln)
    assert "record_shapes=True" in sentence
