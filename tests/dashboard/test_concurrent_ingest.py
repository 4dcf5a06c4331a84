"""An ingest started while the dashboard is open succeeds, and the new trace appears on the next request
(each callback holds a read-only connection only while it renders)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import warm_cli

from kernelscope.dashboard.app import create_app

ROOT = Path(__file__).resolve().parents[2]


def _traces_page(client) -> str:
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": "/"}],
            "changedPropIds": ["url.pathname"], "state": [{"id": "url", "property": "search", "value": ""}]}
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200
    return r.get_data(as_text=True)


def test_ingest_while_the_dashboard_is_open(dash_store, tmp_path):
    db = tmp_path / "live.duckdb"
    shutil.copy(dash_store.db, db)
    client = create_app(db).server.test_client()
    before = _traces_page(client)
    assert "small_kernels_eager" in before and "nsight_twin_kineto" not in before
    # the dashboard has served a request (and keeps serving); a separate process ingests into the store (a
    # child of the warm CLI server, tests/warm_cli.py: its own DuckDB connection and file locks)
    proc = warm_cli.run(["ingest", "--db", str(db), str(ROOT / "sample_traces" / "nsight" / "encoder2_kineto")],
                        timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ingested" in proc.stdout
    after = _traces_page(client)
    assert "nsight_twin_kineto" in after and after.count('"trace_id"') == before.count('"trace_id"') + 1


# --------------------------------------------------------------------------------------- under load (issue 11)

BROWSE_PAGES = ["overview", "timeline", "operators", "launch", "bound", "bandwidth"]


def _browse(app, trace_ids: list[str], stop, counts: dict, lock, seed: int) -> None:
    """One client, page after page with no pause, as the browser asks for them (the router callback over
    Flask's test client): every page of each trace, the comparison of the two, and Timeline windows zoomed
    at random (each a fresh query that the result cache cannot answer)."""
    import random

    client = app.server.test_client()
    rng = random.Random(seed)
    pages = [("/", "")] + [(f"/trace/{t}/{p}", "") for t in trace_ids for p in BROWSE_PAGES] + [
        ("/compare", f"?a={trace_ids[0]}&b={trace_ids[-1]}")]
    i = seed
    while not stop.is_set():
        if i % 2:
            t0 = rng.uniform(0, 20)
            path, search = f"/trace/{rng.choice(trace_ids)}/timeline", f"?t0={t0:.3f}&t1={t0 + rng.uniform(1, 30):.3f}"
        else:
            path, search = pages[(i // 2) % len(pages)]
        i += 1
        body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
                "inputs": [{"id": "url", "property": "pathname", "value": path}],
                "changedPropIds": ["url.pathname"], "state": [{"id": "url", "property": "search", "value": search}]}
        r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
        key = f"http {r.status_code}" if r.status_code != 200 else (
            "busy" if "Cannot read the store" in r.get_data(as_text=True) else "ok")
        with lock:
            counts[key] = counts.get(key, 0) + 1


@pytest.mark.slow
def test_three_ingests_succeed_while_four_clients_browse(tmp_path):
    """The README's promise under load: 4 clients request dashboard pages back to back (threads of this
    process, each with its own read-only connection per page: together they keep the store open for
    reading ~99% of the time) while 3 `kernelscope ingest` processes run one after another: all 3 succeed.
    Before: each ingest gave up after 2 s, exit 4, 'locked by <this process>, which is writing to it' (it
    only reads)."""
    import threading
    import time

    from kernelscope.storage.ingest import ingest_run
    from kernelscope.storage.store import open_store

    db = tmp_path / "load.duckdb"
    with open_store(db) as store:
        ids = [ingest_run(store, ROOT / "sample_traces" / f).trace_id for f in ("llama_decode", "qwen2_fwd_eager")]
    app = create_app(db)
    stop, lock, counts = threading.Event(), threading.Lock(), {}
    clients = [threading.Thread(target=_browse, args=(app, ids, stop, counts, lock, k), daemon=True)
               for k in range(4)]
    results = []
    try:
        for c in clients:
            c.start()
        time.sleep(3)  # the four clients are busy
        before = dict(counts)
        for folder in ("llama_prefill_b2", "llama_prefill_b4", "llama_prefill_b16"):
            t0 = time.monotonic()
            proc = warm_cli.run(["ingest", "--db", str(db), str(ROOT / "sample_traces" / folder)], timeout=600)
            results.append((folder, proc.returncode, proc.stderr.strip(), round(time.monotonic() - t0, 1)))
        time.sleep(1)
    finally:
        stop.set()
        for c in clients:
            c.join(timeout=150)
    print("\ningests (folder, exit code, stderr, seconds):", results,
          "\npages before the ingests:", before, "all pages:", counts)
    assert before.get("ok", 0) >= 4  # the clients really were browsing
    assert [r[1] for r in results] == [0, 0, 0], results
    assert counts.get("ok", 0) > before.get("ok", 0)  # and kept browsing
    assert not any(k.startswith("http") for k in counts), counts
    with open_store(db, read_only=True) as store:
        assert store.query("SELECT count(*) AS n FROM traces")["n"][0] == 5
