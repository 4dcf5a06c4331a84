"""The diff analysis and `kernelscope diff A B --fail-on ...`.

Exact numbers on two hand-built traces (each delta computed below), properties on the real samples
(small_kernels eager vs CUDA graph, llama prefill batch 1 vs 128), sweeps paired by label, --fail-on rules.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import stores
from click.testing import CliRunner
from conftest import ROOT
from storage.kineto_build import kern, rt, write_trace, x
from stores import empty

from kernelscope.analysis.diff import diff, normalised_name_sql, parse_rule
from kernelscope.analysis.summary import summary
from kernelscope.cli import cli
from kernelscope.errors import UsageError
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.store import open_store

US = 1000
MM_DIMS, MM_TYPES = [[4, 8], [8, 16]], ["float", "float"]
MM_SIG = 'aten::mm [[4, 8], [8, 16]] ["float", "float"]'


def dop(name, ts, dur, ext, dims):
    return x("cpu_op", name, ts, dur, **{"External id": ext, "Input Dims": dims, "Input type": ["float"] * len(dims)})


def events_a() -> list[dict]:
    """A: mm [5,15] 10 us; add [25,29] 4 us; triton (no operator) [35,38] 3 us; sum [45,51] 6 us;
    nccl (no operator) [55,60] 5 us. kernels 5, kernel time = busy = 28 us, span 60 - 5 = 55 us,
    idle 27 us, latency 60 - 0 = 60 us."""
    return [
        dop("aten::mm", 0, 20, 1, MM_DIMS), rt("cudaLaunchKernel", 1, 2, 1, 1),
        kern("void gemm_kernel<128, 64>(float*, int)", 5, 10, 1, 1),
        dop("aten::add", 20, 10, 2, [[4, 16], [4, 16]]), rt("cudaLaunchKernel", 21, 1, 2, 2),
        kern("void at::native::vectorized_elementwise_kernel<4, Add<float> >(int, Add<float>)", 25, 4, 2, 2),
        rt("cudaLaunchKernel", 31, 1, 3, 0),
        kern("triton_poi_fused_relu_0", 35, 3, 3, 0),
        dop("aten::sum", 40, 10, 4, [[4]]), rt("cudaLaunchKernel", 41, 1, 4, 4),
        kern("void at::native::reduce_kernel<512, 1>(float*)", 45, 6, 4, 4),
        rt("cudaLaunchKernel", 52, 1, 5, 0),
        kern("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 55, 5, 5, 0),
    ]


def events_b() -> list[dict]:
    """B: mm (same signature) [5,12] 7 us; add with other dims launches two kernels [25,26] [27,29] (3 us);
    triton [35,40] 5 us; a mean (another operator) [45,47] 2 us (another reduce kernel); flash [55,63] 8 us.
    kernels 6, kernel time = busy = 25 us, span 63 - 5 = 58 us, idle 33 us, latency 63 us."""
    return [
        dop("aten::mm", 0, 20, 1, MM_DIMS), rt("cudaLaunchKernel", 1, 2, 1, 1),
        kern("void gemm_kernel<256, 128>(float*, int)", 5, 7, 1, 1),
        dop("aten::add", 20, 10, 2, [[8, 16], [8, 16]]), rt("cudaLaunchKernel", 21, 1, 2, 2),
        rt("cudaLaunchKernel", 23, 1, 3, 2),
        kern("void at::native::vectorized_elementwise_kernel<2, Add<c10::Half> >(int, Add<c10::Half>)", 25, 1, 2, 2),
        kern("void at::native::vectorized_elementwise_kernel<4, Add<float> >(int, Add<float>)", 27, 2, 3, 2),
        rt("cudaLaunchKernel", 31, 1, 4, 0),
        kern("triton_poi_fused_relu_1", 35, 5, 4, 0),
        dop("aten::mean", 40, 10, 5, [[8]]), rt("cudaLaunchKernel", 41, 1, 5, 5),
        kern("void block_reduce_kernel<1>(float*)", 45, 2, 5, 5),
        rt("cudaLaunchKernel", 52, 1, 6, 0),
        kern("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64> >(Flash_fwd_params)", 55, 8, 6, 0),
    ]


def _ingest(store, path, labels=None) -> str:
    (res,) = ingest_paths(store, [path], labels=labels)
    assert res.status == "ingested", res.message
    return res.trace_id


def _ingest_pair(db: Path) -> tuple[str, str]:
    with open_store(empty(db), read_only=False) as store:
        a = _ingest(store, write_trace(db.parent / "a.json", events_a()))
        b = _ingest(store, write_trace(db.parent / "b.json", events_b()))
    return a, b


@pytest.fixture()
def pair_db(tmp_path):
    """The hand-built traces a.json and b.json in one store: a copy of one ingested once per session."""
    db = tmp_path / "d.duckdb"
    a, b = stores.copy("diff_pair", _ingest_pair, db)
    return db, a, b


def test_hand_built_groups_and_headline(pair_db):
    db, a, b = pair_db
    with open_store(db, read_only=True) as store:
        r = diff(store, [a, b])
    g = r.tables["groups"].set_index(["level", "key"])
    # pass 1: same signature, different GEMM kernel: 10 -> 7 us, -3 us = -30%
    mm = g.loc[("signature", MM_SIG)]
    assert (mm.count_a, mm.count_b, mm.time_a_ns, mm.time_b_ns, mm.delta_ns) == (1, 1, 10 * US, 7 * US, -3 * US)
    assert mm.delta_pct == pytest.approx(-30.0)
    assert pd.isna(mm.largest_a) and pd.isna(mm.largest_b)  # a signature group names itself
    # pass 2: add's shapes differ, its operator and dtypes do not: 1 -> 2 kernels, 4 -> 1 + 2 = 3 us (-25%);
    # the shapes on each side are named (largest_a / largest_b)
    ew = g.loc[("operator", 'aten::add ["float", "float"]')]
    assert (ew.count_a, ew.count_b, ew.time_a_ns, ew.time_b_ns) == (1, 2, 4 * US, 3 * US)
    assert ew.delta_pct == pytest.approx(-25.0)
    assert (ew.largest_a, ew.largest_b) == ('aten::add [[4, 16], [4, 16]] ["float", "float"]',
                                            'aten::add [[8, 16], [8, 16]] ["float", "float"]')
    # pass 3, normalised names, the Triton index dropped: triton_poi_fused_relu_0 / _1 -> 3 -> 5 us (+2/3)
    tr = g.loc[("kernel", "triton_poi_fused_relu")]
    assert (tr.time_a_ns, tr.time_b_ns, tr.delta_ns) == (3 * US, 5 * US, 2 * US)
    assert tr.delta_pct == pytest.approx(200 / 3)
    assert (tr.largest_a, tr.largest_b) == ("triton_poi_fused_relu", "triton_poi_fused_relu")
    # pass 4: sum's reduce_kernel vs mean's block_reduce_kernel, both reductions: 6 -> 2 us
    red = g.loc[("category", "reduction")]
    assert (red.count_a, red.count_b, red.delta_ns, red.status) == (1, 1, -4 * US, "matched")
    assert (red.largest_a, red.largest_b) == ('aten::sum [[4]] ["float"]', 'aten::mean [[8]] ["float"]')
    # left over: nccl only in A (removed), flash only in B (added)
    rm = g.loc[("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL")]
    assert (rm.status, rm.count_a, rm.count_b, rm.time_a_ns, rm.delta_ns, rm.delta_pct) == \
        ("removed", 1, 0, 5 * US, -5 * US, -100.0)
    add = g.loc[("kernel", "flash_fwd_kernel")]
    assert (add.status, add.time_b_ns, add.delta_ns) == ("added", 8 * US, 8 * US) and pd.isna(add.delta_pct)
    assert pd.isna(add.largest_a) and add.largest_b == "flash_fwd_kernel"
    assert len(g) == 6
    assert (r.scalars["matched_groups"], r.scalars["added_groups"], r.scalars["removed_groups"]) == (4, 1, 1)
    # sorted by |delta_ns|: flash 8, nccl 5, reduction 4, mm 3, triton 2, elementwise 1 (us)
    assert list(r.tables["groups"]["delta_ns"]) == [8000, -5000, -4000, -3000, 2000, -1000]
    assert r.trust["kernels_matched_by_category"] == {"a": 1, "b": 1}
    assert r.trust["kernels_matched_by_operator"] == {"a": 1, "b": 2}
    assert r.trust["kernels_matched_by_kernel"] == {"a": 1, "b": 1}

    h = r.tables["headline"].set_index("metric")
    expect = {"kernels": (5, 6), "kernel_time_ns": (28 * US, 25 * US), "busy_ns": (28 * US, 25 * US),
              "gpu_span_ns": (55 * US, 58 * US), "idle_ns": (27 * US, 33 * US), "latency_ns": (60 * US, 63 * US)}
    for m, (va, vb) in expect.items():
        assert (h.loc[m, "a"], h.loc[m, "b"], h.loc[m, "delta"]) == (va, vb, vb - va), m
        assert h.loc[m, "delta_pct"] == pytest.approx(100 * (vb - va) / va), m
    assert type(h.loc["busy_ns", "a"]) is int
    assert "tklqt_ns" in h.index and "mean_queue_depth" in h.index


def test_normalised_names(pair_db):
    db, _, _ = pair_db
    cases = {
        "triton_poi_fused_add_0": "triton_poi_fused_add",
        "triton_red_fused__to_copy_mean_12": "triton_red_fused__to_copy_mean",
        "void f<a<b<c>>, d>(int, std::array<char*, 1ul>)": "f",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, 4>(int)":
            "at::native::::CatArrayBatchedCopy",
        "sm90_xmma_gemm_f16f16_f16f32": "sm90_xmma_gemm_f16f16_f16f32",
    }
    with open_store(db, read_only=True) as store:
        for raw, want in cases.items():
            got = store.query(f"SELECT {normalised_name_sql('$n')} AS n", {"n": raw})["n"].iloc[0]
            assert got == want, raw


def test_fail_on_rules_through_cli(pair_db):
    """latency 60 -> 63 us is +5.0% exactly: '>+5%' holds, '>+4.9%' fails; busy 28 -> 25 us is -3000 ns:
    '<-2000' fails, '<-3000' holds."""
    db, a, b = pair_db
    run = CliRunner()
    base = ["diff", a, b, "--db", str(db), "--json"]
    ok = run.invoke(cli, base + ["--fail-on", "latency_ns>+5%", "--fail-on", "busy_ns<-3000"])
    assert ok.exit_code == 0, ok.output
    got = json.loads(ok.stdout)
    assert got["analysis"] == "diff" and got["matched_groups"] == 4
    bad = run.invoke(cli, base + ["--fail-on", "latency_ns>+4.9%", "--fail-on", "busy_ns<-2000",
                                  "--fail-on", "kernels>+1"])
    assert bad.exit_code == 1
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 2
    assert "latency_ns>+4.9%" in lines[0] and "A=60000" in lines[0] and "B=63000" in lines[0]
    assert "busy_ns<-2000" in lines[1] and "-3000" in lines[1]
    for expr in ("latency_ns>>5%", "latency_ns=5%", "bogus_ns>+5%", "latency_ns>5%%"):
        res = run.invoke(cli, base + ["--fail-on", expr])
        assert res.exit_code == UsageError.exit_code, expr
        assert len(res.stderr.strip().splitlines()) == 1 and "--fail-on" in res.stderr, expr


def test_parse_rule():
    r = parse_rule(" latency_ns > +5% ")
    assert (r.metric, r.op, r.threshold, r.percent) == ("latency_ns", ">", 5.0, True)
    r = parse_rule("idle_ns<-250")
    assert (r.metric, r.op, r.threshold, r.percent) == ("idle_ns", "<", -250.0, False)
    with pytest.raises(UsageError):
        parse_rule("latency_ns")


def test_analyze_diff_and_errors(pair_db):
    db, a, b = pair_db
    run = CliRunner()
    res = run.invoke(cli, ["analyze", "diff", a, b, "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["headline"][0] == {"metric": "kernels", "a": 5, "b": 6, "delta": 1,
                                                      "delta_pct": 20.0}
    with open_store(db, read_only=True) as store:
        with pytest.raises(UsageError):
            diff(store, [a])
        with pytest.raises(UsageError):
            diff(store, None, sweep="nosuch", sweep_b="other")


def test_sweeps_paired_by_label(tmp_path):
    """Sweep old: batch 1, 2, 4 (A events); sweep new: batch 1, 2 (B events). Pairs 1 and 2; 4 only in old."""
    db = tmp_path / "s.duckdb"
    with open_store(db, read_only=False) as store:
        for sweep, ev, batches in (("old", events_a(), (1, 2, 4)), ("new", events_b(), (1, 2))):
            for bt in batches:
                evs = ev + [x("cpu_op", f"marker_{sweep}_{bt}", 70, 1, **{"External id": 99})]  # distinct files
                _ingest(store, write_trace(tmp_path / f"{sweep}{bt}.json", evs),
                        labels={"sweep": sweep, "batch": str(bt)})
    with open_store(db, read_only=True) as store:
        r = diff(store, None, by="batch", sweep="old", sweep_b="new")
    assert r.scalars["mode"] == "sweeps" and [p["label"] for p in r.scalars["pairs"]] == [1, 2]
    h = r.tables["headline"]
    lat = h[h["metric"] == "latency_ns"]
    assert list(lat["label"]) == [1, 2] and list(lat["delta"]) == [3000, 3000]
    assert len(r.tables["groups"]) == 12 and r.scalars["added_groups"] == 2
    assert any("4" in w for w in r.warnings)
    res = CliRunner().invoke(cli, ["diff", "old", "new", "--sweeps", "--db", str(db), "--fail-on",
                                   "idle_ns>+20%", "--format", "csv", "--table", "headline"])
    assert res.exit_code == 1  # idle 27 -> 33 us = +22.2% at both points
    assert [ln.count("batch=") for ln in res.stderr.strip().splitlines()] == [1, 1]


@pytest.fixture(scope="module")
def sample_store(sample_runs):
    """The four runs ingested as runs: the session's store of every sample run (diff reads the two
    traces it is given)."""
    names = ("small_kernels_eager", "small_kernels_graph", "llama_prefill_b1", "llama_prefill_b128")
    return sample_runs.db, {n: sample_runs.ids[n] for n in names}


@pytest.mark.parametrize("a,b", [("small_kernels_eager", "small_kernels_graph"),
                                 ("llama_prefill_b1", "llama_prefill_b128")])
def test_samples_groups_add_up(sample_store, a, b):
    db, ids = sample_store
    with open_store(db, read_only=True) as store:
        r = diff(store, [ids[a], ids[b]])
        ka = summary(store, ids[a]).scalars["kernel_time_ns"]
        kb = summary(store, ids[b]).scalars["kernel_time_ns"]
    g = r.tables["groups"]
    assert int(g["time_a_ns"].sum()) == ka and int(g["time_b_ns"].sum()) == kb
    h = r.tables["headline"].set_index("metric")
    assert h.loc["kernel_time_ns", "delta"] == kb - ka
    assert (g["delta_ns"] == g["time_b_ns"] - g["time_a_ns"]).all()
    assert set(g["status"]) <= {"matched", "added", "removed"}
    assert ((g["status"] == "added") == (g["count_a"] == 0)).all()


def test_samples_eager_vs_graph(sample_store):
    """The same kernels replayed from a CUDA graph: every kernel group matched (graph kernels have no leaf
    operator, so by name), no added/removed, and the replay shortens the GPU span."""
    db, ids = sample_store
    with open_store(db, read_only=True) as store:
        r = diff(store, [ids["small_kernels_eager"], ids["small_kernels_graph"]])
    g = r.tables["groups"]
    assert (g["status"] == "matched").all() and r.scalars["added_groups"] == r.scalars["removed_groups"] == 0
    h = r.tables["headline"].set_index("metric")
    assert h.loc["gpu_span_ns", "delta"] < 0 and h.loc["idle_ns", "delta"] < 0
    assert h.loc["kernels", "a"] == h.loc["kernels", "b"]


def test_samples_batch_1_vs_128(sample_store):
    """Batch 128 does more GEMM work: the gemm groups' time grows, and so does the kernel time."""
    db, ids = sample_store
    res = CliRunner().invoke(cli, ["diff", ids["llama_prefill_b1"], ids["llama_prefill_b128"], "--db", str(db),
                                   "--json",
                                   "--fail-on", "kernel_time_ns>+100%"])
    assert res.exit_code == 1 and "kernel_time_ns>+100%" in res.stderr
    got = json.loads(res.stdout)
    head = {row["metric"]: row for row in got["headline"]}
    assert head["kernel_time_ns"]["delta"] > 0 and head["busy_ns"]["delta"] > 0
    assert got["matched_groups"] > 0
    assert sum(row["count_a"] for row in got["groups"]) == head["kernels"]["a"]


def test_every_diff_key_is_documented(pair_db):
    import re

    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    db, a, b = pair_db
    with open_store(db, read_only=True) as store:
        r = diff(store, [a, b])
    keys = set(r.scalars) | set(r.tables) | set(r.trust)
    for df in r.tables.values():
        keys |= set(df.columns)
    keys |= set(r.tables["headline"]["metric"]) | set(r.tables["groups"]["status"]) | {"label", "trace_a", "trace_b"}
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"undocumented diff keys: {missing}"
