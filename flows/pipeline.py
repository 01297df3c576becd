"""The main job: every stage of the platform chained in one Prefect flow, configured by one profile."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from components.config import load_config
from flows.checks import solvability_flow
from flows.data import build_suite_flow


@flow(name="medgym-pipeline", log_prints=True)
def pipeline_flow(profile: str = "demo") -> dict:
    cfg = load_config(profile)
    # later stages (rollouts, verifier, SFT, DPO, self-improvement, evaluation, registration) chain here
    suite = build_suite_flow(profile=profile, suite="demo")
    solvable = solvability_flow(tasks_path=Path(suite["out"]) / "tasks.jsonl", profile=profile)
    return {"profile": cfg.profile, "suite": suite, "solvability": solvable}
