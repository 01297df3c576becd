"""A rollout: one named collection of the profile (`rollouts:`, and each self-improvement round's), played on the
suite's tasks by its policy; it runs after the training stage whose merged model it plays (`plays`)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.common.paths import PROJECT_ROOT
from components.pipeline.digest import model_folder
from components.pipeline.kinds import StageKind, stage_kind
from components.pipeline.plan import SUITE, Plan, Stage

if TYPE_CHECKING:
    from components.rollout.runner import CollectionConfig


def plays_on_shared_engine(config: CollectionConfig) -> bool:
    """Whether a collection plays on the run's one vLLM server (components/policies/engines.py): Ray's actors and
    attached servers (`base_url`) build their own."""
    return config.policy.backend == "vllm" and not config.ray_address and not config.policy.options.get("base_url")


def _round(name: str) -> int:
    """A self-improvement round's rollouts are named round<r>_<split>."""
    return int(name[len("round"):].split("_")[0]) if name.startswith("round") and name[5:6].isdigit() else 0


@stage_kind
class Rollout(StageKind):
    name, rank, runner = "rollout", 20, "flows.pipeline.run_rollout"
    keeps_engine = True
    retries = 1  # a rerun skips the finished episodes (a vLLM server's hiccup costs what was in flight)
    entries = ("components.rollout.collect", "components.envs.episode", "components.policies.protocol")

    def stages(self, plan: Plan) -> list[Stage]:
        cfg = plan.cfg
        return [Stage(name, self.name, (SUITE, *([r.plays] if r.plays else [])), round=_round(name),
                      outputs=(cfg.rollout_dir(name),)) for name, r in cfg.rollouts.items()]

    def inputs(self, plan: Plan, stage: Stage) -> dict[str, Any]:
        cfg = plan.cfg
        return {"collection": cfg.collection(stage.name).model_dump(mode="json"),
                "out_dir": str(cfg.rollout_dir(stage.name))}

    def data(self, plan: Plan, stage: Stage) -> tuple[Path, ...]:
        # a checkpoint named by folder or embedded name (a trained stage's model is an upstream key already)
        policy = plan.cfg.collection(stage.name).policy
        model = policy.options.get("model")
        folder = model_folder(model, PROJECT_ROOT) if policy.backend in ("hf", "vllm") and isinstance(model, str) else None
        return (folder,) if folder is not None else ()

    def shared_engine(self, plan: Plan, stage: Stage) -> str | None:
        config = plan.cfg.collection(stage.name)
        if not plays_on_shared_engine(config):
            return None
        return json.dumps(config.policy.options, sort_keys=True, default=str)

    def params(self, plan: Plan, stage: Stage) -> list[str]:
        # a round's rollouts are made from pipeline.self_improve; every collection takes the profile's env and sandbox
        return [f"rollouts.{stage.name}" if stage.round == 0 else "pipeline.self_improve", "env", "focus", "sandbox"]

    def details(self, plan: Plan, stage: Stage, tasks: Counter[tuple[str, str]] | None) -> dict[str, Any]:
        c = plan.cfg.collection(stage.name)
        n = None if tasks is None else sum(v for (split, cat), v in tasks.items()
                                           if (c.split is None or split == c.split)
                                           and (c.categories is None or cat in c.categories))
        if n is not None and c.limit is not None:
            n = min(n, c.limit)
        return {"what": f"{c.policy.backend} {c.policy.options.get('model', '')}".strip(),
                "split": c.split, "tasks": n if n is not None else "after suite",
                "k": c.plan.k, "episodes": n * c.plan.k if n is not None else None,
                "temperature": f"{c.plan.first_temperature} then {c.plan.temperature}",
                "max_turns": c.env.max_turns, "sandbox": c.sandbox_backend, "workers": c.workers,
                "out": str(plan.cfg.rollout_dir(stage.name))}
