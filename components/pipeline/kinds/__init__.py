"""Stage kinds: everything the pipeline knows about one kind of stage, in one object.

A kind is a subclass of `StageKind`, registered with `@stage_kind`, and says
- which stages a profile gets (`stages`): built from the profile, with what each reads (`needs`) and what a changed
  key clears (`Stage.outputs`);
- what of the profile a stage's result depends on: what its key hashes (`inputs`) and what DVC lists as its params
  (`params`), both read off `sections` (profile keys) unless the kind says otherwise;
- the code it runs: its entry modules (`entries`), whose import closure its key hashes and DVC lists as deps
  (closure.py), and the other files it reads (`reads`);
- what DVC versions (`outs`; by default its outputs) and whether it writes the profile's DVC metrics and figures;
- what the dry run shows of a stage (`details`);
- how many times the pipeline runs a failed stage again at once (`retries`: only a kind whose rerun resumes);
- its runner (`runner`): the dotted name of the function in flows/ that runs one stage of it. Components never
  import flows (tests/test_layers.py), so the kind names its runner and flows/pipeline.py looks it up and calls
  every runner the same way: `runner(plan, cfg, stage, engines)`, returning the stage's headline figures.

Adding a kind is one module in this package and its runner in flows/. Every module here is loaded when a kind is
first looked up. `family` is the plan a kind's stages join (a coding profile's or a DiagGym profile's) and `rank`
orders the kinds of a family, so the order their stages are declared in; a `last` kind adds its stages after the
others are placed in dependency order, reading the plan as it then stands (evaluate, register), and its stage is named
as the kind (`pipeline.stages` may name it).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections import Counter
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from components.pipeline.plan import Plan, Stage

Family = Literal["coding", "diag"]


class StageKind:
    name: ClassVar[str]  # Stage.kind, and part of every stage's key
    family: ClassVar[Family] = "coding"
    rank: ClassVar[int]  # where its stages are declared among its family's
    last: ClassVar[bool] = False
    runner: ClassVar[str]  # "flows.<module>.<function>"
    entries: ClassVar[tuple[str, ...]] = ()  # the components its runner calls (the flows stay out: closure.py)
    reads: ClassVar[tuple[str, ...]] = ()  # files it reads that no import or file name beside its modules says
    sections: ClassVar[tuple[str, ...]] = ()  # the profile keys (dotted) its result depends on
    metrics: ClassVar[bool] = False  # it writes the profile's headline figures (dvc.metrics_path)
    plots: ClassVar[tuple[str, ...]] = ()  # figures in its first DVC out
    retries: ClassVar[int] = 0  # times the pipeline runs a failed stage again at once: only where a rerun resumes
    # the run's vLLM engine may stay up through it (a training stage may take its memory, evaluation does): an
    # engine for a later collection can start before it
    keeps_engine: ClassVar[bool] = False

    def stages(self, plan: Plan) -> list[Stage]:
        """This kind's stages of `plan.cfg` (the profile with its self-improvement rounds expanded); a `last` kind
        also reads `plan.stages`, every other stage already placed."""
        return []

    def inputs(self, plan: Plan, stage: Stage) -> dict[str, Any]:
        """The part of the profile the stage's result depends on, as JSON: what its key hashes."""
        dump = plan.cfg.model_dump(mode="json")
        return {key: section(dump, key) for key in self.sections}

    def data(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        """Files and folders from outside the pipeline whose content decides the stage's result (a release folder,
        a base checkpoint), relative to the project unless absolute: its key hashes their content (digest.py)."""
        return ()

    def dvc_deps(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        """Data DVC versions as the stage's deps besides its code and upstream outs (an imported release). Not the
        base checkpoints of `data`: those are built by setup on each machine, outside what DVC versions."""
        return ()

    def series(self, plan: Plan, stage: Stage) -> dict[str, dict[str, Any]]:
        """DVC plots of data series the stage writes: plot id -> DVC's plot definition, whose `y` maps each file (in
        its outs) to the field drawn; stages naming the same plot id add their files to one plot."""
        return {}

    def params(self, plan: Plan, stage: Stage) -> list[str]:
        """The profile keys DVC lists as the stage's params (those the profile file leaves out are dropped)."""
        return list(self.sections)

    def shared_engine(self, plan: Plan, stage: Stage) -> str | None:
        """What the stage asks of the run's shared vLLM engine (its settings and checkpoint, as a key), or None
        where it does not play on it. Consecutive stages with one key that need none of each other may run side
        by side on the engine (`pipeline.side_by_side`)."""
        return None

    def outs(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        """What DVC versions of the stage's output: none for a stage that writes no data."""
        return stage.outputs

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        """What the dry run shows of the stage; `tasks`: the suite's tasks by (split, category), None before it is
        built."""
        return {}


def section(dump: dict[str, Any], key: str) -> Any:
    """The value at dotted `key` of a profile dumped as JSON."""
    node: Any = dump
    for part in key.split("."):
        node = node[part]
    return node


KINDS: dict[str, StageKind] = {}


def stage_kind(cls: type[StageKind]) -> type[StageKind]:
    """Register a kind (a class decorator)."""
    if cls.name in KINDS:
        raise ValueError(f"two stage kinds named {cls.name!r}: {type(KINDS[cls.name]).__name__} and {cls.__name__}")
    KINDS[cls.name] = cls()
    return cls


@cache
def _load() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def kind_of(name: str) -> StageKind:
    _load()
    if name not in KINDS:
        raise KeyError(f"no stage kind {name!r} (there are: {', '.join(KINDS)})")
    return KINDS[name]


def family(name: Family) -> list[StageKind]:
    """The kinds whose stages a plan of this family holds, in rank order."""
    _load()
    return sorted((k for k in KINDS.values() if k.family == name), key=lambda k: k.rank)
