"""GRPO through the training launcher: one process here, or `accelerate launch` on the profile's processes and
machines, as the pipeline's SFT, DPO and verifier stages are (components/training/stage.py, `launch_worker`).

A launched rank cannot be handed Python objects: the job names the cases and the fitted statistical world as files
in the run folder, and each rank loads them (`python -m components.rl.grpo_launch JOB.json`). The rollout already
gives each rank its own slice of a step's samples (components/rl/grpo.py, EpisodeRollout); rank 0 writes the result.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from components.common.io import atomic_write
from components.diag.env import DiagEnvConfig
from components.diag.record import Case, load_cases, save_cases
from components.diag.world import StatisticalWorldModel, WorldModel
from components.rl.grpo import GRPORun, GRPOSettings, train_grpo
from components.training.config import DistributedSettings

WORKER = "components.rl.grpo_launch"
RESULT = "grpo_result.json"
CASES, WORLD = "grpo_cases.jsonl", "grpo_world.json"


class GRPOJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases_file: Path
    world_file: Path  # a saved StatisticalWorldModel
    base_model: str
    out_dir: Path
    settings: GRPOSettings
    env_config: DiagEnvConfig | None = None
    tracking_uri: str | None = None
    run_id: str | None = None


def launch_grpo(cases: Sequence[Case], world: WorldModel, base_model: str, out_dir: Path | str,
                settings: GRPOSettings | None = None, env_config: DiagEnvConfig | None = None,
                distributed: DistributedSettings | None = None, callbacks: Sequence[Any] = (),
                tracking: tuple[str, str] | None = None) -> GRPORun:
    """train_grpo in this process, or launched: then `world` must be a StatisticalWorldModel (saved for the ranks),
    `callbacks` stay here and per-step metrics go to `tracking` (MLflow URI, run id)."""
    from components.training import launcher
    from components.training.stage import launch_worker

    distributed = distributed or DistributedSettings()
    out = Path(out_dir)
    settings = settings or GRPOSettings()
    if launcher.in_process(distributed, launcher.resolve_machines(distributed)) and not distributed.child_process:
        return train_grpo(cases, world, base_model, out, settings, env_config, callbacks=callbacks)
    if not isinstance(world, StatisticalWorldModel):
        raise TypeError(f"a launched GRPO run loads its world from a file, and {type(world).__name__} is not saved: "
                        "use the fitted StatisticalWorldModel, or training.distributed.processes: 1")
    out.mkdir(parents=True, exist_ok=True)
    save_cases(out / CASES, list(cases))
    world.save(out / WORLD)
    job = GRPOJob(cases_file=out / CASES, world_file=out / WORLD, base_model=base_model, out_dir=out,
                  settings=settings, env_config=env_config, tracking_uri=tracking[0] if tracking else None,
                  run_id=tracking[1] if tracking else None)
    launch_worker(WORKER, job.model_dump_json(), out, distributed, log_to=out.parent / f"{out.name}.launch.log")
    return GRPORun.model_validate_json((out / RESULT).read_text())


def run_job(job: GRPOJob) -> GRPORun:
    """One rank of a launched GRPO run."""
    callbacks: list[Any] = []
    if job.tracking_uri and job.run_id:
        from components.tracking.training import MlflowStepLogger

        callbacks.append(MlflowStepLogger(job.tracking_uri, job.run_id))
    run = train_grpo(load_cases(job.cases_file), StatisticalWorldModel.load(job.world_file), job.base_model,
                     job.out_dir, job.settings, job.env_config, callbacks=callbacks)
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
