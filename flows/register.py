"""Registration as a Prefect flow: a trained model, its held-out rollout and provenance into the Model Registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from components.common.paths import PROJECT_ROOT
from components.pipeline.paths import dataset_dir, merged_dir, stage_episodes
from components.profile.config import PipelineConfig, as_config
from components.registry import RegistryConfig, Selection, register, rollout_evaluation
from components.training.datasets import read_manifest, source_digest
from flows.artifacts import publish_decision


@flow(name="register", log_prints=True)
def register_flow(config: str | PipelineConfig, rollout: str, baseline: str | None = None, method: str | None = None,
                  model_uri: str | None = None, model_dir: str | None = None,
                  data_versions: dict[str, str] | None = None, registry: RegistryConfig | None = None,
                  tasks: str | None = None, selection: Selection | None = None) -> dict[str, Any]:
    """Register the model whose held-out episodes are rollout `rollout`; `baseline` names the rollout it must beat
    while there is no champion. `method` (sft, dpo, verifier) tags the stage's dataset hash and, without
    `model_uri` or `model_dir`, registers that stage's merged checkpoint. `tasks` is the task file the rollouts
    played (default: the profile's suite): the evaluation records each task's content hash from it. `selection` is
    how the pipeline chose this model (components.registry.selection); its test rollout must be `rollout`."""
    cfg = as_config(config)
    if selection is not None and selection.test_rollout != rollout:
        raise ValueError(f"register: the selection chose {selection.chosen}, whose test rollout is "
                         f"{selection.test_rollout}, not {rollout}")
    settings = registry or cfg.registry
    tasks_file = Path(tasks) if tasks else PROJECT_ROOT / cfg.data.out_dir / "tasks.jsonl"
    episodes, dirs = stage_episodes(cfg, [rollout])
    candidate = rollout_evaluation(episodes, tasks_file, reference=str(dirs[0]))
    versions = {f"rollout.{rollout}": source_digest(dirs[0])}
    base = None
    if baseline:
        base_episodes, base_dirs = stage_episodes(cfg, [baseline])
        base = rollout_evaluation(base_episodes, tasks_file, reference=str(base_dirs[0]))
        versions[f"rollout.{baseline}"] = source_digest(base_dirs[0])
    if method:
        versions[f"dataset.{method}"] = read_manifest(dataset_dir(cfg, method)).content_hash  # type: ignore[arg-type]
        if model_uri is None and model_dir is None:
            model_dir = str(merged_dir(cfg, method))  # type: ignore[arg-type]
    versions |= data_versions or {}
    decision = register(settings, cfg.tracking, candidate, model_uri=model_uri,
                        model_dir=Path(model_dir) if model_dir else None, baseline=base, data_versions=versions,
                        project_root=PROJECT_ROOT, selection=selection)
    if selection is not None:
        print(selection.reason)
    print(f"{decision.name} v{decision.version} -> {decision.alias}: {decision.reason}")
    out = decision.model_dump(mode="json")
    publish_decision(cfg.profile, [out], selection.reason if selection is not None else None)
    return out
