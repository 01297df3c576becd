"""The project files a module runs: the import closure of entry modules, read with `ast`, never imported.

Every `import` and `from ... import` anywhere in a module counts, function-level ones included (this codebase
imports lazily), and so does a string that names a project module (`importlib.import_module` by name: the policy
backends, the task generators) or a file beside the module (`Path(__file__).with_name("judge_program.py")`: code
and locks a module reads rather than imports). Only modules under `PACKAGES` are followed; a stage's key hashes
the files this returns (components/pipeline/state.py).

Parsing every module is most of what a command spends on its stage keys (0.3-0.6 s on 2 cores), so what a module
names can be kept in a JSON file between commands (`store`), under the digest of its bytes, its folder and the
names of the files beside it: an edited module, or a new file beside it, is parsed again. A process reads the
store once and every closure it computes shares it.
"""

from __future__ import annotations

import ast
import hashlib
import os
from functools import cache
from pathlib import Path

from components.common.io import JsonCache

# where the work is done; flows/ stays out (see components/pipeline/state.py)
PACKAGES = ("components",)
# neither hashed nor followed: the profile's schema, whose values a stage key hashes as the stage's inputs and which
# imports every stage's settings (following it would key every stage on all the code), and MLflow bookkeeping
NOT_FOLLOWED = ("components.profile", "components.tracking")


class ClosureError(ValueError):
    """An entry module that is not a file of the project, or a module that does not parse."""


@cache
def _files_in(folder: Path) -> frozenset[str]:
    """The names of the files in `folder` (none where it is no folder), read once per process: every module of a
    folder asks, and a directory entry says whether it is a file without a stat."""
    try:
        with os.scandir(folder) as entries:
            return frozenset(e.name for e in entries if e.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()


def forget() -> None:
    """Drop what this process remembers of the files (the parsed imports, the folders' listings, the closures): a
    later call reads the tree as a new command would."""
    for cached in (_files_in, name_store, closure):
        cached.cache_clear()


def module_file(root: Path, name: str) -> Path | None:
    """The file of dotted module `name` under `root` (a module or a package's `__init__`), None where there is none."""
    base = root.joinpath(*name.split("."))
    if f"{base.name}.py" in _files_in(base.parent):
        return base.with_suffix(".py")
    if "__init__.py" in _files_in(base):
        return base / "__init__.py"
    return None


def _package_files(root: Path, name: str) -> list[Path]:
    """The `__init__`s that importing `name` runs first, and the module itself."""
    parts = name.split(".")
    found = (module_file(root, ".".join(parts[:i])) for i in range(1, len(parts) + 1))
    return [f for f in found if f is not None]


def _imported_names(tree: ast.AST, package: str) -> set[str]:
    """Dotted names this module may import; `package` is its own package, for relative imports."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".") if node.level else []
            base = ".".join([*parts[:len(parts) - node.level + 1], *([node.module] if node.module else [])])
            # `from pkg import name` imports pkg, and pkg.name where that is a module
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def _followed(name: str) -> bool:
    return name.split(".")[0] in PACKAGES and not any(name == n or name.startswith(f"{n}.") for n in NOT_FOLLOWED)


def _parse(root: Path, path: Path, beside: frozenset[str]) -> list[str]:
    """The names in module `path` that lead to a project file: a file beside it, or a followed module."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as e:
        raise ClosureError(f"{path.relative_to(root)}:{e.lineno}: cannot parse: {e.msg}") from e
    names = _imported_names(tree, ".".join(path.relative_to(root).parent.parts))
    return sorted(n for n in names
                  if n in beside or (_followed(n) and all(p.isidentifier() for p in n.split("."))))


class NameStore(JsonCache):
    """What each module names, kept under a digest of its bytes, its folder and the names of the files beside it
    (what `_parse` keeps depends on them); `parsed` counts the modules this process had to parse. The files each
    module leads to are worked out once per store: the closures of a run's stage kinds share most modules, and a
    store lives until `forget`, one pipeline run."""

    LIMIT = 20_000  # entries; past it a save keeps only those this process used (old versions of edited files go)
    FORMAT = b"filtered-names/2"  # in every key: a store written by another version of `_parse` is never read

    def __init__(self, path: Path | None):
        super().__init__(path)
        self._used: set[str] = set()
        self._edges: dict[tuple[Path, Path], tuple[Path, ...]] = {}
        self.parsed = 0

    def names(self, root: Path, path: Path, beside: frozenset[str]) -> list[str]:
        where = path.parent.relative_to(root).as_posix()
        listing = "\0".join([where, *sorted(beside)]).encode()
        key = hashlib.sha256(self.FORMAT + b"\0" + path.read_bytes() + b"\0" + listing).hexdigest()
        self._used.add(key)
        if key not in self._entries:
            self.parsed += 1
            self._put(key, _parse(root, path, beside))
        return self._entries[key]

    def edges(self, root: Path, path: Path) -> tuple[Path, ...]:
        """The project files module `path` imports or names."""
        found = self._edges.get((root, path))
        if found is None:
            beside = _files_in(path.parent)
            out: list[Path] = []
            for name in self.names(root, path, beside):
                out.extend([path.parent / name] if name in beside else _package_files(root, name))
            self._edges[(root, path)] = found = tuple(out)
        return found

    def save(self) -> None:
        if self._dirty and len(self._entries) > self.LIMIT:
            self._entries = {k: v for k, v in self._entries.items() if k in self._used}
        super().save()


@cache
def name_store(path: Path | None) -> NameStore:
    """The process's one store per file (None: kept in memory only), read once and shared by every closure."""
    return NameStore(path)


@cache
def closure(root: Path, entries: tuple[str, ...], store: Path | None = None) -> tuple[str, ...]:
    """The files (relative to `root`, sorted) that importing `entries` (dotted module names) may run or read;
    `store`: the JSON file that keeps what each module names between commands (None: parse every module)."""
    names = name_store(store)
    todo: list[Path] = []
    for entry in entries:
        if module_file(root, entry) is None:
            raise ClosureError(f"entry module {entry}: no {entry.replace('.', '/')}.py or package under {root}")
        todo.extend(_package_files(root, entry))
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            if path.suffix == ".py":
                todo.extend(names.edges(root, path))
    names.save()
    return tuple(sorted(p.relative_to(root).as_posix() for p in seen))
