"""Take a screenshot of every dashboard page (docs/screenshots/<page>.png, shown in the README).

    python docs/screenshots.py [--db STORE]

Without --db it ingests sample_traces/ into a temporary store. It serves the app on a free localhost
port and opens each page in Debian's headless Chromium (Playwright), waits for the page's figures to be
drawn, and saves a full-page PNG. Pages of one trace use llama_decode (the launch-bound sample) unless
the page is better shown on another sample (see PAGES).
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

# (file name, URL path with {t} for the trace id, trace name)
PAGES = [
    ("traces", "/", None),
    ("overview", "/trace/{t}", "llama_decode"),
    ("timeline", "/trace/{t}/timeline?t0=20&t1=30&find=flash", "qwen2_train_mem"),
    ("operators", "/trace/{t}/operators", "train_step"),
    ("launch", "/trace/{t}/launch", "llama_decode"),
    ("bound", "/trace/{t}/bound", "llama_decode"),
    ("sweep", "/sweep?sweep=llama_prefill&by=batch", None),
    ("bandwidth", "/trace/{t}/bandwidth", "llama_prefill_b128"),
    ("power", "/trace/{t}/power", "llama_prefill_b128"),
    ("compare", "/compare?a=small_kernels_eager&b=small_kernels_graph", None),
    ("ranks", "/ranks?run=ddp2", None),
    ("steps", "/trace/{t}/steps", "vm_484.steps2-3"),
    ("memory", "/trace/{t}/memory", "vm_484.steps6-7"),
    ("modules", "/trace/{t}/modules", "qwen2_train_mem"),
    ("stacks", "/trace/{t}/stacks", "qwen2_train_mem"),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", type=Path, default=None)
    a = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright
    from werkzeug.serving import make_server

    from kernelscope.dashboard.app import STORE_PAGES, TRACE_PAGES, create_app
    from kernelscope.storage.ingest import ingest_paths
    from kernelscope.storage.queries import resolve_trace
    from kernelscope.storage.store import open_store

    tmp = tempfile.TemporaryDirectory()
    db = a.db or Path(tmp.name) / "s.duckdb"
    if a.db is None:
        with open_store(db) as store:
            ingest_paths(store, [ROOT / "sample_traces"], progress=False)
    with open_store(db, read_only=True) as store:
        ids = {name: resolve_trace(store, name) for _, _, name in PAGES if name}
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = make_server("127.0.0.1", port, create_app(db).server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    OUT.mkdir(parents=True, exist_ok=True)
    shot = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        for fname, path, name in PAGES:
            page_key = path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
            if name is None and page_key and page_key not in STORE_PAGES:
                print(f"skip {fname}: no such page in this build")
                continue
            if name and path.count("/") > 2 and page_key not in TRACE_PAGES:
                print(f"skip {fname}: no such page in this build")
                continue
            page.goto(f"http://127.0.0.1:{port}" + path.format(t=ids.get(name, "")))
            page.wait_for_selector("#page > *", timeout=30000)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(1500)  # let Plotly finish drawing
            page.screenshot(path=str(OUT / f"{fname}.png"), full_page=False)
            shot.append(fname)
            print(f"{fname}: {OUT / (fname + '.png')}")
        browser.close()
    server.shutdown()
    print(f"{len(shot)} screenshots; page errors: {errors or 'none'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
