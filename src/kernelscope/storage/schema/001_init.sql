-- kernelscope store, schema version 1.
-- Times: BIGINT ns since the Unix epoch, exact. Durations: BIGINT ns. Every event row carries trace_id.
-- No PRIMARY KEY/UNIQUE on event tables (index memory, slow loads); rows are inserted sorted by
-- (trace_id, device/pid, stream/tid, start_ns) so zone maps prune.

CREATE TABLE traces (
    trace_id        VARCHAR PRIMARY KEY,   -- first 12 hex digits of content_hash (longer on collision)
    name            VARCHAR,               -- user-given name, else the file stem
    source          VARCHAR NOT NULL,      -- absolute path of the ingested file
    content_hash    VARCHAR NOT NULL,      -- sha256 of the decompressed content
    format          VARCHAR NOT NULL,      -- 'kineto' | 'nsys' | ...
    run_id          VARCHAR,               -- groups traces of one run (multi-rank, a profile() call)
    rank            INTEGER NOT NULL,      -- distributedInfo.rank, else 0
    world_size      INTEGER,
    rank_source     VARCHAR,               -- 'distributedInfo' | 'default' | 'filename'
    base_time_ns    BIGINT,                -- the trace's own time base (Kineto baseTimeNanoseconds)
    start_ns        BIGINT,                -- first event start
    end_ns          BIGINT,                -- last event end
    device_properties JSON,                -- list of the trace's device property dicts
    distributed_info  JSON,
    provenance      JSON,                  -- collector's record (host, GPU, driver, torch, flags, ...)
    meta            JSON,                  -- other top-level keys of the trace
    warnings        JSON,                  -- parser/ingest notes, counted
    dropped_notes   JSON,                  -- the profiler's own lost-record notes
    clock_offset_ns BIGINT,                -- telemetry clock minus trace clock, measured from the marker
    events          BIGINT,
    ingested_ns     BIGINT NOT NULL,
    kernelscope_version VARCHAR
);

CREATE TABLE labels (
    trace_id    VARCHAR NOT NULL,
    key         VARCHAR NOT NULL,
    value_text  VARCHAR NOT NULL,          -- always set, as given
    value_num   DOUBLE                     -- set when the value parses as a number
);

-- CPU operators (Kineto cpu_op / Operator). Nesting derived at ingest per (pid, tid).
CREATE TABLE cpu_ops (
    trace_id     VARCHAR NOT NULL,
    op_id        BIGINT NOT NULL,          -- the event's seq in the file; unique within the trace
    name         VARCHAR,
    pid          BIGINT,
    tid          BIGINT,
    start_ns     BIGINT NOT NULL,
    dur_ns       BIGINT NOT NULL,
    end_ns       BIGINT NOT NULL,
    external_id  BIGINT,
    seq_number   BIGINT,
    fwd_thread_id BIGINT,
    input_dims   VARCHAR,                  -- JSON text as written
    input_types  VARCHAR,
    input_strides VARCHAR,
    concrete_inputs VARCHAR,
    parent_op_id BIGINT,                   -- innermost enclosing cpu_op on the same thread
    top_op_id    BIGINT,                   -- outermost enclosing cpu_op (itself when top-level)
    depth        INTEGER,                  -- 0 for top-level
    phase_id     BIGINT,                   -- innermost enclosing annotation (ann_id) on the thread
    text         VARCHAR                   -- extra args (collectives) as JSON text
);

-- python_function events: context, never operators.
CREATE TABLE python_calls (
    trace_id  VARCHAR NOT NULL,
    call_id   BIGINT NOT NULL,
    name      VARCHAR,
    pid       BIGINT,
    tid       BIGINT,
    start_ns  BIGINT NOT NULL,
    dur_ns    BIGINT NOT NULL,
    end_ns    BIGINT NOT NULL
);

-- Host runtime/driver calls (every cuda_runtime / cuda_driver event, launches or not).
CREATE TABLE launches (
    trace_id     VARCHAR NOT NULL,
    launch_id    BIGINT NOT NULL,          -- the event's seq
    api          VARCHAR NOT NULL,         -- 'runtime' | 'driver'
    name         VARCHAR,
    pid          BIGINT,
    tid          BIGINT,
    start_ns     BIGINT NOT NULL,
    dur_ns       BIGINT NOT NULL,
    end_ns       BIGINT NOT NULL,
    correlation  BIGINT,
    external_id  BIGINT,
    launch_type  VARCHAR,                  -- 'kernel' | 'graph' | 'memcpy' | 'memset' | 'sync' | 'other' (from the name table)
    activities   INTEGER NOT NULL DEFAULT 0, -- GPU activities linked to this call by correlation
    leaf_op_id   BIGINT,                   -- deepest cpu_op on (pid, tid) enclosing the call
    top_op_id    BIGINT,
    ext_op_id    BIGINT,                   -- cpu_op whose External id equals ours (modern traces)
    ext_agrees   BOOLEAN,                  -- ext_op_id = leaf_op_id; null when not comparable
    phase_id     BIGINT                    -- innermost enclosing annotation (ann_id) on the thread
);

-- GPU activities: kernels, memcpy, memset.
CREATE TABLE gpu_activities (
    trace_id     VARCHAR NOT NULL,
    activity_id  BIGINT NOT NULL,          -- the event's seq
    kind         VARCHAR NOT NULL,         -- 'kernel' | 'memcpy' | 'memset'
    name         VARCHAR,
    device       INTEGER,
    stream       BIGINT,
    start_ns     BIGINT NOT NULL,
    dur_ns       BIGINT NOT NULL,
    end_ns       BIGINT NOT NULL,
    correlation  BIGINT,
    external_id  BIGINT,
    launch_id    BIGINT,                   -- host call with the same correlation (same process)
    leaf_op_id   BIGINT,                   -- via the launch call
    top_op_id    BIGINT,
    is_graph     BOOLEAN NOT NULL DEFAULT FALSE, -- launched by a graph launch (one correlation, many kernels)
    grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
    block_x INTEGER, block_y INTEGER, block_z INTEGER,
    registers_per_thread INTEGER,
    shared_memory_bytes  BIGINT,
    blocks_per_sm        DOUBLE,
    warps_per_sm         DOUBLE,
    est_occupancy_pct    DOUBLE,
    bytes        BIGINT
);

-- Phases: user record_function ranges, ProfilerStep#N, GPU-side user annotations, NVTX ranges.
CREATE TABLE annotations (
    trace_id   VARCHAR NOT NULL,
    ann_id     BIGINT NOT NULL,
    kind       VARCHAR NOT NULL,           -- 'user' | 'step' | 'gpu' | 'nvtx'
    name       VARCHAR,
    pid        BIGINT,
    tid        BIGINT,                     -- host thread, or stream for 'gpu'
    device     INTEGER,
    start_ns   BIGINT NOT NULL,
    dur_ns     BIGINT NOT NULL,
    end_ns     BIGINT NOT NULL,
    step       INTEGER,                    -- N of ProfilerStep#N
    parent_ann_id BIGINT
);

-- Everything else that has a time: cuda_sync, instant events, overhead, cuda_event ...
CREATE TABLE other_events (
    trace_id    VARCHAR NOT NULL,
    event_id    BIGINT NOT NULL,
    kind        VARCHAR NOT NULL,
    cat         VARCHAR,
    name        VARCHAR,
    pid         BIGINT,
    tid         BIGINT,
    device      INTEGER,
    stream      BIGINT,
    start_ns    BIGINT,
    dur_ns      BIGINT,
    correlation BIGINT,
    external_id BIGINT,
    text        VARCHAR
);

CREATE TABLE flows (
    trace_id  VARCHAR NOT NULL,
    flow_id   BIGINT,
    cat       VARCHAR,                     -- 'ac2g' | 'async_cpu_to_gpu' | 'async' | 'fwdbwd'
    phase     VARCHAR,                     -- 's' | 'f' | 't'
    pid       BIGINT,
    tid       BIGINT,
    ts_ns     BIGINT
);

CREATE TABLE threads (
    trace_id  VARCHAR NOT NULL,
    pid       BIGINT,
    tid       BIGINT,
    kind      VARCHAR,                     -- 'process_name' | 'thread_name' | ...
    name      VARCHAR
);

-- Union of GPU activity intervals per device (METRICS.md busy_ns is SUM(end_ns - start_ns)).
CREATE TABLE busy_intervals (
    trace_id  VARCHAR NOT NULL,
    device    INTEGER NOT NULL,
    start_ns  BIGINT NOT NULL,
    end_ns    BIGINT NOT NULL
);

-- NVML samples (collectors/nvml.py documents the Parquet it writes; same columns).
CREATE TABLE telemetry (
    trace_id          VARCHAR NOT NULL,
    device_uuid       VARCHAR,
    device_index      INTEGER,             -- NVML index at capture time
    ts_ns             BIGINT NOT NULL,     -- epoch ns, host clock
    power_mw          BIGINT,              -- NVML averaged power
    power_instant_mw  BIGINT,
    energy_mj         BIGINT,              -- total energy counter since driver load
    sm_clock_mhz      INTEGER,
    mem_clock_mhz     INTEGER,
    gpu_util_pct      INTEGER,
    mem_util_pct      INTEGER,
    mem_used_bytes    BIGINT,
    temperature_c     INTEGER,
    throttle_reasons  BIGINT
);

-- Un-profiled measurements recorded by the collector.
CREATE TABLE timings (
    trace_id   VARCHAR NOT NULL,
    kind       VARCHAR NOT NULL,           -- 'cuda_event' | 'wall' | 'energy_loop'
    iteration  INTEGER,
    dur_ns     BIGINT,
    energy_mj  DOUBLE                      -- energy_loop rows: energy per iteration
);
