"""A small real store for the dashboard tests: two collector runs from sample_traces/ (with telemetry),
the probe training step, a CPU-only trace, a two-device trace from tests/edge_traces.py and the Nsight
Systems export of sample_traces/nsight."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class DashStore:
    db: Path
    ids: dict[str, str] = field(default_factory=dict)  # short name -> trace id


@pytest.fixture(scope="session")
def dash_store(tmp_path_factory) -> DashStore:
    import edge_traces

    from kernelscope.storage.ingest import ingest_paths, ingest_run
    from kernelscope.storage.store import open_store

    tmp = tmp_path_factory.mktemp("dash")
    out = DashStore(db=tmp / "dash.duckdb")
    with open_store(out.db) as store:
        for name in ("llama_prefill_b1", "compiled"):
            res = ingest_run(store, ROOT / "sample_traces" / name)
            assert res.status == "ingested", res.message
            out.ids[name] = res.trace_id
        files = {"probe_train": ROOT / "tests" / "data" / "probe_train.json.gz",
                 "cpu_only": edge_traces.cpu_only(tmp),
                 "two_devices": edge_traces.multi_stream_multi_device(tmp),
                 # issue 6: an Nsight Systems trace shows like a Kineto one, through the same code
                 "nsys": ROOT / "sample_traces" / "nsight" / "encoder2_nvtx.sqlite.gz"}
        for name, path in files.items():
            (res,) = ingest_paths(store, [path], progress=False)
            assert res.status == "ingested", res.message
            out.ids[name] = res.trace_id
    return out


@pytest.fixture(scope="session")
def empty_db(tmp_path_factory) -> Path:
    from kernelscope.storage.store import open_store

    db = tmp_path_factory.mktemp("dash_empty") / "empty.duckdb"
    open_store(db).close()
    return db
