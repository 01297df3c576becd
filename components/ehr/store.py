"""In-memory rows per table, written to SQLite in one deterministic pass (temp file, then rename)."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any


class TableStore:
    def __init__(self, tables: dict[str, list[tuple[str, str]]], indexes: list[tuple[str, str]]):
        self.tables = tables
        self.indexes = indexes
        self.rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in tables}

    def add(self, table: str, **values: Any) -> None:
        cols = self.tables[table]
        unknown = set(values) - {c for c, _ in cols}
        if unknown:
            raise KeyError(f"table {table} has no column(s) {sorted(unknown)}")
        self.rows[table].append(tuple(values.get(c) for c, _ in cols))

    def write(self, path: Path) -> Path:
        """Write every table to `path` atomically; the same rows give the same bytes."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)  # sqlite creates it afresh
        try:
            con = sqlite3.connect(tmp)
            con.execute("PRAGMA journal_mode=OFF")
            con.execute("PRAGMA synchronous=OFF")
            for name, cols in self.tables.items():
                con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)})")
                marks = ",".join("?" * len(cols))
                con.executemany(f"INSERT INTO {name} VALUES ({marks})", self.rows[name])
            for table, col in self.indexes:
                con.execute(f"CREATE INDEX idx_{table}_{col} ON {table}({col})")
            con.commit()
            con.close()
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path
