"""Errors a user can cause. The CLI prints ``kernelscope: <message>`` and exits with ``exit_code``.

Raise these for bad input (a file, an argument, a store); let genuine bugs raise anything else.
"""


class KernelscopeError(Exception):
    """A user-facing error: one sentence saying what, where, and what to do."""

    exit_code = 1


class ParseError(KernelscopeError):
    """A trace file that cannot be read (truncated, corrupt, not a trace)."""

    exit_code = 2


class StoreError(KernelscopeError):
    """The store cannot be opened or written (locked, newer schema, not a kernelscope store)."""

    exit_code = 3


class StoreLockedError(StoreError):
    exit_code = 4


class TraceNotFound(KernelscopeError):
    exit_code = 5


class UsageError(KernelscopeError):
    exit_code = 6
