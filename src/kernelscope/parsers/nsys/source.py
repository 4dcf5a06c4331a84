"""An nsys export opened as a read-only SQLite connection for the mapping's SQL (``open_export``): an SQLite
file (``nsys export --type sqlite``), plain or gzip (decompressed to a temporary file), a ``.nsys-rep`` report
(exported to SQLite first when an ``nsys`` binary is on PATH), or a Parquet directory (``nsys export --type
parquetdir``: the tables the mapping reads loaded into an in-memory SQLite database, each column converted to
what nsys's SQLite export holds). Python's ``sqlite3`` is used: DuckDB's SQLite extension is downloaded at run
time and cannot be assumed. Table and column lists come from the source, so missing ones are handled alike.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pyarrow as pa

from kernelscope.errors import ParseError
from kernelscope.parsers.nsys.tables import TABLES_READ
from kernelscope.parsers.schema import TraceMeta
from kernelscope.parsers.source import Source

SQLITE_MAGIC = b"SQLite format 3\x00"


class SqliteSource:
    """An nsys SQLite export opened read-only: ``tables``, ``columns(table)``, ``con`` for the mapping's SQL."""

    what = "SQLite file"
    export_type = "sqlite"

    def __init__(self, db: str):
        try:
            self.con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise ParseError(f"cannot open the SQLite file ({exc}); check the file") from None

    def tables(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')]

    def close(self) -> None:
        self.con.close()


def _sqlite_column(arr: pa.ChunkedArray) -> list:
    """A Parquet column as the Python values nsys's SQLite export holds for it."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = t.value_type
    if pa.types.is_unsigned_integer(t) or pa.types.is_boolean(t):
        arr = arr.cast(pa.int64(), safe=False)  # uint64 above 2**63 wraps, as in SQLite's signed INTEGER
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
              or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        arr = arr.cast(pa.string())
    return arr.to_pylist()


class ParquetSource(SqliteSource):
    """An ``nsys export --type parquetdir`` directory: every ``<TABLE>.parquet`` is a table; those in
    ``TABLES_READ`` are loaded into an in-memory SQLite database with the export's column names."""

    what = "Parquet directory"
    export_type = "parquetdir"

    def __init__(self, folder: Path):
        import pyarrow.parquet as pq

        self.files = {f.name[: -len(".parquet")]: f for f in sorted(folder.glob("*.parquet")) if f.is_file()}
        self.schemas: dict[str, list[str]] = {}
        self.con = sqlite3.connect(":memory:")
        for name, f in self.files.items():
            try:
                self.schemas[name] = list(pq.read_schema(f).names)
                if name not in TABLES_READ:
                    continue
                table = pq.read_table(f)
            except (pa.ArrowException, OSError) as exc:
                self.con.close()
                raise ParseError(
                    f"cannot read {f.name} of the Parquet export ({str(exc).splitlines()[0] if str(exc) else exc}); "
                    "export the report again with `nsys export --type parquetdir`"
                ) from None
            cols = ", ".join(f'"{c}"' for c in table.column_names)
            self.con.execute(f'CREATE TABLE "{name}" ({cols})')
            if table.num_rows:
                marks = ", ".join("?" * table.num_columns)
                values = [_sqlite_column(c) for c in table.columns]
                self.con.executemany(f'INSERT INTO "{name}" VALUES ({marks})', zip(*values))
            if name == "StringIds" and "id" in table.column_names:  # looked up once per row, as nsys's key
                self.con.execute('CREATE INDEX "StringIds_id" ON "StringIds" (id)')

    def tables(self) -> set[str]:
        return set(self.files)

    def columns(self, table: str) -> list[str]:
        return self.schemas.get(table, [])


def open_export(path: Path, tmpdir: str, meta: TraceMeta) -> SqliteSource:
    """The export at ``path`` as a source for the mapping; sets ``meta.content_hash`` (the decompressed
    bytes of a file, the report's bytes, or a Parquet directory's files). Temporary files go to ``tmpdir``."""
    if path.is_dir():
        meta.content_hash = _hash_folder(path)
        return ParquetSource(path)
    return SqliteSource(_materialize(path, tmpdir, meta))


def _materialize(path: Path, tmpdir: str, meta: TraceMeta) -> str:
    """A plain SQLite file to open: the path itself, a decompressed copy, or an nsys export."""
    if path.name.endswith(".nsys-rep"):
        return _export_report(path, tmpdir, meta)
    src = Source(path)
    try:
        if not src.gz:
            while src.read(4 << 20):
                pass
            meta.content_hash = src.sha.hexdigest()
            return str(path)
        out = os.path.join(tmpdir, "export.sqlite")
        with open(out, "wb") as f:
            while True:
                block = src.read(4 << 20)
                if not block:
                    break
                f.write(block)
        meta.content_hash = src.sha.hexdigest()
        return out
    finally:
        src.close()


def _export_report(path: Path, tmpdir: str, meta: TraceMeta) -> str:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise ParseError(
            "this is an Nsight Systems report (.nsys-rep) and no `nsys` is on PATH to export it; run "
            f"`nsys export --type sqlite -o {path.stem}.sqlite {path.name}` and ingest the .sqlite"
        )
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    meta.content_hash = h.hexdigest()
    out = os.path.join(tmpdir, "export.sqlite")
    proc = subprocess.run(
        [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", out, str(path)],
        capture_output=True, text=True,
    )
    if proc.returncode != 0 or not os.path.exists(out):
        last = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise ParseError(f"`nsys export --type sqlite` failed on the report ({last[0]}); export it by hand")
    return out


def _hash_folder(folder: Path) -> str:
    """content_hash of a Parquet export: sha256 over its ``.parquet`` files (name and bytes, by name)."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.parquet")):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()

