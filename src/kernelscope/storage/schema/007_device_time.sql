-- kernelscope store, schema version 7: per trace and device, the busy time split by what runs (compute
-- kernels, collective kernels, memcpy/memset), computed once at ingest after the collectives
-- (storage/collectives.py, insert_device_time: the "device_time" step of storage/derivations.py) and read by
-- the comm analysis, transition and bound.
-- Definitions: analysis/comm.py (docs/metrics.md "Communication"). Times int64 ns.
-- Traces already stored when a store is migrated are filled by the same step (derivations.backfill).

CREATE TABLE device_time (
    trace_id           VARCHAR NOT NULL,
    device             INTEGER NOT NULL,
    compute_ns         BIGINT NOT NULL,    -- some compute kernel (not a collective) runs
    comm_ns            BIGINT NOT NULL,    -- some collective kernel runs
    exposed_comm_ns    BIGINT NOT NULL,    -- a collective runs and no compute kernel
    comm_only_ns       BIGINT NOT NULL,    -- only collectives run (no compute kernel, no memcpy/memset)
    memcpy_ns          BIGINT NOT NULL,    -- some memcpy/memset runs
    exposed_memcpy_ns  BIGINT NOT NULL,    -- only memcpy/memset run
    busy_ns            BIGINT NOT NULL,    -- anything runs
    gpu_span_ns        BIGINT NOT NULL     -- first activity start to last activity end (activities with dur > 0)
);
