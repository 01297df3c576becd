"""Training stages as Prefect flows: build the stage's dataset, then train, merge and log it (components do the work)."""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from components.common.paths import PROJECT_ROOT
from components.pipeline.paths import init_model, stage_dirs
from components.pipeline.plan import check_training_episodes
from components.profile.config import PipelineConfig, as_config
from components.training.stage import build_dataset, run_stage


# the stage's key is the cache (components/pipeline/state.py): Prefect's own would hash the profile and read the
# task's source at every call for a result it never persists
@task(name="build-dataset", cache_policy=NO_CACHE)
def dataset_task(cfg: PipelineConfig, method: str, stage: str | None = None) -> dict[str, Any]:
    manifest = build_dataset(cfg, method, stage_dirs(cfg, method, stage), stage_dirs(cfg, "verifier"))  # type: ignore[arg-type]
    return manifest.model_dump(mode="json")


# no retries: a rerun resumes from the last checkpoint by itself, and a failed launch needs a look, not a loop
@task(name="train", cache_policy=NO_CACHE)
def train_task(cfg: PipelineConfig, method: str, fresh: bool, log_model: bool, stage: str | None = None
               ) -> dict[str, Any]:
    out = run_stage(cfg, method, stage_dirs(cfg, method, stage), init_model(cfg, method),  # type: ignore[arg-type]
                    fresh=fresh, log_model=log_model, project_root=PROJECT_ROOT)
    return {"method": out.method, "model_dir": str(out.model_dir), "run_id": out.run_id, "model_uri": out.model_uri,
            **out.result.model_dump(mode="json", exclude={"log_history"})}


@flow(name="train", log_prints=True)
def train_flow(config: str | PipelineConfig, method: str, fresh: bool = False, build: bool = True,
               log_model: bool = True, stage: str | None = None) -> dict[str, Any]:
    """`stage` names a training stage other than the method's own (a self-improvement round's `round1-sft`):
    its own dataset, run folder and MLflow run; `config` then carries that stage's settings as the method's."""
    cfg = as_config(config)
    check_training_episodes(cfg, method, stage)  # type: ignore[arg-type]
    dataset = dataset_task(cfg, method, stage) if build else None
    result = train_task(cfg, method, fresh, log_model, stage)
    return {"dataset": dataset, "train": result}
