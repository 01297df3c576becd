"""The main job: every stage of a profile chained in one Prefect flow, each stage a task run of it and its own MLflow
run.

The plan (components/pipeline/plan.py) says which stages a profile runs and in what order; the state
(components/pipeline/state.py) says which of them still hold from an earlier run. One parent MLflow run
`pipeline-<profile>` carries the profile as params, the git commit and the DVC versions, and every stage's run
nests under it. A stage is a task run of the pipeline's flow run, not a flow run of its own: its logs and
artifacts are on the one flow run the UI opens, and Prefect's cost is a task's (events sent in the background), not a
flow's (a blocking create and state calls for each). The stages call the plain functions behind the commands' flows
(`rollout_flow.fn`). A killed run resumes: stages done with the same key are skipped, the stage it was in continues
from its outputs (rollouts skip finished episodes, training resumes from its last checkpoint).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import time
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed

from components.common.io import atomic_write
from components.common.paths import PROJECT_ROOT
from components.pipeline.cost import estimate, suite_counts
from components.pipeline.describe import describe
from components.pipeline.dvc import dvc_file, dvc_session, metrics_path
from components.pipeline.figures import clear as clear_figures
from components.pipeline.figures import publish as publish_figures
from components.pipeline.kinds import kind_of
from components.pipeline.kinds.rollout import plays_on_shared_engine
from components.pipeline.paths import dataset_dir, merged_dir, stage_episodes
from components.pipeline.plan import Plan, PlanError, Stage, build_plan
from components.pipeline.provenance import config_params, dvc_versions, environment_tags, provenance_tags
from components.pipeline.state import PipelineState, clear_outputs, decide, forget_code, output_digests, stage_key
from components.policies.engines import VLLMServers
from components.policies.protocol import PolicyRefusal
from components.policies.vllm import VLLMPolicyConfig
from components.profile.config import PipelineConfig, load_config
from components.registry import Candidate, Selection, select, unselected, valid_figure
from components.tracking.tracker import MlflowTracker
from components.training.datasets import read_manifest
from flows.artifacts import publish_stage
from flows.checks import solvability_flow
from flows.data import build_suite_flow, import_flow
from flows.evaluate import leaderboard_flow
from flows.register import register_flow
from flows.rollout import raise_if_all_refused, rollout_flow
from flows.runtime import say
from flows.serve import needs_gpu
from flows.training import train_flow


def state_for(cfg: PipelineConfig) -> PipelineState:
    return PipelineState(PROJECT_ROOT / cfg.pipeline.state_dir / cfg.profile)


def load_plan(profile: str, only: list[str] | None = None) -> Plan:
    """The profile's plan; a profile that cannot be chained, or `only` naming no stage of it, raises here."""
    plan = build_plan(load_config(profile))
    unknown = sorted(set(only or ()) - set(plan.names))
    if unknown:
        raise PlanError(f"--only names {', '.join(unknown)}, not stages of profile {plan.cfg.profile} "
                        f"(it has: {', '.join(plan.names)})")
    return plan


# how a run says what it does with a stage that is not cached, while and after: (progress line, report status)
WORDS = {"resume": ("resuming", "resumed"), "extend": ("more steps asked: continuing from its last checkpoint",
                                                      "extended")}


@flow(name="medgym-pipeline", log_prints=True)
def pipeline_flow(profile: str = "demo", only: list[str] | None = None, dry_run: bool = False,
                  force: bool = False) -> dict[str, Any]:
    """Run the profile's stages (or `only` these), skipping those whose key still holds unless `force`."""
    # a profile's paths (data/, models/, a profile file given as a path) are the project root's; a Prefect process
    # worker starts each flow run in a temporary folder, where a stage resolving one would read and write elsewhere
    os.chdir(PROJECT_ROOT)
    forget_code()
    plan = load_plan(profile, only)
    state = state_for(plan.cfg)
    if dry_run:
        result = {"profile": plan.cfg.profile, "dry_run": True, "stages": describe(plan, state, PROJECT_ROOT)}
        if needs_gpu(plan.cfg) and plan.cfg.diag is None:  # GPU-hours of a CPU profile would mean nothing
            result["estimate"] = estimate(plan, suite_counts(plan, PROJECT_ROOT)).model_dump()
        return result
    started = time.time()
    keys: dict[str, str] = {}
    report: dict[str, Any] = {}
    # a killed or failed run is carried on under its parent run, so one run holds every stage of the pipeline
    params = config_params(plan.cfg) | dvc_versions(PROJECT_ROOT, dvc_file(plan.cfg).with_name("dvc.lock"))
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
    # `dvc repro` runs one stage per command: its stages join the parent run its first stage opened
    session = dvc_session() if only else None
    resume, stages = state.session_run(session) if session else (None, [])
    if not only:
        resume = state.interrupted_run(digest)
    stages = list(dict.fromkeys([*stages, *(only or plan.names)]))
    with MlflowTracker(plan.cfg.tracking, PROJECT_ROOT).run(f"pipeline-{plan.cfg.profile}", resume=resume) as parent:
        if not only:
            state.mark_run(parent.run_id, "running", digest)
        if session:
            state.mark_session_run(session, parent.run_id, stages)
        if resume:
            say(f"carrying on under the {'dvc repro' if session else 'interrupted pipeline'} run {resume}")
            # a run carried on keeps the params it opened with (MLflow refuses a second value): its profile is the
            # same (the digest; one reproduction), and its DVC versions are those its reproduction started from,
            # while DVC rewrites dvc.lock after each stage
            params = {}
        parent.log(params=params, tags={"medgym.stage": "pipeline", "medgym.profile": plan.cfg.profile,
                                        "medgym.stages": ",".join(stages), **provenance_tags(PROJECT_ROOT),
                                        **environment_tags(plan.cfg, PROJECT_ROOT),
                                        **({"medgym.dvc_session": session} if session else {})})
        tracked = plan.cfg.tracking.model_copy(update={"parent_run_id": parent.run_id})
        run_cfg = plan.cfg.model_copy(update={"tracking": tracked})
        with VLLMServers() as engines:
            _run_stages(plan, run_cfg, state, keys, report, only, force, parent, engines)
        total = round(time.time() - started, 1)
        # a scheduled run that found no new data, code or settings says so where its runs are browsed
        nothing_new = all(r["status"] == "cached" for r in report.values())
        # the engine's starts and how each checkpoint change was served: a restart costs a minute on a CPU
        parent.log(metrics={"pipeline.wall_s": total, "pipeline.engine_starts": engines.starts,
                            "pipeline.engine_reloads_inplace": engines.reloads.count("inplace"),
                            "pipeline.engine_reloads_restart": engines.reloads.count("restart")},
                   tags={"medgym.nothing_new": str(nothing_new).lower()})
        if nothing_new:
            say(f"nothing new: every stage of {plan.cfg.profile} holds for its data, code and settings ({total} s)")
        if not only:
            state.mark_run(parent.run_id, "done", digest)
    summary = {"profile": plan.cfg.profile, "run_id": parent.run_id, "wall_s": total, "nothing_new": nothing_new,
               "stages": report}
    say(format_summary(summary))  # in the flow run's logs, where the UI shows it
    return summary


# A runner runs one stage of its kind and returns the stage's headline figures (flat, JSON): what the state keeps and
# the parent run logs. Each kind names its own (StageKind.runner, components/pipeline/kinds/).
Runner = Callable[[Plan, PipelineConfig, Stage, VLLMServers | None], dict[str, Any]]


@cache
def runner(kind: str) -> Runner:
    """The function a kind of stage names as its runner."""
    module, _, name = kind_of(kind).runner.rpartition(".")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise ValueError(f"stage kind {kind!r} names runner {kind_of(kind).runner!r}, which is no function")
    return fn


@task(name="stage", cache_policy=NO_CACHE, log_prints=True)
def stage_task(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One stage (a runner bound to its stage) as a task run of the pipeline's flow run. The call is passed whole:
    Prefect walks a task's parameters for futures, and a plan and profile are large to walk."""
    return call()


def _retryable(task: Any, task_run: Any, state: Any) -> bool:
    """A policy that refuses every task fails the same way again: no retry (the state's data is the exception)."""
    return not isinstance(state.data, PolicyRefusal)


def _stage_task(stage: Stage) -> Any:
    """The stage's task: named for it, retried as its kind says."""
    return stage_task.with_options(name=stage.name, task_run_name=stage.name, retries=kind_of(stage.kind).retries,
                                   retry_delay_seconds=2, retry_condition_fn=_retryable)


def run_as_task(stage: Stage, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`call` (the stage's runner, bound) as the stage's task run."""
    return _stage_task(stage)(call)


def submit_as_task(stage: Stage, call: Callable[[], dict[str, Any]]) -> Any:
    """The same, started on the flow's task runner (threads): its future."""
    return _stage_task(stage).submit(call)


def _run_stages(plan: Plan, cfg: PipelineConfig, state: PipelineState, keys: dict[str, str], report: dict[str, Any],
                only: list[str] | None, force: bool, parent: Any, engines: VLLMServers) -> None:
    todo = [s.name for s in plan.stages if not only or s.name in only]
    runners = {s.name: runner(s.kind) for s in plan.stages if s.name in todo}  # a wrong name stops the run here
    if (ahead := engine_ahead(plan, cfg, state, todo, force)) is not None:
        engines.prestart(ahead)
    for wave in plan.waves(plan.names):
        # every stage's key, those `only` leaves out too: a later stage's key holds its upstream keys. Wave by wave,
        # once the waves before have run, never all up front: a collection playing a checkpoint named by folder
        # hashes that folder, which a training stage of an earlier wave writes
        for stage in wave:
            keys[stage.name] = stage_key(plan, stage, keys, PROJECT_ROOT)
        started = [(stage, *begun) for stage in wave if stage.name in todo
                   and (begun := _begin(plan, state, stage, keys, report, force, todo)) is not None]
        if len(started) == 1:
            stage, key, done, t0 = started[0]
            _end(plan, state, stage, key, done, t0, run_as_task(stage, _bound(runners, plan, cfg, stage, engines)),
                 report, parent)
        elif started:
            _run_side_by_side(plan, cfg, state, started, runners, report, parent, engines)


def engine_ahead(plan: Plan, cfg: PipelineConfig, state: PipelineState, todo: list[str],
                 force: bool) -> VLLMPolicyConfig | None:
    """The engine settings of the first collection this run will play on its shared engine, where only stages that
    keep the engine up (StageKind.keeps_engine: the suite, other collections) come before it: started at once, the
    engine's start (mostly single-threaded imports) overlaps those stages instead of following them. None where
    another kind comes first (a training stage may take the engine's memory), or where every such collection still
    holds (a run with nothing new starts no engine)."""
    keys: dict[str, str] = {}
    for stage in plan.stages:
        keys[stage.name] = stage_key(plan, stage, keys, PROJECT_ROOT)
        if stage.name not in todo:
            continue
        kind = kind_of(stage.kind)
        if not kind.keeps_engine:
            return None
        if (kind.shared_engine(plan, stage) is not None
                and (force or decide(plan, state, stage, keys, PROJECT_ROOT) != "cached")):
            return cfg.collection(stage.name).policy.backend_config()  # type: ignore[return-value]
    return None


def _bound(runners: dict[str, Runner], plan: Plan, cfg: PipelineConfig, stage: Stage,
           engines: VLLMServers) -> Callable[[], dict[str, Any]]:
    return partial(runners[stage.name], plan, cfg, stage, engines)


def _begin(plan: Plan, state: PipelineState, stage: Stage, keys: dict[str, str], report: dict[str, Any], force: bool,
           todo: list[str]) -> tuple[str, str, float] | None:
    """Decide the stage: None where its key still holds (reported as cached), else (key, what the report will
    say it did, its start time), its stale outputs cleared and its start recorded."""
    key = keys[stage.name]
    decision = "stale" if force else decide(plan, state, stage, keys, PROJECT_ROOT)
    if decision == "cached":
        record = state.read(stage.name)
        report[stage.name] = {"status": "cached", "wall_s": 0.0, **(record.result if record else {})}
        publish_figures(plan, stage, PROJECT_ROOT)  # `dvc repro` of a cached stage commits them as its outs
        say(f"[{stage.name}] cached (key {key[:12]})")
        return None
    if decision in ("stale", "replaced"):
        removed = clear_outputs(stage.outputs, PROJECT_ROOT)
        clear_figures(plan, stage, PROJECT_ROOT)
        why = "inputs changed" if decision == "stale" else "its outputs are not those it wrote"
        if removed:
            say(f"[{stage.name}] {why}: cleared {', '.join(map(str, removed))}")
    doing, done = WORDS.get(decision, ("running", "ran"))
    previous = state.read(stage.name)  # the stage's own bar gives its ETA; its last wall time says it first
    last = f", {previous.wall_s:.0f} s last time" if previous and previous.wall_s else ""
    say(f"[{stage.name}] {doing} (stage {todo.index(stage.name) + 1} of {len(todo)}{last})")
    state.start(stage.name, key)
    return key, done, time.time()


def _end(plan: Plan, state: PipelineState, stage: Stage, key: str, done: str, t0: float, result: dict[str, Any],
         report: dict[str, Any], parent: Any) -> None:
    """Record a stage that ran: its state, the run's report, the parent run's metrics, the UI's artifact."""
    publish_figures(plan, stage, PROJECT_ROOT)
    record = state.finish(stage.name, key, t0, result, output_digests(plan, stage, PROJECT_ROOT))
    report[stage.name] = {"status": done, "wall_s": record.wall_s, **result}
    say(f"[{stage.name}] {done} in {record.wall_s:.1f} s" + (f": {figures}" if (figures := headline(result)) else ""))
    publish_stage(plan.cfg.profile, stage.name, done, record.wall_s, result)
    parent.log_metrics({f"{stage.name}.wall_s": record.wall_s,
                        **{f"{stage.name}.{k}": float(v) for k, v in result.items()
                           if isinstance(v, (int, float)) and not isinstance(v, bool)}})


def _run_side_by_side(plan: Plan, cfg: PipelineConfig, state: PipelineState,
                      started: list[tuple[Stage, str, str, float]], runners: dict[str, Runner],
                      report: dict[str, Any], parent: Any, engines: VLLMServers) -> None:
    """A wave's stages as task runs at once (Prefect's thread pool), each recorded as it ends. A failed one fails
    the run after the others have ended and been recorded: their work is kept for the next run."""
    futures = {submit_as_task(stage, _bound(runners, plan, cfg, stage, engines)): (stage, key, done, t0)
               for stage, key, done, t0 in started}
    failed: list[BaseException] = []
    for future in as_completed(list(futures)):
        stage, key, done, t0 = futures[future]
        try:
            result = future.result()
        except BaseException as exc:  # noqa: BLE001 (every other stage of the wave still ends and is recorded)
            say(f"[{stage.name}] failed: {type(exc).__name__}: {exc}")
            failed.append(exc)
            continue
        _end(plan, state, stage, key, done, t0, result, report, parent)
    if failed:
        raise failed[0]


# ---------------------------------------------------------------------- the coding pipeline's runners
def _tasks_path(cfg: PipelineConfig) -> Path:
    return PROJECT_ROOT / cfg.data.out_dir / "tasks.jsonl"


def run_suite(plan: Plan, cfg: PipelineConfig, stage: Stage, engines: VLLMServers | None = None) -> dict[str, Any]:
    out = PROJECT_ROOT / cfg.data.out_dir
    if cfg.data.source == "medagentgym":
        if cfg.data.import_from is None:
            raise ValueError(f"profile {cfg.profile}: data.source medagentgym needs data.import_from")
        imported = import_flow.fn(src=cfg.data.import_from, out_dir=out, profile=cfg, seed=cfg.data.seed)
        return {"tasks": imported.imported, "source": "medagentgym"}
    built = build_suite_flow.fn(profile=cfg, suite=cfg.data.suite, out_dir=out)
    solvable = solvability_flow.fn(tasks_path=out / "tasks.jsonl", profile=cfg)
    return {"tasks": built["tasks"], "categories": built["categories"], "solvable_test": solvable["solved"],
            "source": "generate"}


def run_rollout(plan: Plan, cfg: PipelineConfig, stage: Stage, engines: VLLMServers | None = None) -> dict[str, Any]:
    config = cfg.collection(stage.name)
    # a vLLM policy plays on the run's one server, loaded with this collection's checkpoint (Ray's actors and
    # attached servers build their own)
    shared = engines is not None and plays_on_shared_engine(config)
    policy = engines.policy(config.policy.backend_config()) if shared else None  # type: ignore[union-attr,arg-type]
    try:
        result = rollout_flow.fn(tasks=_tasks_path(cfg), out_dir=PROJECT_ROOT / cfg.rollout_dir(stage.name),
                              config=config, profile=cfg, name=stage.name, policy=policy)
    finally:
        if policy is not None:
            policy.close()
    raise_if_all_refused(result, config.policy.backend)
    s = result["summary"]
    keep = ("episodes", "success", "turns_mean")
    return {k: v for k, v in s.items() if k in keep or k.startswith("success_domain/")}


def run_train(plan: Plan, cfg: PipelineConfig, stage: Stage, engines: VLLMServers | None = None) -> dict[str, Any]:
    assert stage.method is not None
    if engines is not None and cfg.pipeline.release_engine_for_training:
        engines.close()
    tcfg = plan.training_config(stage).model_copy(update={"tracking": cfg.tracking})
    # the registry logs the model it registers; logging every stage's merged copy too would double the disk
    out = train_flow.fn(config=tcfg, method=stage.method, stage=None if stage.name == stage.method else stage.name,
                     log_model=False)
    t = out["train"]
    return {"rows": (out["dataset"] or {}).get("rows"), "train_loss": t.get("train_loss"),
            "global_step": t.get("global_step"), "train_tokens": t.get("tokens"),
            "train_runtime_s": t.get("runtime_s"), "model_dir": t["model_dir"], "run_id": t["run_id"]}


def run_evaluate(plan: Plan, cfg: PipelineConfig, stage: Stage, engines: VLLMServers | None = None) -> dict[str, Any]:
    if engines is not None:  # scoring reads episodes, not the engine: the verifier's model gets its memory
        engines.close()
    verifier = merged_dir(cfg, "verifier") if "verifier" in plan.names else None
    board = leaderboard_flow.fn(config=cfg, rollouts=plan.evaluated(), baseline=plan.baseline(),
                             verifier=str(verifier) if verifier else None, name="leaderboard",
                             parents=plan.parents(plan.evaluated()))
    out: dict[str, Any] = {}
    for name, row in board["rows"].items():
        out[f"{name}.success"] = row["success"]
        vs = row.get("versus_baseline")
        if vs:
            out[f"{name}.difference"] = vs["difference"]
            out[f"{name}.difference_low"], out[f"{name}.difference_high"] = vs["interval"]
        out |= _versus_parent(name, row)
        for key in ("auc", "auc_submitted"):  # over every finished episode, and over those that submitted
            auc = (row.get("verifier") or {}).get(key)
            if auc:
                out |= {f"{name}.verifier_{key}": auc["value"], f"{name}.verifier_{key}_low": auc["low"],
                        f"{name}.verifier_{key}_high": auc["high"]}
    if plan.valid_rollouts():
        # a board of their own inside the leaderboard's folder: what choices are read off, never ranked with test
        valid = leaderboard_flow.fn(config=cfg, rollouts=plan.valid_rollouts(), name="leaderboard-valid",
                                 out=str(Path(board["report_dir"]) / "valid"), parents=plan.parents(plan.valid_rollouts()))
        for name, row in valid["rows"].items():
            out[f"{name}.success"] = row["success"]
            if row["interval"]:
                out[f"{name}.success_low"], out[f"{name}.success_high"] = row["interval"]
            out |= _versus_parent(name, row)
    # the headline figures as DVC metrics (`dvc metrics show`, `dvc exp show`)
    with atomic_write(PROJECT_ROOT / metrics_path(cfg)) as fh:
        json.dump(out, fh, indent=1, sort_keys=True)
    return {"report_dir": board["report_dir"], **out}


def _versus_parent(name: str, row: dict[str, Any]) -> dict[str, float]:
    """What a stage added to the model it started from (GRPO against SFT), as `metrics.json` keys."""
    vp = row.get("versus_parent")
    if not vp:
        return {}
    key = f"{name}.versus_{vp['parent']}"
    return {key: vp["difference"], f"{key}_low": vp["interval"][0], f"{key}_high": vp["interval"][1]}


def choose(plan: Plan, cfg: PipelineConfig) -> Selection:
    """The model to register: of the trained policies a valid rollout plays, the best on valid; without any, the
    last one trained (components.registry.selection)."""
    candidates = plan.on_valid()
    if not candidates:
        final = plan.final()
        assert final is not None  # build_plan refuses a register stage without one
        return unselected(final[0].name, final[1], plan.test_reads())
    scored = [Candidate(stage=p.stage.name, valid_rollout=p.valid, test_rollout=p.test,  # type: ignore[arg-type]
                        valid=valid_figure(p.valid, stage_episodes(cfg, [p.valid])[0]))  # type: ignore[list-item]
              for p in candidates]
    return select(scored, plan.test_reads(), [p.stage.name for p in plan.policies() if p.valid is None])


def run_register(plan: Plan, cfg: PipelineConfig, stage: Stage, engines: VLLMServers | None = None) -> dict[str, Any]:
    selection = choose(plan, cfg)
    trained = plan[selection.chosen]
    assert trained.method is not None
    versions = dvc_versions(PROJECT_ROOT)
    if trained.kind == "train":  # online GRPO plays its own episodes: it has no dataset to version
        versions[f"dataset.{trained.name}"] = read_manifest(dataset_dir(cfg, trained.method, trained.name)).content_hash
    decision = register_flow.fn(config=cfg, rollout=selection.test_rollout, baseline=plan.baseline(),
                             model_dir=str(PROJECT_ROOT / merged_dir(cfg, trained.method, trained.name)),
                             data_versions=versions, selection=selection)
    return {"alias": decision["alias"], "version": decision["version"], "promoted": decision["promoted"],
            "model_uri": decision["model_uri"], "chosen": selection.chosen, "chosen_on": selection.on or "none",
            "test_reads": selection.test_reads}


def headline(result: dict[str, Any]) -> str:
    """A stage's figures a person reads first, on one line."""
    return ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()
                     if k in ("tasks", "cases", "episodes", "success", "train_loss", "global_step", "alias",
                              "version", "world_alias", "chosen", "chosen_on") or k.endswith((".success", ".accuracy")))


def format_summary(summary: dict[str, Any]) -> str:
    lines = [f"pipeline {summary['profile']}: {summary['wall_s']:.0f} s (run {summary['run_id']})"]
    for name, r in summary["stages"].items():
        lines.append(f"  {name:<16} {r['status']:<8} {r['wall_s']:>8.1f} s  {headline(r)}")
    return "\n".join(lines)
