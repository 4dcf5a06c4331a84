"""The shipped sample traces: README freshness, the CPU->GPU-bound sweep, links checked against an
independent stdlib reference (tests/reference_links.py), and named exact links per sample."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelscope.analysis import bound
from kernelscope.storage.store import open_store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
RUNS = sorted(p.parent for p in SAMPLES.rglob("run.json") if (p.parent / "trace.json.gz").is_file())
sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_links  # noqa: E402


@pytest.fixture(scope="module")
def store(sample_runs):
    """The session's store of README's main job, `kernelscope ingest sample_traces/` (tests/conftest.py): every
    run of RUNS is a run there (``ids``: run dir -> trace id), with the rows ingest_run gives it alone."""
    assert list(sample_runs.ids) == [r.relative_to(SAMPLES).as_posix() for r in RUNS]
    s = open_store(sample_runs.db, read_only=True)
    s.ids = dict(sample_runs.ids)
    yield s
    s.close()


def test_samples_exist():
    names = {r.relative_to(SAMPLES).as_posix() for r in RUNS}
    for must in ["llama_prefill_b1", "llama_prefill_b128", "train_step", "small_kernels_eager",
                 "small_kernels_graph", "compiled"]:
        assert must in names


def test_readme_is_current(store):
    """The README's numbers regenerated from the run directories ingested into a fresh store equal the
    committed README. The fixture's store holds each run dir's trace with the rows ingest_run gives it in a
    store of its own; make_readme reads those traces alone."""
    sys.path.insert(0, str(SAMPLES))
    import make_readme

    assert make_readme.main(["--check"], store=store, ids=store.ids) == 0, "run: python sample_traces/make_readme.py"


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
                     "count(*) FILTER (WHERE ext_agrees) AS good FROM launches WHERE list_contains($ids, trace_id)",
                     {"ids": list(store.ids.values())})
    assert int(df.bad[0]) == 0
    assert int(df.good[0]) > 1000


# Five exact kernel -> launch API -> leaf operator -> top-level operator links per sample, named by the
# kernel's index in start order. Chosen to include the first and last kernel, the longest one, a driver
# (cuLaunchKernel/cuLaunchKernelEx: Triton, cuBLAS) launch, and in train_step and the DDP ranks an
# autograd-thread kernel (top-level "autograd::engine::evaluate_function: ..."). Each agrees with the
# independent stdlib reference (tests/reference_links.py) through test_every_kernel_link_matches_the_reference.
LINKS = {'compiled': [(0,
               'sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3',
               'cudaLaunchKernelExC',
               'aten::mm',
               'Torch-Compiled Region: 0/0'),
              (2,
               'triton_poi_fused_addmm_gelu_0',
               'cuLaunchKernel',
               'triton_poi_fused_addmm_gelu_0',
               'Torch-Compiled Region: 0/0'),
              (74,
               'void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>(floa',
               'cudaLaunchKernel',
               'aten::addmm',
               'Torch-Compiled Region: 0/0'),
              (105,
               'sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3',
               'cudaLaunchKernelExC',
               'aten::mm',
               'Torch-Compiled Region: 0/0'),
              (209,
               'triton_per_fused_native_layer_norm_1',
               'cuLaunchKernel',
               'triton_per_fused_native_layer_norm_1',
               'Torch-Compiled Region: 0/0')],
 'ddp2/ddp_rank0': [(0,
                     'void at::native::vectorized_elementwise_kernel<8, at::native',
                     'cudaLaunchKernel',
                     'aten::copy_',
                     'aten::linear'),
                    (4,
                     'nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT',
                     'cuLaunchKernelEx',
                     'aten::mm',
                     'aten::linear'),
                    (477,
                     'void at::native::elementwise_kernel<128, 2, at::native::gpu_',
                     'cudaLaunchKernel',
                     'aten::div',
                     'autograd::engine::evaluate_function: MeanBackward0'),
                    (340,
                     'ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsSto',
                     'cuLaunchKernelEx',
                     'record_param_comms',
                     'autograd::engine::evaluate_function: torch::autograd::AccumulateGrad'),
                    (366,
                     'void at::native::vectorized_elementwise_kernel<8, at::native',
                     'cudaLaunchKernel',
                     'aten::copy_',
                     'aten::linear')],
 'ddp2/ddp_rank1': [(0,
                     'void at::native::vectorized_elementwise_kernel<8, at::native',
                     'cudaLaunchKernel',
                     'aten::copy_',
                     'aten::linear'),
                    (4,
                     'nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT',
                     'cuLaunchKernelEx',
                     'aten::mm',
                     'aten::linear'),
                    (477,
                     'void at::native::elementwise_kernel<128, 2, at::native::gpu_',
                     'cudaLaunchKernel',
                     'aten::div',
                     'autograd::engine::evaluate_function: MeanBackward0'),
                    (548,
                     'ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsSto',
                     'cuLaunchKernelEx',
                     'record_param_comms',
                     'autograd::engine::evaluate_function: torch::autograd::AccumulateGrad'),
                    (366,
                     'void at::native::vectorized_elementwise_kernel<8, at::native',
                     'cudaLaunchKernel',
                     'aten::copy_',
                     'aten::linear')],
 'llama_prefill_b1': [(0,
                       'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                       'cudaLaunchKernel',
                       'aten::gather',
                       'aten::embedding'),
                      (12,
                       'void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_al',
                       'cuLaunchKernel',
                       'aten::bmm',
                       'aten::matmul'),
                      (652,
                       'nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT',
                       'cuLaunchKernelEx',
                       'aten::mm',
                       'aten::linear'),
                      (653,
                       'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                       'cudaLaunchKernel',
                       'aten::gather',
                       'aten::embedding'),
                      (1305,
                       'nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT',
                       'cuLaunchKernelEx',
                       'aten::mm',
                       'aten::linear')],
 'llama_prefill_b128': [(0,
                         'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                         'cudaLaunchKernel',
                         'aten::gather',
                         'aten::embedding'),
                        (12,
                         'void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_al',
                         'cuLaunchKernel',
                         'aten::bmm',
                         'aten::matmul'),
                        (955,
                         'nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN',
                         'cuLaunchKernelEx',
                         'aten::mm',
                         'aten::linear'),
                        (637,
                         'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                         'cudaLaunchKernel',
                         'aten::gather',
                         'aten::embedding'),
                        (1273,
                         'nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT',
                         'cuLaunchKernelEx',
                         'aten::mm',
                         'aten::linear')],
 'llama_prefill_b16': [(0,
                        'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                        'cudaLaunchKernel',
                        'aten::gather',
                        'aten::embedding'),
                       (12,
                        'void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_al',
                        'cuLaunchKernel',
                        'aten::bmm',
                        'aten::matmul'),
                       (636,
                        'nvjet_sm90_tst_256x16_64x6_2x1_v_bz_TNT',
                        'cuLaunchKernelEx',
                        'aten::mm',
                        'aten::linear'),
                       (637,
                        'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                        'cudaLaunchKernel',
                        'aten::gather',
                        'aten::embedding'),
                       (1273,
                        'nvjet_sm90_tst_256x16_64x6_2x1_v_bz_TNT',
                        'cuLaunchKernelEx',
                        'aten::mm',
                        'aten::linear')],
 'llama_prefill_b2': [(0,
                       'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                       'cudaLaunchKernel',
                       'aten::gather',
                       'aten::embedding'),
                      (12,
                       'void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_al',
                       'cuLaunchKernel',
                       'aten::bmm',
                       'aten::matmul'),
                      (636,
                       'nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT',
                       'cuLaunchKernelEx',
                       'aten::mm',
                       'aten::linear'),
                      (637,
                       'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                       'cudaLaunchKernel',
                       'aten::gather',
                       'aten::embedding'),
                      (1273,
                       'nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT',
                       'cuLaunchKernelEx',
                       'aten::mm',
                       'aten::linear')],
 'llama_prefill_b32': [(0,
                        'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                        'cudaLaunchKernel',
                        'aten::gather',
                        'aten::embedding'),
                       (12,
                        'void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_al',
                        'cuLaunchKernel',
                        'aten::bmm',
                        'aten::matmul'),
                       (1107,
                        'nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT',
                        'cuLaunchKernelEx',
                        'aten::mm',
                        'aten::linear'),
                       (637,
                        'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                        'cudaLaunchKernel',
                        'aten::gather',
                        'aten::embedding'),
                       (1273,
                        'nvjet_sm90_tst_512x32_64x3_2x1_v_bz_TNT',
                        'cuLaunchKernelEx',
                        'aten::mm',
                        'aten::linear')],
 'llama_prefill_b4': [(0,
                       'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                       'cudaLaunchKernel',
                       'aten::gather',
                       'aten::embedding'),
                      (12,
                       'void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_al',
                       'cuLaunchKernel',
                       'aten::bmm',
                       'aten::matmul'),
                      (636,
                       'nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT',
                       'cuLaunchKernelEx',
                       'aten::mm',
                       'aten::linear'),
                      (637,
                       'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                       'cudaLaunchKernel',
                       'aten::gather',
                       'aten::embedding'),
                      (1273,
                       'nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT',
                       'cuLaunchKernelEx',
                       'aten::mm',
                       'aten::linear')],
 'llama_prefill_b64': [(0,
                        'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                        'cudaLaunchKernel',
                        'aten::gather',
                        'aten::embedding'),
                       (12,
                        'void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_al',
                        'cuLaunchKernel',
                        'aten::bmm',
                        'aten::matmul'),
                       (584,
                        'nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT',
                        'cuLaunchKernelEx',
                        'aten::mm',
                        'aten::linear'),
                       (637,
                        'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                        'cudaLaunchKernel',
                        'aten::gather',
                        'aten::embedding'),
                       (1273,
                        'nvjet_sm90_tst_512x64_64x2_2x1_v_bz_coopB_TNN',
                        'cuLaunchKernelEx',
                        'aten::mm',
                        'aten::linear')],
 'llama_prefill_b8': [(0,
                       'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                       'cudaLaunchKernel',
                       'aten::gather',
                       'aten::embedding'),
                      (12,
                       'void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_al',
                       'cuLaunchKernel',
                       'aten::bmm',
                       'aten::matmul'),
                      (636,
                       'nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT',
                       'cuLaunchKernelEx',
                       'aten::mm',
                       'aten::linear'),
                      (637,
                       'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                       'cudaLaunchKernel',
                       'aten::gather',
                       'aten::embedding'),
                      (1273,
                       'nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT',
                       'cuLaunchKernelEx',
                       'aten::mm',
                       'aten::linear')],
 'nsight/encoder2_kineto': [(0,
                             'sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3',
                             'cudaLaunchKernelExC',
                             'aten::addmm',
                             'aten::_transformer_encoder_layer_fwd'),
                            (7,
                             'void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>(floa',
                             'cudaLaunchKernel',
                             'aten::addmm',
                             'aten::_transformer_encoder_layer_fwd'),
                            (33,
                             'sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3',
                             'cudaLaunchKernelExC',
                             'aten::addmm',
                             'aten::_transformer_encoder_layer_fwd'),
                            (65,
                             'void at::native::(anonymous namespace)::vectorized_layer_nor',
                             'cudaLaunchKernel',
                             'aten::native_layer_norm',
                             'aten::_transformer_encoder_layer_fwd'),
                            (1,
                             'fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttenti',
                             'cudaLaunchKernel',
                             'aten::_efficient_attention_forward',
                             'aten::_transformer_encoder_layer_fwd')],
 'small_kernels_eager': [(0,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaLaunchKernel',
                          'aten::mul',
                          'aten::mul'),
                         (22,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaLaunchKernel',
                          'aten::mul',
                          'aten::mul'),
                         (600,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaLaunchKernel',
                          'aten::mul',
                          'aten::mul'),
                         (1199,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaLaunchKernel',
                          'aten::add',
                          'aten::add'),
                         (1,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaLaunchKernel',
                          'aten::add',
                          'aten::add')],
 'small_kernels_graph': [(0,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaGraphLaunch',
                          None,
                          None),
                         (616,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaGraphLaunch',
                          None,
                          None),
                         (600,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaGraphLaunch',
                          None,
                          None),
                         (1199,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaGraphLaunch',
                          None,
                          None),
                         (1,
                          'void at::native::vectorized_elementwise_kernel<4, at::native',
                          'cudaGraphLaunch',
                          None,
                          None)],
 'train_step': [(0,
                 'void at::native::vectorized_gather_kernel<16, long>(char*, c',
                 'cudaLaunchKernel',
                 'aten::gather',
                 'aten::embedding'),
                (5,
                 'nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT',
                 'cuLaunchKernelEx',
                 'aten::mm',
                 'aten::linear'),
                (211,
                 'void at::native::unrolled_elementwise_kernel<at::native::dir',
                 'cudaLaunchKernel',
                 'aten::copy_',
                 'autograd::engine::evaluate_function: ToCopyBackward0'),
                (319,
                 'void at::native::(anonymous namespace)::multi_tensor_apply_k',
                 'cudaLaunchKernel',
                 'aten::_foreach_addcdiv_',
                 'aten::_foreach_addcdiv_'),
                (160,
                 'void at::native::vectorized_elementwise_kernel<8, at::native',
                 'cudaLaunchKernel',
                 'aten::add_',
                 'autograd::engine::evaluate_function: SelectBackward0')]}


@pytest.mark.parametrize("run", sorted(LINKS))
def test_five_named_links(store, run):
    df = store.query(
        """SELECT row_number() OVER (ORDER BY a.start_ns, a.activity_id) - 1 AS idx, a.name, l.name AS api,
                  o.name AS leaf, t.name AS top, l.tid,
                  (SELECT min(tid) FROM launches x WHERE x.trace_id = a.trace_id) AS main_tid
           FROM gpu_activities a
           LEFT JOIN launches l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
           LEFT JOIN cpu_ops o ON o.trace_id = a.trace_id AND o.op_id = a.leaf_op_id
           LEFT JOIN cpu_ops t ON t.trace_id = a.trace_id AND t.op_id = a.top_op_id
           WHERE a.trace_id = $t AND a.kind = 'kernel' ORDER BY idx""",
        {"t": store.ids[run]},
    )

    def txt(v):
        return v if isinstance(v, str) else None

    assert len(LINKS[run]) == 5
    for idx, name, api, leaf, top in LINKS[run]:
        row = df.iloc[idx]
        assert (row["name"][:60], txt(row.api), txt(row.leaf), txt(row.top)) == (name, api, leaf, top), idx
        if top and top.startswith("autograd::engine::evaluate_function"):
            assert row.tid != row.main_tid  # the autograd thread keeps its own thread


def test_named_links_cover_driver_and_autograd_launches():
    flat = [x for rows in LINKS.values() for x in rows]
    assert any(api and api.startswith("cuLaunchKernel") for _, _, api, _, _ in flat)
    assert any(top and top.startswith("autograd::engine::evaluate_function") for *_, top in flat)
