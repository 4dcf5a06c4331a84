"""A real TensorBoard-style log directory, written by the installed (CPU) torch's profiler with
``tensorboard_trace_handler``, once per test session (a template, tests/stores.py).

One subprocess (torch imported once) profiles a tiny MLP's training steps three times:

- ``ddp/``: two workers standing for two DDP ranks, ``node_101`` (rank 0, ``use_gzip=True``) and ``node_102``
  (rank 1, ``use_gzip=False``), each under ``schedule(wait=1, warmup=1, active=2, repeat=3)`` over 12 steps: one
  file per cycle per worker (ProfilerSteps 2-3, 6-7, 10-11). torch writes ``distributedInfo`` only under an
  initialised process group; the profile subclass returns what a real 2-process gloo group gives
  (``_get_distributed_info``: backend, rank, world_size, pg_count, pg_config), so the files are as DDP writes them
  without starting two processes;
- ``single/``: one process under its default worker name (``<hostname>_<pid>``), gzip, ``schedule(wait=0,
  warmup=1, active=1, repeat=2)``: two successive cycles (ProfilerSteps 1 and 3).

The logdir the template store watched holds ``ddp/``'s first two cycles and ``single/``; the third ``ddp``
cycle's two files are kept in ``later/`` for the tests that make files appear.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = r'''
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

out = Path(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train(prof, steps):
    for _ in range(steps):
        loss = model(torch.randn(8, 16)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()


def rank_profile(rank):
    class RankProfile(profile):
        def _get_distributed_info(self):  # as a 2-process gloo group gives it
            return {"backend": "gloo", "rank": rank, "world_size": 2, "pg_count": 1,
                    "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo,cuda:gloo",
                                   "pg_size": 2, "ranks": [0, 1]}]}
    return RankProfile


for rank, worker, gz in ((0, "node_101", True), (1, "node_102", False)):
    with rank_profile(rank)(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=3),
                            on_trace_ready=tensorboard_trace_handler(str(out / "ddp"), worker_name=worker,
                                                                     use_gzip=gz)) as prof:
        train(prof, 12)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=1, repeat=2),
             on_trace_ready=tensorboard_trace_handler(str(out / "single"), use_gzip=True)) as prof:
    train(prof, 4)
'''


def capture(out: Path) -> None:
    """Run the profiling script into ``out`` (ddp/ and single/)."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"the logdir capture failed:\n{proc.stderr[-3000:]}")


def build(db: Path) -> dict:
    """The template: capture, lay out ``logdir/`` (and ``later/``), watch it into ``db`` until all is in."""
    import time

    from kernelscope.storage.logdir import Watcher

    folder = db.parent
    captured = folder / "captured"
    capture(captured)
    logdir, later = folder / "logdir", folder / "later"
    shutil.copytree(captured, logdir)
    later.mkdir()
    for worker in ("node_101", "node_102"):  # each worker's newest file (by the time in its name) waits
        files = sorted((logdir / "ddp").glob(worker + ".*"), key=lambda p: int(p.name.split(".")[1]))
        assert len(files) == 3, files
        shutil.move(files[-1], later / files[-1].name)
    said: list[str] = []
    w = Watcher(logdir, db, quiet_s=0.0, truncated_after_s=1e9, rank_wait_s=1e9, say=said.append)
    from kernelscope.storage.store import open_store

    open_store(db).close()
    now = time.time() + 60
    results = w.poll(now) + w.poll(now)
    return {"logdir": logdir, "later": later, "said": said,
            "results": [(r.path, r.status, r.trace_id, r.message) for r in results]}


def raw(path: Path) -> dict:
    """Plain Python over a trace file: its distributedInfo rank and world, ProfilerStep numbers, cpu_op count."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    steps = sorted({int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})
    di = doc.get("distributedInfo") or {}
    return {"rank": di.get("rank"), "world": di.get("world_size"), "steps": steps,
            "cpu_ops": sum(1 for e in events if e.get("cat") == "cpu_op")}
