"""Task generators, one module per domain; each module lists its generators in `GENERATORS`."""

from __future__ import annotations

import importlib

from components.tasks.generators.base import GenContext, Generator, task_id

# modules listed here are imported lazily so that a missing optional dependency of one domain
# does not break the others
MODULES = (
    "components.tasks.generators.ehr",
    "components.tasks.generators.calculators",
    "components.tasks.generators.biostat",
    "components.tasks.generators.bioinfo",
)


def all_generators() -> list[Generator]:
    gens: list[Generator] = []
    for name in MODULES:
        gens.extend(importlib.import_module(name).GENERATORS)
    seen: set[str] = set()
    for g in gens:
        if g.category in seen:
            raise ValueError(f"two generators share the category {g.category!r}")
        seen.add(g.category)
    return gens


__all__ = ["GenContext", "Generator", "all_generators", "task_id"]
