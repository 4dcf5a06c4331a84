"""An ingest started while the dashboard is open succeeds, and the new trace appears on the next request
(each callback holds a read-only connection only while it renders)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

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
    # the dashboard has served a request (and keeps serving); a separate process ingests into the store
    proc = subprocess.run([sys.executable, "-m", "kernelscope.cli", "ingest", "--db", str(db),
                           str(ROOT / "sample_traces" / "nsight" / "encoder2_kineto")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ingested" in proc.stdout
    after = _traces_page(client)
    assert "nsight_twin_kineto" in after and after.count('"trace_id"') == before.count('"trace_id"') + 1
