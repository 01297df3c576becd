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


def generators_for(categories: list[str] | None) -> list[Generator]:
    """The generators of these categories, in their order (None: every one); an unknown name is refused."""
    gens = all_generators()
    if categories is None:
        return gens
    by_name = {g.category: g for g in gens}
    unknown = [c for c in categories if c not in by_name]
    if unknown:
        raise ValueError(f"no task generator for categories {unknown} (known: {', '.join(sorted(by_name))})")
    return [by_name[c] for c in categories]


__all__ = ["GenContext", "Generator", "all_generators", "generators_for", "task_id"]
