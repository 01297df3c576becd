"""The coding GRPO stage end to end: the train tasks → CodingGym → GRPO from the starting checkpoint → merged model,
in one MLflow run like every other training method (components.training.stage.run_stage).

The run carries the settings as params, the trainer's figures per optimizer step (loss, the checker's mean reward,
coding/accuracy, KL and clip ratios: MlflowStepLogger) and the stage's totals; beside the merged model go the mean
reward per step (`train_reward.json`, a DVC plot) and a marker saying which run, tasks and starting model made it.
A rerun resumes from the last checkpoint of its run folder, which belongs to one starting model and one task set.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from components.common.io import atomic_write
from components.envs.coding_env import EnvConfig
from components.rl.grpo import REWARD_SERIES, GRPORun, load_grpo_episodes
from components.rl.grpo_launch import CodingGymSpec, launch_gym
from components.rollout.collect import select_tasks
from components.sandbox.protocol import Limits
from components.tasks.record import load_tasks
from components.tracking.tracker import TrackingConfig, flatten
from components.training.config import CodingGRPOSettings, DistributedSettings
from components.training.stage import STAGE_MARKER, claim_run_dir


@dataclass
class GRPOStageOutput:
    run: GRPORun
    run_id: str
    figures: dict[str, Any]  # the stage's headline figures


def run_coding_grpo(tasks_path: Path, run_dir: Path, settings: CodingGRPOSettings, init: str, *, env: EnvConfig,
                    backend: Literal["process", "docker", "auto"], limits: Limits, categories: list[str] | None,
                    tracking: TrackingConfig, run_name: str, tags: dict[str, str] | None = None,
                    project_root: Path | None = None, distributed: DistributedSettings | None = None
                    ) -> GRPOStageOutput:
    """GRPO from the checkpoint `init` on the train tasks of `tasks_path` (at most `settings.tasks`, spread over
    `categories`), checkpoints in `run_dir`, merged into `run_dir/merged`; in this process, or on `distributed`'s
    processes and machines through the training launcher."""
    from components.tracking.training import MlflowStepLogger, training_run
    from components.training.launcher import resolve_machines

    dist = distributed or DistributedSettings()
    ranks = dist.processes * resolve_machines(dist).num_machines
    tasks = select_tasks(load_tasks(tasks_path), "train", settings.tasks, categories)
    if len(tasks) < settings.prompts_per_step * ranks:  # TRL's sampler would hand out no full step: zero steps
        raise ValueError(f"{tasks_path}: {len(tasks)} train task(s) for training.grpo, which plays "
                         f"prompts_per_step={settings.prompts_per_step} different tasks per step on each of "
                         f"{ranks} process(es)")
    spec = CodingGymSpec.of(Path(tasks_path), tasks, env, backend, limits)
    task_digest = hashlib.sha256("\n".join(sorted(t.task_id for t in tasks)).encode()).hexdigest()
    claim_run_dir(run_dir, {"tasks": task_digest, "init": init}, f"clear {run_dir} to start over")
    with training_run(tracking, run_name, project_root,
                      tags={"medgym.method": "grpo", "medgym.init": init, **(tags or {})}) as mlrun:
        mlrun.log(params=flatten({"method": "grpo", "base_model": init, "tasks_file": str(tasks_path),
                                  "train_tasks": len(tasks), "env": env.model_dump(mode="json"),
                                  "processes": dist.processes, "deepspeed": dist.deepspeed,
                                  **settings.model_dump(mode="json")}))
        run = launch_gym(spec, init, run_dir, settings, dist,
                         callbacks=[MlflowStepLogger(mlrun.tracking_uri, mlrun.run_id)],
                         tracking=(mlrun.tracking_uri, mlrun.run_id))
        episodes = load_grpo_episodes(run.out_dir)
        rewards = [(h["step"], h["reward"]) for h in run.log_history if "reward" in h and "step" in h]
        agent_tokens = sum(e.completion_tokens or 0 for e in episodes)
        figures: dict[str, Any] = {
            "global_step": run.global_step, "episodes": len(episodes), "train_tasks": len(tasks),
            "success": sum(e.reward for e in episodes) / max(len(episodes), 1),
            "sandbox_runs": sum(t.exec_result is not None for e in episodes for t in e.turns),
            "train_runtime_s": round(run.runtime_s, 1),
            "agent_tokens_per_s": round(agent_tokens / max(run.runtime_s, 1e-9), 2)}
        mlrun.log_metrics({k: float(v) for k, v in figures.items()})
        with atomic_write(run.model_dir / REWARD_SERIES) as fh:
            json.dump([{"step": s, "reward": r} for s, r in rewards], fh, indent=1)
        (run.model_dir / STAGE_MARKER).write_text(json.dumps(
            {"method": "grpo", "stage": run_name, "kind": "causal", "run_id": mlrun.run_id, "tasks": task_digest,
             "init": init}, indent=1))
        return GRPOStageOutput(run, mlrun.run_id, figures)
