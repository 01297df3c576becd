"""DiagGym data flows: build the synthetic cohort, import DiagGym-format records; validate and track each.

Each flow is a thin Prefect wrapper over a plain stage function (`build_cohort_stage`, `import_stage`) that the
pipeline and the tests call without an orchestrator.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow

from components.common.io import atomic_write
from components.config import PipelineConfig, as_config
from components.diag.cohort import CohortConfig, write_cohort
from components.diag.importer import ImportOptions, ImportReport, import_diaggym
from components.diag.validation import CaseValidationReport, validate_cases
from components.tracking.tracker import MlflowTracker, parent_tags
from flows.runtime import PROJECT_ROOT


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


def _track(cfg: PipelineConfig, name: str, stage: str, params: dict, metrics: dict, artifacts: list[Path]) -> None:
    tracker = MlflowTracker(cfg.tracking, PROJECT_ROOT)
    with tracker.run(name) as run:
        run.set_tags({"stage": stage, "profile": cfg.profile, **parent_tags(cfg.tracking)})
        run.log_params(params)
        run.log_metrics(metrics)
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
    _track(cfg, f"diag-cohort-seed{config.seed}", "diag.build", {**config.model_dump(), "out_dir": str(out)},
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
    _track(cfg, "diag-import", "diag.import", {"src": str(src), "out_dir": str(out), **options.model_dump()},
           {"records": report.records, "imported": report.imported, "malformed": len(report.malformed),
            "diagnoses_matched": report.diagnoses_matched, "events": report.events,
            "events_matched": report.events_matched},
           [out / "import_report.json", out / "validation.json"])
    return report


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
