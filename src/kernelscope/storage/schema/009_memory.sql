-- kernelscope store, schema version 9: the allocator's events of a trace recorded with profile_memory=True
-- (the `[memory]` instant events), each attributed to the operator running when it happened
-- (storage/memory.py, insert_memory: the "memory" step of storage/derivations.py). The step reads the trace's
-- staged events, so traces stored before this schema keep none: their `[memory]` instants are in other_events
-- without their args, and the memory analysis asks for a re-ingest. Definitions: docs/metrics.md "Memory".

-- One row per `[memory]` event. Allocated/reserved are the allocator's running totals of its device just after
-- the event; bytes is signed (> 0 an allocation, < 0 a free of the block at addr).
CREATE TABLE memory_events (
    trace_id              VARCHAR NOT NULL,
    event_id              BIGINT NOT NULL,  -- the event's seq in the file
    pid                   BIGINT,
    tid                   BIGINT,           -- the thread that allocated or freed
    ts_ns                 BIGINT NOT NULL,  -- epoch ns
    device_type           INTEGER,          -- args "Device Type" as written: 0 CPU, 1 CUDA (others: other devices)
    device_id             INTEGER,          -- args "Device Id" (-1 for CPU memory)
    addr                  BIGINT,           -- args "Addr": the block's address
    bytes                 BIGINT,           -- args "Bytes": > 0 allocated, < 0 freed
    total_allocated_bytes BIGINT,           -- args "Total Allocated" after the event
    total_reserved_bytes  BIGINT,           -- args "Total Reserved" after the event (the caching allocator's pool)
    op_id                 BIGINT,           -- innermost cpu_op on (pid, tid) holding ts_ns (start <= ts < end)
    top_op_id             BIGINT            -- that op's top-level op
);
