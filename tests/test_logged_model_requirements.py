"""A model MLflow logs (TrainingRun.log_model: every training stage's merged checkpoint, and registration's) records
the exact versions it was made and is loaded with, as pip requirements `name==version`, not bare names that would
install whatever is newest on the day it is loaded."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from packaging.version import Version

PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;#]+)")


def _installed(name: str) -> str:
    return Version(version(name)).public  # torch 2.13.0+cpu is pinned as 2.13.0: the CUDA build on a GPU index


def test_a_logged_models_requirements_are_pinned_to_the_installed_versions(model_store, tmp_path: Path) -> None:
    import mlflow.artifacts

    tracking, uri = model_store  # the tiny model logged as run_stage logs a merged checkpoint
    folder = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(tmp_path),
                                                      tracking_uri=tracking.mlflow_uri))
    text = (folder / "requirements.txt").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    pins = {}
    for line in lines:
        m = PIN.fullmatch(line)
        assert m, f"requirements.txt: {line!r} is not pinned name==version"
        assert m["name"] not in pins, f"requirements.txt names {m['name']} twice"
        pins[m["name"]] = m["version"]
    assert {"mlflow", "torch", "transformers", "peft", "accelerate", "safetensors", "tokenizers"} <= set(pins), pins
    for name, pinned in pins.items():
        assert pinned == _installed(name), f"{name}=={pinned}, installed {version(name)}"


def test_pinned_requirements_leave_out_what_is_not_installed() -> None:
    from components.tracking.training import pinned_requirements

    assert pinned_requirements(("torch", "no-such-package-medgym")) == [f"torch=={_installed('torch')}"]
