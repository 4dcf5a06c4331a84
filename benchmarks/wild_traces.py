"""Try kernelscope as a new user would on a folder of other projects' traces (issue 11).

Usage:
    .venv/bin/python benchmarks/wild_traces.py FOLDER [--db STORE] [--workdir DIR] [--timeout 120]
        [--only REGEX] [--limit N] [--run-dir DIR ...] [--heavy-mb 150] [--isolate] [--no-dashboard]
        [--json OUT.json] [--md OUT.md]

FOLDER is searched recursively for *.json and *.json.gz files (anything else is ignored; files over
--max-mb, default 200 MB on disk, are listed as skipped). Nothing is copied: the traces stay where they
are and this script never ships any.

For every file, as separate steps:

1. ``kernelscope ingest FILE --db STORE`` in its own process (one shared store, ingested in file order):
   exit code, wall time, peak RSS (``os.wait4``), whether the output holds a traceback, the one-line error.
2. For every trace that ingested, the commands a user would try, in one worker process per trace through
   click's CliRunner (a real ``kernelscope`` process per command with ``--isolate``): ``summary``
   (table and ``--format json``), ``analyze NAME TRACE`` for every single-trace analysis of
   ``kernelscope.analysis.ANALYSES`` (table and json; ``analyze diff TRACE OTHER``, ``analyze comm TRACE``
   and ``analyze transition TRACE`` too), ``report TRACE -o x.html``, ``report TRACE --format md``,
   ``diff OTHER TRACE`` (OTHER: the next ingested trace) and ``export --parquet DIR --run TRACE``.
   The parent watches the worker: a command that runs past --timeout is recorded as a timeout, the worker
   is killed and a new one goes on with the next command; a worker that dies is recorded as a crash.
   RSS per command is the worker's peak so far (``ru_maxrss``), so it never decreases within a trace.
   Traces whose file is over --heavy-mb uncompressed run the table format only (not ``--format json``).
3. The dashboard (``create_app(STORE)`` through Flask's test client, with ``PROPAGATE_EXCEPTIONS`` on so a
   server error is caught with its traceback): for every trace, the router callback
   (``/_dash-update-component``, ``page.children`` from ``url.pathname``) for ``/trace/<id>`` and
   ``/trace/<id>/<page>`` for every key of ``TRACE_PAGES``; then every other callback whose inputs are on
   the rendered page, with inputs built from the page as a user would produce them (each dropdown option
   (first 3), a click on row 0 of a table, a click on the first point of each figure trace with its
   customdata, a zoom to the middle half of the x range and a reset), outputs fed forward (the zoom store
   feeds the timeline); a callback answered 200 with the app's failure sentence (on_error) or an error
   logged while serving counts as a traceback (with the logged traceback) or "error-shown"; the Perfetto export ``/export/<id>/perfetto.json``; and the store pages ``/``,
   ``/compare``, ``/compare?a=..&b=..``, ``/sweep``, ``/ranks``.
4. ``--run-dir DIR`` (repeatable): ``kernelscope ingest DIR`` into a second store (``<STORE>-runs.duckdb``),
   then ``analyze comm`` on each run, ``traces``, and the dashboard's ``/ranks`` pages for each run.

Each command is: ok (exit 0, no traceback), refused (non-zero exit, no traceback; its last stderr line is
the one-line error), traceback (an exception escaped, or "Traceback" in the output), timeout, crash, or
invariant: ``summary --format json`` answered but breaks an invariant of the summary (a negative time or
count, busy > span, idle != span - busy, more kernels with a launch than kernels; per device too).
5. Unless --no-confirm, each traceback, crash or timeout is run once more alone as a real ``kernelscope``
   process, to tell a bug of the command from one of running it in-process.
The script prints one row per trace and a summary of distinct failure signatures (numbers, ids and paths
masked), and writes every record to --json and the tables to --md.
"""

from __future__ import annotations

import argparse
import base64
import collections
import json
import logging
import os
import pathlib
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENV_PY = ROOT / ".venv" / "bin" / "python"
VENV_KS = ROOT / ".venv" / "bin" / "kernelscope"
TB = "Traceback (most recent call last)"


# --------------------------------------------------------------------------------------------- helpers


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:400] if lines else ""


def _tb_tail(text: str, n: int = 8) -> list[str]:
    lines = [ln.rstrip() for ln in (text or "").splitlines() if ln.strip()]
    if TB in text:
        lines = lines[max(i for i, ln in enumerate(lines) if TB in ln):]
    return lines[-n:]


def _classify(rc: int | None, text: str, exc_text: str = "") -> str:
    if exc_text or TB in (text or ""):
        return "traceback"
    if rc is None:
        return "timeout"
    return "ok" if rc == 0 else "refused"


def _run_proc(argv: list[str], timeout: float, cwd: str | None = None) -> dict:
    """Run argv in its own process group: rc (None on timeout), wall s, peak RSS MB, stdout, stderr."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd, start_new_session=True)
        rc, ru = None, None
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                proc.returncode = rc
                break
            if time.perf_counter() - t0 > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                _, _, ru = os.wait4(proc.pid, 0)
                proc.returncode = -9
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return {"rc": rc, "wall_s": round(wall, 2), "rss_mb": round(ru.ru_maxrss / 1024, 1) if ru else None,
            "stdout": stdout, "stderr": stderr}


def _uncompressed_mb(path: pathlib.Path) -> float:
    if path.name.endswith(".gz"):
        try:
            with open(path, "rb") as fh:  # gzip's ISIZE (mod 2**32): good enough to pick heavy files
                fh.seek(-4, 2)
                return int.from_bytes(fh.read(4), "little") / 1e6
        except OSError:
            return 0.0
    return path.stat().st_size / 1e6


def _mask(text: str) -> str:
    """A failure signature: paths, ids, quoted names and numbers masked."""
    t = re.sub(r"(/[\w.+\-]+)+/?", "<path>", text)
    t = re.sub(r"\b[0-9a-f]{12}\b", "<id>", t)
    t = re.sub(r"'[^']{1,200}'", "'<..>'", t)
    t = re.sub(r"\d[\d,._]*", "<n>", t)
    return t[:220]


def summary_violations(doc) -> list[str]:
    """The summary's invariants (issue 11): no negative time or count, busy <= span, idle = span - busy,
    kernel time >= busy on one device, kernels with a launch <= kernels; per device too."""
    bad: list[str] = []

    def walk(prefix, v):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}{k}.", x)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(f"{prefix}{i}.", x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            bad.append(f"{prefix.rstrip('.')}={v}")

    walk("", {k: v for k, v in doc.items() if k not in ("labels", "trace_id")})
    rows = [("", doc)] + [(f"devices.{d.get('device')}.", d) for d in doc.get("devices") or []]
    for pre, r in rows:
        busy, span, idle = r.get("busy_ns"), r.get("gpu_span_ns"), r.get("idle_ns")
        if busy is not None and span is not None and busy > span:
            bad.append(f"{pre}busy_ns {busy} > gpu_span_ns {span}")
        if None not in (busy, span, idle) and idle != span - busy:
            bad.append(f"{pre}idle_ns {idle} != gpu_span_ns - busy_ns {span - busy}")
    kwl = ((doc.get("trust") or {}).get("kernels_with_launch") or {}).get("count")
    if kwl is not None and doc.get("kernels") is not None and kwl > doc["kernels"]:
        bad.append(f"trust.kernels_with_launch {kwl} > kernels {doc['kernels']}")
    return bad


# ----------------------------------------------------------------------------------------- CLI worker


class _Timeout(BaseException):
    """Raised by SIGALRM inside a worker command (a BaseException, so CliRunner does not swallow it)."""


def worker_cli(spec_path: str, out_path: str) -> None:
    """Run the commands of a spec file in this process through CliRunner, one JSON line per event."""
    from click.testing import CliRunner

    from kernelscope.cli import cli

    spec = json.loads(pathlib.Path(spec_path).read_text())
    runner = CliRunner()
    timeout = int(spec["timeout"])

    def _alarm(*_):
        raise _Timeout()

    signal.signal(signal.SIGALRM, _alarm)
    with open(out_path, "a", buffering=1) as out:
        for i, argv in enumerate(spec["commands"]):
            out.write(json.dumps({"event": "start", "i": i}) + "\n")
            t0 = time.perf_counter()
            exc_text = ""
            signal.alarm(timeout + 5)  # the parent's watch is the real bound; this frees a stuck Python loop
            try:
                res = runner.invoke(cli, argv, catch_exceptions=True)
                rc, stdout, stderr = res.exit_code, res.stdout, res.stderr
                if res.exception is not None and not isinstance(res.exception, SystemExit):
                    exc_text = "".join(traceback.format_exception(*res.exc_info))
            except _Timeout:
                rc, stdout, stderr = None, "", ""
            finally:
                signal.alarm(0)
            wall = time.perf_counter() - t0
            text = (stdout or "") + "\n" + (stderr or "")
            status = _classify(rc, text, exc_text)
            wrong = []
            if status == "ok" and argv[:1] == ["summary"] and "json" in argv:
                try:
                    wrong = summary_violations(json.loads(stdout))
                except ValueError as e:
                    wrong = [f"summary --format json is not JSON: {e}"]
                status = "invariant" if wrong else status
            rec = {"event": "end", "i": i, "rc": rc, "status": status, "wall_s": round(wall, 2),
                   "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                   "err": "; ".join(wrong)[:400] if wrong else
                   (_one_line(stderr or stdout) if status in ("refused", "timeout") else ""),
                   "tb": _tb_tail(exc_text or text) if status == "traceback" else []}
            out.write(json.dumps(rec) + "\n")


def run_commands(commands: list[list[str]], labels: list[str], timeout: int, isolate: bool,
                 tmp: pathlib.Path) -> list[dict]:
    """Run commands (argv lists without the program name) with per-command timeouts; one record each."""
    recs: list[dict] = []
    if isolate:
        for argv, label in zip(commands, labels):
            r = _run_proc([str(VENV_KS), *argv], timeout)
            text = r["stdout"] + "\n" + r["stderr"]
            status = _classify(r["rc"], text)
            recs.append({"cmd": label, "argv": argv, "rc": r["rc"], "status": status, "wall_s": r["wall_s"],
                         "rss_mb": r["rss_mb"],
                         "err": _one_line(r["stderr"] or r["stdout"]) if status in ("refused", "timeout") else "",
                         "tb": _tb_tail(text) if status == "traceback" else []})
        return recs
    start = 0
    while start < len(commands):
        spec = tmp / "spec.json"
        out = tmp / "out.jsonl"
        spec.write_text(json.dumps({"commands": commands[start:], "timeout": timeout}))
        out.write_text("")
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen([sys.executable, __file__, "--worker-cli", str(spec), str(out)],
                                    stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
            started_at, current, ended = None, None, {}
            killed = False
            while True:
                for line in out.read_text().splitlines():
                    ev = json.loads(line)
                    if ev["event"] == "start" and ev["i"] != current and ev["i"] not in ended:
                        current, started_at = ev["i"], time.perf_counter()
                    elif ev["event"] == "end":
                        ended[ev["i"]] = ev
                if proc.poll() is not None:
                    break
                if current is not None and current not in ended and time.perf_counter() - started_at > timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    killed = True
                    break
                time.sleep(0.05)
            for line in out.read_text().splitlines():  # lines written between the last read and the exit
                ev = json.loads(line)
                if ev["event"] == "end":
                    ended[ev["i"]] = ev
            err.seek(0)
            err_text = err.read().decode("utf-8", "replace")
        n_done = 0
        for i in range(len(commands) - start):
            if i in ended:
                ev = ended[i]
                recs.append({"cmd": labels[start + i], "argv": commands[start + i],
                             **{k: ev[k] for k in ("rc", "status", "wall_s", "rss_mb", "err", "tb")}})
                n_done = i + 1
            else:
                break
        if n_done == len(commands) - start:
            break
        # the command at n_done started but never ended: a timeout (we killed it) or a crash
        i = start + n_done
        if killed:
            recs.append({"cmd": labels[i], "argv": commands[i], "rc": None, "status": "timeout",
                         "wall_s": timeout, "rss_mb": None, "err": f"no answer within {timeout} s", "tb": []})
        else:
            status = "traceback" if TB in err_text else "crash"
            recs.append({"cmd": labels[i], "argv": commands[i], "rc": proc.returncode, "status": status,
                         "wall_s": None, "rss_mb": None,
                         "err": f"worker died (exit {proc.returncode}): {_one_line(err_text)}",
                         "tb": _tb_tail(err_text)})
        start = i + 1
    return recs


# ----------------------------------------------------------------------------------- dashboard worker


def _decode(values):
    """Plotly values: a list, or a binary array {"dtype", "bdata"} (as Dash sends numpy arrays)."""
    if isinstance(values, dict) and "bdata" in values:
        import numpy as np

        arr = np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])
        if values.get("shape"):
            shape = values["shape"]
            shape = [int(s) for s in shape.split(",")] if isinstance(shape, str) else shape
            arr = arr.reshape(shape)
        return arr.tolist()
    return values if isinstance(values, list) else ([] if values is None else [values])


def _components(tree, found: dict) -> None:
    """id -> props for every component with an id in a Dash layout tree (JSON form)."""
    if isinstance(tree, list):
        for t in tree:
            _components(t, found)
    elif isinstance(tree, dict):
        props = tree.get("props")
        if isinstance(props, dict):
            if isinstance(props.get("id"), str):
                found[props["id"]] = {"_type": tree.get("type"), **props}
            for v in props.values():
                _components(v, found)


def _zoom_js(relayout):
    """What the pages' clientside zoom callbacks (timeline, ranks timeline) return for a relayout."""
    if not relayout:
        return None
    lo = hi = None
    for k, v in relayout.items():
        if re.fullmatch(r"xaxis\d*\.autorange", k):
            return {"autorange": True, "at": int(time.time() * 1000)}
        m = re.fullmatch(r"xaxis\d*\.range\[([01])\]", k)
        if m:
            lo, hi = (v, hi) if m.group(1) == "0" else (lo, v)
        if re.fullmatch(r"xaxis\d*\.range", k) and isinstance(v, list):
            lo, hi = v[0], v[1]
    return {"range": [lo, hi], "at": int(time.time() * 1000)} if lo is not None and hi is not None else None


def _trigger_values(comp: dict, prop: str) -> list:
    """Values a user can give this input: dropdown options, a row click, a point click, a zoom."""
    if prop == "value":
        opts = comp.get("options") or []
        vals = [o.get("value") if isinstance(o, dict) else o for o in opts]
        return vals[:3] or [comp.get("value")]
    if prop == "cellClicked":  # a table (AG Grid): a click on its first row's first cell
        data, cols = comp.get("rowData") or [], comp.get("columnDefs") or []
        if not data or not cols:
            return []
        row = data[0] if isinstance(data[0], dict) else {}
        field = cols[0].get("field")
        return [{"rowIndex": 0, "colId": field, "value": row.get(field), "rowId": str(row.get("id", 0))}]
    fig = comp.get("figure") or {}
    traces = fig.get("data") or []
    if prop == "clickData":
        points = []
        for n, tr in enumerate(traces[:4]):
            x, y = _decode(tr.get("x")), _decode(tr.get("y"))
            if not x and not y:
                continue
            pt = {"curveNumber": n, "pointNumber": 0, "pointIndex": 0,
                  "x": x[0] if x else None, "y": y[0] if y else None}
            cd = _decode(tr.get("customdata"))
            if cd:
                pt["customdata"] = cd[0]
            points.append({"points": [pt]})
        return points
    if prop == "relayoutData":
        xs = [v for tr in traces for v in _decode(tr.get("x")) if isinstance(v, (int, float))]
        xs += [v + w for tr in traces if tr.get("base") is not None
               for v, w in zip(_decode(tr.get("base")), _decode(tr.get("x"))) if isinstance(v, (int, float))]
        out = [{"xaxis.autorange": True}]
        if xs:
            lo, hi = min(xs), max(xs)
            out.insert(0, {"xaxis.range[0]": lo + (hi - lo) / 4, "xaxis.range[1]": lo + 3 * (hi - lo) / 4})
        return out
    return [comp.get(prop)]


# ids of the app's sentences for a failure (a callback that raised; a store it could not read)
ERROR_MARKS = ("msg-callback-error", "msg-store-error")


class _Dash:
    def __init__(self, db):
        from kernelscope.dashboard.app import create_app

        self.app = create_app(db)
        self.app.server.config["PROPAGATE_EXCEPTIONS"] = True
        self.client = self.app.server.test_client()
        self.deps = self.client.get("/_dash-dependencies").get_json()
        self.last_text = ""
        # a callback that raises may be answered 200 with a sentence (the app's on_error) and the traceback
        # logged: catch both, so such a failure still counts
        self.logged: list[logging.LogRecord] = []
        handler = logging.Handler(logging.ERROR)
        handler.emit = self.logged.append
        logging.getLogger().addHandler(handler)

    def post(self, dep: dict, inputs: list[dict], state: list[dict], changed: str) -> tuple[int, dict | None]:
        output = dep["output"]
        outs = [{"id": o.split(".")[0], "property": o.split(".", 1)[1]} for o in output.strip(".").split("...")]
        body = {"output": output, "outputs": outs if len(outs) > 1 else outs[0], "inputs": inputs,
                "changedPropIds": [changed], "state": state}
        r = self.client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
        self.last_text = r.get_data(as_text=True)
        return r.status_code, (r.get_json(silent=True) if r.status_code == 200 else None)

    def request(self, label: str, fn) -> dict:
        t0 = time.perf_counter()
        self.last_text = ""
        del self.logged[:]
        try:
            code, detail = fn()
            status = "ok" if code in (200, 204) else ("http500" if code >= 500 else f"http{code}")
            rec = {"req": label, "code": code, "status": status, "err": "" if status == "ok" else str(detail)[:300],
                   "tb": []}
            marks = [m for m in ERROR_MARKS if m in self.last_text]
            if status == "ok" and (marks or self.logged):
                tb = next((logging.Formatter().formatException(x.exc_info) for x in self.logged if x.exc_info), "")
                rec.update(status="traceback" if tb else "error-shown",
                           err=(_one_line(tb) or (self.logged[0].getMessage() if self.logged else "")
                                or ", ".join(marks))[:300], tb=_tb_tail(tb))
        except Exception:  # noqa: BLE001 - the point is to record it
            text = traceback.format_exc()
            rec = {"req": label, "code": 500, "status": "traceback", "err": _one_line(text), "tb": _tb_tail(text)}
        rec["wall_s"] = round(time.perf_counter() - t0, 2)
        return rec

    def route(self, pathname: str, search: str = "") -> tuple[int, dict | None]:
        dep = next(d for d in self.deps if d["output"] == "page.children")
        return self.post(dep, [{"id": "url", "property": "pathname", "value": pathname}],
                         [{"id": "url", "property": "search", "value": search}], "url.pathname")

    def page_and_callbacks(self, pathname: str, search: str = "") -> list[dict]:
        """Render a page through the router, then fire every callback whose inputs it holds."""
        recs, holder = [], {}

        def _render():
            code, resp = self.route(pathname, search)
            holder["resp"] = resp
            return code, resp

        label = pathname + search
        recs.append(self.request(f"page {label}", _render))
        resp = holder.get("resp")
        if not resp:
            return recs
        comps: dict = {"url": {"pathname": pathname, "search": search}}
        _components(resp["response"]["page"]["children"], comps)
        produced: dict = collections.defaultdict(list)  # (id, prop) -> values earlier callbacks set
        for dep in self.deps:
            if dep["output"] in ("page.children",) or dep["output"].startswith("..url.pathname"):
                continue
            ids = [i["id"] for i in dep["inputs"]] + [s["id"] for s in dep["state"]]
            if not all(isinstance(i, str) and i in comps for i in ids):
                continue
            if dep.get("clientside_function"):
                # no browser here: the known clientside callbacks are the zoom stores; emulate them
                (inp,), out_id = dep["inputs"], dep["output"].split(".")[0]
                if inp["property"] == "relayoutData" and out_id in comps:
                    for rl in _trigger_values(comps[inp["id"]], "relayoutData"):
                        if _zoom_js(rl) is not None:
                            produced[(out_id, dep["output"].split(".")[1])].append(_zoom_js(rl))
                continue
            for k, trig in enumerate(dep["inputs"]):
                comp = comps[trig["id"]]
                values = produced.get((trig["id"], trig["property"])) or _trigger_values(comp, trig["property"])
                for value in values[:3]:
                    inputs = [{"id": i["id"], "property": i["property"],
                               "value": value if j == k else comps[i["id"]].get(i["property"])}
                              for j, i in enumerate(dep["inputs"])]
                    state = [{"id": s["id"], "property": s["property"], "value": comps[s["id"]].get(s["property"])}
                             for s in dep["state"]]
                    out: dict = {}

                    def _fire(dep=dep, inputs=inputs, state=state, trig=trig, out=out):
                        code, r = self.post(dep, inputs, state, f"{trig['id']}.{trig['property']}")
                        out["r"] = r
                        return code, r
                    short = json.dumps(value, default=str)[:60]
                    recs.append(self.request(f"callback {label} {trig['id']}.{trig['property']}={short}", _fire))
                    for cid, props in ((out.get("r") or {}).get("response") or {}).items():
                        if cid in comps and isinstance(props, dict):  # feed outputs forward
                            for p_, v in props.items():
                                produced[(cid, p_.split("@")[0])].append(v)
        return recs


def worker_dash(spec_path: str, out_path: str) -> None:
    spec = json.loads(pathlib.Path(spec_path).read_text())
    from kernelscope.dashboard.app import TRACE_PAGES

    d = _Dash(spec["db"])
    with open(out_path, "a", buffering=1) as out:
        def emit(trace, recs):
            out.writelines(json.dumps({"trace": trace, **r}) + "\n" for r in recs)

        def perfetto(tid):
            r = d.client.get(f"/export/{tid}/perfetto.json")
            return r.status_code, r.data[:200]

        for item in spec["traces"]:
            tid, other = item["id"], item.get("other")
            emit(tid, d.page_and_callbacks(f"/trace/{tid}"))
            for page in TRACE_PAGES:
                emit(tid, d.page_and_callbacks(f"/trace/{tid}/{page}"))
            emit(tid, [d.request(f"GET /export/{tid}/perfetto.json", lambda tid=tid: perfetto(tid))])
            if other:
                emit(tid, d.page_and_callbacks("/compare", f"?a={other}&b={tid}"))
        for path, search in spec.get("store_pages", []):
            emit("<store>", d.page_and_callbacks(path, search))


def run_dashboard(db: pathlib.Path, items: list[dict], store_pages: list[tuple[str, str]], timeout: int,
                  tmp: pathlib.Path) -> list[dict]:
    """Dashboard requests in worker processes; a worker past timeout x pages is killed and the rest go on."""
    recs: list[dict] = []
    chunks = [items[i:i + 5] for i in range(0, len(items), 5)] or [[]]
    for n, chunk in enumerate(chunks):
        spec, out = tmp / "dash-spec.json", tmp / "dash-out.jsonl"
        spec.write_text(json.dumps({"db": str(db), "traces": chunk,
                                    "store_pages": store_pages if n == len(chunks) - 1 else []}))
        out.write_text("")
        r = _run_proc([sys.executable, __file__, "--worker-dash", str(spec), str(out)],
                      timeout * (10 * len(chunk) + len(store_pages) + 1))
        got = [json.loads(ln) for ln in out.read_text().splitlines()]
        recs += got
        if r["rc"] != 0:
            done = {g["trace"] for g in got}
            for item in chunk:
                if item["id"] not in done or item is chunk[-1]:
                    recs.append({"trace": item["id"], "req": "dashboard worker", "code": None,
                                 "status": "timeout" if r["rc"] is None else "crash",
                                 "err": _one_line(r["stderr"]) or f"exit {r['rc']}", "tb": _tb_tail(r["stderr"]),
                                 "wall_s": r["wall_s"]})
    return recs


# ------------------------------------------------------------------------------------------------ main


def _files(folder: pathlib.Path, only: str | None) -> list[pathlib.Path]:
    out = sorted(p for p in folder.rglob("*") if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")))
    return [p for p in out if not only or re.search(only, str(p))]


def _single_analyses() -> tuple[list[str], list[str]]:
    from kernelscope.analysis import ANALYSES

    return ([n for n, a in ANALYSES.items() if not a.multi], [n for n, a in ANALYSES.items() if a.multi])


def _commands(tid: str, other: str | None, run: str, heavy: bool, tmp: pathlib.Path, db: str):
    singles, multis = _single_analyses()
    cmds: list[tuple[str, list[str]]] = [("summary", ["summary", tid])]
    if not heavy:
        cmds.append(("summary json", ["summary", tid, "--format", "json"]))
    for n in singles:
        if n == "summary":
            continue
        cmds.append((f"analyze {n}", ["analyze", n, tid]))
        if not heavy:
            cmds.append((f"analyze {n} json", ["analyze", n, tid, "--format", "json"]))
    for n in multis:
        args = [tid, other] if n == "diff" and other else [tid]
        cmds.append((f"analyze {n}", ["analyze", n, *args]))
    html = tmp / f"{tid}.html"
    cmds.append(("report html", ["report", tid, "-o", str(html)]))
    cmds.append(("report md", ["report", tid, "--format", "md"]))
    if other:
        cmds.append(("diff", ["diff", other, tid]))
    cmds.append(("export", ["export", "--parquet", str(tmp / f"parquet-{tid}"), "--run", run]))
    return [label for label, _ in cmds], [[*argv, "--db", db] for _, argv in cmds]


def _ingest_line(stdout: str) -> tuple[str | None, str]:
    m = re.search(r"^ingested\s+([0-9a-f]+)\s", stdout, re.MULTILINE)
    return (m.group(1) if m else None), _one_line(stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?")
    ap.add_argument("--db", default=None, help="store (default: a fresh one in --workdir)")
    ap.add_argument("--workdir", default=str(ROOT / ".bench" / "wild"))
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--only", default=None, help="regex on the file path")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--max-mb", type=float, default=200.0, help="skip files larger than this on disk")
    ap.add_argument("--heavy-mb", type=float, default=150.0,
                    help="uncompressed size above which only the table format of each command runs")
    ap.add_argument("--run-dir", action="append", default=[], help="also ingest this folder as one run")
    ap.add_argument("--isolate", action="store_true", help="one real kernelscope process per command")
    ap.add_argument("--src", default=None,
                    help="run this copy of src/ (PYTHONPATH) instead of the working tree, e.g. a snapshot "
                         "taken with `cp -r src .bench/wild-src` so edits during a long run do not mix in")
    ap.add_argument("--no-confirm", action="store_true",
                    help="do not re-run each failing command once in a real kernelscope process")
    ap.add_argument("--no-dashboard", action="store_true")
    ap.add_argument("--json", default=None, help="write every record here")
    ap.add_argument("--md", default=None, help="write the tables here (Markdown)")
    ap.add_argument("--worker-cli", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--worker-dash", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker_cli:
        worker_cli(*a.worker_cli)
        return 0
    if a.worker_dash:
        worker_dash(*a.worker_dash)
        return 0
    if not a.folder:
        ap.error("give the FOLDER of traces")
    if a.src and not (pathlib.Path(a.src) / "kernelscope" / "__init__.py").is_file():
        ap.error(f"--src {a.src}: no kernelscope package there")
    if a.src:  # every child (ingest, workers, kernelscope) imports kernelscope from there
        os.environ["PYTHONPATH"] = str(pathlib.Path(a.src).resolve()) + os.pathsep + os.environ.get("PYTHONPATH", "")
    prov = _provenance(a.src)
    folder = pathlib.Path(a.folder).resolve()
    work = pathlib.Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    db = pathlib.Path(a.db) if a.db else work / f"wild-{time.strftime('%Y%m%d-%H%M%S')}.duckdb"
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="wild-", dir=work))
    files = _files(folder, a.only)[: a.limit]
    t_start = time.perf_counter()
    print(f"{len(files)} files under {folder}; store {db}; {prov}", flush=True)

    # 1. ingest, one process per file, into one store
    rows: list[dict] = []
    for f in files:
        rel = str(f.relative_to(folder))
        row = {"file": rel, "mb": round(f.stat().st_size / 1e6, 2), "mb_raw": round(_uncompressed_mb(f), 1)}
        rows.append(row)
        if f.stat().st_size > a.max_mb * 1e6:
            row["ingest"] = {"status": "skipped", "err": f"over --max-mb {a.max_mb}"}
            continue
        r = _run_proc([str(VENV_KS), "ingest", str(f), "--db", str(db)], a.timeout)
        text = r["stdout"] + "\n" + r["stderr"]
        status = _classify(r["rc"], text)
        tid, line = _ingest_line(r["stdout"])
        if status == "ok" and tid is None:
            status = "no-trace"  # exit 0 without an "ingested" line (e.g. skipped)
        row["ingest"] = {"status": status, "rc": r["rc"], "wall_s": r["wall_s"], "rss_mb": r["rss_mb"],
                         "id": tid, "line": line,
                         "err": _one_line(r["stderr"] or r["stdout"]) if status not in ("ok",) else "",
                         "tb": _tb_tail(text) if status == "traceback" else []}
        print(f"ingest {status:9} {r['wall_s']:6.1f}s {r['rss_mb'] or 0:7.0f}MB  {rel}"
              + (f"\n    {row['ingest']['err']}" if status != "ok" else ""), flush=True)

    ok = [r for r in rows if r["ingest"].get("status") == "ok"]
    # the trace's run (export --run): the run id of a rank trace, else the trace id
    runs = {}
    if ok:
        r = _run_proc([str(VENV_KS), "sql", "--format", "json", "--db", str(db),
                       "SELECT trace_id AS id, run_id FROM traces"], a.timeout)
        try:
            runs = {x["id"]: x.get("run_id") for x in json.loads(r["stdout"])}
        except (ValueError, KeyError, TypeError):
            runs = {}

    # 2. commands per trace
    for n, row in enumerate(ok):
        tid = row["ingest"]["id"]
        other = ok[(n + 1) % len(ok)]["ingest"]["id"] if len(ok) > 1 else None
        row["other"] = other
        heavy = row["mb_raw"] > a.heavy_mb
        labels, cmds = _commands(tid, other, runs.get(tid) or tid, heavy, tmp, str(db))
        t0 = time.perf_counter()
        row["commands"] = run_commands(cmds, labels, a.timeout, a.isolate, tmp)
        c = collections.Counter(x["status"] for x in row["commands"])
        print(f"cmds   {time.perf_counter() - t0:6.1f}s {dict(c)}  {row['file']}", flush=True)
        for x in row["commands"]:
            if x["status"] != "ok":
                print(f"    {x['status']:9} {x['cmd']}: {x['err'] or (x['tb'][-1] if x['tb'] else '')}", flush=True)
        for p in tmp.glob(f"{tid}*"):
            (p.unlink() if p.is_file() else None)
        for p in tmp.glob(f"parquet-{tid}"):
            import shutil

            shutil.rmtree(p, ignore_errors=True)

    # 3. dashboard
    dash: list[dict] = []
    if not a.no_dashboard and ok:
        t0 = time.perf_counter()
        items = [{"id": r["ingest"]["id"], "other": r.get("other")} for r in ok]
        store_pages = [("/", ""), ("/compare", ""), ("/sweep", ""), ("/ranks", "")]
        dash = run_dashboard(db, items, store_pages, a.timeout, tmp)
        by_trace = collections.defaultdict(list)
        for d in dash:
            by_trace[d["trace"]].append(d)
        for row in ok:
            row["dashboard"] = by_trace.get(row["ingest"]["id"], [])
        c = collections.Counter(d["status"] for d in dash)
        print(f"dashboard {time.perf_counter() - t0:6.1f}s {len(dash)} requests {dict(c)}", flush=True)
        for d in dash:
            if d["status"] != "ok":
                print(f"    {d['status']:9} {d['trace']} {d['req'][:120]}: {d['err'][:200]}", flush=True)

    # 4. folders ingested as runs
    run_rows: list[dict] = []
    for k, rd in enumerate(a.run_dir):
        rdb = db.with_name(f"{db.stem}-run{k}.duckdb")
        r = _run_proc([str(VENV_KS), "ingest", rd, "--db", str(rdb)], a.timeout * 3)
        text = r["stdout"] + "\n" + r["stderr"]
        rec = {"dir": rd, "ingest": {"status": _classify(r["rc"], text), "rc": r["rc"], "wall_s": r["wall_s"],
                                     "rss_mb": r["rss_mb"], "out": r["stdout"][-2000:],
                                     "err": _one_line(r["stderr"]), "tb": _tb_tail(text)}}
        print(f"run-dir {rec['ingest']['status']} {rd}\n{r['stdout'][-600:]}{r['stderr'][-600:]}", flush=True)
        q = _run_proc([str(VENV_KS), "sql", "--format", "json", "--db", str(rdb),
                       ("SELECT run_id, list(trace_id ORDER BY rank) AS ids FROM traces "
                        "WHERE run_id IS NOT NULL GROUP BY run_id")], a.timeout)
        try:
            run_ids = {x["run_id"]: x["ids"] for x in json.loads(q["stdout"])}
        except (ValueError, KeyError, TypeError):
            run_ids = {}
        labels, cmds = ["traces"], [["traces", "--db", str(rdb)]]
        for x, ids in run_ids.items():  # as the README shows: analyze comm RANK0 RANK1 ...
            labels += [f"analyze comm (all {len(ids)} ranks of {x})", f"analyze comm (rank 0 of {x})",
                       f"report md (all ranks of {x})", f"report html (all ranks of {x})"]
            cmds += [["analyze", "comm", *ids, "--db", str(rdb)], ["analyze", "comm", ids[0], "--db", str(rdb)],
                     ["report", *ids, "--format", "md", "--db", str(rdb)],
                     ["report", *ids, "-o", str(tmp / f"run{k}.html"), "--db", str(rdb)]]
        rec["commands"] = run_commands(cmds, labels, a.timeout, a.isolate, tmp)
        if not a.no_dashboard:
            pages = [("/ranks", "")] + [("/ranks", f"?run={x}") for x in run_ids] \
                + [("/ranks", f"?run={x}&view=timeline") for x in run_ids]
            items = [{"id": i} for ids in run_ids.values() for i in ids[:2]]
            rec["dashboard"] = run_dashboard(rdb, items, pages, a.timeout, tmp)
        for x in rec["commands"] + rec.get("dashboard", []):
            if x["status"] != "ok":
                print(f"    {x['status']:9} {x.get('cmd') or x.get('req')}: {x['err'][:200]}", flush=True)
        run_rows.append(rec)

    # 5. each failing command once more, alone, as a real `kernelscope` process (not CliRunner)
    if not a.no_confirm:
        for row in rows:
            for x in row.get("commands", []):
                if x["status"] in ("traceback", "crash", "timeout"):
                    r = _run_proc([str(VENV_KS), *x["argv"]], a.timeout)
                    text = r["stdout"] + "\n" + r["stderr"]
                    x["confirm"] = {"status": _classify(r["rc"], text), "rc": r["rc"], "wall_s": r["wall_s"],
                                    "rss_mb": r["rss_mb"], "tb": _tb_tail(text, 14) if TB in text else [],
                                    "err": _one_line(r["stderr"])}
                    print(f"confirm {x['cmd']} {row['file']}: {x['confirm']['status']}", flush=True)

    total = time.perf_counter() - t_start
    md = report_tables(rows, run_rows, dash, total, folder, db, prov)
    print(md)
    if a.md:
        pathlib.Path(a.md).write_text(md)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"folder": str(folder), "db": str(db), "total_s": round(total, 1),
                                                    "provenance": prov,
                                                    "rows": rows, "runs": run_rows, "store_dash": [
                                                        d for d in dash if d["trace"] == "<store>"]}, indent=1))
    bad = sum(1 for r in rows for x in r.get("commands", []) + r.get("dashboard", [])
              if x["status"] in ("traceback", "crash", "http500", "invariant"))
    bad += sum(1 for r in rows if r["ingest"].get("status") in ("traceback", "crash"))
    bad += sum(1 for r in rows for x in r.get("dashboard", []) if x["status"] == "error-shown")
    return 1 if bad else 0


def _provenance(src: str | None = None) -> str:
    """Which kernelscope ran: its import path, the git commit and the files modified in the working tree."""
    r = subprocess.run([str(VENV_PY), "-c", "import kernelscope; print(kernelscope.__file__)"],
                       capture_output=True, text=True, check=False)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"],
                           capture_output=True, text=True, check=False).stdout.split("\n")
    dirty = [ln[3:] for ln in dirty if ln.strip()] if not src else []  # a --src copy: say where it came from
    if src:
        return (f"kernelscope from {r.stdout.strip() or r.stderr.strip()[-200:]} (a copy of src/; the checkout's "
                f"HEAD is now {head.stdout.strip()})")
    return (f"kernelscope from {r.stdout.strip() or r.stderr.strip()[-200:]}, git {head.stdout.strip()}"
            + (f" + {len(dirty)} modified/new files under src/ ({', '.join(d.split('/')[-1] for d in dirty)})"
               if dirty else ""))


def report_tables(rows, run_rows, dash, total, folder, db, prov="") -> str:
    out = [f"# kernelscope on {len(rows)} files of other projects ({folder})", "",
           f"Store {db}; total {total / 60:.1f} min. {prov}", "",
           "| # | file | MB | ingest | s | RSS MB | cmds ok | refused | traceback | timeout/crash/invariant | dash ok | dash bad |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    sigs: dict[tuple, list] = collections.defaultdict(list)
    for n, r in enumerate(rows, 1):
        stem = re.sub(r"\.json(\.gz)?$", "", r["file"].split("/")[-1])
        ing = r["ingest"]
        cmds = r.get("commands", [])
        c = collections.Counter(x["status"] for x in cmds)
        dc = collections.Counter(d["status"] for d in r.get("dashboard", []))
        out.append(f"| {n} | {r['file']} | {r['mb_raw']} | {ing.get('status')} | {ing.get('wall_s', '')} | "
                   f"{ing.get('rss_mb', '')} | {c['ok']} | {c['refused']} | {c['traceback']} | "
                   f"{c['timeout'] + c['crash'] + c['invariant']} | {dc['ok']} | {sum(dc.values()) - dc['ok']} |")
        if ing.get("status") != "ok":
            sigs[("ingest", ing.get("status"), _mask(ing.get("err", "").replace(stem, "<name>")))].append(r["file"])
        for x in cmds:
            if x["status"] != "ok":
                key = (x["tb"][-1] if x["tb"] else x["err"]).replace(stem, "<name>")
                conf = x.get("confirm", {}).get("status")
                status = x["status"] + (f" (alone: {conf})" if conf else "")
                sigs[(x["cmd"], status, _mask(key))].append(r["file"])
        for d in r.get("dashboard", []):
            if d["status"] != "ok":
                key = d["tb"][-1] if d["tb"] else d["err"]
                sigs[("dashboard " + d["req"].split(" ")[0] + " " + re.sub(r"/trace/[0-9a-f]+", "/trace/<id>",
                                                                         d["req"].split(" ")[1]).split("?")[0],
                      d["status"], _mask(key))].append(r["file"])
    for d in dash:
        if d["trace"] == "<store>" and d["status"] != "ok":
            sigs[("dashboard " + d["req"][:40], d["status"], _mask(d["tb"][-1] if d["tb"] else d["err"]))].append("<store>")
    for rr in run_rows:
        if rr["ingest"]["status"] != "ok":
            sigs[("ingest DIR", rr["ingest"]["status"], _mask(rr["ingest"]["err"]))].append(rr["dir"])
        for x in rr.get("commands", []) + rr.get("dashboard", []):
            if x["status"] != "ok":
                sigs[(x.get("cmd") or x.get("req"), x["status"], _mask(x["tb"][-1] if x["tb"] else x["err"]))].append(rr["dir"])
    out += ["", "## Distinct failure signatures (command, status, masked message): traces", ""]
    order = {"traceback": 0, "crash": 1, "http500": 2, "invariant": 3, "timeout": 4}
    for (cmd, status, msg), files in sorted(sigs.items(), key=lambda kv: (order.get(kv[0][1].split()[0], 9), kv[0])):
        out.append(f"- **{status}** `{cmd}`: {msg}  ({len(files)}: {', '.join(sorted(set(files))[:4])}"
                   f"{' ...' if len(set(files)) > 4 else ''})")
    if run_rows:
        out += ["", "## Folders ingested as runs", ""]
        for rr in run_rows:
            c = collections.Counter(x["status"] for x in rr.get("commands", []) + rr.get("dashboard", []))
            out.append(f"- {rr['dir']}: ingest {rr['ingest']['status']} (exit {rr['ingest']['rc']}); {dict(c)}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
