"""The `medgym` command line: one entry point per stage, each a thin call into flows or components."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Column, Table
from typer.core import TyperGroup

import flows  # noqa: F401  (sets Prefect/MLflow state dirs and telemetry before they are imported)
from components.common.io import RecordError
from components.pipeline.plan import PlanError
from components.policies.protocol import PolicyRefusal
from components.training.data import EmptyDatasetError
from components.training.datasets import DatasetValidationError
from components.training.stage import RunConflictError

app = typer.Typer(help="MedGym: train LLM agents for medical work.", no_args_is_help=True)
data_app = typer.Typer(help="Build, import and validate task data.", no_args_is_help=True)
tasks_app = typer.Typer(help="Work with task files.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(tasks_app, name="tasks")
pipeline_app = typer.Typer(help="Run the whole pipeline.", no_args_is_help=True)
app.add_typer(pipeline_app, name="pipeline")
console = Console(stderr=True)


def _mount_sandbox() -> None:
    from flows.cli_sandbox import app as sandbox_app

    app.add_typer(sandbox_app, name="sandbox")


def _mount_training() -> None:
    from flows.cli_train import eval_command, train_app

    app.add_typer(train_app, name="train")
    eval_app.command("report")(eval_command)
    app.add_typer(eval_app, name="eval")


class _ReportByDefault(TyperGroup):
    """`medgym eval --rollout X` (options first, no subcommand) runs `eval report`, as it did before `eval compare`
    made `eval` a group."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0].startswith("-") and args[0] not in ctx.help_option_names:
            args = ["report", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(cls=_ReportByDefault, no_args_is_help=True,
                       help="Evaluate rollouts (`medgym eval --rollout NAME`: the report) or compare two evaluations.")


@eval_app.command("compare")
def eval_compare(
    candidate: Annotated[str, typer.Option(help="a rollout folder, or a registered version: models:/<name>/<version> "
                                                "or models:/<name>@<alias>")],
    reference: Annotated[str, typer.Option(help="what the candidate is compared with, of the same kinds")],
    metric: Annotated[str, typer.Option(help="the per-task figure compared (a rollout folder gives success)")] = "success",
    config: Annotated[str, typer.Option("--config", help="a profile YAML or name: its registry's test settings, its "
                                                         "MLflow store, its suite")] = "demo",
    tasks: Annotated[Path | None, typer.Option(help="the task file the rollout folders played (default: the "
                                                    "profile's suite)")] = None,
    look: Annotated[int, typer.Option(min=1, help="test as the k-th candidate compared with this reference on these "
                                                  "tasks (alpha spent as for the registry's k-th look)")] = 1,
) -> None:
    """candidate − reference by the registry's own rule: paired on the tasks both hold with the same content, under
    the same conditions, by the exact paired test; prints the difference, interval, p-value, discordant counts and
    the verdict."""
    from flows.evaluate import compare_evaluations, comparison_lines

    try:
        comparison, reason = compare_evaluations(candidate, reference, config=config, metric=metric, tasks=tasks,
                                                 look=look)
    except (ValueError, LookupError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print("\n".join(comparison_lines(candidate, reference, comparison, reason)))


def _mount_diag() -> None:
    from flows.cli_diag import app as diag_app

    app.add_typer(diag_app, name="diag")


def _mount_env() -> None:
    from flows.cli_env import app as env_app

    app.add_typer(env_app, name="env")


@pipeline_app.command("run")
def pipeline_run(
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml")] = "demo",
    only: Annotated[list[str] | None, typer.Option(help="run only this stage (repeatable); e.g. for a DVC stage")] = None,
    dry_run: Annotated[bool, typer.Option(help="print the plan (models, tasks, launch commands, cache) and stop")] = False,
    force: Annotated[bool, typer.Option(help="rerun the stages even where their key still holds")] = False,
) -> None:
    """The main job on one profile: data, rollouts, training, evaluation and registration, as far as the profile
    configures them; stages whose inputs, settings and code are unchanged are taken from the last run."""
    from components.pipeline.cost import CostError
    from components.pipeline.plan import PlanError
    from flows.pipeline import load_plan, pipeline_flow

    try:  # a profile that cannot be chained fails before a server starts
        load_plan(profile, only)
    except PlanError as exc:
        raise SystemExit(f"error: {exc}") from None
    if dry_run:  # no Prefect server for a plan
        try:
            result = pipeline_flow.fn(profile=profile, only=only, dry_run=True)
        except CostError as exc:
            raise SystemExit(f"error: {exc}") from None
        _print_plan(result)
        return
    from flows.runtime import prefect_api

    with prefect_api():  # the flow says its summary (flows.runtime.say): in its logs on the server and on stderr
        result = pipeline_flow(profile=profile, only=only, force=force)
    print(json.dumps(result, indent=2, default=str))


@pipeline_app.command("dvc")
def pipeline_dvc(
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml")] = "demo",
    check: Annotated[bool, typer.Option(help="exit 1 if dvc.yaml differs from the plan instead of writing it")] = False,
) -> None:
    """Write the profile's DVC pipeline from its plan: one DVC stage per pipeline stage (`--only <stage>`), to
    pipelines/<profile>/dvc.yaml (the demo's: the root dvc.yaml; `pipeline.dvc_file`)."""
    from components.common.io import atomic_write
    from components.common.paths import PROJECT_ROOT
    from components.pipeline.dvc import dvc_file, render
    from components.profile.config import CONFIG_DIR
    from flows.pipeline import load_plan

    path = Path(profile) if Path(profile).suffix else CONFIG_DIR / f"{profile}.yaml"
    plan = load_plan(profile)
    text = render(plan, path, PROJECT_ROOT)
    target = PROJECT_ROOT / dvc_file(plan.cfg)
    if check:
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            raise SystemExit(f"error: {target} is not what `medgym pipeline dvc --profile {profile}` writes; rerun it")
        console.print(f"{target} matches the plan of {profile}")
        return
    with atomic_write(target) as fh:
        fh.write(text)
    console.print(f"wrote {target}")


def _print_plan(result: dict) -> None:
    table = Table("stage", "kind", "cache", "what", "details", title=f"pipeline {result['profile']} (dry run)")
    skip = {"stage", "kind", "cache", "what", "needs"}
    for row in result["stages"]:
        details = "; ".join(f"{k}={v}" for k, v in row.items() if k not in skip and v is not None)
        table.add_row(row["stage"], row["kind"], row["cache"], row["what"], details)
    Console(width=200).print(table)
    print(json.dumps(result, indent=2, default=str))
    if "estimate" in result:
        _print_estimate(result["estimate"])


def _print_estimate(raw: dict) -> None:
    from components.pipeline.cost import Estimate

    est = Estimate.model_validate(raw)
    table = Table("stage", "GPU-hours", "wall h", "GPUs", "what", title="estimate (assumptions: "
                  "components/pipeline/cost_rates.yaml)")
    for s in est.stages:
        table.add_row(s.stage, f"{s.gpu_hours:,.1f}", f"{s.wall_hours:.2f}", str(s.gpus), s.note)
    Console(width=200).print(table)
    print(est.line())  # the last line: what a script or a reader takes away


@app.command("rollout")
def rollout(
    tasks: Annotated[Path, typer.Option(help="tasks.jsonl")],
    out: Annotated[Path, typer.Option(help="folder of episode shards; a rerun resumes it")],
    policy: Annotated[str | None, typer.Option(help="hf | vllm | openai | scripted (default: the collection's)")] = None,
    model: Annotated[str | None, typer.Option(help="checkpoint folder, embedded model name or API model")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint (openai; vllm: attach to a server)")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="name of the environment variable holding the API key")] = None,
    split: Annotated[str | None, typer.Option(help="only tasks of this split")] = None,
    limit: Annotated[int | None, typer.Option(help="at most N tasks, spread over categories")] = None,
    k: Annotated[int | None, typer.Option(help="episodes per task")] = None,
    workers: Annotated[int | None, typer.Option(help="environment steps at once (threads, or Ray actors)")] = None,
    max_in_flight: Annotated[int | None, typer.Option(help="episodes alive at once")] = None,
    max_turns: Annotated[int | None, typer.Option(help="actions per episode")] = None,
    ray_address: Annotated[str | None, typer.Option(help="'local' or a Ray cluster address")] = None,
    sandbox: Annotated[str | None, typer.Option(help="process | docker | auto")] = None,
    collection: Annotated[str | None, typer.Option(help="start from the profile's rollouts.<name>")] = None,
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml")] = "demo",
) -> None:
    """Collect K episodes per task with one policy into validated, resumable shards; tracked in MLflow."""
    from components.profile.config import load_config
    from flows.rollout import raise_if_all_refused, rollout_flow
    from flows.rollout_options import base_collection, collection_from_options, policy_from_options
    from flows.runtime import prefect_api

    cfg = load_config(profile)
    base = base_collection(cfg, collection)
    pol = policy_from_options(base.policy, policy, {"--model": model, "--base-url": base_url, "--api-key-env": api_key_env})
    config = collection_from_options(base, pol, {
        "--split": split, "--limit": limit, "--k": k, "--workers": workers, "--max-in-flight": max_in_flight,
        "--max-turns": max_turns, "--ray-address": ray_address, "--sandbox": sandbox})
    with prefect_api():
        result = rollout_flow(tasks=tasks, out_dir=out, config=config, profile=profile, name=collection or pol.backend)
    print(json.dumps(result, indent=2, default=str))
    raise_if_all_refused(result, pol.backend)


@data_app.command("build")
def data_build(
    suite: Annotated[str, typer.Option(help="demo | full")] = "demo",
    seed: Annotated[int | None, typer.Option(help="overrides the profile's seed")] = None,
    out: Annotated[Path | None, typer.Option(help="output folder (default: the profile's data.out_dir)")] = None,
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml")] = "demo",
) -> None:
    """Generate a suite of verifiable tasks; every answer is confirmed by running its reference code in the sandbox."""
    if suite not in ("demo", "full"):
        raise typer.BadParameter("--suite must be demo or full")
    from flows.data import build_suite_flow
    from flows.runtime import prefect_api

    with prefect_api():
        result = build_suite_flow(profile=profile, suite=suite, seed=seed, out_dir=out)
    print(json.dumps(result, indent=2))


@data_app.command("import-medagentgym")
def data_import(
    src: Annotated[Path, typer.Argument(help="folder laid out as the MedAgentGym release: <dataset>/<split>_tasks.jsonl")],
    out: Annotated[Path, typer.Option(help="output folder for tasks.jsonl and its files")],
    seed: int = 0,
    ehr_db: Annotated[list[str] | None, typer.Option(help="DATASET=PATH of a real database; keeps the release's answers")] = None,
    rollout_indices: Annotated[bool, typer.Option(
        "--rollout-indices", help="evaluate on the paper's subset: keep only the test rows SRC/rollout_indices.json lists")] = False,
    profile: str = "demo",
) -> None:
    """Import the public MedAgentGym task files; report what was imported and what was refused, and why.

    A dataset that ships valid_tasks.jsonl and no test file (MIMIC-III, eICU) is evaluated on its valid rows, as the
    release does: they become split `test`."""
    from components.tasks.importers.medagentgym import ROLLOUT_INDICES, read_rollout_indices
    from flows.data import import_flow

    databases = {}
    for item in ehr_db or []:
        name, _, path = item.partition("=")
        if not path:
            raise typer.BadParameter(f"--ehr-db expects DATASET=PATH, got {item!r}")
        databases[name] = Path(path)
    if rollout_indices:
        read_rollout_indices(src / ROLLOUT_INDICES)  # a bad subset file stops here, before any flow starts
    from flows.runtime import prefect_api

    with prefect_api():
        report = import_flow(src=src, out_dir=out, profile=profile, seed=seed, ehr_databases=databases,
                             rollout_indices=rollout_indices)
    # the file is a task id prefix people search for: never broken over lines
    table = Table(Column("file", no_wrap=True), "rows", "imported", "refused", "malformed", "why refused")
    for key, c in report.per_file.items():
        # the release file only where it is not the split's own (a valid file imported as the evaluation split)
        name = key if c.release_file in ("", f"{key}_tasks.jsonl") else f"{key} ← {c.release_file}"
        table.add_row(name, str(c.rows), str(c.imported), str(sum(c.refused.values())),
                      str(len(c.malformed)), "; ".join(f"{n}× {r}" for r, n in c.refused.most_common(2)))
    Console().print(table)
    for note in report.notes():
        print(note)
    for c in report.per_file.values():
        for msg in c.malformed[:5]:
            console.print(f"[yellow]malformed[/] {msg}")
    if report.ignored:
        console.print(f"ignored (not <split>_tasks.jsonl files): {', '.join(report.ignored)}")
    console.print(f"{report.imported} tasks written to {out / 'tasks.jsonl'}")


@tasks_app.command("validate")
def tasks_validate(tasks: Annotated[Path, typer.Option(help="tasks.jsonl")]) -> None:
    """Run the Great Expectations suite on a task file; per category, the best constant answer's acceptance and
    the answers' entropy."""
    from components.tasks.validation import validate_tasks

    report = validate_tasks(tasks)
    print(report.model_dump_json(indent=2))
    table = Table("category", "tasks", "distinct", "entropy (bits)", "best constant", "accepted", "bound")
    for s in report.answer_spread:
        table.add_row(s.category, str(s.tasks), str(s.distinct), f"{s.entropy_bits:.2f}",
                      json.dumps(s.best_constant, default=str)[:24], f"{s.best_share:.1%}",
                      f"{s.bound:.1%}" + ("" if s.within_bound else " [red]over[/]"))
    console.print(table)
    raise typer.Exit(0 if report.success else 1)


@tasks_app.command("score")
def tasks_score(
    tasks: Annotated[Path, typer.Option(help="tasks.jsonl")],
    answers: Annotated[Path, typer.Option(help='JSON lines of {"task_id", "answer"}')],
    out: Annotated[Path | None, typer.Option(help="verdicts (default: <answers>.scores.jsonl)")] = None,
    backend: Annotated[str, typer.Option(help="sandbox for code tasks: process | docker | auto")] = "auto",
) -> None:
    """Score answers: one line per task with task_id, correct, reason, then a summary."""
    from components.sandbox.warm import sandbox_supply
    from components.tasks.scoring import score_files

    out = out or answers.with_suffix(".scores.jsonl")
    # each code submission gets a fresh sandbox, started ahead so that scoring never waits for one
    with sandbox_supply(backend) as supply:  # type: ignore[arg-type]
        summary = score_files(tasks, answers, out, open_sandbox=supply)
    table = Table("group", "n", "correct", "accuracy")
    table.add_row("[b]all[/b]", str(summary.total.n), str(summary.total.correct), f"{summary.total.accuracy:.3f}")
    for name, g in summary.by_dataset.items():
        table.add_row(name, str(g.n), str(g.correct), f"{g.accuracy:.3f}")
    Console().print(table)
    console.print(f"{summary.answered} answers for {summary.total.n} tasks; verdicts in {out}")


@app.command("serve")
def serve(
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml; the deployment is medgym-pipeline/<profile>")] = "demo",
    cron: Annotated[str, typer.Option(help="when to retrain (cron; default weekly, Mondays 03:00)")] = "0 3 * * 1",
    timezone: Annotated[str, typer.Option(help="the cron's time zone (IANA)")] = "UTC",
    run_now: Annotated[bool, typer.Option(help="trigger one run now, wait for it and exit")] = False,
    api_url: Annotated[str | None, typer.Option(help="Prefect server API (default: PREFECT_API_URL)")] = None,
    work_pool: Annotated[str | None, typer.Option(help="the process work pool to register in, created if missing "
                                                       "(default: medgym-gpu for a profile that needs GPUs, else "
                                                       "medgym-process)")] = None,
    here: Annotated[bool, typer.Option("--here", help="serve the deployment from this process until stopped, "
                                                      "instead of registering it in a work pool")] = False,
    concurrency_limit: Annotated[int, typer.Option(help="the deployment's runs at once; a run due while the "
                                                        "limit is reached waits for a slot (0: no limit)")] = 1,
    limit: Annotated[int, typer.Option(help="runs this process executes at once (--here)")] = 1,
) -> None:
    """Scheduled retraining: the pipeline as a Prefect deployment on a cron schedule, registered in a work pool for
    `prefect worker start --pool <pool> --limit 1`, or served by this process until stopped (--here)."""
    from components.profile.config import load_config
    from flows.serve import ServeError, serve_pipeline, work_pool_for

    if here and work_pool:
        raise SystemExit("error: --here serves the deployment from this process; --work-pool registers it in a pool")
    pool = None if here else work_pool or work_pool_for(load_config(profile))
    try:
        result = serve_pipeline(profile, cron=cron, run_now=run_now, limit=limit, api_url=api_url,
                                work_pool=pool, timezone=timezone, concurrency_limit=concurrency_limit or None)
    except ServeError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps(result, indent=2, default=str))
    if run_now and result.get("state") != "COMPLETED":
        raise typer.Exit(1)


def main() -> None:
    _mount_sandbox()
    _mount_training()
    _mount_diag()
    _mount_env()
    try:
        app()
    except (RecordError, FileNotFoundError, PolicyRefusal, EmptyDatasetError, DatasetValidationError,
            RunConflictError, PlanError) as exc:
        sys.stderr.write(f"error: {exc}\n")  # plain text: a path must not be wrapped or styled
        raise SystemExit(2) from None

