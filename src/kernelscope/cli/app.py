"""The ``kernelscope`` click group and what every command shares: the ``--db`` and ``--format`` options, labels
given as KEY=VALUE, opening the store, resolving TRACE arguments, and the one-line error handling.

Heavy modules (duckdb, pandas, torch) are imported inside functions so ``kernelscope --help`` stays fast. Every
``KernelscopeError`` becomes one line ``kernelscope: <message>`` on stderr and its ``exit_code``.
"""

from __future__ import annotations

from typing import Any

import click

from .. import __version__
from ..errors import KernelscopeError, UsageError

FORMATS = ("table", "json", "csv")
HELP_WIDTH = 100


class _Group(click.Group):
    """A group that turns user errors into one line on stderr and the error's exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KernelscopeError as exc:
            click.echo(f"kernelscope: {one_line(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except Exception as exc:  # a store that fails while read (DuckDB reads blocks lazily): one line
            from ..storage.store import damaged_store_error

            err = damaged_store_error(exc)
            if err is None:
                raise
            click.echo(f"kernelscope: {err}", err=True)
            ctx.exit(err.exit_code)


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped (a file name may hold a newline): an
    error stays one line on stderr."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"],
                                           "max_content_width": HELP_WIDTH})
@click.version_option(__version__, "--version", prog_name="kernelscope", message="%(prog)s %(version)s")
def cli():
    """kernelscope: GPU profiling and trace analysis for PyTorch.

    Ingest Kineto traces into a DuckDB store, then list, summarise, analyse and query them.
    TRACE arguments accept a trace id, a unique id prefix, or the source file name.
    """


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv, prog_name="kernelscope")


# --------------------------------------------------------------------------------------------- options


def db_option(fn):
    return click.option(
        "--db",
        "db",
        type=click.Path(),  # a directory is refused by open_store in one line (click's error is three)
        metavar="FILE",
        envvar="KERNELSCOPE_DB",
        show_envvar=True,
        help="Store file (read-only commands also take a folder `kernelscope export --parquet` wrote). "
             "Default: $KERNELSCOPE_DB, else ./kernelscope.duckdb.",
    )(fn)


def format_options(fn):
    fn = click.option("--json", "as_json", is_flag=True, help="Same as --format json.")(fn)
    fn = click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format.",
    )(fn)
    return fn


def output_format(fmt: str, as_json: bool) -> str:
    """The format a command prints: ``--json`` wins over ``--format``."""
    return "json" if as_json else fmt


def label_pairs(values) -> dict[str, Any]:
    """KEY=VALUE texts as a dict; an empty value is refused in one line."""
    from ..storage.labels import parse_label

    labels: dict[str, str] = {}
    for text in values:
        key, value, _number = parse_label(text)
        if not value.strip():
            raise UsageError(f"label {text!r} has an empty value; write it as key=value (e.g. batch=8)")
        labels[key] = value
    return labels


def number_or_text(text: str) -> Any:
    """An int, else a float, else the text itself (`-o key=value` options, `--grid` values)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def db_path(db: str | None) -> str:
    from ..storage.store import default_db_path

    return str(db) if db else str(default_db_path())


def open_db(db: str | None, read_only: bool):
    """The store at ``--db``: a DuckDB file, or (read-only commands) a Parquet dataset that `kernelscope export
    --parquet` wrote, which every analysis reads in place (a run too large for one store file): ``open_store``
    tells them apart."""
    from ..storage.store import open_store

    return open_store(db_path(db), read_only=read_only)


def resolve(store, refs) -> list[str]:
    """Trace ids of TRACE arguments (an id, a unique id prefix, or the source file name)."""
    from ..storage.queries import resolve_trace

    return [resolve_trace(store, ref) for ref in refs]


def stop_within(limit_s: float, *, sigterm: bool = False) -> None:
    """Bound how long a long-running command (the dashboard) takes to end after Ctrl-C.

    The first Ctrl-C (SIGINT; with ``sigterm``, also SIGTERM, as ``sys.exit(143)``) stops the process as before and
    arms a timer: a process still alive ``limit_s`` later (something it waits for while exiting never ends) writes
    one ``kernelscope:`` line and every thread's stack to stderr, then exits at once (130 after Ctrl-C, 143 after
    SIGTERM). A second Ctrl-C exits at once."""
    import faulthandler
    import os
    import signal
    import threading

    armed: list[threading.Timer] = []

    def report() -> None:
        try:
            os.write(2, f"kernelscope: still running {limit_s:g} s after it was told to stop; exiting now. "
                        "Where each thread waited:\n".encode())
            faulthandler.dump_traceback(file=2, all_threads=True)
        except OSError:
            pass

    def give_up(code: int) -> None:
        writer = threading.Thread(target=report, name="kernelscope-stop-report", daemon=True)
        writer.start()
        writer.join(2)  # stderr may be a pipe nobody reads: never wait on it for long
        os._exit(code)

    def arm(code: int) -> None:
        if armed:
            os._exit(code)
        timer = threading.Timer(limit_s, give_up, args=(code,))
        timer.daemon = True
        timer.start()
        armed.append(timer)

    def on_int(signum, frame):
        arm(128 + signal.SIGINT)
        signal.default_int_handler(signum, frame)

    def on_term(_signum, _frame):
        arm(128 + signal.SIGTERM)
        raise SystemExit(128 + signal.SIGTERM)

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored when started as a shell script's `&` job
        signal.signal(signal.SIGINT, on_int)
    if sigterm:
        signal.signal(signal.SIGTERM, on_term)
