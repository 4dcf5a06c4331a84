-- kernelscope store, schema version 2: Nsight Compute per-kernel metrics (storage/ncu.py).
-- One row per profiled kernel launch of an ncu CSV. trace_id is the trace whose kernels the rows were
-- matched to (by kernel name key, grid, block and launch order), or the file's own 'ncu' trace row when
-- nothing matched. Units in the names: ns, bytes, %, Hz.

CREATE TABLE ncu_kernels (
    trace_id        VARCHAR NOT NULL,
    activity_id     BIGINT,                -- matched gpu_activities.activity_id in trace_id; null: no match
    ncu_id          BIGINT NOT NULL,       -- ncu's ID column
    launch_index    INTEGER NOT NULL,      -- 0-based order in the file (ncu's launch order)
    name            VARCHAR,               -- as ncu demangles it (differs from CUPTI's spelling)
    name_key        VARCHAR,               -- function name without namespaces/templates/arguments
    process_id      BIGINT,
    device          INTEGER,
    context         BIGINT,
    stream          BIGINT,
    cc              VARCHAR,
    grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
    block_x INTEGER, block_y INTEGER, block_z INTEGER,
    registers_per_thread INTEGER,
    shared_memory_bytes  BIGINT,           -- static + dynamic per block
    duration_ns     BIGINT,                -- gpu__time_duration.sum (under ncu's clock/cache control)
    dram_bytes_read  BIGINT,               -- dram__bytes_read.sum; null when not collected
    dram_bytes_write BIGINT,               -- dram__bytes_write.sum; null when not collected
    dram_throughput_pct    DOUBLE,         -- DRAM throughput, % of peak sustained
    sm_throughput_pct      DOUBLE,         -- SM (compute) throughput, % of peak sustained
    memory_throughput_pct  DOUBLE,         -- compute-memory throughput, % of peak sustained
    achieved_occupancy_pct DOUBLE,         -- sm__warps_active, % of peak sustained active
    sm_clock_hz     DOUBLE,                -- SM clock ncu measured during the kernel
    dram_clock_hz   DOUBLE,
    cache_control   VARCHAR,               -- 'all' | 'none' (ncu --cache-control)
    clock_control   VARCHAR,               -- 'base' | 'none' | ... (ncu --clock-control)
    settings_note   VARCHAR,               -- where cache/clock control came from (given or assumed default)
    page            VARCHAR,               -- 'raw' | 'details'
    source          VARCHAR NOT NULL,      -- absolute path of the CSV
    content_hash    VARCHAR NOT NULL,      -- sha256 of the decompressed CSV
    ingested_ns     BIGINT NOT NULL
);
