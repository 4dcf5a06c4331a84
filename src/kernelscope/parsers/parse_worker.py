"""The start of a parse worker process (``parsers/kineto/parallel.py``), in a module of its own so it runs before
the worker imports pyarrow: Ctrl-C is left to the parent (it shuts the pool down), and pandas is kept out --
pyarrow imports it, when it can, at its first ``pa.array`` only to ask whether values are pandas objects, which
costs every worker ~0.5 s of CPU and ~45 MB of memory for nothing."""

from __future__ import annotations

import signal
import sys


class _NoPandas:
    """A meta path finder that refuses pandas (pyarrow then reads ``pandas`` as not installed)."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is not imported in a parse worker", name=name)
        return None


def keep_pandas_out() -> None:
    """Refuse pandas from now on in this process (once; nothing when it is imported already)."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


def init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    keep_pandas_out()


def warm() -> None:
    """A shared pool's first task in every worker (parsers/pool.py): import the decoder now, not at the first chunk."""
    import kernelscope.parsers.kineto.parallel  # noqa: F401
