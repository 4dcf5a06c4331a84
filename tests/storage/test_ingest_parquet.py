"""`kernelscope ingest RUN --parquet DIR` (storage/ingest.py ingest_run_parquet, rankrun.publish_rank): a run of
ranks written as the Parquet dataset of `export --parquet`, each rank's worker writing its own partitions, holds
exactly what exporting a store that ingested the run holds, table by table, and analyses read it in place.
Refusals come in one line and leave the folder as it was. (The Ray engine: tests/storage/test_engine.py.)"""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import SAMPLES, ddp2_copy
from tables import dataset_diffs

from kernelscope.cli import cli
from kernelscope.storage.export import export_parquet
from kernelscope.storage.store import open_store

#: Columns that say when an ingest ran, not what it stored.
VOLATILE = ("ingested_ns", "applied_ns")


def _exported_store(tmp_path):
    out = tmp_path / "exported"
    with open_store(ddp2_copy(tmp_path / "local.duckdb"), read_only=True) as store:
        export_parquet(store, out)
    return out


def test_published_run_equals_the_export_of_the_ingested_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_INGEST_WORKERS", "2")  # two spawned workers write the partitions
    pq = tmp_path / "published"
    res = CliRunner().invoke(cli, ["ingest", str(SAMPLES / "ddp2"), "--parquet", str(pq)])
    assert res.exit_code == 0, res.stderr
    assert res.stdout.count("ingested  ") == 2 and f"derived and written to {pq}" in res.stdout
    assert "2 ranks parsed by 2 processes" in res.stdout
    want = _exported_store(tmp_path)
    assert dataset_diffs(pq, want, VOLATILE) == {}
    manifest = json.loads((pq / "kernelscope_export.json").read_text())
    assert manifest["tables"]["gpu_activities"]["rows"] == 1_856 and manifest["run"].startswith("run-")
    assert sorted(p.name for p in (pq / "gpu_activities" / f"run={manifest['run']}").iterdir()) == ["rank=0", "rank=1"]
    assert not (tmp_path / ".published.ingest").exists()  # the scratch store is gone
    comm = [CliRunner().invoke(cli, ["analyze", "comm", "ddp_rank0", "--json", "--db", str(d)]) for d in (pq, want)]
    assert comm[0].exit_code == 0 and json.loads(comm[0].stdout) == json.loads(comm[1].stdout)


def test_parquet_refusals_are_one_line_and_leave_the_folder(tmp_path, monkeypatch):
    def run(*args):
        res = CliRunner().invoke(cli, ["ingest", *map(str, args)])
        return res.exit_code, res.stdout, res.stderr.strip().splitlines()

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    code, out, err = run(SAMPLES / "ddp2", "--parquet", busy)
    assert code != 0 and out == "" and len(err) == 1 and "exists and is not an empty folder" in err[0]
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    code, out, err = run(SAMPLES / "train_step", "--parquet", tmp_path / "one")
    assert code != 0 and len(err) == 1 and "--parquet writes one run of ranks" in err[0]
    assert "found 0 run(s) of ranks and 1 other trace(s)" in err[0] and not (tmp_path / "one").exists()
    bad = tmp_path / "bad"  # rank 1's file cut short: the run fails, nothing is written
    bad.mkdir()
    (bad / "rank0.json.gz").write_bytes((SAMPLES / "ddp2" / "ddp_rank0" / "trace.json.gz").read_bytes())
    (bad / "rank1.json.gz").write_bytes((SAMPLES / "ddp2" / "ddp_rank1" / "trace.json.gz").read_bytes()[:50_000])
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = run(bad, "--parquet", empty)
    assert code != 0 and len(err) == 1 and "rank1.json.gz" in err[0], err
    assert empty.is_dir() and not any(empty.iterdir()) and not (tmp_path / ".empty.ingest").exists()
    here = tmp_path / "here"  # `--parquet .` from inside an empty folder writes the dataset there
    here.mkdir()
    monkeypatch.chdir(here)
    code, out, err = run(SAMPLES / "ddp2", "--parquet", ".")
    assert code == 0, err
    assert (here / "kernelscope_export.json").is_file() and not (tmp_path / ".here.ingest").exists()


def test_a_rank_whose_id_came_out_otherwise_is_written_again(tmp_path, monkeypatch):
    """Workers write their files with the id a fresh store gives (the hash's first 12 digits) and the driver
    moves them into place; when the run's id for a rank differs (two ranks sharing those digits get 4 more),
    that rank's partitions are written again with its id (rankrun.publish_rank), nothing with the old one."""
    import duckdb

    from kernelscope.storage import rankrun

    monkeypatch.setenv("KERNELSCOPE_INGEST_WORKERS", "1")  # in this process, where the patch holds
    monkeypatch.setattr(rankrun, "new_trace_id", lambda con, content_hash: content_hash[:16])
    pq = tmp_path / "published"
    res = CliRunner().invoke(cli, ["ingest", str(SAMPLES / "ddp2"), "--parquet", str(pq)])
    assert res.exit_code == 0, res.stderr
    ids = sorted(line.split()[1] for line in res.stdout.splitlines())
    assert [len(t) for t in ids] == [16, 16]
    assert dataset_diffs(pq, _exported_store(tmp_path), (*VOLATILE, "trace_id")) == {}
    con = duckdb.connect()
    for table in ("gpu_activities", "cpu_ops", "collectives", "traces"):
        got = con.execute(f"SELECT DISTINCT trace_id FROM read_parquet('{pq}/{table}/**/*.parquet') ORDER BY 1")
        assert [t for (t,) in got.fetchall()] == ids, table
