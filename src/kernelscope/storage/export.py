"""The store as a Parquet dataset (docs/export.md), and a read-only store over such a dataset.

``export_parquet(store, DIR, run=None)`` writes every table of the store as ``DIR/<table>/`` in hive layout,
partitioned by run and rank: ``DIR/<table>/run=<run>/rank=<rank>/data_0.parquet``. A row's run is its
trace's ``run_id``, or the trace id for a trace outside any run; its rank is its trace's rank. Tables
without ``trace_id`` but with ``run_id`` (``runs``) are partitioned by run only; any other table is one
file ``DIR/<table>/data_0.parquet``. ``DIR/kernelscope_export.json`` (the manifest) records each table's
columns with their DuckDB types, its partition columns and row count, and the store's schema version.
Empty tables have no folder (only their manifest entry). The partition columns ``run``/``rank`` are
not stored inside the files (hive convention): readers such as DuckDB, Spark or Trino add them from the
path.

``open_parquet_store(DIR)`` opens an in-memory DuckDB with one view per table over
``read_parquet(..., hive_partitioning = true)`` giving exactly the store's columns and types, so analyses
run on it unchanged.
"""

from __future__ import annotations

import json
import pathlib
import re
from dataclasses import dataclass

from .. import __version__
from ..errors import StoreError, UsageError

MANIFEST = "kernelscope_export.json"
FORMAT = "kernelscope-parquet"
FORMAT_VERSION = 1


@dataclass
class ExportInfo:
    path: str
    tables: int
    rows: int
    bytes: int
    runs: int


def _sql_str(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _tables(con) -> dict[str, list[tuple[str, str]]]:
    rows = con.execute(
        """SELECT c.table_name, c.column_name, c.data_type
           FROM information_schema.columns c JOIN information_schema.tables t
             ON t.table_name = c.table_name AND t.table_schema = c.table_schema
           WHERE c.table_schema = 'main' AND t.table_type = 'BASE TABLE'
             AND c.table_name <> 'schema_version'
           ORDER BY c.table_name, c.ordinal_position"""
    ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, col, typ in rows:
        out.setdefault(table, []).append((col, typ))
    return out


def _dir_size(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def export_parquet(store, out_dir, run: str | None = None, published=()) -> ExportInfo:
    """Write the store (or only run ``run``: a run id, or a trace id for a trace outside any run) as a
    Parquet dataset in ``out_dir``, which must be empty or absent. Returns what was written.

    ``published``: tables whose partitions of run ``run`` are in ``out_dir`` already, put there from the rank
    workers' files by ``ingest --parquet`` (storage/rankrun.py, ``_publish_all``); their rows are counted from
    those files, not written again (``out_dir`` then holds them and nothing else)."""
    out = pathlib.Path(out_dir).expanduser()
    published = set(published)
    if out.exists() and (not out.is_dir() or any(p.name not in published for p in out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder; choose a new folder for the export")
    con = store.con
    tr_run = "coalesce(tr.run_id, tr.trace_id)"
    if run is not None:
        n = con.execute(f"SELECT count(*) FROM traces tr WHERE {tr_run} = ?", [run]).fetchone()[0]
        if not n:
            known = [r[0] for r in con.execute(f"SELECT DISTINCT {tr_run} FROM traces tr ORDER BY 1").fetchall()]
            raise UsageError(f"no run or trace '{run}' in the store; runs: {', '.join(known[:10]) or 'none'}")
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "kernelscope_version": __version__,
                "schema_version": store.schema_version(), "run": run, "tables": {}}
    total_rows = 0
    where_run = "" if run is None else f"WHERE run = {_sql_str(run)}"
    for table, cols in _tables(con).items():
        names = [c for c, _ in cols]
        if "trace_id" in names:
            rank_col = "" if "rank" in names else ", coalesce(tr.rank, 0) AS rank"
            select = (f"SELECT * FROM (SELECT x.*, coalesce({tr_run}, x.trace_id) AS run{rank_col} "
                      f"FROM {table} x LEFT JOIN traces tr ON tr.trace_id = x.trace_id) {where_run}")
            parts = ["run", "rank"]
        elif "run_id" in names:
            select = f"SELECT * FROM (SELECT x.*, x.run_id AS run FROM {table} x) {where_run}"
            parts = ["run"]
        else:
            select = f"SELECT * FROM {table}" if run is None else f"SELECT * FROM {table} WHERE false"
            parts = []
        dest = out / table
        if table in published:
            if "rank" in names or parts != ["run", "rank"]:
                raise UsageError(f"table {table} is not one a rank worker writes")
            files = _sql_str(dest / "**" / "*.parquet")
            rows = con.execute(f"SELECT count(*) FROM read_parquet({files})").fetchone()[0] if dest.exists() else 0
        else:
            rows = con.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
        manifest["tables"][table] = {"columns": [[c, t] for c, t in cols], "partitioned_by": parts,
                                     "rows": int(rows)}
        total_rows += rows
        if not rows or table in published:
            continue
        if parts:
            con.execute(f"COPY ({select}) TO {_sql_str(dest)} (FORMAT parquet, COMPRESSION zstd, "
                        f"PARTITION_BY ({', '.join(parts)}), FILENAME_PATTERN 'data_{{i}}')")
        else:
            dest.mkdir()
            con.execute(f"COPY ({select}) TO {_sql_str(dest / 'data_0.parquet')} (FORMAT parquet, "
                        "COMPRESSION zstd)")
    runs = con.execute(f"SELECT count(DISTINCT {tr_run}) FROM traces tr"
                       + ("" if run is None else f" WHERE {tr_run} = ?"), [] if run is None else [run]
                       ).fetchone()[0]
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return ExportInfo(str(out), len(manifest["tables"]), int(total_rows), _dir_size(out), int(runs))


def partition_path(out_dir, table: str, run: str, rank: int) -> pathlib.Path:
    """The file of one run's rank of a table partitioned by run and rank, as ``export_parquet`` names it."""
    return pathlib.Path(out_dir) / table / f"run={run}" / f"rank={int(rank)}" / "data_0.parquet"


def is_parquet_export(path) -> bool:
    """Whether ``path`` is a folder holding an export's manifest (what ``open_parquet_store`` reads)."""
    return (pathlib.Path(path).expanduser() / MANIFEST).is_file()


def read_manifest(path) -> dict:
    """The export's manifest; StoreError when ``path`` is not a kernelscope Parquet export."""
    folder = pathlib.Path(path).expanduser()
    m = folder / MANIFEST
    if not m.is_file():
        raise StoreError(f"{folder} is not a kernelscope Parquet export (no {MANIFEST}); "
                         "write one with `kernelscope export --parquet DIR`")
    try:
        manifest = json.loads(m.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise StoreError(f"{m}: not valid JSON ({exc})") from None
    if manifest.get("format") != FORMAT or int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise StoreError(f"{m}: not a {FORMAT} manifest this kernelscope can read")
    return manifest


def _derive_newer_tables(con, folder: pathlib.Path, exported: int) -> None:
    """A dataset exported at an older schema than this kernelscope's: the tables the later migrations create are
    made in memory and filled by their registered steps, as a store's migration backfills them (the dataset's
    files are never written; each open derives them again). A later migration that changes an exported table
    (ALTER) cannot be applied to files: StoreError, saying to export again. A newer dataset: StoreError too."""
    from . import derivations
    from .store import code_schema_version, migrations

    code = code_schema_version()
    if exported > code:
        raise StoreError(f"{folder} was exported at schema {exported} but this kernelscope knows only up to {code}; "
                         "upgrade kernelscope")
    later = [(v, name, sql) for v, name, sql in migrations() if v > exported]
    altering = [name for _v, name, sql in later if re.search(r"^\s*ALTER\s", sql, re.M | re.I)]
    if altering:
        raise StoreError(f"{folder} was exported at schema {exported}, before {altering[0]} changed its tables; "
                         "export it again with this kernelscope (`kernelscope export --parquet DIR --db STORE`)")
    for version, _name, sql in later:
        con.execute(sql)
        derivations.backfill(con, version)


def open_parquet_store(path, *, config: dict | None = None, locked: bool = False):
    """A read-only ``Store`` over a Parquet export: an in-memory DuckDB with one view per table (the
    store's columns and types, partition columns restored from the paths) and ``schema_version``.
    ``config``: DuckDB settings (memory_limit, ...); ``locked``: for user SQL, file access limited to the
    dataset's folder and the configuration locked (the caller allows SELECT statements only)."""
    import duckdb

    from .store import Store, connect_config, disable_bad_optimizers

    folder = pathlib.Path(path).expanduser().resolve()
    manifest = read_manifest(folder)
    con = duckdb.connect(":memory:", config=connect_config(config))
    con.execute("SET enable_progress_bar = false")
    disable_bad_optimizers(con)
    if locked:  # user SQL: files of this dataset only, no other file or network access, settings fixed
        con.execute(f"SET allowed_directories = [{_sql_str(str(folder) + '/')}]")
        con.execute("SET enable_external_access = false")
    for table, info in manifest["tables"].items():
        cols = info["columns"]
        if info["rows"]:
            glob = folder / table / ("**/*.parquet" if info["partitioned_by"] else "*.parquet")
            src = f"read_parquet({_sql_str(glob)}, hive_partitioning = true, union_by_name = true)"
            body = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in cols)
            con.execute(f'CREATE VIEW "{table}" AS SELECT {body} FROM {src}')
        else:
            body = ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in cols)
            con.execute(f'CREATE VIEW "{table}" AS SELECT {body} WHERE false')
    _derive_newer_tables(con, folder, int(manifest["schema_version"]))
    con.execute(f"CREATE VIEW schema_version AS SELECT {int(manifest['schema_version'])}::INTEGER AS version, "
                f"'export'::VARCHAR AS name, 0::BIGINT AS applied_ns")
    if locked:
        con.execute("SET lock_configuration = true")
    return Store(folder, con, read_only=True)
