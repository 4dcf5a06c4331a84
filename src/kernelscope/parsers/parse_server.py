"""What the parse workers' fork server imports once (parsers/pool.py), so that every worker forked from it starts
with the decoder imported instead of importing it itself: pandas kept out first (parse_worker), then the decoder.

It also keeps the parent's ``__main__`` out of the workers: multiprocessing runs the parent's main script again
(as ``__mp_main__``) in every child it starts, so a script that calls kernelscope's ingest at its top level, as
tests/hostile_harness.py and a user's analysis script do, ran again in each parse worker (and failed there on
its ``import pandas``). The workers run only kernelscope's own functions, so the children this server forks skip
that step; the patch lives in this server process alone, which exists to fork parse workers."""

import multiprocessing.spawn as _spawn

from kernelscope.parsers import parse_worker

_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")


def _prepare_without_main(data, _prepare=_spawn.prepare):
    _prepare({k: v for k, v in data.items() if k not in _MAIN_KEYS})


_spawn.prepare = _prepare_without_main
parse_worker.keep_pandas_out()

import kernelscope.parsers.kineto.parallel  # noqa: E402,F401  (after keep_pandas_out: pyarrow looks for pandas)
