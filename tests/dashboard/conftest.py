"""Fixtures of the dashboard and report tests.

``dash_store``: a small real store: collector runs from sample_traces/ (with telemetry and un-profiled
timings; llama_prefill b1/b8/b128 form a 3-point sweep, sweep=llama_prefill, batch=N), the CUDA-graph
pair, the training step, both DDP ranks, the probe training step (no telemetry), a CPU-only trace, a
two-device trace from tests/edge_traces.py and the Nsight Systems export of sample_traces/nsight.

``base_url`` serves ``create_app(dash_store.db)`` on a free localhost port; ``browser`` is one headless
Chromium for the session (Debian's /usr/bin/chromium via Playwright); ``page`` is a page of a new browser
context per module, recording console errors in ``page.console_errors``. Tests using them are marked
``browser`` (tests/conftest.py) and skip when playwright or chromium is missing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import stores

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class DashStore:
    db: Path
    ids: dict[str, str] = field(default_factory=dict)  # short name -> trace id


def _ingest_dash(db: Path) -> dict[str, str]:
    import edge_traces

    from kernelscope.storage.ingest import ingest_paths, ingest_run
    from kernelscope.storage.store import open_store

    tmp = db.parent
    ids = {}
    with open_store(db) as store:
        runs = {"llama_prefill_b1": "llama_prefill_b1", "llama_prefill_b8": "llama_prefill_b8",
                "llama_prefill_b128": "llama_prefill_b128", "compiled": "compiled",
                "train_step": "train_step", "small_kernels_eager": "small_kernels_eager",
                "small_kernels_graph": "small_kernels_graph",
                "ddp_rank0": "ddp2/ddp_rank0", "ddp_rank1": "ddp2/ddp_rank1"}
        for name, folder in runs.items():
            res = ingest_run(store, ROOT / "sample_traces" / folder)
            assert res.status == "ingested", res.message
            ids[name] = res.trace_id
        files = {"probe_train": ROOT / "tests" / "data" / "probe_train.json.gz",
                 "cpu_only": edge_traces.cpu_only(tmp),
                 "two_devices": edge_traces.multi_stream_multi_device(tmp),
                 # issue 6: an Nsight Systems trace shows like a Kineto one, through the same code
                 "nsys": ROOT / "sample_traces" / "nsight" / "encoder2_nvtx.sqlite.gz"}
        for name, path in files.items():
            (res,) = ingest_paths(store, [path], progress=False)
            assert res.status == "ingested", res.message
            ids[name] = res.trace_id
    return ids


@pytest.fixture(scope="session")
def dash_store() -> DashStore:
    """Built once per session (tests/stores.py); this process's own copy."""
    db, ids = stores.template("dash", _ingest_dash)
    return DashStore(db=db, ids=dict(ids))


@pytest.fixture(scope="session")
def empty_db(tmp_path_factory) -> Path:
    return stores.empty(tmp_path_factory.mktemp("dash_empty") / "empty.duckdb")


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def base_url(dash_store):
    import logging
    import socket
    import threading

    from werkzeug.serving import make_server

    from kernelscope.dashboard.app import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = make_server("127.0.0.1", port, create_app(dash_store.db).server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    thread.join(5)


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole session (per xdist worker); each module gets its own context."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (apt-get install -y chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        sync_api.expect.set_options(timeout=120_000)  # a loaded CI box can take tens of seconds per callback
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(browser, base_url):
    """A fresh page in its own browser context (no cookies, storage or cache shared with other modules)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(120_000)  # a loaded CI box can take tens of seconds per analysis callback
    pg.console_errors = []
    pg.on("console", lambda m: pg.console_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
    yield pg
    context.close()


@pytest.fixture(scope="module")
def client(dash_store):
    """The Flask test client of the dashboard over ``dash_store`` (one app per test module)."""
    from kernelscope.dashboard.app import create_app

    return create_app(dash_store.db).server.test_client()


@pytest.fixture(scope="module")
def store(dash_store):
    """``dash_store`` opened read-only for the module."""
    from kernelscope.storage.store import open_store

    with open_store(dash_store.db, read_only=True) as s:
        yield s
