"""GRPO through the training launcher: one process here, or `accelerate launch` on the profile's processes and
machines, as the pipeline's SFT, DPO and verifier stages are (components/training/stage.py, `launch_worker`).

A launched rank cannot be handed Python objects: the job names its gym by a spec of files and settings, and each rank
builds the gym from it (`python -m components.rl.grpo_launch JOB.json`). DiagGym's spec names the cases and the
fitted statistical world, saved in the run folder; the coding gym's names the task file, the chosen train tasks, the
environment's settings and the sandbox (each rank opens its own sandboxes, so the sandbox and the checker stay in
the process that plays the episode). The rollout already gives each rank its own slice of a step's samples
(components/rl/grpo.py, EpisodeRollout); rank 0 writes the result.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from components.common.io import atomic_write
from components.diag.env import DiagEnvConfig
from components.diag.record import Case, load_cases, save_cases
from components.diag.world import StatisticalWorldModel, WorldModel
from components.envs.coding_env import EnvConfig
from components.rl.coding import CodingGym
from components.rl.grpo import DiagGym, GRPORun, Gym, run_grpo
from components.sandbox.protocol import Limits
from components.tasks.record import Task, load_tasks
from components.training.config import DistributedSettings, GRPOKnobs
from components.training.launcher import runs_here

WORKER = "components.rl.grpo_launch"
RESULT = "grpo_result.json"
CASES, WORLD = "grpo_cases.jsonl", "grpo_world.json"


class DiagGymSpec(BaseModel):
    """DiagGym from files: the cases and a saved StatisticalWorldModel."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["diag"] = "diag"
    cases_file: Path
    world_file: Path
    env_config: DiagEnvConfig | None = None

    def build(self) -> Gym:
        return DiagGym(load_cases(self.cases_file), StatisticalWorldModel.load(self.world_file), self.env_config)


class CodingGymSpec(BaseModel):
    """CodingGym from the profile's task file: the train tasks by id, in the order the stage chose them."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["coding"] = "coding"
    tasks_file: Path
    task_ids: list[str] = Field(min_length=1)
    env_config: EnvConfig
    backend: Literal["process", "docker", "auto"] = "auto"
    limits: Limits = Field(default_factory=Limits)

    @classmethod
    def of(cls, tasks_file: Path, tasks: Sequence[Task], env_config: EnvConfig,
           backend: Literal["process", "docker", "auto"], limits: Limits) -> CodingGymSpec:
        return cls(tasks_file=tasks_file, task_ids=[t.task_id for t in tasks], env_config=env_config,
                   backend=backend, limits=limits)

    def build(self) -> Gym:
        by_id = {t.task_id: t for t in load_tasks(self.tasks_file)}
        missing = [i for i in self.task_ids if i not in by_id]
        if missing:  # the task file changed under a run: its ranks would train on other tasks than it claimed
            raise ValueError(f"{self.tasks_file}: task(s) {', '.join(missing[:5])} of this GRPO run are gone")
        return CodingGym([by_id[i] for i in self.task_ids], self.tasks_file.parent, self.env_config,
                         backend=self.backend, limits=self.limits)


GymSpec = Annotated[DiagGymSpec | CodingGymSpec, Field(discriminator="kind")]


class GRPOJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gym: GymSpec
    base_model: str
    out_dir: Path
    settings: GRPOKnobs
    tracking_uri: str | None = None
    run_id: str | None = None


def diag_spec(cases: Sequence[Case], world: WorldModel, out_dir: Path,
              env_config: DiagEnvConfig | None = None) -> DiagGymSpec:
    """DiagGym's spec, its cases and world saved into `out_dir` for the ranks."""
    if not isinstance(world, StatisticalWorldModel):
        raise TypeError(f"a launched GRPO run loads its world from a file, and {type(world).__name__} is not saved: "
                        "use the fitted StatisticalWorldModel, or training.distributed.processes: 1")
    out_dir.mkdir(parents=True, exist_ok=True)
    save_cases(out_dir / CASES, list(cases))
    world.save(out_dir / WORLD)
    return DiagGymSpec(cases_file=out_dir / CASES, world_file=out_dir / WORLD, env_config=env_config)


def launch_grpo(cases: Sequence[Case], world: WorldModel, base_model: str, out_dir: Path | str,
                settings: GRPOKnobs | None = None, env_config: DiagEnvConfig | None = None,
                distributed: DistributedSettings | None = None, callbacks: Sequence[Any] = (),
                tracking: tuple[str, str] | None = None) -> GRPORun:
    """DiagGym's GRPO in this process, or launched: then `world` must be a StatisticalWorldModel (saved for the
    ranks)."""
    distributed = distributed or DistributedSettings()
    if runs_here(distributed):
        return run_grpo(DiagGym(cases, world, env_config), base_model, out_dir, settings, callbacks=callbacks)
    spec = diag_spec(cases, world, Path(out_dir), env_config)
    return launch_gym(spec, base_model, out_dir, settings, distributed, callbacks, tracking)


def launch_gym(spec: GymSpec, base_model: str, out_dir: Path | str, settings: GRPOKnobs | None = None,
               distributed: DistributedSettings | None = None, callbacks: Sequence[Any] = (),
               tracking: tuple[str, str] | None = None) -> GRPORun:
    """GRPO on the gym `spec` builds: in this process (with `callbacks`), or launched, where `callbacks` (objects,
    not JSON) stay behind and per-step metrics go to `tracking` (MLflow URI, run id) from rank 0."""
    from components.training.stage import launch_worker

    distributed = distributed or DistributedSettings()
    out = Path(out_dir)
    settings = settings or GRPOKnobs()
    if runs_here(distributed):
        return run_grpo(spec.build(), base_model, out, settings, callbacks=callbacks)
    # the knobs only: a stage's own fields (the coding stage's init and task count) were spent choosing the gym
    knobs = GRPOKnobs.model_validate(settings.model_dump(include=set(GRPOKnobs.model_fields)))
    job = GRPOJob(gym=spec, base_model=base_model, out_dir=out, settings=knobs,
                  tracking_uri=tracking[0] if tracking else None, run_id=tracking[1] if tracking else None)
    (out / RESULT).unlink(missing_ok=True)  # a result left by an earlier launch must not pass for this one's
    launch_worker(WORKER, job.model_dump_json(), out, distributed, log_to=out.parent / f"{out.name}.launch.log")
    return GRPORun.model_validate_json((out / RESULT).read_text())


def run_job(job: GRPOJob) -> GRPORun:
    """One rank of a launched GRPO run."""
    callbacks: list[Any] = []
    if job.tracking_uri and job.run_id:  # it logs from the world's process zero only
        from components.tracking.training import MlflowStepLogger

        callbacks.append(MlflowStepLogger(job.tracking_uri, job.run_id))
    run = run_grpo(job.gym.build(), job.base_model, job.out_dir, job.settings, callbacks=callbacks)
    if _rank() == 0:
        with atomic_write(job.out_dir / RESULT) as fh:
            fh.write(run.model_dump_json(indent=1))
    return run


def _rank() -> int:
    import os

    return int(os.environ.get("RANK", "0"))


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(f"usage: python -m {WORKER} JOB.json")
    run_job(GRPOJob.model_validate_json(Path(argv[0]).read_text()))


if __name__ == "__main__":
    main(sys.argv[1:])
