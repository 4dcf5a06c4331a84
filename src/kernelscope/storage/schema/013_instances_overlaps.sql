-- kernelscope store, schema version 13: two per-trace tables computed once at ingest so that the Overview does
-- not scan every GPU activity of a large trace for them per call (1M activities: ~0.5 s and ~0.2 s):
--   leaf_instances: the GPU time of each leaf operator instance (storage/instances.py, insert_leaf_instances:
--     the "leaf_instances" step of storage/derivations.py), grouped by the bandwidth analysis;
--   stream_overlaps: per (device, stream), the activities that start before an earlier one has ended
--     (storage/instances.py, insert_stream_overlaps: the "stream_overlaps" step), summed by the summary's trust
--     section.
-- Definitions: docs/metrics.md "Bandwidth and compute utilisation" and "Trust section".
-- Traces already stored when a store is migrated are filled by the same steps (derivations.backfill).

-- One row per leaf operator instance (gpu_activities.leaf_op_id) with at least one GPU activity.
CREATE TABLE leaf_instances (
    trace_id    VARCHAR NOT NULL,
    op_id       BIGINT NOT NULL,
    sig_id      INTEGER,                   -- its signature (op_signatures); null without a cpu_ops row
    device      INTEGER,                   -- the lowest device of its activities
    activities  BIGINT NOT NULL,           -- its GPU activities (kernels, memcpys, memsets)
    gpu_ns      BIGINT NOT NULL,           -- length of the union of its activity intervals
    hint        VARCHAR                    -- element size its kernels name (OpaqueType<N>; the largest), or null
);

-- One row per (device, stream) with GPU activities: in (start_ns, activity_id) order, an activity overlaps when
-- it starts before the largest end of the earlier ones (programmatic dependent launch does this; it is not an
-- error).
CREATE TABLE stream_overlaps (
    trace_id    VARCHAR NOT NULL,
    device      INTEGER,
    stream      BIGINT,
    activities  BIGINT NOT NULL,           -- its GPU activities
    overlapping BIGINT NOT NULL            -- those that start before an earlier one ended
);
