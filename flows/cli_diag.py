"""`medgym diag build|import|validate|fidelity|eval`: DiagGym's patient cases, as thin calls into flows/diag and components."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(help="DiagGym: patient cases for the diagnostic environment.", no_args_is_help=True)
console = Console(stderr=True)


@app.command("build")
def build(
    out: Annotated[Path, typer.Option(help="output folder: cases.jsonl, cohort.json, validation.json")],
    seed: Annotated[int, typer.Option(help="the cohort is a pure function of the seed")] = 0,
    patients: Annotated[int, typer.Option(min=1, help="patients (about 15% have a second admission)")] = 200,
    test_fraction: Annotated[float, typer.Option(min=0.0, max=1.0, help="share of patients in the test split")] = 0.2,
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml (tracking)")] = "demo",
) -> None:
    """Generate a synthetic cohort: disease-conditioned exam results, profiles, time-ordered events, key exams."""
    from flows.diag import build_cohort_flow
    from flows.runtime import prefect_api

    with prefect_api():
        result = build_cohort_flow(out_dir=out, seed=seed, patients=patients, test_fraction=test_fraction,
                                   profile=profile)
    print(json.dumps(result, indent=2))


@app.command("import")
def import_(
    src: Annotated[Path, typer.Argument(help="a DiagGym-format JSON file (an object keyed by note id) or a folder of them")],
    out: Annotated[Path, typer.Option(help="output folder: cases.jsonl, import_report.json, validation.json")],
    seed: Annotated[int, typer.Option(help="seeds the split by patient")] = 0,
    test_fraction: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.2,
    strict: Annotated[bool, typer.Option(help="stop at the first malformed record")] = False,
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml (tracking)")] = "demo",
) -> None:
    """Import DiagGym-format records; malformed records are reported with file, record and field."""
    from flows.diag import import_flow
    from flows.runtime import prefect_api

    with prefect_api():
        report = import_flow(src=src, out_dir=out, seed=seed, test_fraction=test_fraction, strict=strict,
                             profile=profile)
    table = Table("records", "imported", "malformed", "diagnoses in catalogue", "events in catalogue")
    table.add_row(str(report.records), str(report.imported), str(len(report.malformed)),
                  f"{report.diagnoses_matched}/{report.imported}", f"{report.events_matched}/{report.events}")
    Console().print(table)
    for msg in report.malformed[:10]:
        console.print(f"[yellow]malformed[/] {escape(msg)}", highlight=False)
    console.print(f"{report.imported} cases written to {out / 'cases.jsonl'}")


@app.command("fidelity")
def fidelity(
    cases: Annotated[Path, typer.Option(help="cases.jsonl whose test split is held out")],
    out: Annotated[Path, typer.Option(help="output folder: card.md, card.json")],
    train: Annotated[Path | None, typer.Option(help="cases.jsonl whose train split fits the statistical model "
                                                    "(default: the --cases file)")] = None,
    seed: Annotated[int, typer.Option(help="the statistical model's and the draws' seed")] = 0,
    min_values: Annotated[int, typer.Option(min=2, help="values an analyte needs on both sides to be scored")] = 10,
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml (tracking)")] = "demo",
) -> None:
    """The world-model card: the statistical world model (fit on the train split) against the recorded oracle on
    the test split: lab Wasserstein distance and variance ratio, report diversity, contradiction rate."""
    from flows.diag import fidelity_flow
    from flows.runtime import prefect_api

    with prefect_api():
        result = fidelity_flow(cases=cases, out_dir=out, train=train, seed=seed, min_values=min_values,
                               profile=profile)
    print(Path(result["card"]).read_text(encoding="utf-8"))
    console.print(f"card written to {escape(result['card'])} and card.json beside it")


@app.command("validate")
def validate(cases: Annotated[Path, typer.Option(help="cases.jsonl")]) -> None:
    """Run the Great Expectations suite on a case file."""
    from components.diag.validation import validate_cases

    report = validate_cases(cases)
    print(report.model_dump_json(indent=2))
    raise typer.Exit(0 if report.success else 1)


@app.command("eval")
def eval_(
    cases: Annotated[Path, typer.Option(help="cases.jsonl: the baselines are fit on its train split")],
    out: Annotated[Path, typer.Option(help="output folder: report.md, report.json, episodes/<agent>.jsonl")],
    agents: Annotated[str, typer.Option(help="comma-separated baselines (random, greedy); later ones are compared "
                                             "with the first")] = "random,greedy",
    split: Annotated[str, typer.Option(help="the held-out split evaluated")] = "test",
    world: Annotated[str, typer.Option(help="statistical, or recorded (the cases' own results)")] = "statistical",
    limit: Annotated[int | None, typer.Option(min=1, help="evaluate the first N held-out cases")] = None,
    samples: Annotated[int, typer.Option(min=1, help="episodes per case")] = 1,
    single_turn: Annotated[int, typer.Option(min=0, help="cases for single-turn evaluation (0: none)")] = 50,
    seed: Annotated[int, typer.Option(help="seeds the world model's draws, the agents and the bootstrap")] = 0,
    profile: Annotated[str, typer.Option(help="configs/<profile>.yaml (tracking)")] = "demo",
) -> None:
    """Diagnostic agents end to end (accuracy, turns, exam precision/recall/F1 with 95% intervals, paired
    differences) and single turn (next-exam hit ratio, diagnosis accuracy) on held-out cases."""
    from flows.diag import eval_flow
    from flows.runtime import prefect_api

    names = [a.strip() for a in agents.split(",") if a.strip()]
    with prefect_api():
        result = eval_flow(cases=cases, out_dir=out, agents=names, split=split, world=world, limit=limit,
                           samples=samples, single_turn_cases=single_turn, seed=seed, profile=profile)
    print(Path(result["report"]).read_text(encoding="utf-8"))
    console.print(f"report written to {escape(result['report'])}")
