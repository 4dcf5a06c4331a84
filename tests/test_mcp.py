"""`kernelscope mcp` through the official MCP SDK's own client over stdio (`python -m kernelscope mcp --db
STORE` as a subprocess): the tools listed, every tool called on README's sample store, each answer equal to the
CLI's JSON for the same question (tables paged: each page the matching slice of the CLI's table), the SQL limits
of `kernelscope sql` holding through it, the store never written; the ingest tool only with --allow-ingest
(in-process client); and docs/agents.md's worked question answered by the same tools, its quoted numbers
checked."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from conftest import ROOT
from mcp import Client, StdioServerParameters  # the test extra's mcp: the official SDK

from kernelscope.cli import cli

READ_TOOLS = {"traces", "summary", "analyses", "analyze", "recommend", "diff", "sql", "schema"}
HUGE = 3_000_000

#: (tool, arguments) each called once in one stdio session; the tests below read the answers.
CALLS = {
    "traces": ("traces", {"limit": 500}),
    "traces_page": ("traces", {"offset": 2, "limit": 3, "headline": True}),
    "summary": ("summary", {"trace": "train_step", "offset": 1, "limit": 3}),
    "analyses": ("analyses", {}),
    "steps": ("analyze", {"name": "steps", "traces": ["small_kernels_eager"], "options": {"warmup": 2}}),
    "kernels": ("analyze", {"name": "kernels", "traces": ["train_step"], "options": {"top": 4},
                            "table": "top_kernels", "limit": 2}),
    "transition": ("analyze", {"name": "transition", "sweep": "llama_prefill", "by": "batch"}),
    "recommend": ("recommend", {"trace": "train_step"}),
    "diff": ("diff", {"a": "llama_prefill_b8", "b": "llama_prefill_b1", "fail_on": ["latency_ns>+5%"],
                      "limit": 5}),
    "sql": ("sql", {"query": "SELECT name, dur_ns FROM gpu_activities WHERE kind = 'kernel' "
                             "ORDER BY trace_id, start_ns, activity_id LIMIT 40", "offset": 5, "limit": 10}),
    "sql_huge": ("sql", {"query": f"SELECT range AS i FROM range({HUGE})", "offset": HUGE - 7, "limit": 100}),
    "sql_write": ("sql", {"query": "DELETE FROM traces"}),
    "sql_two": ("sql", {"query": "SELECT 1; SELECT 2"}),
    "sql_limit": ("sql", {"query": "SELECT 1", "limit": 100_000}),
    "sql_timeout": ("sql", {"query": "SELECT 1", "timeout_s": 0}),
    "schema": ("schema", {}),
    "missing": ("summary", {"trace": "no_such_trace"}),
    # docs/agents.md's worked question
    "bound": ("analyze", {"name": "bound", "traces": ["train_step"], "table": "idle_operators", "limit": 5}),
}


async def _session(params) -> tuple[list[str], dict]:
    async with Client(params) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        out = {}
        for key, (tool, args) in CALLS.items():
            res = await client.call_tool(tool, args)
            out[key] = ("error", res.content[0].text) if res.is_error else res.structured_content
    return tools, out


def _run(fn, *args):
    """``anyio.run(fn, *args)`` in a thread of its own: the worker's main thread may already run an event loop
    (the browser tests' Playwright keeps one there for the session)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, fn, *args).result()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def served(sample_runs):
    db = Path(sample_runs.db)
    before = _digest(db)
    params = StdioServerParameters(command=sys.executable, args=["-m", "kernelscope", "mcp", "--db", str(db)],
                                   cwd=str(ROOT))
    tools, out = _run(_session, params)
    return {"db": str(db), "tools": tools, "out": out, "unchanged": _digest(db) == before}


def cli_json(db, *args, code=0):
    res = CliRunner().invoke(cli, [*args, "--db", db])
    assert res.exit_code == code, res.output
    return json.loads(res.stdout), res.stderr


def same_as_cli(answer: dict, cli: dict, only_table: str | None = None):
    """Every key of the CLI's JSON in the answer: tables as their page's slice, the rest equal (with
    ``only_table``, the other tables are left out of the answer)."""
    for key, value in cli.items():
        if only_table and key != only_table and isinstance(value, list) and key not in answer:
            continue
        got = answer[key]
        if isinstance(got, dict) and "rows" in got and "next_offset" in got:
            o, n = got["offset"], got["limit"]
            assert got["rows"] == value[o:o + n], key
            assert got["total_rows"] == len(value)
            assert got["next_offset"] == (o + n if o + n < len(value) else None)
        else:
            assert got == value, key
    assert set(answer) - set(cli) <= {"paging", "violations"}


def test_tools_listed_and_store_untouched(served):
    assert served["tools"] == sorted(READ_TOOLS)  # no ingest tool without --allow-ingest
    assert served["unchanged"]


def test_traces_and_summary_equal_the_cli(served):
    out, db = served["out"], served["db"]
    rows, _ = cli_json(db, "traces", "--json")
    page = out["traces"]["traces"]
    assert page["rows"] == rows and page["total_rows"] == len(rows) and page["next_offset"] is None
    assert "gpu_span_ns" in out["traces"]["definition"] and out["traces"]["trust"]
    small = out["traces_page"]["traces"]
    assert [{k: v for k, v in r.items() if k != "headline"} for r in small["rows"]] == rows[2:5]
    assert small["next_offset"] == 5 and small["total_rows"] == len(rows)
    for r in small["rows"]:  # headline numbers = diff's, read from the CLI
        d, _ = cli_json(db, "diff", r["id"], r["id"], "--json", "--table", "headline")
        assert r["headline"] == {x["metric"]: x["a"] for x in d} | {m: None for m in ("tklqt_ns", "mean_queue_depth")
                                                                    if m not in {x["metric"] for x in d}}
    cli_sum, _ = cli_json(db, "summary", "train_step", "--json")
    same_as_cli(out["summary"], cli_sum)
    assert out["summary"]["top_kernels"]["rows"] and out["summary"]["trust"] and out["summary"]["definition"]


def test_every_analysis_equals_the_cli(served):
    out, db = served["out"], served["db"]
    listed, _ = cli_json(db, "analyze", "--list", "--json")
    assert [(a["name"], a["description"]) for a in out["analyses"]["analyses"]] == \
        [(a["name"], a["description"]) for a in listed]
    opts = {a["name"]: {o["name"]: o["default"] for o in a["options"]} for a in out["analyses"]["analyses"]}
    assert opts["kernels"] == {"top": 10, "short_ns": 10_000} and opts["steps"] == {"phase": None, "warmup": None}  # None: 1, or 0 after a schedule's warm-up
    assert opts["launch"] == {} and "by" not in opts["transition"]
    same_as_cli(out["steps"], cli_json(db, "analyze", "steps", "small_kernels_eager", "-o", "warmup=2", "--json")[0])
    top, _ = cli_json(db, "analyze", "kernels", "train_step", "-o", "top=4", "--json")
    same_as_cli(out["kernels"], top, only_table="top_kernels")
    assert len(top["top_kernels"]) == 5 and out["kernels"]["top_kernels"]["next_offset"] == 2  # top 4 + "others"
    same_as_cli(out["transition"],
                cli_json(db, "analyze", "transition", "--sweep", "llama_prefill", "--by", "batch", "--json")[0])
    same_as_cli(out["recommend"], cli_json(db, "analyze", "recommend", "train_step", "--json")[0])
    cli_diff, err = cli_json(db, "diff", "llama_prefill_b8", "llama_prefill_b1", "--json", "--fail-on",
                             "latency_ns>+5%", code=1)
    same_as_cli(out["diff"], cli_diff)
    assert out["diff"]["violations"] == [line.removeprefix("kernelscope: ") for line in err.strip().splitlines()]
    assert out["diff"]["groups"]["total_rows"] > 5 and len(out["diff"]["groups"]["rows"]) == 5


def test_sql_through_mcp_keeps_the_limits(served):
    out, db = served["out"], served["db"]
    rows, _ = cli_json(db, "sql", CALLS["sql"][1]["query"], "--json")
    res = out["sql"]["result"]
    assert res["columns"] == ["name", "dur_ns"] and res["rows"] == rows[5:15] and res["total_rows"] == 40
    assert res["next_offset"] == 15 and "read-only" in out["sql"]["definition"]
    huge = out["sql_huge"]["result"]  # 3M rows counted, 7 kept: the page, never the table
    assert huge["total_rows"] == HUGE and huge["rows"] == [{"i": i} for i in range(HUGE - 7, HUGE)]
    assert huge["next_offset"] is None
    for key, said in (("sql_write", "read-only"), ("sql_two", "2 statements"), ("sql_limit", "limit must be"),
                      ("sql_timeout", "time limit must be")):
        kind, text = out[key]
        assert kind == "error" and said in text and "\n" not in text, (key, text)
    res = CliRunner().invoke(cli, ["sql", "DELETE FROM traces", "--db", db])
    assert res.exit_code != 0 and res.stderr.strip().removeprefix("kernelscope: ") in out["sql_write"][1]


def test_schema_and_errors(served):
    out, db = served["out"], served["db"]
    tables, _ = cli_json(db, "sql", "SELECT table_name, column_name, data_type FROM information_schema.columns "
                                    "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position", "--json")
    got = [(t["table"], c["name"], c["type"]) for t in out["schema"]["tables"] for c in t["columns"]]
    assert got == [(r["table_name"], r["column_name"], r["data_type"]) for r in tables]
    cols = {(t["table"], c["name"]): c["definition"] for t in out["schema"]["tables"] for c in t["columns"]}
    assert cols[("labels", "value_text")] == "always set, as given"  # storage/schema/001_init.sql
    assert cols[("python_calls", "depth")] == "enclosing Python calls (0: outermost)"  # an ALTER (010)
    kind, text = out["missing"]
    res = CliRunner().invoke(cli, ["summary", "no_such_trace", "--db", db])
    assert kind == "error" and res.stderr.strip().removeprefix("kernelscope: ") in text


def test_ingest_only_when_allowed(tmp_path):
    from kernelscope.agents.server import build_server

    db = str(tmp_path / "s.duckdb")
    trace = ROOT / "tests" / "data" / "probe_train.json.gz"

    async def go():
        async with Client(build_server(db, allow_ingest=True)) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            res = (await c.call_tool("ingest", {"paths": [str(trace)], "labels": {"batch": "4"}})).structured_content
            listed = (await c.call_tool("traces", {})).structured_content
        return names, res, listed

    names, res, listed = _run(go)
    assert names == READ_TOOLS | {"ingest"}
    (f,) = res["files"]
    assert f["status"] == "ingested" and listed["traces"]["rows"][0]["id"] == f["trace_id"]
    assert listed["traces"]["rows"][0]["labels"] == {"batch": 4}


def test_worked_question_in_docs(served):
    """docs/agents.md answers "why is train_step slow?" with these tools; every number it quotes is here."""
    out = served["out"]
    doc = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    s = out["summary"]
    rec = {f["rule"]: f for f in out["recommend"]["findings"]["rows"]}
    assert set(rec) == {"host_bound_launch", "short_kernels"}, (out["recommend"]["trust"],
                                                              out["recommend"]["warnings"])
    ops = out["bound"]["idle_operators"]["rows"]
    quoted = {
        "latency_ns": (s["latency_ns"], 11_052_291),
        "busy_ns": (s["busy_ns"], 2_519_474),
        "gpu_span_ns": (s["gpu_span_ns"], 10_956_646),
        "host_wait_share": (round(out["bound"]["host_wait_share"], 3), 0.766),
        "saving_ns": (rec["host_bound_launch"]["saving_ns"], 4_578_302),
        "copy_idle_ns": (ops[0]["idle_ns"], 905_153),
    }
    for key, (got, want) in quoted.items():
        assert got == want, key
        assert (f"{want:,}" if isinstance(want, int) else f"{want}") in doc, key
    assert ops[0]["operator"] == "aten::copy_" and ops[0]["gaps"] == 122 and "122 gaps" in doc
    assert out["recommend"]["rules_fired"] == ["host_bound_launch", "short_kernels"]
    assert rec["host_bound_launch"]["severity"] == rec["short_kernels"]["severity"] == "high"
    for message in (rec["host_bound_launch"]["message"], rec["short_kernels"]["message"]):
        assert message in doc
    assert re.search(r'"command":\s*"kernelscope"', doc) and '"mcp"' in doc  # the client config snippet
