"""The parse workers' process pool (``ParallelKinetoReader``, parsers/kineto/parallel.py), in a module that imports
only the standard library, so that ``kernelscope ingest`` can start it before its own imports and the store's
migrations: the workers' start (a fork server that imports the decoder and pyarrow once, then a fork per worker;
~0.65 s on 16 cores when each worker was a fresh Python importing them itself) then runs beside them instead of
after them.

- ``parse_workers(cores)``: how many workers one trace gets; ``estimated_bytes(path)``: its decompressed size;
  a file under ``MIN_BYTES`` never starts a pool.
- ``shared_pool(workers)``: within it every reader of that many workers uses one pool, started and warmed once
  (many traces in a row pay the start once), shut down on leaving.
- ``prestart(paths, cores)``: a pool started and warmed now when one of ``paths`` is a Kineto file big enough for
  one, else nothing (a folder may be a run of ranks, which parses in rank workers instead). The first reader that
  needs a pool ``take``s it and shuts it down after its parse, as it does a pool it started itself, so idle
  workers never sit beside the derivations; one nobody took is shut down on leaving.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path

from kernelscope.parsers import parse_worker

#: Files estimated smaller than this (decompressed) are read in process: starting workers costs ~1 s of CPU.
MIN_BYTES = 48 << 20
#: The environment variable that forces the worker count (1: the one-process reader).
ENV_WORKERS = "KERNELSCOPE_PARSE_WORKERS"
_SHARED: dict[int, ProcessPoolExecutor] = {}  # workers -> the pool of ``shared_pool``
_STARTED: dict[int, ProcessPoolExecutor] = {}  # workers -> the pool ``prestart`` started, until a reader takes it
_PRELOAD: list = [None]  # the fork server's preload list before start_pool set ours (stop_fork_server restores it)


def parse_workers(cores: int) -> int:
    """Worker processes for one trace: ``$KERNELSCOPE_PARSE_WORKERS`` when set to a positive integer, else one
    less than ``cores`` (the usable cores, storage/sizing.py), at least 2 where there are 2: the parent keeps a
    core to read, hash and stage what they decode. On 2 cores two workers beat the one-process reader (9.67 s vs
    10.61 s for a 251 MiB training trace, 7.72 s vs 8.72 s for a 260 MiB prefill one, the parent's reading
    overlapping the decoding; benchmarks/results/ingest-2026-12-07-workers-2core.md); one core reads in
    process."""
    env = os.environ.get(ENV_WORKERS, "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n > 0:
            return n
    cores = int(cores)
    return 2 if cores == 2 else max(1, cores - 1)


def estimated_bytes(path) -> int:
    """The decompressed size of ``path``, estimated: a plain file's size; a gzip file's ISIZE trailer (its
    size mod 2^32; the compressed size when that is larger, as a wrapped ISIZE would be)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 18:
                return size
            fh.seek(size - 4)
            isize = struct.unpack("<I", fh.read(4))[0]
    except (OSError, struct.error):
        return 0
    return max(isize, size)


def start_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes. The parent holds DuckDB threads, so it never forks: the workers fork from
    a fork server (a fresh process that imported the decoder once, parsers/parse_server.py), or are spawned
    where there is none. Forked from the server, a worker starts in milliseconds without importing anything, and
    the parent's own cost of starting 15 (spawning each was ~40 ms of its time) goes."""
    import multiprocessing
    import multiprocessing.forkserver

    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        server = getattr(multiprocessing.forkserver, "_forkserver", None)
        if server is not None and _PRELOAD[0] is None:  # what the process had, given back by stop_fork_server
            _PRELOAD[0] = list(getattr(server, "_preload_modules", []))
        ctx.set_forkserver_preload(["kernelscope.parsers.parse_server"])
    else:
        ctx = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=parse_worker.init)


def stop_fork_server() -> None:
    """Stop the fork server the pools fork their workers from (parsers/parse_server.py's imports, ~70 MB), once
    the last pool is shut down: an ingest's derivations then run without it beside them (the next pool starts
    another). Only while no process forked from it lives (each holds the pipe whose end tells the server to go,
    and stopping waits for it to go): nothing while another pool's workers run, where there is no server, or
    where this Python has no way to stop it."""
    import multiprocessing
    import multiprocessing.forkserver as forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None and not _SHARED and not _STARTED and not multiprocessing.active_children():
        try:
            stop()
        except OSError:
            pass
        if _PRELOAD[0] is not None:  # a fork server started later for other code does not import ours
            multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD[0])
            _PRELOAD[0] = None


def shared(workers: int) -> ProcessPoolExecutor | None:
    """The pool ``shared_pool`` holds for ``workers`` workers, else None."""
    return _SHARED.get(workers)


def _warmed(workers: int) -> ProcessPoolExecutor:
    """A pool whose workers start now, from a thread, while the caller goes on (the first worker waits for the
    fork server to import the decoder, ~0.5 s, which would otherwise block the caller)."""
    import threading

    pool = start_pool(workers)

    def warm() -> None:
        try:
            for _ in range(workers):
                pool.submit(parse_worker.warm)
        except RuntimeError:  # shut down already (an ingest that failed at once)
            pass

    threading.Thread(target=warm, name="kernelscope-pool-start", daemon=True).start()
    return pool


@contextmanager
def _holding(pools: dict[int, ProcessPoolExecutor], workers: int) -> Iterator[None]:
    """A warmed pool of ``workers`` workers in ``pools`` while inside; on leaving, the one still there (not taken)
    is shut down."""
    pools[workers] = _warmed(workers)
    try:
        yield
    finally:
        left = pools.pop(workers, None)
        if left is not None:
            left.shutdown(wait=True, cancel_futures=True)


def shared_pool(workers: int):
    """Within it, every ``ParallelKinetoReader`` of ``workers`` workers uses one pool, started once and warmed at
    once; it is shut down on leaving."""
    return _holding(_SHARED, workers)


def take(workers: int) -> ProcessPoolExecutor | None:
    """The pool ``prestart`` started for ``workers`` workers, now the caller's to shut down; else None."""
    return _STARTED.pop(workers, None)


def prestart(paths: Iterable, cores: int):
    """A context within which the first reader of ``parse_workers(cores)`` workers finds its pool started: when
    more than one worker would parse and one of ``paths`` is a Kineto file (``.json``, ``.json.gz``) estimated at
    ``MIN_BYTES`` or more; else a context that does nothing. Folders do not count: a run of ranks is parsed by rank
    workers, which this pool would only crowd."""
    workers = parse_workers(cores)
    big = workers > 1 and any(str(p).endswith((".json", ".json.gz")) and Path(p).is_file()
                              and estimated_bytes(p) >= MIN_BYTES for p in paths)
    return _holding(_STARTED, workers) if big else nullcontext()
