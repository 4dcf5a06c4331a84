"""Nsight Compute CSV -> ``ncu_kernels``, matched to the kernels of a trace of the same workload; and the
one reading of those rows the analyses and reports share (``measured_dram_bytes``).

Matching (ncu rows carry no timestamp or correlation id): a row's key is (``kernel_name_key``, grid,
block); the i-th ncu row of a key (in ncu's launch order) is paired with the i-th kernel of that key in
the trace (in start order). ``match_rate`` = matched ncu rows / ncu rows.

Which trace: ``match=TRACE`` (a trace id or unique prefix), else automatically the trace (not an 'ncu'
row) whose distinct kernel name keys cover most of the CSV's keys, the most recently ingested on a tie.
When no ncu row matches, the rows are stored standalone under a ``traces`` row of their own
(``format = 'ncu'``). One transaction per file; a file whose content is already stored is skipped.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from ..errors import KernelscopeError, ParseError, StoreError, TraceNotFound
from ..parsers.ncu import (
    DEFAULT_CACHE_CONTROL,
    DEFAULT_CLOCK_CONTROL,
    DEFAULT_SETTINGS_NOTE,
    GUESS_WARNINGS,
    NcuKernel,
    kernel_name_key,
    read_ncu_csv,
)
from .inserts import insert_rows

_COLS = [
    "trace_id", "activity_id", "ncu_id", "launch_index", "name", "name_key", "process_id", "device", "context",
    "stream", "cc", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
    "shared_memory_bytes", "duration_ns", "dram_bytes_read", "dram_bytes_write", "dram_throughput_pct",
    "sm_throughput_pct", "memory_throughput_pct", "achieved_occupancy_pct", "sm_clock_hz", "dram_clock_hz",
    "cache_control", "clock_control", "settings_note", "page", "source", "content_hash", "ingested_ns",
]


@dataclass
class NcuResult:
    path: str
    status: Literal["ingested", "skipped", "failed"]
    trace_id: str | None  # the matched trace, or the standalone 'ncu' trace row
    message: str
    kernels: int = 0
    matched: int = 0

    @property
    def match_rate(self) -> float | None:
        return self.matched / self.kernels if self.kernels else None


def _key(name: str, g: tuple, b: tuple) -> tuple:
    return (kernel_name_key(name), *g, *b)


def _match_trace(store, ref: str) -> str:
    """The trace ``match=`` names: any TRACE reference (``queries.resolve_trace``), never an 'ncu' row."""
    from .queries import resolve_trace

    try:
        return resolve_trace(store, ref, exclude_format="ncu")
    except TraceNotFound:
        raise TraceNotFound(f"no trace matches {ref!r} for --match; list traces with `kernelscope traces`") from None


def best_trace(con, kernels: list[NcuKernel]) -> str | None:
    """The trace whose kernel name keys overlap the CSV's most (latest ingested on a tie); None if none."""
    want = {kernel_name_key(k.name) for k in kernels}
    rows = con.execute(
        """SELECT DISTINCT a.trace_id, a.name, t.ingested_ns FROM gpu_activities a
           JOIN traces t USING (trace_id) WHERE a.kind = 'kernel' AND t.format <> 'ncu'"""
    ).fetchall()
    have: dict[str, set] = defaultdict(set)
    when: dict[str, int] = {}
    for tid, name, ing in rows:
        have[tid].add(kernel_name_key(name))
        when[tid] = ing or 0
    best, score = None, (0, 0)
    for tid, keys in have.items():
        s = (len(want & keys), when[tid])
        if s[0] > 0 and s > score:
            best, score = tid, s
    return best


def match_kernels(con, trace_id: str, kernels: list[NcuKernel]) -> dict[int, int]:
    """launch_index -> activity_id: per (name key, grid, block), the i-th ncu launch with the i-th kernel."""
    rows = con.execute(
        """SELECT activity_id, name, grid_x, grid_y, grid_z, block_x, block_y, block_z FROM gpu_activities
           WHERE trace_id = ? AND kind = 'kernel' ORDER BY start_ns, activity_id""", [trace_id]
    ).fetchall()
    queues: dict[tuple, list[int]] = defaultdict(list)
    for aid, name, *dims in rows:
        queues[_key(name, tuple(dims[:3]), tuple(dims[3:]))].append(aid)
    taken: dict[tuple, int] = defaultdict(int)
    out = {}
    for k in sorted(kernels, key=lambda k: k.launch_index):
        key = _key(k.name, (k.grid_x, k.grid_y, k.grid_z), (k.block_x, k.block_y, k.block_z))
        i = taken[key]
        if i < len(queues.get(key, ())):
            out[k.launch_index] = queues[key][i]
            taken[key] = i + 1
    return out


def ingest_ncu(
    store, path, *, match: str | None = None, cache_control: str | None = None,
    clock_control: str | None = None, name: str | None = None, settings_note: str | None = None,
) -> NcuResult:
    """Parse an ncu CSV and store its kernels (one transaction); failures come back as 'failed'.

    ``cache_control``/``clock_control``: the ``ncu --cache-control``/``--clock-control`` values used for the
    capture when known; otherwise ncu's defaults ('all', 'base') are recorded with a note saying so.
    ``settings_note``: the note stored with the rows when the settings are given (who recorded them, what they do
    to ncu's durations); default "capture settings given at ingest".
    """
    path = pathlib.Path(path)
    con = store.con
    if store.read_only:
        raise StoreError(f"store {store.path} is open read-only; cannot ingest")
    try:
        report = read_ncu_csv(path)
    except KernelscopeError as exc:
        return NcuResult(str(path), "failed", None, str(exc).splitlines()[0])
    except OSError as exc:
        return NcuResult(str(path), "failed", None, f"cannot read the file: {exc.strerror or exc}")
    done = con.execute("SELECT trace_id FROM ncu_kernels WHERE content_hash = ? LIMIT 1",
                       [report.content_hash]).fetchall()
    if done:
        return NcuResult(str(path), "skipped", done[0][0], f"already stored with {done[0][0]}",
                         len(report.kernels))
    try:
        trace_id = _match_trace(store, match) if match else best_trace(con, report.kernels)
    except KernelscopeError as exc:
        return NcuResult(str(path), "failed", None, str(exc))
    pairs = match_kernels(con, trace_id, report.kernels) if trace_id else {}
    given = cache_control is not None or clock_control is not None
    note = (settings_note or "capture settings given at ingest") if given else DEFAULT_SETTINGS_NOTE
    cache = cache_control or DEFAULT_CACHE_CONTROL
    clock = clock_control or DEFAULT_CLOCK_CONTROL
    now = time.time_ns()
    guessed = [w for w in report.warnings if w.startswith(GUESS_WARNINGS)]  # printed and stored, never silent
    con.execute("BEGIN TRANSACTION")
    try:
        if not pairs:
            trace_id = _standalone_trace(con, path, report, name, now)
        rows = []
        for k in report.kernels:
            d = vars(k)
            vals = {c: d.get(c) for c in _COLS}
            vals.update(trace_id=trace_id, activity_id=pairs.get(k.launch_index), name_key=kernel_name_key(k.name),
                        cache_control=cache, clock_control=clock, settings_note=note, page=report.page,
                        source=str(path.resolve()), content_hash=report.content_hash, ingested_ns=now)
            rows.append(tuple(vals[c] for c in _COLS))
        insert_rows(con, f"ncu_kernels ({', '.join(_COLS)})", rows)
        if pairs and guessed:  # the matched trace's warnings say which of its ncu values were left out
            old = con.execute("SELECT warnings FROM traces WHERE trace_id = ?", [trace_id]).fetchone()
            have = json.loads(old[0]) if old and old[0] else []
            have = have if isinstance(have, list) else [have]
            con.execute("UPDATE traces SET warnings = ? WHERE trace_id = ?",
                        [json.dumps(have + [f"Nsight Compute CSV {path.name}: {w}" for w in guessed]), trace_id])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    n, m = len(report.kernels), len(pairs)
    where = f"matched {m}/{n} kernels ({100.0 * m / n:.1f}%) to trace {trace_id}" if pairs else (
        f"no kernel of {'trace ' + match if match else 'any stored trace'} matched by name, grid and block; "
        f"stored standalone as {trace_id}")
    where += "".join(f"; warning: {w}" for w in guessed)
    return NcuResult(str(path), "ingested", trace_id, where, n, m)


def _standalone_trace(con, path: pathlib.Path, report, name, now: int) -> str:
    from .. import __version__

    h = report.content_hash
    n = 12
    while con.execute("SELECT 1 FROM traces WHERE trace_id = ?", [h[:n]]).fetchall() and n < len(h):
        n += 4
    tid = h[:n]
    stem = path.name
    for suffix in (".csv.gz", ".csv"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    con.execute(
        """INSERT INTO traces (trace_id, name, source, content_hash, format, rank, rank_source, warnings, meta,
               events, ingested_ns, kernelscope_version)
           VALUES (?, ?, ?, ?, 'ncu', 0, 'default', ?, ?, ?, ?, ?)""",
        [tid, name or stem, str(path.resolve()), h, json.dumps(report.warnings),
         json.dumps({"ncu_page": report.page}), len(report.kernels), now, __version__],
    )
    return tid


# ---------------------------------------------------------------- reading: a trace's kernels by GPU time

_SQL_TOP_KERNELS = """
SELECT name, count(*) AS launches, sum(dur_ns) AS gpu_ns FROM gpu_activities
WHERE trace_id = $t AND kind = 'kernel' GROUP BY name ORDER BY gpu_ns DESC, name
"""


def top_kernels(store, trace_id: str, n: int | None = None):
    """A trace's kernels by name with the most GPU time first: ``name`` (as stored: demangled), ``launches``,
    ``gpu_ns`` (sum of their durations), ties by name; the first ``n`` when given. What ``--ncu top:N`` chooses
    from, and what ``nsys stats --report cuda_gpu_kern_sum`` reports per name."""
    df = store.query(_SQL_TOP_KERNELS, {"t": trace_id})
    df["launches"] = df["launches"].astype("int64")
    df["gpu_ns"] = df["gpu_ns"].fillna(0).astype("int64")
    return df.head(n).reset_index(drop=True) if n is not None else df


_SQL_LEAF_OP_KERNELS = """
SELECT coalesce(o.name, '(no operator)') AS op, count(*) AS kernels, sum(a.dur_ns) AS gpu_ns
FROM gpu_activities a LEFT JOIN cpu_ops o ON o.trace_id = a.trace_id AND o.op_id = a.leaf_op_id
WHERE a.trace_id = $t AND a.kind = 'kernel' GROUP BY ALL ORDER BY op
"""


def leaf_op_kernels(store, trace_id: str):
    """A trace's kernels per leaf operator name (the deepest operator enclosing each kernel's launch; '(no
    operator)' for kernels without one): ``op``, ``kernels``, ``gpu_ns``, by name. How a Kineto trace and the
    nsys trace of the same run are compared operator by operator."""
    df = store.query(_SQL_LEAF_OP_KERNELS, {"t": trace_id})
    df["kernels"] = df["kernels"].astype("int64")
    df["gpu_ns"] = df["gpu_ns"].fillna(0).astype("int64")
    return df


# ---------------------------------------------------------------- reading: measured DRAM bytes

_SQL_MEASURED_ANY = """
SELECT count(*) AS n FROM ncu_kernels WHERE trace_id = $t AND activity_id IS NOT NULL
  AND dram_bytes_read IS NOT NULL AND dram_bytes_write IS NOT NULL
"""
# Per matched kernel (one row per activity: the latest ingested file wins when several measured it).
_SQL_MEASURED_KERNELS = """
WITH m AS (
  SELECT activity_id, arg_max(dram_bytes_read, ingested_ns) AS dram_bytes_read,
         arg_max(dram_bytes_write, ingested_ns) AS dram_bytes_write,
         arg_max(duration_ns, ingested_ns) AS ncu_duration_ns,
         arg_max(cache_control, ingested_ns) AS cache_control,
         arg_max(clock_control, ingested_ns) AS clock_control
  FROM ncu_kernels WHERE trace_id = $t AND activity_id IS NOT NULL
    AND dram_bytes_read IS NOT NULL AND dram_bytes_write IS NOT NULL
  GROUP BY activity_id
)
SELECT a.leaf_op_id AS op_id, a.activity_id, a.name AS kernel, a.dur_ns,
       m.dram_bytes_read, m.dram_bytes_write, m.dram_bytes_read + m.dram_bytes_write AS measured_bytes,
       m.ncu_duration_ns, m.cache_control, m.clock_control
FROM m JOIN gpu_activities a ON a.trace_id = $t AND a.activity_id = m.activity_id
WHERE a.leaf_op_id IS NOT NULL
ORDER BY a.start_ns, a.activity_id
"""
# Kernels per leaf operator that has at least one measured kernel.
_SQL_OP_KERNELS = """
SELECT leaf_op_id AS op_id, count(*) AS kernels FROM gpu_activities
WHERE trace_id = $t AND kind = 'kernel' AND leaf_op_id IN (SELECT unnest($ops))
GROUP BY leaf_op_id
"""


def measured_dram_bytes(store, trace_id: str):
    """Nsight Compute DRAM bytes of a trace's kernels (``ncu_kernels`` rows matched to them, one per
    activity: the latest ingested file wins when several measured it): ``(per_kernel, per_op)``.

    ``per_kernel``: ``op_id`` (the kernel's leaf operator), ``activity_id``, ``kernel``, ``dur_ns``,
    ``dram_bytes_read``, ``dram_bytes_write``, ``measured_bytes`` (read + write), ``ncu_duration_ns``,
    ``cache_control``, ``clock_control``, in start order. ``per_op`` (``op_id``, ``measured_bytes``,
    ``ncu_duration_ns``, int64, by op_id): the leaf operator instances whose every kernel was measured, summed
    over them (ncu measures kernels only, not memcpy/memset). (None, None) when no matched row has DRAM bytes.
    """
    if not int(store.query(_SQL_MEASURED_ANY, {"t": trace_id})["n"].iloc[0]):
        return None, None
    k = store.query(_SQL_MEASURED_KERNELS, {"t": trace_id})
    if not len(k):
        return None, None
    ops = sorted({int(x) for x in k["op_id"]})
    n = store.query(_SQL_OP_KERNELS, {"t": trace_id, "ops": ops}).set_index("op_id")["kernels"]
    per = k.groupby("op_id").agg(measured_kernels=("activity_id", "count"), measured_bytes=("measured_bytes", "sum"),
                                 ncu_duration_ns=("ncu_duration_ns", "sum")).reset_index()
    per = per[per["measured_kernels"].to_numpy() == n.reindex(per["op_id"]).to_numpy()]
    per = per[["op_id", "measured_bytes", "ncu_duration_ns"]].astype("int64").reset_index(drop=True)
    return k, per


__all__ = ["NcuResult", "best_trace", "ingest_ncu", "leaf_op_kernels", "match_kernels", "measured_dram_bytes",
           "top_kernels", "ParseError"]
