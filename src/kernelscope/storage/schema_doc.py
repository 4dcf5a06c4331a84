"""The store's schema with its definitions: every table and column of an open store (DuckDB's catalogue) next
to the words the schema files (storage/schema/*.sql) say about them.

A column's definition is the ``-- comment`` on its line in the ``CREATE TABLE`` (or ``ALTER TABLE ... ADD
COLUMN``) statement; without one, the comment block just above an ``ALTER`` line. A table's definition is the
comment block just above its ``CREATE TABLE``. Columns the files do not comment have an empty definition.
"""

from __future__ import annotations

import re

from .store import migrations

_CREATE = re.compile(r"^\s*CREATE TABLE\s+(?:IF NOT EXISTS\s+)?(\w+)\s*\(", re.IGNORECASE)
_ALTER = re.compile(r"^\s*ALTER TABLE\s+(\w+)\s+ADD COLUMN\s+(?:IF NOT EXISTS\s+)?(\w+)[^;]*;\s*(?:--\s*(.*))?$",
                    re.IGNORECASE)
_COLUMN = re.compile(r"^\s*(\w+)\s+[A-Za-z]\w*[^-]*?(?:--\s*(.*))?$")
_KEYWORDS = {"primary", "unique", "foreign", "check", "constraint"}


def schema_comments() -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """(table -> definition, (table, column) -> definition) from the schema files, in migration order."""
    tables: dict[str, str] = {}
    columns: dict[tuple[str, str], str] = {}
    for _version, _name, text in migrations():
        block: list[str] = []
        table = None
        for line in text.splitlines():
            stripped = line.strip()
            if table is not None:
                if stripped.startswith(")"):
                    table = None
                    continue
                m = _COLUMN.match(line)
                if m and m.group(1).lower() not in _KEYWORDS and not stripped.startswith("--"):
                    columns[(table, m.group(1))] = (m.group(2) or "").strip()
                continue
            if stripped.startswith("--"):
                block.append(stripped.lstrip("-").strip())
                continue
            m = _CREATE.match(line)
            if m:
                table = m.group(1)
                tables[table] = " ".join(b for b in block if b)
            else:
                a = _ALTER.match(line)
                if a:
                    columns[(a.group(1), a.group(2))] = (a.group(3) or " ".join(b for b in block if b)).strip()
            block = []
    return tables, columns


def schema_tables(store) -> list[dict]:
    """Every table of the store: ``table``, ``definition``, ``columns`` (``name``, ``type``, ``definition``) in
    the store's column order."""
    tdefs, cdefs = schema_comments()
    df = store.query("SELECT table_name, column_name, data_type FROM information_schema.columns "
                     "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position")
    out: dict[str, dict] = {}
    for t, c, typ in zip(df["table_name"], df["column_name"], df["data_type"]):
        entry = out.setdefault(t, {"table": t, "definition": tdefs.get(t, ""), "columns": []})
        entry["columns"].append({"name": c, "type": typ, "definition": cdefs.get((t, c), "")})
    return list(out.values())
