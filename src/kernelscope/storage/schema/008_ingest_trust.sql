-- kernelscope store, schema version 8: what ingest found in a trace that bears on trusting its numbers
-- (storage/ingest.py; the summary's trust section reads them, docs/metrics.md "Trust section"), and which
-- ranks a run lacks (storage/ranks.py). Traces stored before this schema keep nulls here: not counted.

-- null: read to its end; else {"at_byte": decompressed bytes up to the end of the last complete event kept,
-- "read_bytes": decompressed bytes read before the cut, "events_kept": events kept, "gzip": true/false,
-- "reason": where the file ended}: a cut trace ingested with `ingest --salvage`.
ALTER TABLE traces ADD COLUMN truncated JSON;
-- per kind with at least one event of negative duration (kernel, memcpy, memset, cpu_op, runtime, ...):
-- {"count", "min_ns", "sum_ns"} of the raw durations; every such duration is stored as 0. {} when none.
ALTER TABLE traces ADD COLUMN negative_durations JSON;
-- per category that no kind maps (kept in other_events, never analysed): {"events", "device_events"}
-- where device_events counts those on a device (args.device) or of another accelerator (mtia_*, xpu_*,
-- hpu_*, privateuse1_*, cuda_profiler_range, ...). {} when none.
ALTER TABLE traces ADD COLUMN set_aside JSON;

-- ranks below world_size without a trace in the run (a partial run: a sample of ranks); [] when complete.
ALTER TABLE runs ADD COLUMN missing_ranks JSON;
