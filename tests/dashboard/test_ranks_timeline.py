"""The Ranks page's aligned timeline (``/ranks?run=..&view=timeline``): every rank's GPU lanes on one axis
shifted by rank_clocks.clock_offset_ns, drawn event by event or binned, zoomed to a collective from the
heat map / straggler table; plain functions and the callbacks through the Flask test client, over a store
with the 2-GPU DDP fixture (one run), a hand-built straggler pair whose rank 1 clock runs 5 ms ahead, and
one trace outside any run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from conftest import ddp2_copy

from kernelscope.analysis.comm import comm
from kernelscope.dashboard.app import url_params
from kernelscope.dashboard.pages import ranks as page
from kernelscope.reports import timeline_data as td
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.queries import remove_traces
from kernelscope.storage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from storage.ranks_build import straggler_pair  # noqa: E402


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks_tl")
    path = ddp2_copy(tmp / "s.duckdb")  # sample_traces/ddp2 ingested (ingest_paths) once per session
    with open_store(path) as store:
        ingest_paths(store, [straggler_pair(tmp / "shifted", shift_us=5000)])
        ingest_paths(store, [ROOT / "tests" / "data" / "probe_train.json.gz"])
    return path


def _run(store, name):
    return store.con.execute("SELECT run_id FROM runs WHERE name = ?", [name]).fetchone()[0]


def _data(fig):
    """The figure's traces as dicts of arrays (the JSON form packs arrays as base64)."""
    return [{"name": t.name, "type": t.type, "x": t.x, "z": t.z if t.type == "heatmap" else None}
            for t in fig.data]


def _segments(trace):
    x = np.asarray(trace["x"], dtype=float)
    return list(zip(x[0::3], x[1::3]))


def test_whole_run_drawn_event_by_event(db):
    with open_store(db, read_only=True) as store:
        run = _run(store, "ddp2")
        view = page.render_run(store, {"run": run})
        per_lane = store.query("SELECT t.rank, a.stream, count(*) AS n FROM gpu_activities a JOIN traces t "
                               "USING (trace_id) WHERE t.run_id = $r GROUP BY ALL", {"r": run})
    assert view["mode"] == "events" and view["events"] == int(per_lane["n"].sum()) == 1856
    drawn = {}
    for t in _data(view["figure"]):
        rank, stream = t["name"].split(" · ")[0], t["name"].split(" stream ")[1].split()[0]
        drawn[(rank, int(stream))] = drawn.get((rank, int(stream)), 0) + len(_segments(t))
    assert drawn == {(f"rank {r.rank}", int(r.stream)): int(r.n) for r in per_lane.itertuples()}
    names = [t["name"] for t in _data(view["figure"])]
    assert "rank 0 · GPU 0 stream 17 allreduce collective" in names  # collectives coloured by type
    assert "rank 1 · GPU 1 stream 17 allreduce collective" in names


def test_binned_busy_totals_match_the_stored_intervals(db):
    with open_store(db, read_only=True) as store:
        run = _run(store, "ddp2")
        view = page.render_run(store, {"run": run}, limit=100)
        info = td.run_info(store, run)
        bins, start, width = td.run_binned(store, run, info["origin"], info["end_ns"])
        # second way: durations straight from the table (no same-stream overlap on this fixture, so the
        # capped per-bin sums add up to the plain sum of durations)
        want = store.query("SELECT t.rank, a.stream, CAST(sum(a.end_ns - a.start_ns) AS BIGINT) AS ns "
                           "FROM gpu_activities a JOIN traces t USING (trace_id) WHERE t.run_id = $r "
                           "GROUP BY ALL", {"r": run})
        cm = comm(store, run=run).tables["ranks"]
    assert view["mode"] == "binned" and view["events"] == 1856
    assert start == info["origin"] and width == -(-(info["end_ns"] - info["origin"]) // 2000)
    got = bins[bins["src"] == "gpu"].groupby(["k1", "k3"])["busy_ns"].sum()
    assert {k: int(v) for k, v in got.items()} == {(int(r.rank), int(r.stream)): int(r.ns)
                                                    for r in want.itertuples()}
    # the collectives lane of each rank holds exactly the comm analysis' |C| (collectives never overlap)
    coll = bins[bins["src"] == "coll"].groupby("k1")["busy_ns"].sum()
    assert {int(k): int(v) for k, v in coll.items()} == {int(r.rank): int(r.comm_ns) for r in cm.itertuples()}
    heat = _data(view["figure"])[0]
    assert heat["type"] == "heatmap" and np.asarray(heat["z"]).shape[0] == 6  # 2 ranks x (2 streams + coll)


def test_collective_window_shows_it_on_every_rank_with_its_skew(db):
    with open_store(db, read_only=True) as store:
        run = _run(store, "ddp2")
        r = comm(store, run=run)
        inst = r.tables["collectives"].sort_values("start_skew_ns", ascending=False).iloc[0]
        name = f"{inst.process_group}:{inst.pg_seq}"
        href = page.collective_href(store, run, name)
        params = url_params(urlparse(href).query)
        view = page.render_run(store, params)
        ev = td.run_events(store, run, view["a"], view["b"])
    assert params["view"] == "timeline" and params["coll"] == name
    arr = r.tables["arrivals"]
    arr = arr[(arr["process_group"] == inst.process_group) & (arr["pg_seq"] == inst.pg_seq)]
    assert view["a"] <= arr["start_ns"].min() and arr["end_ns"].max() <= view["b"]
    mine = ev[(ev["pg"] == inst.process_group) & (ev["pg_seq"] == inst.pg_seq)]
    assert sorted(mine["rank"]) == [0, 1]  # the collective's kernel on every rank
    assert int(mine["start_ns"].max() - mine["start_ns"].min()) == int(inst.start_skew_ns) > 0
    assert int(mine.loc[mine["start_ns"].idxmax(), "rank"]) == int(inst.straggler_rank)
    focus = [t for t in _data(view["figure"]) if t["name"] == f"collective {name}"]
    assert len(focus) == 1 and len(_segments(focus[0])) == 4  # outlined (top + bottom) on both ranks
    pad = max(page.PAD_MIN_NS, round((arr["end_ns"].max() - arr["start_ns"].min()) * page.PAD_FRACTION))
    with open_store(db, read_only=True) as store:
        origin = td.run_info(store, run)["origin"]
    assert view["a"] == max(origin, arr["start_ns"].min() - pad)  # the URL's t0 is rounded to the ns


def test_clock_offset_is_applied(db):
    # rank 1's clock runs 5 ms ahead: stored, its late allreduce starts 7 ms after rank 0's; aligned, 2 ms
    with open_store(db, read_only=True) as store:
        run = _run(store, "shifted")
        info = td.run_info(store, run)
        href = page.collective_href(store, run, "0:1")
        view = page.render_run(store, url_params(urlparse(href).query))
        raw = store.query("SELECT t.rank, a.start_ns FROM collectives c JOIN gpu_activities a USING (trace_id, "
                          "activity_id) JOIN traces t USING (trace_id) WHERE t.run_id = $r AND c.pg_seq = 1 "
                          "ORDER BY t.rank", {"r": run})
    assert list(info["ranks"]["clock_offset_ns"]) == [0, 5_000_000]
    assert int(raw["start_ns"].iloc[1] - raw["start_ns"].iloc[0]) == 7_000_000
    ar = {t["name"].split(" · ")[0]: _segments(t) for t in _data(view["figure"]) if t["name"].endswith("collective")}
    starts = {k: [s for s, _ in v] for k, v in ar.items()}
    # x is ms since the run's origin on the aligned clock: the late one 2 ms after rank 0's
    late = [s for s in starts["rank 1"] if s > 0.2]
    assert late[0] - [s for s in starts["rank 0"] if s > 0.1][0] == pytest.approx(2.0, abs=1e-9)
    assert late[0] == pytest.approx((int(raw["start_ns"].iloc[1]) - 5_000_000 - info["origin"]) / 1e6, abs=1e-9)


def test_empty_cases_in_words(db, tmp_path):
    with open_store(db, read_only=True) as store:
        probe = store.query("SELECT trace_id FROM traces WHERE run_id IS NULL")["trace_id"].iloc[0]
        outside = page.render_run(store, {"run": probe, "view": "timeline"})
        unknown = page.render_run(store, {"run": "nope"})
        several = page.render_run(store, {})
        run = _run(store, "ddp2")
        rank1 = store.query("SELECT trace_id FROM traces WHERE run_id = $r AND rank = 1", {"r": run})["trace_id"][0]
        by_trace = page.render_run(store, {"run": rank1})
        empty = page.render_run(store, {"run": run, "t0": "0", "t1": "0.001"})  # CPU only: GPU starts later
        nocoll = page.render_run(store, {"run": run, "coll": "0:999"})
        tree = json.dumps(page.timeline_layout(store, {"run": probe, "view": "timeline"}).to_plotly_json(),
                          default=lambda o: o.to_plotly_json())
    assert [i for i, _ in outside["notes"]] == ["msg-trace-outside-run"] and outside["figure"] is None
    assert f"/trace/{probe}/timeline" in tree
    assert [i for i, _ in unknown["notes"]] == ["msg-unknown-run"]
    assert [i for i, _ in several["notes"]] == ["msg-pick-run"]
    assert by_trace["run_id"] == run and by_trace["mode"] == "events"  # a rank's trace id opens its run
    assert [i for i, _ in empty["notes"]] == ["msg-empty-window"] and empty["mode"] == "empty"
    assert empty["events"] == 0 and empty["figure"] is not None
    assert "msg-no-collective" in [i for i, _ in nocoll["notes"]] and nocoll["mode"] == "events"
    # a run of one rank: rank 1's trace removed (`kernelscope rm`) leaves rank 0 alone in its run
    one = ddp2_copy(tmp_path / "one.duckdb")  # sample_traces/ddp2 ingested (ingest_paths) once per session
    with open_store(one) as store:
        remove_traces(store, store.query("SELECT trace_id FROM traces WHERE rank = 1")["trace_id"].tolist())
        lone = page.render_run(store, {"run": "run-"})
    assert [i for i, _ in lone["notes"]] == ["msg-one-rank"] and lone["figure"] is None


def _post(client, output, outputs, inputs, state, changed):
    body = {"output": output, "outputs": outputs, "inputs": inputs, "state": state, "changedPropIds": changed}
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    return r


def test_callbacks_through_the_test_client(db):
    from kernelscope.dashboard.app import create_app

    client = create_app(db).server.test_client()
    with open_store(db, read_only=True) as store:
        run = _run(store, "ddp2")
        want = page.collective_href(store, run, "0:5")
    # heat map cell -> the aligned timeline on that collective
    r = _post(client, "ranks-nav.href", {"id": "ranks-nav", "property": "href"},
              [{"id": "ranks-skew", "property": "clickData", "value": {"points": [{"x": "0:5", "y": "rank 1"}]}},
               {"id": "ranks-straggler-table", "property": "cellClicked", "value": None}],
              [{"id": "ranks-run", "property": "data", "value": run}], ["ranks-skew.clickData"])
    assert r.status_code == 200 and r.get_json()["response"]["ranks-nav"]["href"] == want
    # straggler table row (its row id is the instance) -> the same
    cell = {"rowIndex": 1, "colId": "collective", "value": "allreduce", "rowId": "0:5"}
    r = _post(client, "ranks-nav.href", {"id": "ranks-nav", "property": "href"},
              [{"id": "ranks-skew", "property": "clickData", "value": None},
               {"id": "ranks-straggler-table", "property": "cellClicked", "value": cell}],
              [{"id": "ranks-run", "property": "data", "value": run}], ["ranks-straggler-table.cellClicked"])
    assert r.get_json()["response"]["ranks-nav"]["href"] == want
    # zoom -> t0/t1 in the URL and the window's events
    deps = client.get("/_dash-dependencies").get_json()
    dep = next(d for d in deps if d["output"].startswith(f"..{page.GRAPH_ID}.figure"))
    search = f"?run={run}&view=timeline"
    r = _post(client, dep["output"], [{"id": o.split(".")[0], "property": o.split(".")[1]}
                                      for o in dep["output"].strip(".").split("...")],
              [{"id": "ranks-tl-zoom", "property": "data", "value": {"range": [10, 11], "at": 1}}],
              [{"id": "url", "property": "search", "value": search}], ["ranks-tl-zoom.data"])
    resp = r.get_json()["response"]
    q = {k: v[-1] for k, v in parse_qs(resp["url"]["search"].lstrip("?")).items()}
    assert q["t0"] == "10.000000" and q["t1"] == "11.000000" and q["view"] == "timeline"
    with open_store(db, read_only=True) as store:
        info = td.run_info(store, run)
        n = td.run_count(store, run, info["origin"] + 10_000_000, info["origin"] + 11_000_000)
    assert resp["ranks-tl-status"]["data-events"] == str(n) and n > 0


def test_clicked_instance():
    assert page.clicked_instance("ranks-skew.clickData", {"points": [{"x": "0:3"}]}, None, None) == "0:3"
    assert page.clicked_instance("ranks-straggler-table.cellClicked", None, {"rowIndex": 0, "rowId": "g:7"},
                                 None) == "g:7"
    assert page.clicked_instance(page.GRAPH_ID + ".clickData", None, None,
                                 {"points": [{"customdata": "0:1"}]}) == "0:1"
    assert page.clicked_instance(page.GRAPH_ID + ".clickData", None, None, {"points": [{"x": 1}]}) is None


def test_rank_trace_timeline_links_to_the_aligned_view(db):
    from kernelscope.dashboard.pages import timeline

    with open_store(db, read_only=True) as store:
        run = _run(store, "ddp2")
        rank1 = store.query("SELECT trace_id FROM traces WHERE run_id = $r AND rank = 1", {"r": run})["trace_id"][0]
        probe = store.query("SELECT trace_id FROM traces WHERE run_id IS NULL")["trace_id"].iloc[0]
        linked = json.dumps(timeline.layout(store, rank1, {}).to_plotly_json(), default=lambda o: o.to_plotly_json())
        alone = json.dumps(timeline.layout(store, probe, {}).to_plotly_json(), default=lambda o: o.to_plotly_json())
    assert f"/ranks?run={run}&view=timeline" in linked and "rank 1: every rank of its run aligned" in linked
    assert "timeline-run-link" not in alone


def test_aligned_timeline_by_run_name_and_unknown_run(tmp_path):
    """/ranks?run=<folder name>&view=timeline opens the run (as the Ranks page does); an unknown run says so
    and leaves no zoom store whose callback would target a graph that is not there."""
    from kernelscope.dashboard.pages import ranks as ranks_page
    from kernelscope.storage.store import open_store

    from .tree import find

    with open_store(ddp2_copy(tmp_path / "s.duckdb")) as store:  # ingest_paths of sample_traces/ddp2
        page = ranks_page.timeline_layout(store, {"run": "ddp2", "view": "timeline"})
        assert find(page, ranks_page.GRAPH_ID) is not None
        page = ranks_page.timeline_layout(store, {"run": "nope", "view": "timeline"})
        assert find(page, ranks_page.GRAPH_ID) is None and find(page, "ranks-tl-zoom") is None


def test_collective_segments_carry_their_instance_as_a_plain_list(db):
    """issue 11: Dash's clickData reads customdata from the figure's JSON as sent; a numpy array goes as a
    base64 typed array there, and a missing one sends nothing: each collective trace carries a JSON list of
    'pg:seq' (null at the gaps), and its hover text."""
    with open_store(db, read_only=True) as store:
        run = _run(store, "ddp2")
        fig = page.render_run(store, {"run": run})["figure"]
        insts = comm(store, run=run).tables["collectives"]
    coll = [t for t in json.loads(fig.to_json())["data"] if t["name"].endswith(" collective")]
    assert coll
    want = {f"{pg}:{seq}" for pg, seq in zip(insts["process_group"], insts["pg_seq"])}
    for t in coll:
        cd = t["customdata"]
        assert isinstance(cd, list) and len(cd) == len(t["text"]) and cd[2::3] == [None] * (len(cd) // 3)
        assert cd[0::3] == cd[1::3] and set(cd[0::3]) <= want
        assert all(s.startswith("rank ") for s in t["text"][0::3])
