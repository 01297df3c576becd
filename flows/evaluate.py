"""Evaluation as Prefect flows: a rollout's success per domain, against a baseline, and the verifier's ranking
(eval_flow); several rollouts ranked on one leaderboard with an error taxonomy and figures (leaderboard_flow).
Two evaluations, rollout folders or registered versions, compared by the registry's own paired test
(compare_evaluations, `medgym eval compare`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow

from components.common.io import atomic_write
from components.common.paths import PROJECT_ROOT
from components.evaluation.metrics import success_report
from components.evaluation.report import compare, verifier_report
from components.pipeline.paths import stage_episodes
from components.profile.config import PipelineConfig, load_config
from components.registry import Comparison, Evaluation
from components.registry.evaluation import DEFAULT_METRIC
from components.rollout.store import EPISODES, load_episodes_dir
from components.tracking.tracker import flatten, mlflow_key
from components.training.stage import verifier_scorer
from flows.artifacts import publish_leaderboard


def _config(config: str | PipelineConfig) -> PipelineConfig:
    if isinstance(config, PipelineConfig):
        return config
    return load_config(Path(config) if Path(config).suffix else config)


def _verifier(cfg: PipelineConfig, verifier: str, verifier_kind: str) -> Any:
    # the window the profile's verifier trained on (the kind as given: the checkpoint may be either)
    return verifier_scorer(Path(verifier), cfg.training.verifier.model_copy(update={"kind": verifier_kind}))


def _finished(episodes: list[Any]) -> list[Any]:
    return [e for e in episodes if e.outcome is not None]


@flow(name="evaluate", log_prints=True)
def eval_flow(config: str | PipelineConfig, rollout: str, baseline: str | None = None, verifier: str | None = None,
              verifier_kind: str = "generative", out: str | None = None) -> dict[str, Any]:
    from components.tracking.training import training_run

    cfg = _config(config)
    episodes, _ = stage_episodes(cfg, [rollout])
    scores = None
    report: dict[str, Any] = {"rollout": rollout, "profile": cfg.profile}
    if verifier:
        scores = _verifier(cfg, verifier, verifier_kind).score(_finished(episodes))
        report["verifier"] = {"model": verifier, **verifier_report(episodes, scores)}
    report["success"] = success_report(episodes, scores=scores)
    if baseline:
        report["baseline"] = baseline
        report["versus_baseline"] = compare(stage_episodes(cfg, [baseline])[0], episodes)
    path = Path(out) if out else PROJECT_ROOT / cfg.pipeline.reports_dir / cfg.profile / f"{rollout}.json"
    with atomic_write(path) as fh:
        json.dump(report, fh, indent=1, default=str)
    with training_run(cfg.tracking, f"eval-{rollout}", PROJECT_ROOT, system_metrics=False,
                      tags={"medgym.stage": "evaluate", "medgym.rollout": rollout,
                            "medgym.baseline": baseline or ""}) as run:
        flat = flatten({k: report[k] for k in ("success", "verifier", "versus_baseline") if k in report})
        run.log_metrics({mlflow_key(k): float(v) for k, v in flat.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)})
        run.log_artifact(path)
    report["report_path"] = str(path)
    return report


@flow(name="leaderboard", log_prints=True)
def leaderboard_flow(config: str | PipelineConfig, rollouts: list[str], baseline: str | None = None,
                     verifier: str | None = None, name: str = "leaderboard", verifier_kind: str = "generative",
                     out: str | None = None, parents: dict[str, str] | None = None) -> dict[str, Any]:
    """Rank several rollouts of the profile on one leaderboard: success with 95% intervals, per domain, pass@k
    (and best@k with a verifier), turns, the outcome taxonomy, and each against `baseline` task by task.

    Writes leaderboard.md, leaderboard.json and the figures to reports/<profile>/<name>/ (or `out`), each file
    atomically, and logs the metrics and those files in one MLflow run named `name`. A baseline that is not among
    `rollouts` is read too and gets a row of its own. `parents` maps a rollout to the rollout of the model it was
    trained from (both among `rollouts`): its row adds that paired difference."""
    from components.evaluation.leaderboard import leaderboard
    from components.evaluation.plots import write_plots, write_series
    from components.tracking.training import training_run

    cfg = _config(config)
    names = list(dict.fromkeys([*rollouts, *([baseline] if baseline else [])]))  # in order, each once
    if not names:
        raise ValueError("leaderboard_flow needs at least one rollout")
    episodes = {n: stage_episodes(cfg, [n])[0] for n in names}
    scores = None
    if verifier:
        scorer = _verifier(cfg, verifier, verifier_kind)  # loaded once, scores every rollout
        scores = {n: scorer.score(_finished(eps)) for n, eps in episodes.items()}
    board = leaderboard(episodes, baseline=baseline, scores=scores, parents=parents)
    # how well the verifier separates each rollout's correct episodes from its incorrect ones (AUC, a bootstrap
    # interval over tasks), beside what ranking by it buys (best@k on the board)
    judged = {n: verifier_report(eps, scores[n]) for n, eps in episodes.items()} if scores else {}

    report_dir = Path(out) if out else PROJECT_ROOT / cfg.pipeline.reports_dir / cfg.profile / name
    md_path, json_path = report_dir / "leaderboard.md", report_dir / "leaderboard.json"
    markdown = board.to_markdown(title=f"Leaderboard: {name} ({cfg.profile})") + _verifier_markdown(verifier, judged)
    with atomic_write(md_path) as fh:
        fh.write(markdown)
    if judged:
        with atomic_write(report_dir / "verifier.json") as fh:
            json.dump({"model": verifier, "rollouts": judged}, fh, indent=1, default=str)
    with atomic_write(json_path) as fh:
        fh.write(board.to_json())
    plots = write_plots(board, report_dir)
    series = write_series(board, report_dir)
    print(markdown)
    publish_leaderboard(cfg.profile, name, board)

    tags = {"medgym.stage": "evaluate", "medgym.profile": cfg.profile, "medgym.rollouts": ",".join(names),
            "medgym.baseline": baseline or "", "medgym.verifier": verifier or ""}
    with training_run(cfg.tracking, f"{name}", PROJECT_ROOT, system_metrics=False, tags=tags) as run:
        run.log(metrics={mlflow_key(k): v for k, v in (board.metrics() | _verifier_metrics(judged)).items()})
        for path in (md_path, json_path, *series, *([report_dir / "verifier.json"] if judged else [])):
            run.log_artifact(path)
        for path in plots:
            run.log_artifact(path, artifact_path="plots")
        run_id = run.run_id

    rows: dict[str, Any] = {}
    for r in board.rows:
        vs = r.versus_baseline
        rows[r.rollout] = {
            "rank": r.rank,
            "success": r.success.value if r.success is not None else None,
            "interval": [r.success.low, r.success.high] if r.success is not None else None,
            "domains": {d: ({"success": e.value, "interval": [e.low, e.high]} if e is not None else None)
                        for d, e in r.domains.items()},
            "versus_baseline": {"difference": vs.difference.value, "interval": [vs.difference.low, vs.difference.high],
                                "tasks": vs.tasks} if vs is not None else None,
            "versus_parent": {"parent": r.parent, "difference": vp.difference.value,
                              "interval": [vp.difference.low, vp.difference.high], "tasks": vp.tasks}
            if (vp := r.versus_parent) is not None else None,
            "verifier": ({k: judged[r.rollout][k] for k in ("auc", "episodes", "auc_submitted", "submitted", "accuracy")}
                         if r.rollout in judged else None),
        }
    return {"report_dir": str(report_dir), "markdown": str(md_path), "json": str(json_path), "run_id": run_id,
            "baseline": baseline, "rows": rows, "plots": [str(p) for p in plots]}


def _verifier_metrics(judged: dict[str, dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for n, rep in judged.items():
        out[f"{n}.verifier.accuracy"] = rep["accuracy"]
        for key in ("auc", "auc_submitted"):
            if rep[key]:
                out |= {f"{n}.verifier.{key}": rep[key]["value"], f"{n}.verifier.{key}_low": rep[key]["low"],
                        f"{n}.verifier.{key}_high": rep[key]["high"]}
    return out


def _verifier_markdown(model: str | None, judged: dict[str, dict[str, Any]]) -> str:
    if not judged:
        return ""
    lines = ["", f"## Verifier ({model})", "",
             "How well its score separates each rollout's correct finished episodes from its incorrect ones: ROC AUC "
             "with a 95% bootstrap interval over tasks (n: tasks), over every finished episode and over those that "
             "submitted an answer only (a run that never submitted is an easy NO), and accuracy at 0.5.", "",
             "| rollout | episodes | correct | accuracy | AUC, all [95%] (n) | submitted | AUC, submitted [95%] (n) |",
             "| --- | ---: | ---: | ---: | --- | ---: | --- |"]

    def cell(auc: dict[str, Any] | None) -> str:
        return f"{auc['value']:.3f} [{auc['low']:.3f}, {auc['high']:.3f}] ({auc['n']})" if auc else "undefined (one class)"

    for n, rep in judged.items():
        lines.append(f"| {n} | {rep['episodes']} | {rep['correct']} | {rep['accuracy']:.3f} | {cell(rep['auc'])} | "
                     f"{rep['submitted']} | {cell(rep['auc_submitted'])} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ eval compare


def _evaluation_of(source: str, metric: str, tasks_file: Callable[[], Path], tracking_uri: Callable[[], str]
                   ) -> Evaluation:
    """A rollout folder's or a registered version's evaluation; `tasks_file` and `tracking_uri` are asked only
    when one is needed."""
    from components.registry import read_evaluation, registered_version, rollout_evaluation

    if source.startswith("models:/"):
        from mlflow.tracking import MlflowClient

        uri = tracking_uri()
        evaluation = read_evaluation(registered_version(MlflowClient(tracking_uri=uri), source), uri)
        if evaluation is None:
            raise LookupError(f"{source} was registered without a per-task evaluation: nothing to compare")
        if evaluation.metric != metric:
            raise ValueError(f"{source} was evaluated on {evaluation.metric}, not {metric}: pass --metric "
                             f"{evaluation.metric}")
        return evaluation
    folder = Path(source)
    if not (folder / EPISODES).is_dir():
        raise FileNotFoundError(f"{source}: neither a rollout folder (no {EPISODES}/ in it) nor a registered version "
                                "(models:/<name>/<version>, models:/<name>@<alias>)")
    if metric != DEFAULT_METRIC:
        raise ValueError(f"{source}: a rollout folder is scored on {DEFAULT_METRIC} per task; --metric {metric} "
                         "needs registered versions evaluated on it")
    return rollout_evaluation(load_episodes_dir(folder).episodes, tasks_file(), reference=str(folder))


def compare_evaluations(candidate: str, reference: str, config: str | PipelineConfig = "demo",
                        metric: str = DEFAULT_METRIC, tasks: Path | None = None, look: int = 1
                        ) -> tuple[Comparison | None, str]:
    """candidate − reference by the registry's own rule (components.registry.decision.decide): paired on the tasks
    both hold with equal content, under equal conditions, tested at look `look` with the profile's registry
    settings. Each side is a rollout folder (its tasks read from `tasks`, by default the profile's suite) or a
    registered version (`models:/<name>/<version>`, `models:/<name>@<alias>`, in the profile's tracking store)."""
    from components.registry import decide
    from components.tracking.tracker import MlflowTracker

    if look < 1:
        raise ValueError(f"look counts from 1, got {look}")
    cfg = _config(config)
    evaluations = [_evaluation_of(s, metric, lambda: tasks or PROJECT_ROOT / cfg.data.out_dir / "tasks.jsonl",
                                  lambda: MlflowTracker(cfg.tracking, PROJECT_ROOT).uri)
                   for s in (candidate, reference)]
    return decide(*evaluations, "reference", cfg.registry, prior_looks=lambda paired: look - 1)


def comparison_lines(candidate: str, reference: str, comparison: Comparison | None, reason: str) -> list[str]:
    """What `medgym eval compare` prints: the figures one per line, then the whole reason."""
    lines = [f"candidate: {candidate}", f"reference: {reference}"]
    if comparison is None:
        return [*lines, f"verdict: not compared: {reason}"]
    t = comparison.test
    left_out = f", {comparison.content_differs} shared ids holding different tasks" if comparison.content_differs else ""
    verdict = "promote" if t.promote else "do not promote: " + "; ".join(t.reasons_against())
    return [*lines,
            f"paired tasks: {t.n_tasks} ({comparison.candidate_only} candidate-only, {comparison.reference_only} "
            f"reference-only{left_out})",
            f"difference ({t.metric}): {t.difference:+.4f}, 95% CI [{t.low:+.4f}, {t.high:+.4f}]",
            f"test: {t.test}, one-sided p = {t.p_value:.4g}; alpha {t.nominal_alpha:g} spent to {t.alpha:.4g} at "
            f"look {t.look}",
            f"discordant: {t.wins} wins, {t.losses} losses ({t.ties} ties)",
            f"verdict: {verdict}", f"reason: {reason}"]
