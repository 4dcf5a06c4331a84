"""kernelscope: GPU profiling and trace analysis for PyTorch.

Public API: ``profile()``, ``range()``, ``sweep()``, ``open_store()``, ``__version__``.
Heavy imports (torch, duckdb, pynvml) happen inside the functions, never at import time.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "profile", "range", "sweep", "open_store"]


def profile(*args, **kwargs):
    from .collectors.profile import profile as _profile

    return _profile(*args, **kwargs)


def range(name: str):
    from .collectors.profile import range as _range

    return _range(name)


def sweep(*args, **kwargs):
    from .collectors.sweep import sweep as _sweep

    return _sweep(*args, **kwargs)


def open_store(path=None, read_only: bool = False):
    """The store at ``path`` for Python and notebooks: a ``kernelscope.notebook.NotebookStore`` (the storage
    ``Store`` with ``.traces()``, ``.table(name, trace)``, ``.analyze(name, trace)`` and figures; see
    docs/notebook.md)."""
    from .notebook import open_store as _open

    return _open(path, read_only=read_only)
