"""DiagGym data flows: build the synthetic cohort, import DiagGym-format records, measure world models' fidelity,
evaluate diagnostic agents; validate and track each.

Each flow is a thin Prefect wrapper over a plain stage function (`build_cohort_stage`, `import_stage`,
`fidelity_stage`, `eval_stage`) that the pipeline and the tests call without an orchestrator.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from prefect import flow

from components.common.io import atomic_write
from components.common.paths import PROJECT_ROOT
from components.diag.baselines import make_baselines
from components.diag.cohort import CohortConfig, write_cohort
from components.diag.env import DiagEnvConfig
from components.diag.evaluate import evaluate_agents, write_evaluation
from components.diag.fidelity import MIN_VALUES, FidelityReport, evaluate_fidelity, write_card
from components.diag.importer import ImportOptions, ImportReport, import_diaggym
from components.diag.record import load_cases
from components.diag.validation import CaseValidationReport, validate_cases
from components.diag.world import RecordedWorldModel, StatisticalWorldModel
from components.profile.config import PipelineConfig, as_config
from components.tracking.tracker import MlflowTracker, mlflow_key


class CaseValidationError(ValueError):
    """A case file failed its Great Expectations suite."""


def validate_or_raise(path: Path) -> CaseValidationReport:
    """Validate a case file, keep the report beside it (validation.json) and raise if it failed."""
    report = validate_cases(path)
    with atomic_write(path.parent / "validation.json") as fh:
        fh.write(report.model_dump_json(indent=2))
    if not report.success:
        detail = "; ".join(f"{f.expectation}({f.column}): {f.unexpected[:3]}" for f in report.failures)
        raise CaseValidationError(f"{path} failed validation: {detail}")
    return report


def track_stage(cfg: PipelineConfig, name: str, stage: str, params: dict, metrics: dict, artifacts: list[Path]) -> None:
    tracker = MlflowTracker(cfg.tracking, PROJECT_ROOT)
    with tracker.run(name, tags={"medgym.stage": stage, "medgym.profile": cfg.profile}) as run:
        run.log(params=params, metrics=metrics)
        for path in artifacts:
            if path.is_file():
                run.log_artifact(path)


def build_cohort_stage(cfg: PipelineConfig, out_dir: Path, config: CohortConfig) -> dict:
    out = Path(out_dir)
    started = time.perf_counter()
    report = write_cohort(out, config)
    validation = validate_or_raise(out / "cases.jsonl")
    seconds = time.perf_counter() - started
    constant = max((c.best_share for c in validation.constant_diagnosis), default=0.0)
    track_stage(cfg, f"diag-cohort-seed{config.seed}", "diag.build", {**config.model_dump(), "out_dir": str(out)},
           {"cases": report.cases, "patients": report.patients, "events": report.events,
            "diseases": len(report.diseases), "best_constant_share": constant, "seconds": seconds,
            **{f"cases_{s}": n for s, n in report.splits.items()}},
           [out / "cohort.json", out / "validation.json"])
    return {"cases": report.cases, "patients": report.patients, "splits": report.splits,
            "diseases": len(report.diseases), "events": report.events, "best_constant_share": round(constant, 4),
            "seconds": round(seconds, 2), "out": str(out)}


def import_stage(cfg: PipelineConfig, src: Path, out_dir: Path, options: ImportOptions) -> ImportReport:
    out = Path(out_dir)
    report = import_diaggym(Path(src), out, options)
    if report.imported:
        validate_or_raise(out / "cases.jsonl")
    track_stage(cfg, "diag-import", "diag.import", {"src": str(src), "out_dir": str(out), **options.model_dump()},
           {"records": report.records, "imported": report.imported, "malformed": len(report.malformed),
            "diagnoses_matched": report.diagnoses_matched, "events": report.events,
            "events_matched": report.events_matched},
           [out / "import_report.json", out / "validation.json"])
    return report


def track_card(cfg: PipelineConfig, reports: Sequence[FidelityReport], params: dict, artifacts: list[Path]) -> None:
    """One MLflow run for a world-model card: each model's metrics under its name ("statistical.wasserstein_mean"),
    the card's markdown and JSON as artifacts."""
    metrics = {f"{mlflow_key(r.model)}.{k}": v for r in reports for k, v in r.metrics().items()}
    track_stage(cfg, "diag-fidelity", "diag.fidelity", {**params, "models": ",".join(r.model for r in reports)}, metrics,
           artifacts)



def fidelity_stage(cfg: PipelineConfig, cases: Path, out_dir: Path, train: Path | None = None, seed: int = 0,
                   min_values: int = MIN_VALUES) -> dict:
    """Fit the statistical world model on the train split of `train` (default: `cases`), compare it with the
    recorded oracle on the test split of `cases`, write card.md / card.json under `out_dir` and track them."""
    train_path = Path(train or cases)
    train_cases, test_cases = load_cases(train_path, split="train"), load_cases(cases, split="test")
    if not train_cases or not test_cases:
        raise ValueError(f"need train cases in {train_path} and test cases in {cases}; "
                         f"found {len(train_cases)} and {len(test_cases)}")
    models = (RecordedWorldModel(), StatisticalWorldModel.fit(train_cases, seed=seed))
    reports = [evaluate_fidelity(m, test_cases, seed=seed, min_values=min_values) for m in models]
    md, js = write_card(reports, out_dir)
    track_card(cfg, reports, {"cases": str(cases), "train": str(train_path), "out_dir": str(out_dir), "seed": seed,
                              "min_values": min_values, "train_cases": len(train_cases)}, [md, js])
    return {"cases": len(test_cases), "train_cases": len(train_cases), "card": str(md),
            "models": {r.model: r.metrics() for r in reports}}


@flow(name="diag-build-cohort", log_prints=True)
def build_cohort_flow(out_dir: Path, seed: int = 0, patients: int = 200, test_fraction: float = 0.2,
                      profile: str | PipelineConfig = "demo") -> dict:
    config = CohortConfig(patients=patients, seed=seed, test_fraction=test_fraction)
    return build_cohort_stage(as_config(profile), Path(out_dir), config)


@flow(name="diag-import", log_prints=True)
def import_flow(src: Path, out_dir: Path, seed: int = 0, test_fraction: float = 0.2, strict: bool = False,
                profile: str | PipelineConfig = "demo") -> ImportReport:
    options = ImportOptions(seed=seed, test_fraction=test_fraction, strict=strict)
    return import_stage(as_config(profile), Path(src), Path(out_dir), options)


@flow(name="diag-fidelity", log_prints=True)
def fidelity_flow(cases: Path, out_dir: Path, train: Path | None = None, seed: int = 0, min_values: int = MIN_VALUES,
                  profile: str | PipelineConfig = "demo") -> dict:
    return fidelity_stage(as_config(profile), Path(cases), Path(out_dir), Path(train) if train else None, seed,
                          min_values)


def eval_stage(cfg: PipelineConfig, cases: Path, out_dir: Path, agents: Sequence[str] = ("random", "greedy"),
               split: str = "test", world: str = "statistical", limit: int | None = None, samples: int = 1,
               single_turn_cases: int | None = 50, seed: int = 0) -> dict:
    """Baseline agents end to end on the `split` cases of `cases` (the greedy one and the statistical world fit on
    its train split), and single turn on the first `single_turn_cases`; report.md / report.json and the episodes
    under `out_dir`; the metrics tracked. `world`: statistical, or recorded (each case's own results, the
    statistical model for exams it lacks)."""
    if split == "train":
        raise ValueError("evaluate on held-out cases: the baselines are fit on the train split")
    if world not in ("statistical", "recorded"):
        raise ValueError(f"world must be statistical or recorded, got {world!r}")
    train, held = load_cases(cases, split="train"), load_cases(cases, split=split)[:limit]
    if not train or not held:
        raise ValueError(f"need train and {split} cases in {cases}; found {len(train)} and {len(held)}")
    fitted = StatisticalWorldModel.fit(train, seed=seed)
    env_world = fitted if world == "statistical" else RecordedWorldModel(fallback=fitted)
    report, episodes = evaluate_agents(make_baselines(list(agents), train, fitted, seed=seed), held, env_world,
                                       DiagEnvConfig(world_seed=seed), samples=samples,
                                       single_turn_cases=single_turn_cases, seed=seed, cases_file=str(cases),
                                       split=split, out_dir=out_dir)
    paths = write_evaluation(report, episodes, out_dir)
    track_stage(cfg, f"diag-eval-{split}", "diag.eval",
           {"cases": str(cases), "out_dir": str(out_dir), "agents": ",".join(agents), "split": split, "world": world,
            "limit": limit, "samples": samples, "single_turn_cases": single_turn_cases, "seed": seed,
            "train_cases": len(train)},
           {mlflow_key(k): v for k, v in report.metrics().items()}, paths[:2])
    return {"cases": len(held), "train_cases": len(train), "report": str(paths[1]), "metrics": report.metrics()}


@flow(name="diag-eval", log_prints=True)
def eval_flow(cases: Path, out_dir: Path, agents: list[str] | None = None, split: str = "test",
              world: str = "statistical", limit: int | None = None, samples: int = 1,
              single_turn_cases: int | None = 50, seed: int = 0, profile: str | PipelineConfig = "demo") -> dict:
    return eval_stage(as_config(profile), Path(cases), Path(out_dir), agents or ["random", "greedy"], split, world,
                      limit, samples, single_turn_cases, seed)
