"""Issue 11, "Trust of the numbers shown": each finding as a test that failed before its fix.

- TKLQT (a sum over kernels, 38,575 ms on a 152 ms trace) leads nowhere: the per-kernel mean launch+queue
  time and q lead, and the sum is shown as "sum over N kernels" (Launch page, Overview, report, CLI);
- a missing number says "n/a" and why (one helper, ``reports.missing``), never a raw ``null``;
- ``traces --format csv`` prints labels and devices as JSON, not Python reprs;
- ``profile --help`` names the folder runs really go to;
- ``report --sweep`` orders its traces by the numeric label, ties by name;
- the Bandwidth page finds the device of a graph-only trace (no operators) in the peak table.
"""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from click.testing import CliRunner

from kernelscope.analysis.registry import get_analysis
from kernelscope.cli import cli
from kernelscope.dashboard.app import route
from kernelscope.reports import launch as rl
from kernelscope.reports.report import report

from .tree import find, texts
from .tree import find_json as _find
from .tree import page_json as _page
from .tree import text_json as _text

NULL = re.compile(r"\bnull\b|\bNone\b|\bnan\b", re.IGNORECASE)


def _kpi_ids(tree, container: str) -> list[str]:
    """The ids of the KPI values in a KPI row, in the order shown."""
    return [k["props"]["children"][1]["props"]["id"] for k in _find(tree, container)["props"]["children"]]


def _kpi_label(tree, kid: str) -> str:
    row = None
    for container in ("kpis", "launch-kpis"):
        c = _find(tree, container)
        if c is None:
            continue
        for k in c["props"]["children"]:
            if k["props"]["children"][1]["props"]["id"] == f"kpi-{kid}":
                row = k
    return _text(row["props"]["children"][0])


# --- 1. TKLQT: the per-kernel mean and q lead, the sum is a sum --------------------------------------------

def _launch(store, tid):
    return get_analysis("launch").fn(store, tid).scalars


def test_tklqt_terms_and_mean_from_the_analysis(dash_store, store):
    ls = _launch(store, dash_store.ids["llama_prefill_b128"])
    # 38.6 s of launch-and-queue time on a 152 ms trace: a sum over 1,274 kernels, ~253 waiting on average
    assert ls["tklqt_ns"] > 100 * ls["gpu_span_ns"] and ls["graph_launches"] == 0
    assert rl.tklqt_terms(ls) == ls["kernels"] == 1274
    assert rl.mean_lq_ns(ls) == round(ls["tklqt_ns"] / 1274)
    # second way: the mean of start(k) - start(launch) over the kernels, by hand from the store
    hand = store.query("SELECT avg(a.start_ns - l.start_ns) AS m FROM gpu_activities a JOIN launches l "
                       "USING (trace_id, launch_id) WHERE a.trace_id = $t AND a.kind = 'kernel'",
                       {"t": dash_store.ids["llama_prefill_b128"]})["m"].iloc[0]
    assert abs(rl.mean_lq_ns(ls) - hand) <= 1
    assert rl.tklqt_sum_label(ls) == "sum over 1,274 kernels"
    g = _launch(store, dash_store.ids["small_kernels_graph"])
    assert rl.tklqt_terms(g) == g["graph_launches"] == 6 and g["kernels"] == 0
    assert rl.tklqt_sum_label(g) == "sum over 6 graph launches"
    assert rl.mean_lq_ns({"tklqt_ns": 0, "kernels": 0, "graph_launches": 0}) is None


@pytest.mark.parametrize("path,container", [("launch", "launch-kpis"), ("", "kpis")])
def test_pages_lead_with_mean_and_q_and_call_tklqt_a_sum(client, dash_store, store, path, container):
    tid = dash_store.ids["llama_prefill_b128"]
    ls = _launch(store, tid)
    page = _page(client, f"/trace/{tid}/{path}".rstrip("/"))
    ids = _kpi_ids(page, container)
    i_mean, i_q, i_sum = ids.index("kpi-mean_lq_ns"), ids.index("kpi-mean_queue_depth"), ids.index("kpi-tklqt_ns")
    assert i_mean < i_q < i_sum  # the mean per kernel and q first, the sum after them
    mean = _find(page, "kpi-mean_lq_ns")
    assert mean["props"]["data-value"] == str(round(ls["tklqt_ns"] / 1274))
    assert _text(mean) == f"{round(ls['tklqt_ns'] / 1274) / 1e6:,.3f} ms"
    assert "per kernel" in _kpi_label(page, "mean_lq_ns")
    assert _text(_find(page, "kpi-mean_queue_depth")) == f"{ls['mean_queue_depth']:,.2f}"
    # the sum keeps its exact value and says what it is
    assert _find(page, "kpi-tklqt_ns")["props"]["data-value"] == str(ls["tklqt_ns"])
    assert "sum over 1,274 kernels" in _kpi_label(page, "tklqt_ns")
    if path == "launch":  # the split's parts are sums too: each says its mean per kernel
        for k in ("api_ns", "queue_ns", "dispatch_ns", "launch_delay_ns"):
            assert _text(_find(page, f"kpi-{k}-extra")) == f"mean {round(ls[k] / 1274) / 1e6:,.3f} ms per kernel"


def test_report_leads_with_mean_and_q(dash_store, store):
    tid = dash_store.ids["llama_prefill_b128"]
    ls = _launch(store, tid)
    md = report(store, [tid], fmt="md")
    mean_ms = f"{round(ls['tklqt_ns'] / 1274) / 1e6:,.3f}"
    for heading in ("## Launch queue, energy, inflation", "## Launch overhead"):
        part = md[md.index(heading):]
        header = next(ln for ln in part.splitlines() if ln.startswith("| "))
        cols = [c.strip() for c in header.strip("|").split("|")]
        assert cols.index("mean launch+queue per kernel (ms)") < cols.index("mean queue depth q") \
            < cols.index("TKLQT: sum over kernels (ms)")
        assert "kernels in the sum" in cols
        row = [c.strip() for c in part.splitlines()[part.splitlines().index(header) + 2].strip("|").split("|")]
        assert row[cols.index("mean launch+queue per kernel (ms)")] == mean_ms
        assert row[cols.index("kernels in the sum")] == "1,274"
    assert (f"\nMean launch+queue per kernel {mean_ms} ms with q = {ls['mean_queue_depth']:,.2f}" in md)
    assert f"TKLQT, the sum over 1,274 kernels, is {ls['tklqt_ns'] / 1e6:,.3f} ms" in md


def test_cli_launch_table_leads_with_mean_and_q(dash_store, store):
    tid = dash_store.ids["llama_prefill_b128"]
    ls = _launch(store, tid)
    res = CliRunner().invoke(cli, ["analyze", "launch", tid, "--db", str(dash_store.db)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    mean_ms = f"{round(ls['tklqt_ns'] / 1274) / 1e6:,.3f}"
    assert lines[0] == "launch"
    assert lines[1].strip() == (f"mean launch+queue per kernel {mean_ms} ms, q = {ls['mean_queue_depth']:,.2f}; "
                                f"TKLQT {ls['tklqt_ns'] / 1e6:,.3f} ms is the sum over 1,274 kernels "
                                "(not wall time)")
    tk = next(ln for ln in lines if ln.strip().startswith("tklqt_ns "))
    assert "sum over 1,274 kernels" in tk and str(ls["tklqt_ns"]) in tk


# --- 2. missing numbers: "n/a" and why ---------------------------------------------------------------------

def test_na_helper():
    from kernelscope.reports.missing import na, shown

    assert na() == "n/a"
    assert na("no telemetry") == "n/a: no telemetry"
    assert na("") == "n/a"
    assert shown("the trace has no GPU activity: GPU spans and latency are null.") == \
        "the trace has no GPU activity: GPU spans and latency are n/a."
    assert shown("busy/idle power is null: the window is short") == "busy/idle power is n/a: the window is short"
    assert shown("nullable_column stays") == "nullable_column stays"


def test_power_page_says_na_and_why(client, dash_store):
    tid = dash_store.ids["llama_prefill_b1"]
    page = _page(client, f"/trace/{tid}/power")
    kpi = _find(page, "power-kpi-trace_energy_mj")
    assert kpi["props"]["data-value"] == "" and _text(kpi) == "n/a"
    assert "shorter than 10 counter steps" in _text(_find(page, "power-why-trace_energy_mj"))
    phases = _find(page, "power-phases")["props"]["rowData"]
    assert phases and all(p["energy"] == "n/a" for p in phases)  # why: once, under the grid
    assert "shorter than 10 counter steps" in _text(_find(page, "power-phases-na"))
    assert not NULL.search(_text(page)), NULL.search(_text(page))


@pytest.mark.parametrize("name", ["llama_prefill_b1", "probe_train", "cpu_only", "small_kernels_graph", "nsys"])
def test_overview_never_shows_null(client, dash_store, name):
    page = _page(client, f"/trace/{dash_store.ids[name]}")
    words = _text(page)
    assert not NULL.search(words), (name, words[max(0, NULL.search(words).start() - 120):][:240])


def test_overview_missing_kpis_say_why(client, dash_store):
    page = _page(client, f"/trace/{dash_store.ids['probe_train']}")  # no telemetry, no un-profiled timing
    assert _text(_find(page, "kpi-energy_mj")) == "n/a"
    assert "no telemetry" in _text(_find(page, "kpi-energy_mj-extra"))
    assert _text(_find(page, "kpi-inflation")) == "n/a"
    assert "un-profiled" in _text(_find(page, "kpi-inflation-extra"))
    page = _page(client, f"/trace/{dash_store.ids['cpu_only']}")
    assert _text(_find(page, "kpi-mean_queue_depth")) == "n/a"
    assert "no GPU activity" in _text(_find(page, "kpi-mean_queue_depth-extra"))
    assert _text(_find(page, "kpi-gpu_span_ns")) == "n/a"
    page = _page(client, f"/trace/{dash_store.ids['llama_prefill_b1']}")
    # per-iteration energy shown; the trace window's energy is n/a for a reason the power analysis gives
    assert "trace-window energy n/a: the window (" in _text(_find(page, "energy-text"))


def test_report_never_shows_null(dash_store, store):
    ids = [dash_store.ids[n] for n in ("llama_prefill_b1", "probe_train", "cpu_only", "small_kernels_graph")]
    md = report(store, ids, fmt="md")
    hit = NULL.search(md)
    assert hit is None, md[max(0, hit.start() - 200):hit.end() + 50]
    assert "n/a: the window (" in md and "shorter than 10 counter steps" in md
    (row,) = [ln for ln in md.splitlines() if ln.startswith("| cpu_only |")][:1]
    assert "| n/a |" in row and "—" not in row
    assert "n/a: no telemetry" in md  # the energy of a trace without telemetry


# --- 3. traces --format csv ----------------------------------------------------------------------------------

def test_traces_csv_labels_and_devices_as_json(dash_store):
    res = CliRunner().invoke(cli, ["traces", "--format", "csv", "--db", str(dash_store.db)])
    assert res.exit_code == 0, res.output
    assert "np.int" not in res.stdout and "{'" not in res.stdout
    rows = {r["id"]: r for r in csv.DictReader(io.StringIO(res.stdout))}
    b8 = rows[dash_store.ids["llama_prefill_b8"]]
    assert json.loads(b8["labels"]) == {"batch": 8, "model": "llama-3.2-1b-shape", "seq": 128,
                                        "sweep": "llama_prefill"}
    assert json.loads(b8["devices"]) == [0]
    assert json.loads(rows[dash_store.ids["two_devices"]]["devices"]) == [0, 1]
    assert json.loads(rows[dash_store.ids["cpu_only"]]["devices"]) == []
    assert json.loads(rows[dash_store.ids["cpu_only"]]["labels"]) == {}


# --- 4. profile --help ---------------------------------------------------------------------------------------

def test_profile_help_names_the_real_run_folder():
    from kernelscope.collectors.profile import _default_run_dir

    res = CliRunner().invoke(cli, ["profile", "--help"], terminal_width=200)
    assert res.exit_code == 0
    words = " ".join(res.stdout.split())
    assert "kernelscope_runs" not in words
    real = _default_run_dir("NAME")
    assert real.parent.name == "runs" and not real.is_absolute()
    assert "./runs/<name>-<UTC time>" in words


# --- 5. report --sweep order --------------------------------------------------------------------------------

def test_report_sweep_orders_by_the_label(dash_store):
    res = CliRunner().invoke(cli, ["report", "--sweep", "llama_prefill", "--format", "md", "--db",
                                   str(dash_store.db)])
    assert res.exit_code == 0, res.output
    table = res.stdout[res.stdout.index("**Headline numbers"):].split("\n\n")[1]  # the first table only
    names = [ln.split("|")[1].strip() for ln in table.splitlines()[2:]]
    assert names == ["llama_prefill_b1", "llama_prefill_b8", "llama_prefill_b128"]


def test_sweep_order_ties_by_name(dash_store, store):
    from kernelscope.reports.sweep import order_by_label

    ids = dash_store.ids
    # batch: compiled 256, llama b128 128, b8 8, train_step 8, ddp ranks 8, b1 1; probe_train has none (last)
    given = [ids[n] for n in ("compiled", "probe_train", "train_step", "llama_prefill_b128", "ddp_rank1",
                              "llama_prefill_b8", "ddp_rank0", "llama_prefill_b1")]
    want = [ids[n] for n in ("llama_prefill_b1", "ddp_rank0", "ddp_rank1", "llama_prefill_b8", "train_step",
                             "llama_prefill_b128", "compiled", "probe_train")]
    assert order_by_label(store, given, "batch") == want


# --- 6. the device of a graph-only trace ---------------------------------------------------------------------

def test_graph_only_trace_finds_its_device_peaks(dash_store, store):
    tid = dash_store.ids["small_kernels_graph"]
    r = get_analysis("bandwidth").fn(store, tid)
    assert r.scalars["gpu_ns"] == 0 and r.scalars["unattributed_gpu_ns"] > 0  # no operator: graph replays only
    peaks = r.scalars["device_peaks"]
    assert list(peaks) == ["0"] and "H200" in peaks["0"]["device"]
    assert not any("not in the device-peak table" in w for w in r.warnings)
    page = route(dash_store.db, f"/trace/{tid}/bandwidth", "")
    words = texts(find(page, "bw-peaks"))
    assert "not in the device-peak table" not in words and "H200" in words
