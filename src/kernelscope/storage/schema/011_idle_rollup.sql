-- kernelscope store, schema version 11: the host-wait idle of each trace rolled up by cause category and by
-- operator, computed once at ingest from idle_pieces (storage/idle.py, insert_idle_rollup: the "idle_rollup" step
-- of storage/derivations.py), so the bound analysis (the Overview's recommendations, the Bound page) reads a few
-- hundred rows instead of counting distinct gaps over every piece (13.5M pieces at 1M kernels) per call.
-- Definitions: docs/metrics.md "CPU-bound vs GPU-bound" and analysis/bound.py (idle_causes, idle_operators).
-- Traces already stored when a store is migrated are filled by the same step (derivations.backfill).

-- Three kinds of rows, told apart by which of operator and category is null:
--   operator NULL, category set: one cause category over every piece of the trace;
--   operator set, category NULL: one operator (innermost open on the launching thread) over all its pieces;
--   operator set, category set: one operator's pieces of one category.
CREATE TABLE idle_rollup (
    trace_id   VARCHAR NOT NULL,
    operator   VARCHAR,
    category   VARCHAR,
    idle_ns    BIGINT NOT NULL,            -- summed piece lengths (ns)
    gaps       BIGINT NOT NULL             -- distinct host-wait gaps (device, gap start) the pieces lie in
);
