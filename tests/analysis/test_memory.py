"""memory analysis: the peak against torch.cuda's own counters read by the capture scripts (info.txt, oracle.txt),
per-operator allocations and live-at-end blocks against tests/reference_memory.py (plain Python over the raw
JSON), a hand-built trace for the edge rules (equal starts, zero-length ops, event at an op's end, unmatched
frees, allocator stalls), the CLI, and what a trace without memory events (or from an older store) says."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import SAMPLES, session_store_copy
from reference_memory import memory_reference
from storage.kineto_build import PID, kern, op, rt, write_trace, x
from stores import empty

from kernelscope.analysis.memory import NO_EVENTS, OLD_STORE, memory
from kernelscope.cli import cli
from kernelscope.storage.ingest import ingest_file
from kernelscope.storage.store import open_store

FULL = SAMPLES / "qwen2_train_full" / "trace.json.gz"
TB = sorted((SAMPLES / "tb_qwen2").glob("*.pt.trace.json.gz"))
MEM_RUN = SAMPLES / "qwen2_train_mem"


@pytest.fixture(scope="module")
def ro(session_store):
    with open_store(session_store.db, read_only=True) as s:
        yield s, session_store.ids


def _ops(result) -> dict:
    df = result.table("operators")
    return {(r.device, None if r.operator == "(no operator)" else r.operator): [r.allocs, r.alloc_bytes, r.frees,
                                                                                r.freed_bytes]
            for r in df.itertuples(index=False)}


def test_peak_is_torch_cuda_max_memory_allocated(ro):
    store, ids = ro
    info = json.loads((FULL.parent / "info.txt").read_text())
    r = memory(store, ids[FULL])
    assert r.scalars["peak_allocated_bytes"]["cuda:0"] == info["max_memory_allocated_bytes"] == 144241664
    assert r.scalars["peak_reserved_bytes"]["cuda:0"] == 171966464
    # the peak: in backward, under LogSoftmaxBackward0; the autograd thread runs no Python, so its module is the
    # forward log_softmax's (the loss, computed inside Qwen2ForCausalLM's forward)
    assert r.scalars["peak_operator"] == "aten::_log_softmax_backward_data"
    dev = r.table("device_memory").set_index("device")
    assert dev.loc["cuda:0", "peak_module"] == r.scalars["peak_module"] == "nn.Module: Qwen2ForCausalLM_0"
    assert dev.loc["cuda:0", "peak_module_via"] == "forward operator"
    assert dev.loc["cuda:0", "peak_top_operator"] == "autograd::engine::evaluate_function: LogSoftmaxBackward0"
    assert list(dev.index) == ["cuda:0", "cpu"]  # the CPU allocator is a row of its own


@pytest.mark.parametrize("path", [FULL, TB[0]], ids=["qwen2_train_full", "tb_qwen2"])
def test_per_operator_allocations_match_the_raw_json(ro, path):
    store, ids = ro
    ref = memory_reference(path)
    r = memory(store, ids[path])
    assert _ops(r) == ref["ops"]
    assert r.scalars["peak_allocated_bytes"] == {d: p[0] for d, p in ref["peaks"].items()}
    assert r.scalars["peak_reserved_bytes"] == {d: p[1] for d, p in ref["peaks"].items()}
    assert r.scalars["live_at_end_bytes"] == {d: ref["live"].get(d, (0, 0))[1] for d in ref["peaks"]}
    dev = r.table("device_memory").set_index("device")
    assert dev["events"].to_dict() == ref["events"]
    assert dev["allocated_before_bytes"].to_dict() == ref["first_before"]
    assert r.trust["events_without_operator"] == sum(1 for (_d, o), v in ref["ops"].items() if o is None
                                                     for _ in range(v[0] + v[2]))


@pytest.mark.parametrize("path", [*TB, MEM_RUN / "trace.json.gz"], ids=["tb_steps_2_3", "tb_steps_6_7", "run"])
def test_new_samples_peak_and_start_equal_the_per_step_oracle(ro, path):
    """The capture script resets the peak at each step's start and reads max_memory_allocated() and
    memory_allocated() there; the trace's peak is the max over its profiled steps, and the allocated bytes just
    before its first memory event are those at its first profiled step's start."""
    store, ids = ro
    oracle = {s["step"]: s for s in json.loads((path.parent / "oracle.txt").read_text())["steps"]}
    steps = [int(n) for (n,) in store.con.execute(
        "SELECT step FROM annotations WHERE trace_id = ? AND kind = 'step' ORDER BY step", [ids[path]]).fetchall()]
    assert steps and set(steps) <= set(oracle)
    r = memory(store, ids[path])
    want = max(oracle[s]["max_memory_allocated_bytes"] for s in steps)
    assert r.scalars["peak_allocated_bytes"]["cuda:0"] == want == 213943296
    dev = r.table("device_memory").set_index("device")
    assert dev.loc["cuda:0", "allocated_before_bytes"] == oracle[steps[0]]["memory_allocated_start_bytes"]


def test_downsampled_series_keeps_the_exact_peak(ro):
    store, ids = ro
    r = memory(store, ids[FULL], max_points=8)
    s = r.table("series")
    cuda = s[s.device == "cuda:0"]
    assert len(cuda) <= 8 and r.trust["series_downsampled"]
    assert cuda["allocated_bytes"].max() == 144241664
    assert cuda["allocated_bytes"].min() == memory(store, ids[FULL]).table("series").query(
        "device == 'cuda:0'")["allocated_bytes"].min()
    assert list(cuda["ts_ns"]) == sorted(cuda["ts_ns"])


def test_cli_json(session_store):
    res = CliRunner().invoke(cli, ["analyze", "memory", session_store.ids[FULL], "--json",
                                   "--db", str(session_store.db)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["peak_allocated_bytes"]["cuda:0"] == 144241664 and doc["memory_events"] == 778


def test_a_trace_without_memory_events_says_how_to_record_them(ro):
    store, ids = ro
    r = memory(store, ids[SAMPLES / "qwen2_train_default" / "trace.json.gz"])
    assert r.warnings == [NO_EVENTS] and "profile_memory=True" in NO_EVENTS
    assert r.scalars["peak_allocated_bytes"] == {} and not r.tables


def test_a_trace_stored_before_memory_events_were_kept_says_reingest(session_store, tmp_path):
    """A store migrated to schema 009 keeps the old traces' [memory] instants (other_events) but no memory_events:
    the analysis asks for a re-ingest instead of saying the trace has none."""
    copy = session_store_copy(tmp_path / "old.duckdb")
    with open_store(copy.db) as store:
        store.con.execute("DELETE FROM memory_events WHERE trace_id = ?", [copy.ids[FULL]])
        r = memory(store, copy.ids[FULL])
    assert r.warnings == [OLD_STORE] and "re-ingest" in OLD_STORE


# ------------------------------------------------------------------------------------------- hand-built trace

def _mem(ts, nbytes, addr, total, reserved, dev_type=1, dev_id=0, name="[memory]"):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": name, "pid": PID, "tid": 100, "ts": ts,
            "args": {"Total Reserved": reserved, "Total Allocated": total, "Bytes": nbytes, "Device Id": dev_id,
                     "Device Type": dev_type, "Addr": addr}}


def _events() -> list[dict]:
    """Times in us. Thread 100: nn.Module Net_0 [90,235); aten::outer [100,200) holds aten::inner [100,150)
    (same start) and aten::zero at 160 (zero length); aten::empty [210,230). cudaMalloc [120,160) (under
    aten::inner). Kernels on device 0: [110,115) and [180,190): one idle gap [115,180) = 65 us, of which the
    allocator call covers [120,160) = 40 us.

    CUDA events (allocated 1000 before the window):        op               total
      100  +512 @A   (at outer/inner's common start)        aten::inner      1512
      150  +256 @B   (inner's end: not inner's)             aten::outer      1768
      160  -512 @A   (zero-length op: not its)              aten::outer      1256
      200  -100 @C   (outer's end; C allocated earlier)     none             1156
      215 +1024 @A                                          aten::empty      2180  <- peak, reserved 4096
      225 -1024 @A                                          aten::empty      1156
      240   +32 @E                                          none             1188
    Live at end: B (256, aten::outer) and E (32): 288 bytes, 2 blocks; one free of an earlier block (C).
    CPU: 105 +8 @F (aten::inner), never freed. One [OutOfMemory] event."""
    return [
        x("python_function", "nn.Module: Net_0", 90, 145),
        op("aten::outer", 100, 100, 1),
        op("aten::inner", 100, 50, 2),
        rt("cudaLaunchKernel", 105, 2, 11, 2),
        rt("cudaMalloc", 120, 40, 12, 2),
        op("aten::zero", 160, 0, 3),
        rt("cudaLaunchKernel", 170, 2, 13, 1),
        op("aten::empty", 210, 20, 4),
        kern("k1", 110, 5, 11, 2),
        kern("k2", 180, 10, 13, 1),
        _mem(100, 512, 0xA, 1512, 2048), _mem(150, 256, 0xB, 1768, 2048), _mem(160, -512, 0xA, 1256, 2048),
        _mem(200, -100, 0xC, 1156, 2048), _mem(215, 1024, 0xA, 2180, 4096), _mem(225, -1024, 0xA, 1156, 4096),
        _mem(240, 32, 0xE, 1188, 4096), _mem(105, 8, 0xF, 8, 0, dev_type=0, dev_id=-1),
        _mem(230, 4096, 0, 1156, 4096, name="[OutOfMemory]"),
    ]


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memory_hand")
    path = write_trace(tmp / "memory.json", _events())
    with open_store(empty(tmp / "m.duckdb")) as s:
        res = ingest_file(s, path)
        assert res.status == "ingested", res.message
        yield s, res.trace_id, path


def test_hand_built_trace(hand):
    store, t, path = hand
    r = memory(store, t)
    s = r.scalars
    assert s["peak_allocated_bytes"] == {"cuda:0": 2180, "cpu": 8}
    assert s["peak_reserved_bytes"] == {"cuda:0": 4096, "cpu": 0}
    assert (s["peak_operator"], s["peak_module"]) == ("aten::empty", "nn.Module: Net_0")
    assert s["live_at_end_bytes"] == {"cuda:0": 288, "cpu": 8}
    assert _ops(r) == {("cuda:0", "aten::inner"): [1, 512, 0, 0], ("cuda:0", "aten::outer"): [1, 256, 1, 512],
                       ("cuda:0", None): [1, 32, 1, 100], ("cuda:0", "aten::empty"): [1, 1024, 1, 1024],
                       ("cpu", "aten::inner"): [1, 8, 0, 0]}
    assert _ops(r) == memory_reference(path)["ops"]  # the reference agrees on the edge rules
    live = r.table("live_at_end")
    assert [(row.device, row.bytes, row.operator if isinstance(row.operator, str) else None)
            for row in live.itertuples(index=False)] == [
        ("cuda:0", 256, "aten::outer"), ("cuda:0", 32, None), ("cpu", 8, "aten::inner")]
    dev = r.table("device_memory").set_index("device")
    assert (dev.loc["cuda:0", "allocated_before_bytes"], dev.loc["cuda:0", "allocated_at_end_bytes"]) == (1000, 1188)
    assert r.trust["frees_of_blocks_allocated_before_window"] == 1 and r.trust["out_of_memory_events"] == 1
    assert any("out-of-memory" in w for w in r.warnings)
    assert (s["idle_ns"], s["allocator_idle_ns"], s["allocator_calls"]) == (65_000, 40_000, 1)
    assert s["allocator_idle_share"] == pytest.approx(40 / 65)


def test_bad_options_say_so(hand):
    from kernelscope.errors import UsageError

    store, t, _ = hand
    with pytest.raises(UsageError, match="max_points"):
        memory(store, t, max_points=2)
    with pytest.raises(UsageError, match="live_limit"):
        memory(store, t, live_limit="x")


def test_kept_by_the_parser_through_the_tolerant_path(tmp_path):
    """A memory arg that is not a number is read as null and counted, the rest of the event kept."""
    from kernelscope.parsers import open_trace

    events = _events()
    events[-3]["args"]["Total Allocated"] = "N/A"
    reader = open_trace(write_trace(tmp_path / "bad.json", events))
    rows = [r for b in reader for r in b.to_pylist() if r["name"] == "[memory]"]
    assert len(rows) == 8 and sum(r["mem_total_allocated_bytes"] is None for r in rows) == 1
    assert sorted(r["mem_bytes"] for r in rows) == sorted(e["args"]["Bytes"] for e in events if e["name"] == "[memory]")
    assert any("Total Allocated" in w for w in reader.meta.warnings)


def test_salvaged_cut_trace_keeps_its_memory_events(tmp_path):
    """A trace cut inside its event list, read with salvage: the memory events before the cut are kept."""
    from kernelscope.parsers import open_trace

    full = write_trace(tmp_path / "full.json", _events())
    text = full.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.index('"Addr": 14') + 5])  # inside the event at 240 us (Addr 0xE = 14)
    reader = open_trace(cut, salvage=True)
    rows = [r for b in reader for r in b.to_pylist() if r["name"] == "[memory]"]
    assert reader.meta.truncated and [r["mem_bytes"] for r in rows] == [512, 256, -512, -100, 1024, -1024]


@pytest.mark.parametrize("total, fires", [(2300, True), (2422, True), (2423, False), (4000, False)])
def test_peak_against_the_device_memory(tmp_path, total, fires):
    """The hand trace with its device's memory given (deviceProperties totalGlobalMem): cuda:0 peaks at 2,180
    bytes: 2180/2300 = 94.8% (recommend's memory_at_limit fires, above TensorBoard's 90%), 2180/2422 = 90.008%
    (fires), 2180/2423 = 89.97% (silent), 54.5% of 4,000; the CPU row has no device memory. Without
    totalGlobalMem: null."""
    from kernelscope.analysis import rules

    path = write_trace(tmp_path / "m.json", _events(),
                       deviceProperties=[{"id": 0, "name": "Test GPU", "totalGlobalMem": total}])
    with open_store(empty(tmp_path / "m.duckdb")) as s:
        res = ingest_file(s, path)
        r = memory(s, res.trace_id)
        bare = memory(s, ingest_file(s, write_trace(tmp_path / "bare.json", _events())).trace_id)
    dev = r.table("device_memory").set_index("device")
    assert dev.loc["cuda:0", "device_memory_bytes"] == total
    assert dev.loc["cuda:0", "peak_share_of_device"] == pytest.approx(2180 / total)
    assert pd.isna(dev.loc["cpu", "device_memory_bytes"]) and pd.isna(dev.loc["cpu", "peak_share_of_device"])
    assert bare.table("device_memory")["device_memory_bytes"].isna().all()
    found = rules.rule_memory_at_limit({"memory": r})
    assert bool(found) is fires
    if fires:
        (f,) = found
        assert f["message"].startswith(f"cuda:0's allocated memory peaks at 0.0 GiB, {2180 / total:.0%} of its 0.0 "
                                       "GiB (memory; in aten::empty, of module nn.Module: Net_0)")
        assert f["severity"] == "high" and f["saving_ns"] is None
