"""Link derivation at ingest: raw staged events (TEMP table ``ks_raw``) -> the store's event tables.

Runs inside the ingest transaction. Definitions (DESIGN.md "Data model habits", METRICS.md):

- Times: stored ``start_ns = ts_ns + base_time_ns``, ``end_ns = start_ns + dur_ns`` (int64 ns, epoch).
- Nesting, per host thread (pid, tid): a sweep over cpu_ops, annotations and launch calls in the order
  (start asc, end desc, annotation < op < launch, seq). A cpu_op's parent is the innermost cpu_op still
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
"""

from __future__ import annotations

import csv
import re
from importlib import resources

import numpy as np
import pyarrow as pa

from ..errors import ParseError

GPU_KINDS_SQL = "('kernel', 'memcpy', 'memset')"
LAUNCH_KINDS_SQL = "('runtime', 'driver')"
#: nsys-style version suffix on API names: cudaLaunchKernel_v7000 -> cudaLaunchKernel.
API_SUFFIX_RE = r"_v[0-9]+$"

_SWEEP_CHUNK = 262_144
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


def _sweep_sql() -> str:
    """Sweep input, numbered in sweep order: (group, pid, tid, start asc, end desc, kind, seq)."""
    return f"""
        CREATE TEMP TABLE ks_sweep AS
        WITH ev AS (
            SELECT seq,
                   CASE WHEN kind IN ('annotation', 'gpu_annotation') THEN 0
                        WHEN kind = 'cpu_op' THEN 1 ELSE 2 END AS k,
                   CASE WHEN kind = 'gpu_annotation' THEN 1 ELSE 0 END AS g,
                   coalesce(CASE WHEN kind = 'gpu_annotation' THEN device ELSE pid END,
                            {_NULL_KEY}) AS p,
                   coalesce(CASE WHEN kind = 'gpu_annotation' THEN stream ELSE tid END,
                            {_NULL_KEY}) AS t,
                   ts_ns AS s,
                   CASE WHEN kind IN {LAUNCH_KINDS_SQL} THEN ts_ns
                        ELSE ts_ns + coalesce(dur_ns, 0) END AS e
            FROM ks_raw
            WHERE kind IN ('cpu_op', 'annotation', 'gpu_annotation', 'runtime', 'driver')
              AND ts_ns IS NOT NULL
        )
        SELECT row_number() OVER (ORDER BY g, p, t, s, e DESC, k, seq) - 1 AS rn, *
        FROM ev
    """


_LINKS_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("up", pa.int64()),  # ops: parent op; launches: leaf op; annotations: parent annotation
        ("top", pa.int64()),  # ops: outermost op (self when top-level); launches: outermost op
        ("depth", pa.int32()),  # ops only
        ("phase", pa.int64()),  # ops and launches: innermost annotation
    ]
)


def sweep_links(con) -> int:
    """Fill TEMP table ``ks_links`` (schema _LINKS_SCHEMA) by one stack sweep per thread; returns rows.

    Streams the ordered events in chunks, so memory stays bounded by the chunk and the stack depth.
    """
    con.execute("DROP TABLE IF EXISTS ks_links")
    con.execute(
        "CREATE TEMP TABLE ks_links (seq BIGINT, up BIGINT, top BIGINT, depth INTEGER, phase BIGINT)"
    )
    con.execute("DROP TABLE IF EXISTS ks_sweep")
    con.execute(_sweep_sql())
    n_all = con.execute("SELECT count(*) FROM ks_sweep").fetchall()[0][0]
    ops_id: list = []
    ops_end: list = []
    ann_id: list = []
    ann_end: list = []
    last = None
    total = 0
    for lo in range(0, n_all, _SWEEP_CHUNK):
        # A DuckDB connection cannot run a query while a result streams, so read by row-number slices.
        rb = con.sql(
            "SELECT seq, k, g, p, t, s, e FROM ks_sweep WHERE rn >= ? AND rn < ? ORDER BY rn",
            params=[lo, lo + _SWEEP_CHUNK],
        ).to_arrow_table()
        n = rb.num_rows
        if n == 0:
            continue
        seq = rb.column("seq").to_numpy()
        g = rb.column("g").to_numpy()
        p = rb.column("p").to_numpy()
        t = rb.column("t").to_numpy()
        newg = np.empty(n, dtype=bool)
        newg[1:] = (g[1:] != g[:-1]) | (p[1:] != p[:-1]) | (t[1:] != t[:-1])
        newg[0] = last != (g[0], p[0], t[0])
        last = (g[-1], p[-1], t[-1])
        up = [None] * n
        top = [None] * n
        depth = [None] * n
        phase = [None] * n
        i = 0
        for sq, k, ng, s, e in zip(
            seq.tolist(),
            rb.column("k").to_numpy().tolist(),
            newg.tolist(),
            rb.column("s").to_numpy().tolist(),
            rb.column("e").to_numpy().tolist(),
        ):
            if ng:
                ops_id.clear()
                ops_end.clear()
                ann_id.clear()
                ann_end.clear()
            while ops_end and ops_end[-1] <= s:
                ops_end.pop()
                ops_id.pop()
            while ann_end and ann_end[-1] <= s:
                ann_end.pop()
                ann_id.pop()
            if k == 1:
                if ops_id:
                    up[i] = ops_id[-1]
                    top[i] = ops_id[0]
                else:
                    top[i] = sq
                depth[i] = len(ops_id)
                if ann_id:
                    phase[i] = ann_id[-1]
                ops_id.append(sq)
                ops_end.append(e)
            elif k == 2:
                if ops_id:
                    up[i] = ops_id[-1]
                    top[i] = ops_id[0]
                if ann_id:
                    phase[i] = ann_id[-1]
            else:
                if ann_id:
                    up[i] = ann_id[-1]
                ann_id.append(sq)
                ann_end.append(e)
            i += 1
        batch = pa.table(
            [
                rb.column("seq"),
                pa.array(up, pa.int64()),
                pa.array(top, pa.int64()),
                pa.array(depth, pa.int32()),
                pa.array(phase, pa.int64()),
            ],
            schema=_LINKS_SCHEMA,
        )
        con.register("ks_links_batch", batch)
        con.execute("INSERT INTO ks_links SELECT * FROM ks_links_batch")
        con.unregister("ks_links_batch")
        total += n
    con.execute("DROP TABLE ks_sweep")
    return total


def ext_ids_are_operator_ids(con) -> bool:
    """True when some launch's External id differs from its correlation (torch >= ~2.3 traces)."""
    n = con.execute(
        f"""SELECT count(*) FROM ks_raw WHERE kind IN {LAUNCH_KINDS_SQL}
            AND external_id IS NOT NULL AND correlation IS NOT NULL AND external_id <> correlation"""
    ).fetchall()[0][0]
    return n > 0


def build_launch_table(con) -> None:
    """TEMP ``ks_launch``: every runtime/driver call with its type, activity count and links."""
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
    con.execute("DROP TABLE IF EXISTS ks_launch")
    con.execute(
        f"""
        CREATE TEMP TABLE ks_launch AS
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
        """
    )
    con.unregister("ks_api_names")


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
               a.est_occupancy_pct, a.bytes
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


def untimed_count(con) -> int:
    """Events of timed kinds that came without a timestamp (kept in other_events)."""
    return con.execute(
        """SELECT count(*) FROM ks_raw WHERE ts_ns IS NULL AND kind IN
           ('cpu_op', 'annotation', 'gpu_annotation', 'python', 'runtime', 'driver',
            'kernel', 'memcpy', 'memset')"""
    ).fetchall()[0][0]


__all__ = [
    "build_launch_table",
    "check_correlations",
    "clock_offset",
    "insert_events",
    "launch_api_table",
    "sweep_links",
    "trace_span",
    "untimed_count",
]
