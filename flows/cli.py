"""The `medgym` command line: one entry point per stage, each a thin call into flows or components."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

import flows  # noqa: F401  (sets Prefect/MLflow state dirs and telemetry before they are imported)
from components.common.io import RecordError

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


@pipeline_app.command("run")
def pipeline_run(profile: Annotated[str, typer.Option(help="configs/<profile>.yaml")] = "demo") -> None:
    """The main job on one profile: build the data, then every later stage."""
    from flows.pipeline import pipeline_flow

    print(json.dumps(pipeline_flow(profile=profile), indent=2, default=str))


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

    result = build_suite_flow(profile=profile, suite=suite, seed=seed, out_dir=out)
    print(json.dumps(result, indent=2))


@data_app.command("import-medagentgym")
def data_import(
    src: Annotated[Path, typer.Argument(help="folder laid out as the MedAgentGym release: <dataset>/<split>_tasks.jsonl")],
    out: Annotated[Path, typer.Option(help="output folder for tasks.jsonl and its files")],
    seed: int = 0,
    ehr_db: Annotated[list[str] | None, typer.Option(help="DATASET=PATH of a real database; keeps the release's answers")] = None,
    profile: str = "demo",
) -> None:
    """Import the public MedAgentGym task files; report what was imported and what was refused, and why."""
    from flows.data import import_flow

    databases = {}
    for item in ehr_db or []:
        name, _, path = item.partition("=")
        if not path:
            raise typer.BadParameter(f"--ehr-db expects DATASET=PATH, got {item!r}")
        databases[name] = Path(path)
    report = import_flow(src=src, out_dir=out, profile=profile, seed=seed, ehr_databases=databases)
    table = Table("file", "rows", "imported", "refused", "malformed", "why refused")
    for key, c in report.per_file.items():
        table.add_row(key, str(c.rows), str(c.imported), str(sum(c.refused.values())), str(len(c.malformed)),
                      "; ".join(f"{n}× {r}" for r, n in c.refused.most_common(2)))
    Console().print(table)
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


def main() -> None:
    _mount_sandbox()
    try:
        app()
    except (RecordError, FileNotFoundError) as exc:
        sys.stderr.write(f"error: {exc}\n")  # plain text: a path must not be wrapped or styled
        raise SystemExit(2) from None

