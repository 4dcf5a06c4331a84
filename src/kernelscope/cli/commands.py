"""The ``kernelscope`` commands: each parses its arguments, calls storage/analysis functions and prints through
``render``. Heavy modules (duckdb, pandas, torch) are imported inside the commands so ``kernelscope --help`` stays
fast."""

from __future__ import annotations

import pathlib
import sys

import click

from ..errors import UsageError
from ..units import BYTES_PER_MB
from .app import (
    cli,
    db_option,
    db_path,
    format_options,
    label_pairs,
    number_or_text,
    one_line,
    open_db,
    output_format,
    resolve,
    stop_within,
)
from .render import emit_frame, emit_result, emit_sql


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Label every ingested trace (repeatable; numeric values are stored as numbers).")
@click.option("--name", default=None, help="Trace name (default: the file name without extension).")
@click.option("--no-python", is_flag=True, help="Skip python_function events.")
@click.option("--salvage", is_flag=True,
              help="Keep the complete events of a Kineto trace cut short (a job killed while writing it; a cut "
                   "gzip is decompressed as far as it goes) and mark the trace truncated.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where the rank files of a multi-rank run are parsed and derived: this machine's process pool, "
                   "or one Ray task per rank (pip install 'kernelscope[ray]'; the store's folder must be "
                   "on storage every node sees). Same rows either way.")
@click.option("--ray-address", default=None, metavar="ADDRESS", envvar="RAY_ADDRESS", show_envvar=True,
              help="The Ray cluster for --engine ray (default: a local Ray instance for this ingest).")
@click.option("--parquet", "parquet_dir", default=None, metavar="DIR", type=click.Path(path_type=pathlib.Path),
              help="Write one run of ranks as a Parquet dataset in DIR (new or empty; the layout of "
                   "`export --parquet`) instead of into the store: each rank's worker or Ray task writes its own "
                   "partitions, with no single-file insert. Analyse it in place with --db DIR.")
@db_option
def ingest(paths, labels, name, no_python, salvage, engine, ray_address, parquet_dir, db):
    """Ingest traces: Kineto (.json, .json.gz), Nsight Systems (.sqlite, .sqlite.gz, .nsys-rep, or a
    `nsys export --type parquetdir` folder), Nsight Compute CSVs (.csv, .csv.gz: matched to the stored
    trace of the same workload), or directories of traces (recursive).

    A collector run directory (run.json beside trace.json.gz, as `kernelscope profile` writes) is
    ingested as one trace with its telemetry, provenance, un-profiled timings and labels. Its Nsight
    passes (`profile --nsys/--ncu`) come with it: NAME.sqlite as a second trace of the same run
    (labels collector=kineto / collector=nsys), NAME_ncu.csv joined to its Kineto trace (docs/nsight.md).

    Rank traces of a multi-GPU run (distributedInfo world size > 1, or rank<N> in the name) in one
    folder become one run, in one transaction: each line says the rank and where it came from; rank
    collisions and mixed runs are refused in one line (docs/metrics.md, Communication). A sample of
    ranks (e.g. 2 of a world of 128) is a partial run: each line names the missing ranks.

    A trace cut short (the job was killed while writing it) is refused unless --salvage is given; then
    every complete event before the cut is kept and the trace is marked truncated (summary trust,
    `traces`). Negative durations are stored as 0 and counted; events of categories kernelscope does
    not map (other accelerators, profiler ranges) are kept aside and counted (summary trust).

    Memory and threads: DuckDB gets one thread per usable core (CPU affinity, at most 16) and 256MB per
    thread (at most a quarter of RAM); KERNELSCOPE_THREADS and KERNELSCOPE_MEMORY_LIMIT (e.g. 2GB)
    override them, and a memory limit given alone cuts the threads to one per 256MB. Out of memory,
    the tables are derived again with 2 threads and 256MB, then 1 thread (docs/ingest.md).

    Prints one line per file (ingested or skipped, with the trace id); failures go to stderr as
    `kernelscope: <path>: <reason>` and make the exit code non-zero. A file that fails leaves no rows.
    """
    from ..parsers.pool import prestart
    from ..storage.sizing import usable_cores

    # a big trace file given: its parse workers start now, beside the imports and the store's migrations
    with prestart(paths if parquet_dir is None else (), usable_cores()):
        results = _ingest(paths, labels, name, no_python, salvage, engine, ray_address, parquet_dir, db)
    failed = 0
    for r in results:
        if r.status == "failed":
            failed += 1
            click.echo(f"kernelscope: {one_line(r.path)}: {one_line(r.message)}", err=True)
        elif r.status == "skipped":
            click.echo(f"skipped   {r.trace_id}  {r.path}  ({r.message or 'already stored'})")
        else:
            note = f"; {r.notes}" if r.notes else ""  # the id is printed already
            click.echo(f"ingested  {r.trace_id}  {r.path}  ({r.events} events, {r.seconds:.2f} s{note})")
    if failed:
        sys.exit(1)


def _ingest(paths, labels, name, no_python, salvage, engine, ray_address, parquet_dir, db) -> list:
    """The ingest command's work: the paths into the store, or a run of ranks into a Parquet dataset."""
    from ..storage import engine as engines
    from ..storage.ingest import ingest_paths

    label_map = label_pairs(labels)
    where = engines.Engine(engine, ray_address)
    engines.check(where)  # Ray missing: one line before any work
    if parquet_dir is not None:
        from ..storage.ingest import ingest_run_parquet

        if name is not None:
            raise UsageError("--name applies to one trace; --parquet writes a run of ranks")
        return ingest_run_parquet(paths, parquet_dir, labels=label_map, python_functions=not no_python,
                                  salvage=salvage, engine=where)
    with open_db(db, read_only=False) as store:
        return ingest_paths(store, paths, labels=label_map, name=name, python_functions=not no_python,
                            salvage=salvage, engine=where)


@cli.command()
@format_options
@db_option
def traces(fmt, as_json, db):
    """List stored traces: id, name, source, labels and headline counts.

    Columns: id, name, source, format, rank, labels, devices (the device indices; device_ids in the table),
    kernels, gpu_span_ns (first to last GPU activity over all devices), ingested_ns (JSON and CSV only), notes
    (a TRUNCATED trace, a partial run, negative durations stored as 0, device events set aside; `summary TRACE`
    has the details).
    """
    from ..storage.queries import list_traces

    fmt = output_format(fmt, as_json)
    with open_db(db, read_only=True) as store:
        df = list_traces(store).rename(columns={"trace_id": "id"})
    if fmt == "table":
        df["labels"] = [" ".join(f"{k}={v}" for k, v in lab.items()) for lab in df["labels"]]
        df["devices"] = [",".join(map(str, d)) for d in df["devices"]]
        df["notes"] = ["; ".join(n) for n in df["notes"]]
        # the device indices, not a count: "0" under "devices" read as no device on a GPU trace
        df = df.drop(columns=["ingested_ns"]).rename(columns={"devices": "device_ids"})
    else:
        from ..storage.labels import typed_label

        df["labels"] = [{k: typed_label(v) for k, v in lab.items()} for lab in df["labels"]]
        df["devices"] = [[int(d) for d in devs] for devs in df["devices"]]
        if fmt == "csv":  # one JSON text per cell (never a Python repr): {"batch": 8}, [0, 1]
            import json

            df["labels"] = [json.dumps(lab, sort_keys=True) for lab in df["labels"]]
            df["devices"] = [json.dumps(devs) for devs in df["devices"]]
            df["notes"] = [json.dumps(n) for n in df["notes"]]
    emit_frame(df, fmt)


@cli.command()
@click.argument("trace", required=False)
@format_options
@click.option("--table", "table", default=None, metavar="NAME",
              help="Print only this table of the result (top_kernels, top_operators, ...).")
@db_option
def summary(trace, fmt, as_json, table, db):
    """Summarise one trace: counts, GPU time, top kernels and operators, trust.

    Counts, kernel time, GPU busy/idle/span, latency, top kernels and operators by GPU time, and a
    trust section (matched launches, negative launch times, dropped records). Definitions:
    docs/metrics.md. TRACE may be left out when the store holds one trace.
    """
    from ..analysis import get_analysis
    from ..storage.queries import only_trace

    fmt = output_format(fmt, as_json)
    with open_db(db, read_only=True) as store:
        trace_id = resolve(store, [trace])[0] if trace else only_trace(store, "summary")
        result = get_analysis("summary").fn(store, trace_id)
    emit_result(result, fmt, table)


@cli.command()
@click.argument("trace")
@click.argument("labels", nargs=-1, required=True, metavar="KEY=VALUE...")
@db_option
def label(trace, labels, db):
    """Set labels on a stored trace (replacing a label of the same key)."""
    from ..storage.queries import set_labels

    label_map = label_pairs(labels)
    with open_db(db, read_only=False) as store:
        (trace_id,) = resolve(store, [trace])
        set_labels(store, trace_id, label_map)
    click.echo(f"labelled  {trace_id}  " + " ".join(f"{k}={v}" for k, v in label_map.items()))


@cli.command()
@click.argument("traces_", nargs=-1, required=True, metavar="TRACE...")
@db_option
def rm(traces_, db):
    """Remove traces and all their rows from the store."""
    from ..storage.queries import remove_traces

    with open_db(db, read_only=False) as store:
        ids = resolve(store, traces_)
        remove_traces(store, ids)
    for trace_id in ids:
        click.echo(f"removed   {trace_id}")


class _Seconds(click.ParamType):
    """A finite number of seconds above 0 (at most a day): ``0``, ``-1``, ``nan`` and ``inf`` are refused."""

    name = "seconds"

    def convert(self, value, param, ctx):
        from ..storage.queries import check_sql_timeout

        try:
            return check_sql_timeout(value)
        except UsageError as exc:
            self.fail(f"{exc}.", param, ctx)


def _sql_text(query: str | None, query_file: str | None) -> str:
    """The query from the argument, a file (``--file PATH``) or standard input (``-``)."""
    import os
    import stat

    from ..storage.queries import MAX_SQL_TEXT_BYTES

    if query is not None and query_file is not None:
        raise UsageError("give the query either as QUERY or with --file, not both")
    if query is None and query_file is None:
        raise UsageError("give a query: QUERY, --file PATH, or --file - to read standard input")
    source = query_file if query_file is not None else ("-" if query == "-" else None)
    if source is None:
        return query
    where = "standard input" if source == "-" else source
    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_SQL_TEXT_BYTES + 1)
        else:
            if not stat.S_ISREG(os.stat(source).st_mode):
                raise UsageError(f"{source}: not a regular file; pipe a query with --file -")
            with open(source, "rb") as fh:
                data = fh.read(MAX_SQL_TEXT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{where}: cannot read the query: {exc.strerror or exc}") from None
    if len(data) > MAX_SQL_TEXT_BYTES:
        raise UsageError(f"{where}: the query is longer than {MAX_SQL_TEXT_BYTES >> 20} MB")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UsageError(f"{where}: the query is not UTF-8 text") from None


@cli.command()
@click.argument("query", required=False)
@click.option("--file", "-f", "query_file", default=None, metavar="PATH",
              help="Read the query from this file ('-': standard input) instead of QUERY.")
@click.option("--timeout", "timeout_s", type=_Seconds(), default=30.0, show_default=True,
              help="Cancel the query after this many seconds (above 0, at most 86400).")
@format_options
@db_option
def sql(query, query_file, timeout_s, fmt, as_json, db):
    """Run one read-only SQL query on the store.

    QUERY is the statement; `-` (or --file -) reads it from standard input. No writes, no file or
    network access, no extensions, no configuration changes, a time limit, and a memory bound: the
    query and its printing may add at most $KERNELSCOPE_SQL_MEMORY_LIMIT (default 1GB) to this process
    (DuckDB gets three quarters of it and never spills to disk); a query that needs more stops with one
    line. Rows stream out as they come; every value (lists too) prints in full.
    """
    from ..storage.queries import ReadonlySql

    text = _sql_text(query, query_file)
    fmt = output_format(fmt, as_json)
    with ReadonlySql(db_path(db), text, timeout_s=timeout_s, bound_process=True) as q:
        try:
            emit_sql(q, fmt)
        except MemoryError as exc:  # printing ran out of the bound
            raise q.error(exc) from None


@cli.command()
@click.argument("name", required=False)
@click.argument("traces_", nargs=-1, metavar="TRACE...")
@click.option("--list", "list_", is_flag=True, help="List the available analyses and exit.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="Pass an option to the analysis (repeatable; numbers are passed as numbers).")
@click.option("--by", "by", default=None, metavar="LABEL",
              help="Multi-trace analyses (transition): the numeric label that orders the points "
                   "[default: batch].")
@click.option("--sweep", "sweep", default=None, metavar="NAME",
              help="Multi-trace analyses: use the traces labelled sweep=NAME (instead of listing TRACEs).")
@format_options
@click.option("--table", "table", default=None, metavar="NAME", help="Print only this table of the result.")
@db_option
def analyze(name, traces_, list_, options, by, sweep, fmt, as_json, table, db):
    """Run the analysis NAME on one or more traces, or list the analyses with --list.

    With several traces, JSON output is a list with one result per trace. A multi-trace analysis
    (transition) gives one result over all its traces: `kernelscope analyze transition --by batch
    [TRACE...|--sweep NAME]`; with no TRACE and no --sweep it takes every trace with the --by label.
    Another analysis without TRACE runs on the store's one trace (an error names them when there are several).
    """
    import json

    import pandas as pd

    from ..analysis import ANALYSES, get_analysis
    from ..storage.queries import only_trace

    fmt = output_format(fmt, as_json)
    if list_:
        df = pd.DataFrame([{"name": a.name, "description": a.description} for a in ANALYSES.values()])
        if fmt == "table":  # whole descriptions: they are the only documentation a user sees here
            width = max(len(n) for n in df["name"])
            for row in df.itertuples(index=False):
                click.echo(f"{row.name:<{width}}  {row.description}")
        else:
            emit_frame(df, fmt)
        return
    if not name:
        raise UsageError("give an analysis name (and TRACEs, unless the store holds one trace), or --list to see "
                         "the analyses.")
    analysis = get_analysis(name)
    kwargs = {k: number_or_text(v) for k, v in (_split_option(o) for o in options)}
    if analysis.multi:
        if traces_ and sweep:
            raise UsageError(f"give either TRACEs or --sweep to `analyze {name}`, not both.")
        with open_db(db, read_only=True) as store:
            ids = resolve(store, traces_) if traces_ else None
            result = analysis.fn(store, ids, by=by or "batch", sweep=sweep, **kwargs)
        emit_result(result, fmt, table)
        return
    if by is not None or sweep is not None:
        raise UsageError(f"--by and --sweep apply to multi-trace analyses only; '{name}' takes TRACEs.")
    with open_db(db, read_only=True) as store:
        ids = resolve(store, traces_) if traces_ else [only_trace(store, f"analyze {name}")]
        results = [analysis.fn(store, trace_id, **kwargs) for trace_id in ids]
    if fmt == "json" and table is None and len(results) > 1:
        click.echo(json.dumps([r.to_dict() for r in results], indent=2, allow_nan=False))
        return
    for i, result in enumerate(results):
        if i and fmt == "table":
            click.echo("")
        emit_result(result, fmt, table)


def _split_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"option '{text}' is not KEY=VALUE; write it like `-o top=20`.")
    return key.strip(), value




@cli.command()
@click.argument("a")
@click.argument("b")
@click.option("--sweeps", is_flag=True, help="A and B are sweep names (label sweep=NAME): pair their points "
              "by the --by label.")
@click.option("--by", "by", default="batch", show_default=True, metavar="LABEL",
              help="With --sweeps: the numeric label that pairs the points.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="RULE",
              help="Exit 1 when B vs A breaks RULE: METRIC>THRESHOLD or METRIC<THRESHOLD, the threshold "
                   "signed, in % (relative) or absolute (ns), e.g. \"latency_ns>+5%\" (repeatable).")
@format_options
@click.option("--table", "table", default=None, metavar="NAME", help="Print only this table of the result.")
@db_option
def diff(a, b, sweeps, by, fail_on, fmt, as_json, table, db):
    """Compare trace B with trace A (or sweep B with sweep A with --sweeps): kernel groups matched by
    operator signature, normalised kernel name, then category; count/time deltas; headline changes.

    With --fail-on, prints one line per violated rule on stderr and exits 1 (for CI).
    """
    from ..analysis.diff import diff as diff_fn
    from ..analysis.diff import parse_rule, violations

    fmt = output_format(fmt, as_json)
    rules = [parse_rule(r) for r in fail_on]
    with open_db(db, read_only=True) as store:
        if sweeps:
            result = diff_fn(store, None, by=by, sweep=a, sweep_b=b)
        else:
            result = diff_fn(store, resolve(store, [a, b]), by=by)
    emit_result(result, fmt, table)
    bad = violations(result, rules)
    for line in bad:
        click.echo(f"kernelscope: {line}", err=True)
    if bad:
        sys.exit(1)


@cli.command()
@click.argument("traces_", nargs=-1, metavar="TRACE...")
@click.option("--by", "by", default=None, metavar="LABEL",
              help="Treat the traces as a sweep over this numeric label (adds the sweep section; the "
                   "traces appear in the label's order, ties by name).")
@click.option("--sweep", "sweep", default=None, metavar="NAME",
              help="Report every trace labelled sweep=NAME (instead of TRACEs); implies --by batch.")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), default=None,
              help="File to write (required for HTML; Markdown goes to stdout without it).")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default=None,
              help="html (one self-contained file) or md (headline tables for a pull request); "
                   "default: from the -o suffix, else html.")
@db_option
def report(traces_, by, sweep, output, fmt, db):
    """Write a report of one or more traces: one self-contained HTML file (plotly.js inline, opens
    offline) or a Markdown summary.

    Sections: overview and trust, launch overhead, bound-ness (and the sweep with several traces or
    --by), bandwidth and roofline, operators, power, steps, modules, call stacks and memory (each when
    its data exists). The figures are the dashboard's. Without TRACE or --sweep: the store's one trace.
    """
    import os
    import tempfile

    from ..analysis.transition import select_traces
    from ..reports.report import report as build_report
    from ..storage.queries import only_trace

    fmt = fmt or ("md" if output and output.lower().endswith(".md") else "html")
    if fmt == "html" and not output:
        raise UsageError("an HTML report needs a file: add -o report.html (or --format md for stdout).")
    if traces_ and sweep:
        raise UsageError("give TRACEs or --sweep NAME to `kernelscope report`, not both.")
    with open_db(db, read_only=True) as store:
        if traces_:
            ids = resolve(store, traces_)
        elif sweep:
            ids = select_traces(store, by or "batch", sweep)
        else:
            ids = [only_trace(store, "report")]
        if not ids:
            raise UsageError(f"no trace carries the labels sweep={sweep} and {by or 'batch'}=<number>.")
        text = build_report(store, ids, by=by or ("batch" if sweep else None), fmt=fmt)
    if not output:
        click.echo(text, nl=False)
        return
    out = os.path.abspath(output)
    fd, tmp = tempfile.mkstemp(prefix=".kernelscope-report-", dir=os.path.dirname(out))
    try:  # write then rename: a failed report never leaves a half-written file
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as any new file (mkstemp's is 0600: a report is for sharing)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    click.echo(f"wrote {output} ({os.path.getsize(out) / BYTES_PER_MB:.1f} MB, {len(ids)} "
               f"trace{'' if len(ids) == 1 else 's'})")


# ---------------------------------------------------------------------------------------------------
# Dashboard
# ---------------------------------------------------------------------------------------------------


#: Seconds the dashboard may take to end after Ctrl-C before it exits anyway (cli.app.stop_within); the
#: --logdir watcher's own stop (logdir_process.STOP_S) comes on top.
DASHBOARD_STOP_S = 10


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind; the default serves this machine only. Any other address (e.g. "
                   "0.0.0.0) prints a warning and requires an access token.")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(1, 65535))
@click.option("--token", default=None, metavar="TEXT", envvar="KERNELSCOPE_DASHBOARD_TOKEN", show_envvar=True,
              help="Access token every request must carry (8+ characters of A-Z a-z 0-9 . _ ~ -). Default: "
                   "none on loopback; beyond it, a new random one, printed in the URL.")
@click.option("--logdir", default=None, metavar="DIR", type=click.Path(),
              help="Folder torch.profiler.tensorboard_trace_handler writes to: its traces are ingested now and as "
                   "they appear (the worker files of one profiling cycle as the ranks of one run, each cycle a "
                   "trace of its own); it may not exist yet.")
@db_option
def dashboard(host, port, token, logdir, db):
    """Serve the web dashboard over a store and print its URL.

    Pages read through short-lived read-only connections, so `kernelscope ingest` can run meanwhile:
    it waits (up to 30 s) for the pages being drawn, pages drawn while it writes say the store is busy,
    and new traces appear on refresh. With --logdir DIR a watcher process ingests DIR's complete trace
    files into the store (created if missing) while the dashboard runs (docs/logdir.md). With a token (given,
    or generated when --host is beyond loopback) a request without it gets 401: open the printed URL
    once (?token=..., then a cookie) or send the X-Kernelscope-Token header. Stop with Ctrl-C: a second Ctrl-C,
    or 10 s (with --logdir 25 s) without the process ending, ends it anyway and says where it waited.
    """
    try:
        from ..dashboard.app import serve, token_problem
    except ImportError as exc:  # dash is an extra
        raise UsageError(f"the dashboard needs dash ({exc.name} is missing): pip install 'kernelscope[dashboard]'"
                         ) from None
    if token is not None and token_problem(token):
        raise UsageError(f"--token {token_problem(token)}")
    import os
    import pathlib

    from ..errors import StoreLockedError

    if logdir is not None and os.path.exists(logdir) and not os.path.isdir(logdir):
        raise UsageError(f"--logdir {logdir} is a file, not a folder; give the folder "
                         "torch.profiler.tensorboard_trace_handler writes to")
    if pathlib.Path(db_path(db)).is_file() or logdir is not None:
        try:  # a store from an older kernelscope is migrated once here (with --logdir: created); pages read it
            open_db(db, read_only=False).close()
        except StoreLockedError:  # an ingest is running: it migrates; pages say "busy" until it ends
            pass
    with open_db(db, read_only=True):  # a missing or foreign store fails here, in one line
        pass
    if logdir is None:
        stop_within(DASHBOARD_STOP_S)
        serve(db_path(db), host=host, port=port, token=token)
        return
    from ..storage import logdir_process as watch

    folder = os.path.abspath(logdir)
    click.echo(f"kernelscope: watching {folder} for torch.profiler traces; each is ingested once complete",
               err=True)
    running = watch.start(folder, db_path(db))
    stop_within(DASHBOARD_STOP_S + watch.STOP_S, sigterm=True)  # `kill` stops the watcher too
    try:
        serve(db_path(db), host=host, port=port, token=token, logdir=folder)
    finally:
        watch.stop(running)


@cli.command()
@click.option("--parquet", "parquet_dir", required=True, metavar="DIR", type=click.Path(),
              help="Folder to write the Parquet dataset to (new or empty).")
@click.option("--run", "run", default=None, metavar="RUN",
              help="Export only this run (a run id, or a trace id for a trace outside any run).")
@db_option
def export(parquet_dir, run, db):
    """Export the store as a Parquet dataset: one folder per table, hive-partitioned by run and rank
    (DIR/<table>/run=<run>/rank=<rank>/data_0.parquet), plus a manifest of columns and types
    (docs/export.md). DuckDB, Spark or Trino read it in place; kernelscope's analyses run on it through
    `kernelscope.storage.export.open_parquet_store(DIR)`.
    """
    from ..storage.export import export_parquet

    with open_db(db, read_only=True) as store:
        info = export_parquet(store, parquet_dir, run=run)
    click.echo(f"exported  {info.tables} tables, {info.rows:,} rows of {info.runs} run(s), "
               f"{info.bytes / BYTES_PER_MB:.2f} MB  {info.path}")


# registers `check` and `mcp` (cli/check.py), `profile` and `sweep` (cli/collect.py)
from . import check, collect  # noqa: E402,F401
