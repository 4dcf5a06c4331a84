"""bandwidth analysis: operator rules checked against hand arithmetic (written beside each case), a
hand-built trace end to end, the device-peak table, and properties on every sample trace."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import ROOT
from storage.kineto_build import kern, rt, write_trace, x
from stores import empty

from kernelscope.analysis.bandwidth import bandwidth, load_peaks, match_device
from kernelscope.analysis.opmodel import (
    KERNEL_DTYPE_PATTERNS,
    MIXED,
    element_size_hint,
    infer_input_types,
    kernel_name_dtype,
    model_op,
)
from kernelscope.cli import cli
from kernelscope.errors import UsageError
from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.store import open_store

BF16, F32, I64 = '"c10::BFloat16"', '"float"', '"long int"'


def cost(name, dims, types, strides=None, concrete=None, **kw):
    return model_op(name, json.dumps(dims), "[" + ", ".join(types) + "]",
                    json.dumps(strides) if strides is not None else None,
                    json.dumps(concrete) if concrete is not None else None, **kw)


# ---------------------------------------------------------------- operator rules by hand


def test_broadcast_size1_and_stride0():
    # mul [8,32,128,64] x [1,1,128,64] bf16: out 8*32*128*64 = 2,097,152 elements.
    # bytes = 2,097,152*2 (a) + 128*64*2 = 16,384 (b, read once) + 2,097,152*2 (out) = 8,404,992
    c = cost("aten::mul", [[8, 32, 128, 64], [1, 1, 128, 64]], [BF16, BF16],
             [[262144, 8192, 64, 1], [8192, 8192, 64, 1]], ["", ""])
    assert (c.flops, c.bytes, c.tensor) == (2_097_152, 8_404_992, False)
    # add [4,1024] + [4,1024] expanded from one row (strides [0,1]) fp32: the expanded input costs 1024
    # elements: 4096*4 + 1024*4 + 4096*4 (out) = 36,864 bytes; 4096 FLOPs
    c = cost("aten::add", [[4, 1024], [4, 1024], []], [F32, F32, '"Scalar"'], [[1024, 1], [0, 1], []])
    assert (c.flops, c.bytes) == (4096, 36_864)
    # a wrapped Python float does not widen bf16: add [1024] bf16 + 0-dim double -> bf16 out
    # 1024*2 + 1*8 + 1024*2 = 4104
    c = cost("aten::add", [[1024], [], []], [BF16, '"double"', '"Scalar"'])
    assert c.bytes == 4104
    # comparison writes bool: ne [8,128] int64 vs scalar: 1024*8 + 1024*1 = 9216
    assert cost("aten::ne", [[8, 128], []], [I64, '"Scalar"'], [[128, 1], []]).bytes == 9216


def test_transpose_is_free_and_strides_do_not_discount_permutations():
    assert (cost("aten::transpose", [[64, 32], [], []], [F32, '"Scalar"', '"Scalar"']).bytes, 0) == (0, 0)
    # contiguous copy of a transposed [64,32] fp32 view: strides [1,64] (no zero) -> all 2048 elements:
    # 2048*4 read + 2048*4 written = 16,384
    c = cost("aten::copy_", [[64, 32], [64, 32], []], [F32, F32, '"Scalar"'], [[32, 1], [1, 64], []])
    assert (c.flops, c.bytes) == (0, 16_384)
    # mm with a transposed B (strides [1, K]) costs the same as with a contiguous B
    a = cost("aten::mm", [[128, 256], [256, 64]], [BF16, BF16], [[256, 1], [1, 256]])
    b = cost("aten::mm", [[128, 256], [256, 64]], [BF16, BF16], [[256, 1], [64, 1]])
    # 2*128*64*256 = 4,194,304 FLOPs; (128*256 + 256*64 + 128*64)*2 = (32768+16384+8192)*2 = 114,688 B
    assert (a.flops, a.bytes) == (b.flops, b.bytes) == (4_194_304, 114_688)
    assert a.tensor and a.dtype == "bf16"


def test_addmm_with_and_without_bias():
    dims = [[256], [512, 256], [256, 256], [], []]
    types = [F32, F32, F32, '"Scalar"', '"Scalar"']
    # beta = 1: 2*512*256*256 = 67,108,864 + bias add 512*256 = 131,072 -> 67,239,936 FLOPs
    # bytes (256 bias + 512*256 A + 256*256 B + 512*256 out) * 4 = 327,936 * 4 = 1,311,744
    c = cost("aten::addmm", dims, types, None, ["", "", "", "1", "1"])
    assert (c.flops, c.bytes) == (67_239_936, 1_311_744)
    # beta = 0: the bias is neither added nor read: 67,108,864 FLOPs, (131072+65536+131072)*4 = 1,310,720 B
    c = cost("aten::addmm", dims, types, None, ["", "", "", "0", "1"])
    assert (c.flops, c.bytes) == (67_108_864, 1_310_720)
    # fp32 GEMM runs against the fp32 peak unless TF32 was allowed
    assert c.dtype == "fp32" and cost("aten::addmm", dims, types, None, ["", "", "", "0", "1"],
                                      tf32_matmul=True).dtype == "tf32"
    # linear [4,128,256] x W[512,256] bf16: M = 512, N = 512, K = 256 -> 2*512*512*256 = 134,217,728;
    # with bias + 512*512 = 262,144 FLOPs and + 512*2 bytes
    no_bias = cost("aten::linear", [[4, 128, 256], [512, 256], []], [BF16, BF16, '""'])
    bias = cost("aten::linear", [[4, 128, 256], [512, 256], [512]], [BF16, BF16, BF16])
    assert no_bias.flops == 134_217_728 and bias.flops == 134_217_728 + 262_144
    # (512*256 + 512*256 + 512*512)*2 = 1,048,576 bytes without bias
    assert no_bias.bytes == 1_048_576 and bias.bytes == 1_048_576 + 1024


def test_causal_gqa_attention():
    # _cudnn_attention_forward as the llama samples record it: q [8,32,128,64], k/v [8,8,128,64] bf16,
    # compute_log_sumexp False (input 8), is_causal True (input 10).
    dims = [[8, 32, 128, 64], [8, 8, 128, 64], [8, 8, 128, 64]] + [[]] * 10
    types = [BF16] * 3 + ['""'] * 3 + ['"Scalar"'] * 7
    conc = ["", "", "", "", "", "", "128", "128", "False", "0.", "True", "False", "0.125"]
    c = cost("aten::_cudnn_attention_forward", dims, types, None, conc)
    # FLOPs: 2*B*Hq*Lq*Lk*(D+Dv) = 2*8*32*128*128*128 = 1,073,741,824, halved (causal) = 536,870,912
    assert c.flops == 536_870_912 and c.tensor and c.dtype == "bf16"
    # bytes: q 8*32*128*64*2 = 4,194,304; k and v 8*8*128*64*2 = 1,048,576 each (their own 8 heads);
    # out 8*32*128*64*2 = 4,194,304 -> 10,485,760
    assert c.bytes == 10_485_760
    conc[10] = "False"
    assert cost("aten::_cudnn_attention_forward", dims, types, None, conc).flops == 1_073_741_824
    # xformers layout [B, L, H, D], custom_mask_type 1 = causal; fp32, no lse: same arithmetic with
    # B=1, Hq=4, Hk=2, L=256, D=64: 2*1*4*256*256*128/2 = 33,554,432; bytes (65536 + 2*32768 + 65536)*4
    dims = [[1, 256, 4, 64], [1, 256, 2, 64], [1, 256, 2, 64]] + [[]] * 11
    conc = [""] * 8 + ["0.", "1", "False", "", "", ""]
    c = cost("aten::_efficient_attention_forward", dims, [F32] * 3 + ['""'] * 11, None, conc)
    assert (c.flops, c.bytes) == (33_554_432, 786_432)


def test_cat_and_embedding():
    # cat of [8,1] and an [8,128] expanded from one row (strides [0,1]) int64 (kernel OpaqueType<8u>):
    # out 8 + 1024 = 1032 elements, reads 8 + 128 distinct -> (136 + 1032)*8 = 9344 bytes
    dims, types = [[[8, 1], [8, 128]], []], ['"TensorList"', '"Scalar"']
    strides = [[[1, 1], [0, 1]], []]
    hint = element_size_hint("void at::native::CatArrayBatchedCopy<at::native::OpaqueType<8u>, unsigned int>")
    assert hint == 8
    assert cost("aten::cat", dims, types, strides, ["", "-1"], elem_size_hint=hint).bytes == 9344
    # without a kernel naming the element size the dtype is unknown: not modelled, with a reason
    c = cost("aten::cat", dims, types, strides, ["", "-1"])
    assert c.bytes is None and "dtype" in c.reason
    # embedding: table [32000,4096] bf16, indices [2,16]: 32 rows gathered, not the table:
    # 32*8 (indices) + 32*4096*2 (rows read) + 32*4096*2 (out) = 256 + 524,288 = 524,544
    c = cost("aten::embedding", [[32000, 4096], [2, 16], [], [], []], [BF16, I64, '"Scalar"'] + ['"Scalar"'] * 2)
    assert (c.flops, c.bytes) == (0, 524_544)
    # gather with an index expanded over columns (strides [1,0]), as the llama samples embed tokens:
    # 1024 distinct int64 indices = 8192 B + 1024*2048*2*2 (gathered + written) = 8,396,800
    c = cost("aten::gather", [[128256, 2048], [], [1024, 2048], [], [1024, 2048]],
             [BF16, '"Scalar"', I64, '"Scalar"', BF16], [[2048, 1], [], [1, 0], [], [2048, 1]])
    assert c.bytes == 8_396_800
    # gathering more rows than the table holds (qwen2_sweep batch 32: 16,384 rows of a [4096,1024] bf16 table):
    # the table is read at most once: 16384*8 (indices) + 4096*1024*2 (table) + 16384*1024*2 (out) = 42,074,112
    c = cost("aten::gather", [[4096, 1024], [], [16384, 1024], [], [16384, 1024]],
             [BF16, '"Scalar"', I64, '"Scalar"', BF16], [[1024, 1], [], [1, 0], [], [1024, 1]])
    assert c.bytes == 42_074_112


def test_casts_reductions_and_unmodelled():
    # _to_copy fp32 [1024,1024] to dtype code 15 (bf16): 4 MiB read + 2 MiB written = 6,291,456
    c = cost("aten::_to_copy", [[1024, 1024], [], [], [], [], [], []], [F32] + ['"Scalar"'] * 6,
             None, ["", "15", "", "", "", "", ""])
    assert c.bytes == 6_291_456
    # mean over the last dim of [8,128,2048] fp32: read 8 MiB, write 1024*4 -> 8,392,704; 2,097,152 FLOPs
    c = cost("aten::mean", [[8, 128, 2048], [], [], []], [F32, '"ScalarList"', '"Scalar"', '""'],
             None, ["", "[-1]", "True", ""])
    assert (c.flops, c.bytes) == (2_097_152, 8_392_704)
    # foreach ops: Kineto records no shapes for tensor lists -> not modelled, reason given
    c = cost("aten::_foreach_add_", [[], []], ['"TensorList"', '"Scalar"'])
    assert c.bytes is None and "tensor-list" in c.reason
    assert cost("aten::frobnicate", [[4]], [F32]).reason == "no rule for this operator"
    assert cost("triton_poi_fused_0", [[4]], [F32]).bytes is None


# ---------------------------------------------------------------- device peaks


@pytest.mark.parametrize("name, device", [
    ("NVIDIA H200", "NVIDIA H200 SXM"), ("NVIDIA H200 NVL", "NVIDIA H200 NVL"),
    ("NVIDIA GH200 480GB", "NVIDIA GH200 96GB HBM3"), ("NVIDIA GH200 144G HBM3e", "NVIDIA GH200 144GB HBM3e"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB"), ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"), ("NVIDIA L4", "NVIDIA L4"),
    ("NVIDIA L40S", "NVIDIA L40S"), ("NVIDIA B200", "NVIDIA B200"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"), ("AMD Instinct MI250X", "AMD Instinct MI250X (one GCD)"),
    ("Tesla V100-SXM2-32GB", "NVIDIA V100 SXM2"), ("Tesla V100-PCIE-16GB", "NVIDIA V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", "NVIDIA V100S PCIe"),  # names as Kineto writes them (HTA's public V100 trace)
    ("NVIDIA L40", None), ("Test GPU", None),
])
def test_device_matching(name, device):
    row = match_device(name, load_peaks())
    assert (row["device"] if row else None) == device


def test_peak_table_rows_are_sourced_and_dense():
    for r in load_peaks():
        assert r["source"] and ("datasheet" in r["source"].lower() or "data sheet" in r["source"].lower())
        assert r["mem_bw_gbps"] > 0 and r["fp32_tflops"] > 0
        # dense tensor-core peaks: bf16 above fp32 matrix (TF32) above plain fp32; pre-Ampere rows (V100) have
        # fp16 tensor cores only: no bf16 and no TF32, fp16 above plain fp32
        if r["bf16_tflops"] is None:
            assert r["fp32_matrix_tflops"] is None and r["fp16_tflops"] > r["fp32_tflops"], r["device"]
        else:
            assert r["bf16_tflops"] > r["fp32_matrix_tflops"] >= r["fp32_tflops"]


def test_user_table_overrides_a_package_row(tmp_path, monkeypatch):
    # a user row for a device the package knows wins (searched first); empty cells are unknown
    user = tmp_path / "mine.csv"
    user.write_text("device,match,mem_bw_gbps,fp32_tflops,bf16_tflops,l2_mb,source\n"
                    "My H200,H200,4000,60,900,,nvbandwidth on our node\n")
    row = match_device("NVIDIA H200", load_peaks(user))
    assert (row["device"], row["mem_bw_gbps"], row["l2_mb"], row["source"]) == (
        "My H200", 4000.0, None, "nvbandwidth on our node")
    monkeypatch.setenv("KERNELSCOPE_DEVICE_PEAKS", str(user))
    assert match_device("NVIDIA H200", load_peaks())["device"] == "My H200"
    assert match_device("NVIDIA H100 PCIe", load_peaks())["device"] == "NVIDIA H100 PCIe"  # others untouched


def test_bad_peak_table_is_a_user_error(tmp_path, monkeypatch):
    bad = tmp_path / "p.csv"
    bad.write_text("device,match\nX,(\n")
    with pytest.raises(UsageError, match="lacks the column"):
        load_peaks(bad)
    monkeypatch.setenv("KERNELSCOPE_DEVICE_PEAKS", str(tmp_path / "missing.csv"))
    with pytest.raises(UsageError, match="cannot read"):
        load_peaks()


# ---------------------------------------------------------------- a hand-built trace end to end


def _args(dims, types):
    return {"Input Dims": dims, "Input type": types, "Input Strides": [], "Concrete Inputs": [""] * len(dims)}


def _events():
    """aten::mm bf16 [1024,1024]x[1024,1024] launches k1 [10,14] us (stream 7) and k2 [12,16] us
    (stream 8): union [10,16] = 6000 ns. aten::add bf16 [1048576]+[1048576] launches k3 [20,22] us =
    2000 ns. aten::frobnicate (no rule) launches k4 [30,35] us = 5000 ns. aten::relu bf16 [1024] launches
    k5 [40,44], k6 [41,42] (inside k5, stream 8) and k7 [50,51]: union 4 + 1 us = 5000 ns."""
    return [
        x("cpu_op", "aten::mm", 0, 9, **{"External id": 1},
          **_args([[1024, 1024], [1024, 1024]], ["c10::BFloat16", "c10::BFloat16"])),
        rt("cudaLaunchKernel", 1, 1, 11, 1), rt("cudaLaunchKernel", 3, 1, 12, 1),
        x("cpu_op", "aten::add", 17, 2, **{"External id": 2},
          **_args([[1048576], [1048576], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"])),
        rt("cudaLaunchKernel", 17.5, 1, 13, 2),
        x("cpu_op", "aten::frobnicate", 25, 2, **{"External id": 3}, **_args([[4]], ["float"])),
        rt("cudaLaunchKernel", 25.5, 1, 14, 3),
        kern("k1", 10, 4, 11, 1), kern("k2", 12, 4, 12, 1, stream=8),
        kern("k3", 20, 2, 13, 2), kern("k4", 30, 5, 14, 3),
        x("cpu_op", "aten::relu", 38, 3, **{"External id": 4}, **_args([[1024]], ["c10::BFloat16"])),
        rt("cudaLaunchKernel", 38.5, 0.5, 15, 4), rt("cudaLaunchKernel", 39.2, 0.5, 16, 4),
        rt("cudaLaunchKernel", 40, 0.5, 17, 4),
        kern("k5", 40, 4, 15, 4), kern("k6", 41, 1, 16, 4, stream=8), kern("k7", 50, 1, 17, 4),
    ]


@pytest.fixture
def hand(tmp_path):
    def make(device_name):
        path = write_trace(tmp_path / f"bw_{device_name.replace(' ', '_')}.json", _events(),
                           deviceProperties=[{"id": 0, "name": device_name}])
        s = open_store(empty(tmp_path / f"{device_name.replace(' ', '_')}.duckdb"))
        res = ingest_file(s, path)
        assert res.status == "ingested", res.message
        return s, res.trace_id
    return make


def test_hand_trace_rates_and_bound(hand):
    store, t = hand("NVIDIA H200")
    r = bandwidth(store, t)
    rows = r.table("per_instance").set_index("name")
    mm, add = rows.loc["aten::mm"], rows.loc["aten::add"]
    # mm: 2*1024^3 = 2,147,483,648 FLOPs, 3*1024*1024*2 = 6,291,456 bytes over the union 6000 ns
    assert (mm["gpu_ns"], mm["flops"], mm["bytes"], mm["activities"]) == (6000, 2_147_483_648, 6_291_456, 2)
    assert mm["achieved_gbps"] == pytest.approx(6_291_456 / 6000)  # 1048.576 GB/s
    assert mm["achieved_tflops"] == pytest.approx(2_147_483_648 / 6000 / 1000)  # 357.91 TFLOP/s
    assert mm["pct_peak_bw"] == pytest.approx(100 * 1048.576 / 4800)  # 21.85 %
    assert mm["pct_peak_flops"] == pytest.approx(100 * 357.913941 / 989.5)  # bf16 dense: 36.17 %
    # intensity 2^31 / 6,291,456 = 341.3 FLOP/B above the bf16 ridge 989.5e3/4800 = 206.1 -> compute
    assert mm["intensity"] == pytest.approx(341.333333) and mm["bound"] == "compute"
    # add: 1,048,576 FLOPs, 3*2 MiB = 6,291,456 B in 2000 ns = 3145.728 GB/s = 65.536 % of 4800
    assert add["pct_peak_bw"] == pytest.approx(65.536) and add["bound"] == "memory"
    assert add["pct_peak_flops"] == pytest.approx(100 * 1_048_576 / 2000 / 1000 / 67)  # fp32 vector peak
    # relu: union of [40,44], [41,42] (nested) and [50,51] us = 5000 ns; 1024*2*2 = 4096 bytes
    relu = rows.loc["aten::relu"]
    assert (relu["gpu_ns"], relu["activities"], relu["bytes"]) == (5000, 3, 4096)
    s = r.scalars
    # modelled 6000 + 2000 + 5000 of 18000 ns
    assert (s["gpu_ns"], s["modelled_gpu_ns"], s["unattributed_gpu_ns"]) == (18000, 13000, 0)
    assert s["modelled_share"] == pytest.approx(13000 / 18000)
    assert s["bytes"] == 2 * 6_291_456 + 4096
    assert s["achieved_gbps"] == pytest.approx((2 * 6_291_456 + 4096) / 13000)
    un = r.table("unmodelled")
    assert list(un["name"]) == ["aten::frobnicate"] and list(un["gpu_ns"]) == [5000]
    assert s["device_peaks"]["0"]["device"] == "NVIDIA H200 SXM" and not r.warnings
    sig = r.table("per_signature").set_index("name")
    assert sig.loc["aten::mm", "calls"] == 1 and sig.loc["aten::mm", "gpu_ns"] == 6000


def _copies(path, kinds):
    """aten::copy_ of a 4 MiB fp32 tensor (8 MiB read + written) per entry of ``kinds`` (a memcpy name, or None: a
    kernel), each 60 us of GPU time."""
    dims, types = [[1024, 1024], [1024, 1024], []], ["float", "float", "Scalar"]
    ev = []
    for i, memcpy in enumerate(kinds):
        ts = 10 + 100 * i
        ev += [x("cpu_op", "aten::copy_", ts, 80, **{"External id": i + 1}, **_args(dims, types)),
               rt("cudaMemcpyAsync" if memcpy else "cudaLaunchKernel", ts + 1, 2, 20 + i, i + 1),
               kern(memcpy or "copy_kernel", ts + 5, 60, 20 + i, i + 1, cat="gpu_memcpy" if memcpy else "kernel")]
    return write_trace(path, ev, deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])


def test_a_host_device_copy_is_not_measured_against_the_dram_peak(tmp_path):
    """aten::copy_ whose GPU work is a "Memcpy HtoD (Pageable -> Device)" (weights moved by model.cuda() in a
    whole-script profile: 46% of GPT-2's GPU time on an H200, reported at 0% of the DRAM peak with a 'fuse it'
    recommendation) is unmodelled with the host-link reason; the same copy as a DtoD memcpy and as a kernel stays
    modelled (a signature holding both has no bytes, as any partly unmodelled signature)."""
    from kernelscope.analysis.bandwidth import HOST_COPY_REASON
    from kernelscope.analysis.recommend import recommend

    store = open_store(empty(tmp_path / "copies.duckdb"))
    t = ingest_file(store, _copies(tmp_path / "c.json", ["Memcpy HtoD (Pageable -> Device)",
                                                         "Memcpy DtoD (Device -> Device)", None])).trace_id
    r = bandwidth(store, t)
    un = r.table("unmodelled")
    assert list(zip(un["name"], un["calls"], un["gpu_ns"], un["reason"])) == [
        ("aten::copy_", 1, 60_000, HOST_COPY_REASON)]
    inst = r.table("per_instance")
    assert list(inst["gpu_ns"]) == [60_000] * 3
    assert [None if pd.isna(b) else int(b) for b in inst["bytes"]] == [None, 2 * 4 * 2**20, 2 * 4 * 2**20]
    assert (r.scalars["gpu_ns"], r.scalars["modelled_gpu_ns"]) == (180_000, 120_000)
    # alone, the HtoD copy (8 MiB / 60 us = 140 GB/s, 2.9% of the H200's 4800 GB/s, all of the GPU time) is no
    # low-bandwidth finding; the same copy as a kernel is one
    for kind, rules in (("Memcpy HtoD (Pageable -> Device)", []), (None, ["low_bandwidth"])):
        one = open_store(empty(tmp_path / f"{bool(kind)}.duckdb"))
        t = ingest_file(one, _copies(tmp_path / f"{bool(kind)}.json", [kind])).trace_id
        assert list(recommend(one, t).table("findings")["rule"]) == rules


def test_unknown_device_user_table_and_measured_bytes(hand, tmp_path, monkeypatch):
    store, t = hand("Test GPU")
    r = bandwidth(store, t)
    mm = r.table("per_instance").set_index("name").loc["aten::mm"]
    assert mm["achieved_gbps"] == pytest.approx(1048.576)  # rates still computed
    assert pd.isna(mm["pct_peak_bw"]) and pd.isna(mm["pct_peak_flops"]) and pd.isna(mm["bound"])
    assert len([w for w in r.warnings if "not in the device-peak table" in w]) == 1
    # a user table searched first: "Test GPU" with 2000 GB/s -> mm 1048.576/2000 = 52.4288 %
    user = tmp_path / "peaks.csv"
    user.write_text("device,match,mem_bw_gbps,fp32_tflops,bf16_tflops,source\n"
                    "Test,Test GPU,2000,10,100,my lab measurement\n")
    monkeypatch.setenv("KERNELSCOPE_DEVICE_PEAKS", str(user))
    r = bandwidth(store, t)
    mm = r.table("per_instance").set_index("name").loc["aten::mm"]
    assert mm["pct_peak_bw"] == pytest.approx(52.4288) and mm["pct_peak_flops"] == pytest.approx(357.913941)
    # above a too-small peak is flagged, not hidden: mm at 357.9 % of 100 TFLOP/s and add at
    # 3145.728/2000 = 157 % of the bandwidth (this table gives no cache size to explain it)
    assert r.scalars["above_peak_unexplained"] == 2
    # measured bytes beside the model: 3,000,000 B over 6000 ns = 500 GB/s
    op_id = int(r.table("per_instance").set_index("name").loc["aten::mm", "op_id"])
    r = bandwidth(store, t, measured_bytes=pd.DataFrame({"op_id": [op_id], "measured_bytes": [3_000_000]}))
    mm = r.table("per_instance").set_index("name").loc["aten::mm"]
    assert mm["measured_gbps"] == pytest.approx(500.0) and mm["bytes"] == 6_291_456
    # modelled / measured = 6,291,456 / 3,000,000 = 2.097152; instances without a measurement: null
    assert mm["modelled_over_measured"] == pytest.approx(2.097152)
    assert r.table("per_instance").set_index("name").loc["aten::add", "measured_bytes"] is pd.NA
    assert r.trust["measured_from"] == "argument" and r.scalars["measured_instances"] == 1


def test_calls_recorded_without_shapes_say_so_in_unmodelled(tmp_path):
    """A trace of torch.profiler's defaults (HTA's ns_resolution test trace, a V100 ResNet step) listed its
    unmodelled operators as "no rule for this operator" (convolution_backward) or "input 0 is not a recorded
    tensor" (cudnn_convolution): a newcomer reads that kernelscope lacks rules. Without shapes the reason is
    that; the same trace with shapes models mm and add and keeps frobnicate's "no rule"."""
    from kernelscope.analysis.bandwidth import NO_SHAPES_REASON

    bare = [{**e, "args": {k: v for k, v in e.get("args", {}).items() if k not in _args([], [])}} for e in _events()]
    store = open_store(empty(tmp_path / "s.duckdb"))
    t = ingest_file(store, write_trace(tmp_path / "bare.json", bare,
                                       deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])).trace_id
    r = bandwidth(store, t)
    un = r.table("unmodelled")
    assert r.scalars["modelled_gpu_ns"] == 0
    assert sorted(un["name"]) == ["aten::add", "aten::frobnicate", "aten::mm", "aten::relu"]
    assert set(un["reason"]) == {NO_SHAPES_REASON} == {"input shapes not recorded (torch.profiler records them "
                                                        "with record_shapes=True)"}
    t2 = ingest_file(store, write_trace(tmp_path / "shapes.json", _events(),
                                        deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])).trace_id
    assert list(bandwidth(store, t2).table("unmodelled")["reason"]) == ["no rule for this operator"]
    # a shapeless operator in a trace with shapes is a region (a compiled Llama on an H200: "Torch-Compiled Region:
    # 1/0" said "input shapes not recorded ... record_shapes=True", which the run had on)
    from kernelscope.analysis.bandwidth import REGION_REASON

    region = [{**e, "args": {k: v for k, v in e["args"].items() if k not in _args([], [])}}
              if e.get("name") == "aten::frobnicate" else e for e in _events()]
    t3 = ingest_file(store, write_trace(tmp_path / "region.json", region,
                                        deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])).trace_id
    un = bandwidth(store, t3).table("unmodelled")
    assert list(zip(un["name"], un["reason"])) == [("aten::frobnicate", REGION_REASON)]


def test_above_the_dram_peak_by_less_than_the_cache_holds_is_cache_served(tmp_path):
    """BERT fine-tuning (fp16 autocast, H200): the fp32 residual ``add_`` of two [32, 256, 768] tensors moves
    3 x 25,165,824 = 75,497,472 modelled bytes in ~15.5 us, 101.5% of the 4,800 GB/s DRAM peak. Its bytes do
    not all fit in the 50 MiB L2, but at its peak DRAM moves 4800 x 15,500 = 74,400,000 B in that time, and the
    other 1,097,472 B fit in the cache: explained, not a modelling error. The same call in 4 us would need
    75,497,472 - 19,200,000 = 56,297,472 B (> 52,428,800) from the cache: unexplained."""
    dims, types = [[32, 256, 768], [32, 256, 768], []], ["float", "float", "Scalar"]
    ev = []
    for i, dur in enumerate((15.5, 4.0)):
        ts = 10 + 100 * i
        ev += [x("cpu_op", "aten::add_", ts, 50, **{"External id": i + 1}, **_args(dims, types)),
               rt("cudaLaunchKernel", ts + 1, 2, 20 + i, i + 1), kern("add_kernel", ts + 5, dur, 20 + i, i + 1)]
    store = open_store(empty(tmp_path / "s.duckdb"))
    t = ingest_file(store, write_trace(tmp_path / "a.json", ev,
                                       deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])).trace_id
    r = bandwidth(store, t)
    assert (r.scalars["above_peak"], r.scalars["above_peak_cache"], r.scalars["above_peak_unexplained"]) == (2, 1, 1)
    inst = r.table("per_instance").set_index("gpu_ns")
    near, far = inst.loc[15_500], inst.loc[4_000]
    assert near["achieved_gbps"] == pytest.approx(75_497_472 / 15_500)  # 4870.8 GB/s
    assert pd.isna(near["pct_peak_bw"]) and not near["fits_cache"]
    assert near["note"] == ("pct_peak_bw left null: the modelled bytes moved at 101% of the DRAM peak, which is not "
                            "DRAM bandwidth alone: at its peak DRAM moves 74.4 of the 75.5 MB in that time, and the "
                            "other 1.1 MB fit in the 50 MiB last-level cache, so data written just before was read "
                            "from cache")
    assert far["pct_peak_bw"] == pytest.approx(100 * 75_497_472 / 4_000 / 4800)  # 393%, kept
    assert far["note"] == "above the DRAM peak without a cache explanation: a modelling or peak-table error"
    # one signature holds both calls: not every call is explained, so its (summed) rate keeps its percentage
    sig = r.table("per_signature").iloc[0]
    assert sig["calls"] == 2 and sig["pct_peak_bw"] == pytest.approx(100 * 2 * 75_497_472 / 19_500 / 4800)
    assert any(w.startswith("1 operator instances move their modelled bytes faster") for w in r.warnings)
    assert any(w.startswith("1 operator instances exceed 100% of a device peak") for w in r.warnings)


# ---------------------------------------------------------------- samples


def _samples(session_store):
    out = {}
    with open_store(session_store.db, read_only=True) as s:
        for tid, name in s.query("SELECT trace_id, name FROM traces").itertuples(index=False):
            if tid in session_store.ids.values():
                out[name] = bandwidth(s, tid, instances="all")
    return out


@pytest.fixture(scope="module")
def samples(session_store):
    got = _samples(session_store)
    if not any(n.startswith("llama_prefill") for n in got):
        pytest.fail("sample traces not present")
    return got


def test_no_operator_above_peak_on_samples(samples):
    """No FLOP rate above the dtype's dense peak anywhere; a byte rate above the DRAM peak only for
    operators whose whole modelled traffic fits in the last-level cache (inputs just written by the
    previous operator are read from cache)."""
    seen_cached = 0
    for name, r in samples.items():
        for table in ("per_instance", "per_signature"):
            i = r.table(table)
            assert not (i["pct_peak_flops"] > 100).fillna(False).any(), name
            assert not (i["pct_peak_bw"] > 100).fillna(False).any(), name  # METRICS.md: above 100% is a bug
            # cache-served rows: rate above the DRAM peak, percentage null, said in words on exactly those
            rate_over = (i["achieved_gbps"] > i["peak_gbps"]).fillna(False).to_numpy(bool)
            assert not (rate_over & ~i["fits_cache"].to_numpy(bool)).any(), name
            assert i.loc[rate_over, "pct_peak_bw"].isna().all(), name
            notes = i["note"]
            assert notes[rate_over].str.contains("is not DRAM bandwidth").all(), name
            assert notes[~rate_over].isna().all(), name
            assert set(i["bound"].dropna()) <= {"memory", "compute"}
        assert r.scalars["above_peak_unexplained"] == 0, name
        assert r.scalars["above_peak"] == r.scalars["above_peak_cache"] == int(
            (r.table("per_instance")["achieved_gbps"] > r.table("per_instance")["peak_gbps"]).fillna(False).sum()), name
        seen_cached += r.scalars["above_peak_cache"]
        if r.scalars["above_peak_cache"]:
            assert any("pct_peak_bw is null" in w for w in r.warnings)
    assert seen_cached > 0  # the samples do have cache-resident rows (llama b16, train_step, DDP)


def test_modelled_share_on_sweep(samples):
    sweep = {n: r for n, r in samples.items() if n.startswith("llama_prefill")}
    assert len(sweep) >= 4
    for name, r in sweep.items():
        assert r.scalars["modelled_share"] >= 0.9, (name, r.table("unmodelled").head())
        # GEMMs of a bf16 model: bf16 tensor-core work, compute-bound at large batch
        mm = r.table("per_signature")
        assert (mm.loc[mm["name"] == "aten::mm", "dtype"] == "bf16").all()


def test_train_step_modelled_share(samples):
    """train_step: >= 90% of GPU time modelled, the AdamW _foreach_ ops included (their tensor lists come
    from the AccumulateGrad gradients: test_bandwidth_foreach.py checks their numbers by hand)."""
    r = samples.get("train_step")
    if r is None:
        pytest.fail("no train_step sample")
    assert r.scalars["modelled_share"] >= 0.9
    assert r.trust["instances_lists_from_accumulate_grad"] == 8  # mul_ x2, lerp_, addcmul_, sqrt, div_, add_, addcdiv_


def test_cli_json_and_keys_documented(session_store):
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    t = next(iter(session_store.ids.values()))
    res = CliRunner().invoke(cli, ["analyze", "bandwidth", t, "--format", "json", "--db", str(session_store.db)])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    rows = got["per_instance"]
    for key in ("name", "flops", "bytes", "gpu_ns", "achieved_gbps", "achieved_tflops", "pct_peak_bw",
                "pct_peak_flops", "bound"):
        assert all(key in row for row in rows), key
    keys = set(got) | set(got["trust"])
    for table in ("per_instance", "per_signature", "unmodelled"):
        for row in got[table][:1]:
            keys |= set(row)
    for dev in got["device_peaks"].values():
        keys |= set(dev or {})
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"undocumented bandwidth keys: {missing}"


def test_convolution_baddbmm_norm_softmax():
    # cudnn_convolution(x [8,3,32,32], w [16,3,3,3], padding [1,1], stride [1,1], dilation [1,1], groups 1)
    # bf16: output 32x32; 2*8*16*(32*32)*3*(3*3) = 7,077,888 FLOPs;
    # bytes (8*3*1024 + 16*27 + 8*16*1024)*2 = (24576 + 432 + 131072)*2 = 312,160
    c = cost("aten::cudnn_convolution", [[8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], [], [], []],
             [BF16, BF16] + ['"ScalarList"'] * 3 + ['"Scalar"'] * 4, None,
             ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"])
    assert (c.flops, c.bytes, c.dtype) == (7_077_888, 312_160, "bf16")
    # aten::convolution stride 2, no padding, bias [16]: output (32-2-1)//2+1 = 15 -> 15x15;
    # 2*8*16*225*27 = 1,555,200 + bias 8*16*225 = 28,800 -> 1,584,000 FLOPs
    c = cost("aten::convolution", [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []],
             [F32, F32, F32] + ['"ScalarList"'] * 3 + ['"Scalar"', '"ScalarList"', '"Scalar"'], None,
             ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"])
    assert c.flops == 1_584_000 and c.dtype == "tf32"  # cuDNN may use TF32 by default
    # baddbmm(self [4,1,64], b1 [4,32,16], b2 [4,16,64], beta 1) fp32: 2*4*32*64*16 = 262,144 + 4*32*64
    # = 8,192 -> 270,336 FLOPs; bytes (256 + 2048 + 4096 + 8192)*4 = 58,368
    c = cost("aten::baddbmm", [[4, 1, 64], [4, 32, 16], [4, 16, 64], [], []],
             [F32, F32, F32, '"Scalar"', '"Scalar"'], None, ["", "", "", "1", "1"])
    assert (c.flops, c.bytes) == (270_336, 58_368)
    # native_layer_norm [4,128,256] bf16 over [256]: 131,072 elements, 512 rows;
    # bytes 131072*2 (x) + 2*256*2 (w, b) + 131072*2 (out) + 2*512*4 (mean, rstd) = 529,408
    c = cost("aten::native_layer_norm", [[4, 128, 256], [], [256], [256], []],
             [BF16, '"ScalarList"', BF16, BF16, '"Scalar"'], None, ["", "[256]", "", "", "1e-05"])
    assert (c.flops, c.bytes) == (8 * 131_072, 529_408)
    # _softmax [64,1024] bf16 with half_to_float: 65536*2 read + 65536*4 written = 393,216 B; 5*65536 FLOPs
    c = cost("aten::_softmax", [[64, 1024], [], []], [BF16, '"Scalar"', '"Scalar"'], None, ["", "-1", "True"])
    assert (c.flops, c.bytes) == (327_680, 393_216)


def test_grouped_mm_of_a_mixture_of_experts():
    # Mixtral's experts on an H100 (transformers 5.17, torch 2.11): 8,192 routed rows x K 4,096 through 8 experts'
    # [4096, 1024] weights: 2*8192*1024*4096 = 68,719,476,736 FLOPs whichever expert each row went to;
    # bytes (8192*4096 + 8*4096*1024 + 8192*1024)*2 = 150,994,944
    types = [BF16, BF16, '"int"', '""', '""']
    c = cost("aten::_grouped_mm", [[8192, 4096], [8, 4096, 1024], [8], [], []], types)
    assert (c.flops, c.bytes, c.dtype, c.tensor) == (68_719_476_736, 150_994_944, "bf16", True)
    # its weight gradient, 2-D x 2-D split along K by offs: one [4096, 1024] per expert is written,
    # (4096*8192 + 8192*1024 + 8*4096*1024)*2 = 150,994,944 bytes, the same FLOPs
    c = cost("aten::_grouped_mm", [[4096, 8192], [8192, 1024], [8], [], []], types)
    assert (c.flops, c.bytes) == (68_719_476_736, 150_994_944)
    # 3-D x 2-D, offs splits the 80 columns: out [64, 80], 2*64*80*32 = 327,680; (8*64*32 + 32*80 + 64*80)*2
    c = cost("aten::_grouped_mm", [[8, 64, 32], [32, 80], [8], [], []], types)
    assert (c.flops, c.bytes) == (327_680, 48_128)
    # 3-D x 3-D is a batch: 2*8*64*16*32 = 524,288; an output dtype (float, code 6) writes 4-byte elements
    c = cost("aten::_grouped_mm", [[8, 64, 32], [8, 32, 16], [], [], []], types, None, ["", "", "", "", "6"])
    assert (c.flops, c.bytes) == (524_288, (8 * 64 * 32 + 8 * 32 * 16) * 2 + 8 * 64 * 16 * 4)
    # the weight-gradient form needs offs to know how many outputs it writes; shapes that do not chain say so
    assert cost("aten::_grouped_mm", [[64, 32], [32, 16], [], [], []], [BF16, BF16, '""', '""', '""']).reason
    assert "grouped mm shapes" in cost("aten::_grouped_mm", [[64, 32], [8, 16, 16], [8], [], []], types).reason


def test_missing_recorded_inputs_are_unmodelled_not_errors():
    # a trace recorded without shapes: NULL columns arrive as None or NaN
    for missing in (None, float("nan")):
        c = model_op("aten::mm", missing, missing, missing, missing)
        assert c.bytes is None and c.reason
    assert model_op(None, None, None, None, None).bytes is None


def test_out_variant_writes_its_out_tensor():
    # mul(self [4096,1024] fp32, 0-dim double, out=[4096,1024] fp32), as DDP's gradient scaling records
    # it: the out tensor is written, not read: 4096*1024*4 + 8 + 4096*1024*4 = 33,554,440 bytes
    c = cost("aten::mul", [[4096, 1024], [], [4096, 1024]], [F32, '"double"', F32])
    assert (c.flops, c.bytes) == (4_194_304, 33_554_440)
    # where(cond, a, b) has three real inputs: bool 1024 + 2 * 1024*4 read, 1024*4 written = 13,312
    c = cost("aten::where", [[1024], [1024], [1024]], ['"bool"', F32, F32])
    assert c.bytes == 1024 + 3 * 4096
    # div with a rounding mode (a string, not a tensor) is not an out variant: 2*4096 + 4096 = 12,288
    c = cost("aten::div", [[1024], [1024], []], [F32, F32, '"c10::string_view"'], None, ["", "", "floor"])
    assert c.bytes == 12_288


# ---------------------------------------------------------------- dtypes from kernel names


# One kernel name per pattern of KERNEL_DTYPE_PATTERNS (same order), each stating exactly one dtype.
PATTERN_CASES = [
    ("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<__nv_bfloat16>>", "c10::BFloat16"),
    ("sm90_xmma_gemm_bf16bf16_bf16bf16_bf16_tn_n_tilesize128x128x64", "c10::BFloat16"),
    ("void layer_norm_kernel<__half2, __half>", "c10::Half"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn", "c10::Half"),
    ("triton_poi_fused_add_float16_0", "c10::Half"),
    ("maxwell_hgemm_128x64_nn", "c10::Half"),
    ("void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float, float>>>", "float"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3", "float"),
    ("cutlass_kernel<cutlass::tfloat32_t, 128>", "float"),
    ("void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>", "float"),
    ("void at::native::elementwise_kernel<128, 2, AddFunctor<double>>", "double"),
    ("cutlass_gemm_fp64_64x64", "double"),
    ("volta_dgemm_128x64_nn", "double"),
    ("sm90_gemm_fp8_tn_kernel", "c10::Float8_e4m3fn"),
    ("void quantize_kernel<__nv_fp8_e5m2>", "c10::Float8_e4m3fn"),
]


def test_every_kernel_dtype_pattern_has_a_case():
    assert len(PATTERN_CASES) == len(KERNEL_DTYPE_PATTERNS)
    for (pattern, dtype), (kernel, expected) in zip(KERNEL_DTYPE_PATTERNS, PATTERN_CASES):
        assert re.search(pattern, kernel, re.IGNORECASE), (pattern, kernel)
        assert dtype == expected


@pytest.mark.parametrize("kernel, dtype", PATTERN_CASES)
def test_kernel_name_dtype_per_pattern(kernel, dtype):
    assert kernel_name_dtype(kernel) == dtype


@pytest.mark.parametrize("kernel, dtype", [
    ("Memset (Device)", None),                      # no dtype word
    ("Memcpy HtoD (Pageable -> Device)", None),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6>", None),  # s1688 is not sgemm
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", MIXED),  # bf16 inputs, fp32 accumulate: two dtypes
    ("direct_copy_kernel<float, c10::BFloat16>", MIXED),  # a cast
    ("c10::Float8_e4m3fn", "c10::Float8_e4m3fn"),       # not "float"
    ("cublasLt::splitKreduce_kernel<32, 16, int, float4>", "float"),  # float4 is a float vector
    ("halfway_kernel", None),                         # a word, not a dtype
])
def test_kernel_name_dtype_edges(kernel, dtype):
    assert kernel_name_dtype(kernel) == dtype


def test_infer_input_types():
    dims = json.dumps([[4, 128, 256], [], [256], [256], []])
    assert json.loads(infer_input_types("aten::native_layer_norm", dims, "float")) == \
        ["float", "", "float", "float", ""]
    # a list of shapes is a tensor list
    assert json.loads(infer_input_types("aten::cat", json.dumps([[[2, 3], [2, 3]], []]), "c10::Half")) == \
        ["TensorList", ""]
    # integer indices / targets / casts do not share the kernel's dtype; no shapes, no dtype: nothing
    assert infer_input_types("aten::embedding", json.dumps([[1000, 64], [8, 16]]), "float") is None
    assert infer_input_types("aten::_to_copy", json.dumps([[8, 16]]), "float") is None
    assert infer_input_types("aten::mm", None, "float") is None
    assert infer_input_types("aten::mm", json.dumps([[8, 16], [16, 4]]), MIXED) is None
    assert infer_input_types("ProfilerStep#1", json.dumps([[8]]), "float") is None
    # inferred types model like recorded ones: mm [8,16]x[16,4] fp32 = 2*8*4*16 = 1024 FLOPs,
    # (128 + 64 + 32) * 4 = 896 bytes
    ty = infer_input_types("aten::mm", json.dumps([[8, 16], [16, 4]]), "float")
    c = model_op("aten::mm", json.dumps([[8, 16], [16, 4]]), ty, None, None)
    assert (c.flops, c.bytes, c.dtype) == (1024, 896, "fp32")


NSIGHT = ROOT / "sample_traces" / "nsight"


@pytest.fixture(scope="module")
def nsys_pair(tmp_path_factory):
    """The Nsight Systems export (NVTX ranges: shapes, no dtypes) and its Kineto twin, one store."""
    sq, kin = NSIGHT / "encoder2_nvtx.sqlite.gz", NSIGHT / "encoder2_kineto" / "trace.json.gz"
    if not (sq.exists() and kin.exists()):
        pytest.fail("Nsight sample traces not present")
    db = tmp_path_factory.mktemp("nsys") / "bw.duckdb"
    ids = {}
    for key, path in (("nsys", sq), ("kineto", kin)):
        res = CliRunner().invoke(cli, ["ingest", str(path), "--db", str(db)])
        assert res.exit_code == 0, res.output
        ids[key] = res.stdout.split()[1]
    with open_store(db, read_only=True) as s:
        yield {k: bandwidth(s, t) for k, t in ids.items()}, bandwidth(s, ids["nsys"], infer_dtypes=False)


def test_nsys_dtypes_from_kernel_names(nsys_pair):
    got, off = nsys_pair
    n, k = got["nsys"], got["kineto"]
    assert off.scalars["modelled_share"] == 0  # without the rule: no dtypes, nothing modelled
    assert n.scalars["modelled_share"] >= 0.9
    assert n.trust["instances_dtype_from_kernel_name"] > 0
    assert any("dtype_source = 'kernel_name'" in w for w in n.warnings)
    ns, ks = n.table("per_signature"), k.table("per_signature")
    modelled = ns[ns["bytes"].notna()]
    assert (modelled["dtype_source"] == "kernel_name").all() and (ks["dtype_source"] == "trace").all()
    # per signature (name + dims), the same FLOPs, bytes, calls and dtype as the Kineto twin
    key = ["name", "input_dims"]
    m = modelled.merge(ks, on=key, suffixes=("_n", "_k"), validate="one_to_one")
    assert len(m) == len(modelled) > 0
    for col in ("calls", "flops", "bytes", "dtype", "tensor_core", "rule"):
        assert (m[col + "_n"] == m[col + "_k"]).all(), col
    assert n.scalars["flops"] == k.scalars["flops"] and n.scalars["bytes"] == k.scalars["bytes"]


def test_kineto_samples_with_dtypes_unchanged(session_store):
    with open_store(session_store.db, read_only=True) as s:
        row = s.query("SELECT trace_id FROM traces WHERE name = 'llama_prefill_b1'")
        if not len(row):
            pytest.fail("llama_prefill_b1 sample not present")
        t = row.iloc[0]["trace_id"]
        on, off = bandwidth(s, t), bandwidth(s, t, infer_dtypes=False)
    a, b = on.table("per_signature"), off.table("per_signature")
    assert set(a["dtype_source"].dropna()) == {"trace"}
    assert a["dtype_source"].notna().all()
    pd.testing.assert_frame_equal(a, b)
    assert on.trust["instances_dtype_from_kernel_name"] == 0 and on.scalars == off.scalars
