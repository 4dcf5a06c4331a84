"""Communication of a multi-rank run: collectives matched across ranks, skew and stragglers, and per rank the
split of GPU time into compute, communication and copies.

Definitions (docs/metrics.md, "Communication", is the canonical text; times are int ns, bandwidths GB/s =
bytes/ns):

- **Collective kernel**: a row of the ``collectives`` table (a kernel with torch's collective args, or an
  NCCL/RCCL kernel by name; storage/ranks.py). **Compute kernel**: any other kernel. **Copy**: a memcpy or
  memset activity.
- **Instance**: the collectives of all ranks with the same process group name and ``pg_seq`` (the k-th
  collective of a group on each rank). Times are aligned: ``t - clock_offset_ns`` of the rank
  (``rank_clocks``). ``start_skew_ns`` = last aligned start - first aligned start; ``end_skew_ns`` likewise
  for ends. The **straggler** is the rank that starts last (the last to arrive; ties: lowest rank);
  ``wait_ns`` of a rank = last start - its start (time it waits inside the collective for the straggler).
- ``bytes`` = max(in_bytes, out_bytes) over the instance's ranks: the nccl-tests data size S (all-reduce:
  the buffer; all-gather: the gathered output; reduce-scatter: the input; all-to-all: the buffer).
  ``time_ns`` = last end - last start (from the straggler's arrival to the last departure: the transfer,
  without waiting). ``algbw_gbps`` = bytes / time_ns. ``busbw_gbps`` = algbw x factor with n = group size:
  all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1;
  barrier and unknown types: null.
- Per rank and device, with K = union of compute kernels, C = union of collective kernels, M = union of
  copies (all streams of the device): ``compute_ns`` = |K|; ``comm_ns`` = |C|; ``exposed_comm_ns`` =
  |C \\ K| (communication not overlapped by compute); ``overlap_pct`` = 100 (|C| - |C \\ K|) / |C|;
  ``comm_only_ns`` = |C \\ (K u M)| (only collectives busy: the communication-bound time);
  ``memcpy_ns`` = |M|; ``exposed_memcpy_ns`` = |M \\ (K u C)|; ``busy_ns`` = |K u C u M| (equals the
  summary's busy_ns); ``idle_ns`` = ``gpu_span_ns`` - ``busy_ns``.
- ``ranks.wait_ns``: the sum of the rank's ``wait_ns`` over its collectives (how long they waited for the
  last rank to arrive; part of it may overlap the rank's own compute).
- ``stragglers`` table, per rank: ``times_last`` (instances it arrived last at, skew > 0 only),
  ``skew_caused_ns`` (sum of those instances' start skew).
"""

from __future__ import annotations

import json

import pandas as pd

from ..errors import UsageError
from ..storage.ranks import rank_ranges
from .result import Result

DESCRIPTION = ("Multi-rank run: collectives matched across ranks (bytes, algorithm/bus bandwidth, start/end "
               "skew, straggler); per rank compute, exposed communication, exposed memcpy, idle, overlap %.")
DEFINITION = __doc__.strip()

#: Bus-bandwidth factor per normalised collective type, as a SQL expression of n (the group size).
BUS_FACTOR_SQL = """CASE collective
    WHEN 'allreduce' THEN 2.0 * (n - 1) / n
    WHEN 'allgather' THEN (n - 1) / n::DOUBLE
    WHEN 'reducescatter' THEN (n - 1) / n::DOUBLE
    WHEN 'alltoall' THEN (n - 1) / n::DOUBLE
    WHEN 'broadcast' THEN 1.0 WHEN 'reduce' THEN 1.0 WHEN 'sendrecv' THEN 1.0
    ELSE NULL END"""


#: A run still in the store: `kernelscope rm` of its traces leaves the runs row behind.
_LIVE = "run_id IN (SELECT run_id FROM traces WHERE run_id IS NOT NULL)"


def run_traces(store, trace_ids=None, run: str | None = None) -> tuple[str | None, list[str]]:
    """(run id, trace ids) to analyse: the run ``run`` (id, unique prefix, or its name if unique), else the
    given traces, else the store's only run. UsageError when there is none or the choice is ambiguous."""
    if run is not None:
        rows = store.con.execute(f"SELECT run_id FROM runs WHERE starts_with(run_id, ?) AND {_LIVE} ORDER BY run_id",
                                 [str(run)]).fetchall()
        if not rows:  # the run's name (its folder's name), when one live run has it
            rows = store.con.execute(f"SELECT run_id FROM runs WHERE name = ? AND {_LIVE} ORDER BY run_id",
                                     [str(run)]).fetchall()
        if len(rows) != 1:
            live = store.con.execute(f"SELECT run_id FROM runs WHERE {_LIVE}").fetchall()
            known = ", ".join(r[0] for r in live) or "none"
            raise UsageError(f"no single run matches '{run}'; runs in the store: {known}.")
        run_id = rows[0][0]
    elif trace_ids:
        ids = list(trace_ids)
        runs = {r[0] for r in store.con.execute(
            "SELECT DISTINCT run_id FROM traces WHERE trace_id IN (SELECT unnest(?))", [ids]).fetchall()}
        many = len(ids) == 1 and len(runs) == 1 and None not in runs and store.con.execute(
            "SELECT 1 FROM runs WHERE run_id = ?", [next(iter(runs))]).fetchall()
        if many:  # one rank named: its whole run (not a process's other collector: nsys beside Kineto)
            run_id = runs.pop()
        else:
            return (runs.pop() if len(runs) == 1 else None), ids
    else:
        rows = store.con.execute(f"SELECT run_id FROM runs WHERE {_LIVE} ORDER BY run_id").fetchall()
        if not rows:
            raise UsageError("no multi-rank run in the store; ingest a folder of rank traces "
                             "(`kernelscope ingest DIR`) or give the rank TRACEs.")
        if len(rows) > 1:
            raise UsageError("the store holds several runs (" + ", ".join(r[0] for r in rows)
                             + "); choose one with -o run=RUN_ID.")
        run_id = rows[0][0]
    ids = [r[0] for r in store.con.execute(
        "SELECT trace_id FROM traces WHERE run_id = ? ORDER BY rank", [run_id]).fetchall()]
    return run_id, ids


def _ids_sql() -> str:
    return "(SELECT unnest($ids))"


def rank_breakdown(store, trace_ids) -> pd.DataFrame:
    """Per (trace, device): compute, comm, exposed comm, comm-only, memcpy, exposed memcpy, busy, span (ns): one
    sweep over every activity boundary (see the module docstring), run at ingest (storage/ranks.py,
    table device_time)."""
    return store.con.execute(
        f"""SELECT trace_id, device, compute_ns, comm_ns, exposed_comm_ns, comm_only_ns, memcpy_ns,
                   exposed_memcpy_ns, busy_ns, gpu_span_ns
            FROM device_time WHERE trace_id IN {_ids_sql()} ORDER BY trace_id, device""",
        {"ids": list(trace_ids)},
    ).df()


def comm_only_busy(store, trace_ids) -> pd.DataFrame:
    """Per (trace_id, device): ``comm_only_ns`` = time when only collective kernels are busy on the device
    (no compute kernel, no memcpy/memset on any stream): the communication-bound time, ns."""
    df = rank_breakdown(store, trace_ids)
    return df[["trace_id", "device", "comm_only_ns"]].reset_index(drop=True)


def _instances(store, ids) -> tuple[pd.DataFrame, pd.DataFrame]:
    arrivals = store.con.execute(
        f"""
        WITH c AS (
            SELECT t.rank, c.trace_id, coalesce(c.pg_name, '') AS pg, c.pg_seq, c.collective, c.group_size,
                   greatest(c.in_bytes, c.out_bytes) AS bytes, c.in_bytes IS NULL AND c.out_bytes IS NULL AS nob,
                   a.start_ns - coalesce(k.clock_offset_ns, 0) AS s, a.end_ns - coalesce(k.clock_offset_ns, 0) AS e
            FROM collectives c
            JOIN traces t ON t.trace_id = c.trace_id
            JOIN gpu_activities a ON a.trace_id = c.trace_id AND a.activity_id = c.activity_id
            LEFT JOIN rank_clocks k ON k.trace_id = c.trace_id
            WHERE c.trace_id IN {_ids_sql()}
        )
        SELECT pg, pg_seq, rank, trace_id, collective, group_size, bytes, nob, s AS start_ns, e AS end_ns,
               max(s) OVER i - s AS wait_ns,
               row_number() OVER (PARTITION BY pg, pg_seq ORDER BY s DESC, rank) = 1 AS last
        FROM c WINDOW i AS (PARTITION BY pg, pg_seq)
        ORDER BY pg, pg_seq, rank
        """,
        {"ids": list(ids)},
    ).df()
    store.con.register("ks_comm_arrivals", arrivals)
    try:
        inst = store.con.execute(
            f"""
            WITH g AS (
                SELECT pg, pg_seq, mode(collective) AS collective, count(DISTINCT collective) AS types,
                       count(*) AS ranks, coalesce(max(group_size), count(*)) AS n,
                       max(bytes) AS bytes, bool_and(nob) AS no_bytes,
                       min(start_ns) AS first_start_ns, max(start_ns) AS last_start_ns,
                       min(end_ns) AS first_end_ns, max(end_ns) AS last_end_ns,
                       min(rank) FILTER (WHERE last) AS straggler_rank
                FROM ks_comm_arrivals GROUP BY pg, pg_seq
            )
            SELECT pg AS process_group, pg_seq, collective, ranks, n AS group_size, bytes,
                   last_start_ns - first_start_ns AS start_skew_ns,
                   last_end_ns - first_end_ns AS end_skew_ns,
                   straggler_rank, last_end_ns - last_start_ns AS time_ns,
                   CASE WHEN last_end_ns > last_start_ns THEN bytes / (last_end_ns - last_start_ns) END
                       AS algbw_gbps,
                   CASE WHEN last_end_ns > last_start_ns THEN bytes / (last_end_ns - last_start_ns)
                       * ({BUS_FACTOR_SQL}) END AS busbw_gbps,
                   first_start_ns, last_end_ns, types
            FROM g ORDER BY first_start_ns, pg, pg_seq
            """
        ).df()
    finally:
        store.con.unregister("ks_comm_arrivals")
    return inst, arrivals


def comm(store, trace_ids=None, by=None, sweep=None, run: str | None = None, **_ignored) -> Result:
    """The communication analysis of one run (``run``: id or prefix; else the given traces; else the
    store's only run). See the module docstring for every definition."""
    run_id, ids = run_traces(store, trace_ids, run)
    if not ids:
        raise UsageError(f"run {run_id} has no traces.")
    tr = store.con.execute(
        """SELECT t.trace_id, t.rank, t.name, coalesce(k.clock_offset_ns, 0) AS clock_offset_ns
           FROM traces t LEFT JOIN rank_clocks k ON k.trace_id = t.trace_id
           WHERE t.trace_id IN (SELECT unnest(?)) ORDER BY t.rank, t.trace_id""", [ids]).df()
    if tr["rank"].duplicated().any():
        raise UsageError("two of the given traces have the same rank; give the traces of one run.")
    bd = rank_breakdown(store, ids)
    ranks = tr.merge(bd, on="trace_id", how="left")
    inst, arrivals = _instances(store, ids)
    counts = arrivals.groupby("trace_id").size().rename("collectives")
    ranks = ranks.merge(counts, left_on="trace_id", right_index=True, how="left")
    ranks["collectives"] = ranks["collectives"].fillna(0).astype("int64")
    waited = arrivals.groupby("trace_id")["wait_ns"].sum().rename("wait_ns")
    ranks = ranks.merge(waited, left_on="trace_id", right_index=True, how="left")
    ranks["wait_ns"] = ranks["wait_ns"].fillna(0).astype("int64")
    ranks["idle_ns"] = ranks["gpu_span_ns"] - ranks["busy_ns"]
    ranks["overlap_pct"] = [
        None if not c else 100.0 * (c - x) / c for c, x in zip(ranks["comm_ns"], ranks["exposed_comm_ns"])
    ]
    ranks = ranks[["rank", "trace_id", "name", "device", "gpu_span_ns", "busy_ns", "idle_ns", "compute_ns",
                   "comm_ns", "exposed_comm_ns", "overlap_pct", "comm_only_ns", "memcpy_ns",
                   "exposed_memcpy_ns", "collectives", "wait_ns", "clock_offset_ns"]]
    late = inst[inst["start_skew_ns"] > 0]
    strag = (late.groupby("straggler_rank")
             .agg(times_last=("pg_seq", "size"), skew_caused_ns=("start_skew_ns", "sum"))
             .reset_index().rename(columns={"straggler_rank": "rank"}))
    strag = tr[["rank"]].merge(strag, on="rank", how="left").fillna({"times_last": 0, "skew_caused_ns": 0})
    strag = strag.astype({"times_last": "int64", "skew_caused_ns": "int64"})
    strag = strag.sort_values(["skew_caused_ns", "rank"], ascending=[False, True]).reset_index(drop=True)
    run_row = store.con.execute("SELECT world_size, missing_ranks FROM runs WHERE run_id = ?", [run_id]).fetchall()
    missing = sorted(int(r) for r in json.loads(run_row[0][1] or "[]")) if run_row else []
    world = int(run_row[0][0]) if run_row else len(tr)  # a partial run: the run's world, not the traces present
    incomplete = inst[inst["ranks"] < inst["group_size"]]
    mixed = inst[inst["types"] > 1]
    no_bytes = int(arrivals["nob"].sum()) if len(arrivals) else 0
    warnings = []
    if missing:
        warnings.append(f"a partial run: {len(tr)} of {world} ranks present (missing ranks {rank_ranges(missing)}); "
                        "skews, stragglers and bandwidths are among the present ranks only")
    if len(incomplete) and not missing:
        warnings.append(f"{len(incomplete)} collective instances were seen on fewer ranks than their group size "
                        "(a rank's trace misses them: dropped records or a shorter capture)")
    if len(mixed):
        warnings.append(f"{len(mixed)} instances pair collectives of different types across ranks: the k-th "
                        "collective of a process group differs between ranks, so matching by order is wrong")
    if no_bytes:
        warnings.append(f"{no_bytes} collective kernels carry no message sizes (no collective args in the "
                        "trace): their bytes and bandwidths are null")
    top = strag.iloc[0] if len(strag) and strag["times_last"].iloc[0] > 0 else None
    scalars = {
        "run_id": run_id,
        "world_size": world,
        "collective_instances": int(len(inst)),
        "comm_bytes": int(inst["bytes"].fillna(0).sum()) if len(inst) else 0,
        "max_start_skew_ns": int(inst["start_skew_ns"].max()) if len(inst) else None,
        "median_start_skew_ns": int(inst["start_skew_ns"].quantile(0.5, interpolation="lower"))
        if len(inst) else None,
        "straggler_rank": None if top is None else int(top["rank"]),
        "straggler_skew_caused_ns": None if top is None else int(top["skew_caused_ns"]),
        "exposed_comm_ns_max": int(ranks["exposed_comm_ns"].max()) if ranks["exposed_comm_ns"].notna().any()
        else None,  # a rank without GPU activity has no exposed time
    }
    trust = {
        "instances_incomplete": int(len(incomplete)),
        "missing_ranks": rank_ranges(missing) or None,  # '1-63, 65-127'; None for a whole run
        "instances_mixed_types": int(len(mixed)),
        "collectives_without_sizes": no_bytes,
        "clock_offsets_applied": {int(r): int(o) for r, o in zip(tr["rank"], tr["clock_offset_ns"])},
    }
    return Result("comm", DEFINITION, scalars,
                  {"ranks": ranks.reset_index(drop=True), "collectives": inst.drop(columns=["types"]),
                   "stragglers": strag,
                   "arrivals": arrivals[["pg", "pg_seq", "rank", "start_ns", "end_ns", "wait_ns"]]
                   .rename(columns={"pg": "process_group"})},
                  warnings, trust)
