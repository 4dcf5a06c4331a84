"""Collective kernels and the busy time they split (schemas 004 and 007), two derivation steps of
storage/derivations.py.

**collectives** (a staged step: it reads the trace's staged events, ``ks_raw``): a GPU kernel is a collective
when it carries the collective args torch records (``Collective name``, ``Process Group Name``; kept by the
parser as JSON in ``text``) or when its name is a collective's (``COLLECTIVE_KERNEL_RE``: NCCL/RCCL kernels,
``nccl...``, ``ncclDevKernel_*``, ``rccl...``, and all-reduce/all-gather/... kernels outside them).
``collective`` is the normalised type from the args' name, else the kernel name.
``in_bytes``/``out_bytes`` = element counts x bytes per element of ``dtype`` (null when either is unknown).
``pg_seq`` numbers the collectives of one process group on one trace in start order (0-based): the k-th
collective of a group on every rank is the same collective instance (torch issues a group's collectives in
one order on all its ranks). Traces stored before schema 004 keep no collectives (their staged events are
gone).

**device_time** (a stored step: it reads gpu_activities and collectives): per device, the time some compute
kernel, some collective, some memcpy/memset runs, and their exposed/only parts (analysis/comm.py has the
definitions). It runs at ingest after the collectives and, for traces stored before schema 007, as that
migration's backfill.
"""

from __future__ import annotations

#: Bytes per element of the dtype names torch writes in collective args.
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
    "Byte": 1, "Bool": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8, "ComplexHalf": 4, "ComplexFloat": 8,
    "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
}

#: The collective words a name carries, whatever its library (lower case; read by storage/idle.py too).
COLLECTIVE_WORDS = "all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
#: Kernel names of collectives (case-insensitive regular expression): NCCL/RCCL's, and those outside a library
#: (PyTorch symmetric memory's multimem/one_shot/two_shot_all_reduce_kernel, vLLM/SGLang's custom all-reduce
#: cross_device_reduce_*). The kernel categories' communication rule (data/kernel_categories.csv) names the same.
COLLECTIVE_KERNEL_RE = (r"(?i)^(void )?(nccl|rccl)|ncclDevKernel|ncclKernel|" + COLLECTIVE_WORDS
                        + "|multimem|cross_device_reduce")


def _norm_sql(col: str) -> str:
    x = f"lower(regexp_replace({col}, '[_ \\-]', '', 'g'))"
    return f"""CASE WHEN {col} IS NULL THEN NULL
        WHEN {x} LIKE '%allreduce%' THEN 'allreduce'
        WHEN {x} LIKE '%reducescatter%' THEN 'reducescatter'
        WHEN {x} LIKE '%allgather%' THEN 'allgather'
        WHEN {x} LIKE '%alltoall%' THEN 'alltoall'
        WHEN {x} LIKE '%broadcast%' THEN 'broadcast'
        WHEN {x} LIKE '%sendrecv%' OR {x} LIKE '%send%' OR {x} LIKE '%recv%' THEN 'sendrecv'
        WHEN {x} LIKE '%barrier%' THEN 'barrier'
        WHEN {x} LIKE '%reduce%' THEN 'reduce'
        ELSE 'other' END"""


def insert_collectives(con, trace_id: str, base: int) -> None:
    """Insert the ``collectives`` rows of the trace staged as ``ks_raw`` (call inside the transaction). ``base``,
    the trace's time base that every staged step gets, is not needed: the rows hold activity ids, not times."""
    dtypes = ", ".join(f"('{k}', {v})" for k, v in DTYPE_BYTES.items())
    j = "CASE WHEN json_valid(text) THEN text END"
    con.execute(
        f"""
        INSERT INTO collectives
        WITH k AS (
            SELECT seq, name, ts_ns, {j} AS js FROM ks_raw
            WHERE kind = 'kernel' AND ts_ns IS NOT NULL
              AND ((text IS NOT NULL AND json_valid(text)
                    AND (json_extract_string(text, '$."Collective name"') IS NOT NULL
                         OR json_extract_string(text, '$."Process Group Name"') IS NOT NULL))
                   OR regexp_matches(name, '{COLLECTIVE_KERNEL_RE}'))
        ), a AS (
            SELECT seq, name, ts_ns,
                   json_extract_string(js, '$."Collective name"') AS coll_name,
                   json_extract_string(js, '$."Process Group Name"') AS pg_name,
                   json_extract_string(js, '$."Process Group Description"') AS pg_desc,
                   json_extract_string(js, '$."Process Group Ranks"') AS pg_ranks,
                   TRY_CAST(json_extract_string(js, '$."Group size"') AS INTEGER) AS group_size,
                   json_extract_string(js, '$.dtype') AS dtype,
                   TRY_CAST(json_extract_string(js, '$."In msg nelems"') AS BIGINT) AS in_n,
                   TRY_CAST(json_extract_string(js, '$."Out msg nelems"') AS BIGINT) AS out_n,
                   json_extract_string(js, '$."In split size"') AS in_split,
                   json_extract_string(js, '$."Out split size"') AS out_split
            FROM k
        )
        SELECT $tid, a.seq, coalesce({_norm_sql('a.coll_name')}, {_norm_sql('a.name')}), a.coll_name,
               a.pg_name, a.pg_desc, a.pg_ranks, a.group_size, a.dtype, d.b, a.in_n, a.out_n,
               a.in_n * d.b, a.out_n * d.b, a.in_split, a.out_split,
               row_number() OVER (PARTITION BY a.pg_name ORDER BY a.ts_ns, a.seq) - 1
        FROM a LEFT JOIN (VALUES {dtypes}) d(dt, b) ON d.dt = a.dtype
        ORDER BY a.ts_ns, a.seq
        """,
        {"tid": trace_id},
    )


# Per device: one sweep over every activity boundary with running counts of the three classes (compute kernel,
# collective kernel, memcpy/memset); each stretch between two boundaries is attributed by which counts are > 0.
_DEVICE_TIME_SQL = """
INSERT INTO device_time
WITH acts AS (
    SELECT a.device, a.start_ns AS s, a.end_ns AS e,
           CASE WHEN c.activity_id IS NOT NULL THEN 2 WHEN a.kind = 'kernel' THEN 1 ELSE 3 END AS cls
    FROM gpu_activities a
    LEFT JOIN (SELECT activity_id FROM collectives WHERE trace_id = $tid) c ON c.activity_id = a.activity_id
    WHERE a.trace_id = $tid AND a.device IS NOT NULL AND a.end_ns > a.start_ns
), ev AS (
    SELECT device, s AS t, (cls = 1)::INT AS dk, (cls = 2)::INT AS dc, (cls = 3)::INT AS dm FROM acts
    UNION ALL
    SELECT device, e, -(cls = 1)::INT, -(cls = 2)::INT, -(cls = 3)::INT FROM acts
), g AS (
    SELECT device, t, sum(dk) AS dk, sum(dc) AS dc, sum(dm) AS dm FROM ev GROUP BY ALL
), w AS (
    SELECT device, t, sum(dk) OVER o AS k, sum(dc) OVER o AS c, sum(dm) OVER o AS m,
           lead(t) OVER (PARTITION BY device ORDER BY t) - t AS len
    FROM g WINDOW o AS (PARTITION BY device ORDER BY t ROWS UNBOUNDED PRECEDING)
)
SELECT $tid, device,
       coalesce(sum(len) FILTER (WHERE k > 0), 0)::BIGINT,
       coalesce(sum(len) FILTER (WHERE c > 0), 0)::BIGINT,
       coalesce(sum(len) FILTER (WHERE c > 0 AND k = 0), 0)::BIGINT,
       coalesce(sum(len) FILTER (WHERE c > 0 AND k = 0 AND m = 0), 0)::BIGINT,
       coalesce(sum(len) FILTER (WHERE m > 0), 0)::BIGINT,
       coalesce(sum(len) FILTER (WHERE m > 0 AND k = 0 AND c = 0), 0)::BIGINT,
       coalesce(sum(len) FILTER (WHERE k > 0 OR c > 0 OR m > 0), 0)::BIGINT,
       (max(t) - min(t))::BIGINT
FROM w GROUP BY device ORDER BY device
"""


def insert_device_time(con, trace_id: str) -> None:
    """Fill device_time (schema 007) for one trace whose activities and collectives are stored: per device, the
    time some compute kernel, some collective, some memcpy/memset runs, and their exposed/only parts."""
    con.execute(_DEVICE_TIME_SQL, {"tid": trace_id})
