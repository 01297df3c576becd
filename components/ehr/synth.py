"""Deterministic synthetic EHR databases in the MIMIC-III, eICU and TREQS layouts EHRSQL and TREQS query."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Literal

from components.ehr.eicu_world import EicuWorld
from components.ehr.mimic_world import MimicWorld
from components.ehr.timeline import NOW, D
from components.ehr.treqs_world import TreqsWorld

Schema = Literal["mimic_iii", "eicu", "treqs"]
SCHEMAS: tuple[str, ...] = ("mimic_iii", "eicu", "treqs")
AnyWorld = MimicWorld | EicuWorld | TreqsWorld
DEFAULT_PATIENTS = 150


def new_world(schema: str, seed: int, wide: bool = False) -> AnyWorld:
    """An empty world; `wide` draws from the wider vocabularies (see vocab.EXTRA_*)."""
    rng = random.Random(f"ehr:{schema}:{seed}")
    if schema == "mimic_iii":
        return MimicWorld(rng, wide)
    if schema == "eicu":
        return EicuWorld(rng, wide)
    if schema == "treqs":
        return TreqsWorld(rng, wide)
    raise ValueError(f"unknown EHR schema {schema!r}; expected one of {SCHEMAS}")


def populate(world: AnyWorld, n_patients: int) -> AnyWorld:
    """Background population: patients with 1-4 stays over 2100-2105, a sixth of them still in hospital."""
    rng = world.rng
    if isinstance(world, TreqsWorld):
        for _ in range(n_patients):
            sid = world.subject()
            for _ in range(rng.randint(1, 3)):
                world.populate_admission(sid, world.admission(sid))
        return world
    for _ in range(n_patients):
        p = world.add_patient()
        world.base_timeline(p, rng.randint(1, 4), open_current=rng.random() < 0.17)
        if p.visits and p.visits[-1].end is not None and rng.random() < 0.12:
            p.dod = min(p.visits[-1].end + rng.randint(0, 40) * D, NOW - D)
        for v in list(p.visits):
            world.populate_visit(p, v)
    return world


def build_database(
    schema: Schema, path: Path, seed: int, n_patients: int = DEFAULT_PATIENTS, wide: bool = True
) -> Path:
    """Write a synthetic database of `schema` to `path`; the same arguments give a byte-identical file.

    `wide` (the generated tasks' databases) draws from the wider vocabularies; the re-grounding seeds its own
    narrow world instead (components.ehr.reground).
    """
    world = populate(new_world(schema, seed, wide), n_patients)
    world.finish()
    return world.store.write(Path(path))
