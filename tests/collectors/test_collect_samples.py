"""Issue 14's GPU captures (sample_traces/capture_collect.sh on an H100): one `kernelscope profile --nsys --ncu top:5`
run dir and a six-point `kernelscope sweep`, read from the session store of README's main job (tests/conftest.py
sample_runs: `kernelscope ingest sample_traces/`).

- The nsys trace stored from the run dir's SQLite export equals `nsys stats --report cuda_gpu_kern_sum` of the same
  report (nsys's own reduction, shipped beside it) in kernel count and total kernel time, name by name.
- The Kineto and nsys passes of the one run (two processes, same recorded step) launch the same kernels per leaf
  operator.
- Nsight Compute's rows (counted from the CSV itself) are joined to the Kineto trace's kernels, >= 95% (all 145).
- The sweep gives a CPU->GPU-bound bracket under both rules.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from kernelscope.analysis.transition import transition
from kernelscope.collectors.nsight_ncu import collectors_check, kern_sum_check
from kernelscope.storage.queries import resolve_trace
from kernelscope.storage.store import open_store

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
RUN = SAMPLES / "qwen2_infer_nsight"


@pytest.fixture(scope="module")
def store(sample_runs):
    s = open_store(sample_runs.db, read_only=True)
    yield s
    s.close()


def test_the_run_dir_holds_every_pass_and_records_them():
    doc = json.loads((RUN / "run.json").read_text())
    assert doc["profiler_options"]["schedule"] == {"wait": 1, "warmup": 1, "active": 1, "repeat": 1, "skip_first": 0}
    assert doc["step_rule"]["rule"] == "forward"  # an unmodified inference script: each outermost forward
    assert set(doc["nsight"]) == {"nsys", "ncu"}
    assert doc["timing"]["kind"] == "process"  # the script marks no kernelscope.range region
    for f in ("trace.json.gz", "qwen2_infer.nsys-rep", "qwen2_infer.sqlite.gz", "qwen2_infer_ncu.csv.gz"):
        assert (RUN / f).is_file(), f


def test_the_nsys_trace_equals_nsys_stats_of_the_same_report(store, tmp_path):
    nsys = resolve_trace(store, "qwen2_infer-nsys")
    stats = tmp_path / "kern_sum.csv"
    stats.write_bytes(gzip.decompress((RUN / "nsys_stats_cuda_gpu_kern_sum.csv.gz").read_bytes()))
    got = kern_sum_check(store, nsys, stats)
    assert got["mismatched"] == [] and got["equal"], got["mismatched"][:3]
    assert got["kernels"] == (182, 182) and got["kernel_ns"] == (453091, 453091)


def test_kineto_and_nsys_launch_the_same_kernels_per_leaf_operator(store):
    got = collectors_check(store, "qwen2_infer", "qwen2_infer-nsys")
    assert got["kineto"] != got["nsys"]
    assert got["equal"], [o for o in got["ops"] if o[1] != o[2]]
    assert got["total_ops"] >= 10 and sum(o[1] for o in got["ops"]) == 182
    # two processes, two clocks: the same kernels take about the same time (within 2%), not exactly
    kin, nsy = got["kernel_ns"]
    assert abs(kin - nsy) / nsy < 0.02


def test_ncu_rows_join_the_kineto_kernels(store):
    with gzip.open(RUN / "qwen2_infer_ncu.csv.gz", "rt") as f:
        lines = [ln for ln in f if not ln.startswith("==")]  # ncu's own "==PROF==" lines come first
    rows = [r for r in csv.DictReader(lines) if r["ID"].isdigit()]  # the row after the header holds units
    assert len(rows) == 145
    tid = resolve_trace(store, "qwen2_infer")
    n, matched = store.con.execute(
        "SELECT count(*), count(activity_id) FROM ncu_kernels WHERE trace_id = ?", [tid]).fetchone()
    assert n == len(rows) and matched / n >= 0.95
    assert matched == 145


def test_the_sweep_brackets_the_transition_under_both_rules(store):
    r = transition(store, sweep="qwen2_sweep", by="batch")
    points = r.tables["points"]
    assert sorted(points["label"]) == [1, 2, 4, 8, 16, 32]
    for rule in ("trace", "unprofiled"):
        b = r.scalars["brackets"][rule]
        assert (b["last_cpu_bound"], b["first_gpu_bound"]) == (16, 32), (rule, b)
    assert (points["unprofiled_source"] == "cuda_event").all()
