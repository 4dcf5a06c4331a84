"""recommend: each rule firing and not firing on small fake Results (exact numbers, hand arithmetic in the
test), the whole analysis with the cited analyses replaced by fakes, and one run over the real b1/b128
samples where every evidence number must equal the cited analysis' own output."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import ROOT

from kernelscope.analysis import recommend as rec
from kernelscope.analysis import rules
from kernelscope.analysis.registry import ANALYSES
from kernelscope.analysis.result import Result
from kernelscope.cli import cli
from kernelscope.errors import UsageError
from kernelscope.storage.ingest import ingest_run
from kernelscope.storage.store import open_store


def R(name, scalars=None, tables=None, trust=None) -> Result:
    return Result(name=name, definition="fake", scalars=scalars or {},
                  tables={k: pd.DataFrame(v) for k, v in (tables or {}).items()}, trust=trust or {})


def fake_bound(host_wait_share=0.6, causes=None, ops=None):
    causes = causes or [{"category": "launch", "idle_ns": 600, "gaps": 3, "share_of_host_wait": 0.6},
                        {"category": "sync", "idle_ns": 100, "gaps": 1, "share_of_host_wait": 0.1},
                        {"category": "python", "idle_ns": 300, "gaps": 2, "share_of_host_wait": 0.3}]
    ops = ops or [{"operator": "aten::mm", "idle_ns": 500, "main_category": "operator", "gaps": 1},
                  {"operator": "aten::add", "idle_ns": 300, "main_category": "launch", "gaps": 1},
                  {"operator": "aten::mul", "idle_ns": 200, "main_category": "launch", "gaps": 1}]
    return R("bound", {"host_wait_share": host_wait_share}, {"idle_causes": causes, "idle_operators": ops})


def fake_launch(depth=0.2, add_bound=10, api_share=None):
    per = [{"name": "aten::mm", "calls": 10, "launch_bound_calls": 1},
           {"name": "aten::add", "calls": 10, "launch_bound_calls": add_bound},
           {"name": "aten::mul", "calls": 10, "launch_bound_calls": 5}]
    split = {} if api_share is None else {"tklqt_ns": 1_000_000, "api_ns": int(api_share * 1_000_000)}
    return R("launch", {"mean_queue_depth": depth, **split}, {"per_leaf_op": per})


def fake_kernels(gemm_share=0.6, tc=0.9, short=0.1, cc=None, short_in_graphs=0, short_count=400):
    cats = [{"category": "gemm", "time_ns": int(gemm_share * 1000), "share": gemm_share},
            {"category": "elementwise", "time_ns": 1000 - int(gemm_share * 1000), "share": 1 - gemm_share}]
    return R("kernels", {"short_kernel_share": short, "short_kernels": short_count, "short_ns": 10_000,
                         "short_kernel_ns": int(short * 1000), "short_graph_kernel_ns": short_in_graphs,
                         "tensor_core_share_of_gemm_attention": tc, "compute_capability": cc},
             {"categories": cats})


def fake_bandwidth(pct=18.0, gpu_ns=100, bound_kind="memory", tf32=None):
    sig = [{"name": "aten::_softmax", "input_dims": "[[8, 128]]", "input_types": '["float"]', "gpu_ns": gpu_ns,
            "pct_peak_bw": pct, "bound": bound_kind},
           {"name": "aten::mm", "input_dims": "[[8, 8]]", "input_types": '["float"]', "gpu_ns": 900,
            "pct_peak_bw": 70.0, "bound": "compute"}]
    scalars, trust = {"gpu_ns": 1000}, {"tf32_from": "default (off for matmul, on for cuDNN)"}
    if tf32 is not None:
        scalars["tf32_matmul"], trust["tf32_from"] = tf32, "provenance"
    return R("bandwidth", scalars, {"per_signature": sig}, trust)


def fake_steps(share=0.0, mean_ns=0, step_mean_ns=152_490_000, steady=5, loaders=()):
    bd = [{"category": "kernel", "mean_ns": step_mean_ns - mean_ns, "share": 1 - share},
          {"category": "dataloader", "mean_ns": mean_ns, "share": share}]
    return R("steps", {"step_count": steady + 1, "steady_steps": steady, "step_time_mean_ns": step_mean_ns},
             {"breakdown": bd}, {"dataloaders": list(loaders)})


def fake_whatif(pred=3_000_000, obs=10_000_000):
    return R("whatif", {"predicted_ns": pred, "observed_ns": obs})


def values(f):
    return {(e["analysis"], e["key"], json.dumps(e.get("row"))): e["value"] for e in f["evidence"]}


# 1. host-bound launches ---------------------------------------------------------------------------------

def test_host_bound_fires_with_whatif_saving():
    # top idle operators: mm 500 (1/10 launch-bound: not heavy), add 300 (10/10), mul 200 (5/10 = 0.5: heavy)
    # launch-heavy idle = 300 + 200 = 500 of 1000 = 0.5 >= 0.3; host wait 0.6 >= 0.3
    [f] = rules.rule_host_bound_launch({"bound": fake_bound(), "launch": fake_launch(), "whatif": fake_whatif()})
    assert f["rule"] == "host_bound_launch" and f["severity"] == "high"  # 0.6 >= 0.5
    assert f["saving_ns"] == 7_000_000  # 10 ms observed - 3 ms predicted
    assert "60% of the GPU span is host wait" in f["message"] and "7.00 ms" in f["message"]
    assert "aten::add, aten::mul" in f["message"] and "aten::mm" not in f["message"].split("(")[1]
    v = values(f)
    assert v[("bound", "host_wait_share", "null")] == 0.6
    assert v[("launch", "per_leaf_op.launch_bound_calls", '{"name": "aten::add"}')] == 10
    assert v[("whatif", "predicted_ns", "null")] == 3_000_000


def test_host_bound_silent_below_host_wait_or_without_launch_heavy_ops():
    assert rules.rule_host_bound_launch({"bound": fake_bound(0.29), "launch": fake_launch()}) == []
    # add only 2/10 launch-bound -> heavy is mul alone: 200 / 1000 = 0.2 < 0.3
    assert rules.rule_host_bound_launch({"bound": fake_bound(), "launch": fake_launch(add_bound=2)}) == []


def test_host_bound_without_whatif_has_no_saving():
    [f] = rules.rule_host_bound_launch({"bound": fake_bound(0.35), "launch": fake_launch()})
    assert f["saving_ns"] is None and f["severity"] == "medium"


# 8. slow host calls (the numbers of a transformers Llama decode on an H200 whose cuDNN attention built a plan for
# each new KV length: 3 calls of 57.46, 47.26 and 44.37 ms of idle) ------------------------------------------

def slow_bound(slow_ns=149_096_085, new=3):
    ops = [{"operator": "aten::_cudnn_attention_forward", "idle_ns": 150_365_331, "main_category": "operator",
            "gaps": 45, "slow_calls": 3, "slow_call_idle_ns": slow_ns, "max_call_idle_ns": 57_464_758,
            "slow_new_shape_calls": new},
           {"operator": "aten::mm", "idle_ns": 6_337_325, "main_category": "operator", "gaps": 198, "slow_calls": 0,
            "slow_call_idle_ns": 0, "max_call_idle_ns": 0, "slow_new_shape_calls": 0}]
    return R("bound", {"host_wait_share": 0.9884, "host_wait_ns": 202_595_403}, {"idle_operators": ops})


def slow_launch():  # every call of both spends longer on the host than on the GPU: both launch-heavy
    return R("launch", {}, {"per_leaf_op": [{"name": "aten::_cudnn_attention_forward", "calls": 24,
                                             "launch_bound_calls": 24},
                                            {"name": "aten::mm", "calls": 171, "launch_bound_calls": 161}]})


def test_slow_host_calls_fire_and_say_the_cost_is_per_shape():
    [f] = rules.rule_slow_host_calls({"bound": slow_bound()})
    # 149,096,085 / 202,595,403 = 73.6% of the host wait; severity from 0.9884 x 0.736 = 0.727 of the span
    assert f["rule"] == "slow_host_calls" and f["severity"] == "high" and f["saving_ns"] == 149_096_085
    assert "74% of the host wait (149.10 ms) is inside 3 slow operator calls" in f["message"]
    assert "aten::_cudnn_attention_forward: 3, up to 57.46 ms each" in f["message"]
    assert "3 of the 3 are the operator's first call with their input shapes" in f["message"]
    assert values(f)[("bound", "idle_operators.slow_call_idle_ns",
                      '{"operator": "aten::_cudnn_attention_forward"}')] == 149_096_085
    # 1 of 3 new shapes: not the per-shape advice
    [g] = rules.rule_slow_host_calls({"bound": slow_bound(new=1)})
    assert "first call" not in g["message"] and "Find those calls in the timeline" in g["message"]
    assert "record_shapes=True" not in g["message"]
    # recorded without shapes: new shapes cannot be told, and the message says how to record them
    [h] = rules.rule_slow_host_calls({"bound": slow_bound(new=None)})
    assert "The trace has no input shapes (torch.profiler records them with record_shapes=True)" in h["message"]


def test_slow_host_calls_name_the_cause_inside_them():
    """HTA's public alexnet benchmark (torch.profiler defaults): the slow convolution calls' idle is allocator time
    (cudaMalloc/cudaFree: bound's main_category), which the finding now says; the operators' own work is not
    named as such a cause."""
    alloc = slow_bound(new=None)
    alloc.tables["idle_operators"].loc[0, "main_category"] = "allocator"
    [f] = rules.rule_slow_host_calls({"bound": alloc})
    assert ("For the operators holding 100% of it, the largest part of their wait is allocator (cudaMalloc/cudaFree "
            "and the like)") in f["message"]
    assert values(f)[("bound", "idle_operators.main_category",
                      '{"operator": "aten::_cudnn_attention_forward"}')] == "allocator"
    [g] = rules.rule_slow_host_calls({"bound": slow_bound(new=None)})
    assert "the largest part of their wait" not in g["message"]


def test_slow_host_calls_are_not_launch_overhead():
    """The same operators without slow-call columns: launch-heavy, rule 1 fires (100% of the top idle). With them,
    the launch-heavy idle is 1.27 + 6.34 ms of 156.70 ms (5%): rule 1 stays silent, rule 8 speaks."""
    plain = slow_bound()
    plain.tables["idle_operators"] = plain.tables["idle_operators"][["operator", "idle_ns", "main_category", "gaps"]]
    assert rules.rule_host_bound_launch({"bound": plain, "launch": slow_launch()})
    assert rules.rule_slow_host_calls({"bound": plain}) == []
    assert rules.rule_host_bound_launch({"bound": slow_bound(), "launch": slow_launch()}) == []
    # below a fifth of the host wait (40 ms = 19.7%) the slow calls are no finding
    assert rules.rule_slow_host_calls({"bound": slow_bound(slow_ns=40_000_000)}) == []


def test_slow_host_calls_leave_dataloader_ranges_to_input_pipeline():
    """An old trace records the DataLoader's __next__ as an operator; its slow calls are the input pipeline's
    (rule 9), not host work inside a library call: alone they fire no slow_host_calls."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    b = slow_bound()
    b.tables["idle_operators"].loc[0, "operator"] = loader
    assert rules.rule_slow_host_calls({"bound": b}) == []


# 9. input pipeline --------------------------------------------------------------------------------------

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def test_input_pipeline_fires_above_tensorboards_five_percent():
    """TensorBoard's resnet50 sample with num_workers=0 (kineto's tb_plugin/samples, 2021): 35.47 ms of a mean
    steady step of 152.49 ms (23%) the GPU idles inside the loader's __next__; 5 steady steps: 177.35 ms."""
    [f] = rules.rule_input_pipeline({"steps": fake_steps(0.2326, 35_470_000, loaders=[SINGLE])})
    assert f["message"].startswith("For 23% of the step time (35.47 ms of a mean step of 152.49 ms; steps) the GPU "
                                   "is idle while the host is inside the DataLoader's __next__")
    assert "(num_workers=0): DataLoader(num_workers=N, pin_memory=True" in f["message"]
    assert f["severity"] == "medium" and f["saving_ns"] == 5 * 35_470_000
    assert values(f)[("steps", "breakdown.share", '{"category": "dataloader"}')] == 0.2326
    [m] = rules.rule_input_pipeline({"steps": fake_steps(0.06, 9_000_000, loaders=[MULTI])})
    assert "Its worker processes do not keep up" in m["message"] and m["severity"] == "low"
    [g] = rules.rule_input_pipeline({"steps": fake_steps(0.06, 9_000_000)})
    assert "Load in worker processes" in g["message"]
    assert rules.rule_input_pipeline({"steps": fake_steps(0.05, 7_624_500, loaders=[SINGLE])}) == []
    assert rules.rule_input_pipeline({"steps": fake_steps()}) == []


# 2. GPU-bound -------------------------------------------------------------------------------------------

def test_gpu_bound_says_when_the_gpu_also_waits_on_the_host():
    """The same resnet50 sample: mean queue depth 111.05 (deep queues while the step computes) but 28% of the span
    host wait (the loader between steps): the finding says the depth hides the waits; below a fifth it does not."""
    res = {"launch": fake_launch(depth=111.05), "kernels": fake_kernels(gemm_share=0.68)}
    [f] = rules.rule_gpu_bound({**res, "bound": fake_bound(host_wait_share=0.2821)})
    assert "Yet for 28% of its span the GPU waits on the host (bound)" in f["message"]
    assert values(f)[("bound", "host_wait_share", "null")] == 0.2821
    [g] = rules.rule_gpu_bound({**res, "bound": fake_bound(host_wait_share=0.19)})
    assert "Yet" not in g["message"] and ("bound", "host_wait_share", "null") not in values(g)


def test_gpu_bound_fires_at_depth_one():
    [f] = rules.rule_gpu_bound({"launch": fake_launch(depth=1.0), "kernels": fake_kernels(gemm_share=0.7)})
    assert "mean queue depth is 1.00" in f["message"] and "gemm at 70% of kernel time" in f["message"]
    assert values(f)[("kernels", "categories.share", '{"category": "gemm"}')] == 0.7
    assert f["severity"] == "high"


@pytest.mark.parametrize("api_share, fires", [(0.49, True), (0.5, False), (0.999, False)])
def test_gpu_bound_silent_when_the_depth_is_the_launch_calls_own_time(monkeypatch, api_share, fires):
    """TraceLens' MI300 normalization test trace: q = 1.02 while 99.9% of TKLQT was inside the launch calls
    (first launches loading code) and the GPU idled 99.9% of its span: not GPU-bound; a warning says why."""
    launch = fake_launch(depth=1.02, api_share=api_share)
    assert bool(rules.rule_gpu_bound({"launch": launch, "kernels": fake_kernels()})) is fires
    fake_sources(monkeypatch, launch=lambda s, t: launch)
    monkeypatch.setattr(rec, "_slowing_options", lambda s, t: [])
    said = [w for w in rec.recommend(None, "t1").warnings if "own duration (api_ns)" in w]
    assert len(said) == int(not fires)
    assert fires or f"{api_share:.0%} of TKLQT is the launch calls' own duration" in said[0]


def test_gpu_bound_silent_below_one():
    assert rules.rule_gpu_bound({"launch": fake_launch(depth=0.99), "kernels": fake_kernels()}) == []


# 3. low bandwidth ---------------------------------------------------------------------------------------

def test_low_bandwidth_fires_for_memory_bound_signature():
    # softmax: 18% < 30% of peak, 100 / 1000 = 10% of GPU time >= 5%; mm is compute-bound: never cited
    [f] = rules.rule_low_bandwidth({"bandwidth": fake_bandwidth()})
    assert "aten::_softmax [[8, 128]] runs at 18% of peak bandwidth" in f["message"]
    assert "10% of GPU time" in f["message"] and f["severity"] == "low"
    assert values(f)[("bandwidth", "per_signature.pct_peak_bw",
                      json.dumps({"name": "aten::_softmax", "input_dims": "[[8, 128]]",
                                  "input_types": '["float"]'}))] == 18.0


@pytest.mark.parametrize("kw", [{"pct": 30.0}, {"gpu_ns": 49}, {"bound_kind": "compute"}])
def test_low_bandwidth_silent(kw):
    # 30% is not < 30; 49 / 1000 < 5%; a compute-bound signature is not a bandwidth problem
    assert rules.rule_low_bandwidth({"bandwidth": fake_bandwidth(**kw)}) == []


# 4. short kernels ---------------------------------------------------------------------------------------

def test_short_kernels_fires():
    [f] = rules.rule_short_kernels({"kernels": fake_kernels(short=0.3)})
    assert "30% of kernel time is in 400 kernels shorter than 10 us" in f["message"]
    assert "torch.compile" in f["message"] and f["severity"] == "medium"


def test_host_overhead_names_where_the_gpu_waits_when_launches_are_not_the_cause():
    """torch.compile(mode="reduce-overhead") Llama on an H200: 83% host wait, spent in the compiled wrapper between
    graph replays (315 of 320 kernels), not in launch-heavy operators, and no host finding fired. Rule 7 names the
    top three; an eager trace (no graph kernels) with the same wait gets nothing from it (rule 1's advice, graphs,
    is the one for eager host overhead)."""
    ops = [{"operator": "Torch-Compiled Region: 0/0", "idle_ns": 2486, "main_category": "operator", "gaps": 203,
            "share_of_host_wait": 0.5358},
           {"operator": "TorchDynamo Cache Lookup", "idle_ns": 1154, "main_category": "operator", "gaps": 4,
            "share_of_host_wait": 0.2487},
           {"operator": "aten::_foreach_copy_", "idle_ns": 306, "main_category": "operator", "gaps": 9,
            "share_of_host_wait": 0.066},
           {"operator": "Pregraph bytecode", "idle_ns": 218, "main_category": "operator", "gaps": 4,
            "share_of_host_wait": 0.047}]
    graphs = R("launch", {"mean_queue_depth": 0.09, "kernels": 5, "graph_kernels": 315},
               {"per_leaf_op": fake_launch().tables["per_leaf_op"].to_dict("records")})
    res = {"bound": fake_bound(host_wait_share=0.8254, ops=ops), "launch": graphs}
    assert rules.rule_host_bound_launch(res) == []
    [f] = rules.rule_host_overhead(res)
    assert f["severity"] == "high" and f["message"].startswith(
        "83% of the GPU span is host wait (bound) although 98% of the kernels replay from CUDA graphs")
    assert ("Torch-Compiled Region: 0/0 (54%), TorchDynamo Cache Lookup (25%), aten::_foreach_copy_ (7%)"
            in f["message"]) and "Pregraph" not in f["message"]
    # launch-heavy operators explain it: rule 1 fires, rule 7 does not repeat it; little host wait: neither
    heavy = {"bound": fake_bound(host_wait_share=0.6, ops=[{**o, "operator": n} for o, n in
                                                           zip(ops, ("aten::add", "aten::mul", "aten::mm"))]),
             "launch": graphs}
    assert rules.rule_host_bound_launch(heavy) and rules.rule_host_overhead(heavy) == []
    assert rules.rule_host_overhead({"bound": fake_bound(host_wait_share=0.29, ops=ops), "launch": graphs}) == []
    eager = R("launch", {"kernels": 320, "graph_kernels": 0}, {"per_leaf_op": []})
    assert rules.rule_host_overhead({"bound": fake_bound(host_wait_share=0.8254, ops=ops), "launch": eager}) == []


def test_host_overhead_of_a_trace_that_records_compilation_says_so():
    """GPT-2 under torch.compile(mode="reduce-overhead") profiled from the script's start (H200): 99% host wait, 518
    of 604 kernels from CUDA graphs, and the GPU waited most during dynamo's compile phases. The advice was "cut
    that work or give each replay more GPU work"; compiling is a one-time cost, so it says so and how to profile
    the steady state. Below COMPILE_SHARE_MIN of compile phases the old advice stays."""
    ops = [{"operator": "bytecode_tracing (dynamo_timed)", "idle_ns": 2081, "share_of_host_wait": 0.2978},
           {"operator": "OutputGraph.call_user_compiler (dynamo_timed)", "idle_ns": 657, "share_of_host_wait": 0.094},
           {"operator": "build_guards (dynamo_timed)", "idle_ns": 224, "share_of_host_wait": 0.0321},
           {"operator": "PythonDispatchMode", "idle_ns": 157, "share_of_host_wait": 0.0225},
           {"operator": "inductor_codecache_torch_key (dynamo_timed)", "idle_ns": 149, "share_of_host_wait": 0.0214}]
    graphs = R("launch", {"mean_queue_depth": 0.002, "kernels": 86, "graph_kernels": 518},
               {"per_leaf_op": fake_launch().tables["per_leaf_op"].to_dict("records")})
    [f] = rules.rule_host_overhead({"bound": fake_bound(host_wait_share=0.9932, ops=ops), "launch": graphs})
    assert f["message"].endswith(
        "of the host wait. At least 45% of the host wait is torch.compile compiling (4 of its phases, named "
        "'... (dynamo_timed)'): a one-time cost the steady state does not pay; profile after the warm-up "
        "(kernelscope profile --schedule W,U,A, or torch.profiler.schedule) to see the host work between replays.")
    cited = [e["row"]["operator"] for e in f["evidence"] if "row" in e]
    assert cited == [o["operator"] for o in ops[:3]] + [ops[4]["operator"]]  # the top 3, then the other phase
    few = [{**o, "share_of_host_wait": o["share_of_host_wait"] / 3} for o in ops]  # 15%: below the threshold
    [g] = rules.rule_host_overhead({"bound": fake_bound(host_wait_share=0.9932, ops=few), "launch": graphs})
    assert g["message"].endswith("Cut that work or give each replay more GPU work (a larger batch).")


def test_short_kernels_already_in_cuda_graphs_are_not_told_to_use_cuda_graphs():
    """A torch.compile(mode="reduce-overhead") trace (Llama on an H200: 315 of 320 kernels replayed from graphs)
    was told to 'capture the loop in a CUDA graph'. When most short-kernel time ran inside graphs the advice is
    the work per kernel; below half, the graph advice stays."""
    [f] = rules.rule_short_kernels({"kernels": fake_kernels(short=0.6, short_in_graphs=540)})
    assert "90% of that time already inside CUDA graphs" in f["message"]
    assert "capture the loop" not in f["message"] and "larger batch" in f["message"]
    assert {e["key"] for e in f["evidence"]} >= {"short_graph_kernel_ns", "short_kernel_ns"}
    [g] = rules.rule_short_kernels({"kernels": fake_kernels(short=0.6, short_in_graphs=200)})
    assert "capture the loop in a CUDA graph" in g["message"] and "inside CUDA graphs" not in g["message"]


def test_short_kernels_silent():
    assert rules.rule_short_kernels({"kernels": fake_kernels(short=0.29)}) == []


@pytest.mark.parametrize("count, fires", [(49, False), (50, True)])
def test_short_kernels_needs_enough_of_them(count, fires):
    """TraceLens' vLLM capture trace ran 7 kernels (20 us) in a 58 ms span and got '[high] 100% of kernel time is in
    7 short kernels: fuse them or capture the loop in a CUDA graph'; HTA's triton_example the same for 1 kernel."""
    assert bool(rules.rule_short_kernels({"kernels": fake_kernels(short=1.0, short_count=count)})) is fires


# 5. sync stalls -----------------------------------------------------------------------------------------

def test_sync_stalls_fires_with_saving():
    causes = [{"category": "sync", "idle_ns": 1_500_000, "gaps": 2, "share_of_host_wait": 0.15},
              {"category": "d2h_copy", "idle_ns": 500_000, "gaps": 1, "share_of_host_wait": 0.05},
              {"category": "python", "idle_ns": 8_000_000, "gaps": 9, "share_of_host_wait": 0.8}]
    ops = [{"operator": "aten::_local_scalar_dense", "idle_ns": 400_000, "main_category": "d2h_copy", "gaps": 1}]
    [f] = rules.rule_sync_stalls({"bound": fake_bound(causes=causes, ops=ops)})
    # 0.15 + 0.05 = 0.2 >= 0.2; saving 1.5 ms + 0.5 ms = 2.0 ms
    assert f["saving_ns"] == 2_000_000 and "2.00 ms" in f["message"]
    assert "20% of host wait" in f["message"] and "aten::_local_scalar_dense" in f["message"]
    assert values(f)[("bound", "idle_causes.idle_ns", '{"category": "sync"}')] == 1_500_000


def test_sync_stalls_silent():
    # the default fake: sync 0.1, no d2h_copy -> 0.1 < 0.2
    assert rules.rule_sync_stalls({"bound": fake_bound()}) == []


# 14. garbage-collection pauses ----------------------------------------------------------------------------

@pytest.mark.parametrize("share, fires", [(0.05, True), (0.049, False)])
def test_gc_pauses_fire_from_five_percent_of_host_wait(share, fires):
    causes = [{"category": "python_gc", "idle_ns": 125_600_000, "gaps": 1, "share_of_host_wait": share},
              {"category": "python", "idle_ns": 8_000_000, "gaps": 9, "share_of_host_wait": 0.5}]
    found = rules.rule_gc_pauses({"bound": fake_bound(causes=causes)})
    if not fires:
        assert found == []
        return
    [f] = found
    assert f["saving_ns"] == 125_600_000 and "125.60 ms in 1 idle gap)" in f["message"]
    assert "gc.freeze()" in f["message"] and f["severity"] == "low"
    assert values(f)[("bound", "idle_causes.gaps", '{"category": "python_gc"}')] == 1


def test_gc_pauses_silent_without_collections():
    assert rules.rule_gc_pauses({"bound": fake_bound()}) == []


# 6. tensor cores ----------------------------------------------------------------------------------------

def test_low_tensor_core_fires_and_cites_tf32_from_provenance():
    [f] = rules.rule_low_tensor_core({"kernels": fake_kernels(gemm_share=0.3, tc=0.1),
                                    "bandwidth": fake_bandwidth(tf32=False)})
    assert "GEMMs are 30% of kernel time but only 10%" in f["message"] and "TF32 matmul is off" in f["message"]
    assert values(f)[("bandwidth", "tf32_matmul", "null")] is False
    [g] = rules.rule_low_tensor_core({"kernels": fake_kernels(gemm_share=0.3, tc=0.1), "bandwidth": fake_bandwidth()})
    assert "TF32 matmul" not in g["message"]  # the flag was a default, not read from the trace


def test_low_tensor_core_advice_follows_the_gpu_generation():
    """HTA's public V100 trace (fp32 GEMMs, 0% on tensor cores) was told to enable TF32 or bf16, which a V100 does
    not have: compute capability 7.x gets fp16 advice, with the capability cited; below 7.0 (no tensor cores)
    the rule stays silent; 8.0 and later keep the TF32/bf16 advice."""
    [v] = rules.rule_low_tensor_core({"kernels": fake_kernels(gemm_share=0.6, tc=0.0, cc="7.0")})
    assert v["message"].endswith(": run the GEMMs in fp16 (torch.autocast('cuda', dtype=torch.float16)); this GPU "
                                 "(compute capability 7.0) has no TF32 or bf16 tensor cores.")
    assert "TF32 (torch.set" not in v["message"]
    assert values(v)[("kernels", "compute_capability", "null")] == "7.0"
    assert rules.rule_low_tensor_core({"kernels": fake_kernels(gemm_share=0.6, tc=0.0, cc="6.1")}) == []
    [h] = rules.rule_low_tensor_core({"kernels": fake_kernels(gemm_share=0.6, tc=0.0, cc="9.0")})
    assert "enable TF32 (torch.set_float32_matmul_precision('high'))" in h["message"]
    # a 2021 trace without deviceProperties: both generations' advice, and why
    [u] = rules.rule_low_tensor_core({"kernels": fake_kernels(gemm_share=0.6, tc=0.0, cc=None)})
    assert "on compute capability 8.0 and later, fp16" in u["message"] \
        and u["message"].endswith("the trace does not record which GPU it ran on.")


def test_low_tensor_core_in_bf16_does_not_advise_a_precision():
    """ConvNeXt in bf16 on an H100: 94% of kernel time in convolution kernels, 3% of it on tensor cores (depthwise
    convolutions and cuDNN's CUDA-core kernels). It was told to enable TF32 or run the GEMMs in bf16, which they
    already were: the tensor-core operators' GPU time is mostly bf16 (bandwidth), so the message says so, names
    the largest CUDA-core GEMM-category kernels and the layout advice, and no precision advice."""
    k = fake_kernels(gemm_share=0.94, tc=0.03, cc="9.0")
    k.tables["top_kernels"] = pd.DataFrame([
        {"name": "void implicit_convolve_sgemm<__nv_bfloat16, __nv_bfloat16, 128, 6, 7, 3, 3, 5, 1, false>",
         "category": "gemm", "tensor_core": False, "share": 0.39},
        {"name": "sm90_xmma_fprop_implicit_gemm_bf16", "category": "gemm", "tensor_core": True, "share": 0.2},
        {"name": "vectorized_layer_norm_kernel", "category": "norm", "tensor_core": False, "share": 0.1},
        {"name": "conv2d_c1_k1_nhwc_specialized", "category": "gemm", "tensor_core": False, "share": 0.05}])
    sig = [{"name": "aten::cudnn_convolution", "dtype": "bf16", "tensor_core": True, "gpu_ns": 900},
           {"name": "aten::addmm", "dtype": "fp32", "tensor_core": True, "gpu_ns": 100},
           {"name": "aten::add", "dtype": "fp32", "tensor_core": False, "gpu_ns": 5000}]
    bw = R("bandwidth", {"tf32_matmul": False}, {"per_signature": pd.DataFrame(sig)}, {"tf32_from": "provenance"})
    [f] = rules.rule_low_tensor_core({"kernels": k, "bandwidth": bw})
    m = f["message"]
    assert "they already run in bf16 (90% of the GEMM/convolution/attention operators' GPU time" in m
    assert "TF32" not in m and "autocast" not in m and "channels_last" in m
    assert m.endswith("the largest such kernels: void implicit_convolve_sgemm<__nv_bfloat16, __nv_bfloat16, … "
                      "(39%); conv2d_c1_k1_nhwc_specialized (5%).")
    assert values(f)[("bandwidth", "per_signature.dtype", '{"tensor_core": true}')] == "bf16"
    # mostly fp32 tensor-core operators: the precision advice stands
    sig[0]["dtype"] = "fp32"
    bw.tables["per_signature"] = pd.DataFrame(sig)
    [g] = rules.rule_low_tensor_core({"kernels": k, "bandwidth": bw})
    assert "enable TF32" in g["message"] and "already run" not in g["message"]


@pytest.mark.parametrize("gemm, tc", [(0.29, 0.1), (0.9, 0.5)])
def test_low_tensor_core_silent(gemm, tc):
    assert rules.rule_low_tensor_core({"kernels": fake_kernels(gemm_share=gemm, tc=tc)}) == []


# the whole analysis with faked sources ------------------------------------------------------------------

def fake_sources(monkeypatch, **given):
    """recommend reads ``given`` (name -> fn(store, trace_id)) and the fakes above for the rest."""
    fakes = {"bound": lambda s, t: fake_bound(), "launch": lambda s, t: fake_launch(),
             "whatif": lambda s, t: fake_whatif(), "kernels": lambda s, t: fake_kernels(),
             "bandwidth": lambda s, t: fake_bandwidth(), "steps": lambda s, t: fake_steps(),
             "memory": lambda s, t: R("memory"), "comm": lambda s, t: fake_comm(), **given}  # no memory events: no
    # device_memory table
    assert set(fakes) == set(rec._sources())  # every analysis recommend reads
    monkeypatch.setattr(rec, "_sources", lambda: dict(fakes))
    monkeypatch.setattr(rec, "_captured", lambda s, t: 0)  # no stream capture (the store is None here)
    monkeypatch.setattr(rec, "_measured_inflation", lambda s, t: None)  # no collector run


@pytest.mark.parametrize("unprofiled, own", [((14, 3_615_500_000), True), ((14, 1_700_000_000), False), (None, False)])
def test_gc_pauses_the_unprofiled_run_had_too_are_the_scripts_own(monkeypatch, unprofiled, own):
    """An MLP training loop that keeps per-step Python records (H100, --stack): gc_pauses 42% of host wait, and the
    profiler-inflation warning (1.63x per step) said it "may be the profiler's own", though the un-profiled pass had
    the same 14 full collections (3,615.5 ms against 3,458.3 ms profiled). When the un-profiled pass spent at least
    half the profiled one's time in full collections (provenance python_gc), the finding says so and the warning
    leaves it out; with less, or no un-profiled pass, nothing changes."""
    causes = [{"category": "python_gc", "idle_ns": 1_041_730_326, "gaps": 3, "share_of_host_wait": 0.424},
              {"category": "python", "idle_ns": 1_409_336_990, "gaps": 47, "share_of_host_wait": 0.574}]
    fake_sources(monkeypatch, bound=lambda s, t: fake_bound(host_wait_share=0.997, causes=causes))
    monkeypatch.setattr(rec, "_slowing_options", lambda s, t: ["with_stack"])
    gc = {"profiled": {"full_collections": 14, "ns": 3_458_300_000},
          "unprofiled": None if unprofiled is None else {"full_collections": unprofiled[0], "ns": unprofiled[1]}}
    monkeypatch.setattr(rec, "trace_python_gc", lambda s, t: gc)
    r = rec.recommend(None, "t1")
    (f,) = [f for f in r.tables["findings"].to_dict("records") if f["rule"] == "gc_pauses"]
    (w,) = [w for w in r.warnings if "profiler's own" in w]
    said = (" The un-profiled run paused as much (14 full collections, 3,615.5 ms, against 14 and 3,458.3 ms "
            "profiled): these pauses are the script's own, not the profiler's.")
    assert f["message"].endswith(said) == own
    assert "the host-side findings (host_bound_launch) may be" in w if own else \
        "the host-side findings (gc_pauses, host_bound_launch) may be" in w


def test_recommend_with_fake_analyses(monkeypatch):
    def broken(s, t):
        raise UsageError("no device peak for this GPU.")
    fake_sources(monkeypatch, kernels=lambda s, t: fake_kernels(short=0.4), bandwidth=broken)
    monkeypatch.setattr(rec, "_slowing_options", lambda s, t: ["with_stack"])
    r = rec.recommend(None, "t1")
    assert r.scalars["rules_fired"] == ["host_bound_launch", "short_kernels"]
    assert r.trust["rules_skipped"] == ["low_bandwidth", "unaligned_gemm"] and "bandwidth" in r.warnings[0]
    assert r.warnings[1] == ("the trace was recorded with with_stack, which slows the host side (Python tracing): "
                             "the host-side findings (host_bound_launch) may be the profiler's own; profile again "
                             "without it (kernelscope profile without --stack) before acting on them.")
    assert list(r.tables["findings"]["rule"]) == ["host_bound_launch", "short_kernels"]  # high, then medium
    ev = r.tables["evidence"]
    assert len(ev) == sum(len(e) for e in r.tables["findings"]["evidence"])
    json.loads(r.to_json())


def gemm_bandwidth(extra=()):
    """GPT-2 small's fp16 training step on an H100 (bandwidth per_signature, its numbers and recorded strides): the
    50,257-token LM head's three GEMMs, aligned GEMMs, a memory-bound decode GEMV and an fp32 GEMM, both unaligned
    and both not this rule's."""
    def row(name, dims, strides, dtype, gpu_ns, pct, bound="compute"):
        return {"name": name, "input_dims": dims, "input_types": "[]", "input_strides": strides, "gpu_ns": gpu_ns,
                "dtype": dtype, "pct_peak_flops": pct, "bound": bound, "rule": "gemm"}
    rows = [row("aten::mm", "[[8192, 768], [768, 50257]]", "[[768, 1], [1, 768]]", "fp16", 74_401_036, 8.589),
            row("aten::mm", "[[8192, 50257], [50257, 768]]", "[[50257, 1], [768, 1]]", "fp16", 45_380_347, 14.08),
            row("aten::mm", "[[50257, 8192], [8192, 768]]", "[[1, 50257], [768, 1]]", "fp16", 43_091_721, 14.83),
            row("aten::mm", "[[8192, 768], [768, 3072]]", "[[768, 1], [1, 768]]", "fp16", 7_052_684, 66.46),
            row("aten::mm", "[[3072, 8192], [8192, 768]]", "[[1, 3072], [768, 1]]", "fp16", 6_859_040, 68.34),
            row("aten::addmm", "[[768], [8192, 3072], [3072, 768], [], []]", "[[1], [3072, 1], [1, 3072], [], []]",
                "fp16", 6_351_227, 73.22),
            row("aten::mm", "[[1, 2048], [2048, 8193]]", "[[2048, 1], [1, 2048]]", "bf16", 5_406_000, 0.2,
                bound="memory"),
            row("aten::mm", "[[512, 1000], [1000, 1001]]", "[[1000, 1], [1001, 1]]", "fp32", 30_000_000, 20.0),
            *extra]
    return R("bandwidth", {"gpu_ns": 739_082_941}, {"per_signature": rows})


def test_leading_dims_from_strides():
    """The GEMM's operands' row lengths in memory and the output's N: a transposed operand's comes from its
    strides (the LM head's weight gradient: M = 50,257 is the leading dimension of grad_out^T); a row-major one's M
    is none (ViT-B/16's 788 = 4 x 197 tokens, at 27% of peak on an H100 public trace, is not one)."""
    from kernelscope.analysis.rule_gemm import leading_dims

    assert leading_dims("aten::mm", "[[8192, 768], [768, 50257]]", "[[768, 1], [1, 768]]") == [768, 768, 50257]
    assert leading_dims("aten::mm", "[[50257, 8192], [8192, 768]]", "[[1, 50257], [768, 1]]") == [50257, 768, 768]
    assert leading_dims("aten::addmm", "[[3072], [788, 768], [768, 3072], [], []]",
                        "[[1], [768, 1], [1, 768], [], []]") == [768, 768, 3072]
    assert leading_dims("aten::bmm", "[[96, 3137, 64], [96, 64, 3137]]",
                        "[[200768, 64, 1], [200768, 3137, 1]]") == [64, 3137, 3137]
    assert leading_dims("aten::mm", "[[788, 768], [768, 3072]]", None) == [768, 3072, 3072]  # no strides: rows
    assert leading_dims("aten::linear", "[[788, 768], [3072, 768], [3072]]",
                        "[[768, 1], [768, 1], [1]]") == [768, 768, 3072]
    assert leading_dims("aten::mm", "[[8, 8], [8, 8]]", "[[2, 2], [8, 1]]") == [8, 8]  # not a plain matrix: skipped


def test_unaligned_gemm_names_the_lm_head_and_its_padding():
    """The LM head's three GEMMs (50,257 a leading dimension of each) are named, 22.0% of GPU time (medium); the saving is each at
    the median of the other fp16 GEMMs (66.46, 68.34, 73.22: 68.34%): 74,401,036 x (1 - 8.589/68.34) + 45,380,347 x
    (1 - 14.08/68.34) + 43,091,721 x (1 - 14.83/68.34) = 65,050,282 + 36,030,694 + 33,740,678 ns. (Padded to 50,304
    on the same H100 the three took 137.36 ms less.)"""
    [f] = rules.rule_unaligned_gemm({"bandwidth": gemm_bandwidth()})
    assert f["rule"] == "unaligned_gemm" and f["severity"] == "medium" and f["saving_ns"] == 134_821_654
    assert f["message"].startswith("3 compute-bound 16-bit GEMM signature(s) with a leading dimension off the tensor "
                                   "cores' alignment (a multiple of 8 elements, fp8 16) take 22% of GPU time")
    assert ("aten::mm [[8192, 768], [768, 50257]] (fp16, 9% of peak FLOP/s, 74.40 ms; 50,257 -> 50,304); aten::mm "
            "[[8192, 50257], [50257, 768]] (fp16, 14% of peak FLOP/s, 45.38 ms; 50,257 -> 50,304); aten::mm "
            "[[50257, 8192], [8192, 768]] (fp16, 15% of peak FLOP/s, 43.09 ms; 50,257 -> 50,304).") in f["message"]
    assert f["message"].endswith("reach a median of fp16 68% of peak, at which these would take 134.82 ms less.")
    assert values(f)[("bandwidth", "per_signature.pct_peak_flops", json.dumps(
        {"name": "aten::mm", "input_dims": "[[8192, 768], [768, 50257]]", "input_types": "[]"}))] == 8.589


def test_host_bound_saving_is_at_most_the_host_wait():
    """HTA's public df_index_resolver trace (torch.profiler defaults, 2 streams): whatif predicted 701.73 ms against
    1,737.62 ms observed, 1,035.89 ms, more than the 713.46 ms the GPU waited on the host (its streams modelled as
    independent overlap more than they did); free launches remove that wait and no more."""
    b = fake_bound()
    b.scalars["host_wait_ns"] = 713_464_000
    w = R("whatif", {"predicted_ns": 701_727_000, "observed_ns": 1_737_620_000})
    [f] = rules.rule_host_bound_launch({"bound": b, "launch": fake_launch(), "whatif": w})
    assert f["saving_ns"] == 713_464_000
    assert f["message"].endswith("would remove up to 713.46 ms (whatif: predicted 701.73 ms vs observed 1737.62 ms; "
                                 "at most the host wait, bound).")
    assert values(f)[("bound", "host_wait_ns", "null")] == 713_464_000
    w.scalars["predicted_ns"] = 1_137_620_000  # 600 ms: under the host wait, as on every sample
    [g] = rules.rule_host_bound_launch({"bound": b, "launch": fake_launch(), "whatif": w})
    assert g["saving_ns"] == 600_000_000 and "at most" not in g["message"]


def test_unaligned_gemm_silent_or_not():
    sig = gemm_bandwidth().tables["per_signature"]

    def fired(rows):
        return rules.rule_unaligned_gemm({"bandwidth": R("bandwidth", {"gpu_ns": 739_082_941},
                                                         {"per_signature": rows})})
    assert fired(sig[sig["gpu_ns"] < 40_000_000]) == []  # without the LM head: no aligned GEMM is named
    [one] = fired(sig[(sig["gpu_ns"] < 40_000_000) | (sig["gpu_ns"] == 45_380_347)])  # one of them: 6.1%, named
    assert one["message"].startswith("1 compute-bound") and "[[8192, 50257], [50257, 768]]" in one["message"]
    assert fired(sig.assign(pct_peak_flops=55.0)) == []  # unaligned but at half the peak or more
    assert fired(sig.assign(gpu_ns=sig["gpu_ns"] // 10)) == []  # 1.6% of GPU time
    assert fired(sig.assign(bound="memory")) == []  # FLOP/s is not what holds a memory-bound GEMM back
    vit = pd.DataFrame([{"name": "aten::addmm", "input_dims": "[[3072], [788, 768], [768, 3072], [], []]",
                         "input_types": "[]", "input_strides": "[[1], [768, 1], [1, 768], [], []]", "gpu_ns": 170_000,
                         "dtype": "bf16", "pct_peak_flops": 27.0, "bound": "compute", "rule": "gemm"}])
    assert fired(vit.assign(gpu_ns=739_082_941)) == []  # 788 rows of a row-major operand: not a leading dimension


def test_slow_host_calls_of_a_slowed_profile_carry_the_warning(monkeypatch):
    """A torch.compile'd ViT step recorded with --modules --memory (5.95x slower than un-profiled) fired only
    slow_host_calls, host work inside CompiledFunction calls, and the warning was not given: it is host time too."""
    bound = slow_bound()
    bound.tables["idle_causes"] = fake_bound().tables["idle_causes"]
    fake_sources(monkeypatch, bound=lambda s, t: bound)
    monkeypatch.setattr(rec, "_slowing_options", lambda s, t: ["with_stack", "with_modules"])
    r = rec.recommend(None, "t1")
    assert "slow_host_calls" in r.scalars["rules_fired"] and "host_bound_launch" not in r.scalars["rules_fired"]
    assert [w for w in r.warnings if "profiler's own" in w] == [
        "the trace was recorded with with_stack and with_modules, which slow the host side (Python tracing, module "
        "records): the host-side findings (slow_host_calls) may be the profiler's own; profile again without them "
        "(kernelscope profile without --stack and --modules) before acting on them."]


@pytest.mark.parametrize("depth, both", [(2.0, True), (0.2, False)])
def test_host_bound_and_gpu_bound_together_are_reconciled(monkeypatch, depth, both):
    """HTA's public training trace (torch.profiler defaults) fired both: 41% host wait and a mean queue depth of
    7.03. A warning then says they are different stretches of the run and where to see them; not otherwise."""
    fake_sources(monkeypatch, launch=lambda s, t: fake_launch(depth=depth))
    monkeypatch.setattr(rec, "_slowing_options", lambda s, t: [])
    r = rec.recommend(None, "t1")
    assert "host_bound_launch" in r.scalars["rules_fired"]
    assert ("gpu_bound" in r.scalars["rules_fired"]) is both
    said = [w for w in r.warnings if w.startswith("host_bound_launch and gpu_bound both fired")]
    assert len(said) == int(both)
    assert not both or "different stretches of the run" in said[0] and "GPU-bound segments" in said[0]


# real samples -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    db = tmp_path_factory.mktemp("rec") / "r.duckdb"
    ids = {}
    with open_store(db) as s:
        for b in ("b1", "b128"):
            res = ingest_run(s, ROOT / "sample_traces" / f"llama_prefill_{b}")
            assert res.status == "ingested", res.message
            ids[b] = res.trace_id
    return db, ids


def cited(sources: dict[str, Result], e: dict):
    """The value the evidence names, read from the cited analysis' own JSON output."""
    out = json.loads(sources[e["analysis"]].to_json())
    if "row" not in e:
        return out[e["key"]]
    table, col = e["key"].split(".")
    rows = [r for r in out[table] if all(r[k] == v for k, v in e["row"].items())]
    assert len(rows) == 1, (e, rows)
    return rows[0][col]


def test_samples_rules_and_evidence(sample_store):
    db, ids = sample_store
    with open_store(db) as s:
        for b, fires, silent in (("b1", "host_bound_launch", "gpu_bound"), ("b128", "gpu_bound", "host_bound_launch")):
            r = rec.recommend(s, ids[b])
            assert fires in r.scalars["rules_fired"] and silent not in r.scalars["rules_fired"], (b, r.scalars)
            # the full analyses (recommend runs launch with only the tables it reads, whatif only when needed)
            sources = {n: ANALYSES[n].fn(s, [ids[b]] if ANALYSES[n].multi else ids[b]) for n in rec._sources()}
            out = json.loads(r.to_json())
            assert out["findings"]
            for f in r.tables["findings"].to_dict("records"):  # plain values: the table prints them as written
                assert all(type(e["value"]).__module__ == "builtins" for e in f["evidence"]), f["evidence"]
            for f in out["findings"]:
                assert f["evidence"]
                for e in f["evidence"]:
                    assert cited(sources, e) == e["value"], (b, f["rule"], e)
            if b == "b1":
                f = next(f for f in out["findings"] if f["rule"] == "host_bound_launch")
                w = sources["whatif"].scalars
                assert f["saving_ns"] == w["observed_ns"] - w["predicted_ns"] > 0


def test_host_findings_warn_when_stacks_or_memory_were_recorded(sample_store, tmp_path):
    """A ViT training step profiled with --stack --memory --modules on an H100 read 91% host wait and a 3.4 s
    CUDA-graph saving, on a run the profiler slowed 4.8x: host-side findings of such a trace now carry a warning.
    b1 (host-bound) as recorded (stacks and memory off): no warning; with its provenance saying with_stack and
    profile_memory were on: the warning names both and the rule; b128 (no host-side finding): none either way."""
    import shutil

    db, ids = sample_store
    copy = tmp_path / "c.duckdb"
    shutil.copyfile(db, copy)
    with open_store(copy) as s:
        assert not [w for w in rec.recommend(s, ids["b1"]).warnings if "slow the host" in w]
        s.con.execute("UPDATE traces SET provenance = json_merge_patch(provenance, "
                      "'{\"profiler_options\": {\"with_stack\": true, \"profile_memory\": true}}')")
        (w,) = [w for w in rec.recommend(s, ids["b1"]).warnings if "slow the host" in w]
        assert w.startswith("the trace was recorded with with_stack and profile_memory, which slow the host side "
                            "(Python tracing, allocation records)") and "without them (kernelscope profile without "\
            "--stack and --memory)" in w
        assert "(host_bound_launch) may be the profiler's own" in w
        assert not [w for w in rec.recommend(s, ids["b128"]).warnings if "slow the host" in w]
        # what kernelscope profile measured is said too (a torch.compile'd ViT step with --modules --memory on an
        # H100: +494.9% per step, and slow_host_calls fired without this warning), and alone when the options are off
        s.con.execute("UPDATE traces SET provenance = json_merge_patch(provenance, '{\"profiler_overhead\": "
                      "{\"basis\": \"step\", \"n\": 3, \"pct\": 494.9}}')")
        (w,) = [w for w in rec.recommend(s, ids["b1"]).warnings if "profiler's own" in w]
        assert ("(Python tracing, allocation records); kernelscope profile measured its recorded steps at 5.95x their "
                "un-profiled time (median of 3): the host-side findings (host_bound_launch) may be") in w
        s.con.execute("UPDATE traces SET provenance = json_merge_patch(provenance, '{\"profiler_options\": "
                      "{\"with_stack\": false, \"profile_memory\": false}}')")
        for pct, said in ((83.0, True), (49.0, False)):
            s.con.execute("UPDATE traces SET provenance = json_merge_patch(provenance, "
                          f"'{{\"profiler_overhead\": {{\"pct\": {pct}}}}}')")
            ws = [w for w in rec.recommend(s, ids["b1"]).warnings if "profiler's own" in w]
            assert ws == ([f"kernelscope profile measured its recorded steps at {1 + pct / 100:.2f}x their un-profiled "
                           "time (median of 3): the host-side findings (host_bound_launch) may be the profiler's own; "
                           "compare them with the un-profiled run (the Overview's profiler inflation) before acting "
                           "on them."] if said else []), pct


def test_whatif_runs_only_for_a_host_bound_finding(sample_store):
    """b1 is host-bound (the rule fires and cites whatif's saving); on b128 the rule stops before its saving,
    so whatif is not run at all."""
    db, ids = sample_store
    with open_store(db) as s:
        r1, r128 = rec.recommend(s, ids["b1"]), rec.recommend(s, ids["b128"])
    assert r1.trust["analyses_run"] == ["bandwidth", "bound", "kernels", "launch", "memory", "steps", "whatif"]
    assert r128.trust["analyses_run"] == ["bandwidth", "bound", "kernels", "launch", "memory", "steps"]
    assert "host_bound_launch" not in r128.scalars["rules_fired"]


def test_cli_json_and_keys_documented(sample_store):
    db, ids = sample_store
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    res = CliRunner().invoke(cli, ["analyze", "recommend", ids["b1"], "--format", "json", "--db", str(db)])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    keys = set(got) | set(got["trust"])
    for table in ("findings", "evidence"):
        keys |= set(got[table][0])
    missing = sorted(k for k in keys if k not in documented)
    assert not missing, f"undocumented recommend keys: {missing}"


@pytest.mark.parametrize("captured, ran, warned", [(544, 2, True), (544, 544, True), (5, 27, False), (0, 2, False)])
def test_a_trace_of_a_graph_capture_says_the_findings_describe_the_capture(monkeypatch, captured, ran, warned):
    """TraceLens' SGLang capture trace: 544 launch calls captured into a CUDA graph, 2 kernels run, and gpu_bound
    and low_bandwidth fired on those 2. A capture that is most of the trace gets a warning; an H200 trace that
    captured 5 launches and then replayed 27 kernels does not."""
    kernels = fake_kernels(short=0.4)
    kernels.scalars["kernels"] = ran
    fake_sources(monkeypatch, kernels=lambda s, t: kernels)
    monkeypatch.setattr(rec, "_captured", lambda s, t: captured)
    monkeypatch.setattr(rec, "_slowing_options", lambda s, t: [])
    r = rec.recommend(None, "t1")
    assert r.scalars["findings_count"] > 0
    said = [w for w in r.warnings if "recorded into a CUDA graph by stream capture" in w]
    assert len(said) == int(warned)
    assert not warned or f"{captured:,} kernel launch calls" in said[0] and f"against {ran:,} kernels" in said[0]


# 11. exposed communication ------------------------------------------------------------------------------

class _Res(dict):
    """The Results of one trace, naming it (as recommend's own mapping does)."""

    trace_id = "r0"


def fake_comm(wait0=14_695_248, straggler=1, times_last=14, world=2):
    ranks = [{"rank": 0, "trace_id": "r0", "wait_ns": wait0}, {"rank": 1, "trace_id": "r1", "wait_ns": 0}]
    strag = [{"rank": 1, "times_last": times_last, "skew_caused_ns": 14_695_248},
             {"rank": 0, "times_last": 0, "skew_caused_ns": 0}]
    return R("comm", {"world_size": world, "collective_instances": 14, "straggler_rank": straggler},
             {"ranks": ranks, "stragglers": strag})


def test_exposed_communication_tells_waiting_for_a_rank_from_transfer():
    """ddp2's rank 0 (the sample's numbers): only collectives run for 9,746,399 of 28,940,238 ns of its span (34%);
    rank 1 arrived last at all 14 all-reduces and rank 0's collectives waited 14.70 ms for it: the finding names
    rank 1 as the cause. With its waits under half the comm-only time it is transfer; without the run's other
    ranks it says how to tell; at TensorBoard's 10% exactly it is silent."""
    bound = R("bound", {"comm_only_share": 9_746_399 / 28_940_238, "comm_only_ns": 9_746_399})
    [f] = rules.rule_exposed_communication(_Res(bound=bound, comm=fake_comm()))
    assert f["message"].startswith("For 34% of the GPU span (9.75 ms; bound) only collective kernels run")
    assert ("rank 1 arrived last at 14 of 14 collectives, and the collectives of this rank (rank 0) waited 14.70 ms "
            "for it (comm)") in f["message"]
    assert f["severity"] == "medium" and f["saving_ns"] is None
    assert values(f)[("comm", "ranks.wait_ns", '{"rank": 0}')] == 14_695_248
    assert values(f)[("comm", "stragglers.times_last", '{"rank": 1}')] == 14
    [t] = rules.rule_exposed_communication(_Res(bound=bound, comm=fake_comm(wait0=4_873_199)))  # < half of 9.75 ms
    assert "It is transfer more than waiting (rank 0's collectives waited 4.87 ms" in t["message"]
    [t] = rules.rule_exposed_communication(_Res(bound=bound, comm=fake_comm(straggler=0)))  # rank 0 is the late one
    assert "It is transfer more than waiting" in t["message"]
    [g] = rules.rule_exposed_communication(_Res(bound=bound))
    assert "Ingest the run's other ranks with it" in g["message"] and "arrived last" not in g["message"]
    [g] = rules.rule_exposed_communication(_Res(bound=bound, comm=fake_comm(world=1)))
    assert "Ingest the run's other ranks with it" in g["message"]
    assert rules.rule_exposed_communication(
        _Res(bound=R("bound", {"comm_only_share": 0.1, "comm_only_ns": 1_000}))) == []


def test_exposed_communication_on_the_ddp2_run(tmp_path):
    """The real two-rank run (H200 x2): rank 0 gets the finding naming rank 1; rank 1 (4.5% comm-only) none; each
    evidence number is the cited analysis' own output."""
    from conftest import ddp2_copy

    with open_store(ddp2_copy(tmp_path / "s.duckdb")) as s:
        ids = dict(s.con.execute("SELECT rank, trace_id FROM traces ORDER BY rank").fetchall())
        r0, r1 = rec.recommend(s, ids[0]), rec.recommend(s, ids[1])
        assert "exposed_communication" in r0.scalars["rules_fired"]
        assert "exposed_communication" not in r1.scalars["rules_fired"]
        [f] = [f for f in json.loads(r0.to_json())["findings"] if f["rule"] == "exposed_communication"]
        assert "rank 1 arrived last at 14 of 14 collectives" in f["message"]
        sources = {"bound": ANALYSES["bound"].fn(s, ids[0]), "comm": ANALYSES["comm"].fn(s, [ids[0]])}
        for e in f["evidence"]:
            assert cited(sources, e) == e["value"], e


def test_gpu_bound_does_not_ask_for_kernel_efficiency_when_collectives_lead():
    """ddp2's rank 0: depth 4.80 but 54% of kernel time is the NCCL all-reduce kernel: the finding says the top
    category is communication and not to look first at compute kernels."""
    cats = [{"category": "communication", "time_ns": 16_419, "share": 0.5428},
            {"category": "gemm", "time_ns": 4_000, "share": 0.1322}]
    [f] = rules.rule_gpu_bound({"launch": fake_launch(depth=4.803), "kernels": R("kernels", {}, {"categories": cats})})
    assert "but the top category is communication at 54% of kernel time (kernels)" in f["message"]
    assert "next win is kernel efficiency" not in f["message"] and "exposed_communication" in f["message"]
    [g] = rules.rule_gpu_bound({"launch": fake_launch(depth=4.803), "kernels": fake_kernels(gemm_share=0.7)})
    assert "so the next win is kernel efficiency" in g["message"]


def _steps_result(durs_ms: list[float], warm: int = 1) -> Result:
    df = pd.DataFrame({"step": range(len(durs_ms)), "name": [f"ProfilerStep#{i}" for i in range(len(durs_ms))],
                       "dur_ns": [int(d * 1e6) for d in durs_ms],
                       "warmup": [i < warm for i in range(len(durs_ms))], "partial": False})
    steady = sorted(int(d * 1e6) for d in durs_ms[warm:])
    return R("steps", {"steady_steps": len(steady), "step_time_median_ns": steady[len(steady) // 2]},
             {"steps": df})


def test_warmup_dominates_fires_when_the_warm_up_holds_most_of_the_trace():
    """ConvNeXt on an H100: ProfilerStep#0 autotuned cuDNN for 4,377.5 ms, then 11 steps of ~7 ms: 98% of the steps'
    time is the warm-up; the finding says so, with the steady median and the schedule; it is listed first."""
    st = _steps_result([4377.539] + [7.059] * 11)
    [f] = rules.rule_warmup_dominates({"steps": st})
    assert f["severity"] == "high" and f["message"].startswith(
        "98% of the recorded steps' time is in the warm-up step ProfilerStep#0 (4377.54 ms of 4455.19 ms; steps)")
    assert "11 steady step(s) (median 7.06 ms)" in f["message"] and "--schedule 0,1,N" in f["message"]
    assert values(f)[("steps", "steps.dur_ns", '{"step": 0}')] == 4_377_539_000
    # a warm-up step only somewhat slower than the rest, or none marked: silent
    assert rules.rule_warmup_dominates({"steps": _steps_result([30.0] + [7.0] * 11)}) == []
    assert rules.rule_warmup_dominates({"steps": _steps_result([4377.5] + [7.0] * 11, warm=0)}) == []
    # two warm-up steps (a window of steps recorded twice) are named together
    [g] = rules.rule_warmup_dominates({"steps": _steps_result([900.0, 800.0] + [7.0] * 5, warm=2)})
    assert "in the 2 warm-up steps (ProfilerStep#0, ProfilerStep#1)" in g["message"]
