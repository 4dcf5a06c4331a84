"""README.md stays true: its CLI reference equals the live `--help` texts, its set-up block is exactly two
one-line commands, and its worked example's numbers are what the CLI prints today."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import warm_cli
from click.testing import CliRunner
from conftest import ROOT

from kernelscope.cli import README_END, README_START, cli, cli_reference

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _reference_section() -> str:
    start = README.index(README_START) + len(README_START)
    return README[start : README.index(README_END)].strip()


def test_cli_reference_is_current():
    assert _reference_section() == cli_reference().strip(), (
        "README's CLI reference is stale: run `python -m kernelscope.cli --write-readme`"
    )


def test_cli_reference_equals_live_help_of_a_real_process():
    """The generator is not trusted alone: each block equals `kernelscope ... --help` run as a process (a new
    Python process for `kernelscope --help`, the commands' in processes forked from a warm one: tests/warm_cli.py)."""
    blocks = re.findall(r"### `([^`]*)`\n\n```text\n(.*?)\n```", _reference_section(), re.S)
    names = {name for name, _ in blocks}
    assert {"kernelscope", "kernelscope ingest", "kernelscope traces", "kernelscope summary",
            "kernelscope label", "kernelscope rm", "kernelscope sql", "kernelscope analyze",
            "kernelscope profile"} <= names
    env = {**os.environ, "COLUMNS": "200"}
    for name, body in blocks:
        args = name.split()[1:]
        if args:
            proc = warm_cli.run([*args, "--help"], env=env, timeout=60)
        else:
            proc = subprocess.run([sys.executable, "-m", "kernelscope.cli", "--help"],
                                  capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        # the process names itself `python -m kernelscope.cli`; the console script says `kernelscope`
        live = proc.stdout.replace("Usage: python -m kernelscope.cli", "Usage: kernelscope").rstrip()
        assert live == body, name


def test_setup_block_is_two_one_line_commands():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    lines = [line for line in first_block.splitlines() if line.strip()]
    assert len(lines) == 2
    assert "pip install" in lines[0] and "kernelscope ingest sample_traces/" in lines[0]
    assert "pip install" in lines[1] and lines[1].rstrip().endswith("pytest")
    # it is the first fenced block of the README, right under the title
    assert README.index("```bash") < README.index("## ")


def test_worked_example_numbers_are_live(tmp_path):
    db = str(tmp_path / "ks.duckdb")
    runner = CliRunner()
    res = runner.invoke(cli, ["ingest", str(ROOT / "tests/data/probe_train.json.gz"), "--label", "model=mlp",
                              "--db", db])
    assert res.exit_code == 0, res.stderr
    live = runner.invoke(cli, ["summary", "5f1e", "--db", db]).stdout
    example = README[README.index("$ kernelscope summary 5f1e\n"):]
    example = example[: example.index("```")]
    checked = 0
    for line in example.splitlines():
        if re.match(r"^  (kernels|memcpys|memsets|launches|cpu_ops|\w+_ns|trust\.\S+|phases\.\S+) ", line):
            assert line in live.splitlines(), line
            checked += 1
    assert checked >= 15
    top_ops = json.loads(runner.invoke(cli, ["summary", "5f1e", "--json", "--db", db]).stdout)["top_operators"]
    assert "aten::linear" in example and top_ops[0]["name"] == "aten::linear"
    assert f"{top_ops[0]['kernel_time_ns']}" in example


def test_the_main_job_ingests_every_shipped_sample(sample_runs):
    """README's first command runs `kernelscope ingest sample_traces/` before the dashboard, behind `&&`: one
    refused file there (a capture's metadata JSON, say) and the dashboard never starts. The session runs that
    command once, into a new store (tests/conftest.py's sample_runs, which other tests read), and keeps what
    it said."""
    res = sample_runs.ingest
    assert res.exit_code == 0, res.stderr
    assert "kernelscope:" not in res.stderr
    assert res.stdout.count("ingested") >= 28
