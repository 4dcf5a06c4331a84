"""The real probe trace (torch 2.11, H200; tests/data/probe_train.json.gz): counts per kind equal a
stdlib-json count, and times equal the decimal text."""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import edge_traces as et

from kernelscope.parsers import open_trace

PROBE = Path(__file__).resolve().parents[1] / "data" / "probe_train.json.gz"


def _ns(d: Decimal) -> int:
    return int((d * 1000).to_integral_value())


def test_probe_counts_and_times_match_stdlib():
    doc = json.loads(gzip.decompress(PROBE.read_bytes()), parse_float=Decimal)
    events = doc["traceEvents"]
    r = open_trace(PROBE)
    rows = pa.Table.from_batches(list(r)).to_pylist()
    assert dict(Counter(row["kind"] for row in rows)) == et.probe_counts_by_kind(events)
    assert len(rows) == len(events) == 358
    assert r.meta.base_time_ns == doc["baseTimeNanoseconds"]
    for row, e in zip(rows, events):
        assert row["ts_ns"] == (_ns(e["ts"]) if "ts" in e else None)
        assert row["dur_ns"] == (_ns(e["dur"]) if "dur" in e else None)
        args = e.get("args", {})
        assert row["correlation"] == args.get("correlation")
        assert row["external_id"] == args.get("External id")
    kernels = [row for row in rows if row["kind"] == "kernel"]
    assert len(kernels) == 28 and all(k["device"] == 0 and k["stream"] == 7 for k in kernels)
    assert sum(1 for row in rows if row["kind"] == "driver" and row["name"] == "cuLaunchKernel") == 2
    assert r.meta.warnings == [] and r.meta.rank is None
