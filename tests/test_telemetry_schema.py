"""The telemetry table has one definition of its columns: the Arrow schema the NVML sampler writes
(``collectors.nvml.TELEMETRY_SCHEMA``), which ingest also reads run folders through (``storage.rundir``). The store's
DDL (storage/schema/001_init.sql) must declare it too, as a migration; this test keeps the two the same columns,
in the same order, with matching integer widths, so neither can drift from the other."""

from __future__ import annotations

import pyarrow as pa

from kernelscope.collectors.nvml import TELEMETRY_SCHEMA
from kernelscope.storage.store import open_store

_DUCKDB_OF_ARROW = {pa.string(): "VARCHAR", pa.int32(): "INTEGER", pa.int64(): "BIGINT"}


def test_store_telemetry_table_is_the_sampler_schema_plus_trace_id(tmp_path):
    with open_store(str(tmp_path / "ks.duckdb")) as store:
        cols = store.query("SELECT column_name, data_type FROM information_schema.columns "
                           "WHERE table_name = 'telemetry' ORDER BY ordinal_position")
    declared = list(zip(cols["column_name"], cols["data_type"]))
    expected = [("trace_id", "VARCHAR")] + [(f.name, _DUCKDB_OF_ARROW[f.type]) for f in TELEMETRY_SCHEMA]
    assert declared == expected


def test_ingest_reads_telemetry_through_the_sampler_schema():
    from kernelscope.storage import rundir

    assert rundir.TELEMETRY_SCHEMA is TELEMETRY_SCHEMA
