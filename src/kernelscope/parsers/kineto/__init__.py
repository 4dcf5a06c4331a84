"""PyTorch profiler (Kineto) Chrome-trace JSON -> ``RAW_EVENTS`` batches: ``read_kineto(path)`` /
``KinetoReader``.

The modules, in the order a file goes through them:

- ``parsers/source.py``: the file's decompressed bytes (shared with the other parsers);
- ``reader``: ``KinetoReader``, the stream: head, event array cut into runs of whole events, tail, salvage;
- ``parallel``: ``ParallelKinetoReader``, the same stream with its runs decoded by worker processes (rows
  identical, in file order);
- ``toplevel``: the keys around the event array -> ``TraceMeta``;
- ``fields``: the one table of the ``args`` keys kept (``ARG_FIELDS``) and the typed decoders built from it;
- ``batch``: decoded events -> Arrow batches;
- ``repair``: the tolerant path's repairs of invalid JSON and cleaning of values that are not numbers.
"""

from kernelscope.parsers.kineto.batch import CAT_KIND, GPU_KINDS
from kernelscope.parsers.kineto.fields import ARG_FIELDS
from kernelscope.parsers.kineto.reader import (
    HEAD_LIMIT,
    MAX_EVENT_BYTES,
    MAX_MERGE,
    KinetoReader,
    max_event_bytes,
    read_kineto,
)
from kernelscope.parsers.source import BLOCK_BYTES, SALVAGE_HINT, check_regular_file

__all__ = [
    "ARG_FIELDS", "BLOCK_BYTES", "CAT_KIND", "GPU_KINDS", "HEAD_LIMIT", "MAX_EVENT_BYTES", "MAX_MERGE",
    "SALVAGE_HINT", "KinetoReader", "check_regular_file", "max_event_bytes", "read_kineto",
]
