"""bandwidth: _foreach_* tensor lists inferred from AccumulateGrad (hand-built trace and the train_step
sample, each number worked out by hand beside it), and the bounded per_instance table."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from storage.kineto_build import kern, rt, write_trace, x

from kernelscope.analysis.bandwidth import bandwidth
from kernelscope.analysis.opmodel import foreach_chunks, model_op
from kernelscope.cli import cli
from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.store import open_store

MTA = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
       "TensorListMetadata<{d}>, at::native::(anonymous namespace)::{f}<float, {d}, {d}, 0>, std::multiplies<float>, "
       "float>(T1, T2, T3, T4)")


def _op(name, ts, dur, ext, dims, types):
    return x("cpu_op", name, ts, dur, **{"External id": ext, "Input Dims": dims, "Input type": types,
                                         "Input Strides": [[] for _ in dims], "Concrete Inputs": [""] * len(dims)})


def _kern(name, ts, dur, corr, ext, grid):
    k = kern(name, ts, dur, corr, ext)
    k["args"]["grid"], k["args"]["block"] = [grid, 1, 1], [512, 1, 1]
    return k


def _events():
    """Step 1: gradients fp32 [1000,100] (100,000 elements: 2 chunks of 65,536) and [10] (1 chunk), and a
    bf16 [64] one (another dtype: not in the fp32 list); _foreach_mul_ (1 list) with one kernel of 3
    blocks and _foreach_lerp_ (2 lists) with kernels of 2 + 1 blocks. Step 2: one gradient [10];
    _foreach_mul_ with 1 block (matches) and _foreach_add_ with 5 blocks (does not)."""
    ag = "torch::autograd::AccumulateGrad"
    scal, tl = ["TensorList", "Scalar"], [[], []]
    return [
        _op(ag, 10, 1, 101, [[1000, 100]], ["float"]),
        _op(ag, 12, 1, 102, [[10]], ["float"]),
        _op(ag, 14, 1, 103, [[64]], ["c10::BFloat16"]),
        _op("aten::_foreach_mul_", 20, 5, 1, tl, scal), rt("cudaLaunchKernel", 21, 1, 1, 1),
        _kern(MTA.format(d=1, f="BinaryOpScalarFunctor"), 30, 10, 1, 1, 3),
        _op("aten::_foreach_lerp_", 50, 5, 2, [[], [], []], ["TensorList", "TensorList", "Scalar"]),
        rt("cudaLaunchKernel", 51, 1, 2, 2), rt("cudaLaunchKernel", 52, 1, 3, 2),
        _kern(MTA.format(d=2, f="TernaryOpScalarFunctor"), 60, 10, 2, 2, 2),
        _kern(MTA.format(d=2, f="TernaryOpScalarFunctor"), 71, 5, 3, 2, 1),
        _op(ag, 100, 1, 104, [[10]], ["float"]),
        _op("aten::_foreach_mul_", 110, 5, 3, tl, scal), rt("cudaLaunchKernel", 111, 1, 4, 3),
        _kern(MTA.format(d=1, f="BinaryOpScalarFunctor"), 120, 2, 4, 3, 1),
        _op("aten::_foreach_add_", 130, 5, 4, tl, scal), rt("cudaLaunchKernel", 131, 1, 5, 4),
        _kern(MTA.format(d=1, f="BinaryOpScalarFunctor"), 140, 2, 5, 4, 5),
    ]


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    d = tmp_path_factory.mktemp("foreach")
    path = write_trace(d / "foreach.json", _events(), deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    s = open_store(d / "s.duckdb")
    res = ingest_file(s, path)
    assert res.status == "ingested", res.message
    yield s, res.trace_id
    s.close()


def test_foreach_chunks_by_hand():
    # ceil(100000 / 65536) = 2, ceil(10 / 65536) = 1, ceil(65536 / 65536) = 1, ceil(65537 / 65536) = 2
    assert foreach_chunks([[1000, 100], [10]]) == 3
    assert foreach_chunks([[65536], [65537]]) == 3


def test_foreach_rule_by_hand():
    shapes = [[1000, 100], [10]]  # N = 100,010 elements per list
    c = model_op("aten::_foreach_mul_", json.dumps([shapes, []]), '["TensorList", "Scalar"]', None, None,
                 elem_size_hint=4)
    # in place, one list: read N + write N = 2 * 100,010 * 4 = 800,080 bytes; 1 FLOP per element
    assert (c.flops, c.bytes, c.rule, c.tensor) == (100_010, 800_080, "foreach", False)
    c = model_op("aten::_foreach_addcdiv_", json.dumps([shapes, shapes, shapes, []]),
                 '["TensorList", "TensorList", "TensorList", ""]', None, None, elem_size_hint=4)
    # params += step * m / d: 3 lists read + 1 written = 4 * 100,010 * 4 = 1,600,160
    assert c.bytes == 1_600_160
    c = model_op("aten::_foreach_addcmul_", json.dumps([shapes, shapes, shapes, []]),
                 '["TensorList", "TensorList", "TensorList", "Scalar"]', None, None, elem_size_hint=4)
    # v += c * g * g (torch.optim passes the gradient list twice): v and g read, v written: 3 * 400,040
    assert c.bytes == 1_200_120
    c = model_op("aten::_foreach_sqrt", json.dumps([shapes]), '["TensorList"]', None, None, elem_size_hint=2)
    # out of place, bf16: read N, write a new list of N: 2 * 100,010 * 2 = 400,040
    assert c.bytes == 400_040
    # without list shapes or without an element size: unmodelled, with the reason
    assert "not recorded" in model_op("aten::_foreach_mul_", "[[], []]", '["TensorList", "Scalar"]', None, None,
                                      elem_size_hint=4).reason
    assert "dtype" in model_op("aten::_foreach_mul_", json.dumps([shapes, []]), '["TensorList", "Scalar"]',
                               None, None).reason


def test_foreach_lists_from_accumulate_grad(hand):
    store, t = hand
    r = bandwidth(store, t, instances="all")
    rows = r.table("per_instance").sort_values("op_id")
    got = [(n, b, f, s) for n, b, f, s in zip(rows["name"], rows["bytes"], rows["flops"], rows["shapes_source"])]
    assert got[0] == ("aten::_foreach_mul_", 800_080, 100_010, "accumulate_grad")  # 2 * 100,010 * 4
    assert got[1] == ("aten::_foreach_lerp_", 1_200_120, 100_010, "accumulate_grad")  # 3 lists * 100,010 * 4
    # step 2 uses only the gradient accumulated after step 1's _foreach_ ops: [10] -> 2 * 10 * 4 = 80 bytes
    assert got[2] == ("aten::_foreach_mul_", 80, 10, "accumulate_grad")
    # 5 blocks where the list needs 1: not modelled, and the reason says so
    assert got[3][0] == "aten::_foreach_add_" and pd.isna(got[3][1])
    un = r.table("unmodelled")
    assert list(un["name"]) == ["aten::_foreach_add_"]
    assert "need 1 thread blocks, its kernels ran 5" in un["reason"].iloc[0]
    # mul_ step 1: 800,080 bytes in its 10,000 ns kernel = 80.008 GB/s; lerp_: 1,200,120 B over the union
    # of [60,70] and [71,76] us = 15,000 ns -> 80.008 GB/s
    assert rows["achieved_gbps"].iloc[0] == pytest.approx(80.008)
    assert rows["gpu_ns"].iloc[1] == 15_000 and rows["achieved_gbps"].iloc[1] == pytest.approx(80.008)
    sig = r.table("per_signature").set_index("name")
    assert json.loads(sig.loc["aten::_foreach_lerp_", "input_dims"]) == [[[1000, 100], [10]], [[1000, 100], [10]], []]
    # GPU time 10,000 + 15,000 + 2,000 + 2,000 ns, of which the add's 2,000 are not modelled
    assert (r.scalars["gpu_ns"], r.scalars["modelled_gpu_ns"]) == (29_000, 27_000)
    assert r.trust["instances_lists_from_accumulate_grad"] == 3
    assert any("shapes_source = 'accumulate_grad'" in w for w in r.warnings)
    off = bandwidth(store, t, infer_lists=False)
    assert off.scalars["modelled_gpu_ns"] == 0 and set(off.table("unmodelled")["name"]) == {
        "aten::_foreach_mul_", "aten::_foreach_lerp_", "aten::_foreach_add_"}


def test_foreach_without_any_gradient_in_the_trace_says_so(tmp_path):
    """An inference-only trace (no AccumulateGrad at all) with a _foreach_ operator on the GPU: unmodelled, and
    the reason names the missing gradients (the lookup must not index an empty list of them)."""
    scal, tl = ["TensorList", "Scalar"], [[], []]
    events = [_op("aten::_foreach_mul_", 20, 5, 1, tl, scal), rt("cudaLaunchKernel", 21, 1, 1, 1),
              _kern(MTA.format(d=1, f="BinaryOpScalarFunctor"), 30, 10, 1, 1, 3)]
    path = write_trace(tmp_path / "nograd.json", events, deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    with open_store(tmp_path / "s.duckdb") as s:
        res = ingest_file(s, path)
        assert res.status == "ingested", res.message
        r = bandwidth(s, res.trace_id)
    un = r.table("unmodelled")
    assert list(un["name"]) == ["aten::_foreach_mul_"] and int(un["gpu_ns"].iloc[0]) == 10_000
    assert "no AccumulateGrad before it" in un["reason"].iloc[0]
    assert r.scalars["modelled_gpu_ns"] == 0


def test_foreach_after_gradients_without_shapes_says_shapes_were_not_recorded(tmp_path):
    """A training step recorded without shapes (torch.profiler's default): AccumulateGrad calls carry no
    Input Dims, so no tensor list can be inferred, and the reason says so (it said 'the 0 gradients
    accumulated before it need 0 thread blocks, its kernels ran 3', on HTA's public V100 trace too)."""
    ag = "torch::autograd::AccumulateGrad"
    events = [x("cpu_op", ag, 10, 1, **{"External id": 101}), x("cpu_op", ag, 12, 1, **{"External id": 102}),
              x("cpu_op", "aten::_foreach_mul_", 20, 5, **{"External id": 1}), rt("cudaLaunchKernel", 21, 1, 1, 1),
              _kern(MTA.format(d=1, f="BinaryOpScalarFunctor"), 30, 10, 1, 1, 3)]
    path = write_trace(tmp_path / "noshapes.json", events, deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    with open_store(tmp_path / "s.duckdb") as s:
        res = ingest_file(s, path)
        assert res.status == "ingested", res.message
        un = bandwidth(s, res.trace_id).table("unmodelled")
    assert list(un["name"]) == ["aten::_foreach_mul_"]
    reason = un["reason"].iloc[0]
    assert "AccumulateGrad calls before it have no shapes" in reason and "record_shapes=True" in reason, reason
    assert "thread blocks" not in reason, reason


def _sample(session_store, name):
    with open_store(session_store.db, read_only=True) as s:
        row = s.query("SELECT trace_id FROM traces WHERE name = $n", {"n": name})
        if not len(row):
            pytest.fail(f"{name} sample not present")
        return bandwidth(s, row.iloc[0]["trace_id"], instances="all")


def test_train_step_adamw_lists(session_store):
    """AdamW over the train_step model (torch.nn TransformerEncoder d=512, 4 layers, vocab 8192):
    parameters, by hand: embedding 8192*512 = 4,194,304; head 8192*512 + 8192 = 4,202,496; per layer
    in_proj 1536*512 + 1536 = 787,968, out_proj 512*512 + 512 = 262,656, linear1 2048*512 + 2048 =
    1,050,624, linear2 512*2048 + 512 = 1,049,088, two norms 4*512 = 2,048 -> 3,152,384; 4 layers
    12,609,536. N = 4,194,304 + 4,202,496 + 12,609,536 = 21,006,336 fp32 elements in 51 tensors.
    Blocks of 65,536 elements: 64 + 64 + 1 + 4 * (12+1 + 4+1 + 16+1 + 16+1 + 4) = 353, and the trace's
    multi_tensor_apply kernels ran 320 + 33 = 353 blocks per _foreach_ call."""
    r = _sample(session_store, "train_step")
    assert r.scalars["modelled_share"] >= 0.9
    sig = r.table("per_signature")
    fe = sig[sig["name"].str.startswith("aten::_foreach_")].set_index("name")
    n = 21_006_336
    assert (fe["shapes_source"] == "accumulate_grad").all()
    assert json.loads(fe.loc["aten::_foreach_sqrt", "input_dims"])[0].__len__() == 51
    assert fe.loc["aten::_foreach_sqrt", "flops"] == n
    assert fe.loc["aten::_foreach_sqrt", "bytes"] == 2 * n * 4        # read v, write sqrt(v)
    assert fe.loc["aten::_foreach_lerp_", "bytes"] == 3 * n * 4       # m, g read; m written
    assert fe.loc["aten::_foreach_addcmul_", "bytes"] == 3 * n * 4    # v, g read (g twice: once); v written
    assert fe.loc["aten::_foreach_addcdiv_", "bytes"] == 4 * n * 4    # p, m, denom read; p written
    assert fe.loc["aten::_foreach_mul_", "calls"] == 2 and fe.loc["aten::_foreach_mul_", "bytes"] == 2 * 2 * n * 4
    assert r.table("unmodelled").empty


def test_ddp_ranks_lists_per_step(session_store):
    """Two optimizer steps in one trace: each step's lists come from its own backward (48 gradients per
    step on the DDP model), so every _foreach_ call is modelled with the same N."""
    r = _sample(session_store, "ddp_rank0")
    i = r.table("per_instance")
    fe = i[i["name"].astype(str).str.startswith("aten::_foreach_")]
    assert len(fe) == 16 and fe["bytes"].notna().all()
    assert set(fe["flops"]) == {int(fe["flops"].iloc[0])}
    assert r.scalars["above_peak_unexplained"] == 0


# ---------------------------------------------------------------- bounded per_instance


def test_per_instance_bounded_by_signature(session_store):
    with open_store(session_store.db, read_only=True) as s:
        row = s.query("SELECT trace_id FROM traces WHERE name = 'llama_prefill_b1'")
        if not len(row):
            pytest.fail("llama_prefill_b1 sample not present")
        t = row.iloc[0]["trace_id"]
        full, top2, dflt = (bandwidth(s, t, instances="all"), bandwidth(s, t, instances=2), bandwidth(s, t))
    a = full.table("per_instance")
    # the reference: per signature, the 2 instances with the most GPU time, ties to the lower op id
    want = (a.sort_values(["signature", "gpu_ns", "op_id"], ascending=[True, False, True])
            .groupby("signature").head(2).sort_values("op_id"))
    b = top2.table("per_instance")
    assert list(b["op_id"]) == list(want["op_id"]) and len(b) < len(a)
    assert (b.groupby("signature").size() <= 2).all()
    assert len(dflt.table("per_instance")) == len(a.groupby("signature").head(5))
    # every other number covers all instances
    assert top2.scalars == {**full.scalars, "instances_shown": len(b)}
    assert full.scalars["instances_shown"] == full.scalars["instances"] == len(a)


def test_cli_instances_option(session_store):
    t = next(iter(session_store.ids.values()))
    run = CliRunner()
    base = ["analyze", "bandwidth", t, "--format", "json", "--db", str(session_store.db)]
    one = json.loads(run.invoke(cli, base + ["-o", "instances=1"]).stdout)
    every = json.loads(run.invoke(cli, base + ["-o", "instances=all"]).stdout)
    assert len(one["per_instance"]) == one["signatures"] and len(every["per_instance"]) == every["instances"]
    bad = run.invoke(cli, base + ["-o", "instances=lots"])
    assert bad.exit_code != 0 and "instances must be" in (bad.stderr or bad.output)
