"""Leaf-operator signatures (schema 006): the distinct (name, input_dims, input_types, input_strides,
concrete_inputs) of the operators GPU activities are attributed to (``gpu_activities.leaf_op_id``), numbered
per trace in ``op_signatures``, and each activity's ``leaf_sig_id``.

A trace has a few dozen signatures and up to millions of kernels: grouping kernels by operator name and shapes
through this table costs a join against tens of rows instead of against every CPU operator (cpu_ops).
``insert_signatures`` (the "signatures" step of storage/derivations.py) runs at ingest after the event tables
and, for traces stored before schema 006, as the migration's backfill.
"""

from __future__ import annotations

_COLS = "name, input_dims, input_types, input_strides, concrete_inputs"

_LEAF_OPS = f"""
SELECT op_id, {_COLS} FROM cpu_ops
WHERE trace_id = $trace AND op_id IN (SELECT leaf_op_id FROM gpu_activities WHERE trace_id = $trace)"""

_INSERT = f"""
INSERT INTO op_signatures
SELECT $trace, CAST(row_number() OVER (ORDER BY {_COLS}) - 1 AS INTEGER), {_COLS}
FROM (SELECT DISTINCT {_COLS} FROM ({_LEAF_OPS}))
ORDER BY 2"""

_MATCH = " AND ".join(f"s.{c} IS NOT DISTINCT FROM o.{c}" for c in _COLS.split(", "))

_UPDATE = f"""
UPDATE gpu_activities SET leaf_sig_id = m.sig_id
FROM (SELECT o.op_id, s.sig_id FROM ({_LEAF_OPS}) o
      JOIN (SELECT * FROM op_signatures WHERE trace_id = $trace) s ON {_MATCH}) m
WHERE gpu_activities.trace_id = $trace AND gpu_activities.leaf_op_id = m.op_id"""


def insert_signatures(con, trace_id: str) -> None:
    """Number the leaf-operator signatures of one stored trace and set its activities' leaf_sig_id."""
    for sql in (_INSERT, _UPDATE):
        con.execute(sql, {"trace": trace_id})
