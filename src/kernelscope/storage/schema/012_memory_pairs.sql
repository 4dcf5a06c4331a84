-- kernelscope store, schema version 12: each allocator event paired with the event that ends or began its block,
-- computed once at ingest (storage/memory.py, insert_memory_pairs: the "memory_pairs" step of
-- storage/derivations.py), so the memory analysis finds the blocks still live at the window's end (leak suspects)
-- and the frees of blocks allocated before it with a filtered scan instead of a window over every event of the
-- trace (2.1M events at 1M kernels: ~0.5 s per Memory page). Definitions: docs/metrics.md "Memory".
-- Traces already stored when a store is migrated are filled by the same step (derivations.backfill).

-- Per device and address, events in (time, event_id) order: an allocation's pair_ns is the time of the next event
-- at its address when that event is a free (the free that ends the block); a free's is the time of the previous
-- event at its address when that is an allocation. NULL otherwise: an allocation still live at the end of the
-- window, a free of a block allocated before the window, an event without Bytes or with Bytes 0.
ALTER TABLE memory_events ADD COLUMN pair_ns BIGINT;
