"""`kernelscope dashboard --logdir DIR` (storage/logdir.py): a real tensorboard_trace_handler log directory written
by the installed CPU torch (tests/storage/logdir_build.py, once per session) watched into a store; the grouping is
checked against plain Python over the raw JSON (distributedInfo, ProfilerStep names, cpu_op events)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import stores
from click.testing import CliRunner

from kernelscope.cli import cli
from kernelscope.storage import logdir as L
from kernelscope.storage.store import open_store
from storage.logdir_build import build, raw

ROOT = Path(__file__).resolve().parents[2]
FAR = 1e9  # seconds: a threshold the test never reaches


def _template():
    return stores.template("logdir", build)


def _worker(path: Path) -> str:
    """The worker of a tensorboard_trace_handler file name, by plain string work."""
    stem = path.name.split(".pt.trace.json")[0]
    return stem.rsplit(".", 1)[0]


def _stored(db) -> dict:
    """source file name -> (trace_id, name, run_id, rank, labels) of every stored trace."""
    with open_store(db, read_only=True) as s:
        rows = s.con.execute("SELECT trace_id, name, source, run_id, rank FROM traces").fetchall()
        labels = {}
        for tid, k, v in s.con.execute("SELECT trace_id, key, value_text FROM labels").fetchall():
            labels.setdefault(tid, {})[k] = v
    return {Path(src).name: (tid, name, run, rank, labels.get(tid, {})) for tid, name, src, run, rank in rows}


def _traces_page(db, logdir) -> str:
    from kernelscope.dashboard.app import create_app

    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": "/"}],
            "changedPropIds": ["url.pathname"], "state": [{"id": "url", "property": "search", "value": ""}]}
    r = create_app(db, logdir=logdir).server.test_client().post(
        "/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200
    return r.get_data(as_text=True)


def test_worker_files_of_one_cycle_are_ranks_of_one_run_and_cycles_are_separate_traces():
    db, meta = _template()
    files = sorted(p for p in Path(meta["logdir"]).rglob("*") if ".pt.trace.json" in p.name)
    assert len(files) == 6  # ddp: 2 workers x 2 cycles; single: 2 cycles
    assert [r[1] for r in meta["results"]] == ["ingested"] * 6, meta["results"]
    stored = _stored(db)
    assert set(stored) == {p.name for p in files}
    with open_store(db, read_only=True) as s:
        cpu_ops = dict(s.con.execute("SELECT trace_id, count(*) FROM cpu_ops GROUP BY ALL").fetchall())
        runs = {r[0]: r[1:] for r in s.con.execute("SELECT run_id, name, world_size, ranks FROM runs").fetchall()}
    cycles: dict[tuple, dict] = {}
    for p in files:
        ref = raw(p)
        tid, name, run, rank, labels = stored[p.name]
        assert cpu_ops[tid] == ref["cpu_ops"]  # this file's events went to this trace
        a, b = ref["steps"][0], ref["steps"][-1]
        assert name == (f"{_worker(p)}.step{a}" if a == b else f"{_worker(p)}.steps{a}-{b}")
        assert labels["worker"] == _worker(p) and (labels["step_first"], labels["step_last"]) == (str(a), str(b))
        assert labels["logdir"] == f"logdir/{p.parent.name}"
        if p.parent.name == "single":
            assert ref["rank"] is None and run is None  # a process of its own: each cycle a trace outside any run
            continue
        assert rank == ref["rank"] and ref["world"] == 2
        cycles.setdefault(tuple(ref["steps"]), {})[ref["rank"]] = run
    assert sorted(cycles) == [(2, 3), (6, 7)]
    for steps, by_rank in cycles.items():
        assert set(by_rank) == {0, 1} and len(set(by_rank.values())) == 1  # both ranks, one run
        assert runs[by_rank[0]] == (f"logdir/ddp steps {steps[0]}-{steps[-1]}", 2, 2)
    assert len({r for rr in cycles.values() for r in rr.values()}) == 2  # successive cycles: two runs


def test_plain_ingest_of_the_logdir_groups_and_names_as_the_watcher_does(tmp_path):
    """`kernelscope ingest DIR` on the same logdir (two DDP workers over two cycles: the ranks of each cycle are
    one run; it once refused the folder as 'rank 0 claimed twice') stores what the watcher stored."""
    db, meta = _template()
    watched = _stored(db)
    res = CliRunner().invoke(cli, ["ingest", str(meta["logdir"]), "--db", str(tmp_path / "i.duckdb")])
    assert res.exit_code == 0, res.output
    ingested = _stored(tmp_path / "i.duckdb")
    assert set(ingested) == set(watched)
    for f, (tid, name, run, rank, labels) in ingested.items():
        w_tid, w_name, w_run, w_rank, w_labels = watched[f]
        assert (tid, name, rank) == (w_tid, w_name, w_rank)
        assert (run is None) == (w_run is None) and labels["worker"] == w_labels["worker"]
        assert (labels["step_first"], labels["step_last"]) == (w_labels["step_first"], w_labels["step_last"])
    runs = {r for _, _, r, _, _ in ingested.values() if r}
    assert len(runs) == 2  # one per cycle of the two DDP workers


def test_a_cycle_appearing_while_watched_is_ingested_once_complete_and_listed(tmp_path):
    db = tmp_path / "live.duckdb"
    meta = stores.copy("logdir", build, db)
    logdir = tmp_path / "logdir"
    shutil.copytree(meta["logdir"], logdir)
    said: list[str] = []
    w = L.Watcher(logdir, db, quiet_s=2.0, truncated_after_s=FAR, rank_wait_s=FAR, say=said.append)
    now = time.time() + 100  # every file written so far is quiet
    assert w.poll(now) == []  # first sight: nothing is read yet
    assert [r.status for r in w.poll(now)] == ["skipped"] * 6  # content already in the store
    assert said[-1] == "kernelscope: logdir: skipped 6 files already in the store"

    later = sorted(Path(meta["later"]).iterdir())  # node_101 (gzip, rank 0) and node_102 (JSON, rank 1)
    data = {p.name: p.read_bytes() for p in later}
    for name, b in data.items():  # both being written: half of their bytes
        (logdir / "ddp" / name).write_bytes(b[: len(b) // 2])
    assert w.poll(now) == [] and w.poll(now) == [] and w.poll(now) == []
    gz, js = sorted(data, key=lambda n: not n.endswith(".gz"))
    (logdir / "ddp" / js).write_bytes(data[js])  # rank 1 complete, rank 0 still half a gzip stream
    assert w.poll(now) == [] and w.poll(now) == []  # the run waits for rank 0
    assert len(_stored(db)) == 6
    (logdir / "ddp" / gz).write_bytes(data[gz])
    assert w.poll(now) == []  # just changed: looked at again next time
    results = w.poll(now)
    assert sorted(r.status for r in results) == ["ingested", "ingested"], results
    stored = _stored(db)
    assert len(stored) == 8
    refs = {n: raw(p) for n, p in zip(sorted(data), later)}
    assert {tuple(r["steps"]) for r in refs.values()} == {(10, 11)}
    (_, n0, run0, rank0, _), (_, n1, run1, rank1, _) = stored[gz], stored[js]
    assert run0 == run1 is not None and (rank0, rank1) == (refs[gz]["rank"], refs[js]["rank"]) == (0, 1)
    assert (n0, n1) == ("node_101.steps10-11", "node_102.steps10-11")
    page = _traces_page(db, logdir)
    assert "node_101.steps10-11" in page and "node_102.steps10-11" in page and "Watching" in page
    assert w.poll(now + 1) == []  # nothing twice
    from kernelscope.storage.onetrace import IngestResult  # a one-file ingest's line names its id once

    w._tell(IngestResult(str(logdir / "one.json"), "ingested", "abc123", "ingested as abc123"))
    assert said[-1] == "kernelscope: logdir: ingested abc123        one.json"


def test_a_file_cut_for_good_is_salvaged_and_marked_truncated(tmp_path):
    _db, meta = _template()
    src = sorted((Path(meta["logdir"]) / "single").iterdir())[0]
    worker, ns = L.parse_name(src.name)
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    cut = logdir / f"{worker}.{ns + 7}.pt.trace.json.gz"  # a job killed while gzip wrote the file
    blob = src.read_bytes()
    cut.write_bytes(blob[: len(blob) * 2 // 3])
    db = stores.empty(tmp_path / "cut.duckdb")
    said: list[str] = []
    w = L.Watcher(logdir, db, quiet_s=1.0, truncated_after_s=120.0, rank_wait_s=FAR, say=said.append)
    t = cut.stat().st_mtime
    assert w.poll(t + 100) == [] and w.poll(t + 100) == []  # not complete: maybe still being written
    assert not _stored(db)
    (r,) = w.poll(t + 121)  # unchanged for longer than truncated_after_s: cut for good
    assert r.status == "ingested", r
    from kernelscope.storage.queries import list_traces

    with open_store(db, read_only=True) as s:
        notes = list_traces(s)["notes"].tolist()
        (truncated,) = s.con.execute("SELECT truncated FROM traces").fetchone()
    assert truncated is not None and any("TRUNCATED" in n for n in notes[0])
    with gzip.open(src) as f:
        whole = f.read()
    assert json.loads(truncated)["read_bytes"] < len(whole)


def _ddp2_logdir(tmp_path) -> list[L.FileFacts]:
    """sample_traces/ddp2's two rank traces laid out as tensorboard_trace_handler names them, read by ``scan``."""
    d = tmp_path / "ddp2log"
    d.mkdir()
    for r in (0, 1):
        (d / f"gpu-node_{4242 + r}.{1_790_000_000_000_000_000 + r}.pt.trace.json.gz").symlink_to(
            ROOT / "sample_traces" / "ddp2" / f"ddp_rank{r}" / "trace.json.gz")
    return [L.scan(p, d) for p in sorted(d.iterdir())]


def test_ddp2_sample_as_a_logdir_plans_one_run_and_a_second_job_another(tmp_path):
    facts = _ddp2_logdir(tmp_path)
    for f in facts:
        ref = raw(f.path)
        assert (f.rank, f.world, list(f.steps)) == (ref["rank"], ref["world"], ref["steps"])
        assert f.complete
    units, waiting = L.plan(facts, now=time.time(), rank_wait_s=FAR)
    assert waiting == [] and len(units) == 1 and units[0].run
    assert sorted(f.rank for f in units[0].files) == [0, 1]
    # rank 0 alone waits for rank 1 (world size 2) until rank_wait_s after it was written, unless the folder is busy
    units, waiting = L.plan(facts[:1], now=facts[0].mtime + 10, rank_wait_s=30)
    assert units == [] and waiting == facts[:1]
    units, _ = L.plan(facts[:1], now=facts[0].mtime + 31, rank_wait_s=30)
    assert len(units) == 1 and units[0].run
    assert L.plan(facts[:1], now=facts[0].mtime + 31, rank_wait_s=30, busy_folders={"."})[0] == []
    # the same steps again from a second job into the folder (rank 0 and 1 twice): two runs, not a rank clash
    again = [dataclasses.replace(f, time_ns=f.time_ns + 10**12, path=f.path.with_name("again" + f.path.name))
             for f in facts]
    units, _ = L.plan(facts + again, now=time.time(), rank_wait_s=FAR)
    assert [sorted(f.rank for f in u.files) for u in units] == [[0, 1], [0, 1]]
    assert {f.path for f in units[0].files} == {f.path for f in facts}
    # no distributedInfo, ranks in the worker names (worker_name="rank0"): one run of the workers seen
    named = [dataclasses.replace(f, worker=f"rank{i}", distributed=None) for i, f in enumerate(facts)]
    units, _ = L.plan(named, now=time.time(), rank_wait_s=FAR, workers={".": {0, 1}})
    assert len(units) == 1 and units[0].run and sorted(f.rank for f in units[0].files) == [0, 1]


def test_gpu_samples_written_by_the_handler_plan_a_run_of_two_workers_and_two_cycles_of_one(tmp_path):
    """sample_traces/tb_ddp (two DDP workers, default worker names, one step) and tb_qwen2 (one process, two
    cycles), both as tensorboard_trace_handler wrote them on an H100."""
    logdir = tmp_path / "log"
    for name in ("tb_ddp", "tb_qwen2"):
        shutil.copytree(ROOT / "sample_traces" / name, logdir / name)
    files = L.trace_files(logdir)
    assert len(files) == 4  # oracle.txt is no trace
    facts = [L.scan(p, logdir) for p in files]
    refs = [raw(p) for p in files]
    assert [(f.rank, list(f.steps)) for f in facts] == [(r["rank"], r["steps"]) for r in refs]
    units, waiting = L.plan(facts, now=time.time(), rank_wait_s=FAR)
    assert waiting == []
    got = sorted((u.run, sorted(f.path.name for f in u.files)) for u in units)
    ddp = sorted(p.name for p in files if p.parent.name == "tb_ddp")
    assert got == [(False, [p.name]) for p in files if p.parent.name == "tb_qwen2"] + [(True, ddp)]
    assert {r["rank"] for p, r in zip(files, refs) if p.parent.name == "tb_ddp"} == {0, 1}
    assert [r["steps"] for p, r in zip(files, refs) if p.parent.name == "tb_qwen2"] == [[2, 3], [6, 7]]


def test_a_logdir_that_is_a_file_or_missing_says_so(tmp_path):
    not_dir = tmp_path / "x.pt.trace.json"
    not_dir.write_text("{}")
    r = CliRunner().invoke(cli, ["dashboard", "--db", str(tmp_path / "s.duckdb"), "--logdir", str(not_dir)])
    assert r.exit_code == 6 and r.output.count("\n") == 1 and "is a file, not a folder" in r.output, r.output
    db = stores.empty(tmp_path / "e.duckdb")
    page = _traces_page(db, tmp_path / "later")
    assert "Waiting for traces" in page and "does not exist yet" in page
    (tmp_path / "later").mkdir()
    assert "holds no trace files yet" in _traces_page(db, tmp_path / "later")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dashboard_logdir_serves_the_traces_it_ingests_and_stops_on_ctrl_c(tmp_path):
    import urllib.request

    _db, meta = _template()
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    src = sorted((Path(meta["logdir"]) / "single").iterdir())[0]
    shutil.copy2(src, logdir / src.name)  # written a while ago: quiet
    want = f"{_worker(src)}.step{raw(src)['steps'][0]}"
    db, port = tmp_path / "new.duckdb", _port()  # no store yet: --logdir creates it
    proc = subprocess.Popen([sys.executable, "-m", "kernelscope.cli", "dashboard", "--db", str(db), "--logdir",
                             str(logdir), "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    body = json.dumps({"output": "page.children", "outputs": {"id": "page", "property": "children"},
                       "inputs": [{"id": "url", "property": "pathname", "value": "/"}],
                       "changedPropIds": ["url.pathname"],
                       "state": [{"id": "url", "property": "search", "value": ""}]}).encode()
    page, deadline = "", time.monotonic() + 90
    try:
        while want not in page and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(urllib.request.Request(
                        f"http://127.0.0.1:{port}/_dash-update-component", data=body,
                        headers={"Content-Type": "application/json"}), timeout=10) as resp:
                    assert resp.status == 200
                    page = resp.read().decode()
            except OSError:  # not listening yet
                continue
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the whole process group
        try:
            out, err = proc.communicate(timeout=60)  # the watcher gets 10 + 5 s to stop; margin for a loaded box
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    assert want in page, (page[-500:], err[-2000:])
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert f"kernelscope: watching {logdir}" in err and "ingested" in err
    assert not list(tmp_path.glob(".new.duckdb.logdir-*"))  # the watcher's stage folder is gone
