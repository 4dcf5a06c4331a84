-- kernelscope store, schema version 6: operator signatures of the leaf operators that have GPU activity, as a
-- small per-trace table, and each activity's signature id, so analyses that group kernels by their leaf
-- operator's name and shapes (kernels, diff, bandwidth) join a table of tens of rows instead of cpu_ops.
-- Filled at ingest and, for traces stored before schema 6, by the migration's backfill: the same step
-- (storage/signatures.py, the "signatures" step of storage/derivations.py).

-- One row per distinct (name, input_dims, input_types, input_strides, concrete_inputs) among the leaf
-- operators (gpu_activities.leaf_op_id) of a trace; sig_id numbers them from 0 in that sort order.
CREATE TABLE op_signatures (
    trace_id         VARCHAR NOT NULL,
    sig_id           INTEGER NOT NULL,
    name             VARCHAR,
    input_dims       VARCHAR,
    input_types      VARCHAR,
    input_strides    VARCHAR,
    concrete_inputs  VARCHAR
);

-- The signature of the activity's leaf operator (null when it has none, or no cpu_ops row).
ALTER TABLE gpu_activities ADD COLUMN leaf_sig_id INTEGER;
