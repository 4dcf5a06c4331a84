"""`kernelscope profile` options through the real runner on CPU scripts: what run.json and the stored trace
record, the step rule on an unmodified script, the overhead line, a script's own torch.profiler, and the
one-line refusals (nsys/ncu absent, bad --schedule) that come before any script runs."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import warm_cli  # noqa: E402

from kernelscope.errors import UsageError  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="asserts the CPU-only behaviour")

TRAIN = """\
import sys, torch
m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(8, 16)
for _ in range(6):                      # 6 optimizer steps; 6 outermost forwards too
    opt.zero_grad()
    m(x).sum().backward()
    opt.step()
with torch.profiler.profile() as own:   # the script's own profiler (tensorboard-style) must keep working
    m(x)
open(sys.argv[1], "w").write(str(sum(e.name == "aten::linear" for e in own.events())))
"""

INFER = """\
import torch
m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(8, 16)
with torch.no_grad():
    for _ in range(6):                  # only module forwards: 6 outermost calls (3 nested each)
        m(x)
"""


def _events(run_dir: Path) -> list[dict]:
    return json.loads(gzip.decompress((run_dir / "trace.json.gz").read_bytes()))["traceEvents"]


def _steps(events) -> list[str]:
    return sorted(e["name"] for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#"))


def _profile(tmp_path, *args):
    return warm_cli.run(["profile", "--db", tmp_path / "ks.duckdb", *args], cwd=tmp_path, timeout=120)


def test_optimizer_steps_schedule_and_every_option_recorded(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    run_dir = tmp_path / "run"
    r = _profile(tmp_path, "--run-dir", run_dir, "--schedule", "1,1,2", "--no-shapes", "--stack", "--memory",
                 "--modules", "--no-telemetry", "--no-baseline", "--", "python", script, tmp_path / "own.txt")
    assert r.returncode == 0, r.stderr
    assert int((tmp_path / "own.txt").read_text()) >= 2  # the script's own profiler recorded its forward
    run = json.loads((run_dir / "run.json").read_text())
    assert run["step_rule"] == {"rule": "optimizer", "steps": 6, "seen": {"optimizer": 6, "forward": 7, "range": 0}}
    opts = run["profiler_options"]
    assert opts["schedule"]["wait"] == 1 and opts["schedule"]["warmup"] == 1 and opts["schedule"]["active"] == 2
    assert opts["schedule"]["repeat"] == 1 and opts["steps"] is None
    assert {k: opts[k] for k in ("record_shapes", "with_stack", "profile_memory", "with_modules")} == {
        "record_shapes": False, "with_stack": True, "profile_memory": True, "with_modules": True}
    assert run["telemetry"] == {"enabled": False, "kind": None, "period_ms": None, "requested_period_ms": None}
    assert run["sampler"]["kind"] is None and not (run_dir / "telemetry.parquet").exists()
    assert run["script_profiler"]["detected"].endswith("profile.start")
    ev = _events(run_dir)
    assert _steps(ev) == ["ProfilerStep#2", "ProfilerStep#3"]  # wait 1, warm-up 1, active 2 of 6 steps
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    assert ops and not any("Input Dims" in e.get("args", {}) for e in ops)  # --no-shapes
    assert any(e.get("cat") == "python_function" for e in ev)  # --stack
    assert any(e.get("name") == "[memory]" for e in ev)  # --memory
    assert "overhead: profiler not measured (no un-profiled run (--no-baseline)), no sampler ran" in r.stderr
    trace_id = r.stderr.split(" as trace ")[1].split()[0]
    s = warm_cli.run(["summary", trace_id, "--json", "--db", tmp_path / "ks.duckdb"], cwd=tmp_path, timeout=60)
    assert json.loads(s.stdout)["trust"]["not_recorded"] == ["shapes"]


@pytest.mark.parametrize("args, message", [
    (["--schedule", "1,x,2"], "--schedule '1,x,2': write WAIT,WARMUP,ACTIVE[,REPEAT]"),
    (["--schedule", "1,1,0"], "ACTIVE >= 1"),
    (["--nsys"], "nsys"),
    (["--ncu", "top:3"], "Nsight Compute"),
    (["--ncu", "top:0"], "N must be a whole number >= 1"),
    (["--ncu", "top:3", "FAKE_NCU"], "--ncu needs a CUDA GPU"),
])
def test_refusals_come_in_one_line_before_the_script_runs(tmp_path, monkeypatch, args, message):
    if "FAKE_NCU" in args:  # an ncu on PATH, but no CUDA here
        args = [a for a in args if a != "FAKE_NCU"]
        (tmp_path / "ncu").write_text("#!/bin/sh\nexit 0\n")
        (tmp_path / "ncu").chmod(0o755)
    script = tmp_path / "s.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('1')\n")
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}  # no nsys/ncu on PATH
    r = warm_cli.run(["profile", "--db", tmp_path / "ks.duckdb", *args, "--", "python", script], cwd=tmp_path,
                     env=env, timeout=60)
    assert r.returncode == UsageError.exit_code, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "ran").exists()


FAKE_NSYS = """\
import gzip, json, shutil, subprocess, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["--version"]:
    print("NVIDIA Nsight Systems version 2099.1 (fake)")
elif args[0] == "profile":
    i = args.index("-o")
    cmd = args[i + 2:]
    while cmd[0].startswith("--"):
        cmd = cmd[1:]
    rc = subprocess.call(cmd)
    open(args[i + 1] + ".nsys-rep", "wb").write(b"fake report")
    sys.exit(rc)
elif args[0] == "export":
    with gzip.open({sample!r}) as src, open(args[args.index("-o") + 1], "wb") as dst:
        shutil.copyfileobj(src, dst)
"""


def test_module_forward_steps_overhead_and_a_fake_nsys_pass(tmp_path):
    """A script of module forwards only: the step rule, the un-profiled pass and the overhead line; then --nsys
    PATH: the script runs again under (a fake) nsys with a capture range for --schedule, in the runner's
    nsys mode; the report is kept, its SQLite export ingested as a second trace of the same run, labelled."""
    import sys as _sys

    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "nsight" / "encoder2_nvtx.sqlite.gz"
    nsys = tmp_path / "bin" / "nsys"
    nsys.parent.mkdir()
    nsys.write_text(f"#!{_sys.executable}\n" + FAKE_NSYS.format(log=str(tmp_path / "argv.log"), sample=str(sample)))
    nsys.chmod(0o755)
    (nsys.parent / "QdstrmImporter").write_text("not an ELF file: ldd lists nothing missing\n")
    script = tmp_path / "infer.py"
    script.write_text(INFER)
    run_dir = tmp_path / "run"
    r = _profile(tmp_path, "--run-dir", run_dir, "--nsys", nsys, "--schedule", "1,1,2", "--telemetry-period", "25",
                 "--label", "batch=8", "--", "python", script)
    assert r.returncode == 0, r.stderr
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("kernelscope: ")]
    assert said[:2] == [f"kernelscope: un-profiled run: {script} (timing only; the profiled run follows)",
                        "kernelscope: profiled run: recording torch.profiler.schedule(wait=1, warmup=1, active=2, "
                        f"repeat=1) into {run_dir}"]
    # the Kineto pass: steps are the outermost module forwards (no optimizer, no "step" region)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["step_rule"] == {"rule": "forward", "steps": 6, "seen": {"optimizer": 0, "forward": 6, "range": 0}}
    assert _steps(_events(run_dir)) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert run["profiler_options"]["record_shapes"] is True and run["profiler_options"]["with_stack"] is False
    assert run["telemetry"]["enabled"] is True and run["telemetry"]["kind"] == "null"  # no NVML here
    assert run["telemetry"]["requested_period_ms"] == 25
    # the un-profiled pass timed the whole process (one row) and took the same step boundaries: 6 boundaries,
    # 5 steps between them in each pass; the overhead compares the 2 recorded steps (indices 1 and 2, the
    # ProfilerStep#2 and #3 ranges) with the same two steps un-profiled
    assert run["timing"]["kind"] == "process"
    assert "un-profiled timing: the whole process and its 5 steps (taken at each outermost module forward;" in r.stderr
    (row,) = [t for t in run["timings"] if t["kind"] == "process_wall"]
    assert row["dur_ns"] == run["timing"]["process_wall_ns"] > 0
    un, pr = run["timing"]["step_times"], run["step_times"]
    assert un["rule"] == pr["rule"] == "forward" and len(un["ns"]) == len(pr["ns"]) == 5
    assert pr["recorded"] == [False, True, True, False, False] and un["recorded"] == [False] * 5
    prof = run["overhead"]["profiler"]
    assert prof["basis"] == "step" and prof["rule"] == "forward" and prof["n"] == 2
    assert prof["profiled_median_ns"] == int(statistics.median(pr["ns"][1:3]))
    assert prof["unprofiled_median_ns"] == int(statistics.median(un["ns"][1:3]))
    lines = [ln for ln in r.stderr.splitlines() if "overhead:" in ln]
    detail = ("(median of 2 recorded steps against the same steps un-profiled; steps taken at each outermost module "
              "forward)")
    said = (f"profiler {prof['pct']:+.1f}% per step {detail}" if prof["pct"] >= 0 else  # CPU steps are noisy
            f"profiler under the noise: {prof['pct']:+.1f}% per step {detail}; a step is not faster for being "
            "profiled, so these steps vary more than the profiler costs")
    assert lines == [f"kernelscope: overhead: {said}, no sampler (no NVML device)"]
    assert run["provenance"]["profiler_overhead"] == prof  # stored with the trace: the report's inflation
    from kernelscope.reports.bound import inflation
    from kernelscope.storage.store import open_store

    trace_id = r.stderr.split(" as trace ")[1].split()[0]
    with open_store(tmp_path / "ks.duckdb", read_only=True) as st:
        assert inflation(st, trace_id)[0] == pytest.approx(1 + prof["pct"] / 100)
    # the nsys pass
    calls = [json.loads(ln) for ln in (tmp_path / "argv.log").read_text().splitlines()]
    (prof,) = [c for c in calls if c[0] == "profile"]
    assert "--trace=cuda,nvtx" in prof and "--capture-range=cudaProfilerApi" in prof
    child = prof[prof.index("--capture-range-end=stop") + 1:]
    assert child[1:5] == ["-m", "kernelscope.collectors.runner", "--mode", "nsys"] and child[-1] == str(script)
    assert any(c[0] == "export" for c in calls)
    assert (run_dir / "infer.nsys-rep").read_bytes() == b"fake report" and (run_dir / "infer.sqlite").is_file()
    run = json.loads((run_dir / "run.json").read_text())
    assert run["nsight"]["nsys"]["ok"] is True
    out = warm_cli.run(["traces", "--json", "--db", tmp_path / "ks.duckdb"], cwd=tmp_path, timeout=60)
    traces = {t["name"]: t for t in json.loads(out.stdout)}
    assert set(traces) == {"infer", "infer-nsys"}
    assert traces["infer"]["labels"] == {"batch": 8, "collector": "kineto"}
    assert traces["infer-nsys"]["labels"] == {"batch": 8, "collector": "nsys"}


def test_profile_api_steps_and_telemetry_period(tmp_path, monkeypatch):
    """kernelscope.profile(steps=N): only the first N step() iterations are recorded; the options and the
    sampler period asked for are in run.json (in process: no subprocess)."""
    import warnings

    from kernelscope.collectors import nvml
    from kernelscope.collectors.profile import profile

    seen = []
    monkeypatch.setattr(nvml, "make_sampler", lambda _m=nvml.make_sampler, **kw: seen.append(kw) or _m(**kw))
    x = torch.randn(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(name="api", run_dir=tmp_path / "r", ingest=False, steps=2, record_shapes=False,
                     telemetry_period_ms=40) as p:
            for _ in range(5):
                x @ x
                p.step()
    assert _steps(_events(tmp_path / "r")) == ["ProfilerStep#0", "ProfilerStep#1"]
    assert seen and seen[0]["period_ms"] == 40.0
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["profiler_options"]["steps"] == 2 and run["profiler_options"]["record_shapes"] is False
    assert run["profiler_options"]["schedule"] == {"wait": 0, "warmup": 0, "active": 2, "repeat": 1, "skip_first": 0}
    assert run["provenance"]["profiler_options"] == run["profiler_options"]


FAKE_NCU = """\
import gzip, json, subprocess, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["--version"]:
    print("NVIDIA Nsight Compute version 2099.1 (fake)")
    sys.exit(0)
rc = subprocess.call(args[args.index("--metrics") + 2:])
open(args[args.index("--log-file") + 1], "wb").write(gzip.decompress(open({csv!r}, "rb").read()))
sys.exit(rc)
"""


def test_ncu_pass_chooses_kernels_from_the_stored_kineto_trace_and_joins_them(tmp_path):
    """The runner's ncu pass (no CUDA needed past the up-front check): the top kernels of the stored Kineto
    trace of the run go to (a fake) ncu as --kernel-name/--launch-count, the child is the runner in ncu mode, and
    the CSV it wrote is joined to that trace on the next ingest."""
    import shutil
    import sys as _sys

    from kernelscope.collectors import nsight, nsight_passes, runner

    nsight_dir = Path(__file__).resolve().parents[2] / "sample_traces" / "nsight"
    run = tmp_path / "run"
    shutil.copytree(nsight_dir / "encoder2_kineto", run)
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!{_sys.executable}\n" + FAKE_NCU.format(log=str(tmp_path / "argv.log"),
                                                                csv=str(nsight_dir / "encoder2_ncu_dram.csv.gz")))
    ncu.chmod(0o755)
    db, lines = tmp_path / "ks.duckdb", []
    res = runner.RunResult(rc=0, run_dir=run)
    runner._ingest_all(run, "encoder2", None, db, res, lines.append)
    assert res.trace_id and res.failed is None
    assert lines[0] == f"trace.json.gz ingested as trace {res.trace_id}", lines  # not again "(ingested as <id>)"
    child = []

    def child_cmd(mode, *rest):
        child.append(runner._child_cmd(mode, *rest))
        return [_sys.executable, "-c", "print('the script ran')"]

    tools = {"ncu": ncu, "ncu_spec": nsight.parse_ncu_spec("top:5")}
    out = nsight_passes.run_ncu(tools, runner.Options(), run, "encoder2", ["s.py"], "path", None, res, lines.append,
                                child_cmd, runner._child_env, db=db)
    assert out.ok and res.failed is None, out.message
    assert child[0][3:5] == ["--mode", "ncu"] and child[0][-2:] == ["--", "s.py"]
    call = [json.loads(ln) for ln in (tmp_path / "argv.log").read_text().splitlines() if "--log-file" in ln][0]
    targets = nsight.ncu_targets(tools["ncu_spec"], nsight.stored_kernels(db, res.trace_id))
    assert call[call.index("--kernel-name") + 1] == "regex:" + targets.regex and len(targets.names) == 5
    assert call[call.index("--launch-count") + 1] == str(targets.launch_count)
    runner._ingest_all(run, "encoder2", None, db, res, lines.append)
    joined = [ln for ln in lines if ln.startswith("encoder2_ncu.csv ingested")]
    assert len(joined) == 1 and f"as trace {res.trace_id}" in joined[0], lines


def test_the_python_tracer_on_a_whole_run_is_said_before_it_runs(tmp_path, monkeypatch):
    """--stack or --modules without --steps/--schedule records every Python call of the run (2.4 GB of JSON for a
    GPT-2 generate() script on an H200): one line says so before the script runs; with a schedule, nothing."""
    from click.testing import CliRunner

    from kernelscope.cli import cli
    from kernelscope.cli.collect import PYTHON_TRACER_NOTE
    from kernelscope.collectors import runner

    ran = []
    monkeypatch.setattr(runner, "run_passes", lambda argv, **kw: ran.append(argv) or runner.RunResult(rc=0, run_dir=tmp_path))
    for args, said in ((["--stack"], True), (["--modules"], True), (["--modules", "--steps", "2"], False),
                       (["--stack", "--schedule", "1,1,2"], False), ([], False)):
        res = CliRunner().invoke(cli, ["profile", *args, "--db", str(tmp_path / "ks.duckdb"), "--", "python", "s.py"])
        assert res.exit_code == 0, res.output
        assert (PYTHON_TRACER_NOTE in res.stderr) is said, (args, res.stderr)
    assert len(ran) == 5


def test_a_faster_profiled_run_is_not_a_negative_overhead():
    """BERT fine-tuning on an H200, timed as whole processes: the profiled run (second) took 16.32 s, the
    un-profiled one (first, paying the start-up) 23.05 s. The line said "profiler -29.2%"; it now says the
    profiler was not measured and why. A slower profiled run keeps its percentage."""
    from kernelscope.collectors.runner import overhead_line

    faster = {"profiler": {"basis": "process", "n": 1, "profiled_wall_ns": 16_320_000_000,
                           "unprofiled_wall_ns": 23_053_991_000, "pct": (16.32 / 23.053991 - 1) * 100},
              "sampler": {"kind": "process", "cpu_ms": 3936.1}}
    assert overhead_line(faster) == (
        "overhead: profiler not measured: the profiled run (16.32 s) was 29.2% faster than the un-profiled one "
        "(23.05 s), which ran first and paid the start-up (file caches, CUDA initialisation); mark the loop with "
        'kernelscope.range("step") to compare steps, sampler 3936.1 ms CPU')
    slower = {"profiler": {**faster["profiler"], "profiled_wall_ns": 30_000_000_000, "pct": 30.1},
              "sampler": faster["sampler"]}
    assert overhead_line(slower) == "overhead: profiler +30.1% process wall time (one run each), sampler 3936.1 ms CPU"


def test_step_overhead_compares_the_same_steps_of_both_passes():
    """The step basis pairs the profiled pass's recorded steps with the un-profiled pass's steps of the same
    index: the first steps of a run are slow (warm-up) and the profiled window comes later. A comparison with
    every un-profiled step (median 30 ms here) would read -58%; the same steps (10 and 11 ms) give +19%."""
    from kernelscope.collectors.runner import _profiler_overhead, overhead_line

    ms = 1_000_000
    un = {"rule": "optimizer", "ns": [50 * ms, 30 * ms, 10 * ms, 11 * ms, 30 * ms], "recorded": [False] * 5}
    pr = {"rule": "optimizer", "ns": [52 * ms, 31 * ms, 12 * ms, 13 * ms, 29 * ms],
          "recorded": [False, False, True, True, False]}
    base = {"kind": "process", "process_wall_ns": 9 * 10**9, "step_times": un}
    prof = _profiler_overhead(base, [], 10 * 10**9, pr)
    assert prof == {"basis": "step", "rule": "optimizer", "n": 2, "profiled_median_ns": 12_500_000,
                    "unprofiled_median_ns": 10_500_000, "pct": pytest.approx((12.5 / 10.5 - 1) * 100)}
    assert overhead_line({"profiler": prof, "sampler": {"kind": "process", "cpu_ms": 5.0}}) == (
        "overhead: profiler +19.0% per step (median of 2 recorded steps against the same steps un-profiled; "
        "steps taken at each optimizer.step()), sampler 5.0 ms CPU")
    # recorded steps faster than the same steps un-profiled (a 6-step CPU script under --steps 2 read -79.0%):
    # noise, said as such, not a negative cost
    quick = _profiler_overhead(base, [], 10 * 10**9, {**pr, "ns": [52 * ms, 31 * ms, 9 * ms, 10 * ms, 29 * ms]})
    assert quick["pct"] == pytest.approx((9.5 / 10.5 - 1) * 100)
    assert overhead_line({"profiler": quick, "sampler": {"kind": "process", "cpu_ms": 5.0}}) == (
        "overhead: profiler under the noise: -9.5% per step (median of 2 recorded steps against the same steps "
        "un-profiled; steps taken at each optimizer.step()); a step is not faster for being profiled, so these "
        "steps vary more than the profiler costs, sampler 5.0 ms CPU")
    # other rules in the two passes, no recorded step, or no steps: the whole processes, as before
    for other in ({**pr, "rule": "forward"}, {**pr, "recorded": [False] * 5}, None):
        assert _profiler_overhead(base, [], 10 * 10**9, other)["basis"] == "process"
    assert _profiler_overhead({**base, "step_times": None}, [], 10 * 10**9, pr)["basis"] == "process"


def test_step_times_leave_the_profilers_own_step_out():
    """A step's time runs from the end of one boundary's work (the profiler's step(): a window's start drains the
    GPU queue, its end writes the trace) to the start of the next boundary's; recorded = recording after it."""
    from kernelscope.collectors.stepping import StepTimes

    now = [0]
    state = iter([False, True, True, False])

    def profiler_step():  # 500 ns of the profiler's own work at each boundary
        now[0] += 500

    clock = StepTimes(profiler_step, lambda: next(state), clock=lambda: now[0])
    for work_ns in (0, 100, 120, 90):  # the script's work before each boundary
        now[0] += work_ns
        clock()
    assert clock.doc("optimizer") == {"rule": "optimizer", "ns": [100, 120, 90], "recorded": [False, True, True]}


def test_a_compiled_module_is_one_step_per_call_and_torch_does_not_warn():
    """Llama compiled with mode="reduce-overhead" on an H200: torch warned at every call that a global module hook
    (the Stepper's) fires an extra time for the OptimizedModule. The rule counts the nested call once (10 calls,
    10 steps there), so the runner silences that warning."""
    import warnings

    torch = pytest.importorskip("torch")
    from kernelscope.collectors.stepping import Stepper

    fwd = torch.compile(torch.nn.Linear(4, 4), backend="eager")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        stepper = Stepper(lambda: None).install()
        try:
            for _ in range(3):
                fwd(torch.ones(2, 4))
        finally:
            doc = stepper.finish()
    assert [str(w.message)[:60] for w in seen if "global hooks" in str(w.message)] == []
    assert (doc["rule"], doc["steps"]) == ("forward", 3)


def test_steps_build_their_schedule_without_torchs_warmup_warning():
    """`kernelscope profile --steps 4` (Mamba's generate() on an H200) printed torch's "Profiler won't be using
    warmup, this can skew profiler results" with runner.py's path and line, as if kernelscope had failed; the
    schedule of --steps (and of a --schedule with WARMUP 0) records from the first step on purpose. torch still
    warns for a raw schedule; a WARMUP of 1 builds the same schedule torch would."""
    import warnings

    import torch

    from kernelscope.collectors.runner import torch_schedule

    with warnings.catch_warnings(record=True) as raw:
        warnings.simplefilter("always")
        torch.profiler.schedule(wait=0, warmup=0, active=4, repeat=1)
    assert any("warmup" in str(w.message) for w in raw)  # the warning exists in this torch
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        s = torch_schedule(torch, (0, 0, 4, 1))
    assert not [w for w in ours if "warmup" in str(w.message)]
    act = torch.profiler.ProfilerAction
    assert [s(i) for i in range(5)] == [act.RECORD] * 3 + [act.RECORD_AND_SAVE, act.NONE]
    s1 = torch_schedule(torch, (1, 1, 2, 1))
    assert [s1(i) for i in range(5)] == [act.NONE, act.WARMUP, act.RECORD, act.RECORD_AND_SAVE, act.NONE]


SETUP_THEN_INFER = """\
import torch
import json, decimal, fractions, statistics     # start-up: imports and Python work before the first step
sum(statistics.mean([i, i + 1]) for i in range(2000))
w = torch.arange(4096).float().reshape(64, 64)  # an operator of the start-up only
m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(8, 16)
with torch.no_grad():
    for _ in range(6):
        m(x)
"""


def test_steps_n_records_n_steps_after_the_start_up(tmp_path):
    """--steps N records N of the script's steps, not its start-up. torch's step 0 runs from the profiler's
    start (before the script) to the first step boundary; --steps 4 recorded it as the first of its 4 steps: on
    transformers' Mamba generate() under --modules that start-up (import transformers, building the model) held
    2.77M of the trace's 2.78M Python calls (859 MB of JSON, the profiled run 25x slower) and left 3 real steps.
    Now step 1 is the profiler's warm-up (its start-up cost lands there) and ProfilerStep#2 and #3 are recorded,
    two recorded steps in run.json, no start-up operator or Python call."""
    script = tmp_path / "infer.py"
    script.write_text(SETUP_THEN_INFER)
    run_dir = tmp_path / "run"
    r = _profile(tmp_path, "--run-dir", run_dir, "--steps", "2", "--stack", "--no-telemetry", "--no-baseline",
                 "--", "python", script)
    assert r.returncode == 0, r.stderr
    assert f"kernelscope: profiled run: recording 2 steps of the script after its start-up and one warm-up step into " \
        f"{run_dir}" \
        in r.stderr  # said as the pass starts: a long profiled run says which pass it is in
    # kernelscope's own warning in the child is one line, not Python's "path:line: UserWarning" and source line
    assert "\nkernelscope: no CUDA device: profiling CPU ops only, no GPU telemetry\n" in r.stderr
    assert "UserWarning: kernelscope" not in r.stderr and "collectors/profile.py" not in r.stderr
    ev = _events(run_dir)
    assert _steps(ev) == ["ProfilerStep#2", "ProfilerStep#3"]
    names = {e.get("name", "") for e in ev}
    assert "aten::arange" not in names and not any("statistics.py" in n for n in names)
    assert sum(e.get("name") == "aten::linear" for e in ev) == 4  # 2 forwards of 2 Linear layers
    run = json.loads((run_dir / "run.json").read_text())
    assert run["step_times"]["recorded"] == [False, True, True, False, False]
    sched = run["profiler_options"]["schedule"]
    assert run["profiler_options"]["steps"] == 2 and (sched["wait"], sched["warmup"], sched["active"]) == (1, 1, 2)


def test_recording_words():
    from kernelscope.collectors.runner import Options, recording_words

    assert recording_words(Options()) == "every step from the script's start"
    assert recording_words(Options(steps=1)) == "1 step of the script after its start-up and one warm-up step"
    assert recording_words(Options(schedule=(1, 1, 3, 1), steps=4)) == (
        "torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1), stopping after step 4")


GC_IN_A_STEP = """\
import gc, torch
m = torch.nn.Linear(16, 4)
x = torch.randn(8, 16)
keep = []
with torch.no_grad():
    for i in range(6):
        m(x)
        if i == 2:                      # full collections inside the first recorded step
            junk = [[j] for j in range(200000)]
            for a, b in zip(junk, junk[1:]):
                a.append(b)
            del junk
            gc.collect()
"""


@pytest.fixture(scope="module")
def gc_run(tmp_path_factory):
    """One profiled run of GC_IN_A_STEP with --stack and its un-profiled pass: (run dir, the runner's stderr)."""
    folder = tmp_path_factory.mktemp("gc")
    script = folder / "gc_step.py"
    script.write_text(GC_IN_A_STEP)
    r = _profile(folder, "--run-dir", folder / "run", "--steps", "2", "--stack", "--no-telemetry", "--", "python",
                 script)
    assert r.returncode == 0, r.stderr
    return folder / "run", r.stderr


def test_full_garbage_collections_are_named_in_the_trace(gc_run):
    """A full collection stops the Python thread that triggered it: BERT trained on a CPU under the profiler had
    one of ~130 ms in a recorded step (half that step), time outside any operator with no name. The profiled
    run now wraps each generation-2 collection in a 'python gc: full collection' range (user_annotation)."""
    from kernelscope.collectors.pygc import GC_RANGE

    ev = _events(gc_run[0])
    ranges = [e for e in ev if e.get("name") == GC_RANGE]  # the gc.collect(), and any the allocations caused
    assert ranges and all(e["cat"] == "user_annotation" and e["dur"] > 0 for e in ranges)
    (step,) = [e for e in ev if e.get("name") == "ProfilerStep#2"]  # the step of i == 2 (recorded: #2 and #3)
    assert all(step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] for e in ranges)
    from kernelscope.storage.idle import GC_ANNOTATION

    assert GC_RANGE == GC_ANNOTATION  # the name the idle causes look for


def test_both_passes_count_their_full_collections_and_the_runner_says_so(gc_run, tmp_path):
    """The script calls gc.collect() once (step i == 2) in each pass: run.json and the runner's line give the
    profiled run's full collections next to the un-profiled run's, so a pause the profiler's own objects brought on
    shows as one the un-profiled run did not have. A run without any says nothing."""
    run_dir, stderr = gc_run
    run = json.loads((run_dir / "run.json").read_text())
    gc_doc = run["python_gc"]
    assert gc_doc["full_collections"] >= 1 and gc_doc["ns"] > 0
    # both passes' counts travel with the trace (recommend tells the script's own pauses from the profiler's)
    stored = run["provenance"]["python_gc"]
    assert stored["profiled"] == gc_doc and stored["unprofiled"]["full_collections"] >= 1
    from kernelscope.analysis.summary import trace_python_gc
    from kernelscope.storage.store import open_store

    with open_store(run_dir.parent / "ks.duckdb", read_only=True) as store:
        (tid,) = [r[0] for r in store.con.execute("SELECT trace_id FROM traces").fetchall()]
        assert trace_python_gc(store, tid) == stored
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("kernelscope: python gc: ")]
    n = gc_doc["full_collections"]
    assert f"python gc: {n} full collection{'s' if n != 1 else ''} (" in line
    assert re.search(r"ms\) in the profiled run, \d+ full collections? \([\d.,]+ ms\) in the un-profiled run", line)
    quiet = tmp_path / "quiet.py"
    quiet.write_text("import gc, torch\ngc.disable()\nm = torch.nn.Linear(4, 4)\nfor _ in range(4):\n    m(torch.ones(2, 4))\n")
    r = _profile(tmp_path, "--run-dir", tmp_path / "run2", "--steps", "2", "--no-telemetry", "--no-baseline", "--",
                 "python", quiet)  # the line needs a collection in the profiled run: this one has none
    assert r.returncode == 0 and "python gc:" not in r.stderr, r.stderr


def test_with_stack_every_garbage_collection_is_a_python_gc_event(gc_run):
    """--stack also turns on torch.profiler's record_python_gc_info where torch has it: a 'Python GC' event for
    every collection, the young ones the allocations trigger too (hundreds in the step that builds 200,000 lists),
    not only the full ones kernelscope's own ranges mark; storage/idle.py counts both as the python_gc cause."""
    from kernelscope.collectors.pygc import GC_RANGE

    ev = _events(gc_run[0])
    gcs = [e for e in ev if e.get("name") == "Python GC"]
    full = [e for e in ev if e.get("name") == GC_RANGE]
    assert gcs and all(e["cat"] == "python_function" for e in gcs)
    assert len(gcs) > len(full) >= 1
    assert any(g["ts"] < f["ts"] + f["dur"] and f["ts"] < g["ts"] + g["dur"] for f in full for g in gcs)
