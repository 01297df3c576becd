"""What the pipeline remembers between runs: each stage's key and status, so a rerun skips what still holds.

A stage's key hashes what decides its result: its part of the profile and the source of the code it runs (the import
closure of the components it calls, closure.py), both as its kind declares them (components/pipeline/kinds/), and
the keys of the stages it reads. A rerun with the same key finds the stage done and skips it (its outputs must still
be there, as it wrote them: `output_digests`); a changed key clears the stage's outputs and runs it again, and with
it, through their keys, every stage downstream. A stage left `running` (the process was killed) runs again on its
outputs: rollouts skip the episodes they hold and training resumes from its last checkpoint. A finished GRPO stage
asked for more steps and nothing else extends its run from its last checkpoint instead of starting over (`extends`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from components.common.io import atomic_write
from components.pipeline.closure import closure, forget
from components.pipeline.digest import DigestCache
from components.pipeline.kinds import kind_of
from components.pipeline.plan import Plan, Stage

# replaced: done for this key, but what DVC versions of its outputs is no longer what it wrote (another version
# checked out by `dvc exp run` or `dvc checkout`, or edited): cleared and run again, as a stale stage is
Decision = Literal["cached", "new", "resume", "extend", "stale", "replaced"]


DIGESTS = "digests.json"  # in the pipeline's state folder: each read file's content digest, by its stat
# what each module of a checkout imports, by its content (components/pipeline/closure.py): one file for every
# profile and command of the checkout, which content keys make safe to share
NAMES = Path(".state") / "closure-names.json"


def stage_files(root: Path, kind: str) -> tuple[str, ...]:
    """The files under `root` a kind of stage runs or reads: its entry modules' import closure and what it reads."""
    k = kind_of(kind)
    return closure(root, k.entries, root / NAMES) + k.reads


def forget_code() -> None:
    """Read the code afresh at the next stage key: a process that runs the pipeline again (a served deployment)
    must see the edits made since its last run, as a new command does."""
    forget()
    code_digest.cache_clear()


@cache
def code_digest(root: Path, paths: tuple[str, ...]) -> str:
    """sha256 over each file's path and bytes, sorted; a folder counts as its code and config files."""
    files: set[Path] = set()
    for rel in paths:
        base = root / rel
        if base.is_dir():
            files.update(f for f in base.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                         and f.suffix in (".py", ".yaml", ".json", ".lock", ""))
        elif base.is_file():
            files.add(base)
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def stage_key(plan: Plan, stage: Stage, upstream: Mapping[str, str], root: Path) -> str:
    kind = kind_of(stage.kind)
    doc: dict[str, Any] = {"stage": stage.name, "kind": stage.kind, "inputs": kind.inputs(plan, stage),
                           "code": code_digest(root, stage_files(root, stage.kind)),
                           "upstream": {n: upstream[n] for n in stage.needs}}
    reads = kind.data(plan, stage)
    if reads:  # only then: the keys of stages that read nothing from outside stay what they were
        digests = DigestCache(root / plan.cfg.pipeline.state_dir / DIGESTS)
        # contents only, in the kind's order: where a model cache or a clone lies must not change the key
        doc["data"] = [digests.digest(p if p.is_absolute() else root / p) for p in reads]
        digests.save()
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def extends(plan: Plan, stage: Stage, record: StageRecord | None, upstream: Mapping[str, str], root: Path) -> bool:
    """Whether `record` is a finished run of this GRPO stage that took fewer optimizer steps than the profile now
    asks for, everything else the same: its key equals the stage's key with `steps` set to the steps it took.
    GRPO runs at a constant learning rate and its checkpoints hold the optimizer, scheduler and RNG states, so
    continuing to the new count trains the run a fresh one with that count would have trained."""
    if stage.kind != "diag_grpo" or record is None or record.status != "done" or plan.cfg.diag is None:
        return False
    from components.training.trainers import last_checkpoint  # what train_grpo resumes from: complete ones only

    if not any(last_checkpoint(root / out) for out in stage.outputs):  # nothing to carry on from
        return False
    took, grpo = record.result.get("global_step"), plan.cfg.diag.grpo
    if not isinstance(took, int) or not 0 < took < grpo.settings.steps:
        return False
    shorter = grpo.model_copy(update={"settings": grpo.settings.model_copy(update={"steps": took})})
    cfg = plan.cfg.model_copy(update={"diag": plan.cfg.diag.model_copy(update={"grpo": shorter})})
    return stage_key(replace(plan, cfg=cfg), stage, upstream, root) == record.key


def decide(plan: Plan, state: PipelineState, stage: Stage, keys: Mapping[str, str], root: Path) -> Decision:
    """What a run does with `stage` (its key in `keys`): skip it, run it, resume it, extend it or clear and rerun."""
    decision = state.decide(stage, keys[stage.name], root)
    if decision == "stale" and extends(plan, stage, state.read(stage.name), keys, root):
        return "extend"
    if decision == "cached":
        record = state.read(stage.name)
        if record is not None and record.outputs and output_digests(plan, stage, root) != record.outputs:
            return "replaced"
    return decision


def output_digests(plan: Plan, stage: Stage, root: Path) -> dict[str, str]:
    """The content digest of each output DVC versions of the stage (StageKind.outs), recorded when it finishes:
    DVC checks out other versions of those under the pipeline (an experiment's, a commit's), and a key that still
    holds must not vouch for bytes it never wrote. Digests are kept by each file's stat, so an untouched output is
    not read again."""
    outs = kind_of(stage.kind).outs(plan, stage)
    if not outs:
        return {}
    digests = DigestCache(root / plan.cfg.pipeline.state_dir / DIGESTS)
    found = {str(p): digests.digest(p if p.is_absolute() else root / p) for p in outs}
    digests.save()
    return found


class StageRecord(BaseModel):
    stage: str
    key: str
    status: Literal["running", "done"]
    started_at: float
    wall_s: float | None = None
    result: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, str] = Field(default_factory=dict)  # output_digests when it finished (none: not checked)


class RunRecord(BaseModel):
    """The pipeline's MLflow parent run; `running` until a run ends well, so a killed one is resumed under it."""

    run_id: str
    status: Literal["running", "done"]
    params: str = ""  # a digest of the params the run holds: a changed profile starts a new run


class PipelineState:
    """One JSON record per stage under `.state/pipeline/<profile>/`, written atomically, and the parent run's."""

    def __init__(self, folder: Path):
        self.folder = folder

    def interrupted_run(self, params: str) -> str | None:
        """The parent run of a pipeline run with these params that did not finish, to carry on under."""
        path = self.folder / "_run.json"
        if not path.is_file():
            return None
        record = RunRecord.model_validate_json(path.read_text(encoding="utf-8"))
        return record.run_id if record.status == "running" and record.params == params else None

    def mark_run(self, run_id: str, status: Literal["running", "done"], params: str) -> None:
        with atomic_write(self.folder / "_run.json") as fh:
            fh.write(RunRecord(run_id=run_id, status=status, params=params).model_dump_json())

    def session_run(self, session: str) -> tuple[str | None, list[str]]:
        """The parent run an earlier stage of the same `dvc repro` (its `dvc_session`) opened, to join, and the
        stages that ran under it so far."""
        path = self.folder / "_dvc.json"
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if record.get("session") != session:
            return None, []
        return record.get("run_id"), list(record.get("stages", []))

    def mark_session_run(self, session: str, run_id: str, stages: list[str]) -> None:
        with atomic_write(self.folder / "_dvc.json") as fh:
            json.dump({"session": session, "run_id": run_id, "stages": stages}, fh)

    def _path(self, stage: str) -> Path:
        return self.folder / f"{stage}.json"

    def read(self, stage: str) -> StageRecord | None:
        path = self._path(stage)
        if not path.is_file():
            return None
        return StageRecord.model_validate_json(path.read_text(encoding="utf-8"))

    def decide(self, stage: Stage, key: str, root: Path) -> Decision:
        record = self.read(stage.name)
        if record is None:
            return "new"
        if record.key != key:
            return "stale"
        if record.status == "done" and all((root / p).exists() for p in stage.outputs):
            return "cached"
        return "resume"

    def start(self, stage: str, key: str) -> None:
        self._write(StageRecord(stage=stage, key=key, status="running", started_at=time.time()))

    def finish(self, stage: str, key: str, started_at: float, result: dict[str, Any],
               outputs: Mapping[str, str] | None = None) -> StageRecord:
        record = StageRecord(stage=stage, key=key, status="done", started_at=started_at,
                             wall_s=round(time.time() - started_at, 2), result=result, outputs=dict(outputs or {}))
        self._write(record)
        return record

    def _write(self, record: StageRecord) -> None:
        with atomic_write(self._path(record.stage)) as fh:
            fh.write(record.model_dump_json(indent=1))


def clear_outputs(outputs: Iterable[Path], root: Path) -> list[Path]:
    """Remove a stale stage's outputs, so its rerun starts clean instead of resuming another key's work."""
    removed = []
    for p in outputs:
        path = root / p
        if path.is_dir():
            shutil.rmtree(path)
            removed.append(path)
        elif path.exists():
            path.unlink()
            removed.append(path)
    return removed
