"""The shipped sample traces: README freshness, the CPU->GPU-bound sweep, links checked against an
independent stdlib reference (tests/reference_links.py), and named exact links per sample."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernelscope.analysis import bound
from kernelscope.storage.ingest import ingest_run
from kernelscope.storage.store import open_store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
RUNS = sorted(p.parent for p in SAMPLES.rglob("run.json") if (p.parent / "trace.json.gz").is_file())
sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_links  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = open_store(tmp_path_factory.mktemp("samples") / "s.duckdb")
    ids = {}
    for run in RUNS:
        res = ingest_run(s, run)
        assert res.status == "ingested", res.message
        ids[run.relative_to(SAMPLES).as_posix()] = res.trace_id
    s.ids = ids
    yield s
    s.close()


def test_samples_exist():
    names = {r.relative_to(SAMPLES).as_posix() for r in RUNS}
    for must in ["llama_prefill_b1", "llama_prefill_b128", "train_step", "small_kernels_eager",
                 "small_kernels_graph", "compiled"]:
        assert must in names


def test_readme_is_current():
    sys.path.insert(0, str(SAMPLES))
    import make_readme

    assert make_readme.main(["--check"]) == 0, "run: python sample_traces/make_readme.py"


def test_sweep_crosses_from_cpu_to_gpu_bound(store):
    share = {}
    for name, tid in store.ids.items():
        if name.startswith("llama_prefill_b"):
            split = bound.idle_split(store, tid)
            share[int(name.rsplit("b", 1)[1])] = float(split["host_wait_share"].iloc[0])
    assert sorted(share) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert share[1] >= 0.6
    assert share[128] <= 0.1


def _store_links(store, tid):
    df = store.query(
        """SELECT a.device, a.stream, a.start_ns, a.name, l.name AS api, o.name AS leaf, t.name AS top, a.is_graph
           FROM gpu_activities a
           LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
           LEFT JOIN cpu_ops o ON o.trace_id = a.trace_id AND o.op_id = a.leaf_op_id
           LEFT JOIN cpu_ops t ON t.trace_id = a.trace_id AND t.op_id = a.top_op_id
           WHERE a.trace_id = $t AND a.kind = 'kernel'""",
        {"t": tid},
    )
    def txt(v):
        return v if isinstance(v, str) else None  # pandas turns SQL NULL into NaN or None

    return {
        (int(r.device), int(r.stream), int(r.start_ns), r.name): (txt(r.api), txt(r.leaf), txt(r.top), bool(r.is_graph))
        for r in df.itertuples(index=False)
    }


@pytest.mark.parametrize("run", [r.relative_to(SAMPLES).as_posix() for r in RUNS])
def test_every_kernel_link_matches_the_reference(store, run):
    ref = reference_links.kernel_links(SAMPLES / run / "trace.json.gz")
    got = _store_links(store, store.ids[run])
    assert set(got) == set(ref)
    diffs = [(k, ref[k], got[k][:3]) for k in ref if tuple(ref[k]) != got[k][:3]]
    assert not diffs, diffs[:3]
    nongraph = [v for v in got.values() if not v[3]]
    if nongraph:
        with_leaf = sum(1 for v in nongraph if v[1] is not None)
        assert with_leaf / len(nongraph) >= 0.99, f"{with_leaf}/{len(nongraph)} non-graph kernels have a leaf op"


def test_external_id_and_nesting_agree_on_samples(store):
    df = store.query("SELECT count(*) FILTER (WHERE ext_agrees = false) AS bad, "
                     "count(*) FILTER (WHERE ext_agrees) AS good FROM launches")
    assert int(df.bad[0]) == 0
    assert int(df.good[0]) > 1000
