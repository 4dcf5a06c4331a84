"""The ``kernelscope`` command line: one click group of thin commands.

- ``app``: the group, its shared options (``--db``, ``--format``), store opening, one-line errors, ``main``;
- ``commands``: the commands themselves (parse arguments, call storage/analysis functions, print);
- ``render``: how results, tables and SQL rows are printed (text table, JSON, CSV);
- ``readme``: the CLI reference README.md embeds.

``python -m kernelscope.cli --readme`` prints the CLI reference that README.md embeds
(``--write-readme`` rewrites that part of README.md in place).
"""

from __future__ import annotations

from . import commands  # noqa: F401 - registers the commands on the group
from .app import cli, main, one_line
from .readme import README_END, README_START, cli_reference

__all__ = ["README_END", "README_START", "cli", "cli_reference", "main", "one_line"]
