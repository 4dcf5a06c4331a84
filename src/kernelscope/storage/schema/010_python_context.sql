-- kernelscope store, schema version 10: the Python context of operators and launches (with_stack and
-- with_modules traces) and backward operators mapped to their forward operator, as columns, so the modules and
-- stacks analyses group by stored ids instead of sweeping Python events per query. Filled at ingest and, for
-- traces stored before schema 10, by the migration's backfill: the same step (storage/pycontext.py, the
-- "python_context" step of storage/derivations.py), whose docstring holds the definitions.

-- Nesting of python_function events per host thread (time containment; strictly nested in Kineto traces).
ALTER TABLE python_calls ADD COLUMN parent_call_id BIGINT;  -- innermost enclosing Python call
ALTER TABLE python_calls ADD COLUMN depth INTEGER;           -- enclosing Python calls (0: outermost)
ALTER TABLE python_calls ADD COLUMN stack_id BIGINT;         -- its frame path (python_stacks)
ALTER TABLE python_calls ADD COLUMN module_call_id BIGINT;   -- innermost enclosing 'nn.Module: ...' call

-- Backward operators: the forward operator of their autograd node (Sequence number); null in forward.
-- py_call_id / module_call_id: innermost Python call / nn.Module call at the operator's start, or its forward
-- operator's for a backward operator.
ALTER TABLE cpu_ops ADD COLUMN fwd_op_id BIGINT;
ALTER TABLE cpu_ops ADD COLUMN py_call_id BIGINT;
ALTER TABLE cpu_ops ADD COLUMN module_call_id BIGINT;

-- The same for launch calls: their leaf operator's when it is a backward operator, else at the call's start.
ALTER TABLE launches ADD COLUMN fwd_op_id BIGINT;
ALTER TABLE launches ADD COLUMN py_call_id BIGINT;
ALTER TABLE launches ADD COLUMN module_call_id BIGINT;

-- Each distinct frame path of a trace once: its last frame's name, its depth and its parent path.
CREATE TABLE python_stacks (
    trace_id         VARCHAR NOT NULL,
    stack_id         BIGINT NOT NULL,
    parent_stack_id  BIGINT,                -- null at depth 0
    name             VARCHAR,
    depth            INTEGER NOT NULL
);
