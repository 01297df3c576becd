"""DiagGym's pipeline stages as Prefect flows, one per stage kind of a `diag` profile (components/pipeline/kinds/diag.py):
cohort, world, cold_start, grpo, evaluate, register. flows/pipeline.py chains them like the coding pipeline's
stages (keys, caching, resume, the parent MLflow run) through the runners at the end of this module, which the kinds
name; each returns its headline figures, flat.

The agents train and play in one statistical world: the world stage fits it on the cohort's train split and saves
it (`<models_dir>/world/statistical.json`, seeded by `world.seed`); cold_start, grpo, evaluate and register load
that file and record its content hash. Choices are read off the valid split: evaluate plays every agent there, and
plays the cold start and GRPO once more on the test split for the registration, which pairs them there. The LM
world model is trained, carded beside it and registered (components/profile/diag.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import Flow, flow

from components.common.io import atomic_write
from components.common.paths import PROJECT_ROOT
from components.diag.evaluate import DiagReport, agent_episodes_dir, build_report, run_agent, single_turn, write_evaluation
from components.diag.fidelity import evaluate_fidelity, load_card, write_card
from components.diag.metrics import CaseOutcome, outcome_of
from components.diag.plots import write_plots
from components.diag.record import SPLITS, Case, load_cases
from components.diag.world import RecordedWorldModel, StatisticalWorldModel
from components.envs.episode import Episode
from components.pipeline.dvc import dvc_file, metrics_path
from components.pipeline.kinds.diag import diag_paths
from components.pipeline.provenance import dvc_versions
from components.profile.config import PipelineConfig
from components.profile.diag import DiagSettings
from components.registry import Evaluation, as_conditions, case_hashes, register
from components.rollout.store import load_episodes_dir
from components.tracking.tracker import flatten, mlflow_key
from components.tracking.training import MlflowStepLogger, training_run
from components.training.trainers import MERGED
from flows.artifacts import publish_decision
from flows.diag import build_cohort_stage, track_card, track_stage
from flows.runtime import say

if TYPE_CHECKING:
    from components.pipeline.plan import Plan, Stage
    from components.policies.engines import VLLMServers

WORLD_FILE = "statistical.json"  # in the world stage's folder: the one world every later stage loads
TEST = "test"  # evaluate's folder for the test split's episodes and report
# the comparisons the report makes, a - b, where both agents played
COMPARISONS = (("grpo", "cold_start"), ("cold_start", "untrained"), ("grpo", "untrained"), ("greedy", "random"),
               ("grpo", "greedy"))
REGISTERED = ("grpo", "cold_start")  # the candidate and its baseline: the agents played on test


def _settings(cfg: PipelineConfig) -> DiagSettings:
    if cfg.diag is None:
        raise ValueError(f"profile {cfg.profile} has no `diag` section")
    return cfg.diag


def _cases(cfg: PipelineConfig) -> tuple[Path, dict[str, list[Case]]]:
    """cases.jsonl and its cases by split: train, valid and test, none empty."""
    path = PROJECT_ROOT / diag_paths(cfg)["cohort"] / "cases.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: no cases; run the cohort stage first")
    splits: dict[str, list[Case]] = {s: [] for s in SPLITS}
    for case in load_cases(path):
        splits.setdefault(case.split, []).append(case)
    empty = [s for s in SPLITS if not splits[s]]
    if empty:
        raise ValueError(f"{path}: no {' or '.join(empty)} cases; the pipeline needs train, valid and test "
                         "(diag.cohort.test_fraction, valid_fraction)")
    return path, splits


def _world_path(cfg: PipelineConfig) -> Path:
    return PROJECT_ROOT / diag_paths(cfg)["world"] / WORLD_FILE


def _world(cfg: PipelineConfig) -> tuple[StatisticalWorldModel, str]:
    """The world the world stage fitted and saved, and the content hash each stage records beside its figures."""
    path = _world_path(cfg)
    if not path.is_file():
        raise ValueError(f"{path}: no fitted world model; run the world stage first")
    return StatisticalWorldModel.load(path), _file_digest(path)


def _shown(path: Path) -> str:
    """A path as a report shows it: relative to the project where it lies inside it."""
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@flow(name="diag-cohort", log_prints=True)
def cohort_flow(config: PipelineConfig) -> dict[str, Any]:
    d = _settings(config)
    out = build_cohort_stage(config, PROJECT_ROOT / diag_paths(config)["cohort"], d.cohort)
    return {k: v for k, v in out.items() if k in ("cases", "patients", "diseases", "events", "best_constant_share")}


@flow(name="diag-world", log_prints=True)
def world_flow(config: PipelineConfig) -> dict[str, Any]:
    """The world-model card on held-out patients: the recorded results (the reference), the statistical model fit
    on the train split, and, where enabled, the LM world model fine-tuned on the train split's results."""
    from components.diag.lm_world import LMWorldModel, train_world_model

    d, paths = _settings(config), diag_paths(config)
    w = d.world
    _, splits = _cases(config)
    train, test = splits["train"], splits["test"]
    card_cases = test[:w.lm.card_cases] if w.lm.enabled else test
    world_dir = PROJECT_ROOT / paths["world"]
    world_dir.mkdir(parents=True, exist_ok=True)
    statistical = StatisticalWorldModel.fit(train, seed=w.seed)
    digest = _file_digest(statistical.save(_world_path(config)))
    say(f"[world] statistical world fitted on {len(train)} train cases, saved: {digest[:16]}")
    models: list[Any] = [RecordedWorldModel(), statistical]
    out: dict[str, Any] = {"world": digest}
    if w.lm.enabled:
        with training_run(config.tracking, "diag-world-lm", PROJECT_ROOT,
                          tags={"medgym.stage": "diag.world", "medgym.profile": config.profile}) as run:
            run.log_params(flatten(w.lm.model_dump(mode="json")) | {"base_model": d.base_model})
            trained = train_world_model(train[:w.lm.train_cases], d.base_model, world_dir, w.lm.sft,
                                        condition_on_diagnosis=w.lm.condition_on_diagnosis,
                                        callbacks=[MlflowStepLogger(run.tracking_uri, run.run_id)],
                                        distributed=config.training.distributed)
            r = trained.result
            run.log_metrics({"rows": trained.data["rows"], "global_step": r.global_step,
                             "train_tokens": r.tokens, "tokens_per_s": r.tokens_per_s,
                             **({"train_loss": r.train_loss} if r.train_loss is not None else {})})
        say(f"[world] LM world model trained: {r.global_step} steps, loss {r.train_loss}")
        out |= {"lm_train_loss": r.train_loss, "lm_global_step": r.global_step}
        models.append(LMWorldModel.from_checkpoint(trained.model_dir, options={"dtype": d.dtype},
                                                   max_new_tokens=w.lm.max_new_tokens, seed=w.seed))
    try:
        reports = [evaluate_fidelity(m, card_cases, seed=w.seed, min_values=w.min_values) for m in models]
    finally:
        for m in models:
            close = getattr(m, "close", None)
            if close is not None:
                close()
    md, js = write_card(reports, PROJECT_ROOT / paths["card"])
    track_card(config, reports, {"cases": len(card_cases), "train_cases": len(train), "seed": w.seed,
                                 "min_values": w.min_values, "lm": w.lm.enabled, "world": digest}, [md, js])
    for report in reports:
        figures = report.metrics()
        out |= {f"{report.model}.{k}": round(figures[k], 4)
                for k in ("wasserstein_mean", "variance_ratio_mean", "contradiction_rate") if k in figures}
    return {"card_cases": len(card_cases), **out}


@flow(name="diag-cold-start", log_prints=True)
def cold_start_flow(config: PipelineConfig) -> dict[str, Any]:
    from components.rl.cold_start import cold_start

    d, paths = _settings(config), diag_paths(config)
    _, splits = _cases(config)
    cases = splits["train"][:d.cold_start.train_cases]
    world, digest = _world(config)
    with training_run(config.tracking, "diag-cold-start", PROJECT_ROOT,
                      tags={"medgym.stage": "diag.cold_start", "medgym.profile": config.profile}) as run:
        run.log_params(flatten(d.cold_start.model_dump(mode="json")) | {"base_model": d.base_model,
                                                                         "cases": len(cases), "world": digest})
        done = cold_start(cases, world, d.base_model, PROJECT_ROOT / paths["cold_start"], d.cold_start.sft, d.env,
                          callbacks=[MlflowStepLogger(run.tracking_uri, run.run_id)],
                          episodes_per_case=d.cold_start.episodes_per_case, distributed=config.training.distributed)
        r = done.result
        run.log_metrics({"oracle_episodes": done.episodes, "rows": done.correct, "global_step": r.global_step,
                         "train_tokens": r.tokens, "tokens_per_s": r.tokens_per_s,
                         **({"train_loss": r.train_loss} if r.train_loss is not None else {})})
    return {"episodes": done.episodes, "rows": done.correct, "train_loss": r.train_loss,
            "global_step": r.global_step, "train_runtime_s": round(r.runtime_s, 1), "world": digest}


@flow(name="diag-grpo", log_prints=True)
def grpo_flow(config: PipelineConfig) -> dict[str, Any]:
    from components.rl.grpo import load_grpo_episodes
    from components.rl.grpo_launch import launch_grpo

    d, paths = _settings(config), diag_paths(config)
    _, splits = _cases(config)
    cases, s = splits["train"][:d.grpo.train_cases], d.grpo.settings
    world, digest = _world(config)
    with training_run(config.tracking, "diag-grpo", PROJECT_ROOT,
                      tags={"medgym.stage": "diag.grpo", "medgym.profile": config.profile}) as run:
        run.log_params(flatten(s.model_dump(mode="json")) | {"cases": len(cases), "world": digest})
        done = launch_grpo(cases, world, str(PROJECT_ROOT / paths["cold_start"] / MERGED), PROJECT_ROOT / paths["grpo"],
                           s, d.env, distributed=config.training.distributed,
                           callbacks=[MlflowStepLogger(run.tracking_uri, run.run_id)],
                           tracking=(run.tracking_uri, run.run_id))
        episodes = load_grpo_episodes(done.out_dir)
        agent_tokens = sum(e.completion_tokens or 0 for e in episodes)
        rewards = [h["reward"] for h in done.log_history if "reward" in h]
        figures = {"global_step": done.global_step, "episodes": len(episodes), "runtime_s": round(done.runtime_s, 1),
                   "agent_tokens_per_s": round(agent_tokens / max(done.runtime_s, 1e-9), 2)}
        if rewards:
            k = max(1, len(rewards) // 4)  # the first and last quarter of the run
            figures |= {"reward_first": sum(rewards[:k]) / k, "reward_last": sum(rewards[-k:]) / k}
        run.log_metrics(figures)
    return {**figures, "world": digest}


def _play_models(cfg: PipelineConfig, held: list[Case], world: StatisticalWorldModel, out: Path,
                 names: tuple[str, ...] = ("untrained", "cold_start", "grpo")) -> dict[str, list[Episode]]:
    """Each model's episodes, played into its EpisodeStore folder under `out` (a killed evaluation resumes)."""
    from components.rl.multiturn import TurnSampling
    from components.rl.play import play_model

    d, paths = _settings(cfg), diag_paths(cfg)
    e = d.evaluate
    checkpoints = {"untrained": d.base_model, "cold_start": str(PROJECT_ROOT / paths["cold_start"] / MERGED),
                   "grpo": str(PROJECT_ROOT / paths["grpo"] / MERGED)}
    models = [(n, checkpoints[n]) for n in names if n != "untrained" or e.untrained]
    sampling = TurnSampling(temperature=e.temperature, max_new_tokens=e.max_new_tokens,
                            max_context=d.grpo.settings.max_context)
    return {name: play_model(model, held, world, d.env, sampling, samples=e.samples, batch=e.batch, seed=e.seed,
                             dtype=d.dtype, name=name, out_dir=agent_episodes_dir(out, name), backend=e.policy,
                             policy_options=e.policy_options,
                             progress=lambda m: say(f"[evaluate] {m}"))
            for name, model in models}


def _headline(report: DiagReport) -> dict[str, float]:
    """A report's figures for DVC and the stage's result, under its split: each agent's accuracy, exam F1 and
    turns, each paired difference's accuracy and exam F1 with its interval."""
    out: dict[str, float] = {}
    for c in report.comparisons:
        for m in ("accuracy", "f1_mean"):
            i = c.differences[m]
            out |= {f"{c.a}-{c.b}.{m}": i.value, f"{c.a}-{c.b}.{m}_low": i.low, f"{c.a}-{c.b}.{m}_high": i.high}
    for a in report.agents:
        out |= {f"{a.agent}.{m}": a.metrics[m].value for m in ("accuracy", "f1_mean", "avg_turns")}
    return {f"{report.split}.{k}": v for k, v in out.items()}


@flow(name="diag-evaluate", log_prints=True)
def evaluate_flow(config: PipelineConfig) -> dict[str, Any]:
    """On the valid cases, the figures every choice is read off: baselines, the untrained model, the cold start and
    GRPO end to end on the same cases and draws, single turn for the baselines; report.md / report.json, PNGs and
    episodes under reports/<profile>/evaluation. Then the cold start and GRPO on the test cases, the registration's
    figures, under evaluation/test."""
    from components.diag.baselines import make_baselines

    d, paths = _settings(config), diag_paths(config)
    e = d.evaluate
    cases_path, splits = _cases(config)
    valid, test = splits["valid"][:e.cases], splits["test"][:e.cases]
    world, digest = _world(config)
    baselines = make_baselines(e.baselines, splits["train"], world, seed=e.seed)
    out = PROJECT_ROOT / paths["evaluate"]
    episodes = {a.name: run_agent(a, valid, world, d.env, e.samples, out_dir=agent_episodes_dir(out, a.name))
                for a in baselines}
    episodes |= _play_models(config, valid, world, out)
    singles = [single_turn(a, valid[:e.single_turn_cases], config=d.env, seed=e.seed) for a in baselines] \
        if e.single_turn_cases else []
    report = build_report(episodes, len(valid), world, d.env, samples=e.samples, singles=singles, seed=e.seed,
                          comparisons=[(a, b) for a, b in COMPARISONS if a in episodes and b in episodes],
                          cases_file=_shown(cases_path), split="valid")
    files = write_evaluation(report, episodes, out)
    figures = write_plots(report, out)
    tested = _play_models(config, test, world, out / TEST, REGISTERED)
    test_report = build_report(tested, len(test), world, d.env, samples=e.samples, seed=e.seed,
                               comparisons=[REGISTERED], cases_file=_shown(cases_path), split="test")
    test_files = write_evaluation(test_report, tested, out / TEST)
    metrics = {mlflow_key(k): v for r in (report, test_report) for k, v in r.metrics().items()}
    track_stage(config, "diag-evaluate", "diag.evaluate", {"cases": len(valid), "test_cases": len(test),
                                                      "samples": e.samples, "temperature": e.temperature,
                                                      "agents": ",".join(episodes), "world": digest},
           metrics, [*files[:2], *figures, *test_files[:2]])
    headline = _headline(report) | _headline(test_report)
    with atomic_write(PROJECT_ROOT / metrics_path(config)) as fh:  # DVC metrics
        json.dump(headline, fh, indent=1, sort_keys=True)
    return {"cases": len(valid), "test_cases": len(test), "report": _shown(files[1]),
            "test_report": _shown(test_files[1]), "world": digest, **headline}


# what a registration can pair two diagnostic agents on, per episode; a case scores the mean over its episodes
CASE_FIGURES: dict[str, Callable[[CaseOutcome], float]] = {"accuracy": lambda o: float(o.correct),
                                                          "exam_f1": lambda o: o.exams.f1}


def case_scores(episodes: list[Episode], metric: str) -> dict[str, float]:
    """Per case, the mean over its episodes of `metric`, one of CASE_FIGURES."""
    if metric not in CASE_FIGURES:
        raise ValueError(f"no per-case figure {metric!r}: one of {', '.join(CASE_FIGURES)}")
    by_case: dict[str, list[float]] = {}
    for ep in episodes:
        by_case.setdefault(ep.task_id, []).append(CASE_FIGURES[metric](outcome_of(ep)))
    return {c: sum(v) / len(v) for c, v in by_case.items()}


def _evaluation(scores: dict[str, float], hashes: dict[str, str], conditions: dict[str, Any], metric: str,
                reference: str, summary: dict[str, float] | None = None) -> Evaluation:
    """Per-case scores as a registry evaluation, with the content hash of each case scored."""
    return Evaluation(task_success=scores, task_hashes={c: hashes[c] for c in scores}, conditions=conditions,
                      metric=metric, reference=reference, scores=summary or {})


def _played_under(d: DiagSettings, world: str) -> dict[str, Any]:
    """What a diagnostic agent's test scores depend on besides the agent: the environment's settings, the world (the
    saved statistical world's content hash: its fit and its seed, which seeds the draws), samples per case and the
    models' sampling."""
    e = d.evaluate
    return {**as_conditions(d.env.model_dump(mode="json")), "samples": e.samples, "temperature": e.temperature,
            "max_new_tokens": e.max_new_tokens, "max_context": d.grpo.settings.max_context, "seed": e.seed,
            "split": "test", "world": world}


@flow(name="diag-register", log_prints=True)
def register_flow(config: PipelineConfig) -> dict[str, Any]:
    """The GRPO agent as `agent_registry` (champion only when the paired test on `register_on` per test case,
    diagnosis accuracy or exam F1, supports it against the cold start or the champion), and the LM world model as
    `world_registry` (against the statistical model, on each test case's share of results that do not contradict
    its diagnosis). Each evaluation records its cases' content hashes and the conditions it was played under, so
    that only the same cases under the same settings are ever paired. Only test figures are read here: the
    evaluate stage played the cold start and GRPO on the test cases for this alone."""
    d, paths = _settings(config), diag_paths(config)
    cases_path, splits = _cases(config)
    versions = dvc_versions(PROJECT_ROOT, dvc_file(config).with_name("dvc.lock"))
    versions["cases"] = _file_digest(cases_path)
    hashes = case_hashes(splits["test"])
    _, world_digest = _world(config)
    tested = PROJECT_ROOT / paths["evaluate"] / TEST
    played = {name: agent_episodes_dir(tested, name) for name in REGISTERED}
    grpo, cold = (load_episodes_dir(played[name], strict=True).episodes for name in REGISTERED)
    report = json.loads((tested / "report.json").read_text(encoding="utf-8"))
    summary = next(a for a in report["agents"] if a["agent"] == "grpo")
    conditions = _played_under(d, world_digest)
    candidate = _evaluation(case_scores(grpo, d.register_on), hashes, conditions, d.register_on,
                            str(played["grpo"]),
                            {m: summary["metrics"][m]["value"] for m in ("accuracy", "f1_mean", "avg_turns")})
    agent = register(config.registry.model_copy(update={"name": d.agent_registry}), config.tracking, candidate,
                     model_dir=PROJECT_ROOT / paths["grpo"] / MERGED,
                     baseline=_evaluation(case_scores(cold, d.register_on), hashes, conditions, d.register_on,
                                          str(played["cold_start"])),
                     data_versions=versions, project_root=PROJECT_ROOT)
    say(f"[register] {agent.name} v{agent.version} -> {agent.alias}: {agent.reason}")
    out: dict[str, Any] = {"alias": agent.alias, "version": agent.version, "promoted": agent.promoted,
                           "world": world_digest}
    decisions = [agent.model_dump(mode="json")]
    card = {r.model: r for r in load_card(PROJECT_ROOT / paths["card"] / "card.json")}
    lm_dir = PROJECT_ROOT / paths["world"] / MERGED
    if "lm" in card and lm_dir.is_dir() and card["lm"].case_consistency:
        lm, stat, w = card["lm"], card["statistical"], d.world
        # the card simulates each held-out case's exams once per world model, seeded by world.seed
        carded = {"seed": w.seed, "min_values": w.min_values, "max_new_tokens": w.lm.max_new_tokens,
                  "condition_on_diagnosis": w.lm.condition_on_diagnosis, "split": "test", "world": world_digest}
        card_path = str(paths["card"] / "card.json")
        world = register(config.registry.model_copy(update={"name": d.world_registry}), config.tracking,
                         _evaluation(lm.case_consistency, hashes, carded, "consistency", card_path,
                                     {k: v for k, v in lm.metrics().items() if k != "seconds"}),
                         model_dir=lm_dir, data_versions=versions, project_root=PROJECT_ROOT,
                         baseline=_evaluation(stat.case_consistency, hashes, carded, "consistency", card_path))
        say(f"[register] {world.name} v{world.version} -> {world.alias}: {world.reason}")
        out |= {"world_alias": world.alias, "world_version": world.version}
        decisions.append(world.model_dump(mode="json"))
    publish_decision(config.profile, decisions)
    return out


# ---------------------------------------------------------------------- the runners (flows/pipeline.py calls them)
def _runner(stage_flow: Flow[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A runner (plan, cfg, stage, engines) that runs the function behind `stage_flow` on the run's profile, inside
    the pipeline's task run for the stage (flows/pipeline.py): DiagGym's flows read nothing else."""
    def run(plan: Plan, cfg: PipelineConfig, stage: Stage, engines: VLLMServers | None = None) -> dict[str, Any]:
        return stage_flow.fn(config=cfg)
    return run


run_cohort, run_world, run_cold_start, run_grpo, run_evaluate, run_register = map(
    _runner, (cohort_flow, world_flow, cold_start_flow, grpo_flow, evaluate_flow, register_flow))
