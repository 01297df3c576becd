"""The coding profile's GRPO stage as a Prefect flow (components.rl.stage does the work), and its pipeline runner."""

from __future__ import annotations

from typing import Any

from prefect import flow

from components.common.paths import PROJECT_ROOT
from components.pipeline.paths import init_model, run_dir
from components.pipeline.plan import Plan, Stage
from components.policies.engines import VLLMServers
from components.profile.config import PipelineConfig
from components.rl.stage import run_coding_grpo


@flow(name="grpo", log_prints=True)
def grpo_flow(config: PipelineConfig) -> dict[str, Any]:
    init = init_model(config, "grpo")  # type: ignore[arg-type]
    out = run_coding_grpo(
        PROJECT_ROOT / config.data.out_dir / "tasks.jsonl", PROJECT_ROOT / run_dir(config, "grpo"),  # type: ignore[arg-type]
        config.training.grpo, str(PROJECT_ROOT / init) if init != config.training.base_model else init,
        env=config.env, backend=config.sandbox.backend, limits=config.sandbox.limits, categories=config.focus,
        tracking=config.tracking, run_name=f"{config.profile}-grpo", project_root=PROJECT_ROOT,
        tags={"medgym.stage": "grpo", "medgym.profile": config.profile}, distributed=config.training.distributed)
    return {**out.figures, "model_dir": str(out.run.model_dir), "run_id": out.run_id}


def run_grpo(plan: Plan, cfg: PipelineConfig, stage: Stage, engines: VLLMServers | None = None) -> dict[str, Any]:
    if engines is not None and cfg.pipeline.release_engine_for_training:
        engines.close()
    return grpo_flow.fn(config=cfg)
