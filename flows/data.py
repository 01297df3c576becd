"""Data flows: build the generated suite, import the MedAgentGym release, validate, track."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from components.common.io import atomic_write
from components.common.paths import PROJECT_ROOT
from components.profile.config import PipelineConfig, SandboxConfig, as_config
from components.sandbox.protocol import Limits, Sandbox
from components.tasks import suite as suite_mod
from components.tasks.generators import generators_for
from components.tasks.importers.medagentgym import ImportOptions, ImportReport, import_release
from components.tasks.validation import ValidationReport, validate_tasks
from components.tracking.tracker import MlflowTracker


def suite_sandbox_opener(config: SandboxConfig):
    """Sandboxes for confirming reference code: the suite's files inside, a generous output cap for batches."""
    from components.sandbox.factory import open_sandbox

    limits = Limits(**{**config.limits.model_dump(), "timeout_s": max(config.limits.timeout_s, 300),
                       "max_output_bytes": 64 * 1024 * 1024, "memory_mb": max(config.limits.memory_mb, 2048)})

    def opener(out_dir: Path) -> Sandbox:
        sandbox = open_sandbox(config.backend, limits=limits, stateful=False)
        if (out_dir / "files").is_dir():
            sandbox.upload_dir(out_dir / "files", "files")
        return sandbox

    return opener


def _progress() -> tuple[Progress, suite_mod.Progress]:
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True))  # stdout carries the command's JSON result
    current: dict[str, int] = {}

    def on_category(category: str, n: int) -> None:
        if "id" in current:
            bar.update(current["id"], visible=False)
        current["id"] = bar.add_task(f"confirming {category}", total=n)

    def on_confirmed(n: int) -> None:
        bar.advance(current["id"], n)

    return bar, suite_mod.Progress(on_category=on_category, on_confirmed=on_confirmed)


# no Prefect cache: the stage's key is the cache (components/pipeline/state.py), and hashing the inputs and reading
# the task's source at every call would buy a result Prefect never persists
@task(retries=1, retry_delay_seconds=1, cache_policy=NO_CACHE)  # the build resumes from its parts folder
def build_task(cfg: PipelineConfig, suite: str, out_dir: Path) -> suite_mod.BuildReport:
    bar, progress = _progress()
    with bar:
        return suite_mod.build_suite(out_dir, cfg.data.suites[suite], cfg.data.seed, suite_sandbox_opener(cfg.sandbox),
                                     chunk=cfg.data.confirm_chunk, workers=cfg.data.confirm_workers,
                                     generators=generators_for(cfg.data.categories), progress=progress)


@task(cache_policy=NO_CACHE)
def validate_task(tasks_path: Path) -> ValidationReport:
    report = validate_tasks(tasks_path)
    if not report.success:
        detail = "; ".join(f"{f.expectation}({f.column}): {f.unexpected[:3]}" for f in report.failures)
        raise ValueError(f"{tasks_path} failed validation: {detail}")
    return report


@flow(name="build-suite", log_prints=True)
def build_suite_flow(profile: str | PipelineConfig = "demo", suite: Literal["demo", "full"] = "demo", seed: int | None = None,
                     out_dir: Path | None = None) -> dict:
    cfg = as_config(profile)
    if seed is not None:
        cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"seed": seed})})
    out = Path(out_dir) if out_dir else PROJECT_ROOT / cfg.data.out_dir
    started = time.perf_counter()
    report = build_task(cfg, suite, out)
    seconds = time.perf_counter() - started
    validation = validate_task(out / "tasks.jsonl")
    by_domain: dict[str, int] = {}
    for cat in report.categories.values():
        by_domain[cat.domain] = by_domain.get(cat.domain, 0) + cat.confirmed
    tracker = MlflowTracker(cfg.tracking, PROJECT_ROOT)
    with tracker.run(f"build-{suite}-seed{cfg.data.seed}",
                     tags={"medgym.stage": "data.build", "medgym.profile": cfg.profile}) as run:
        run.log(params={"suite": suite, "seed": cfg.data.seed, **cfg.data.suites[suite].model_dump(),
                        "categories": len(report.categories), "out_dir": str(out)},
                metrics={"tasks": report.total, "seconds": seconds, "tasks_per_second": report.total / seconds,
                         **{f"tasks_{d}": n for d, n in by_domain.items()}})
        run.log_artifact(out / "build_report.json")
    return {"tasks": report.total, "categories": len(report.categories), "seconds": round(seconds, 1),
            "validated_rows": validation.rows, "by_domain": by_domain, "out": str(out)}


@flow(name="import-medagentgym", log_prints=True)
def import_flow(src: Path, out_dir: Path, profile: str | PipelineConfig = "demo", seed: int = 0,
                ehr_databases: dict[str, Path] | None = None, rollout_indices: bool = False) -> ImportReport:
    from components.sandbox.factory import open_sandbox

    cfg = as_config(profile)
    options = ImportOptions(seed=seed, ehr_databases=ehr_databases or {}, rollout_indices=rollout_indices,
                            open_sandbox=lambda: open_sandbox(cfg.sandbox.backend, limits=cfg.sandbox.limits))
    report = import_release(Path(src), Path(out_dir), options, progress=lambda key: print(f"importing {key}"))
    report_path = Path(out_dir) / "import_report.json"
    with atomic_write(report_path) as fh:
        fh.write(report.model_dump_json(indent=2))
    if report.imported:
        validate_task(Path(out_dir) / "tasks.jsonl")
    tracker = MlflowTracker(cfg.tracking, PROJECT_ROOT)
    with tracker.run("import-medagentgym", tags={"medgym.stage": "data.import", "medgym.profile": cfg.profile}) as run:
        run.log(params={"src": str(src), "out_dir": str(out_dir), "seed": seed, "rollout_indices": rollout_indices},
                metrics={f"imported_{k.replace('/', '_')}": c.imported for k, c in report.per_file.items()})
        run.log_artifact(report_path)
    return report
