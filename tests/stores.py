"""Template stores: each store the tests need is built (migrated, ingested) once per test session and handed
out as file copies.

Copying a closed DuckDB file takes milliseconds; creating a store runs every migration (~0.15 s) and ingesting
the sample traces takes tens of seconds. So:

- ``empty(path)`` puts a migrated, empty store at ``path`` (a copy of one migrated once) and returns ``path``;
  use it wherever a test or fixture would let ``open_store`` create a new store;
- ``template(key, build)`` builds the store ``key`` once per session with ``build(db_path) -> meta`` (ids and
  such; picklable) and returns ``(path, meta)``: ``path`` is this process's own copy, to open read-only or
  read-write as a session-wide store;
- ``copy(key, build, dst)`` puts another copy at ``dst`` (for a test or module that writes) and returns ``meta``;
- ``once(key, build)`` is the same mechanism for any costly, picklable result (``build(folder) -> meta``): a
  module fixture that runs the hostile corpus, say, which pytest-xdist would otherwise set up again in every
  worker that runs one of the module's tests.

Under pytest-xdist the first worker that needs a template builds it (the others wait for it, through a file
lock) and every worker works on its own copy: DuckDB stores are never shared between processes here, so a
writer in one worker (``kernelscope dashboard`` migrating its store, a label) never waits for a reader in
another. tests/conftest.py sets ``SHARED`` (one folder per session) and ``OWN`` (this process's folder).
"""

from __future__ import annotations

import fcntl
import pickle
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The session's template folder (shared by xdist workers) and this process's folder; set by tests/conftest.py.
SHARED: Path | None = None
OWN: Path | None = None

_BUILT: dict[str, tuple[Path, Any]] = {}  # key -> (the shared template, meta), once known to this process
_MINE: dict[str, tuple[Path, Any]] = {}  # key -> (this process's copy, meta)


def _folders() -> tuple[Path, Path]:
    global SHARED, OWN
    if SHARED is None:  # used outside a pytest session
        SHARED = OWN = Path(tempfile.mkdtemp(prefix="kernelscope-templates-"))
    return SHARED, OWN


def once(key: str, build: Callable[[Path], Any]) -> Any:
    """``build(folder)``'s result (picklable), computed once per session: by the first process that asks, in the
    session's folder ``key`` (where ``build`` may leave files the result names); the other processes wait for it
    and read it."""
    return _once(key, build)[1]


def _once(key: str, build: Callable[[Path], Any]) -> tuple[Path, Any]:
    if key in _BUILT:
        return _BUILT[key]
    shared, _ = _folders()
    folder = shared / key  # made and filled only under the lock
    meta_file = folder / "meta.pickle"
    with open(shared / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held while building: another worker waits, then finds it built
        if not meta_file.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed half-way left files: start again
            folder.mkdir()
            meta = build(folder)
            meta_file.write_bytes(pickle.dumps(meta))
    _BUILT[key] = (folder, pickle.loads(meta_file.read_bytes()))
    return _BUILT[key]


def _built(key: str, build: Callable[[Path], Any]) -> tuple[Path, Any]:
    """The shared template ``key`` (built here unless another process already did): (path, meta)."""
    folder, meta = _once(key, lambda folder: build(folder / "store.duckdb"))
    return folder / "store.duckdb", meta


def template(key: str, build: Callable[[Path], Any]) -> tuple[Path, Any]:
    """This process's copy of template ``key``, built on first use by ``build(db)`` (which must leave the store
    closed): (path, meta)."""
    if key not in _MINE:
        src, meta = _built(key, build)
        _, own = _folders()
        mine = own / f"{key}.duckdb"
        shutil.copyfile(src, mine)
        _MINE[key] = (mine, meta)
    return _MINE[key]


def copy(key: str, build: Callable[[Path], Any], dst) -> Any:
    """A new copy of template ``key`` at ``dst``; returns the template's meta."""
    src, meta = _built(key, build)
    shutil.copyfile(src, dst)
    return meta


def _migrated(db: Path) -> None:
    from kernelscope.storage.store import open_store

    open_store(db).close()


def empty(path) -> Path:
    """A migrated, empty store at ``path`` (which must not exist yet); returns ``path``."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists: empty() makes a new store")
    copy("empty", _migrated, path)
    return path
