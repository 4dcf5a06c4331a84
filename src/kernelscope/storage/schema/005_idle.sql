-- kernelscope store, schema version 5: the idle gaps of each device, the host-wait pieces and the queued
-- intervals, computed once at ingest (storage/idle.py, insert_idle: the "idle" step of storage/derivations.py)
-- and read by the bound analysis (and the dashboard's Bound page), so that it aggregates stored rows instead
-- of re-deriving them per call.
-- Definitions: docs/metrics.md "CPU-bound vs GPU-bound" and analysis/bound.py. Times int64 ns.
-- Traces already stored when a store is migrated are filled by the same step (derivations.backfill).

-- One row per idle gap of a device's busy union (busy_intervals) inside its GPU span.
CREATE TABLE idle_gaps (
    trace_id      VARCHAR NOT NULL,
    device        INTEGER,
    gap_start_ns  BIGINT NOT NULL,         -- end of the busy interval before the gap
    gap_end_ns    BIGINT NOT NULL,         -- start of the busy interval after it
    cause         VARCHAR NOT NULL         -- 'host_wait' | 'dependency_wait'
);

-- Each host-wait gap cut where its launching thread's state changes: every instant of the gap is in one piece.
CREATE TABLE idle_pieces (
    trace_id      VARCHAR NOT NULL,
    device        INTEGER,
    gap_start_ns  BIGINT NOT NULL,         -- the gap the piece lies in (idle_gaps.gap_start_ns)
    ns            BIGINT NOT NULL,         -- the piece's length (> 0); per gap they add up to the gap
    category      VARCHAR NOT NULL,        -- sync | d2h_copy | allocator | collective | launch | runtime_other
                                           -- | operator | python | unknown
    call_name     VARCHAR,                 -- the runtime call open on the thread, if any
    op_id         BIGINT,                  -- the innermost operator open on the thread (or around the call)
    operator      VARCHAR                  -- its name
);

-- The intervals TKLQT sums, each with the stream's queue depth just after it opened: [launch call start,
-- kernel start) of every kernel not launched by a graph and [graph launch start, first node start) of every
-- graph launch (on the first node's stream); only intervals with end_ns > start_ns.
CREATE TABLE queued_intervals (
    trace_id      VARCHAR NOT NULL,
    device        INTEGER,
    stream        BIGINT,
    start_ns      BIGINT NOT NULL,
    end_ns        BIGINT NOT NULL,
    depth         BIGINT NOT NULL          -- intervals of (device, stream) open just after start_ns (all changes
                                           -- at start_ns applied): the depth of the step function there
);
