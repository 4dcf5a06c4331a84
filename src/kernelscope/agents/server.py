"""``kernelscope mcp``: a Model Context Protocol server (the official ``mcp`` SDK's MCPServer, stdio) over one
store. Each tool is a function of agents/tools.py bound to the store path; a kernelscope error comes back as the
tool's error text (one line), never a traceback. Read-only unless built with ``allow_ingest``.
"""

from __future__ import annotations

import functools
from typing import Any

from .. import __version__
from ..errors import KernelscopeError
from . import tools

INSTRUCTIONS = (
    "kernelscope: GPU profiling traces (PyTorch Kineto, Nsight) in a store. Start with `traces` "
    "(headline=true for the numbers), then `summary` and `recommend` on a trace, `analyze` for any analysis "
    "listed by `analyses`, `diff` to compare two traces, `schema` + `sql` for anything else. Every result "
    "carries its definition and trust section: quote the numbers with their definitions, and say what the "
    "trust section says when it limits them. Tables are paged (offset, limit, next_offset). Times are ns.")


def _guard(fn):
    """``fn`` with kernelscope's one-line errors turned into MCP tool errors."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KernelscopeError as exc:
            raise ToolError(" ".join(str(exc).split())) from None

    return wrapped


def build_server(db: str, allow_ingest: bool = False):
    """The MCPServer for store ``db`` (a path), with an ``ingest`` tool only when ``allow_ingest``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    # WARNING: the SDK logs each failed call at INFO on stderr; the client gets the error itself
    server = MCPServer("kernelscope", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    ro = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def add(fn, read_only: bool = True):
        server.add_tool(_guard(fn), annotations=ro if read_only else
                        ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))

    def traces(headline: bool = False, offset: int = 0, limit: int = tools.DEFAULT_LIMIT) -> dict[str, Any]:
        """List the stored traces (id, name, labels, kernels, GPU span, notes), paged; headline=true adds the
        headline numbers (latency_ns, busy_ns, idle_ns, kernel_time_ns, tklqt_ns, ...) of each listed trace."""
        return tools.traces(db, headline, offset, limit)

    def summary(trace: str, table: str | None = None, offset: int = 0,
                limit: int = tools.DEFAULT_LIMIT) -> dict[str, Any]:
        """Summary of one trace (an id, id prefix, file or name): counts, GPU busy/idle/span, latency, top
        kernels and operators, trust. Same as `kernelscope summary TRACE --json`; tables paged."""
        return tools.analyze(db, "summary", [trace], table=table, offset=offset, limit=limit)

    def analyses() -> dict[str, Any]:
        """Every analysis kernelscope has, with its description, options (name, default) and definition."""
        return tools.analyses()

    def analyze(name: str, traces: list[str] | None = None, options: dict[str, Any] | None = None,
                by: str | None = None, sweep: str | None = None, table: str | None = None, offset: int = 0,
                limit: int = tools.DEFAULT_LIMIT) -> dict[str, Any]:
        """Run analysis NAME (see `analyses`) on traces with options {key: value}; multi-trace analyses
        (transition, diff, comm) take by/sweep. Same as `kernelscope analyze NAME TRACE... --json`; tables
        paged (table= picks one)."""
        return tools.analyze(db, name, traces, options, by, sweep, table, offset, limit)

    def recommend(trace: str, offset: int = 0, limit: int = tools.DEFAULT_LIMIT) -> dict[str, Any]:
        """Evidence-backed findings for one trace (host-bound launches, GPU-bound, low bandwidth, short
        kernels, sync stalls, tensor cores): each with severity, saving_ns and the numbers it cites."""
        return tools.analyze(db, "recommend", [trace], offset=offset, limit=limit)

    def diff(a: str, b: str, sweeps: bool = False, by: str = "batch", fail_on: list[str] | None = None,
             table: str | None = None, offset: int = 0, limit: int = tools.DEFAULT_LIMIT) -> dict[str, Any]:
        """Compare trace B with trace A (or sweep B with sweep A, sweeps=true): kernel groups and headline
        deltas; fail_on rules like "latency_ns>+5%" give violations. Same as `kernelscope diff A B --json`."""
        return tools.diff(db, a, b, sweeps, by, fail_on, table, offset, limit)

    def sql(query: str, offset: int = 0, limit: int = 100, timeout_s: float = 30.0) -> dict[str, Any]:
        """One read-only SQL statement (DuckDB) on the store with `kernelscope sql`'s limits; rows paged,
        total_rows counted. Call `schema` for the tables and what each column means."""
        return tools.sql(db, query, offset, limit, timeout_s)

    def schema(table: str | None = None) -> dict[str, Any]:
        """The store's tables and columns with types and definitions (all tables, or one)."""
        return tools.schema(db, table)

    for fn in (traces, summary, analyses, analyze, recommend, diff, sql, schema):
        add(fn)
    if allow_ingest:
        def ingest(paths: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
            """Ingest trace files or folders into the store (as `kernelscope ingest PATH... --label K=V`)."""
            return tools.ingest(db, paths, labels)

        add(ingest, read_only=False)
    return server


def serve(db: str, allow_ingest: bool = False) -> None:
    """Serve the store over stdio until the client closes the connection."""
    build_server(db, allow_ingest).run("stdio")
