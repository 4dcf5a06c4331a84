"""What the parse workers' fork server imports once (parsers/pool.py), so that every worker forked from it starts
with the decoder imported instead of importing it itself: pandas kept out first (parse_worker), then the decoder."""

from kernelscope.parsers import parse_worker

parse_worker.keep_pandas_out()

import kernelscope.parsers.kineto.parallel  # noqa: E402,F401  (after keep_pandas_out: pyarrow looks for pandas)
