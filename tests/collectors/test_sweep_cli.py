"""`kernelscope sweep` end to end on CPU: a grid of points through the real runner into a store (un-profiled
timing of kernelscope.range regions, labels with numbers as numbers, sweep=NAME), a failing point reported and
kept out, the transition analysis printed, and the exit code when every point fails."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import warm_cli  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="asserts the CPU-only behaviour")

SCRIPT = """\
import sys, torch, kernelscope
batch = int(sys.argv[2])
if batch == 3:
    sys.exit(7)                          # this point fails
m = torch.nn.Linear(32, 32)
x = torch.randn(batch, 32)
with torch.no_grad():
    for _ in range(5):
        with kernelscope.range("step"):  # the timed iterations and the step rule
            m(x).relu()
"""


def test_sweep_grid_end_to_end_with_a_failing_point(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(SCRIPT)
    db = tmp_path / "ks.duckdb"
    r = warm_cli.run(["sweep", "--grid", "batch=2,3,1", "--name", "bs", "--db", db, "--run-root", tmp_path / "runs",
                      "--steps", "2", "--no-telemetry", "--", "python", script, "--batch", "{batch}"],
                     cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stderr
    assert "kernelscope: point batch=3 failed: exit 7 (un-profiled run)" in r.stderr.splitlines()
    assert "kernelscope: sweep bs: 2 of 3 points profiled" in r.stderr
    assert r.stderr.count('un-profiled timing: 5 kernelscope.range regions ("step")') == 2
    assert r.stderr.count("overhead: profiler ") == 2 and "per step (median of 2)" in r.stderr
    assert not (tmp_path / "runs" / "bs_batch3" / "trace.json.gz").exists()
    out = json.loads(warm_cli.run(["traces", "--json", "--db", db], cwd=tmp_path, timeout=60).stdout)
    labels = sorted((t["labels"] for t in out), key=lambda lab: lab["batch"])
    assert labels == [{"batch": b, "sweep": "bs"} for b in (1, 2)]  # numbers as numbers, no failed point
    for b in (1, 2):
        run = json.loads((tmp_path / "runs" / f"bs_batch{b}" / "run.json").read_text())
        assert run["labels"] == {"batch": b, "sweep": "bs"}
        assert run["step_rule"]["rule"] == "range" and run["step_rule"]["steps"] == 5
        assert run["profiler_options"]["steps"] == 2 and run["profiler_options"]["schedule"]["active"] == 2
        assert run["timing"]["kind"] == "range" and run["timing"]["regions"] == ["step"]
        walls = [t for t in run["timings"] if t["kind"] == "wall"]
        assert [t["iteration"] for t in walls] == list(range(5)) and all(t["dur_ns"] > 0 for t in walls)
        prof = run["overhead"]["profiler"]
        assert prof["basis"] == "range" and prof["n"] == 2 and prof["recorded_only"] is True
    # the transition analysis of the sweep, printed: its brackets under both rules, one row per point
    assert "# kernelscope analyze transition --sweep bs --by batch" in r.stdout
    assert "brackets.trace" in r.stdout and "brackets.unprofiled" in r.stdout
    points = r.stdout.split("points\n", 1)[1].splitlines()[2:4]
    assert [int(p.split()[0]) for p in points] == [1, 2]  # in label order, not the grid's (2, 1)


def test_sweep_exits_non_zero_only_when_every_point_fails(tmp_path):
    r = warm_cli.run(["sweep", "--grid", "s=a,b", "--db", tmp_path / "ks.duckdb", "--name", "none", "--",
                      "python", str(tmp_path / "{s}.py")], cwd=tmp_path, timeout=60)
    assert r.returncode == 1
    assert f"kernelscope: point s=a failed: script {str(tmp_path / 'a.py')!r} not found." \
        in r.stderr.splitlines()
    assert "kernelscope: sweep none: 0 of 2 points profiled" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--grid", "batch"], "--grid 'batch': write KEY=V1,V2"),
    (["--grid", "batch=1,2", "--grid", "batch=4"], "--grid batch is given twice"),
    (["--grid", "batch=1", "--by", "width"], "--by width: not a --grid key"),
    (["--grid", "batch=1"], "{width} in '--width={width}' is not a --grid key"),
])
def test_sweep_refuses_bad_grids_in_one_line(tmp_path, args, message):
    (tmp_path / "s.py").write_text("")
    r = warm_cli.run(["sweep", *args, "--db", tmp_path / "ks.duckdb", "--", "python", tmp_path / "s.py",
                      "--width={width}"], cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr
