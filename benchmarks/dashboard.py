"""Time the dashboard on a store holding one trace of >= 1,000,000 kernels (issue 5).

Targets: every callback p95 <= 300 ms, every response <= 2 MB, first Timeline render in a browser <= 2 s,
and a 1 ms zoom window drawn as individual kernels.

What is measured:

- **Callbacks through the Flask test client** (``create_app(db).server.test_client()``, the same
  ``/_dash-update-component`` requests the browser sends): the router (``page.children``) for the traces
  list, every page of the trace (``TRACE_PAGES``, Overview included) and every store page (the Compare page
  also with ``?a=<id>&b=<id>``: the trace against itself, the diff analysis on 1M kernels), each followed
  by every other callback in ``/_dash-dependencies`` whose inputs that page renders (the first such page),
  with inputs taken from it: a figure's ``clickData`` = its first point, a table's ``cellClicked`` = row
  *i* (varied per request), the Bound page's bins dropdown cycling through its choices (each new bin
  count is a new bound analysis: a miss), other inputs as the page renders them.
  **Cold** for a page = its first request right after the per-process cache (``analysis/cache.py``: the
  analysis Results and the Timeline's base bins) was emptied, so each page pays for its own analyses;
  for a callback = its first request after its page was drawn (the page's analyses cached, as in the
  browser). The Timeline's callback is three series: zooms (windows of 1 ms .. the whole
  trace at seeded random positions), clicks on CPU operators (a 1 ms window) and name searches (the search
  box, from a 1 ms window); the Operators callbacks get row clicks and level
  switches. Each callback: one *cold* request, then warm
  requests until ``--requests`` or ``--budget-s`` seconds; p50/p95/max over the warm ones; response
  bytes (max). The Perfetto export route is timed for a 1 ms, a 1 s and the whole-trace window.
- **1 ms window**: the zoom callback for [60 000, 60 001) ms; the kernels drawn (finite segment pairs on
  the GPU lanes) must equal DuckDB's count of kernels intersecting the window.
- **First Timeline render in Chromium** (Debian's /usr/bin/chromium via Playwright): the app runs in a
  fresh process (cold caches); time from ``page.goto`` to the figure's SVG drawn with data (Plotly's
  ``_fullData`` non-empty). Order: the traces page (loads the app's JS), the Timeline at a 1 ms window
  (the first page with a figure: Dash loads plotly.js then; the 1 ms window does not build the base
  bins), the whole-trace Timeline (the first render: base bins built), the same again (warm), the 1 ms
  window again.
- **Peer: loading the same kind of trace as Chrome-trace JSON** (what chrome://tracing or any viewer
  that reads the JSON whole has to do before drawing): in the same Chromium, ``fetch`` + ``JSON.parse``
  of the 20-tile Kineto file (.bench/analyses/quick-20tiles.json, 25,480 kernels, from the same sample as
  the 1M trace); the 785-tile file of the 1M trace itself is 2.98 GB, longer than V8's maximum string
  length (2^29 - 24 characters), so a browser cannot hold it as one JSON text at all.

The store is opened read-only; a store of an older schema is copied to .bench/dashboard/ and the copy
migrated (the original is never written).

Usage: python3 benchmarks/dashboard.py [--db PATH] [--requests N] [--budget-s S] [--no-browser]
       [--pages NAMES [--export]] [--write] (``--write``: results/dashboard-<date>-all.md, or
       -<pages>.md with --pages). ``--pages timeline`` times the Timeline page and its callback alone: zooms,
       clicks and searches as separate series, each also with its CPU time (a shared machine's wall time
       includes waiting for a core). Run with the project venv's python.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import pathlib
import random
import shutil
import socket
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / ".bench"
DEFAULT_DB = BENCH / "analyses-1m.duckdb"
PEER_JSON = BENCH / "analyses" / "quick-20tiles.json"
FULL_JSON = BENCH / "analyses" / "full-785tiles.json"
P95_MS, MAX_BYTES, RENDER_S = 300.0, 2_000_000, 2.0


def open_db(path: pathlib.Path) -> pathlib.Path:
    """A store path that opens read-only: the given one, or a migrated copy under .bench/dashboard/."""
    from kernelscope.errors import StoreError
    from kernelscope.storage.store import open_store

    try:
        open_store(path, read_only=True).close()
        return path
    except StoreError as exc:
        if "older schema" not in str(exc) and "migration" not in str(exc):
            raise
    import hashlib

    copy = BENCH / "dashboard" / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    schema = ROOT / "src" / "kernelscope" / "storage" / "schema"
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in sorted(schema.glob("*.sql")))).hexdigest()
    stamp = copy.with_suffix(".migrations")  # the migrations the copy went through (they change in development)
    if (not copy.exists() or copy.stat().st_mtime < path.stat().st_mtime or not stamp.exists()
            or stamp.read_text() != digest):
        shutil.copy2(path, copy)
        stamp.unlink(missing_ok=True)
    open_store(copy).close()  # migrates the copy
    stamp.write_text(digest)
    print(f"store {path} has an older schema: benchmarking a copy migrated by this code, {copy}", flush=True)
    return copy


def values(arr):
    """Plotly JSON array (list or typed array {dtype, bdata}) -> list."""
    import numpy as np

    if isinstance(arr, dict) and "bdata" in arr:
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=arr["dtype"]).tolist()
    return list(arr or [])


def find(tree, comp_id):
    if isinstance(tree, dict):
        if tree.get("props", {}).get("id") == comp_id:
            return tree
        tree = tree.get("props", {}).get("children")
    for child in tree if isinstance(tree, list) else ([tree] if isinstance(tree, dict) else []):
        hit = find(child, comp_id)
        if hit is not None:
            return hit
    return None


class Client:
    def __init__(self, db):
        from kernelscope.dashboard.app import create_app

        self.app = create_app(db)
        self.c = self.app.server.test_client()
        self.deps = self.c.get("/_dash-dependencies").get_json()

    def call(self, dep, inputs: list, state: list, changed: str | None = None):
        """POST one callback request; ``changed`` ('id.property') is the input that fired (default: the
        first)."""
        outs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in dep["output"].strip(".").split("...")]
        body = {"output": dep["output"], "outputs": outs if len(outs) > 1 else outs[0],
                "inputs": [dict(i, value=v) for i, v in zip(dep["inputs"], inputs)],
                "state": [dict(s, value=v) for s, v in zip(dep["state"], state)],
                "changedPropIds": [changed or f"{dep['inputs'][0]['id']}.{dep['inputs'][0]['property']}"]}
        t, c = time.perf_counter(), time.process_time()
        r = self.c.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
        ms = (time.perf_counter() - t) * 1000
        self.last_cpu_ms = (time.process_time() - c) * 1000  # this process, every thread (DuckDB's too)
        return ms, r.status_code, len(r.data), (r.get_json() if r.status_code == 200 else None)

    def page(self, path, search=""):
        dep = next(d for d in self.deps if d["output"] == "page.children")
        return self.call(dep, [path], [search])


class Series:
    """One timed callback: a cold request, then warm ones."""

    def __init__(self, label, judged=True):
        self.label, self.cold, self.warm, self.bytes, self.codes = label, None, [], 0, set()
        self.cold_cpu: float | None = None  # CPU ms of the cold request (Client.last_cpu_ms), where measured
        self.cpu: list[float] = []  # CPU ms of the warm requests, where measured (Client.last_cpu_ms)
        self.judged = judged  # False: a download, not a callback (no target applies)

    def add(self, ms, code, nbytes):
        if self.cold is None:
            self.cold = ms
        else:
            self.warm.append(ms)
        self.bytes = max(self.bytes, nbytes)
        self.codes.add(code)

    def p(self, q):
        if not self.warm:
            return float("nan")
        s = sorted(self.warm)
        return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]  # nearest rank

    def row(self):
        p95 = self.p(0.95)
        ok = "PASS" if p95 <= P95_MS and self.bytes <= MAX_BYTES else "**FAIL**"
        if not self.warm or not self.judged:
            ok = "-"
        return [self.label, f"{self.cold:,.0f}", str(len(self.warm)), f"{self.p(0.5):,.0f}", f"{p95:,.0f}",
                f"{max(self.warm) if self.warm else float('nan'):,.0f}", f"{self.bytes / 1e3:,.1f}",
                "/".join(str(c) for c in sorted(self.codes)), ok,
                "-" if self.cold_cpu is None else f"{self.cold_cpu:,.0f}"]


CLIENT = None  # the Client main() times through (repeat reads the CPU time of each cold request from it)


def repeat(series, fn, n, budget_s):
    """fn(i) -> (ms, code, bytes, json); once cold, then warm until n or the time budget (counted from the
    end of the cold request) is spent, at least 3 warm requests."""
    out = None
    t0 = time.perf_counter()
    for i in range(n + 1):
        if i == 0 and CLIENT is not None:
            CLIENT.last_cpu_ms = None
        ms, code, nbytes, out = fn(i)
        series.add(ms, code, nbytes)
        if i == 0:
            series.cold_cpu = None if CLIENT is None else CLIENT.last_cpu_ms  # None: not a callback (a download)
            t0 = time.perf_counter()
        if i >= 3 and time.perf_counter() - t0 > budget_s:
            break
    return out


def callback_inputs(dep, layout, i, rng, trace_id):
    """Inputs and state for a callback from the page layout it lives on (see the module docstring)."""
    def prop_value(cid, prop):
        if cid == "url":
            return None
        comp = find(layout, cid)
        if comp is None:
            return None
        props = comp["props"]
        if prop == "clickData":
            fig = props.get("figure") or {}
            for n, t in enumerate(fig.get("data", [])):
                xs, ys = values(t.get("x")), values(t.get("y"))
                if xs:
                    k = i % len(xs)
                    pt = {"curveNumber": n, "pointNumber": k, "pointIndex": k, "x": xs[k],
                          "y": ys[k] if k < len(ys) else None}
                    cd = t.get("customdata")
                    if cd is not None:
                        cdv = values(cd) if isinstance(cd, dict) else cd
                        pt["customdata"] = cdv[k] if k < len(cdv) else None
                    return {"points": [pt]}
            return None
        if prop == "cellClicked":  # a table (AG Grid): a click on row k's first cell
            data = props.get("rowData") or []
            if not data:
                return None
            k = i % len(data)
            col = (props.get("columnDefs") or [{"field": next(iter(data[0]))}])[0]["field"]
            return {"rowIndex": k, "colId": col, "value": data[k].get(col), "rowId": str(data[k].get("id", k))}
        return props.get(prop)

    ins = [prop_value(x["id"], x["property"]) for x in dep["inputs"]]
    st = [prop_value(x["id"], x["property"]) for x in dep["state"]]
    return ins, st


def timeline_windows(span_ms, rng, n):
    """Seeded windows of 1 ms .. the whole trace (ms since the trace start)."""
    widths = [1.0, 10.0, 100.0, 1_000.0, 10_000.0, span_ms / 2, span_ms]
    out = []
    for i in range(n):
        w = widths[i % len(widths)]
        t0 = 0.0 if w >= span_ms else rng.uniform(0, span_ms - w)
        out.append((round(t0, 6), round(t0 + w, 6)))
    return out


def named(dep, values: dict) -> tuple[list, list]:
    """A callback's (inputs, state) from values by 'id.property' (None for the others), in the order its
    dependency lists them."""
    return ([values.get(f"{x['id']}.{x['property']}") for x in dep["inputs"]],
            [values.get(f"{x['id']}.{x['property']}") for x in dep["state"]])


def kernels_in_1ms(db, trace_id, client, dep, info):
    """The zoom callback for [60000, 60001) ms: drawn kernels vs DuckDB's count."""
    from kernelscope.storage.store import open_store

    t0 = 60_000.0
    ms, code, nbytes, resp = client.call(dep, *named(dep, {"timeline-zoom.data": {"range": [t0, t0 + 1], "at": 0},
                                                            "timeline-trace.data": trace_id, "url.search": ""}))
    fig = resp["response"]["timeline-graph"]["figure"]
    drawn = 0
    for t in fig["data"]:
        if (t.get("name") or "").startswith("GPU ") and (t.get("name") or "").endswith(" kernel"):
            drawn += sum(1 for v in values(t["x"]) if v == v) // 2
    a = info["start_ns"] + int(t0 * 1e6)
    with open_store(db, read_only=True) as store:
        want = int(store.query("SELECT count(*) AS n FROM gpu_activities WHERE trace_id = $t AND kind = 'kernel' "
                               "AND start_ns < $b AND end_ns > $a", {"t": trace_id, "a": a, "b": a + 1_000_000})
                   ["n"].iloc[0])
    mode = resp["response"]["timeline-status"]["data-mode"]
    return {"ms": ms, "bytes": nbytes, "drawn": drawn, "duckdb": want, "mode": mode}


def browser(db, trace_id):
    """First/warm Timeline render and the 1 ms URL in Chromium against a fresh server process; the
    peer JSON.parse. Returns a dict of seconds (None where not measured)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"error": "playwright is not installed"}
    if not pathlib.Path("/usr/bin/chromium").exists():
        return {"error": "no /usr/bin/chromium"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", (
        "import logging, sys; logging.getLogger('werkzeug').setLevel(logging.ERROR)\n"
        "from werkzeug.serving import make_server\nfrom kernelscope.dashboard.app import create_app\n"
        f"make_server('127.0.0.1', {port}, create_app({str(db)!r}).server, threaded=True).serve_forever()")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import http.server

    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(PEER_JSON.parent), **k)  # noqa: E731
    peer = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    peer.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=peer.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    out = {}
    drawn = ("() => { const g = document.querySelector('#timeline-graph .js-plotly-plot');"
             " return g && g._fullData && g._fullData.length > 0 && g.querySelector('.main-svg'); }")
    try:
        for _ in range(100):  # wait for the server
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        with sync_playwright() as p:
            br = p.chromium.launch(executable_path="/usr/bin/chromium",
                                   args=["--headless", "--no-sandbox", "--disable-gpu"])
            pg = br.new_page(viewport={"width": 1400, "height": 1000})
            errors = []
            pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(base + "/")  # load the JS bundles once (a user opening the dashboard first)
            pg.wait_for_selector("#traces-table td", timeout=120_000)
            steps = [("plotly_first_s", f"/trace/{trace_id}/timeline?t0=60000&t1=60001"),
                     ("first_s", f"/trace/{trace_id}/timeline"), ("warm_s", f"/trace/{trace_id}/timeline"),
                     ("window_1ms_s", f"/trace/{trace_id}/timeline?t0=60000&t1=60001")]
            for key, url in steps:
                t = time.perf_counter()
                pg.goto(base + url)
                pg.wait_for_function(drawn, timeout=120_000)
                out[key] = time.perf_counter() - t
                if key == "first_s":
                    out["first_mode"] = pg.get_attribute("#timeline-status", "data-mode")
            out["console_errors"] = len(errors)
            if PEER_JSON.exists():
                pg.goto(f"http://127.0.0.1:{peer.server_port}/")  # same origin as the file
                t = time.perf_counter()
                n = pg.evaluate(f"""async () => {{ const r = await fetch('/{PEER_JSON.name}');
                    const j = JSON.parse(await r.text()); return j.traceEvents.length; }}""")
                out["peer_parse_s"] = time.perf_counter() - t
                out["peer_events"] = n
            br.close()
    finally:
        server.terminate()
        server.wait(10)
        peer.shutdown()
    return out


def time_timeline(client, dep, label, trace_id, span_ms, rng, db, args) -> list[Series]:
    """The Timeline's callback, as three series: zooms (what the browser-side filter sends for a drag-zoom:
    windows of 1 ms .. the whole trace at seeded random positions), clicks on a CPU operator of a 1 ms window
    drawn event by event, and (when the page has its search box) name searches from such a window."""
    from kernelscope.storage.store import open_store

    wins = timeline_windows(span_ms, rng, max(args.requests, 5) + 1)  # the click and search series take >= 5
    with open_store(db, read_only=True) as store:
        cpu_ops = store.query("SELECT op_id FROM cpu_ops WHERE trace_id = $t USING SAMPLE 64 ROWS",
                              {"t": trace_id})["op_id"].astype(int).tolist()
        names = store.query("SELECT name FROM gpu_activities WHERE trace_id = $t USING SAMPLE 64 ROWS",
                            {"t": trace_id})["name"].tolist()
    ids = {f"{x['id']}.{x['property']}" for x in dep["inputs"]}
    zoom, click, find = Series(label + " [zoom]"), Series(label + " [click]"), Series(label + " [search]")

    def fz(i):
        a, b = wins[i]
        return client.call(dep, *named(dep, {"timeline-zoom.data": {"range": [a, b], "at": i},
                                             "timeline-trace.data": trace_id, "url.search": ""}))

    def fc(i):
        t0 = wins[i][0]
        pt = {"customdata": cpu_ops[i % len(cpu_ops)]}
        return client.call(dep, *named(dep, {"timeline-graph.clickData": {"points": [pt]},
                                             "timeline-trace.data": trace_id, "url.search": f"?t0={t0}&t1={t0 + 1}"}),
                           changed="timeline-graph.clickData")

    def ff(i):
        t0 = wins[i][0]
        text = names[i % len(names)].removeprefix("void ")[:24]
        return client.call(dep, *named(dep, {"timeline-find.n_submit": i + 1, "timeline-find.value": text,
                                             "timeline-trace.data": trace_id, "url.search": f"?t0={t0}&t1={t0 + 1}"}),
                           changed="timeline-find.n_submit")
    def with_cpu(series, fn):
        def call(i):
            out = fn(i)
            if i > 0:
                series.cpu.append(client.last_cpu_ms)
            return out
        return call

    repeat(zoom, with_cpu(zoom, fz), args.requests, args.budget_s)
    repeat(click, with_cpu(click, fc), max(5, args.requests // 4), args.budget_s / 4)
    out = [zoom, click]
    if "timeline-find.n_submit" in ids:
        repeat(find, with_cpu(find, ff), max(5, args.requests // 4), args.budget_s / 4)
        out.append(find)
    for s in out:  # wall time on a shared machine waits for a core; CPU time is the work done
        cpu = sorted(s.cpu)
        c95 = cpu[min(len(cpu) - 1, round(0.95 * len(cpu) + 0.5) - 1)]
        print(f"{s.label.rsplit(' ', 1)[-1]} warm requests: wall p50 {s.p(0.5):,.0f} ms, p95 {s.p(0.95):,.0f} ms; "
              f"CPU p50 {cpu[len(cpu) // 2]:,.0f} ms, p95 {c95:,.0f} ms (n={len(cpu)}; the process's CPU time, "
              "DuckDB's threads included)", flush=True)
    return out


def time_callback(client, dep, lay, trace_id, span_ms, rng, db, args, bin_choices) -> Series:
    """One callback: cold, then warm requests (module docstring); the Timeline's as several series."""
    label = "callback " + dep["output"].strip(".").split("...")[0] + " <- " + ",".join(
        f"{x['id']}.{x['property']}" for x in dep["inputs"])
    s = Series(label)
    if "timeline-graph.figure" in dep["output"]:
        return time_timeline(client, dep, label, trace_id, span_ms, rng, db, args)
    elif "operators-content" in dep["output"]:
        def fn(i):
            level = "top" if i % 2 == 0 else "leaf"
            return client.call(dep, [level], [trace_id, f"?level={'leaf' if level == 'top' else 'top'}"])
    elif [x["id"] for x in dep["inputs"]] == ["bound-bins"]:
        order = [b for b in bin_choices if b != 200] + [200]  # the page drew 200: cached

        def fn(i):
            return client.call(dep, [order[i % len(order)]], [trace_id])
    else:
        def fn(i):
            ins, st = callback_inputs(dep, lay, i, rng, trace_id)
            st = [trace_id if v is None and x["property"] == "data" else v for x, v in zip(dep["state"], st)]
            return client.call(dep, ins, st)
    repeat(s, fn, args.requests, args.budget_s)
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=pathlib.Path, default=DEFAULT_DB)
    ap.add_argument("--requests", type=int, default=40, help="warm requests per callback (at most)")
    ap.add_argument("--budget-s", type=float, default=60.0, help="time per callback after which it stops (>= 3 warm)")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--write", action="store_true", help="write results/dashboard-<date>-all.md")
    ap.add_argument("--pages", default=None,
                    help="comma-separated page names to time, each with its callbacks (e.g. 'timeline'); the "
                         "Perfetto export route is then timed only with --export")
    ap.add_argument("--export", action="store_true", help="with --pages: time the Perfetto export route too")
    args = ap.parse_args(argv)

    import duckdb
    import pandas

    from kernelscope import __version__
    from kernelscope.dashboard.app import STORE_PAGES, TRACE_PAGES
    from kernelscope.reports import timeline_data as td
    from kernelscope.storage.store import open_store

    db = open_db(args.db)
    with open_store(db, read_only=True) as store:
        row = store.query("SELECT g.trace_id, count(*) AS n FROM gpu_activities g WHERE kind = 'kernel' "
                          "GROUP BY 1 ORDER BY 2 DESC LIMIT 1")
        trace_id, kernels = row["trace_id"].iloc[0], int(row["n"].iloc[0])
        info = td.trace_info(store, trace_id)
    span_ms = (info["end_ns"] - info["start_ns"]) / 1e6
    load0 = os.getloadavg()[0]
    print(f"store {db}, trace {trace_id}: {kernels:,} kernels, {span_ms / 1000:,.1f} s; load {load0:.2f}", flush=True)
    rng = random.Random(5)
    global CLIENT
    client = CLIENT = Client(db)
    series: list[Series] = []

    # every page, each followed by the callbacks living on it (module docstring)
    from kernelscope.analysis import cache
    from kernelscope.dashboard.pages.bound import BIN_CHOICES

    layouts, done, totals = {}, set(), {}
    paths = [("traces", "/", "")] + [(n, f"/trace/{trace_id}/{n}", "") for n in TRACE_PAGES] + \
            [(n, f"/{n}", "") for n in STORE_PAGES] + [("compare", "/compare", f"?a={trace_id}&b={trace_id}")]
    if args.pages:
        only = set(args.pages.split(","))
        paths = [p for p in paths if p[0] in only]
    deps = [d for d in client.deps if d["output"] != "page.children"
            and not any(isinstance(x["id"], dict) for x in d["inputs"]) and not d.get("clientside_function")]
    for name, path, search in paths:
        s = Series(f"page {name} ({(path + search).replace(trace_id, '<id>')})")
        for k, v in cache.stats().items():
            totals[k] = totals.get(k, 0) + v if k != "entries" else max(totals.get(k, 0), v)
        cache.clear()
        out = repeat(s, lambda i: client.page(path, search), args.requests, args.budget_s)
        layouts[name] = lay = out["response"]["page"]["children"] if out else None
        series.append(s)
        print(" | ".join(s.row()), flush=True)
        if lay is None:
            continue
        for dep in deps:
            ids = [x["id"] for x in dep["inputs"]]
            if dep["output"] in done or not all(find(lay, i) for i in ids):
                continue
            done.add(dep["output"])
            timed = time_callback(client, dep, lay, trace_id, span_ms, rng, db, args, BIN_CHOICES)
            for t in timed if isinstance(timed, list) else [timed]:
                series.append(t)
                print(" | ".join(t.row()), flush=True)
    for dep in deps:
        if dep["output"] not in done and not args.pages:
            print("skip callback " + dep["output"] + ": no page renders its inputs", flush=True)
    for k, v in cache.stats().items():
        totals[k] = totals.get(k, 0) + v if k != "entries" else max(totals.get(k, 0), v)
    cache_stats = totals

    # the Perfetto export route
    exports = [("1 ms", "?t0=60000&t1=60001"), ("1 s", "?t0=60000&t1=61000"), ("whole trace", "")]
    for label, q in exports if not args.pages or args.export else []:
        s = Series(f"export perfetto.json {label} (a download)", judged=False)

        def fn(i, q=q):
            t = time.perf_counter()
            r = client.c.get(f"/export/{trace_id}/perfetto.json{q}")
            return (time.perf_counter() - t) * 1000, r.status_code, len(r.data), None
        repeat(s, fn, min(args.requests, 5), args.budget_s)
        series.append(s)
        print(" | ".join(s.row()), flush=True)

    dep = next(d for d in client.deps if "timeline-graph.figure" in d["output"])
    one_ms = kernels_in_1ms(db, trace_id, client, dep, info)
    print(f"1 ms window: {one_ms}", flush=True)
    br = {} if args.no_browser else browser(db, trace_id)
    print(f"browser: {br}", flush=True)
    load1 = os.getloadavg()[0]

    header = ["request", "cold ms", "warm n", "p50 ms", "p95 ms", "max ms", "max KB", "HTTP", "p95<=300 ms, <=2 MB",
              "cold CPU ms"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(s.row()) + " |" for s in series]
    fails = [s.label for s in series if s.warm and s.judged and (s.p(0.95) > P95_MS or s.bytes > MAX_BYTES)]
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    today = datetime.date.today().isoformat()
    render = br.get("first_s")
    text = [
        "# `benchmarks/dashboard.py`", "",
        f"Command: `{' '.join(['python3', 'benchmarks/dashboard.py'] + (argv if argv is not None else sys.argv[1:]))}`",
        "",
        f"Store `{args.db}` (benchmarked as `{db}`), trace {trace_id}: {kernels:,} kernels, "
        f"{span_ms / 1000:,.1f} s span. Date {today}, git {git} (working tree: the pages other engineers had "
        f"not committed yet are included as they were). Machine: {os.cpu_count()} cores, shared; load average "
        f"(1 min) {load0:.2f} at the start, {load1:.2f} at the end. kernelscope {__version__}, duckdb "
        f"{duckdb.__version__}, pandas {pandas.__version__}, python {sys.version.split()[0]}.", "",
        "Requests through the Flask test client. Cold: for a page, its first request after the per-process "
        "cache (analysis/cache.py) was emptied, so it runs its own analyses; for a callback, its first request "
        f"after its page was drawn. Then up to {args.requests} warm requests or {args.budget_s:.0f} s of them per callback "
        "(at least 3). "
        "p50/p95 nearest rank over the warm requests. KB = largest response body. Cold CPU ms: the process's "
        "user + system time during the cold request (every thread, DuckDB's included): the work done, which a "
        "loaded machine does not inflate the way it inflates wall time.", "",
        *lines, "",
        f"Callbacks over the targets (warm p95 > {P95_MS:.0f} ms or a response > 2 MB): "
        + (", ".join(fails) if fails else "none") + ".", "",
        "Cold requests over 300 ms: " + (", ".join(f"{x.label} {x.cold / 1000:,.1f} s" for x in series
                                                   if x.judged and x.cold and x.cold > P95_MS) or "none") + ".",
        "", f"Analysis cache over the pages and callbacks (hits and misses summed; entries: the most held at "
        f"once): {cache_stats}. " + (f"Only the pages {args.pages} and their callbacks were timed (--pages)."
                                       if args.pages else "Callbacks not timed (no page of a one-trace store "
                                       "renders their inputs: no sweep, no second trace, no multi-rank run): " + (", ".join(
            d["output"].strip(".").split("...")[0].split("@")[0] for d in deps if d["output"] not in done) or "none")
            + "."), "",
        f"**1 ms zoom window** [60000, 60001) ms through the Timeline callback: mode `{one_ms['mode']}`, "
        f"{one_ms['drawn']} kernels drawn as individual segments, DuckDB counts {one_ms['duckdb']} kernels "
        f"intersecting the window: {'PASS' if one_ms['drawn'] == one_ms['duckdb'] and one_ms['mode'] == 'events' else '**FAIL**'} "
        f"({one_ms['ms']:,.0f} ms, {one_ms['bytes'] / 1e3:,.1f} KB).", "",
    ]
    if br.get("error"):
        text.append(f"Browser: not measured ({br['error']}).")
    elif br:
        text += [
            "**Chromium** (fresh server process; the dashboard's JS loaded once on the traces page first):", "",
            "| navigation | s | target |", "|---|---|---|",
            f"| first page with a figure: Timeline at a 1 ms window (the browser loads and compiles plotly.js, "
            f"~3.5 MB, here) | {br['plotly_first_s']:.2f} | - |",
            f"| first whole-trace Timeline render (server caches cold: the per-trace base bins are built), mode "
            f"`{br.get('first_mode')}` | {render:.2f} | {'PASS' if render <= RENDER_S else '**FAIL**'} (<= 2 s) |",
            f"| Timeline again (warm) | {br['warm_s']:.2f} | {'PASS' if br['warm_s'] <= RENDER_S else '**FAIL**'} |",
            f"| 1 ms window URL | {br['window_1ms_s']:.2f} | {'PASS' if br['window_1ms_s'] <= RENDER_S else '**FAIL**'} |",
            f"| peer: fetch + JSON.parse of the 20-tile Chrome-trace JSON ({PEER_JSON.stat().st_size / 2**20:,.0f} MiB, "
            f"{br.get('peer_events', 0):,} events, 25,480 kernels; nothing drawn) | {br.get('peer_parse_s', float('nan')):.2f} | - |",
            "", f"Console errors: {br.get('console_errors')}. The 1M-kernel trace's own Chrome-trace JSON "
            f"({FULL_JSON.name}) is {FULL_JSON.stat().st_size / 1e9:,.2f} GB" if FULL_JSON.exists() else
            f"Console errors: {br.get('console_errors')}.",
        ]
        if FULL_JSON.exists():
            text[-1] += (": more than V8's maximum string length (2^29 - 24 characters), so no browser viewer "
                         "can read it as one JSON text; the dashboard's first Timeline response is "
                         f"{next(x for x in series if x.label.startswith('page timeline')).bytes / 1e3:,.0f} KB.")
    print("\n".join(text))
    if args.write:
        tag = args.pages.replace(",", "-") if args.pages else "all"
        out = ROOT / "benchmarks" / "results" / f"dashboard-{today}-{tag}.md"
        out.write_text("\n".join(text) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
