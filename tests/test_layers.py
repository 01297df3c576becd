"""Layers run one way. Every package of components/ has a place in the layer map below, and imports go from a
higher layer to a lower one, or within a package; nothing below the composition layer imports the profile; and no
two packages import each other, directly or round a longer circle.

The graph is read with `ast`, never imported: every `import` and `from ... import` counts, function-level ones
included (this codebase imports lazily), and `from components.x import y` is an import of module `components.x.y`
where that is a module. `python tests/test_layers.py` prints the circles and the upward imports.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "profile"  # the composition layer's profile package: components/profile/

LAYERS = ("foundation", "domain data", "environments", "policies", "engines", "composition", "entry")
PACKAGES: dict[str, int] = {
    "common": 0, "sandbox": 0, "tracking": 0,
    "tasks": 1, "ehr": 1,
    "envs": 2,
    "policies": 3,
    "rollout": 4, "training": 4, "rl": 4, "evaluation": 4, "registry": 4,
    "adapters": 4,  # the environment offered to stock trainers (TRL) and clients (OpenEnv)
    PROFILE: 5, "pipeline": 5,
    # the entry points: a component that imports them runs upward
    "flows": 6, "bench": 6,
}
# components/diag/ spans layers, so its modules have a place each
DIAG: dict[str, int] = {
    # the records and the world they are drawn from
    "catalogue": 1, "disease_data": 1, "exam_data": 1, "results": 1, "record": 1, "profile": 1, "cohort": 1,
    "importer": 1, "world": 1,
    # the environment and what it parses and grades; the case validation bounds constant diagnoses with the grader
    "actions": 2, "grading": 2, "metrics": 2, "env": 2, "validation": 2,
    # the oracle as a scripted policy (it reads the case, as the coding teacher reads its task)
    "oracle": 3,
    # agents played, evaluated and trained: the LM world model trains through components/training
    "evaluate": 4, "baselines": 4, "plots": 4, "lm_world": 4, "fidelity": 4,
}


def modules() -> dict[str, Path]:
    """Every module under components/, by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((ROOT / "components").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """The project modules (components, flows, bench) `name` imports, each with its line."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".") if node.level else []
            base = ".".join([*parts[:len(parts) - node.level + 1], *([node.module] if node.module else [])])
            targets = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known] or [base]
        else:
            continue
        for target in targets:
            top = target.split(".")[0]
            if top in ("flows", "bench"):
                yield top, node.lineno
            elif top == "components":
                while target not in known:  # `import components.x.y` of a name, not a module: its module
                    target = target.rpartition(".")[0]
                if target != "components":
                    yield target, node.lineno


def package(module: str) -> str:
    """components.training.stage -> training; flows.x -> flows."""
    parts = module.split(".")
    return parts[1] if parts[0] == "components" else parts[0]


def unit(module: str) -> str:
    """What has a place in the layer map: a package, or a module of components/diag/."""
    parts = module.split(".")
    return f"diag.{parts[2]}" if parts[:2] == ["components", "diag"] and len(parts) > 2 else package(module)


def layer(u: str) -> int:
    return DIAG[u.removeprefix("diag.")] if u.startswith("diag.") else PACKAGES[u]


def edges() -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every import between two modules of different packages."""
    mods = modules()
    found = []
    for name, path in mods.items():
        if name == "components":
            continue
        for target, line in imports(name, path, set(mods)):
            if package(target) != package(name):
                found.append((name, target, line))
    return found


def unplaced() -> list[str]:
    return sorted({unit(m) for m in modules() if m != "components" and unit(m) != "diag"}
                  - {*PACKAGES, *(f"diag.{m}" for m in DIAG)})


def profile_importers() -> list[str]:
    return [f"{a} -> {b} (line {n})" for a, b, n in edges()
            if package(b) == PROFILE and layer(unit(a)) < PACKAGES[PROFILE]]


def upward() -> list[str]:
    return [f"{a} -> {b} (line {n}): {LAYERS[layer(unit(a))]} imports {LAYERS[layer(unit(b))]}"
            for a, b, n in edges() if layer(unit(a)) < layer(unit(b))]


def circles() -> list[list[str]]:
    """The packages on a circle: each strongly connected set of more than one package (Tarjan), sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b, _ in edges():
        graph[package(a)].add(package(b))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def circle_edges(circle: list[str]) -> list[str]:
    """The imports that close a circle: one example of each package-to-package edge within it."""
    seen: dict[tuple[str, str], str] = {}
    for a, b, n in edges():
        key = (package(a), package(b))
        if key[0] in circle and key[1] in circle and key not in seen:
            seen[key] = f"{a} -> {b} (line {n})"
    return [seen[k] for k in sorted(seen)]


def test_every_package_has_a_place_in_the_layer_map():
    assert unplaced() == []


def test_no_module_below_the_composition_layer_imports_the_profile():
    assert len(modules()) > 100  # the walk reached the engines
    assert profile_importers() == []


def test_no_circle_between_packages():
    assert {" <-> ".join(c): circle_edges(c) for c in circles()} == {}


def test_no_import_runs_upward():
    assert upward() == []


if __name__ == "__main__":
    print(f"unplaced: {unplaced()}")
    print(f"circles ({len(circles())}):")
    for c in circles():
        print(f"  {' <-> '.join(c)}")
        for e in circle_edges(c):
            print(f"    {e}")
    print(f"upward imports ({len(upward())}):")
    for e in upward():
        print(f"  {e}")
    print(f"below composition importing the profile: {profile_importers()}")
