"""The notebook API: what ``kernelscope.open_store()`` returns.

A :class:`NotebookStore` is a :class:`~kernelscope.storage.store.Store` (``.con``, ``.query(sql)``, a context
manager) with the store's tables and every registered analysis one call away, as pandas DataFrames:

- ``store.traces()``: one row per trace (id, name, source, format, rank, labels, devices, kernels, span, notes);
- ``store.table(name, trace=None)``: a whole table by name (``kernels``, ``gpu_activities``, ``cpu_ops``,
  ``launches``, ``annotations``, ...; ``store.tables()`` lists them), one trace's rows when ``trace`` is given;
- ``store.analyze(name, trace=None, **options)``: the registered analysis ``name`` (``store.analyses()`` lists
  them; options as ``kernelscope analyze NAME TRACE -o key=value``) as a :class:`NotebookResult`: the same
  ``Result`` the CLI prints (``.scalars``, ``.tables`` of DataFrames, ``.warnings``, ``.trust``,
  ``.to_json()``), whose ``.figures()`` are the dashboard's Plotly figures and which displays itself in Jupyter
  (its headline numbers, warnings, figures inline and the names of its tables);
- ``store.ingest(path)``: ingest a trace file, a run folder or a folder of them (a writable store).

A ``trace`` is what the CLI takes (a trace id or its prefix, a file name or path, a name); left out, the store's
only trace. Multi-trace analyses (``transition``, ``diff``, ``comm``) take a list of traces or none, and
``by=``/``sweep=`` like the CLI. This module sits above ``analysis`` and ``reports`` (import-linter's layers)
and holds no SQL: tables are read through ``storage.frames``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .analysis.registry import ANALYSES, get_analysis
from .analysis.result import Result, json_safe
from .errors import UsageError
from .storage import frames, queries
from .storage.store import Store
from .storage.store import open_store as _open_store

__all__ = ["NotebookResult", "NotebookStore", "open_store"]


@dataclass(repr=False)
class NotebookResult(Result):
    """A ``Result`` that knows the store and traces it came from, so it can draw its figures."""

    _store: Any = field(default=None, compare=False)
    _trace_ids: list = field(default_factory=list, compare=False)
    _figures: list | None = field(default=None, compare=False)

    def figures(self) -> list:
        """The analysis' Plotly figures (the dashboard page's builders; [] when it has none). Each displays
        inline in Jupyter (``fig.show()`` elsewhere). Built once, on first call, from the open store."""
        if self._figures is None:
            from .reports.result_figures import figures

            self._figures = figures(self._store, self._trace_ids, self)
        return self._figures

    def __repr__(self) -> str:
        tables = ", ".join(f"{n} ({df.shape[0]}×{df.shape[1]})" for n, df in self.tables.items()) or "none"
        return (f"<Result {self.name!r}: {len(self.scalars)} scalars, tables: {tables}; "
                f"{len(self.warnings)} warning(s)>")

    def _summary_html(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(json_safe(v)))[:200]}</td></tr>"
                       for k, v in self.scalars.items() if not isinstance(v, (dict, list)))
        warn = "".join(f"<li>{html.escape(w)}</li>" for w in self.warnings)
        tables = ", ".join(f"<code>{html.escape(n)}</code> ({df.shape[0]} rows)" for n, df in self.tables.items())
        return (f"<h4>{html.escape(self.name)}</h4><table>{rows}</table>"
                + (f"<p>Warnings:</p><ul>{warn}</ul>" if warn else "")
                + (f"<p>Tables (<code>.tables[name]</code>): {tables}</p>" if tables else ""))

    def _repr_html_(self) -> str:
        return self._summary_html()

    def _ipython_display_(self) -> None:  # Jupyter: the numbers, then each figure through plotly's renderer
        from IPython.display import HTML, display

        display(HTML(self._summary_html()))
        for fig in self.figures():
            display(fig)


class NotebookStore(Store):
    """An open store with DataFrame accessors and the analyses (module docstring)."""

    def traces(self) -> pd.DataFrame:
        """One row per trace, in ingest order (``storage.queries.list_traces``)."""
        return queries.list_traces(self)

    def trace_id(self, trace=None) -> str:
        """The id of the trace ``trace`` names (id, prefix, file, name); None: the store's only trace."""
        if trace is not None:
            return queries.resolve_trace(self, trace)
        ids = list(self.traces()["trace_id"])
        if len(ids) != 1:
            raise UsageError(f"the store holds {len(ids)} traces: name one (store.traces() lists them).")
        return ids[0]

    def tables(self) -> list[str]:
        """The names ``table()`` takes."""
        return frames.table_names(self)

    def table(self, name: str, trace=None, limit: int | None = None) -> pd.DataFrame:
        """The stored table ``name`` as a DataFrame (``trace``'s rows only when given; at most ``limit``)."""
        return frames.table_frame(self, name, None if trace is None else self.trace_id(trace), limit)

    def analyses(self) -> pd.DataFrame:
        """The registered analyses: name, description, multi (takes several traces)."""
        return pd.DataFrame([{"name": a.name, "description": a.description, "multi": a.multi}
                             for a in ANALYSES.values()])

    def analyze(self, name: str, trace=None, **options) -> NotebookResult:
        """The analysis ``name`` on ``trace`` (a multi-trace analysis: a list of traces, or None and
        ``by=``/``sweep=``) with ``options``."""
        a = get_analysis(name)
        if a.multi:
            refs = [trace] if isinstance(trace, str) else list(trace or [])
            ids = [self.trace_id(t) for t in refs] or None
            options.setdefault("by", "batch")
            r = a.fn(self, ids, **options)
            ids = ids or []
        else:
            ids = [self.trace_id(trace)]
            r = a.fn(self, ids[0], **options)
        return NotebookResult(**vars(r), _store=self, _trace_ids=ids)

    def figures(self, name: str, trace=None, **options) -> list:
        """``analyze(name, trace, **options).figures()``."""
        return self.analyze(name, trace, **options).figures()

    def ingest(self, path, name: str | None = None, labels: dict | None = None) -> pd.DataFrame:
        """Ingest a trace file, a run folder or a folder of them; one row per trace: path, status
        ('ingested', 'skipped' when already stored, 'failed'), trace_id, message."""
        from .storage.ingest import ingest_paths

        if self.read_only:
            raise UsageError("this store was opened read-only; open_store(path) to ingest into it.")
        res = ingest_paths(self, [path], name=name, labels=labels, progress=False)
        return pd.DataFrame([{"path": r.path, "status": r.status, "trace_id": r.trace_id, "message": r.message}
                             for r in res])

    def __repr__(self) -> str:
        return f"NotebookStore({str(self.path)!r}, read_only={self.read_only})"


def open_store(path=None, read_only: bool = False) -> NotebookStore:
    """Open (create and migrate when writable) the store at ``path`` (default: ``kernelscope.duckdb``'s usual
    place, as the CLI) for notebook use."""
    s = _open_store(path, read_only=read_only)
    return NotebookStore(s.path, s.con, s.read_only)
