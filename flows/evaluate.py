"""Evaluation as a Prefect flow: a rollout's success per domain, against a baseline, and the verifier's ranking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import flow

from components.common.io import atomic_write
from components.config import load_config
from components.evaluation.metrics import success_report
from components.evaluation.report import compare, verifier_report
from components.training.stage import stage_episodes
from flows.runtime import PROJECT_ROOT


@flow(name="evaluate", log_prints=True)
def eval_flow(config: str, rollout: str, baseline: str | None = None, verifier: str | None = None,
              verifier_kind: str = "generative", out: str | None = None) -> dict[str, Any]:
    from components.tracking.training import flatten, training_run

    cfg = load_config(Path(config) if Path(config).suffix else config)
    episodes, _ = stage_episodes(cfg, [rollout])
    scores = None
    report: dict[str, Any] = {"rollout": rollout, "profile": cfg.profile}
    if verifier:
        from components.training.verifier import VerifierScorer

        scorer = VerifierScorer(Path(verifier), verifier_kind,  # type: ignore[arg-type]
                                max_tokens=cfg.training.verifier.max_tokens)
        scores = scorer.score([e for e in episodes if e.outcome is not None])
        report["verifier"] = {"model": verifier, **verifier_report(episodes, scores)}
    report["success"] = success_report(episodes, scores=scores)
    if baseline:
        report["baseline"] = baseline
        report["versus_baseline"] = compare(stage_episodes(cfg, [baseline])[0], episodes)
    path = Path(out) if out else PROJECT_ROOT / "reports" / cfg.profile / f"{rollout}.json"
    with atomic_write(path) as fh:
        json.dump(report, fh, indent=1, default=str)
    with training_run(cfg.tracking, f"eval-{rollout}", PROJECT_ROOT, system_metrics=False) as run:
        run.set_tags({"medgym.stage": "evaluate", "medgym.rollout": rollout, "medgym.baseline": baseline or ""})
        flat = flatten({k: report[k] for k in ("success", "verifier", "versus_baseline") if k in report})
        run.log_metrics({k.replace("@", "_at_")[:250]: float(v) for k, v in flat.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)})
        run.log_artifact(path)
    report["report_path"] = str(path)
    return report
