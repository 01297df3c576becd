"""A training stage: one method (sft, verifier, dpo) on the episodes of the rollouts it names, from the stage it starts
at; each self-improvement round adds `round<r>-sft` and `round<r>-dpo` (plan.trainings). The `grpo` stage trains
online instead: it plays its own episodes on the suite's train tasks in the sandbox (components.rl.coding)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from components.common.paths import PROJECT_ROOT
from components.pipeline.digest import model_folder
from components.pipeline.kinds import StageKind, stage_kind
from components.pipeline.paths import dataset_dir, init_model, merged_dir, run_dir
from components.pipeline.plan import (
    GRPO,
    SUITE,
    Plan,
    PlanError,
    Stage,
    refuse_held_out_episodes,
    trained,
    training_reader,
    trainings,
)
from components.rl.grpo import REWARD_SERIES
from components.training.config import DistributedSettings
from components.training.launcher import describe
from components.training.stage import KINDS as METHODS
from components.training.stage import LOSS_SERIES


@stage_kind
class Train(StageKind):
    name, rank, runner = "train", 30, "flows.pipeline.run_train"
    entries = ("components.training.stage", "components.pipeline.paths")
    reads = ("infra/deepspeed",)  # the accelerate/DeepSpeed files `launch` picks

    def stages(self, plan: Plan) -> list[Stage]:
        cfg = plan.cfg
        folders = {str(merged_dir(cfg, method, name)): name for name, method, _, _ in trainings(cfg)}
        out = []
        for name, method, settings, r in trainings(cfg):
            if r == 0 and method not in cfg.training.model_fields_set:
                continue  # a method is trained when the profile configures it
            refuse_held_out_episodes(cfg, training_reader(method, name), settings.episodes)
            needs = [*settings.episodes]
            if settings.init in METHODS:
                needs.append(settings.init)
            elif settings.init in folders:  # a round starts from the previous stage's folder
                needs.append(folders[settings.init])
            if (method == "dpo" and settings.verifier_pairs) or (  # type: ignore[union-attr]
                    method == "sft" and settings.min_verifier_score is not None):  # type: ignore[union-attr]
                needs.append("verifier")
            out.append(Stage(name, self.name, tuple(dict.fromkeys(needs)), method=method, settings=settings, round=r,
                             outputs=(dataset_dir(cfg, method, name), run_dir(cfg, method, name))))
        return out

    def inputs(self, plan: Plan, stage: Stage) -> dict[str, Any]:
        assert stage.settings is not None
        training = plan.cfg.training
        return {"method": stage.method, "settings": stage.settings.model_dump(mode="json"),
                "base_model": training.base_model, "distributed": training.distributed.model_dump(mode="json")}

    def data(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        # the checkpoint it starts from when that is no stage of the pipeline (whose key is upstream already)
        assert stage.settings is not None
        init = stage.settings.init
        if init in METHODS or init in {str(merged_dir(plan.cfg, m, n)) for n, m, _, _ in trainings(plan.cfg)}:
            return ()
        folder = model_folder(plan.cfg.training.base_model if init == "base" else init, PROJECT_ROOT)
        return (folder,) if folder is not None else ()

    def params(self, plan: Plan, stage: Stage) -> list[str]:
        own = f"training.{stage.method}" if stage.round == 0 else "pipeline.self_improve"
        return [own, "training.base_model", "training.distributed"]

    def series(self, plan: Plan, stage: Stage) -> dict[str, dict[str, Any]]:
        assert stage.method is not None
        return {"training_loss": {"x": "step", "title": "training loss per optimizer step",
                                  "y": {str(merged_dir(plan.cfg, stage.method, stage.name) / LOSS_SERIES): "loss"}}}

    def outs(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        # the dataset and the merged model: the checkpoints beside it are the run's own, not data to version
        assert stage.method is not None
        return dataset_dir(plan.cfg, stage.method, stage.name), merged_dir(plan.cfg, stage.method, stage.name)

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        assert stage.method is not None and stage.settings is not None
        s, dist = stage.settings, plan.cfg.training.distributed
        try:
            init = init_model(plan.training_config(stage), stage.method)
        except FileNotFoundError:
            init = str(merged_dir(plan.cfg, s.init)) if s.init in METHODS else s.init  # type: ignore[arg-type]
        extra = {"beta": s.beta} if stage.method == "dpo" else {}  # type: ignore[union-attr]
        return {"what": f"{stage.method} from {init}", "episodes_from": list(s.episodes),
                "learning_rate": s.schedule.learning_rate, "epochs": s.schedule.epochs,
                "max_steps": s.schedule.max_steps, "lora": s.lora.enabled, **extra,
                "processes": dist.processes, "deepspeed": dist.deepspeed,
                "launch": launch_command(dist)}


@stage_kind
class Grpo(StageKind):
    """Online GRPO on the coding environment: after the suite and the stage it starts from, before the training
    stages declared after it (rank), so that a profile's last trained policy stays its last offline one unless the
    profile orders otherwise."""

    name, rank, runner = GRPO, 25, "flows.grpo.run_grpo"
    entries = ("components.rl.grpo", "components.rl.coding", "components.pipeline.paths", "components.tasks.record")

    def stages(self, plan: Plan) -> list[Stage]:
        cfg = plan.cfg
        if GRPO not in cfg.training.model_fields_set:
            return []
        s = cfg.training.grpo
        stages = {n: m for n, m in trained(cfg).items() if n != GRPO}
        if s.init in ("verifier", GRPO) or (s.init in METHODS and s.init not in stages):
            raise PlanError(f"{cfg.source}: training.grpo.init is {s.init!r}: GRPO starts from base, a policy stage "
                            f"the profile trains ({', '.join(n for n, m in stages.items() if m != 'verifier') or 'none'}) "
                            "or a checkpoint folder")
        needs = (SUITE, s.init) if s.init in stages else (SUITE,)
        return [Stage(GRPO, self.name, needs, method=GRPO, settings=s,  # type: ignore[arg-type]
                      outputs=(run_dir(cfg, GRPO),))]  # type: ignore[arg-type]

    def inputs(self, plan: Plan, stage: Stage) -> dict[str, Any]:
        # the episodes it plays are made by the environment, the sandbox and the categories as much as by its knobs
        dump = plan.cfg.model_dump(mode="json")
        return {"settings": dump["training"]["grpo"], "base_model": dump["training"]["base_model"],
                "env": dump["env"], "sandbox": dump["sandbox"], "focus": dump["focus"]}

    def data(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        init = plan.cfg.training.grpo.init
        if init in stage.needs:
            return ()  # an upstream stage's model: its key is upstream already
        folder = model_folder(plan.cfg.training.base_model if init == "base" else init, PROJECT_ROOT)
        return (folder,) if folder is not None else ()

    def params(self, plan: Plan, stage: Stage) -> list[str]:
        return ["training.grpo", "training.base_model", "env", "focus", "sandbox"]

    def series(self, plan: Plan, stage: Stage) -> dict[str, dict[str, Any]]:
        return {"grpo_reward": {"x": "step", "title": "GRPO: mean checker reward per optimizer step",
                                "y": {str(merged_dir(plan.cfg, GRPO) / REWARD_SERIES): "reward"}}}  # type: ignore[arg-type]

    def outs(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        return (merged_dir(plan.cfg, GRPO),)  # type: ignore[arg-type]

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        s = plan.cfg.training.grpo
        init = str(merged_dir(plan.cfg, s.init)) if s.init in stage.needs else s.init  # type: ignore[arg-type]
        n = None if tasks is None else sum(v for (split, cat), v in tasks.items() if split == "train"
                                           and (plan.cfg.focus is None or cat in plan.cfg.focus))
        if n is not None and s.tasks is not None:
            n = min(n, s.tasks)
        return {"what": f"online GRPO in the sandbox from {init}", "tasks": n if n is not None else "after suite",
                "steps": s.steps, "num_generations": s.num_generations, "episodes_per_step": s.episodes_per_step,
                "max_turns": s.max_turns, "max_new_tokens": s.max_new_tokens, "learning_rate": s.learning_rate,
                "lora": s.lora.enabled, "out": str(run_dir(plan.cfg, GRPO))}  # type: ignore[arg-type]


def launch_command(distributed: DistributedSettings, gpus: int | None = None) -> str:
    """The launch as a dry run shows it, for the machines the environment names here (training/launcher.py)."""
    return describe(distributed, gpus, python=Path(sys.executable).name)
