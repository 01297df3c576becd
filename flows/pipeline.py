"""The main job: every stage of the platform chained in one Prefect flow, configured by one profile."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from components.config import load_config
from flows.checks import solvability_flow
from flows.data import build_suite_flow
from flows.rollout import raise_if_all_refused, rollout_flow


@flow(name="medgym-pipeline", log_prints=True)
def pipeline_flow(profile: str = "demo") -> dict:
    cfg = load_config(profile)
    # later stages (verifier, SFT, DPO, self-improvement, evaluation, registration) chain here
    suite = build_suite_flow(profile=profile, suite="demo")
    tasks = Path(suite["out"]) / "tasks.jsonl"
    solvable = solvability_flow(tasks_path=tasks, profile=profile)
    rollouts = {}
    for name in cfg.rollouts:  # e.g. the teacher on the train split, the base model on the held-out split
        result = rollout_flow(tasks=tasks, out_dir=cfg.rollout_dir(name), config=cfg.collection(name),
                              profile=profile, name=name)
        raise_if_all_refused(result, cfg.rollouts[name].policy.backend)
        rollouts[name] = {"out_dir": result["out_dir"], "summary": _headline(result["summary"])}
    return {"profile": cfg.profile, "suite": suite, "solvability": solvable, "rollouts": rollouts}


def _headline(summary: dict) -> dict:
    keep = ("episodes", "success", "turns_mean", "teacher_mistakes", "teacher_repaired")
    return {k: v for k, v in summary.items() if k in keep or k.startswith("success_domain/")}
