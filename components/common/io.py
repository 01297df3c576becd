"""File I/O shared by every stage: atomic writes and JSONL reads whose errors name file, line and field."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any


class RecordError(ValueError):
    """A bad record in an input file; the message names the file, the 1-based line and the field."""

    def __init__(self, path: Path | str, line: int | None, field: str | None, problem: str):
        self.path, self.line, self.field, self.problem = str(path), line, field, problem
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if field:
            where += f", field '{field}'"
        super().__init__(f"{where}: {problem}")


@contextlib.contextmanager
def atomic_write(path: Path | str, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Write to a temporary file beside `path`, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class JsonCache:
    """Entries remembered between commands in one JSON object file: read at start (a missing or damaged file is an
    empty cache, whose cost is recomputing, never a wrong answer), written whole and atomically by `save` when an
    entry changed. Subclasses say what an entry is and when it is still good."""

    def __init__(self, path: Path | None):
        self.path = path
        self._entries: dict[str, Any] = {}
        self._dirty = False
        if path is not None and path.is_file():
            try:
                self._entries = json.loads(path.read_text())
            except (OSError, ValueError):
                self._entries = {}

    def _put(self, key: str, value: Any) -> None:
        self._entries[key] = value
        self._dirty = True

    def save(self) -> None:
        if self.path is not None and self._dirty:
            with atomic_write(self.path) as fh:
                json.dump(self._entries, fh)
            self._dirty = False


@contextlib.contextmanager
def atomic_dir(path: Path | str) -> Iterator[Path]:
    """Fill a temporary sibling folder, then swap it in for `path`: readers see the old folder or the new one,
    never a mix (an existing one is renamed aside, the new one renamed in, the old one deleted; if the second
    rename fails the old one is put back). On an error the temporary folder is removed and `path` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old: Path | None = None
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the result is as readable as any other folder
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.{os.urandom(6).hex()}.old")
            os.rename(path, old)
        try:
            os.rename(tmp, path)
        except BaseException:
            if old is not None:
                os.rename(old, path)
                old = None
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_jsonl(path: Path | str, rows: Iterable[dict[str, Any]]) -> int:
    """Atomically write rows as JSON lines; returns how many were written."""
    n = 0
    with atomic_write(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=False))
            fh.write("\n")
            n += 1
    return n


def iter_jsonl_lenient(path: Path | str) -> Iterator[tuple[int, dict[str, Any] | RecordError]]:
    """Yield (1-based line number, object or the RecordError that line raises) for each non-blank line."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield lineno, RecordError(path, lineno, None, f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            except (ValueError, RecursionError) as exc:  # an integer past the digit limit, nesting past the stack
                yield lineno, RecordError(path, lineno, None, f"not readable JSON ({type(exc).__name__}: {str(exc)[:120]})")
                continue
            if not isinstance(obj, dict):
                yield lineno, RecordError(path, lineno, None, f"expected a JSON object, got {type(obj).__name__}")
                continue
            yield lineno, obj


def iter_jsonl(path: Path | str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object) for each non-blank line; a line that is not a JSON object raises RecordError."""
    for lineno, obj in iter_jsonl_lenient(path):
        if isinstance(obj, RecordError):
            raise obj
        yield lineno, obj
