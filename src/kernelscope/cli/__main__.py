"""``python -m kernelscope.cli``: the CLI, plus ``--readme`` (print the CLI reference README.md embeds) and
``--write-readme`` (rewrite that part of README.md in place)."""

import sys

import click

from . import main
from .readme import cli_reference, write_readme

if sys.argv[1:] == ["--readme"]:
    click.echo(cli_reference(), nl=False)
elif sys.argv[1:] == ["--write-readme"]:
    write_readme()
else:
    main()
