"""Link derivation at ingest: raw staged events (TEMP VIEW ``ks_raw`` over a scratch Parquet file) ->
the store's event tables. Derived tables are written to scratch Parquet files too (``materialize``), so
memory stays bounded by DuckDB's memory_limit whatever the trace's size; all derivation is SQL.

The final inserts (``insert_events``, the registry's "events" step) run inside the ingest transaction.
Definitions (DESIGN.md "Data model habits", METRICS.md):

- Times: stored ``start_ns = ts_ns + base_time_ns``, ``end_ns = start_ns + dur_ns`` (int64 ns, epoch).
- Nesting, per host thread (pid, tid): the result of a stack sweep over cpu_ops, annotations and launch
  calls in the order (start asc, end desc, annotation < op < launch, seq), computed out of core by
  ``links_sql`` (running open counts + ASOF joins; equal to the sweep on properly nested intervals). A cpu_op's
  parent is the innermost cpu_op still open at its start (an op is open at t when start <= t < end); ``depth``
  counts the open ops; ``top_op_id`` is the outermost open op (the op itself when top-level). A launch call's
  leaf operator is the innermost op open at the call's start. Annotations are phases, not operators: they nest
  among themselves (``parent_ann_id``) and give ops and launches a ``phase_id``; GPU annotations nest
  per (device, stream). Nothing crosses threads: autograd-thread launches stay on their thread.
- Activity -> launch call: equal correlation within the trace (host correlations must be unique).
- Graph flag: the launch call's type is 'graph', or the correlation maps to more than one kernel.
- ext_op_id: the cpu_op on the launch's process whose External id equals the launch's External id;
  only when the trace's External ids are operator ids (some launch has External id != correlation);
  ``ext_agrees = ext_op_id IS NOT DISTINCT FROM leaf_op_id`` where ext_op_id is known, else null.
- busy_intervals: per device, the union of kernel/memcpy/memset intervals with dur_ns > 0.
- The tables derived from these rows (launch splits, idle gaps, signatures, collectives, device time) are
  other steps of storage/derivations.py, the registry ingest runs; ``insert_events`` is its first step.
"""

from __future__ import annotations

import csv
import pathlib
from importlib import resources

import pyarrow as pa

from .intervals import union_sql

GPU_KINDS_SQL = "('kernel', 'memcpy', 'memset')"
LAUNCH_KINDS_SQL = "('runtime', 'driver')"
#: nsys-style version suffix on API names: cudaLaunchKernel_v7000 -> cudaLaunchKernel.
API_SUFFIX_RE = r"_v[0-9]+$"

_NULL_KEY = -(2**62)


def launch_api_table() -> pa.Table:
    """The package's launch API table (data/launch_apis.csv): name -> launch_type, with its source."""
    text = resources.files("kernelscope").joinpath("data", "launch_apis.csv").read_text("utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    return pa.table(
        {
            "api_name": [r["name"] for r in rows],
            "launch_type": [r["launch_type"] for r in rows],
        }
    )


def _events_sql() -> str:
    """The sweep's items: cpu_ops (k=1), annotations (k=0), runtime/driver calls (k=2) in groups
    (g, p, t): host thread (0, pid, tid) or, for GPU annotations, (1, device, stream)."""
    return f"""
        SELECT seq,
               CASE WHEN kind IN ('annotation', 'gpu_annotation') THEN 0
                    WHEN kind = 'cpu_op' THEN 1 ELSE 2 END AS k,
               CASE WHEN kind = 'gpu_annotation' THEN 1 ELSE 0 END AS g,
               coalesce(CASE WHEN kind = 'gpu_annotation' THEN device ELSE pid END, {_NULL_KEY}) AS p,
               coalesce(CASE WHEN kind = 'gpu_annotation' THEN stream ELSE tid END, {_NULL_KEY}) AS t,
               ts_ns AS s,
               CASE WHEN kind IN {LAUNCH_KINDS_SQL} THEN ts_ns ELSE ts_ns + coalesce(dur_ns, 0) END AS e
        FROM ks_raw
        WHERE kind IN ('cpu_op', 'annotation', 'gpu_annotation', 'runtime', 'driver')
          AND ts_ns IS NOT NULL
    """


def open_counts_sql() -> str:
    """Per item: ``od``/``ad`` = cpu_ops/annotations open at its start, ``pos`` = its sweep rank.

    Sweep order within a group: (start asc, end desc, annotation < op < launch, seq); a launch's end
    is its start. An event stream holds +1 at each op/annotation start and -1 at its end, sorted by
    (time, ends of positive-length intervals before starts, then sweep order, a start before its own
    end); the running sums just before an item's start count the ops/annotations open there
    (start <= t < end and earlier in sweep order). For an op or annotation that is its depth.
    """
    return f"""
        WITH items AS (
            SELECT *, row_number() OVER (PARTITION BY g, p, t ORDER BY s, e DESC, k, seq) AS rn
            FROM ({_events_sql()})
        ), stream AS (
            SELECT g, p, t, s AS time, 1 AS ph, rn, 0 AS sub,
                   (k = 1)::INTEGER AS dop, (k = 0)::INTEGER AS dann, seq, k, s, e
            FROM items
            UNION ALL
            SELECT g, p, t, e, CASE WHEN e > s THEN 0 ELSE 1 END, rn, 1,
                   -(k = 1)::INTEGER, -(k = 0)::INTEGER, NULL, NULL, NULL, NULL
            FROM items WHERE k < 2
        )
        SELECT g, p, t, seq, k, s, e, rn AS pos,
               sum(dop) OVER w - dop AS od, sum(dann) OVER w - dann AS ad
        FROM stream
        WINDOW w AS (PARTITION BY g, p, t ORDER BY time, ph, rn, sub ROWS UNBOUNDED PRECEDING)
        QUALIFY sub = 0
    """


def links_sql(opened: str = "ks_open") -> str:
    """One row per cpu_op, annotation and runtime/driver call: (seq, up, top, depth, phase, crossing),
    from ``opened`` (the rows of ``open_counts_sql``).

    up: ops -> parent op; launches -> leaf op; annotations -> parent annotation. top: ops -> outermost
    op (itself when top-level); launches -> outermost op. depth: ops only. phase: ops and launches ->
    innermost annotation. For properly nested intervals the open ops form a chain, so the innermost
    op open at an item with ``od`` open ops is the latest (in sweep order) op of depth od-1 before it
    (an ASOF join), and the outermost the latest op of depth 0 up to it (a window); the same for
    annotations. This equals a stack sweep on nested intervals. crossing: the item is not nested in
    ``up`` (it ends after ``up`` ends, or ``up`` ended before it started); such links follow the
    running counts.
    """
    return f"""
        WITH ops AS (SELECT g, p, t, pos, seq, e, od AS d FROM {opened} WHERE k = 1),
        anns AS (SELECT g, p, t, pos, seq, e, ad AS d FROM {opened} WHERE k = 0),
        px AS (
            SELECT *, od - 1 AS up_d, ad - 1 AS ph_d,
                   last_value(CASE WHEN k = 1 AND od = 0 THEN seq END IGNORE NULLS)
                       OVER (PARTITION BY g, p, t ORDER BY pos ROWS UNBOUNDED PRECEDING) AS top0
            FROM {opened} WHERE k > 0
        ),
        ax AS (SELECT *, ad - 1 AS up_d FROM {opened} WHERE k = 0)
        SELECT x.seq, u.seq AS up,
               CASE WHEN x.od > 0 OR x.k = 1 THEN x.top0 END AS top,
               CASE WHEN x.k = 1 THEN x.od::INTEGER END AS depth,
               ph.seq AS phase,
               coalesce(u.e < x.e OR u.e <= x.s, false) AS crossing
        FROM px x
        ASOF LEFT JOIN ops u
          ON u.g = x.g AND u.p = x.p AND u.t = x.t AND u.d = x.up_d AND x.pos > u.pos
        ASOF LEFT JOIN anns ph
          ON ph.g = x.g AND ph.p = x.p AND ph.t = x.t AND ph.d = x.ph_d AND x.pos > ph.pos
        UNION ALL
        SELECT x.seq, u.seq, NULL, NULL, NULL, coalesce(u.e < x.e OR u.e <= x.s, false)
        FROM ax x
        ASOF LEFT JOIN anns u
          ON u.g = x.g AND u.p = x.p AND u.t = x.t AND u.d = x.up_d AND x.pos > u.pos
    """


def materialize(con, name: str, select_sql: str, scratch) -> None:
    """Write ``select_sql`` to ``scratch/name.parquet`` (streaming, spills) and make ``name`` a TEMP
    VIEW over it, so derived tables live on disk, not in memory."""
    path = str(pathlib.Path(scratch) / f"{name}.parquet").replace("'", "''")
    con.execute(f"COPY ({select_sql}) TO '{path}' (FORMAT parquet, COMPRESSION lz4)")
    con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM read_parquet('{path}')")


def derive_links(con, scratch) -> int:
    """TEMP VIEW ``ks_links`` (see ``links_sql``); returns the number of crossing (not nested) items."""
    materialize(con, "ks_open", open_counts_sql(), scratch)
    materialize(con, "ks_links", links_sql("ks_open"), scratch)
    return con.execute("SELECT count(*) FROM ks_links WHERE crossing").fetchall()[0][0]


def ext_ids_are_operator_ids(con) -> bool:
    """True when some launch's External id differs from its correlation (torch >= ~2.3 traces)."""
    n = con.execute(
        f"""SELECT count(*) FROM ks_raw WHERE kind IN {LAUNCH_KINDS_SQL}
            AND external_id IS NOT NULL AND correlation IS NOT NULL AND external_id <> correlation"""
    ).fetchall()[0][0]
    return n > 0


def build_launch_table(con, scratch) -> None:
    """TEMP VIEW ``ks_launch``: every runtime/driver call with its type, activity count and links."""
    con.register("ks_api_names", launch_api_table())
    ext_mode = ext_ids_are_operator_ids(con)
    ext_sql = (
        f"""ext AS (
              SELECT l.seq, o.seq AS op
              FROM ks_raw l JOIN ks_raw o
                ON o.kind = 'cpu_op' AND o.external_id = l.external_id
               AND o.pid IS NOT DISTINCT FROM l.pid
              WHERE l.kind IN {LAUNCH_KINDS_SQL}
              QUALIFY row_number() OVER (PARTITION BY l.seq
                        ORDER BY (o.ts_ns <= l.ts_ns) DESC, o.ts_ns DESC, o.seq) = 1
            )"""
        if ext_mode
        else "ext AS (SELECT NULL::BIGINT AS seq, NULL::BIGINT AS op WHERE false)"
    )
    materialize(
        con,
        "ks_launch",
        f"""
        WITH acts AS (
            SELECT correlation, count(*) AS n,
                   count(*) FILTER (WHERE kind = 'kernel') AS kernels,
                   min(kind) AS first_kind, count(DISTINCT kind) AS kinds
            FROM ks_raw WHERE kind IN {GPU_KINDS_SQL} AND correlation IS NOT NULL
            GROUP BY correlation
        ), {ext_sql}
        SELECT r.seq, r.kind AS api, r.name, r.pid, r.tid, r.ts_ns, coalesce(r.dur_ns, 0) AS dur_ns,
               r.correlation, r.external_id,
               coalesce(n.launch_type,
                        CASE WHEN a.kinds = 1 THEN a.first_kind ELSE 'other' END) AS launch_type,
               coalesce(a.n, 0)::INTEGER AS activities,
               coalesce(a.kernels, 0) AS kernels,
               lk.up AS leaf_op_id, lk.top AS top_op_id, lk.phase AS phase_id,
               x.op AS ext_op_id,
               CASE WHEN x.op IS NULL THEN NULL ELSE x.op IS NOT DISTINCT FROM lk.up END AS ext_agrees
        FROM ks_raw r
        LEFT JOIN ks_api_names n ON n.api_name = regexp_replace(r.name, '{API_SUFFIX_RE}', '')
        LEFT JOIN acts a ON a.correlation = r.correlation
        LEFT JOIN ks_links lk ON lk.seq = r.seq
        LEFT JOIN ext x ON x.seq = r.seq
        WHERE r.kind IN {LAUNCH_KINDS_SQL} AND r.ts_ns IS NOT NULL
        """,
        scratch,
    )
    con.unregister("ks_api_names")


def insert_events(con, trace_id: str, base: int) -> None:
    """Insert every derived event table for one trace, each sorted for zone-map pruning."""
    params = {"tid": trace_id, "base": int(base)}

    def run(sql: str) -> None:
        con.execute(sql, {k: v for k, v in params.items() if f"${k}" in sql})

    run(
        """
        INSERT INTO cpu_ops
        SELECT $tid, r.seq, r.name, r.pid, r.tid, r.ts_ns + $base, coalesce(r.dur_ns, 0),
               r.ts_ns + coalesce(r.dur_ns, 0) + $base, r.external_id, r.seq_number, r.fwd_thread_id,
               r.input_dims, r.input_types, r.input_strides, r.concrete_inputs,
               l.up, l.top, l.depth, l.phase, r.text, NULL, NULL, NULL
        FROM ks_raw r LEFT JOIN ks_links l ON l.seq = r.seq
        WHERE r.kind = 'cpu_op' AND r.ts_ns IS NOT NULL
        ORDER BY r.pid, r.tid, r.ts_ns, r.seq
        """
    )
    run(
        """
        INSERT INTO python_calls
        SELECT $tid, seq, name, pid, tid, ts_ns + $base, coalesce(dur_ns, 0),
               ts_ns + coalesce(dur_ns, 0) + $base, NULL, NULL, NULL, NULL
        FROM ks_raw WHERE kind = 'python' AND ts_ns IS NOT NULL
        ORDER BY pid, tid, ts_ns, seq
        """
    )
    run(
        """
        INSERT INTO launches (trace_id, launch_id, api, name, pid, tid, start_ns, dur_ns, end_ns,
                              correlation, external_id, launch_type, activities, leaf_op_id,
                              top_op_id, ext_op_id, ext_agrees, phase_id)
        SELECT $tid, seq, api, name, pid, tid, ts_ns + $base, dur_ns, ts_ns + dur_ns + $base,
               correlation, external_id, launch_type, activities, leaf_op_id, top_op_id,
               ext_op_id, ext_agrees, phase_id
        FROM ks_launch ORDER BY pid, tid, ts_ns, seq
        """
    )
    run(
        f"""
        INSERT INTO gpu_activities
        SELECT $tid, a.seq, a.kind, a.name, a.device, a.stream, a.ts_ns + $base,
               coalesce(a.dur_ns, 0), a.ts_ns + coalesce(a.dur_ns, 0) + $base,
               a.correlation, a.external_id, l.seq, l.leaf_op_id, l.top_op_id,
               coalesce(l.launch_type = 'graph', false) OR coalesce(k.kernels, 0) > 1,
               a.grid_x, a.grid_y, a.grid_z, a.block_x, a.block_y, a.block_z,
               a.registers_per_thread, a.shared_memory_bytes, a.blocks_per_sm, a.warps_per_sm,
               a.est_occupancy_pct, a.bytes, NULL
        FROM ks_raw a
        LEFT JOIN ks_launch l ON l.correlation = a.correlation
        LEFT JOIN (SELECT correlation, count(*) AS kernels FROM ks_raw
                   WHERE kind = 'kernel' AND correlation IS NOT NULL GROUP BY correlation) k
               ON k.correlation = a.correlation
        WHERE a.kind IN {GPU_KINDS_SQL} AND a.ts_ns IS NOT NULL
        ORDER BY a.device, a.stream, a.ts_ns, a.seq
        """
    )
    run(
        """
        INSERT INTO annotations
        SELECT $tid, r.seq,
               CASE WHEN r.kind = 'gpu_annotation' THEN 'gpu'
                    WHEN regexp_matches(coalesce(r.name, ''), '^ProfilerStep#[0-9]+$') THEN 'step'
                    ELSE 'user' END,
               r.name, r.pid,
               CASE WHEN r.kind = 'gpu_annotation' THEN r.stream ELSE r.tid END,
               CASE WHEN r.kind = 'gpu_annotation' THEN r.device END,
               r.ts_ns + $base, coalesce(r.dur_ns, 0), r.ts_ns + coalesce(r.dur_ns, 0) + $base,
               TRY_CAST(regexp_extract(r.name, '^ProfilerStep#([0-9]+)$', 1) AS INTEGER),
               l.up
        FROM ks_raw r LEFT JOIN ks_links l ON l.seq = r.seq
        WHERE r.kind IN ('annotation', 'gpu_annotation') AND r.ts_ns IS NOT NULL
        ORDER BY r.kind, r.pid, 6, r.ts_ns, r.seq
        """
    )
    run(
        """
        INSERT INTO other_events
        SELECT $tid, seq, kind, cat, name, pid, tid, device, stream,
               ts_ns + $base, dur_ns, correlation, external_id, coalesce(text, pid_text)
        FROM ks_raw WHERE kind IN ('sync', 'instant', 'other')
           OR (kind IN ('cpu_op', 'annotation', 'gpu_annotation', 'python', 'runtime', 'driver',
                        'kernel', 'memcpy', 'memset') AND ts_ns IS NULL)
        ORDER BY device, pid, tid, ts_ns, seq
        """
    )
    run(
        """
        INSERT INTO flows
        SELECT $tid, flow_id, cat, flow_phase, pid, tid, ts_ns + $base
        FROM ks_raw WHERE kind = 'flow' ORDER BY pid, tid, ts_ns, seq
        """
    )
    run(
        """
        INSERT INTO threads
        SELECT DISTINCT $tid, pid, tid, name, text
        FROM ks_raw WHERE kind = 'meta' AND name IS NOT NULL
        ORDER BY 2, 3, 4
        """
    )
    run(
        f"""
        INSERT INTO busy_intervals
        WITH a AS (
            SELECT device, ts_ns + $base AS s, ts_ns + dur_ns + $base AS e
            FROM ks_raw
            WHERE kind IN {GPU_KINDS_SQL} AND dur_ns > 0 AND device IS NOT NULL
              AND ts_ns IS NOT NULL
        )
        SELECT $tid, device, s, e FROM ({union_sql("a", by=("device",), start="s", end="e")}) ORDER BY device, s
        """,
    )
