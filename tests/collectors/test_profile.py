"""profile(), range(), sweep(), timing and the script runner on the CPU build of torch."""

from __future__ import annotations

import gzip
import json
import sys
import time
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_pynvml import FakeNVML  # noqa: E402

import kernelscope  # noqa: E402
from kernelscope.collectors import nvml, nvml_devices, timing  # noqa: E402
from kernelscope.collectors.profile import CLOCK_MARKER, profile  # noqa: E402
from kernelscope.collectors.runner import run_script  # noqa: E402
from kernelscope.errors import UsageError  # noqa: E402

needs_cpu_torch = pytest.mark.skipif(torch.cuda.is_available(), reason="asserts the CPU-only behaviour")


def _events(run_dir):
    return json.loads(gzip.decompress((Path(run_dir) / "trace.json.gz").read_bytes()))["traceEvents"]


def _has_ingest():
    try:
        from kernelscope.storage.ingest import ingest_run  # noqa: F401
        from kernelscope.storage.store import open_store  # noqa: F401
    except ImportError:
        return False
    return True


needs_store = pytest.mark.skipif(not _has_ingest(), reason="kernelscope.storage.ingest.ingest_run not there yet")


@needs_cpu_torch
def test_schedule_gives_exactly_two_profiler_steps_and_clock_markers(tmp_path):
    x = torch.randn(32, 32)
    run_dir = tmp_path / "run"
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t_before = time.time_ns()
        with profile(name="sched", labels={"batch": 8}, schedule=sched, run_dir=run_dir, ingest=False) as p:
            for _ in range(5):
                x @ x
                p.step()
        t_after = time.time_ns()
    ours = [str(m.message) for m in w if "kernelscope" in str(m.message)]
    assert len(ours) == 1 and "CPU ops only" in ours[0]  # one warning, no crash
    ev = _events(run_dir)
    steps = sorted(e["name"] for e in ev if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    markers = [e for e in ev if e.get("name", "").startswith(CLOCK_MARKER + " ")]
    assert markers and all(e["cat"] == "user_annotation" for e in markers)
    epochs = [int(e["name"].split()[1]) for e in markers]
    assert all(t_before <= v <= t_after for v in epochs)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["name"] == "sched" and run["labels"] == {"batch": 8}
    assert set(epochs) <= set(run["clock"]["markers_epoch_ns"])
    assert run["provenance"]["torch"] == torch.__version__
    assert run["sampler"]["kind"] == "null" and run["sampler"]["achieved_period_ms"] is None
    assert len(run["run_id"]) == 32 and run["traces"] == ["trace.json.gz"]
    assert not (run_dir / "telemetry.parquet").exists()  # no samples, no file
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::mm" for e in ev)
    assert any("Input Dims" in e.get("args", {}) for e in ev if e.get("cat") == "cpu_op")  # record_shapes


def test_start_stop_without_with_and_range_is_a_user_annotation(tmp_path):
    p = profile(name="plain", run_dir=tmp_path / "r", ingest=False, telemetry=False)
    was = torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")
    try:
        p.start()
        # a script's first lines, run after `kernelscope profile` started the profile: run.json says what the
        # recorded work ran under (bandwidth's fp32 GEMM peak reads tf32_matmul) and what the start saw
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True  # precision 'high' with it
        with kernelscope.range("my_phase"):
            torch.ones(8).sum()
        p.stop()
    finally:
        torch.backends.cudnn.benchmark = was[0]
        torch.set_float32_matmul_precision(was[1])
    prov = json.loads((tmp_path / "r" / "run.json").read_text())["provenance"]
    assert prov["cudnn_benchmark"] is True and prov["tf32_matmul"] is True
    assert prov["flags_at_start"] == {"tf32_matmul": False, "float32_matmul_precision": "highest",
                                      "cudnn_benchmark": False}
    ev = _events(tmp_path / "r")
    phase = [e for e in ev if e.get("name") == "my_phase"]
    assert len(phase) == 1 and phase[0]["cat"] == "user_annotation"
    inner = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::sum"]
    assert inner and phase[0]["ts"] <= inner[0]["ts"] <= phase[0]["ts"] + phase[0]["dur"]
    # markers bracket the run: one after start, one before stop
    m = sorted((e["ts"], e["name"]) for e in ev if e.get("name", "").startswith(CLOCK_MARKER))
    assert len(m) == 2 and m[0][0] <= phase[0]["ts"] and m[1][0] >= phase[0]["ts"] + phase[0]["dur"]


def test_with_modules_records_an_eager_models_module_ranges(tmp_path):
    """torch.profiler's with_modules=True alone records no nn.Module range of an eager model (seen on an H200,
    torch 2.11, and here): profile(with_modules=True) turns the Python tracer (with_stack) on and says so."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    with profile(name="mods", run_dir=tmp_path / "r", ingest=False, telemetry=False, with_modules=True):
        model(torch.randn(2, 8))
    names = [e.get("name", "") for e in _events(tmp_path / "r") if e.get("cat") == "python_function"]
    assert sorted(n for n in names if n.startswith("nn.Module: ")) == [
        "nn.Module: Linear_0", "nn.Module: ReLU_0", "nn.Module: Sequential_0"]
    opts = json.loads((tmp_path / "r" / "run.json").read_text())["profiler_options"]
    assert opts["with_modules"] and opts["with_stack"] and opts["with_stack_for_modules"]


@pytest.mark.slow  # ~5 s: the Python tracer over 4 steps of a 12-layer encoder
def test_a_stack_recording_stops_without_parsing_every_event(tmp_path):
    """With with_stack under a schedule, torch's acc_events (on before) parsed every event into Python objects
    when the profiler stopped: 2.33 s instead of 0.41 s here, and in torch 2.13 it failed on this encoder two runs
    in three (UnicodeDecodeError in kineto_event.name(), no trace written; transformers' T5 every time). Off, the
    trace is written, holds the Python calls, and stop leaves the events unparsed (nothing here reads them)."""
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 12)
    x = torch.randn(2, 16, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning reaches the user (the one about acc_events neither) but:
        warnings.filterwarnings("ignore", message="kernelscope: no CUDA device")  # this machine has no GPU
        with profile(name="enc", run_dir=tmp_path / "r", ingest=False, telemetry=False, with_stack=True) as p:
            for _ in range(4):
                model(x).sum().backward()
                p.step()
    assert p._prof.profiler._function_events is None  # torch's per-event parse never ran
    events = _events(tmp_path / "r")
    assert sum(e.get("cat") == "python_function" for e in events) > 1000
    assert sum(e.get("name", "").startswith("ProfilerStep#") for e in events) == 5  # 4 step() calls, then stop


def test_default_run_dir_is_under_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = profile(name="dflt", ingest=False, telemetry=False)
    assert p.run_dir.parent == Path("runs") and p.run_dir.name.startswith("dflt-")


def test_unprofiled_timing_rows(tmp_path):
    calls = []
    fn = lambda: calls.append(1) or torch.ones(64, 64) @ torch.ones(64, 64)  # noqa: E731
    with profile(name="t", run_dir=tmp_path / "r", ingest=False, telemetry=False, unprofiled=fn):
        fn()
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    walls = [t for t in run["timings"] if t["kind"] == "wall"]
    assert [t["iteration"] for t in walls] == list(range(20))
    assert all(isinstance(t["dur_ns"], int) and t["dur_ns"] > 0 for t in walls)
    assert len(calls) == 5 + 20 + 1  # warm-up, timed, profiled; no energy loop without NVML
    assert run["timing"] == {"warmup": 5, "iters": 20}


def test_timing_refuses_too_few_iterations():
    with pytest.raises(ValueError):
        timing.measure(lambda: None, warmup=2)


class _FakeEnergy:
    """Energy counter that steps every 20 ms at a constant 50 W (like NVML's refresh)."""

    def __init__(self, watts=50.0, refresh_s=0.02):
        self.t0, self.w, self.r = time.perf_counter(), watts, refresh_s

    def energy_mj(self):
        t = time.perf_counter() - self.t0
        return int((t // self.r) * self.r * self.w * 1e3)


def test_energy_loop_gives_power_times_iteration_time():
    rows, details = timing.measure(lambda: time.sleep(0.002), energy_device=_FakeEnergy(),
                                   energy_min_s=0.3, min_energy_steps=10)
    (e,) = [r for r in rows if r["kind"] == "energy_loop"]
    info = details["energy_loop"]
    assert info["counter_steps"] >= 10 and 45 <= info["avg_power_w"] <= 55
    # 50 W x one iteration's wall time (~2.1 ms) in mJ
    assert e["energy_mj"] == pytest.approx(50.0 * e["dur_ns"] / 1e6, rel=0.1)
    assert e["iteration"] == info["iterations"] and e["dur_ns"] >= 2_000_000


def test_sweep_labels_and_run_dirs(tmp_path):
    seen = []

    def setup(batch, width):
        return {"x": torch.randn(batch, width)}

    def step(x):
        seen.append(tuple(x.shape))
        return x.relu().sum()

    res = kernelscope.sweep(step, {"batch": [1, 4], "width": [16]}, setup=setup, steps=2, name="sw",
                            run_root=tmp_path, ingest=False, telemetry=False)
    assert [r["point"] for r in res] == [{"batch": 1, "width": 16}, {"batch": 4, "width": 16}]
    for r, b in zip(res, [1, 4]):
        assert r["run_dir"] == tmp_path / f"sw_batch{b}_width16"
        run = json.loads((r["run_dir"] / "run.json").read_text())
        assert run["labels"] == {"batch": b, "width": 16, "sweep": "sw"}  # numbers stay numbers
        assert len([t for t in run["timings"] if t["kind"] == "wall"]) == 20
        steps = [e for e in _events(r["run_dir"]) if e.get("name", "").startswith("ProfilerStep#")]
        assert len(steps) == 2
    # per point: 5 warm-up + 20 timed + 1 profiler warm-up + 2 active
    assert seen.count((1, 16)) == 28 and seen.count((4, 16)) == 28


def test_runner_profiles_a_script_that_never_imports_kernelscope(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text(
        "import sys, torch\n"
        "a = torch.ones(16, 16)\n"
        "b = (a @ a).sum()\n"
        "open(sys.argv[1], 'w').write(str(float(b)) + ' ' + __name__)\n"
        "sys.exit(3)\n")
    out = tmp_path / "out.txt"
    rc = run_script(["python", str(script), str(out)], name="scr", labels={"k": "v"},
                    run_dir=tmp_path / "run", ingest=False)
    assert rc == 3
    assert "kernelscope: the profiled run of the script exited with 3; its trace holds what it recorded until " \
           "then" in capsys.readouterr().err  # not only a traceback above 'run ... ingested as trace'
    assert out.read_text() == "4096.0 __main__"
    ev = _events(tmp_path / "run")
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::mm" for e in ev)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["name"] == "scr" and run["labels"] == {"k": "v"}


def test_runner_usage_errors(tmp_path):
    with pytest.raises(UsageError):
        run_script([])
    with pytest.raises(UsageError, match="not found"):
        run_script(["python", str(tmp_path / "missing.py")])
    with pytest.raises(UsageError, match="not a Python script"):
        run_script(["ls", "-l"])


def test_launch_blocking_warns_loudly(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with profile(name="lb", run_dir=tmp_path / "r", ingest=False, telemetry=False):
            pass
    assert any("CUDA_LAUNCH_BLOCKING=1" in str(m.message) for m in w)
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["provenance"]["env"]["CUDA_LAUNCH_BLOCKING"] == "1"


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_telemetry_written_as_parquet_when_sampler_has_rows(tmp_path, monkeypatch, mode):
    """With a (fake) GPU sampler the run dir gets telemetry.parquet with the documented schema, and
    run.json the achieved period over the traced window (first to last marker that is in the trace)."""
    import pyarrow.parquet as pq

    fake = FakeNVML(["GPU-aaaa"])
    monkeypatch.setattr(nvml_devices, "pynvml", fake)
    child = tmp_path / "child_pynvml.py"  # the sampler process imports the same fake
    child.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
                     "from fake_pynvml import FakeNVML\npynvml = FakeNVML(['GPU-aaaa'])\n")
    monkeypatch.setenv("KERNELSCOPE_PYNVML", str(child))
    seen = []

    def make(quiet=False, mode=None, _m=nvml.make_sampler):
        seen.append(mode)
        return _m(devices=["GPU-aaaa"], period_ms=5, mode=mode)

    monkeypatch.setattr(nvml, "make_sampler", make)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2)
    t0 = time.time_ns()
    with profile(name="tel", run_dir=tmp_path / "r", ingest=False, schedule=sched, telemetry=mode) as p:
        for _ in range(5):
            time.sleep(0.04)
            p.step()
    wall_ms = (time.time_ns() - t0) / 1e6
    assert seen == [mode]
    t = pq.read_table(tmp_path / "r" / "telemetry.parquet")
    assert t.schema == nvml.TELEMETRY_SCHEMA and t.num_rows >= 5
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["sampler"]["kind"] == mode
    assert run["sampler"]["samples"] == t.num_rows
    assert run["sampler"]["achieved_period_ms"] == nvml.interval_stats(t)["median_ms"]
    ts = t.column("ts_ns").to_pylist()  # no burst: the mean interval is not below the 5 ms period (a late tick
    assert (max(ts) - min(ts)) / 1e6 / (len(ts) - 1) >= 4.5  # may shorten the next one, so not the median)
    in_trace = sorted(int(e["name"].split()[1]) for e in _events(tmp_path / "r")
                      if e.get("name", "").startswith(CLOCK_MARKER + " "))
    assert run["clock"]["traced_markers_epoch_ns"] == in_trace and len(in_trace) >= 3
    tp = run["sampler"]["traced_period"]
    assert tp["window_ms"] == pytest.approx((in_trace[-1] - in_trace[0]) / 1e6)
    assert 70 <= tp["window_ms"] <= wall_ms  # two active steps of >= 40 ms, inside the with block
    ts = t.column("ts_ns").to_pylist()
    assert tp["samples"] == sum(in_trace[0] <= x <= in_trace[-1] for x in ts) >= 1
    assert tp == nvml.interval_stats(t, (in_trace[0], in_trace[-1])) | {"window_ms": tp["window_ms"]}


@needs_store
def test_profile_ingests_into_the_store(tmp_path):
    db = tmp_path / "ks.duckdb"
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2)
    x = torch.randn(32, 32)
    with profile(name="x", labels={"batch": 8}, db=db, schedule=sched, run_dir=tmp_path / "r",
                 unprofiled=lambda: x @ x) as p:
        for _ in range(5):
            x @ x
            p.step()
    assert p.trace_id
    with kernelscope.open_store(db, read_only=True) as s:
        con = getattr(s, "con", None) or getattr(s, "connection", None)
        q = lambda sql: con.execute(sql, [p.trace_id]).fetchall()  # noqa: E731
        assert q("SELECT name, run_id FROM traces WHERE trace_id = ?") == [("x", p.run_id)]
        labels = dict((k, (t, n)) for k, t, n in q("SELECT key, value_text, value_num FROM labels WHERE trace_id = ?"))
        assert labels["batch"] == ("8", 8.0)
        assert q("SELECT count(*) FROM annotations WHERE trace_id = ? AND kind = 'step'") == [(2,)]
        assert q("SELECT count(*) FROM timings WHERE trace_id = ? AND kind = 'wall'") == [(20,)]
        (prov,) = q("SELECT provenance FROM traces WHERE trace_id = ?")[0]
        assert json.loads(prov)["torch"] == torch.__version__


def test_steps_are_recorded_without_a_schedule(tmp_path):
    """torch records ProfilerStep#N ranges only under a schedule. With none given, profile() passes one that
    records from the start, every step, in one cycle, so step() leaves steps for the steps analysis (a ViT
    training loop profiled with `kernelscope profile`'s defaults on an H100 had none, and the analysis told the
    user to call prof.step(), which kernelscope profile already did). run.json still says no schedule was given."""
    from kernelscope.analysis import cache

    m = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(4, 16)
    db = tmp_path / "ks.duckdb"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with profile(name="nosched", db=db, run_dir=tmp_path / "r", telemetry=False) as p:
            for _ in range(3):
                m(x).sum().backward()
                opt.step()
                p.step()
    assert not [str(x.message) for x in w if "warmup" in str(x.message)]  # torch's warm-up warning is not shown
    steps = sorted(e["name"] for e in _events(tmp_path / "r") if e.get("ph") == "X"
                   and e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]  # + the tail to stop
    assert json.loads((tmp_path / "r" / "run.json").read_text())["profiler_options"]["schedule"] is None
    with kernelscope.open_store(db, read_only=True) as s:
        res = cache.analysis(s, "steps", p.trace_id)
    assert (res.scalars["step_count"], res.scalars["warmup_steps"]) == (4, 1), res.scalars


def test_runner_runs_a_module_with_dash_m(tmp_path, monkeypatch):
    pkg = tmp_path / "mods"
    pkg.mkdir()
    (pkg / "tinymod.py").write_text("import torch, sys\ntorch.ones(4).add(1)\nsys.exit(0)\n")
    monkeypatch.setenv("PYTHONPATH", str(pkg))
    rc = run_script(["python3", "-m", "tinymod"], run_dir=tmp_path / "run", ingest=False)
    assert rc == 0
    assert any(e.get("name") == "aten::add" for e in _events(tmp_path / "run"))


@needs_store
def test_runner_ingests_in_the_parent(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("import torch\n(torch.ones(8, 8) @ torch.ones(8, 8)).sum()\n")
    db = tmp_path / "ks.duckdb"
    rc = run_script(["python", str(script)], labels={"batch": "4"}, db=db, run_dir=tmp_path / "run")
    assert rc == 0
    with kernelscope.open_store(db, read_only=True) as s:
        con = getattr(s, "con", None) or getattr(s, "connection", None)
        rows = con.execute("SELECT t.name, l.value_num FROM traces t JOIN labels l USING (trace_id) "
                           "WHERE l.key = 'batch'").fetchall()
        assert rows == [("t", 4.0)]
        assert con.execute("SELECT count(*) FROM cpu_ops WHERE name = 'aten::mm'").fetchone()[0] == 1


@pytest.mark.parametrize("group, code", [(False, 143), (True, 130)], ids=["kill", "ctrl-c"])
def test_kill_of_profile_stops_the_script_too(tmp_path, group, code):
    """`kill PID` of `kernelscope profile` (a scheduler, a container stop) used to end it at once and leave the
    script running, orphaned (on a GPU, holding its memory). Now the script's process is stopped with it, one
    line says so, the exit code is 143 and nothing is ingested. Ctrl-C (SIGINT to the whole foreground group):
    the same line and 130, the shell's code, not click's "Aborted!" and 1."""
    import os
    import signal
    import subprocess

    script, pid_file, db = tmp_path / "long.py", tmp_path / "pid", tmp_path / "s.duckdb"
    script.write_text("import os, sys, time, torch\n"
                      "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
                      "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-m", "kernelscope", "profile", "--no-baseline", "--no-telemetry",
                             "--run-dir", str(tmp_path / "run"), "--db", str(db), "--", "python", str(script),
                             str(pid_file)], stderr=subprocess.PIPE, text=True, start_new_session=group)
    try:
        end = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert proc.poll() is None and time.monotonic() < end, "the script never started"
            time.sleep(0.05)
        script_pid = int(pid_file.read_text())
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code and "Aborted!" not in err
    assert err.splitlines()[-1] == (f"kernelscope: stopped during the profiled run of the script; its process "
                                    f"({script_pid}) was stopped too and nothing was ingested; {tmp_path / 'run'} "
                                    "keeps what it wrote")
    with pytest.raises(ProcessLookupError):
        os.kill(script_pid, 0)
    assert not db.exists()
