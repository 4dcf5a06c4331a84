"""A run of many ranks into the store: rank files parsed, linked and derived in parallel worker processes (each
into a DuckDB of its own, with the registry's steps, storage/derivations.py), then ONE transaction inserts the
trace rows, each derived table once over all ranks, the run row and the per-rank clock offsets
(``ingest_rank_run``). Which traces form a run and their ranks: storage/ranks.py.
"""

from __future__ import annotations

import os
import pathlib
import time
from dataclasses import dataclass

from ..errors import KernelscopeError, ParseError, StoreError, UsageError
from ..parsers.schema import TraceMeta
from . import derivations, ranks, rawfacts, sizing, staging
from .engine import LOCAL, Engine, run_ray
from .inserts import insert_rows
from .onetrace import IngestResult, failed
from .rundir import run_dir_parts
from .tracerow import (
    RankOf,
    TraceInput,
    TraceRecord,
    hash_file,
    insert_labels,
    new_trace_id,
    stored_id,
    to_json,
)

#: Rank trace files smaller than this (on disk) are loaded into an in-memory worker DuckDB.
WORKER_IN_MEMORY_BYTES = 32 << 20


def _placeholder(i: int) -> str:
    return f"__rank_job_{i}__"


@dataclass(frozen=True)
class Parsed:
    """What a worker returns for one rank file: the parser's meta, the events staged, what the staged trace
    says (``Staged``), the tables it wrote (``t_<table>.parquet``), the settings of a retry after DuckDB ran
    out of memory (None when none was needed) and the trace id in its files (``_placeholder(job)``, or with
    ``final_ids`` the id a fresh store gives it)."""

    meta: TraceMeta
    rows: int
    staged: staging.Staged
    tables: list
    retried: sizing.Resources | None
    written_id: str


def _parse_and_derive(path: str, out: str, python_functions: bool, res: sizing.Resources | None = None,
                      job: int = 0, salvage: bool = False, final_ids: bool = False) -> Parsed:
    """Worker: parse one trace into ``out``/raw.parquet, derive its links and fill every derived table with the
    registry's steps (``derivations.run_steps``, trace_id = ``_placeholder(job)``) in a DuckDB file of its own in
    ``out`` (it spills: memory stays bounded), then write every table it filled to ``out``/t_<table>.parquet in
    its insert order. ``res``: the connection's threads and memory (``ingest_resources`` of the parent, which
    knows how many workers share the machine). ``final_ids`` (``ingest --parquet``): the trace id is the one a
    fresh store gives the file (its content hash's first 12 digits) and the files are zstd, as the dataset's, so
    the driver can move them into place (``_publish_all``)."""
    import duckdb

    from ..parsers import open_trace
    from .store import connect_config, disable_bad_optimizers, migrations

    folder = pathlib.Path(out)
    reader = open_trace(pathlib.Path(path), python_functions=python_functions, salvage=salvage)
    staged_files = staging.stage(reader, folder / "raw.parquet")
    rows = staged_files.rows
    meta = reader.meta
    # a small rank stays in memory (creating the schema in a file costs ~3x more); a large one spills to a file
    small = pathlib.Path(path).stat().st_size < WORKER_IN_MEMORY_BYTES
    res = res or sizing.ingest_resources()
    retried = None
    while True:
        con = duckdb.connect(":memory:" if small else str(folder / "w.duckdb"), config=connect_config())
        try:
            con.execute("SET enable_progress_bar = false")
            disable_bad_optimizers(con)
            sizing.apply_resources(con, res)  # as the one-file path derives (bounded memory)
            sizing.small_trace_threads(con, rows)
            for _version, _name, sql in migrations():
                con.execute(sql)
            staging.raw_view(con, staged_files)
            facts = rawfacts.raw_facts(con, meta)
            staged = staging.derive_staged(con, folder, meta, path, facts)
            written_id = (meta.content_hash or hash_file(path))[:12] if final_ids else _placeholder(job)
            derivations.run_steps(con, written_id, staged.base)
            filled = [t for (t,) in con.execute(
                """SELECT DISTINCT c.table_name FROM information_schema.columns c
                   JOIN information_schema.tables t ON t.table_name = c.table_name AND t.table_schema = c.table_schema
                   WHERE c.table_schema = 'main' AND t.table_type = 'BASE TABLE' AND c.column_name = 'trace_id'
                   ORDER BY 1""").fetchall()
                if con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]]
            con.execute("SET preserve_insertion_order = true")  # the files keep each table's stored order
            for table in filled:
                con.execute(f"COPY \"{table}\" TO {staging.sql_path(folder / f't_{table}.parquet')} "
                            f"(FORMAT parquet, COMPRESSION {'zstd' if final_ids else 'lz4'})")
            break
        except Exception as exc:
            forced = bool((os.environ.get(sizing.MEMORY_ENV) or "").strip())
            nxt = sizing.fallback_resources(res, forced) if sizing.is_oom(exc) else None
            if nxt is None:
                raise
            res = retried = nxt  # a fresh database each attempt: nothing of the failed one is left
        finally:
            con.close()
            for leftover in ("w.duckdb", "w.duckdb.wal"):
                (folder / leftover).unlink(missing_ok=True)
    return Parsed(meta, rows, staged, filled, retried, written_id)


def _map(fn, calls: list[tuple], workers: int, engine: Engine) -> list:
    """``fn(*call)`` for each call: as Ray tasks (``engine``, storage/engine.py), in ``workers`` spawned processes
    when > 1, else here (stopping at the first call that raises); the outcomes in call order, a call that raised
    giving its exception."""
    if engine.kind == "ray":
        return run_ray(fn, calls, engine.address)

    def outcome(get):
        try:
            return get()
        except Exception as exc:
            return exc
    if workers <= 1:
        out = []
        for c in calls:
            out.append(outcome(lambda c=c: fn(*c)))
            if isinstance(out[-1], Exception):
                break
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")  # the parent holds DuckDB threads: never fork it
    with ProcessPoolExecutor(max_workers=min(workers, len(calls)), mp_context=ctx) as pool:
        futures = [pool.submit(fn, *c) for c in calls]
        return [outcome(f.result) for f in futures]


def _parse_all(jobs, python_functions: bool, workers: int, salvage: bool = False,
               engine: Engine = LOCAL, final_ids: bool = False) -> list[Parsed]:
    """Parse and derive (path, folder) jobs (``_map``); results in job order. The first failed job's error is
    raised, naming its rank file in one line."""
    res = sizing.ingest_resources(workers)  # threads and memory of each worker's connection, sized together
    calls = [(str(p), str(o), python_functions, res, i, salvage, final_ids) for i, (p, o) in enumerate(jobs)]
    out = []
    for (path, _o), o in zip(jobs, _map(_parse_and_derive, calls, workers, engine)):
        if isinstance(o, KernelscopeError):  # which rank file failed, in the one line
            msg = str(o).strip().splitlines()[0] if str(o).strip() else type(o).__name__
            raise ParseError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from None
        if isinstance(o, BaseException):
            if type(o).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
                raise o
            raise sizing.db_error(path, o, rank_files=True) from None
        out.append(o)
    return out


def publish_rank(folder: str, tables: list[str], trace_id: str, run_id: str, rank: int, out: str) -> None:
    """Worker (or Ray task) of ``ingest --parquet`` for a rank whose trace id is not the one its files were
    written with (``_publish_all``): its derived tables, read from the files its ``_parse_and_derive`` wrote in
    ``folder``, written with ``trace_id`` as its partitions of the Parquet dataset at ``out`` (the layout of
    ``kernelscope export --parquet``, storage/export.py), in their order."""
    import duckdb

    from .export import partition_path
    from .store import connect_config

    con = duckdb.connect(":memory:", config=connect_config())
    try:
        con.execute("SET preserve_insertion_order = true")
        for table in tables:
            dest = partition_path(out, table, run_id, rank)
            dest.parent.mkdir(parents=True, exist_ok=True)
            con.execute(f"COPY (SELECT * REPLACE (? AS trace_id) FROM read_parquet("
                        f"{staging.sql_path(pathlib.Path(folder) / f't_{table}.parquet')})) TO "
                        f"{staging.sql_path(dest)} (FORMAT parquet, COMPRESSION zstd)", [trace_id])
    finally:
        con.close()


def _publish_all(con, out: pathlib.Path, run_id: str, folders, tables, mapping, ranks_of, workers: int,
                 engine: Engine) -> None:
    """Every rank's derived tables as its partitions of the dataset at ``out``: the files its worker wrote with
    the trace id the run got (``final_ids``) are moved into place (the scratch folder is beside ``out``, on
    its filesystem); a rank whose id came out otherwise (two ranks sharing the hash's first 12 digits) is
    written again with its id (``publish_rank``, on the engine). Then, for the rank clock offsets
    (``ranks.estimate_offsets``), the collectives and their kernels are read back into ``con``'s tables."""
    from .export import partition_path

    again = []
    for folder, ts, (written, tid, _pos) in zip(folders, tables, mapping):
        if written != tid:
            again.append((str(folder), list(ts), tid, run_id, ranks_of[tid], str(out)))
            continue
        for table in ts:
            dest = partition_path(out, table, run_id, ranks_of[tid])
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(pathlib.Path(folder) / f"t_{table}.parquet", dest)
    for o in _map(publish_rank, again, workers, engine) if again else ():
        if isinstance(o, BaseException):
            raise o

    def files(table):
        got = [partition_path(out, table, run_id, ranks_of[tid]) for (_tmp, tid, _pos) in mapping]
        return [f for f in got if f.exists()]
    if files("collectives"):
        for table, where in (("collectives", ""), ("gpu_activities", " WHERE (trace_id, activity_id) IN "
                                                  "(SELECT (trace_id, activity_id) FROM collectives)")):
            listed = "[" + ", ".join(staging.sql_path(f) for f in files(table)) + "]"
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet({listed}, "
                        f"hive_partitioning = false){where}")


def _insert_rank_tables(con, folders, tables, mapping) -> None:
    """One INSERT per event table over every rank's t_<table>.parquet (in rank order, each file in its
    own order), the placeholder trace ids replaced by the real ones. ``tables``: per folder, the tables
    its worker wrote."""
    con.execute("CREATE OR REPLACE TEMP TABLE ks_rank_map (tmp VARCHAR, trace_id VARCHAR, pos INTEGER)")
    insert_rows(con, "ks_rank_map", mapping)
    con.execute("SET preserve_insertion_order = true")
    try:
        for table in sorted(set().union(*map(set, tables))):
            files = "[" + ", ".join(staging.sql_path(f / f"t_{table}.parquet") for f, ts in zip(folders, tables)
                                    if table in ts) + "]"
            con.execute(
                f"""INSERT INTO "{table}"
                    SELECT x.* EXCLUDE (file_row_number) REPLACE (m.trace_id AS trace_id)
                    FROM read_parquet({files}, file_row_number = true) x
                    JOIN ks_rank_map m ON m.tmp = x.trace_id
                    ORDER BY m.pos, x.file_row_number"""
            )
    finally:
        con.execute("SET preserve_insertion_order = false")
        con.execute("DROP TABLE IF EXISTS ks_rank_map")


def ingest_rank_run(store, folder, members, *, labels=None, python_functions=True,
                    salvage=False, engine: Engine = LOCAL, publish: pathlib.Path | None = None) -> list[IngestResult]:
    """Ingest the rank traces ``members`` (``ranks.Member``) of ``folder`` as ONE run in ONE transaction.

    Rank files are parsed, linked and turned into derived tables in parallel processes
    (``ranks.parse_workers``: bounded by free cores and available memory; ``_parse_and_derive``), each
    writing Parquet files to the scratch folder; then one transaction inserts the trace rows, each derived
    table once over all ranks, the run row and the per-rank clock offsets. Any failure (a bad file, a rank
    collision, mixed runs) gives one 'failed' result for the folder and leaves no rows. A partial run (ranks of
    the world size without a trace) is ingested, its missing ranks stored (``runs.missing_ranks``) and named on
    every rank's line. Already stored as this run, or as ranks of one stored run (one file of a run ingested
    again): one 'skipped' result per rank. Results: one per rank, in rank order (message names the rank and its
    source).

    ``publish`` (``ingest --parquet DIR``): the workers (or Ray tasks) write each rank's derived tables as its
    partitions of the Parquet dataset at ``publish`` instead of the transaction inserting them; ``store`` then
    holds the run's own rows (traces, labels, runs, rank clocks, telemetry) for ``export_parquet`` to add.
    """
    folder = pathlib.Path(folder)
    t0 = time.perf_counter()
    con = store.con
    if store.read_only:
        raise StoreError(f"store {store.path} is open read-only; cannot ingest")
    try:
        ranks.check_members(folder, members)  # what the names/heads say, before any parsing
        given: dict[str, TraceInput] = {}
        for m in members:
            given[m.name] = (run_dir_parts(m.path, labels) if m.kind == "run"
                             else TraceInput(name=m.name, labels=dict(labels or {})))
    except KernelscopeError as exc:
        return [failed(folder, exc, t0)]
    sizes = [ranks.trace_file(m.kind, m.path).stat().st_size for m in members]
    workers = ranks.parse_workers(len(members), sum(sizes))
    with sizing.ingest_settings(con), staging.scratch(store) as scratch:
        jobs = [(ranks.trace_file(m.kind, m.path), scratch / f"m{i}") for i, m in enumerate(members)]
        for _p, folder_i in jobs:
            folder_i.mkdir()
        t_parse = time.perf_counter()
        try:
            parsed = _parse_all(jobs, python_functions, workers, salvage, engine, final_ids=publish is not None)
        except KernelscopeError as exc:
            return [failed(folder, exc, t0)]
        except OSError as exc:
            return [failed(folder, ParseError(f"cannot read a rank trace: {exc.strerror or exc}"), t0)]
        for m, p in zip(members, parsed):
            m.set_distributed(p.meta.distributed_info or ({"rank": p.meta.rank, "world_size": p.meta.world_size}
                                                          if p.meta.rank is not None else None))
        try:
            world, rank_source, missing = ranks.check_members(folder, members)
        except KernelscopeError as exc:
            return [failed(folder, exc, t0)]
        hashes = [p.meta.content_hash or hash_file(path) for (path, _o), p in zip(jobs, parsed)]
        run_id = ranks.run_id_for(hashes)
        stored = {h: stored_id(con, h) for h in hashes}
        if all(stored.values()):
            in_run = {r[0] for r in con.execute(
                "SELECT DISTINCT run_id FROM traces WHERE trace_id IN (SELECT unnest(?))",
                [list(stored.values())]).fetchall()}
            if len(in_run) == 1 and None not in in_run:  # this run, or ranks of one stored run given again
                (stored_run,) = in_run
                return [IngestResult(str(m.path), "skipped", stored[h], f"already stored as {stored[h]} "
                                     f"(rank {m.rank} of run {stored_run})", p.rows, time.perf_counter() - t0)
                        for m, h, p in sorted(zip(members, hashes, parsed), key=lambda x: x[0].rank)]
        clash = next(((m, stored[h]) for m, h in zip(members, hashes) if stored[h]), None)
        if clash:
            return [failed(folder, UsageError(
                f"rank {clash[0].rank} ({clash[0].name}) is already stored as trace {clash[1]} outside this "
                f"run; remove it (`kernelscope rm {clash[1]}`) to ingest the run"), t0)]
        order = sorted(range(len(members)), key=lambda i: members[i].rank)
        partial = ranks.partial_note(world, len(members), missing)
        results: list[IngestResult] = []
        t_insert = time.perf_counter()
        t_parse = t_insert - t_parse
        con.execute("BEGIN TRANSACTION")
        try:
            hosts, mapping = {}, []
            for pos, i in enumerate(order):
                m, p, h = members[i], parsed[i], hashes[i]
                part = given[m.name]
                warnings = staging.trace_warnings(p.meta, p.staged, in_run=True)
                if partial:
                    warnings.append(partial + " (in this trace's run; communication numbers cover these ranks only)")
                trace_id = new_trace_id(con, h)
                TraceRecord.build(
                    trace_id, jobs[i][0], h, p.meta, p.staged, p.rows, warnings, TraceInput(
                        name=part.name, run_id=run_id, provenance=part.provenance),
                    RankOf(m.rank, m.rank_source, world),
                ).insert(con)
                insert_labels(con, trace_id, part.labels)
                if part.extra is not None:
                    part.extra(con, trace_id)
                hosts[trace_id] = part.host
                mapping.append((parsed[i].written_id, trace_id, pos))
                notes = "".join(f"; {n}" for n in ([partial] if partial else []) + rawfacts.facts_notes(p.staged.facts))
                if p.retried:
                    notes += (f"; DuckDB ran out of memory and derived the tables again with {p.retried.threads} "
                              f"thread{'s' if p.retried.threads != 1 else ''} and {p.retried.memory}")
                results.append(IngestResult(
                    str(m.path), "ingested", trace_id,
                    f"rank {m.rank} of {world} (rank from {m.rank_source}) in run {run_id}{notes}", p.rows, 0.0))
            folders, tables = [jobs[i][1] for i in order], [parsed[i].tables for i in order]
            if publish is None:
                _insert_rank_tables(con, folders, tables, mapping)
            else:
                ranks_of = {tid: members[i].rank for i, (_tmp, tid, _pos) in zip(order, mapping)}
                _publish_all(con, publish, run_id, folders, tables, mapping, ranks_of, workers, engine)
            method = ranks.estimate_offsets(con, run_id, hosts)
            con.execute("""INSERT INTO runs (run_id, name, source, world_size, ranks, rank_source, offset_method,
                                             ingested_ns, missing_ranks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                        [run_id, folder.resolve().name, str(folder.resolve()), world, len(members),
                         rank_source, method, time.time_ns(), to_json(missing)])
            con.execute("COMMIT")
        except BaseException as exc:
            try:
                con.execute("ROLLBACK")
            except Exception:
                pass
            if isinstance(exc, KernelscopeError):
                return [failed(folder, exc, t0)]
            raise
    seconds = time.perf_counter() - t0
    t_insert = time.perf_counter() - t_insert
    for r in results:
        r.seconds = seconds / max(1, len(results))
        by = (f"{len(members)} Ray tasks" if engine.kind == "ray"
              else f"{workers} process{'es' if workers > 1 else ''}")
        r.message += (f"; {len(members)} ranks parsed by {by} in {t_parse:.1f} s, derived and "
                      f"{'inserted' if publish is None else 'written to ' + str(publish)} in {t_insert:.1f} s")
    return results
