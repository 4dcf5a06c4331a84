"""kernels / idle analyses: hand-computed minimal traces, one example per category rule, sample properties."""

from __future__ import annotations

import pytest
from storage.kineto_build import kern, op, rt, write_trace
from stores import empty

from kernelscope.analysis import kernels as K
from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.store import open_store

# One example per rule of data/kernel_categories.csv, in file order: (leaf op or None, kernel name, category)
RULE_EXAMPLES = [
    ("aten::addmm", "whatever", "gemm"),
    ("aten::convolution", "whatever", "gemm"),
    ("aten::_efficient_attention_forward", "whatever", "attention"),
    ("flash_attn::_flash_attn_forward", "whatever", "attention"),
    ("aten::native_layer_norm", "whatever", "norm"),
    ("aten::_softmax", "whatever", "reduction"),
    ("aten::cat", "whatever", "memory"),
    ("c10d::allreduce_", "whatever", "communication"),
    ("triton_poi_fused_add_0", "whatever", "triton"),
    ("aten::silu", "whatever", "elementwise"),
    (None, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
    (None, "triton_red_fused_sum_1", "triton"),
    (None, "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>", "attention"),
    (None, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "gemm"),
    (None, "void at::native::vectorized_layer_norm_kernel<float, float>", "norm"),
    (None, "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "memory"),
    (None, "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>", "reduction"),
    (None, "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
]


@pytest.fixture
def store(tmp_path):
    with open_store(empty(tmp_path / "k.duckdb")) as s:
        yield s


def test_every_rule_has_an_example_that_hits_it(store):
    rules = K.category_rules()
    assert len(rules) == len(RULE_EXAMPLES)
    case, params = K.category_case("k", "o")
    for (match, _pat, cat, _src), (o, k, want) in zip(rules, RULE_EXAMPLES):
        assert (match == "op") == (o is not None) and cat == want
        got = store.query(f"SELECT {case} AS c FROM (SELECT $k AS k, $o AS o)", dict(params, k=k, o=o))
        assert got["c"][0] == want, (o, k)
    # a kernel no rule matches, without an operator, is 'other'
    got = store.query(f"SELECT {case} AS c FROM (SELECT 'mystery' AS k, NULL AS o)", params)
    assert got["c"][0] == "other"


# Kernel names of other projects' traces (a vLLM B200 trace of TraceLens' tests, PyTorch symmetric memory, CUTLASS):
# (leaf op or None, kernel name, category, tensor cores)
WILD_NAMES = [
    ("vllm::moe_forward", "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_"
     "transOut_schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f", "gemm", True),
    ("vllm::moe_forward", "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_"
     "transOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f", "gemm", True),
    ("vllm::unified_attention_with_output", "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128"
     "PersistentContext", "attention", True),
    ("symm_mem::multimem_all_reduce_", "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>"
     "(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)", "communication", False),
    ("vllm::all_reduce", "whatever", "communication", False),
    (None, "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
     "vllm::Signal*, __nv_bfloat16*, int, int)", "communication", False),
    ("aten::all", "whatever", "reduction", False),
    # a cutlass:: type among the arguments does not make a GEMM; an FP8 type does not make a tensor-core kernel
    ("vllm::moe_forward", "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<"
     "cutlass::bfloat16_t, cutlass::bfloat16_t, 4, true> >(moe::dev::finalize::KernelParams<cutlass::bfloat16_t, "
     "cutlass::bfloat16_t, 4, true>)", "other", False),
    ("_C::static_scaled_fp8_quant", "void vllm::scaled_fp8_quant_kernel_strided<c10::BFloat16, c10::Float8_e4m3fn>"
     "(c10::Float8_e4m3fn*, c10::BFloat16 const*, float const*, int, int, int)", "other", False),
    (None, "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8", "gemm", True),
    (None, "void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align8>("
     "cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align8::Params)", "gemm", True),
    (None, "sm80_xmma_gemm_e4m3_simt_ffma", "gemm", False),  # a SIMT marker still wins
    # AMD (TraceLens' MI300 traces): hipBLASLt/Tensile names its MFMA instruction; without one it is VALU code
    (None, "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT320x224x64_MI16x16x1_SN_LDSB1_AFC1", "gemm", True),
    (None, "Cijk_Ailk_Bljk_SB_MT64x64x8_SE_K1", "gemm", False),
    ("aten::convolution_backward", "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_v2r3ILi1ELi0EvEE",
     "gemm", True),
    (None, "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3", "gemm", True),
    (None, "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt32x256x32_wt16x64x4_ws1x1_wr1x2_ta1x4x1x1_1x8x1x32", "gemm", True),
    (None, "attn_fwd", "attention", True),
    (None, "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16>", "attention", True),
]


@pytest.mark.parametrize(("o", "k", "category", "tc"), WILD_NAMES)
def test_wild_kernel_names(store, o, k, category, tc):
    case, params = K.category_case("k", "o")
    got = store.query(f"SELECT c, {K.tensor_core_sql('k', 'c')} AS tc FROM (SELECT *, {case} AS c FROM "
                      "(SELECT $k AS k, $o AS o))", dict(params, k=k, o=o))
    assert (got["c"][0], bool(got["tc"][0])) == (category, tc)
    if o is None or o.startswith(("vllm::", "symm_mem::", "_C::")):  # the storage's collective test agrees by name
        from kernelscope.storage.collectives import COLLECTIVE_KERNEL_RE
        coll = store.query(f"SELECT regexp_matches($k, '{COLLECTIVE_KERNEL_RE}') AS c", {"k": k})["c"][0]
        assert bool(coll) == (category == "communication" and k != "whatever"), k


def _trace(tmp_path, store):
    """Kernels (us): gemm via op aten::mm 'k_any' dur 20 (op rule wins over the name);
    no-op kernels: sm90_xmma_gemm_bf16 dur 8 (tensor core), sm80_xmma_gemm_f32_ffma dur 4 (SIMT),
    triton_poi_x dur 2, mystery dur 1 (other), elementwise_kernel dur 0.5.
    kernel time = 35.5 us; gemm 32, triton 2, other 1, elementwise 0.5.
    busy union: k at [100,120], [130,138], [140,144], [150,152], [160,161], [170,170.5] -> 35.5 us,
    span 100..170.5 = 70.5 us -> idle 35 us."""
    names = [("sm90_xmma_gemm_bf16bf16_tn", 130, 8), ("sm80_xmma_gemm_f32f32_ffma_tn", 140, 4),
             ("triton_poi_x", 150, 2), ("mystery", 160, 1), ("elementwise_kernel<add>", 170, 0.5)]
    ev = [op("aten::mm", 10, 20, 1), rt("cudaLaunchKernel", 12, 2, 1, 1), kern("k_any", 100, 20, 1, 1)]
    for i, (n, ts, d) in enumerate(names, start=2):
        ev += [rt("cudaLaunchKernel", 40 + i, 0.5, i, 0), kern(n, ts, d, i, 0)]
    res = ingest_file(store, write_trace(tmp_path / "k.json", ev))
    assert res.status == "ingested", res.message
    return res.trace_id


def test_categories_tensor_cores_short_and_histogram(store, tmp_path):
    tid = _trace(tmp_path, store)
    d = K.kernels(store, tid, top=2, short_ns=2_500).to_dict()
    assert d["kernel_time_ns"] == 35_500
    assert d["category_time_ns"] == {"gemm": 32_000, "triton": 2_000, "other": 1_000, "elementwise": 500,
                                     "attention": 0, "reduction": 0, "norm": 0, "memory": 0,
                                     "communication": 0}
    assert d["tensor_core_ns"] == 8_000  # only the bf16 xmma gemm; the ffma one is SIMT
    assert d["tensor_core_share_of_gemm_attention"] == pytest.approx(8 / 32)
    assert d["short_kernels"] == 3 and d["short_kernel_ns"] == 3_500  # 2 us, 1 us, 0.5 us < 2.5 us
    top = d["top_kernels"]
    assert [r["name"] for r in top] == ["k_any", "sm90_xmma_gemm_bf16bf16_tn", "others"]
    assert top[-1]["kernels"] == 4 and top[-1]["time_ns"] == 7_500
    # log2 bins: 20000 -> [16384, 32768) bin 14; 8000 -> 12 [4096,8192); 4000 -> 11; 2000 -> 10;
    # 1000 -> 9; 500 -> 8
    allh = {r["bin"]: r["kernels"] for r in d["duration_histogram"] if r["category"] == "all"}
    assert allh == {14: 1, 12: 1, 11: 1, 10: 1, 9: 1, 8: 1}
    assert sum(r["time_ns"] for r in d["duration_histogram"] if r["category"] == "all") == 35_500


def test_idle_timeline(store, tmp_path):
    tid = _trace(tmp_path, store)
    d = K.idle(store, tid, bins=2).to_dict()
    # span 70.5 us = 70500 ns, width ceil(70500/2) = 35250: bin0 [100, 135.25) us holds 20 + 5.25 = 25.25 us;
    # bin1 [135.25, 170.5) holds 2.75 + 4 + 2 + 1 + 0.5 = 10.25 us.
    assert [(r["bin_ns"], r["busy_ns"]) for r in d["timeline"]] == [(35_250, 25_250), (35_250, 10_250)]
    assert d["busy_ns"] == 35_500 and d["idle_ns"] == 35_000
    # gaps between busy intervals: 10, 2, 6, 8, 9 us (log2 bin 12 = [4096, 8192), 13 = [8192, 16384))
    gaps = {r["bin"]: r["gaps"] for r in d["gap_histogram"]}
    assert gaps == {13: 2, 10: 1, 12: 2}  # 10000, 9000 -> 13; 2000 -> 10; 6000, 8000 -> 12


def test_bad_option(store, tmp_path):
    tid = _trace(tmp_path, store)
    from kernelscope.errors import UsageError
    with pytest.raises(UsageError):
        K.idle(store, tid, bins=5000)


def test_samples_category_times_sum_to_kernel_time(session_store):
    with open_store(session_store.db, read_only=True) as s:
        ccs = set()
        for tid in set(session_store.ids.values()):
            d = K.kernels(s, tid).to_dict()
            assert sum(d["category_time_ns"].values()) == d["kernel_time_ns"]
            assert sum(r["time_ns"] for r in d["categories"]) == d["kernel_time_ns"]
            assert sum(r["time_ns"] for r in d["top_kernels"]) == d["kernel_time_ns"]
            # every sample is an H200 capture (compute capability 9.0) or names no device
            assert d["compute_capability"] in ("9.0", None), (tid, d["compute_capability"])
            ccs.add(d["compute_capability"])
            i = K.idle(s, tid).to_dict()
            if i["gpu_span_ns"] is not None:
                assert sum(r["busy_ns"] for r in i["timeline"]) == i["busy_ns"] <= i["gpu_span_ns"]
                assert sum(r["bin_ns"] for r in i["timeline"]) == i["gpu_span_ns"]
    assert "9.0" in ccs  # read from the samples' deviceProperties (computeMajor 9, computeMinor 0)


def test_short_kernel_time_inside_cuda_graphs(store, tmp_path):
    """One cudaGraphLaunch replays kernels of 1, 3 and 20 us; a cudaLaunchKernel runs one of 2 us. Short (< 10 us):
    1 + 3 + 2 = 6 us, of which the graph's 1 + 3 = 4 us (the 20 us graph kernel is not short)."""
    ev = [op("aten::graph_replay", 5, 30, 1), rt("cudaGraphLaunch", 6, 3, 9, 1),
          kern("g_a", 100, 1, 9, 1), kern("g_b", 110, 3, 9, 1), kern("g_c", 120, 20, 9, 1),
          op("aten::add", 40, 5, 2), rt("cudaLaunchKernel", 41, 2, 10, 2), kern("elementwise_kernel", 150, 2, 10, 2)]
    res = ingest_file(store, write_trace(tmp_path / "g.json", ev))
    assert res.status == "ingested", res.message
    d = K.kernels(store, res.trace_id).to_dict()
    assert d["kernel_time_ns"] == 26_000 and d["short_kernels"] == 3
    assert d["short_kernel_ns"] == 6_000 and d["short_graph_kernel_ns"] == 4_000


def test_compute_capability_from_kineto_2021_compute_properties(store, tmp_path):
    """TensorBoard's 2021 test traces list the devices under computeProperties with ``major``/``minor`` (a V100:
    7.0); today's deviceProperties say ``computeMajor``/``computeMinor``. Both give the lowest capability."""
    import json

    events = [op("aten::mm", 0, 10, 1), rt("cudaLaunchKernel", 1, 2, 1, 1), kern("gemm", 5, 3, 1, 1)]
    old = [{"id": 0, "name": "Tesla V100-DGXS-32GB", "major": 7, "minor": 0},
           {"id": 1, "name": "Tesla T4", "major": 7, "minor": 5}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schemaVersion": 1, "computeProperties": old, "traceEvents": events}))
    new = write_trace(tmp_path / "new.json", events, deviceProperties=[{"id": 0, "computeMajor": 9, "computeMinor": 0}])
    got = []
    for p in (path, new):
        res = ingest_file(store, p)
        got.append(K.kernels(store, res.trace_id).scalars["compute_capability"])
    assert got == ["7.0", "9.0"]
