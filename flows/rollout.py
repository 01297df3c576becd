"""Rollout collection as a Prefect flow: one MLflow run per collection, a progress bar, resumable on retry."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from prefect import flow
from rich.console import Console
from tqdm import tqdm

from components.common.paths import PROJECT_ROOT
from components.envs.episode import Episode, Outcome
from components.policies.protocol import Policy, PolicyRefusal
from components.profile.config import PipelineConfig, as_config
from components.rollout.collect import CollectionResult, collect
from components.rollout.runner import CollectionConfig
from components.tracking.tracker import MlflowTracker

SAMPLE_EPISODES = 20  # episodes logged as artifacts per collection (the shards hold them all)


@flow(name="rollout", log_prints=True, retries=1, retry_delay_seconds=2)  # a retry resumes: finished pairs are skipped
def rollout_flow(tasks: Path, out_dir: Path, config: CollectionConfig, profile: str | PipelineConfig = "demo",
                 name: str = "rollout", policy: Any = None) -> dict:
    """`policy`: one built by the caller (the pipeline's vLLM server, kept between collections), else built here."""
    cfg = as_config(profile)
    result = _collect_with_progress(Path(tasks), Path(out_dir), config, name, policy)
    _track(cfg, name, Path(tasks), Path(out_dir), config, result)
    return result.model_dump()


def raise_if_all_refused(result: dict, backend: str) -> None:
    """Outside the flow, so that a policy that cannot play the tasks fails once instead of being retried."""
    if result["refused"] and not result["planned"] and not result["skipped"]:
        first = next(iter(result["refused"].values()))
        raise PolicyRefusal(f"{backend} cannot play any of the {len(result['refused'])} tasks: {first}")


def _collect_with_progress(tasks: Path, out_dir: Path, config: CollectionConfig, name: str,
                           policy: Policy | None = None) -> CollectionResult:
    counts = {"done": 0, "correct": 0}
    bar = tqdm(desc=f"{name} ({config.policy.backend})", unit="ep", dynamic_ncols=True, leave=True)

    def on_progress(episodes: list[Episode]) -> None:
        counts["done"] += len(episodes)
        counts["correct"] += sum(e.outcome == Outcome.CORRECT for e in episodes)
        bar.update(len(episodes))
        bar.set_postfix(success=f"{counts['correct'] / counts['done']:.1%}")

    try:
        return collect(tasks, out_dir, config, on_progress=on_progress, total_hook=lambda n: _set_total(bar, n),
                       sample_size=SAMPLE_EPISODES, policy=policy)
    finally:
        bar.close()


def _set_total(bar: tqdm, n: int) -> None:
    bar.total = n
    bar.refresh()


def _track(cfg: PipelineConfig, name: str, tasks: Path, out_dir: Path, config: CollectionConfig,
           result: CollectionResult) -> None:
    policy = config.policy
    params = {
        "tasks": str(tasks), "out_dir": str(out_dir), "policy": policy.backend,
        "model": str(policy.options.get("model", policy.backend)), "k": config.plan.k,
        "first_temperature": config.plan.first_temperature, "temperature": config.plan.temperature,
        "top_p": config.plan.top_p, "max_new_tokens": config.plan.max_new_tokens, "seed": config.plan.seed,
        "split": config.split, "limit": config.limit, "workers": config.workers,
        "max_in_flight": config.max_in_flight, "ray": config.ray_address or "off",
        "sandbox": config.sandbox_backend, "max_turns": config.env.max_turns,
        # the key's *name* only; the policy never hands out the key itself
        **{f"policy.{k}": v for k, v in policy.options.items() if "key" not in k.lower() or k == "api_key_env"},
    }
    summary = result.summary
    tags = {"medgym.stage": "rollout", "medgym.profile": cfg.profile, "medgym.collection": name,
            "medgym.policy": policy.backend}
    metrics = {**{k.replace("/", "."): v for k, v in summary.items()},
               "planned": result.planned, "skipped": result.skipped, "refused": len(result.refused),
               "failed": result.failed, "rejected_shards": len(result.rejected_shards), "elapsed_s": result.elapsed_s}
    with MlflowTracker(cfg.tracking, PROJECT_ROOT).run(f"rollout-{name}", tags=tags) as run, \
            tempfile.TemporaryDirectory() as tmp:
        run.log(params=params, metrics=metrics)
        with open(Path(tmp) / "episodes_sample.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(ep.model_dump_json() + "\n" for ep in result.sample)
        (Path(tmp) / "collection.json").write_text(json.dumps(result.model_dump(), indent=2, default=str))
        run.log_artifacts(Path(tmp))
    Console(stderr=True).print(f"[b]{name}[/b]: {int(summary.get('episodes', 0))} episodes, "
                               f"success {summary.get('success', 0.0):.1%} -> {out_dir}")
