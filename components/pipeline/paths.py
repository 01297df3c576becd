"""Where a profile's training stages keep their files, and its rollouts' episodes by name: the layout the plan, the
DVC stages, the flows and the registration read, handed to the training engine as `StageDirs`.

A stage is named by its method (sft, dpo, verifier) unless it says otherwise: self-improvement rounds train
`round1-sft`, `round1-dpo`, ... with the same methods, each in its own folders and MLflow run.
"""

from __future__ import annotations

from pathlib import Path

from components.envs.episode import Episode
from components.profile.config import PipelineConfig
from components.training.stage import KINDS, StageDirs, rollout_episodes
from components.training.trainers import MERGED, Method


def dataset_dir(cfg: PipelineConfig, method: Method, stage: str | None = None) -> Path:
    return cfg.training.data_dir / cfg.profile / (stage or method)


def run_dir(cfg: PipelineConfig, method: Method, stage: str | None = None) -> Path:
    return cfg.training.out_dir / cfg.profile / (stage or method)


def merged_dir(cfg: PipelineConfig, method: Method, stage: str | None = None) -> Path:
    return run_dir(cfg, method, stage) / MERGED


def stage_dirs(cfg: PipelineConfig, method: Method, stage: str | None = None) -> StageDirs:
    """The stage's folders, and those of the rollouts its `episodes` name, as the training engine takes them."""
    rollouts = {name: cfg.rollout_dir(name) for name in getattr(cfg.training, method).episodes}
    return StageDirs(stage or method, dataset_dir(cfg, method, stage), run_dir(cfg, method, stage),
                     merged_dir(cfg, method, stage), rollouts)


def init_model(cfg: PipelineConfig, method: Method) -> str:
    """The checkpoint a stage starts from: its `init` (base, another stage's merged output, or a folder)."""
    init = getattr(cfg.training, method).init
    if init == "base":
        return cfg.training.base_model
    if init in KINDS:
        path = merged_dir(cfg, init)  # type: ignore[arg-type]
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{method} starts from the {init} stage's model, and {path} holds none: "
                                    f"run `medgym train {init}` first")
        return str(path)
    return init


def stage_episodes(cfg: PipelineConfig, names: list[str]) -> tuple[list[Episode], list[Path]]:
    """The episodes of the profile's rollouts `names` (any split: evaluation and registration read them), and their
    folders."""
    episodes: list[Episode] = []
    dirs = [cfg.rollout_dir(name) for name in names]
    for name, folder in zip(names, dirs, strict=True):
        episodes += rollout_episodes(folder, name, cfg.profile)
    return episodes, dirs
