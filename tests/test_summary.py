"""`kernelscope summary --json` equals the independent stdlib reference (tests/reference_summary.py), to the
nanosecond, on every trace file the repo ships; plus the summary's own invariants."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from conftest import ROOT, trace_files

from kernelscope.cli import cli
from reference_summary import reference_summary

FILES = trace_files()
EXACT_KEYS = ["kernels", "memcpys", "memsets", "launches", "cpu_ops", "kernel_time_ns", "busy_ns",
              "gpu_span_ns", "idle_ns", "latency_ns", "exposed_host_ns"]
REQUIRED_KEYS = EXACT_KEYS + ["top_kernels", "top_operators", "top_leaf_operators", "trust", "phases"]


def _summary(session_store, path) -> dict:
    if path in session_store.failures:
        try:
            reference_summary(str(path))
        except (ValueError, KeyError, EOFError, OSError) as exc:
            pytest.skip(f"not a readable trace for the reference either ({type(exc).__name__}): "
                        f"{session_store.failures[path]}")
        pytest.fail(f"ingest refused a trace the reference reads: {session_store.failures[path]}")
    res = CliRunner().invoke(cli, ["summary", session_store.ids[path], "--json", "--db", str(session_store.db)])
    assert res.exit_code == 0, res.output + (res.stderr or "")
    return json.loads(res.stdout)


def test_there_are_traces_to_check(session_store):
    """The comparison below must not pass by having nothing to compare."""
    assert FILES, "no .json/.json.gz traces under sample_traces/ or tests/data/"
    assert session_store.ids, f"no trace could be ingested: {session_store.failures}"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_summary_equals_reference(session_store, path):
    got = _summary(session_store, path)
    want = reference_summary(str(path))
    for key in REQUIRED_KEYS:
        assert key in got, key
    assert {k: got[k] for k in EXACT_KEYS} == {k: want[k] for k in EXACT_KEYS}
    # ints stay ints in JSON (never 1.5e+18-style floats)
    for key in EXACT_KEYS:
        assert got[key] is None or type(got[key]) is int, (key, got[key])
    assert got["trust"]["kernels_with_launch"]["count"] == want["kernels_with_launch"]
    assert [(k["name"], k["count"], k["total_ns"]) for k in got["top_kernels"]] == [
        (k["name"], k["count"], k["total_ns"]) for k in want["top_kernels"]
    ]


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_summary_invariants(session_store, path):
    got = _summary(session_store, path)
    if got["gpu_span_ns"] is not None:
        assert 0 <= got["busy_ns"] <= got["gpu_span_ns"] * max(1, len(got["devices"]))
        assert got["idle_ns"] >= 0
    # operator tables rank by kernel time and never claim more than all kernels took
    for table in ("top_operators", "top_leaf_operators", "top_kernels"):
        col = "total_ns" if table == "top_kernels" else "kernel_time_ns"
        times = [row[col] for row in got[table]]
        assert times == sorted(times, reverse=True)
        assert sum(times) <= got["kernel_time_ns"]
        assert len(times) <= 10
    trust = got["trust"]
    assert trust["kernels_with_launch"]["count"] <= got["kernels"]
    # top-level operators partition kernel time: attributed + unattributed = all kernels
    if got["trust"]["ops_with_kernels"]["top_level_ops"] <= 10:
        attributed = sum(r["kernel_time_ns"] for r in got["top_operators"])
        assert attributed + trust["kernel_time_without_operator_ns"] == got["kernel_time_ns"]


def test_every_summary_key_is_documented(session_store):
    """Each key the summary emits (top level, trust, tables' columns) is named in docs/metrics.md."""
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    path = next(iter(session_store.ids))
    got = _summary(session_store, path)
    keys = set(got) | set(got["trust"]) | {f"phases.{k}" for k in got["phases"]}
    for table in ("top_kernels", "top_operators", "top_leaf_operators", "devices"):
        for row in got[table][:1]:
            keys |= set(row)
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"undocumented summary keys: {missing}"
