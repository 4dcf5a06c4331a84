"""Runs of many ranks: which traces form a run, their ranks, how many processes parse them, per-rank clock
offsets (from the collectives of storage/collectives.py, a derivation step filled for every trace).

**Run membership** (``plan_runs``): a *rank trace* is a trace whose ``distributedInfo`` says world size > 1
(read from the file's head, before ``traceEvents``; torch >= 2.5 writes it there) or whose file/run-folder
name holds ``rank<N>`` (``ddp_rank0``, ``trace_rank_3.json``). Rank traces in one folder form one run when
there are at least two of them, or when that folder was named on the command line. Rank = distributedInfo's
rank, else the name's number; the run's ``rank_source`` says which. World size = distributedInfo's, else
highest rank + 1. ``check_members`` refuses, each with one sentence: two world sizes in one folder (mixed
runs), two traces claiming one rank (collision), a rank outside the world size. A run may be
**partial** (a sample of ranks, e.g. 2 of a world of 128): the ranks it lacks are stored in
``runs.missing_ranks`` and said on every ingest line; world size and ranks stay as the traces say.

**Clock offsets** (``estimate_offsets``): ranks leave a collective at nearly the same time (its last step
is a synchronising exchange), so for rank r and the reference rank 0 (the lowest rank), over every
collective instance both ran (same process group name and ``pg_seq``), d_i = end_r,i - end_ref,i.
``estimate_ns`` = the lower median of d_i (robust to a few odd instances), ``estimate_mad_ns`` = the lower
median of |d_i - estimate|; its error is the collective's exit jitter (tens of microseconds on the 2-H200
fixture). The *applied* ``clock_offset_ns`` is 0 when the rank's run directory records the same host as the
reference's (one host, one clock: the estimate would only add the jitter), else the estimate, else 0 when
no collective is shared. Aligned time = stored time - clock_offset_ns.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pathlib
import re
import zlib
from dataclasses import dataclass, field

from .inserts import insert_rows

_RANK_NAME_RE = re.compile(r"(?i)(?:^|[^a-z])rank[_\-]?(\d+)")
#: Bytes of a trace's head searched for distributedInfo.
PEEK_BYTES = 4 << 20
#: Memory one parsing worker is allowed (parser batches + staging writer), for the worker bound.
WORKER_BYTES = 512 << 20
#: Below this many bytes of rank files in all, parse in-process: starting worker processes (~1-2 s of
#: imports) costs more than it saves. benchmarks/ranks.py on a quiet 16-core machine: 64 ranks of 17 MB gz
#: parse in 8.8 s in-process and 1.6 s in 16 processes; 4 ranks of 1.1 MB took longer with 2 processes.
PARALLEL_MIN_BYTES = 8 << 20


# ------------------------------------------------------------------------------------------- membership


def name_rank(name: str) -> int | None:
    """The N of the last ``rank<N>`` / ``rank_N`` / ``rank-N`` in a file or folder name, else None."""
    found = _RANK_NAME_RE.findall(name)
    return int(found[-1]) if found else None


def _object_at(text: bytes, i: int) -> bytes | None:
    """The JSON object starting at text[i] == '{' (string-aware brace matching), None if cut off."""
    depth, in_str, esc = 0, False, False
    for j in range(i, len(text)):
        c = text[j]
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return text[i : j + 1]
    return None


def peek_distributed(path) -> dict | None:
    """``distributedInfo`` of a Kineto JSON(.gz) trace when it comes before ``traceEvents`` within the
    first PEEK_BYTES, else None (the full parse still reads it wherever it is)."""
    path = pathlib.Path(path)
    if not path.name.endswith((".json", ".json.gz")):
        return None
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as fh:
            head = fh.read(PEEK_BYTES)
    except (OSError, EOFError, zlib.error):  # the full parse says what is wrong with the file
        return None
    k = head.find(b'"distributedInfo"')
    ev = head.find(b'"traceEvents"')
    if k < 0 or (0 <= ev < k):
        return None
    i = head.find(b"{", k)
    obj = _object_at(head, i) if i >= 0 else None
    try:
        value = json.loads(obj) if obj else None
    except (ValueError, RecursionError):  # nested past the recursion limit: the full parse refuses it
        return None
    return value if isinstance(value, dict) else None


def _parsed_int(v) -> int | None:
    """A distributedInfo field as int (``int(v)``: 3, 3.0, "3"); None when it is missing or not a number."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


@dataclass
class Member:
    """One trace of a candidate run: ('run', folder) or ('file', path) plus what is known of its rank."""

    kind: str
    path: pathlib.Path
    name: str
    di_rank: int | None = None
    di_world: int | None = None
    name_rank: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def rank(self) -> int | None:
        return self.di_rank if self.di_rank is not None else self.name_rank

    @property
    def rank_source(self) -> str:
        return "distributedInfo" if self.di_rank is not None else "filename"

    def set_distributed(self, info: dict | None) -> None:
        if isinstance(info, dict):
            r, w = _parsed_int(info.get("rank")), _parsed_int(info.get("world_size"))
            if r is not None:
                self.di_rank = r
            if w is not None:
                self.di_world = w

    @property
    def is_rank_trace(self) -> bool:
        return (self.di_world is not None and self.di_world > 1) or self.name_rank is not None


def trace_file(kind: str, path: pathlib.Path) -> pathlib.Path:
    if kind == "run":
        return next((path / n for n in ("trace.json.gz", "trace.json") if (path / n).exists()), path)
    return path


def _display_name(kind: str, path: pathlib.Path) -> str:
    if kind == "run":
        return path.name
    name = path.name
    for suffix in (".json.gz", ".json", ".sqlite.gz", ".sqlite", ".gz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def plan_runs(items, given_dirs) -> tuple[list, list]:
    """Split ``collect_paths`` items into (runs, singles). runs: [(folder, [Member])] of rank traces
    sharing a folder (>= 2 of them, or the folder was given); singles: the other items, unchanged."""
    given = {pathlib.Path(d).resolve() for d in given_dirs}
    by_parent: dict[pathlib.Path, list[Member]] = {}
    order: list = []
    for kind, p in items:
        if kind not in ("run", "file") or not p.exists() or p.is_dir() and kind == "file":
            order.append(("single", (kind, p)))
            continue
        m = Member(kind, p, _display_name(kind, p))
        m.set_distributed(peek_distributed(trace_file(kind, p)))
        m.name_rank = name_rank(m.name)
        if not m.is_rank_trace:
            order.append(("single", (kind, p)))
            continue
        parent = p.parent.resolve()
        if parent not in by_parent:
            by_parent[parent] = []
            order.append(("group", parent))
        by_parent[parent].append(m)
    runs, singles = [], []
    for what, x in order:
        if what == "single":
            singles.append(x)
            continue
        members = by_parent[x]
        if len(members) >= 2 or x in given:
            runs.append((x, members))
        else:
            singles.extend((m.kind, m.path) for m in members)
    return runs, singles


def check_members(folder, members: list[Member]) -> tuple[int, str, list[int]]:
    """(world size, rank source, missing ranks) of a run, or UsageError with one sentence (mixed runs, a rank
    claimed twice, a rank unknown or outside the world size). A run may be partial: the ranks below the world
    size without a trace are returned (a sample of ranks, e.g. 2 of 128, is what users often have)."""
    from ..errors import UsageError

    where = str(folder)
    worlds: dict[int, list[str]] = {}
    for m in members:
        if m.di_world is not None:
            worlds.setdefault(m.di_world, []).append(m.name)
    if len(worlds) > 1:
        parts = "; ".join(f"world size {w}: {', '.join(sorted(ns))}" for w, ns in sorted(worlds.items()))
        raise UsageError(f"{where} mixes traces of different runs ({parts}); put each run in its own folder")
    unknown = [m.name for m in members if m.rank is None]
    if unknown:
        raise UsageError(f"{where}: no rank known for {', '.join(sorted(unknown))} (no distributedInfo, no "
                         "rank<N> in the name); rename it or ingest it on its own")
    seen: dict[int, Member] = {}
    for m in sorted(members, key=lambda m: m.name):
        if m.rank in seen:
            raise UsageError(
                f"{where}: rank {m.rank} is claimed by both {seen[m.rank].name} and {m.name} (from "
                f"{m.rank_source}); each rank needs exactly one trace (put each run in its own folder)"
            )
        seen[m.rank] = m
    world = next(iter(worlds)) if worlds else max(seen) + 1
    outside = sorted(r for r in seen if r < 0 or r >= world)
    if outside:
        raise UsageError(f"{where}: rank {outside[0]} is outside the world size {world}")
    missing = sorted(set(range(world)) - set(seen))
    sources = {m.rank_source for m in members}
    return world, sources.pop() if len(sources) == 1 else "mixed", missing


def rank_ranges(ranks_) -> str:
    """Sorted ranks as ranges: [1, 2, 3, 5, 7, 8] -> '1-3, 5, 7-8'."""
    out: list[str] = []
    rs = sorted({int(r) for r in ranks_})
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ", ".join(out)


def partial_note(world: int, present: int, missing) -> str | None:
    """One sentence for a partial run (None when no rank is missing): how many ranks and which are absent."""
    if not missing:
        return None
    return (f"partial run: {present} of {world} ranks present, missing rank{'s' if len(missing) != 1 else ''} "
            f"{rank_ranges(missing)}")


def run_id_for(content_hashes) -> str:
    """'run-' + 12 hex digits of sha256 over the members' sorted content hashes (re-ingest is idempotent)."""
    return "run-" + hashlib.sha256("".join(sorted(content_hashes)).encode()).hexdigest()[:12]


def parse_workers(files: int, total_bytes: int | None = None) -> int:
    """Processes to parse ``files`` rank traces: min(files, free cores, available memory / WORKER_BYTES),
    at least 1, and 1 when the files hold fewer than PARALLEL_MIN_BYTES in all. Free cores = cores usable
    by this process minus the 1-minute load average (rounded down): on a machine other jobs keep busy,
    more processes only add their start-up (benchmarks/README.md, ranks.py). Env
    ``KERNELSCOPE_INGEST_WORKERS`` overrides (still at most ``files``)."""
    env = os.environ.get("KERNELSCOPE_INGEST_WORKERS")
    if env and env.strip().isdigit() and int(env) > 0:
        return max(1, min(files, int(env)))
    if total_bytes is not None and total_bytes < PARALLEL_MIN_BYTES:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(files, cores - _load(), _available_bytes() // WORKER_BYTES))


def _load() -> int:
    try:
        return int(os.getloadavg()[0])
    except (OSError, AttributeError):
        return 0


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return WORKER_BYTES


# ----------------------------------------------------------------------------------------- clock offsets


def estimate_offsets(con, run_id: str, hosts: dict[str, str | None]) -> str:
    """Fill ``rank_clocks`` for a run whose traces are inserted (see the module docstring); returns the
    run's offset_method text. ``hosts``: trace_id -> provenance hostname (None when unknown)."""
    rows = con.execute(
        """
        WITH c AS (
            SELECT t.trace_id, t.rank, c.pg_name, c.pg_seq, a.end_ns
            FROM collectives c
            JOIN traces t ON t.trace_id = c.trace_id
            JOIN gpu_activities a ON a.trace_id = c.trace_id AND a.activity_id = c.activity_id
            WHERE t.run_id = $run
        ), ref AS (
            SELECT c.* FROM c WHERE rank = (SELECT min(rank) FROM traces WHERE run_id = $run)
        ), d AS (
            SELECT c.trace_id, c.end_ns - ref.end_ns AS d
            FROM c JOIN ref ON c.pg_name IS NOT DISTINCT FROM ref.pg_name AND c.pg_seq = ref.pg_seq
        ), m AS (
            SELECT trace_id, quantile_disc(d, 0.5) AS est, count(*) AS n FROM d GROUP BY trace_id
        )
        SELECT t.trace_id, t.rank, t.rank_source, m.est, coalesce(m.n, 0),
               (SELECT quantile_disc(abs(d.d - m.est), 0.5) FROM d WHERE d.trace_id = t.trace_id)
        FROM traces t LEFT JOIN m ON m.trace_id = t.trace_id
        WHERE t.run_id = $run ORDER BY t.rank
        """,
        {"run": run_id},
    ).fetchall()
    ref_host = hosts.get(rows[0][0]) if rows else None
    methods = set()
    out = []
    for trace_id, rank, source, est, n, mad in rows:
        host = hosts.get(trace_id)
        if rank == rows[0][1]:
            applied, how = 0, "reference"
        elif host is not None and host == ref_host:
            applied, how = 0, "same host"
        elif est is not None:
            applied, how = int(est), "estimate"
        else:
            applied, how = 0, "none"
        methods.add(how)
        out.append((run_id, trace_id, rank, source, host, est, n, mad, applied))
    insert_rows(con, "rank_clocks", out)
    methods.discard("reference")
    text = {
        "same host": "same host as rank 0: offsets 0 (estimates stored)",
        "estimate": "median of collective end differences to rank 0",
        "none": "no collective shared with rank 0: offsets 0",
    }
    if not methods:
        return "single rank"
    return "; ".join(text[m] for m in sorted(methods))
