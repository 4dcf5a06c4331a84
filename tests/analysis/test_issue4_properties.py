"""Issue 4's property tests on every sample trace, and the checks that the speed work (issue 4's last
"Done when" line) changed no number:

- busy <= gpu span; idle + busy = gpu span; category times sum to kernel time; per-operator TKLQT sums
  to the total; api, queue and dispatch (so lq) equal tests/reference_launch.py's pandas split, computed
  and stored (summary, bound, kernels, launch);
- the launch split stored at ingest (tables activity_splits and op_launch, schema 003, storage/splits.py)
  equals the split computed from the raw tables independently (tests/reference_launch.py's pandas split, with
  the links joined here in pandas), and the per-operator sums recomputed here in pandas from that split;
- the 003 migration holds the schema only, and its backfill (the registry's launch_splits step, run for
  every stored trace) gives the rows ingest gave (the path an older store takes when migrated);
- the light headline functions diff uses (summary.headline, launch.tklqt) equal the full analyses;
- kernels' grouped computation equals a per-kernel pandas computation of the same definitions;
- recommend reuses the results it is given instead of running the analyses again.
"""

from __future__ import annotations

import functools
import re
import shutil
from importlib import resources

import pandas as pd
import pytest
import reference_launch

from kernelscope.analysis import bound as B
from kernelscope.analysis import kernels as K
from kernelscope.analysis import launch as L
from kernelscope.analysis import recommend as R
from kernelscope.analysis import summary as S
from kernelscope.storage import derivations
from kernelscope.storage.store import open_store


def _ids(session_store) -> list[str]:
    return sorted(set(session_store.ids.values()))


_FULL: dict = {}  # (analysis function, trace id) -> Result: the full analyses, computed once for the module


def _full(fn, store, t):
    """``fn(store, t)`` of the session store (read-only), once per trace for this module's tests."""
    if (fn, t) not in _FULL:
        _FULL[(fn, t)] = fn(store, t)
    return _FULL[(fn, t)]


def test_issue4_properties_on_every_sample(session_store):
    ids = _ids(session_store)
    assert len(ids) >= 10
    with open_store(session_store.db, read_only=True) as store:
        for t in ids:
            s = _full(S.summary, store, t).scalars
            if s["gpu_span_ns"] is not None:
                assert 0 < s["busy_ns"] <= s["gpu_span_ns"], t
                assert s["idle_ns"] + s["busy_ns"] == s["gpu_span_ns"], t
                d = B.bound(store, t).tables["devices"]
                assert (d.busy_ns <= d.gpu_span_ns).all() and ((d.idle_ns + d.busy_ns) == d.gpu_span_ns).all(), t
            k = _full(K.kernels, store, t).scalars
            assert sum(k["category_time_ns"].values()) == k["kernel_time_ns"], t
            r = _full(L.launch, store, t)
            for table in ("per_op", "per_leaf_op", "per_phase"):
                assert int(r.table(table)["tklqt_ns"].sum()) == r.scalars["tklqt_ns"], (t, table)
            # api + queue + dispatch = lq holds by construction (dispatch is the remainder): check each part
            # against the independent pandas split of tests/reference_launch.py instead
            ref = reference_launch.splits(store, t)
            reference_launch.assert_matches(L.activity_splits(store, t), ref, t)
            stored = store.query("SELECT * FROM activity_splits WHERE trace_id = $t", {"t": t})
            reference_launch.assert_matches(stored, ref, (t, "stored"))


_COLS = ["activity_id", "kind", "device", "stream", "start_ns", "end_ns", "is_graph", "launch_id",
         "launch_start_ns", "launch_end_ns", "top_op_id", "leaf_op_id", "phase_id", "lq_ns", "api_ns",
         "queue_ns", "dispatch_ns", "launch_delay_ns", "term"]


def _sorted(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return df.sort_values(by, na_position="first").reset_index(drop=True)


def _independent_split(store, t: str) -> pd.DataFrame:
    """tests/reference_launch.py's split of every activity with a launch call, with the activity's raw columns,
    its launch call's start and end, and its links: top/leaf operator the activity's, else the launch call's;
    phase the launch call's."""
    acts = store.query("SELECT activity_id, kind, device, stream, start_ns, end_ns, is_graph, launch_id, top_op_id, "
                       "leaf_op_id FROM gpu_activities WHERE trace_id = $t AND launch_id IS NOT NULL", {"t": t})
    calls = store.query("SELECT launch_id, start_ns AS launch_start_ns, end_ns AS launch_end_ns, top_op_id AS l_top, "
                        "leaf_op_id AS l_leaf, phase_id FROM launches WHERE trace_id = $t", {"t": t})
    x = acts.merge(calls, on="launch_id", how="inner")
    x["top_op_id"] = x["top_op_id"].fillna(x["l_top"])
    x["leaf_op_id"] = x["leaf_op_id"].fillna(x["l_leaf"])
    return x.join(reference_launch.splits(store, t), on="activity_id", how="inner")


def test_stored_split_equals_the_independent_split(session_store):
    with open_store(session_store.db, read_only=True) as store:
        for t in _ids(session_store):
            ref = _sorted(_independent_split(store, t)[_COLS], ["activity_id"])
            got = _sorted(store.query("SELECT * FROM activity_splits WHERE trace_id = $t", {"t": t})[_COLS],
                          ["activity_id"])
            pd.testing.assert_frame_equal(got, ref, check_dtype=False, obj=t)
            # op_launch against pandas sums over the independent split (hand formulas of launch.py)
            for link, col in (("top", "top_op_id"), ("leaf", "leaf_op_id")):
                terms = ref[ref.term]
                want = {(None if pd.isna(k) else int(k)): int(v)
                        for k, v in terms.groupby(col, dropna=False)["lq_ns"].sum().items()}
                ol = store.query("SELECT op_id, tklqt_ns, kernels, gpu_union_ns FROM op_launch "
                                 "WHERE trace_id = $t AND link = $l", {"t": t, "l": link})
                have = {(None if pd.isna(k) else int(k)): int(v) for k, v in zip(ol.op_id, ol.tklqt_ns)}
                assert have == want, (t, link)
                # union of one instance's intervals, by a plain sweep
                for op_id in ol.dropna(subset=["op_id"]).head(25).op_id:
                    iv = sorted(zip(ref.loc[ref[col] == op_id, "start_ns"], ref.loc[ref[col] == op_id, "end_ns"]))
                    total, cur_s, cur_e = 0, None, None
                    for a, b in iv:
                        if cur_e is None or a > cur_e:
                            total += (cur_e - cur_s) if cur_e is not None else 0
                            cur_s, cur_e = a, b
                        else:
                            cur_e = max(cur_e, b)
                    total += (cur_e - cur_s) if cur_e is not None else 0
                    assert int(ol.loc[ol.op_id == op_id, "gpu_union_ns"].iloc[0]) == total, (t, link, op_id)


def test_stored_kernels_per_operator_instance_equal_pandas(session_store):
    with open_store(session_store.db, read_only=True) as store:
        for t in _ids(session_store):
            k = store.query("SELECT top_op_id, leaf_op_id, dur_ns FROM gpu_activities "
                            "WHERE trace_id = $t AND kind = 'kernel'", {"t": t})
            names = dict(store.query("SELECT op_id, name FROM cpu_ops WHERE trace_id = $t", {"t": t}).itertuples(
                index=False, name=None))
            for link, col in (("top", "top_op_id"), ("leaf", "leaf_op_id")):
                g = k.dropna(subset=[col]).groupby(col)["dur_ns"].agg(["count", "sum"])
                want = {int(i): (names.get(int(i)), int(n), int(total))
                        for i, n, total in zip(g.index, g["count"], g["sum"])}
                got = store.query("SELECT op_id, name, kernels, kernel_time_ns FROM op_kernels "
                                  "WHERE trace_id = $t AND link = $l", {"t": t, "l": link})
                assert {int(r.op_id): (r.name, int(r.kernels), int(r.kernel_time_ns))
                        for r in got.itertuples()} == want, (t, link)


def test_migration_003_is_schema_only_and_its_backfill_repopulates_the_same_rows(session_store, tmp_path):
    text = resources.files("kernelscope.storage").joinpath("schema", "003_launch_splits.sql").read_text("utf-8")
    assert not re.search(r"^\s*(INSERT|UPDATE)\b", text, re.M | re.I)  # rows come from the registry's step
    assert [s.name for s in derivations.backfill_steps(3)] == ["launch_splits"]
    db = tmp_path / "copy.duckdb"
    shutil.copy(session_store.db, db)
    with open_store(db) as store:
        before = {tb: store.query(f"SELECT * FROM {tb}") for tb in ("activity_splits", "op_launch", "op_kernels")}
        assert len(before["activity_splits"]) > 1000
        store.con.execute("DELETE FROM activity_splits")
        store.con.execute("DELETE FROM op_launch")
        store.con.execute("DELETE FROM op_kernels")
        derivations.backfill(store.con, 3)  # what the migration runs on an older store
        for tb, keys in (("activity_splits", ["trace_id", "activity_id"]),
                         ("op_launch", ["trace_id", "link", "op_id"]), ("op_kernels", ["trace_id", "link", "op_id"])):
            after = store.query(f"SELECT * FROM {tb}")
            pd.testing.assert_frame_equal(_sorted(after, keys), _sorted(before[tb], keys), obj=tb)


def test_light_headline_functions_equal_the_full_analyses(session_store):
    with open_store(session_store.db, read_only=True) as store:
        for t in _ids(session_store):
            full = _full(S.summary, store, t).scalars
            for k, v in S.headline(store, t).items():
                assert full[k] == v, (t, k)
            lf = _full(L.launch, store, t).scalars
            for k, v in L.tklqt(store, t).items():
                assert lf[k] == v, (t, k)


def test_kernels_grouped_equals_per_kernel_pandas(session_store):
    rules = K.category_rules()
    ordered = [r for r in rules if r[0] == "op"] + [r for r in rules if r[0] == "kernel"]

    @functools.cache  # a pure function of (name, op): each distinct pair matched once
    def category(name, op):
        for match, pat, cat, _ in ordered:
            if match == "op" and op is not None and re.search(pat, op):
                return cat
            if match == "kernel" and re.search(pat, name or "", re.I):
                return cat
        return "other"

    with open_store(session_store.db, read_only=True) as store:
        for t in _ids(session_store):
            df = store.query(
                "SELECT a.name, o.name AS op, a.dur_ns FROM gpu_activities a LEFT JOIN cpu_ops o "
                "ON o.trace_id = a.trace_id AND o.op_id = a.leaf_op_id WHERE a.trace_id = $t AND a.kind = 'kernel'",
                {"t": t})
            want: dict[str, int] = {}
            for name, op, dur in df.itertuples(index=False):
                c = category(name, None if pd.isna(op) else op)
                want[c] = want.get(c, 0) + int(dur)
            scalars = _full(K.kernels, store, t).scalars
            got = {c: v for c, v in scalars["category_time_ns"].items() if v}
            assert got == want, t
            short = int(df.loc[df.dur_ns < 10_000, "dur_ns"].sum())
            assert scalars["short_kernel_ns"] == short, t


def test_recommend_reuses_given_results(session_store, monkeypatch):
    t = next(t for p, t in sorted(session_store.ids.items()) if "llama_prefill_b1" in str(p))
    with open_store(session_store.db, read_only=True) as store:
        first = R.recommend(store, t)
        given = {n: fn(store, t) for n, fn in R._sources().items() if n in first.trust["analyses_run"]}  # what it read

        def boom(*a, **k):
            raise AssertionError("recommend ran an analysis it was given")

        monkeypatch.setattr(R, "_sources", lambda: {n: boom for n in given})
        again = R.recommend(store, t, results=given)
        assert again.to_dict()["findings"] == first.to_dict()["findings"]
        assert again.trust["analyses_run"] == first.trust["analyses_run"]
        with pytest.raises(AssertionError):  # a missing one is run (here: the stub, which fails loudly)
            R.recommend(store, t, results={k: v for k, v in given.items() if k != "launch"})
