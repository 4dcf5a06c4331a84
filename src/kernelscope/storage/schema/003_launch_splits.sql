-- kernelscope store, schema version 3: the launch-and-queue split of every GPU activity, computed once at
-- ingest (storage/splits.py, insert_launch_splits: the "launch_splits" step of storage/derivations.py) and read
-- by the launch, bound, whatif, summary and power analyses.
-- Definitions: docs/metrics.md "Launch overhead". Times int64 ns. Traces already stored when a store is
-- migrated are filled by the same step (derivations.backfill, run by storage/store.py after this file).

-- One row per GPU activity with a launch call (gpu_activities.launch_id not null), sorted by
-- (trace_id, device, stream, start_ns, activity_id).
CREATE TABLE activity_splits (
    trace_id        VARCHAR NOT NULL,
    activity_id     BIGINT NOT NULL,
    kind            VARCHAR NOT NULL,      -- 'kernel' | 'memcpy' | 'memset'
    device          INTEGER,
    stream          BIGINT,
    start_ns        BIGINT NOT NULL,
    end_ns          BIGINT NOT NULL,
    is_graph        BOOLEAN NOT NULL,
    launch_id       BIGINT NOT NULL,
    launch_start_ns BIGINT,                -- the launch call's start / end
    launch_end_ns   BIGINT,
    prev_end_ns     BIGINT,                -- end of the previous activity on (device, stream) by (start, activity_id)
    top_op_id       BIGINT,                -- the activity's, else its launch call's
    leaf_op_id      BIGINT,
    phase_id        BIGINT,                -- the launch call's innermost annotation
    lq_ns           BIGINT,                -- start - launch start (negative under clock skew, never clamped)
    api_ns          BIGINT,                -- min(launch dur, lq)
    queue_ns        BIGINT,                -- clamp(ready - launch end, 0, lq - api); ready = prev_end_ns else launch end
    dispatch_ns     BIGINT,                -- lq - api - queue
    launch_delay_ns BIGINT,                -- max(0, start - launch end)
    term            BOOLEAN                -- a TKLQT term: a kernel not launched by a graph, or a graph launch's first node
);

-- Per operator instance (link 'top': top-level operator, 'leaf': leaf operator) with at least one TKLQT term,
-- plus one row per link with a null op_id for the terms outside every operator.
CREATE TABLE op_launch (
    trace_id        VARCHAR NOT NULL,
    link            VARCHAR NOT NULL,      -- 'top' | 'leaf'
    op_id           BIGINT,
    name            VARCHAR,               -- the operator's name (null with op_id)
    kernels         BIGINT,                -- TKLQT terms that are kernels not launched by a graph
    graph_launches  BIGINT,                -- TKLQT terms that are graph launches (first nodes)
    graph_kernels   BIGINT,                -- graph-node kernels
    tklqt_ns        BIGINT,                -- sums over the terms
    api_ns          BIGINT,
    queue_ns        BIGINT,
    dispatch_ns     BIGINT,
    launch_delay_ns BIGINT,
    launch_api_ns   BIGINT,                -- summed duration of the instance's launch calls with GPU activities
    gpu_union_ns    BIGINT                 -- length of the union of the instance's activity intervals
);

-- Kernels per operator instance (link 'top' | 'leaf') with at least one kernel: count and summed duration.
CREATE TABLE op_kernels (
    trace_id        VARCHAR NOT NULL,
    link            VARCHAR NOT NULL,      -- 'top' | 'leaf'
    op_id           BIGINT NOT NULL,
    name            VARCHAR,               -- the operator's name
    has_op          BOOLEAN NOT NULL,      -- a cpu_ops row with op_id exists
    kernels         BIGINT NOT NULL,
    kernel_time_ns  BIGINT NOT NULL
);
