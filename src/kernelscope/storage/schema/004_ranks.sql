-- kernelscope store, schema version 4: runs of many ranks (storage/ranks.py) and collective kernels
-- (storage/collectives.py, the "collectives" step of storage/derivations.py: filled at ingest from the staged
-- events, so traces stored before this schema keep none).
-- A run is several traces (one per rank) ingested together in one transaction; traces.run_id names it and
-- traces.rank / rank_source say which rank each trace is and where that came from.

CREATE TABLE runs (
    run_id         VARCHAR PRIMARY KEY,    -- 'run-' + 12 hex digits of sha256 over the members' content hashes
    name           VARCHAR,                -- the folder's name
    source         VARCHAR,                -- absolute path of the folder
    world_size     INTEGER NOT NULL,
    ranks          INTEGER NOT NULL,       -- traces in the run (= world_size)
    rank_source    VARCHAR NOT NULL,       -- 'distributedInfo' | 'filename' | 'mixed' (how ranks were determined)
    offset_method  VARCHAR NOT NULL,       -- how rank_clocks.clock_offset_ns was chosen (storage/ranks.py)
    ingested_ns    BIGINT NOT NULL
);

-- One row per rank of a run: its trace and its clock relative to the run's reference rank (lowest rank).
-- aligned time = stored time - clock_offset_ns.
CREATE TABLE rank_clocks (
    run_id           VARCHAR NOT NULL,
    trace_id         VARCHAR NOT NULL,
    rank             INTEGER NOT NULL,
    rank_source      VARCHAR NOT NULL,     -- 'distributedInfo' | 'filename'
    host             VARCHAR,              -- provenance hostname when the run directory records it
    estimate_ns      BIGINT,               -- median over shared collectives of (end here - end on reference)
    estimate_n       INTEGER NOT NULL,     -- collectives the estimate used
    estimate_mad_ns  BIGINT,               -- median absolute deviation of those differences
    clock_offset_ns  BIGINT NOT NULL       -- applied: estimate_ns, or 0 on the reference's host / no estimate
);

-- Collective kernels (NCCL/RCCL) with the collective args the trace carries; one row per GPU activity.
CREATE TABLE collectives (
    trace_id      VARCHAR NOT NULL,
    activity_id   BIGINT NOT NULL,         -- gpu_activities.activity_id
    collective    VARCHAR,                 -- normalised: allreduce | allgather | reducescatter | alltoall |
                                           -- broadcast | reduce | sendrecv | barrier | other
    coll_name     VARCHAR,                 -- args "Collective name" as written (null: from the kernel name)
    pg_name       VARCHAR,                 -- "Process Group Name"; null when the trace has no args
    pg_desc       VARCHAR,
    pg_ranks      VARCHAR,                 -- JSON text, e.g. "[0, 1]"
    group_size    INTEGER,
    dtype         VARCHAR,
    dtype_bytes   INTEGER,                 -- bytes per element of dtype; null when unknown
    in_nelems     BIGINT,
    out_nelems    BIGINT,
    in_bytes      BIGINT,                  -- in_nelems * dtype_bytes
    out_bytes     BIGINT,
    in_split      VARCHAR,
    out_split     VARCHAR,
    pg_seq        BIGINT NOT NULL          -- 0-based order of the collective in its process group on this trace
);
