"""DuckDB threads and memory for ingest connections: how much each connection gets (``ingest_resources``), how it
is set and restored, what to try after DuckDB runs out of memory (``fallback_resources``, ``retry_settings``),
and the one line a DuckDB failure becomes (``db_error``). docs/ingest.md "Memory and threads".
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import StoreError, UsageError

#: Env variables forcing an ingest connection's DuckDB memory_limit / threads (``ingest_resources``).
MEMORY_ENV = "KERNELSCOPE_MEMORY_LIMIT"
THREADS_ENV = "KERNELSCOPE_THREADS"
#: DuckDB threads per ingest connection at most, unless KERNELSCOPE_THREADS says otherwise. 16 rather than 8:
#: on the 16-core GPU host a 1.09 GB llama tile ingested in 9.8-10.0 s at 16 threads against 11.6-11.7 s at 8
#: (12: 11.0-11.2 s), peak RSS 1.65-2.06 GB against 1.49-1.73 GB (benchmarks/results/ingest-2026-11-29-threads-
#: 16core-h200.md); a 1.09 GB train-step tile 26.0 s against 31.3 s (docs/ingest.md).
MAX_THREADS = 16
#: DuckDB memory per thread while ingesting (DuckDB's own guidance: at least 125 MB per thread); it spills
#: beyond its limit. On 16 cores a 1.09 GB trace ran out of memory at 8 threads and 128 MB each (then ingested
#: through the fallback, 83 s) and took 30 s at 8 threads and 256 MB each (docs/ingest.md).
MEMORY_PER_THREAD = 256 * 10**6
#: The least memory an ingest connection gets (what 1-2 threads had before threads and memory were sized
#: together: 256 MB).
MIN_MEMORY = 256 * 10**6
#: The share of the machine's (or cgroup's) memory that ingest's DuckDB connections may take together.
RAM_SHARE = 0.25
#: A trace of fewer staged events is derived on one DuckDB thread (``small_trace_threads``): at this size the
#: second thread cost CPU without saving time (2 cores: the 42 sample traces, 406k events, 25-27 s of CPU on one
#: thread against 30-33 s on two, wall no longer; an 88k-event trace 2.6-2.8 s against 2.9-3.5 s), while a
#: 787k-event one derived faster on two (links 1.5 s against 2.1 s).
SMALL_TRACE_EVENTS = 200_000


@dataclass(frozen=True)
class Resources:
    """What one ingest connection may use: DuckDB ``threads`` and ``memory_limit`` (``memory`` is the text
    DuckDB gets, ``memory_bytes`` its value when known) and a sentence saying how they were chosen."""

    threads: int
    memory: str
    memory_bytes: int | None
    rule: str


def usable_cores() -> int:
    """CPUs this process may run on: its CPU affinity (``taskset``, cgroup cpusets), not the machine's
    count (``os.cpu_count()`` ignores affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def physical_memory_bytes() -> int | None:
    """The machine's RAM, or the cgroup's memory limit when that is lower (containers); None if unknown."""
    total = None
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    for cg in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = pathlib.Path(cg).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            total = int(text) if total is None else min(total, int(text))
    return total


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def memory_bytes(text: str) -> int | None:
    """Bytes of a DuckDB memory size text ('256MB', '4GB', '1GiB'; KB/MB/GB are powers of 1000, as in
    DuckDB); None when it is not one."""
    m = _SIZE_RE.match(text or "")
    factor = _SIZE_UNITS.get(m.group(2).lower()) if m else None
    return None if factor is None else int(float(m.group(1)) * factor)


def _size_text(n: int) -> str:
    return f"{n // 10**6}MB"


def _env_threads() -> str:
    """``$KERNELSCOPE_THREADS`` as given (stripped; '' when unset): a thread count the user forces."""
    return (os.environ.get(THREADS_ENV) or "").strip()


def ingest_resources(processes: int = 1) -> Resources:
    """DuckDB threads and memory for one ingest connection, sized together (docs/ingest.md "Memory and
    threads"); every connection ingest opens or uses gets them (``apply_resources``).

    - threads: ``$KERNELSCOPE_THREADS`` when set, else the usable cores (CPU affinity) shared by
      ``processes`` parallel parsers, at most ``MAX_THREADS``;
    - memory: ``$KERNELSCOPE_MEMORY_LIMIT`` when set, else ``MEMORY_PER_THREAD`` per thread, at least
      ``MIN_MEMORY``, at most ``RAM_SHARE`` of the machine's (or cgroup's) memory over ``processes``;
    - when the memory (given, or capped by RAM) cannot hold ``MEMORY_PER_THREAD`` per thread, the threads
      are cut to fit it, unless ``$KERNELSCOPE_THREADS`` forces them.

    DuckDB keeps some buffers per thread that cannot spill (hash tables, sort runs and window partitions
    being worked on), so a fixed limit with a thread per core ran out of memory on many cores: 256 MB held
    2 threads on a 1.1 GB trace but not 16 threads on a 120 MB one (docs/ingest.md). What still runs out
    of memory is derived again with less (``fallback_resources``)."""
    processes = max(1, int(processes))
    env_threads = _env_threads()
    forced_threads = None
    if env_threads:
        if not env_threads.isdigit() or not 1 <= int(env_threads) <= 1024:
            raise UsageError(f"{THREADS_ENV}={env_threads!r} is not a thread count (a whole number from 1 to 1024)")
        forced_threads = int(env_threads)
    cores = usable_cores()
    threads = forced_threads or max(1, min(MAX_THREADS, cores // processes))
    ram = physical_memory_bytes()
    cap = max(MIN_MEMORY, int(ram * RAM_SHARE) // processes) if ram else None
    env_memory = (os.environ.get(MEMORY_ENV) or "").strip()
    if env_memory:
        memory, mem_bytes = env_memory, memory_bytes(env_memory)
        how = f"{MEMORY_ENV}={env_memory}"
    else:
        mem_bytes = max(MIN_MEMORY, MEMORY_PER_THREAD * threads)
        if cap is not None and mem_bytes > cap:
            mem_bytes = cap
        memory = _size_text(mem_bytes)
        how = (f"{MEMORY_PER_THREAD // 10**6}MB per thread, at least {MIN_MEMORY // 10**6}MB"
               + (f", at most {RAM_SHARE:.0%} of RAM" + (f" over {processes} processes" if processes > 1 else "")
                  if cap is not None else ""))
    if forced_threads is None and mem_bytes is not None:
        fit = max(1, mem_bytes // MEMORY_PER_THREAD)
        threads = min(threads, fit)
    why = (f"{THREADS_ENV}={forced_threads}" if forced_threads else
           f"{cores} usable cores" + (f" over {processes} processes" if processes > 1 else "")
           + f", at most {MAX_THREADS}, at most one per {MEMORY_PER_THREAD // 10**6}MB")
    return Resources(threads, memory, mem_bytes, f"threads {threads} ({why}); memory_limit {memory} ({how})")


def apply_resources(con, res: Resources) -> None:
    """SET a connection's threads and memory_limit (and preserve_insertion_order off) for ingest."""
    try:
        con.execute(f"SET memory_limit = '{_safe_setting(res.memory)}'")
    except Exception as exc:
        raise UsageError(
            f"{MEMORY_ENV}={res.memory!r} is not a memory size DuckDB accepts (e.g. 1GB): "
            f"{str(exc).splitlines()[0]}"
        ) from None
    con.execute(f"SET threads = {int(res.threads)}")
    con.execute("SET preserve_insertion_order = false")


@contextmanager
def ingest_settings(con, res: Resources | None = None):
    """DuckDB settings for bulk loading (``ingest_resources``), restored afterwards."""
    res = res or ingest_resources()
    apply_resources(con, res)
    try:
        yield res
    finally:
        for name in ("memory_limit", "threads", "preserve_insertion_order"):
            try:
                con.execute(f"RESET {name}")
            except Exception:
                pass


def small_trace_threads(con, events: int) -> None:
    """One DuckDB thread on ``con`` for deriving a trace of fewer than ``SMALL_TRACE_EVENTS`` staged events,
    unless ``KERNELSCOPE_THREADS`` forces a count; its memory limit stays as sized (``ingest_settings``
    restores both afterwards)."""
    if events < SMALL_TRACE_EVENTS and not _env_threads():
        con.execute("SET threads = 1")


def _safe_setting(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z. ]", "", text)


def is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryException" or "Out of Memory" in str(exc).split("\n", 1)[0]


def fallback_resources(res: Resources, memory_forced: bool) -> Resources | None:
    """What to try after DuckDB ran out of memory with ``res``: at most 2 threads and the least memory
    (``MIN_MEMORY``; a limit given in KERNELSCOPE_MEMORY_LIMIT stays), then 1 thread; None when that ran.

    Less memory, not more: DuckDB picks in-memory or spilling strategies from the limit, and a limit just
    above what it estimates it needs is the one that fails (a 1.1 GB trace: 2 threads failed at 1 GB and
    ingested at 256 MB, 512 MB and 2 GB). At 256 MB it spills from the start; that held a 2.4 GB rank trace."""
    mem = res.memory_bytes
    if res.threads > 2 or (not memory_forced and mem is not None and mem > MIN_MEMORY):
        low = res if memory_forced else dataclasses.replace(res, memory=_size_text(MIN_MEMORY), memory_bytes=MIN_MEMORY)
        return dataclasses.replace(low, threads=min(res.threads, 2), rule="fallback after out of memory")
    if res.threads > 1:
        return dataclasses.replace(res, threads=1, rule="fallback after out of memory")
    return None


def retry_settings(con, exc: BaseException) -> Resources | None:
    """After ``exc``: when it is DuckDB running out of memory and a smaller setting is left
    (``fallback_resources``), clear what the failed attempt left, SET it on ``con`` and return it."""
    if not is_oom(exc):
        return None
    try:
        threads = int(con.execute("SELECT current_setting('threads')").fetchone()[0])
        mem_text = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    except Exception:
        return None
    mem = _duckdb_bytes(mem_text)  # DuckDB shows '244.1 MiB' for the 256MB it was given: whole MB again
    now = Resources(threads, f"{round(mem / 10**6)}MB" if mem else mem_text,
                    round(mem / 10**6) * 10**6 if mem else None, "")
    nxt = fallback_resources(now, bool((os.environ.get(MEMORY_ENV) or "").strip()))
    if nxt is None:
        return None
    clear_failed_attempt(con)
    apply_resources(con, nxt)
    return nxt


def _duckdb_bytes(text: str) -> int | None:
    """Bytes of DuckDB's own rendering of a size ('953.6 MiB', '1.8 GiB')."""
    return memory_bytes(text.replace(" ", ""))


def clear_failed_attempt(con) -> None:
    """Drop what a failed derive may leave on the connection (its temporary tables) and checkpoint, so the
    next attempt starts from the memory a fresh one has (blocks the rolled-back transaction wrote are freed)."""
    for t in ("ks_idle_hw", "ks_idle_kept", "ks_idle_pieces", "ks_rank_map"):
        try:
            con.execute(f"DROP TABLE IF EXISTS {t}")
        except Exception:
            pass
    try:
        con.execute("CHECKPOINT")
    except Exception:
        pass


def db_error(path, exc: BaseException, rank_files: bool = False) -> StoreError:
    """A DuckDB error while deriving or inserting a trace, as one line (out of memory: what to change)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    msg = f"{path}: DuckDB failed while deriving the trace's tables: {first}"
    if "Out of Memory" in first or type(exc).__name__ == "OutOfMemoryException":
        fewer, more = "", "2GB"
        try:
            res = ingest_resources()
            now = f"now {res.memory} for {res.threads} thread{'s' if res.threads != 1 else ''}"
            if res.memory_bytes and res.memory_bytes > 10**9:  # twice what it has, once that is over 2 GB
                more = _size_text(2 * res.memory_bytes)
            if res.threads > 1:  # at one thread already, fewer threads is no advice
                fewer = f" or fewer threads ({THREADS_ENV}={min(2, res.threads - 1)})"
        except UsageError:
            now = "now unreadable"
        msg += (f"; give ingest more memory ({MEMORY_ENV}, {now}, e.g. {MEMORY_ENV}={more}){fewer}"
                + (" or parse fewer rank files at once (KERNELSCOPE_INGEST_WORKERS=1)" if rank_files else ""))
    return StoreError(msg)
