from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_script(path: Path) -> ModuleType:
    """A standalone script (infra/*.py: no package, run by whichever venv's python) as a module; registered in
    sys.modules under its file name, where its dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
SAMPLE = ROOT.parent / "shared" / "medagentgym-sample"

os.environ.setdefault("PREFECT_HOME", str(ROOT / ".state" / "prefect-tests"))
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session")
def sample_release() -> Path:
    """The first rows of the public MedAgentGym task files, read in place from ../shared (never copied)."""
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent: the MedAgentGym sample lives beside the project in ../shared")
    return SAMPLE


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random two-layer Llama with SmolLM2's tokenizer and chat template: the real hf code path, fast."""
    from components.policies.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="module")
def model_store(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path):
    """A sqlite MLflow store of the module's own holding the tiny model logged once, as `run_stage` logs a merged
    checkpoint: (its TrackingConfig, the logged model's URI)."""
    from components.tracking.tracker import TrackingConfig
    from components.tracking.training import training_run

    root = tmp_path_factory.mktemp("mlflow")
    tracking = TrackingConfig(mlflow_uri=f"sqlite:///{root / 'mlflow.db'}",
                              artifact_location=str(root / "artifacts"), experiment="t")
    with training_run(tracking, "t-model", system_metrics=False) as run:
        uri = run.log_model(tiny_model)
    return tracking, uri


@pytest.fixture(scope="session")
def small_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated suite with two categories per domain (2 train + 1 test each), confirmed in the process sandbox;
    its tasks.jsonl path. Rollout, policy and pipeline tests play it."""
    from components.sandbox.factory import open_sandbox
    from components.sandbox.protocol import Limits
    from components.tasks.generators import all_generators
    from components.tasks.suite import SuiteSize, build_suite

    if os.geteuid() != 0:
        pytest.skip("the process sandbox backend needs root (namespaces, uid switch)")
    by_domain: dict = {}
    for g in sorted(all_generators(), key=lambda g: g.category):
        by_domain.setdefault(g.domain, [])
        if len(by_domain[g.domain]) < 2:
            by_domain[g.domain].append(g)
    out = tmp_path_factory.mktemp("suite")

    def opener(out_dir: Path):
        box = open_sandbox("process", Limits(timeout_s=120, max_output_bytes=16 * 1024 * 1024))
        if (out_dir / "files").is_dir():
            box.upload_dir(out_dir / "files", "files")
        return box

    build_suite(out, SuiteSize(train_per_category=2, test_per_category=1), 0, opener,
                generators=[g for gens in by_domain.values() for g in gens])
    return out / "tasks.jsonl"
