"""The project files a module runs: the import closure of entry modules, read with `ast`, never imported.

Every `import` and `from ... import` anywhere in a module counts, function-level ones included (this codebase
imports lazily), and so does a string that names a project module (`importlib.import_module` by name: the policy
backends, the task generators) or a file beside the module (`Path(__file__).with_name("judge_program.py")`: code
and locks a module reads rather than imports). Only modules under `PACKAGES` are followed; a stage's key hashes
the files this returns (components/pipeline/state.py).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

# where the work is done; flows/ stays out (see components/pipeline/state.py)
PACKAGES = ("components",)
# neither hashed nor followed: the profile's schema, whose values a stage key hashes as the stage's inputs and which
# imports every stage's settings (following it would key every stage on all the code), and MLflow bookkeeping
NOT_FOLLOWED = ("components.profile", "components.tracking")


class ClosureError(ValueError):
    """An entry module that is not a file of the project, or a module that does not parse."""


def module_file(root: Path, name: str) -> Path | None:
    """The file of dotted module `name` under `root` (a module or a package's `__init__`), None where there is none."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
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


@cache
def _edges(root: Path, path: Path) -> tuple[Path, ...]:
    """The project files module `path` imports or names."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as e:
        raise ClosureError(f"{path.relative_to(root)}:{e.lineno}: cannot parse: {e.msg}") from e
    package = ".".join(path.relative_to(root).parent.parts)
    beside = {p.name for p in path.parent.iterdir() if p.is_file()}
    out: list[Path] = []
    for name in _imported_names(tree, package):
        if name in beside:
            out.append(path.parent / name)
        elif _followed(name) and all(p.isidentifier() for p in name.split(".")):
            out.extend(_package_files(root, name))
    return tuple(out)


@cache
def closure(root: Path, entries: tuple[str, ...]) -> tuple[str, ...]:
    """The files (relative to `root`, sorted) that importing `entries` (dotted module names) may run or read."""
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
                todo.extend(_edges(root, path))
    return tuple(sorted(p.relative_to(root).as_posix() for p in seen))
