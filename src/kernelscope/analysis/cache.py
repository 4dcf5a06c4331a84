"""One per-process cache of analysis Results and other derived data: for the analyses that read other analyses
(recommend reads bound, launch, kernels, bandwidth and whatif; power reads bandwidth's FLOPs), the dashboard
pages and the report, so each is computed once per trace and process whoever asks first.

An entry's key names what was computed and from what: ``(store identity, trace stamps, name, options)``.

- *store identity*: the store file's resolved path, device and inode (a store file replaced by another at
  the same path is another store);
- *trace stamps*: ``(trace_id, ingested_ns)`` of every trace the computation reads — the named traces, or
  every trace of the store when none is named (cross-trace analyses: diff/transition by label or sweep).
  A re-ingested trace gets a new ``ingested_ns`` and a removed one the stamp ``None``, so neither can hit an
  entry computed from the old rows;
- *name* and *options*: the analysis (or function) and its keyword options, sorted.

Bounded by count: at most ``MAX_ENTRIES`` entries, the least recently used dropped first. Values are
shared between callers and must be treated as read-only (copy a table before changing it).
Concurrent requests for the same missing key build it once (the others wait for it). ``prefetch`` computes
the analyses a page is about to ask for at once, one per core, so the page waits about as long as the
longest of them.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections import OrderedDict

import pandas as pd

from ..storage import catalog
from . import registry  # looked up at call time: the registry imports the analyses that import this module

#: Most entries kept (Results, and the Timeline's base bins of a few MB each).
MAX_ENTRIES = 48

_CACHE: OrderedDict = OrderedDict()
_LOCK = threading.Lock()
_BUILDING: dict = {}  # key -> Lock held while one thread builds it
_STATS = {"hits": 0, "misses": 0}


_MISSING = object()


def _hit(key):
    """The cached value for ``key`` (counted as a hit and made the most recently used), or ``_MISSING``.
    Call with ``_LOCK`` held."""
    if key not in _CACHE:
        return _MISSING
    _CACHE.move_to_end(key)
    _STATS["hits"] += 1
    return _CACHE[key]


def cached(key, build):
    """The value for ``key``, ``build()`` once per key and process while it stays among the
    ``MAX_ENTRIES`` most recently used."""
    with _LOCK:
        if (value := _hit(key)) is not _MISSING:
            return value
        building = _BUILDING.setdefault(key, threading.Lock())
    with building:
        with _LOCK:  # built by another thread while this one waited
            if (value := _hit(key)) is not _MISSING:
                return value
            _STATS["misses"] += 1
        try:
            value = build()
        finally:
            with _LOCK:
                _BUILDING.pop(key, None)
        with _LOCK:
            _CACHE[key] = value
            _CACHE.move_to_end(key)
            while len(_CACHE) > MAX_ENTRIES:
                _CACHE.popitem(last=False)
    return value


def clear() -> None:
    """Drop every entry and reset the hit/miss counts."""
    with _LOCK:
        _CACHE.clear()
        _STATS.update(hits=0, misses=0)


def stats() -> dict:
    """``hits``, ``misses`` since the last :func:`clear`, and ``entries`` held now."""
    with _LOCK:
        return {**_STATS, "entries": len(_CACHE)}


def store_identity(store) -> tuple:
    """(resolved path, device, inode) of the store's file; the path alone when it cannot be stat'ed."""
    path = getattr(store, "path", None)
    if path is None:
        return ("<memory>", id(store))
    p = os.path.realpath(str(path))
    try:
        st = os.stat(p)
    except OSError:
        return (p,)
    return (p, st.st_dev, st.st_ino)


def trace_stamps(store, trace_ids) -> tuple:
    """``((trace_id, ingested_ns or None), ...)`` of the given trace ids (one id, a list, or None for every
    trace of the store), in id order."""
    if trace_ids is None:
        return tuple(catalog.ingest_stamps(store).items())
    ids = [trace_ids] if isinstance(trace_ids, str) else list(trace_ids)
    known = catalog.ingest_stamps(store, ids)
    return tuple((t, known.get(t)) for t in sorted(set(ids)))


def _opts_key(opts: dict) -> tuple:
    out = []
    for k, v in sorted(opts.items()):
        if isinstance(v, pd.DataFrame):  # e.g. bandwidth's measured_bytes: by content
            v = ("df", tuple(v.columns), int(pd.util.hash_pandas_object(v, index=False).sum()))
        elif isinstance(v, list):
            v = tuple(v)
        out.append((k, v))
    return tuple(out)


def key(store, trace_ids, name: str, **opts) -> tuple:
    """The cache key of ``name`` computed on ``trace_ids`` (one id, a list, or None) with ``opts``."""
    return _key(store_identity(store), trace_stamps(store, trace_ids), name, trace_ids, opts)


def _key(identity: tuple, stamps: tuple, name: str, trace_ids, opts: dict) -> tuple:
    tid = trace_ids if trace_ids is None or isinstance(trace_ids, str) else tuple(trace_ids)
    return (identity, stamps, name, tid, _opts_key(opts))


def _with_defaults(fn, opts: dict) -> dict:
    """``opts`` plus the defaults of ``fn``'s other options, so ``bound(s, t)`` and ``bound(s, t, bins=200)``
    share one entry."""
    try:
        params = list(inspect.signature(fn).parameters.values())[2:]
    except (TypeError, ValueError):
        return opts
    full = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty
            and not p.name.startswith("_") and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    full.update(opts)
    return full


def call(store, trace_ids, name: str, fn, **opts):
    """``fn(store, trace_ids, **opts)`` through the cache under ``name`` (a function that is not a registered
    analysis, e.g. ``bound.idle_split``). Errors are not cached."""
    k = key(store, trace_ids, name, **_with_defaults(fn, opts))
    return cached(k, lambda: fn(store, trace_ids, **opts))


def analysis(store, name: str, trace_ids, **opts):
    """The registered analysis ``name`` on ``trace_ids`` with ``opts``, run once per process while cached."""
    fn = registry.get_analysis(name).fn
    return call(store, trace_ids, "analysis:" + name, fn, **opts)


def analysis_part(store, name: str, trace_id: str, tables):
    """The registered analysis ``name`` on ``trace_id`` with only ``tables`` (its ``_tables`` option: every
    scalar, and those tables), or its whole Result when that is cached already: for a page that shows a few
    numbers of a large analysis (the Overview's launch and bound) without paying for the rest."""
    fn = registry.get_analysis(name).fn
    whole = key(store, trace_id, "analysis:" + name, **_with_defaults(fn, {}))
    with _LOCK:
        value = _hit(whole)
    return value if value is not _MISSING else analysis(store, name, trace_id, _tables=tuple(tables))


def prefetch(store, trace_id: str, items) -> None:
    """Compute ``items`` of ``trace_id`` into the cache at once, each in a thread on its own cursor (DuckDB runs
    queries outside the GIL, so the SQL of one overlaps the Python of another), started in the order given
    (longest first, and what a later item reads before it): a registered analysis's name, or a function
    ``fn(store, trace_id)`` that caches what it computes (e.g. through ``call``; one that needs an analysis
    still being computed waits for it). A page then reads them from the cache; one that failed here runs again
    there and says why. Nothing happens with one core, fewer than two of the named analyses to compute (the
    page's own calls are then as quick), or a store without cursors."""
    cores = os.cpu_count() or 1
    identity, stamps = store_identity(store), trace_stamps(store, trace_id)  # once: a query each
    keys = {n: _key(identity, stamps, "analysis:" + n, trace_id, _with_defaults(registry.get_analysis(n).fn, {}))
            for n in items if isinstance(n, str)}
    with _LOCK:
        cached_names = {n for n, k in keys.items() if k in _CACHE}
    if len(keys) - len(cached_names) < 2 or cores < 2 or not hasattr(store, "map_cursors"):
        return

    def run(sub, item) -> None:
        try:
            if callable(item):
                item(sub, trace_id)
            else:
                analysis(sub, item, trace_id)
        except Exception:  # the page's own call runs it again and reports it
            pass
    store.map_cursors(run, [i for i in items if i not in cached_names])
