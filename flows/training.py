"""Training stages as Prefect flows: build the stage's dataset, then train, merge and log it (components do the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task

from components.config import PipelineConfig, load_config
from components.training.stage import build_dataset, run_stage
from flows.runtime import PROJECT_ROOT


@task(name="build-dataset")
def dataset_task(cfg: PipelineConfig, method: str) -> dict[str, Any]:
    manifest = build_dataset(cfg, method)  # type: ignore[arg-type]
    return manifest.model_dump(mode="json")


# no retries: a rerun resumes from the last checkpoint by itself, and a failed launch needs a look, not a loop
@task(name="train")
def train_task(cfg: PipelineConfig, method: str, fresh: bool, log_model: bool) -> dict[str, Any]:
    out = run_stage(cfg, method, fresh=fresh, log_model=log_model, project_root=PROJECT_ROOT)  # type: ignore[arg-type]
    return {"method": out.method, "model_dir": str(out.model_dir), "run_id": out.run_id, "model_uri": out.model_uri,
            **out.result.model_dump(mode="json", exclude={"log_history"})}


@flow(name="train", log_prints=True)
def train_flow(config: str, method: str, fresh: bool = False, build: bool = True, log_model: bool = True
               ) -> dict[str, Any]:
    cfg = load_config(Path(config) if Path(config).suffix else config)
    dataset = dataset_task(cfg, method) if build else None
    result = train_task(cfg, method, fresh, log_model)
    return {"dataset": dataset, "train": result}
