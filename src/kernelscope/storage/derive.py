"""Link derivation at ingest: raw staged events (TEMP VIEW ``ks_raw`` over a scratch Parquet file) ->
the store's event tables. Derived tables are written to scratch Parquet files too (``materialize``), so
memory stays bounded by DuckDB's memory_limit whatever the trace's size; all derivation is SQL.

The final inserts run inside the ingest transaction. Definitions (DESIGN.md "Data model habits", METRICS.md):

- Times: stored ``start_ns = ts_ns + base_time_ns``, ``end_ns = start_ns + dur_ns`` (int64 ns, epoch).
- Nesting, per host thread (pid, tid): the result of a stack sweep over cpu_ops, annotations and launch
  calls in the order (start asc, end desc, annotation < op < launch, seq), computed out of core by
  ``links_sql`` (running open counts + ASOF joins; equal to the sweep on properly nested intervals). A cpu_op's parent is the innermost cpu_op still
  open at its start (an op is open at t when start <= t < end); ``depth`` counts the open ops;
  ``top_op_id`` is the outermost open op (the op itself when top-level). A launch call's leaf operator
  is the innermost op open at the call's start. Annotations are phases, not operators: they nest
  among themselves (``parent_ann_id``) and give ops and launches a ``phase_id``; GPU annotations nest
  per (device, stream). Nothing crosses threads: autograd-thread launches stay on their thread.
- Activity -> launch call: equal correlation within the trace (host correlations must be unique).
- Graph flag: the launch call's type is 'graph', or the correlation maps to more than one kernel.
- ext_op_id: the cpu_op on the launch's process whose External id equals the launch's External id;
  only when the trace's External ids are operator ids (some launch has External id != correlation);
  ``ext_agrees = ext_op_id IS NOT DISTINCT FROM leaf_op_id`` where ext_op_id is known, else null.
- busy_intervals: per device, the union of kernel/memcpy/memset intervals with dur_ns > 0.
- activity_splits (schema 003): per GPU activity with a launch call, its launch-and-queue split (the launch
  analysis' definitions, docs/metrics.md "Launch overhead"), computed once from the inserted rows;
  op_launch: the same summed per operator instance (top-level and leaf), with the instance's launch-call
  time and GPU union; op_kernels: kernels and kernel time per operator instance (summary, power).
  ``launch_splits_sql`` is the one text of all three; 003_launch_splits.sql holds it
  rendered for every stored trace (a test keeps the two equal).
- idle_gaps, idle_pieces, queued_intervals (schema 005): storage/idle.py; op_signatures and
  gpu_activities.leaf_sig_id (schema 006): storage/signatures.py; both filled last.
"""

from __future__ import annotations

import csv
import pathlib
import re
from importlib import resources

import pyarrow as pa

from ..errors import ParseError
from . import idle, signatures

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


def check_correlations(con, source: str) -> None:
    """Refuse a trace whose host runtime/driver calls repeat a correlation id (merged traces)."""
    rows = con.execute(
        f"""SELECT correlation, count(*) FROM ks_raw
            WHERE kind IN {LAUNCH_KINDS_SQL} AND correlation IS NOT NULL
            GROUP BY correlation HAVING count(*) > 1 ORDER BY correlation LIMIT 3"""
    ).fetchall()
    if rows:
        n = con.execute(
            f"""SELECT count(*) FROM (SELECT correlation FROM ks_raw
                WHERE kind IN {LAUNCH_KINDS_SQL} AND correlation IS NOT NULL
                GROUP BY correlation HAVING count(*) > 1)"""
        ).fetchall()[0][0]
        ids = ", ".join(str(r[0]) for r in rows)
        raise ParseError(
            f"{source}: {n} correlation ids (e.g. {ids}) appear on more than one runtime/driver call; "
            "the file looks like several traces merged into one: ingest each process's trace separately"
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


# The split of every GPU activity with a launch call (launch analysis, docs/metrics.md "Launch overhead"):
# lq = start - launch start; api = min(launch dur, lq); ready = end of the previous activity on the
# (device, stream) by (start, activity_id), else the launch end; queue = clamp(ready - launch end, 0, lq - api);
# dispatch = lq - api - queue; launch_delay = max(0, start - launch end); term = a kernel not launched by a
# graph, or a graph launch's first node (by start, then activity_id). {where} filters every table read.
_SPLITS_SQL = """INSERT INTO activity_splits
WITH a AS (
  SELECT trace_id, activity_id, kind, device, stream, start_ns, end_ns, is_graph, launch_id, leaf_op_id, top_op_id,
         lag(end_ns) OVER (PARTITION BY trace_id, device, stream ORDER BY start_ns, activity_id) AS prev_end
  FROM gpu_activities WHERE {where}
), graph_launch AS (
  SELECT DISTINCT trace_id, launch_id FROM gpu_activities WHERE {where} AND is_graph
), first_node AS (
  SELECT g.trace_id, min({{'s': g.start_ns, 'a': g.activity_id}}).a AS activity_id
  FROM gpu_activities g SEMI JOIN graph_launch USING (trace_id, launch_id)
  WHERE {where_g}
  GROUP BY g.trace_id, g.launch_id
), s AS (
  SELECT a.*, l.start_ns AS launch_start_ns, l.end_ns AS launch_end_ns, l.dur_ns AS launch_dur_ns, l.phase_id,
         l.top_op_id AS launch_top_op_id, l.leaf_op_id AS launch_leaf_op_id,
         a.start_ns - l.start_ns AS lq_ns, least(l.dur_ns, a.start_ns - l.start_ns) AS api_ns,
         coalesce(a.prev_end, l.end_ns) AS ready_ns, f.activity_id IS NOT NULL AS first_node
  FROM a
  LEFT JOIN (SELECT * FROM launches WHERE {where}) l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
  LEFT JOIN first_node f ON f.trace_id = a.trace_id AND f.activity_id = a.activity_id
  WHERE a.launch_id IS NOT NULL
)
SELECT trace_id, activity_id, kind, device, stream, start_ns, end_ns, is_graph, launch_id,
       launch_start_ns, launch_end_ns, prev_end,
       coalesce(top_op_id, launch_top_op_id), coalesce(leaf_op_id, launch_leaf_op_id), phase_id,
       lq_ns, api_ns,
       greatest(0, least(ready_ns - launch_end_ns, lq_ns - api_ns)),
       lq_ns - api_ns - greatest(0, least(ready_ns - launch_end_ns, lq_ns - api_ns)),
       greatest(0, start_ns - launch_end_ns),
       (kind = 'kernel' AND (NOT is_graph OR first_node))
FROM s ORDER BY trace_id, device, stream, start_ns, activity_id"""

# Per operator instance ({link} = top_op_id or leaf_op_id) with at least one TKLQT term, plus one row with
# a null op_id for the terms outside every operator: the terms' sums, graph kernels, the summed duration of
# the instance's launch calls that launched GPU work, and the length of the union of its activities.
_OP_LAUNCH_LINK_SQL = """
SELECT t.trace_id, '{name}' AS link, t.op_id, op.name, t.kernels, t.graph_launches, t.graph_kernels,
       t.tklqt_ns, t.api_ns, t.queue_ns, t.dispatch_ns, t.launch_delay_ns,
       coalesce(c.launch_api_ns, 0) AS launch_api_ns,
       CASE WHEN t.op_id IS NULL THEN 0 WHEN t.acts = 1 THEN t.lone_union_ns
            ELSE coalesce(un.gpu_union_ns, 0) END AS gpu_union_ns
FROM (
  SELECT trace_id, {link} AS op_id,
         count(*) FILTER (WHERE term AND kind = 'kernel' AND NOT is_graph) AS kernels,
         count(*) FILTER (WHERE term AND is_graph) AS graph_launches,
         count(*) FILTER (WHERE is_graph AND kind = 'kernel') AS graph_kernels,
         count(*) FILTER (WHERE term) AS terms,
         sum(lq_ns) FILTER (WHERE term) AS tklqt_ns, sum(api_ns) FILTER (WHERE term) AS api_ns,
         sum(queue_ns) FILTER (WHERE term) AS queue_ns, sum(dispatch_ns) FILTER (WHERE term) AS dispatch_ns,
         sum(launch_delay_ns) FILTER (WHERE term) AS launch_delay_ns,
         count(*) AS acts, max(greatest(0, end_ns - start_ns)) AS lone_union_ns
  FROM x GROUP BY 1, 2
) t
LEFT JOIN (
  SELECT trace_id, {link} AS op_id, sum(dur_ns) AS launch_api_ns
  FROM launches WHERE {where} AND activities > 0 AND {link} IS NOT NULL GROUP BY 1, 2
) c ON c.trace_id = t.trace_id AND c.op_id = t.op_id
LEFT JOIN (
  SELECT trace_id, op_id, sum(greatest(0, end_ns - greatest(start_ns, coalesce(prev_end, start_ns)))) AS gpu_union_ns
  FROM (
    SELECT x.trace_id, x.{link} AS op_id, x.start_ns, x.end_ns,
           max(x.end_ns) OVER (PARTITION BY x.trace_id, x.{link} ORDER BY x.start_ns, x.end_ns
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM x SEMI JOIN (SELECT trace_id, {link} FROM x WHERE {link} IS NOT NULL
                      GROUP BY 1, 2 HAVING count(*) > 1 AND count(*) FILTER (WHERE term) > 0) m
      ON m.trace_id = x.trace_id AND m.{link} = x.{link}
  ) GROUP BY 1, 2
) un ON un.trace_id = t.trace_id AND un.op_id = t.op_id
LEFT JOIN (SELECT trace_id, op_id, name FROM cpu_ops WHERE {where}) op
  ON op.trace_id = t.trace_id AND op.op_id = t.op_id
WHERE t.terms > 0"""


# Kernels per operator instance ({link} = top_op_id or leaf_op_id; instances with at least one kernel):
# count and summed duration, with the operator's name; has_op is false when no cpu_ops row has that id.
_OP_KERNELS_LINK_SQL = """
SELECT i.trace_id, '{name}' AS link, i.op_id, o.name, o.op_id IS NOT NULL AS has_op, i.kernels, i.kernel_time_ns
FROM (
  SELECT trace_id, {link} AS op_id, count(*) AS kernels, sum(dur_ns) AS kernel_time_ns
  FROM gpu_activities WHERE {where} AND kind = 'kernel' AND {link} IS NOT NULL GROUP BY 1, 2
) i
LEFT JOIN (SELECT trace_id, op_id, name FROM cpu_ops WHERE {where}) o
  ON o.trace_id = i.trace_id AND o.op_id = i.op_id"""


_LINKS = (("top", "top_op_id"), ("leaf", "leaf_op_id"))


def _op_launch_sql(where: str, links=_LINKS) -> str:
    return ("INSERT INTO op_launch\nWITH x AS (SELECT * FROM activity_splits WHERE " + where + ")"
            + "\nUNION ALL".join(_OP_LAUNCH_LINK_SQL.format(name=n, link=c, where=where) for n, c in links))


def launch_splits_sql(where: str) -> list[str]:
    """The INSERT statements filling activity_splits, op_launch and op_kernels for the traces ``where`` selects
    (a SQL condition on trace_id: ``trace_id = $tid`` at ingest, ``TRUE`` in the 003 migration)."""
    op_sql = _op_launch_sql(where)
    splits = _SPLITS_SQL.format(where=where, where_g=where.replace("trace_id", "g.trace_id"))
    kern_sql = "INSERT INTO op_kernels" + "\nUNION ALL".join(
        _OP_KERNELS_LINK_SQL.format(name=n, link=c, where=where) for n, c in (("top", "top_op_id"), ("leaf", "leaf_op_id")))
    return [splits, op_sql, kern_sql]


def insert_launch_splits(con, trace_id: str) -> None:
    """Fill activity_splits, op_launch and op_kernels for one trace whose events are already inserted: the
    statements of ``launch_splits_sql``, op_launch one link at a time (the two links in one statement ran out
    of a 256 MB memory limit on a 0.5M-kernel DDP rank; the rows are the same)."""
    splits, _op_sql, kern_sql = launch_splits_sql("trace_id = $tid")
    for sql in [splits] + [_op_launch_sql("trace_id = $tid", (link,)) for link in _LINKS] + [kern_sql]:
        con.execute(sql, {"tid": trace_id})


def insert_events(con, trace_id: str, base: int) -> None:
    """Insert every derived event table for one trace, each sorted for zone-map pruning."""
    params = {"tid": trace_id, "base": int(base)}

    def run(sql: str, _unused=None) -> None:
        con.execute(sql, {k: v for k, v in params.items() if f"${k}" in sql})

    P = None
    run(
        """
        INSERT INTO cpu_ops
        SELECT $tid, r.seq, r.name, r.pid, r.tid, r.ts_ns + $base, coalesce(r.dur_ns, 0),
               r.ts_ns + coalesce(r.dur_ns, 0) + $base, r.external_id, r.seq_number, r.fwd_thread_id,
               r.input_dims, r.input_types, r.input_strides, r.concrete_inputs,
               l.up, l.top, l.depth, l.phase, r.text
        FROM ks_raw r LEFT JOIN ks_links l ON l.seq = r.seq
        WHERE r.kind = 'cpu_op' AND r.ts_ns IS NOT NULL
        ORDER BY r.pid, r.tid, r.ts_ns, r.seq
        """,
        P,
    )
    run(
        """
        INSERT INTO python_calls
        SELECT $tid, seq, name, pid, tid, ts_ns + $base, coalesce(dur_ns, 0),
               ts_ns + coalesce(dur_ns, 0) + $base
        FROM ks_raw WHERE kind = 'python' AND ts_ns IS NOT NULL
        ORDER BY pid, tid, ts_ns, seq
        """,
        P,
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
        """,
        P,
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
        """,
        P,
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
        """,
        P,
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
        """,
        P,
    )
    run(
        """
        INSERT INTO flows
        SELECT $tid, flow_id, cat, flow_phase, pid, tid, ts_ns + $base
        FROM ks_raw WHERE kind = 'flow' ORDER BY pid, tid, ts_ns, seq
        """,
        P,
    )
    run(
        """
        INSERT INTO threads
        SELECT DISTINCT $tid, pid, tid, name, text
        FROM ks_raw WHERE kind = 'meta' AND name IS NOT NULL
        ORDER BY 2, 3, 4
        """,
        P,
    )
    run(
        f"""
        INSERT INTO busy_intervals
        WITH a AS (
            SELECT device, ts_ns + $base AS s, ts_ns + dur_ns + $base AS e
            FROM ks_raw
            WHERE kind IN {GPU_KINDS_SQL} AND dur_ns > 0 AND device IS NOT NULL
              AND ts_ns IS NOT NULL
        ), b AS (
            SELECT *, max(e) OVER (PARTITION BY device ORDER BY s, e
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
            FROM a
        ), c AS (
            SELECT *, sum(CASE WHEN prev_end IS NULL OR s > prev_end THEN 1 ELSE 0 END)
                          OVER (PARTITION BY device ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS grp
            FROM b
        )
        SELECT $tid, device, min(s), max(e) FROM c GROUP BY device, grp ORDER BY device, 3
        """,
        P,
    )
    insert_launch_splits(con, trace_id)
    idle.insert_idle(con, trace_id)
    signatures.insert_signatures(con, trace_id)


_CLOCK_RE = re.compile(r"^kernelscope::clock_sync\s+(-?\d+)\s*$")


def clock_offset(con, base: int) -> tuple[int | None, str | None]:
    """Telemetry clock minus trace clock from the first ``kernelscope::clock_sync <epoch_ns>`` marker."""
    row = con.execute(
        """SELECT name, ts_ns FROM ks_raw
           WHERE kind IN ('annotation', 'cpu_op') AND name LIKE 'kernelscope::clock_sync%'
             AND ts_ns IS NOT NULL
           ORDER BY ts_ns, seq LIMIT 1"""
    ).fetchall()
    row = row[0] if row else None
    if row is None:
        return None, None
    m = _CLOCK_RE.match(row[0])
    if not m:
        return None, f"clock marker {row[0]!r} has no integer epoch ns; clock offset not set"
    return int(m.group(1)) - (int(row[1]) + int(base)), None


def trace_span(con, base: int) -> tuple[int | None, int | None]:
    row = con.execute(
        """SELECT min(ts_ns), max(ts_ns + coalesce(dur_ns, 0)) FROM ks_raw
           WHERE kind NOT IN ('meta', 'flow') AND ts_ns IS NOT NULL"""
    ).fetchall()[0]
    if row[0] is None:
        return None, None
    return int(row[0]) + base, int(row[1]) + base


def raw_view(con, raw_path) -> None:
    """TEMP VIEWs over the staged events (a Parquet file of RAW_EVENTS): ``ks_raw_in`` as parsed and ``ks_raw``,
    which every derivation reads, with each negative duration read as 0 (``raw_facts`` counts them first):
    a kernel, call or operator cannot end before it starts, and a negative one made sums negative
    (kernel_time_ns = -154,399 ns) and broke the nesting of operators."""
    path = "'" + str(raw_path).replace("'", "''") + "'"
    con.execute(f"CREATE OR REPLACE TEMP VIEW ks_raw_in AS SELECT * FROM read_parquet({path})")
    con.execute("CREATE OR REPLACE TEMP VIEW ks_raw AS SELECT * REPLACE "
                "(CASE WHEN dur_ns < 0 THEN 0 ELSE dur_ns END AS dur_ns) FROM ks_raw_in")


#: Categories set aside (kind 'other') that are the profiler's own records, not trace content: the
#: "Trace" span and overhead records (Kineto ``overhead``, nsys ``nsys_overhead``). Not counted as set aside.
PROFILER_OWN_CATEGORIES_RE = r"(?i)^(trace|.*overhead)$"
#: Categories of other accelerators' device events and of device ranges (Kineto's MTIA, XPU, HPU, Glow and
#: PrivateUse1 activity types, the CUDA profiler range): their events are device events wherever they lie.
ACCELERATOR_CATEGORIES_RE = r"(?i)^(mtia|xpu|hpu|tpu|npu|mps|glow|privateuse1)_|^cuda_profiler_range$|^hpu_op$"
#: process_labels text of a device process (Kineto labels a device's pid "GPU 0", "MTIA 0", ...).
DEVICE_LABEL_RE = r"(?i)\b(gpu|mtia|xpu|hpu|tpu|npu|accelerator|device)\b"


def raw_facts(con, meta=None) -> dict:
    """What the staged trace (``raw_view``) holds that the trust section reports, counted before any is
    derived (storage keeps them in ``traces``, schema 008):

    - ``negative_durations``: per kind, ``count``, ``min_ns`` and ``sum_ns`` of the events whose duration is
      negative as written (kernels with end < start, ...); each is stored as 0 ns;
    - ``set_aside``: per category that no kind maps (Kineto's ``mtia_*``, ``cuda_profiler_range``, any
      unknown ``cat``; the profiler's own "Trace" and overhead records left out), ``events`` and
      ``device_events``: those on a device (``args.device``, a process Kineto labels as a device, or the
      process of the trace's GPU activities) or of an accelerator category (``ACCELERATOR_CATEGORIES_RE``).
      They stay in other_events, never analysed;
    - ``truncated``: the parser's note of a cut file read with ``--salvage`` (``TraceMeta.truncated``), else
      None.
    """
    neg = {
        kind: {"count": int(n), "min_ns": int(lo), "sum_ns": int(total)}
        for kind, n, lo, total in con.execute(
            """SELECT kind, count(*), min(dur_ns), sum(dur_ns)::BIGINT FROM ks_raw_in
               WHERE dur_ns < 0 GROUP BY kind ORDER BY kind"""
        ).fetchall()
    }
    aside = {
        cat: {"events": int(n), "device_events": int(d)}
        for cat, n, d in con.execute(
            f"""WITH dev_pids AS (
                    SELECT DISTINCT pid FROM ks_raw_in
                    WHERE kind = 'meta' AND name = 'process_labels' AND pid IS NOT NULL
                      AND regexp_matches(coalesce(text, ''), '{DEVICE_LABEL_RE}')
                    UNION SELECT DISTINCT pid FROM ks_raw_in WHERE kind IN {GPU_KINDS_SQL} AND pid IS NOT NULL
                )
                SELECT coalesce(cat, '(none)') AS c, count(*),
                       count(*) FILTER (WHERE device IS NOT NULL
                                          OR regexp_matches(coalesce(cat, ''), '{ACCELERATOR_CATEGORIES_RE}')
                                          OR pid IN (SELECT pid FROM dev_pids))
                FROM ks_raw_in
                WHERE kind = 'other' AND NOT regexp_matches(coalesce(cat, ''), '{PROFILER_OWN_CATEGORIES_RE}')
                GROUP BY 1 ORDER BY 1"""
        ).fetchall()
    }
    return {"negative_durations": neg, "set_aside": aside,
            "truncated": getattr(meta, "truncated", None) if meta is not None else None}


def _n(x: int) -> str:
    return f"{x:,}"


def facts_warnings(facts: dict, meta=None) -> list[str]:
    """The trace's stored warnings for ``raw_facts`` (one counted sentence each)."""
    out = []
    cut = facts.get("truncated")
    if cut:
        out.append(
            f"truncated trace: the file ends at byte {_n(cut['read_bytes'])} of its "
            f"{'decompressed ' if cut.get('gzip') else ''}text ({cut['reason']}); ingest --salvage kept the "
            f"{_n(cut['events_kept'])} complete events before byte {_n(cut['at_byte'])}: what the profiler wrote "
            "after the cut (events, and keys written after them) is lost, so counts and spans are low")
        if cut.get("base_time_lost"):
            out.append("truncated trace: baseTimeNanoseconds (written after the events) was lost with the cut; "
                       "times are stored as written, relative to an unknown base")
    neg = facts.get("negative_durations") or {}
    if neg:
        parts = ", ".join(f"{v['count']} {k}" for k, v in neg.items())
        worst = min(v["min_ns"] for v in neg.values())
        out.append(f"{sum(v['count'] for v in neg.values())} events with a negative duration ({parts}; "
                   f"down to {_n(worst)} ns) stored as 0 ns")
    aside = facts.get("set_aside") or {}
    if aside:
        parts = ", ".join(f"{k} {_n(v['events'])}" + (f" ({_n(v['device_events'])} on a device)"
                                                      if v["device_events"] else "") for k, v in aside.items())
        out.append(f"{_n(sum(v['events'] for v in aside.values()))} events of categories kernelscope does not "
                   f"analyse were set aside (kept in other_events): {parts}")
    return out


def facts_notes(facts: dict) -> list[str]:
    """Short notes for the ingest line (what the trust section will say)."""
    out = []
    cut = facts.get("truncated")
    if cut:
        out.append(f"TRUNCATED at byte {_n(cut['read_bytes'])}: kept {_n(cut['events_kept'])} complete events")
    neg = facts.get("negative_durations") or {}
    if neg:
        out.append(f"{sum(v['count'] for v in neg.values())} negative durations stored as 0")
    aside = facts.get("set_aside") or {}
    if aside:
        dev = sum(v["device_events"] for v in aside.values())
        out.append(f"{_n(sum(v['events'] for v in aside.values()))} events of unmapped categories set aside ("
                   + ", ".join(aside) + ")" + (f", {_n(dev)} of them device events" if dev else ""))
    return out


def untimed_count(con) -> int:
    """Events of timed kinds that came without a timestamp (kept in other_events)."""
    return con.execute(
        """SELECT count(*) FROM ks_raw WHERE ts_ns IS NULL AND kind IN
           ('cpu_op', 'annotation', 'gpu_annotation', 'python', 'runtime', 'driver',
            'kernel', 'memcpy', 'memset')"""
    ).fetchall()[0][0]


__all__ = [
    "build_launch_table",
    "facts_notes",
    "facts_warnings",
    "raw_facts",
    "raw_view",
    "check_correlations",
    "clock_offset",
    "insert_events",
    "insert_launch_splits",
    "launch_splits_sql",
    "launch_api_table",
    "derive_links",
    "links_sql",
    "open_counts_sql",
    "materialize",
    "trace_span",
    "untimed_count",
]
