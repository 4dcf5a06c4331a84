"""The per-process cache of analysis Results (analysis/cache.py): hits, misses, keys with options and their
defaults, LRU eviction by count, invalidation when a trace is re-ingested or removed, one build for
concurrent requests, and the Overview's recommendations reusing the cached analyses."""

from __future__ import annotations

import threading
from pathlib import Path

import edge_traces
import pytest
import stores
from stores import empty

from kernelscope.analysis import cache
from kernelscope.analysis.registry import get_analysis
from kernelscope.errors import KernelscopeError
from kernelscope.reports import bound as rb
from kernelscope.storage.ingest import ingest_paths
from kernelscope.storage.queries import remove_traces
from kernelscope.storage.store import open_store


def _ingest_two_devices(db: Path) -> str:
    with open_store(empty(db)) as store:
        (res,) = ingest_paths(store, [edge_traces.multi_stream_multi_device(db.parent)], progress=False)
    assert res.status == "ingested", res.message
    return res.trace_id


@pytest.fixture
def small(tmp_path):
    """A store with one two-device trace (edge_traces; a copy of one ingested once per session): (db path,
    trace file, trace id)."""
    cache.clear()
    db, path = tmp_path / "c.duckdb", edge_traces.multi_stream_multi_device(tmp_path)
    trace_id = stores.copy("cache_two_devices", _ingest_two_devices, db)
    yield db, path, trace_id
    cache.clear()


def _counting(calls: list):
    def fn(store, trace_id, k=1):
        calls.append((trace_id, k))
        return {"trace": trace_id, "k": k, "n": len(calls)}
    return fn


def test_hit_and_miss_across_connections(small):
    db, _, tid = small
    calls = []
    fn = _counting(calls)
    with open_store(db, read_only=True) as s1:
        a = cache.call(s1, tid, "f", fn)
    with open_store(db, read_only=True) as s2:  # the dashboard opens one connection per request
        b = cache.call(s2, tid, "f", fn)
        c = cache.call(s2, tid, "f", fn, k=2)  # other options: another entry
        d = cache.call(s2, tid, "f", fn, k=1)  # k=1 is the default: the first entry
    assert a is b is d and calls == [(tid, 1), (tid, 2)] and c["k"] == 2
    assert cache.stats() == {"hits": 2, "misses": 2, "entries": 2}


def test_analysis_equals_direct_and_defaults_share_an_entry(small):
    db, _, tid = small
    with open_store(db, read_only=True) as store:
        r = cache.analysis(store, "summary", tid)
        assert r.scalars == get_analysis("summary").fn(store, tid).scalars
        assert r.scalars["kernels"] == 3  # edge trace: kernels a, b, c (and one memcpy)
        b1 = cache.analysis(store, "bound", tid)
        b2 = cache.analysis(store, "bound", tid, bins=200)  # analysis.bound.DEFAULT_BINS
        b3 = cache.analysis(store, "bound", tid, bins=50)
        assert b3.scalars == get_analysis("bound").fn(store, tid, bins=50).scalars
    assert b1 is b2 and b3 is not b1
    assert cache.stats()["misses"] == 3 and cache.stats()["hits"] == 1


def test_reingested_trace_is_not_served_stale(small):
    db, path, tid = small
    calls = []
    fn = _counting(calls)
    with open_store(db, read_only=True) as store:
        first = cache.call(store, tid, "f", fn)
        assert cache.call(store, tid, "f", fn) is first
    with open_store(db) as store:  # removed and ingested again: same content, a new ingest time
        assert remove_traces(store, [tid]) == 1
        (res,) = ingest_paths(store, [path], progress=False)
        assert res.status == "ingested"
        new_tid = res.trace_id
    with open_store(db, read_only=True) as store:
        again = cache.call(store, new_tid, "f", fn)
    assert again is not first and len(calls) == 2


def test_changed_ingest_time_invalidates(small):
    db, _, tid = small
    calls = []
    fn = _counting(calls)
    with open_store(db, read_only=True) as store:
        cache.call(store, tid, "f", fn)
    with open_store(db) as store:
        store.con.execute("UPDATE traces SET ingested_ns = ingested_ns + 1 WHERE trace_id = ?", [tid])
    with open_store(db, read_only=True) as store:
        cache.call(store, tid, "f", fn)
        cache.call(store, tid, "f", fn)
    assert len(calls) == 2


def test_removed_trace_reruns(small):
    db, _, tid = small
    with open_store(db, read_only=True) as store:
        before = cache.analysis(store, "summary", tid)
        assert before.scalars["kernels"] == 3
    with open_store(db) as store:
        remove_traces(store, [tid])
    with open_store(db, read_only=True) as store:
        assert cache.trace_stamps(store, tid) == ((tid, None),)
        after = cache.analysis(store, "summary", tid)  # run again on the store as it is now
    assert after is not before and not after.scalars.get("kernels")  # no rows left: 0 kernels, not 3


def test_cross_trace_key_covers_every_trace(small, tmp_path):
    db, _, tid = small
    with open_store(db, read_only=True) as store:
        k1 = cache.key(store, None, "diff", by="batch")
    with open_store(db) as store:  # a new trace lands: keys over the whole store change
        (res,) = ingest_paths(store, [edge_traces.cpu_only(tmp_path)], progress=False)
    with open_store(db, read_only=True) as store:
        k2 = cache.key(store, None, "diff", by="batch")
        assert k1 != k2 and len(k2[1]) == 2 and res.trace_id in dict(k2[1])


def test_lru_by_count(monkeypatch):
    cache.clear()
    monkeypatch.setattr(cache, "MAX_ENTRIES", 3)
    built = []

    def get(k):
        return cache.cached(("lru", k), lambda: built.append(k) or k)

    for k in "abc":
        get(k)
    get("a")           # a is now the most recently used
    get("d")           # evicts b, the least recently used
    assert cache.stats()["entries"] == 3
    get("a"), get("c"), get("d")
    assert built == ["a", "b", "c", "d"]
    get("b")           # rebuilt (and evicts a, now the least recently used)
    assert built == ["a", "b", "c", "d", "b"]
    cache.clear()


def test_concurrent_requests_build_once():
    cache.clear()
    started, release, built, out = threading.Event(), threading.Event(), [], []

    def build():
        built.append(1)
        started.set()
        release.wait()
        return "value"

    t1 = threading.Thread(target=lambda: out.append(cache.cached(("conc",), build)))
    t1.start()
    started.wait()
    t2 = threading.Thread(target=lambda: out.append(cache.cached(("conc",), build)))
    t2.start()
    release.set()
    t1.join()
    t2.join()
    assert out == ["value", "value"] and built == [1]
    cache.clear()


def test_build_error_is_not_cached():
    cache.clear()
    calls = []

    def build():
        calls.append(1)
        if len(calls) == 1:
            raise KernelscopeError("first try fails")
        return 7

    with pytest.raises(KernelscopeError):
        cache.cached(("err",), build)
    assert cache.cached(("err",), build) == 7 and len(calls) == 2
    cache.clear()


def test_overview_recommendations_reuse_cached_analyses(small, monkeypatch):
    """headline_extras (Overview page and report): recommend reads its analyses through the cache, which the
    headline's own launch and power share, so each analysis runs once per trace (no part beside a whole one, no
    bandwidth for power beside recommend's) however often the page is drawn."""
    db, _, tid = small
    cache.clear()
    with open_store(db, read_only=True) as store:
        x = rb.headline_extras(store, tid, True)
        misses = cache.stats()["misses"]
        y = rb.headline_extras(store, tid, True)
    assert not any("failed" in w for w in x["recommend_warnings"]), x["recommend_warnings"]
    assert cache.stats()["misses"] == misses  # the second drawing computes nothing
    assert x["findings"] == y["findings"] and x["launch"] is y["launch"]
    names = [k[2] for k in list(cache._CACHE)]
    for n in ("bound", "launch", "kernels", "bandwidth", "power"):
        assert names.count("analysis:" + n) == 1, n
    # whatif feeds only host_bound_launch's saving, which does not fire here: not computed
    assert "host_bound_launch" not in [f["rule"] for f in x["findings"]]
    assert "analysis:whatif" not in names


def test_whatif_is_computed_once_when_host_bound_launch_cites_it(sample_runs, monkeypatch):
    """train_step (77% host wait, launch-heavy operators): host_bound_launch fires, so the Overview's prefetch
    computes whatif in its threads and the finding states whatif's saving; recommend reads it from the cache
    (not computing it again), and drawing the page again computes nothing."""
    from kernelscope.dashboard.pages import overview

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    tid = sample_runs.ids["train_step"]
    cache.clear()
    with open_store(sample_runs.db, read_only=True) as store:
        cache.prefetch(store, tid, overview.PREFETCH)
        assert "analysis:whatif" in [k[2] for k in cache._CACHE]  # computed in the prefetch's threads
        x = rb.headline_extras(store, tid, True)
        misses = cache.stats()["misses"]
        rb.headline_extras(store, tid, True)
        assert cache.stats()["misses"] == misses
        w = cache.analysis(store, "whatif", tid).scalars
    [f] = [f for f in x["findings"] if f["rule"] == "host_bound_launch"]
    assert f["saving_ns"] == max(int(w["observed_ns"]) - int(w["predicted_ns"]), 0)
    assert any(e.startswith("whatif.predicted_ns") for e in f["evidence"])
    assert [k[2] for k in cache._CACHE].count("analysis:whatif") == 1
    cache.clear()


def test_analysis_part_is_the_whole_result_when_cached_else_a_part(small):
    """cache.analysis_part computes only the tables asked for (launch's per_leaf_op: no per_op, distribution,
    per_phase) with the same scalars and rows as the whole analysis; once the whole one is cached it is
    returned instead, and the part is not computed again."""
    db, _, tid = small
    cache.clear()
    with open_store(db, read_only=True) as store:
        part = cache.analysis_part(store, "launch", tid, ("per_leaf_op",))
        assert set(part.tables) == {"per_leaf_op"}
        whole = get_analysis("launch").fn(store, tid)
        assert {k: v for k, v in part.scalars.items() if k != "launch_bound_ops"} == \
            {k: v for k, v in whole.scalars.items() if k != "launch_bound_ops"}
        assert part.tables["per_leaf_op"].equals(whole.tables["per_leaf_op"])
        assert cache.analysis_part(store, "launch", tid, ("per_leaf_op",)) is part  # cached
        cached_whole = cache.analysis(store, "launch", tid)
        misses = cache.stats()["misses"]
        assert cache.analysis_part(store, "launch", tid, ("per_leaf_op",)) is cached_whole
        assert cache.stats()["misses"] == misses
    cache.clear()


def test_prefetch_computes_the_overview_analyses_at_once_on_their_own_cursors(small, monkeypatch):
    """cache.prefetch (the Overview calls it first): every named analysis ends up cached, each computed once,
    on cursors other than the page's connection, and equal to computing it directly, and so does what the
    page computes besides (the functions in overview.PREFETCH: launch and bound parts, idle split, busy bins,
    power; whatif only when cited, not here); the page then computes nothing but its recommendations. A second
    prefetch computes nothing."""
    from kernelscope.dashboard.pages import overview

    names = [i for i in overview.PREFETCH if isinstance(i, str)]

    db, _, tid = small
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # the one-core shortcut must not hide the mechanism
    seen = []
    real = cache.analysis

    def spy(store, name, trace_ids, **opts):
        seen.append((name, threading.current_thread().name))
        return real(store, name, trace_ids, **opts)
    monkeypatch.setattr(cache, "analysis", spy)
    with open_store(db, read_only=True) as store:
        cache.prefetch(store, tid, overview.PREFETCH)
        # launch and bound as parts (the tables the recommendations read); power reads the cached bandwidth
        assert {n for n, _ in seen} == set(names) | {"launch", "bound", "power"}
        assert all(t.startswith("ks-cursor") for _, t in seen)  # in the pool's threads
        assert sorted(k[2] for k in cache._CACHE) == sorted(
            ["analysis:" + n for n in (*names, "launch", "bound")]
            + ["idle_split", "busy_bins", "analysis:power"])
        parts = {k[2]: dict(k[4]).get("_tables") for k in cache._CACHE if k[2] in ("analysis:launch", "analysis:bound")}
        assert parts == {"analysis:launch": ("per_leaf_op",),
                         "analysis:bound": ("devices", "idle_causes", "idle_operators")}
        for n in names:
            assert real(store, n, tid).to_json() == get_analysis(n).fn(store, tid).to_json(), n
        before = cache.stats()
        seen.clear()
        cache.prefetch(store, tid, overview.PREFETCH)
        assert seen == [] and cache.stats()["misses"] == before["misses"]
        keys = set(cache._CACHE)
        overview.layout(store, tid, {})
        assert [k[2] for k in cache._CACHE if k not in keys] == ["analysis:recommend"]
    cached = [k[2] for k in list(cache._CACHE)]
    for n in names:
        assert cached.count("analysis:" + n) == 1, n


def test_a_report_computes_launch_and_bound_once_not_a_part_beside_the_whole(small, monkeypatch):
    """The report's headline reads launch and bound as the recommendations' parts and its sections read them
    whole: ``report.build`` prefetches the whole ones first, so each runs once (before, the parts ran first
    and the whole ones again). Every prefetched analysis is computed once, and a second build computes
    nothing."""
    from kernelscope.reports import report

    db, _, tid = small
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # the one-core shortcut must not hide the mechanism
    with open_store(db, read_only=True) as store:
        report.build(store, [tid])
        misses = cache.stats()["misses"]
        report.build(store, [tid])
        assert cache.stats()["misses"] == misses
    keys = [(k[2], dict(k[4]).get("_tables")) for k in cache._CACHE]
    for n in report.PREFETCH:
        assert keys.count(("analysis:" + n, None)) == 1, n
    assert [k for k in keys if k[1] is not None] == []  # no part of launch or bound


def test_a_report_of_several_traces_does_not_prefetch(sample_runs, monkeypatch):
    """Prefetching every trace of a many-trace report first let the first traces' entries leave the cache before
    their sections read them (8 llama_prefill traces: 183 computations instead of 143): only a one-trace report
    prefetches."""
    from kernelscope.reports import report

    calls = []
    monkeypatch.setattr(cache, "prefetch", lambda store, tid, items: calls.append(tid))
    ids = [sample_runs.ids["train_step"], sample_runs.ids["llama_prefill_b8"]]
    cache.clear()
    with open_store(sample_runs.db, read_only=True) as store:
        report.build(store, ids)
        assert calls == []
        report.build(store, ids[:1])
        assert calls == ids[:1]
    cache.clear()
