"""What a pipeline run records about where it came from: its profile as params, the git commit, and the content
hashes DVC holds for the data it versions (dvc.lock), so a run on the dashboard names exactly what it read.

From a checkout both come from git and the lock files; from an image (no `.git`, no lock files at the root) from
the build file the image carries (components/tracking/source.py), so a run from the compose stack names them too.

What a result also depends on and no commit records: the libraries that trained and served the models, the CUDA
build, driver and GPUs they ran on, and the base checkpoint's content (`environment_tags`). Tags rather than params:
params are what the run was asked to do (their digest finds an interrupted run to carry on), and a run carried on
from another node would otherwise clash."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from components.pipeline.digest import DigestCache, model_folder
from components.profile.config import PipelineConfig
from components.tracking.source import code_version, lock_text
from components.tracking.tracker import flatten


def config_params(cfg: PipelineConfig) -> dict[str, str]:
    """The whole profile as `key.path -> value` params (lists as their JSON-ish text)."""
    return {k: str(v) for k, v in flatten(cfg.model_dump(mode="json", exclude={"tracking": {"parent_run_id"}})).items()}


def dvc_versions(root: Path, lock_file: Path = Path("dvc.lock")) -> dict[str, str]:
    """`dvc.<stage>.<out path>` -> md5 of each output in the lock file, or in an image the build file's copy of it
    (empty with neither)."""
    text = lock_text(root, lock_file)
    if text is None:
        return {}
    doc: dict[str, Any] = yaml.safe_load(text) or {}
    versions = {}
    for stage, body in (doc.get("stages") or {}).items():
        for out in body.get("outs") or []:
            if "md5" in out:
                versions[f"dvc.{stage}.{out['path']}"] = str(out["md5"])
    return versions


def provenance_tags(root: Path) -> dict[str, str]:
    """The commit tags; `medgym.git.origin` says where the commit was read (checkout, image, none)."""
    v = code_version(root)
    return {"medgym.git.commit": v.commit, "medgym.git.dirty": str(v.dirty).lower(), "medgym.git.origin": v.origin,
            "mlflow.source.git.commit": v.commit}


# what trains, serves and tracks a model here; vllm lives in its own environment on a CPU box and is then absent
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "vllm", "mlflow", "prefect")
ABSENT = "absent"


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    """`medgym.lib.<name>` -> the installed version (its metadata: nothing is imported), `absent` where none is.
    Read once per process (each lookup scans the path, 20 ms a run): a library this process has imported stays
    the version it imported, whatever is installed over it later, and a served deployment runs many pipelines."""
    return {f"medgym.lib.{name}": v for name, v in _installed(names)}  # a fresh dict: the cache stays as read


@cache
def _installed(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in names:
        try:
            out.append((name, version(name)))
        except PackageNotFoundError:
            out.append((name, ABSENT))
    return tuple(out)


def nvidia_driver() -> str:
    """The NVIDIA driver version nvidia-smi reports, `absent` without one (torch does not say)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ABSENT
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return ABSENT
    return out[0] if out else ABSENT


def accelerator_tags(driver: Callable[[], str] = nvidia_driver) -> dict[str, str]:
    """CUDA build of torch, driver, GPU model and count: `absent` and 0 on a machine without GPUs."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    models = sorted({torch.cuda.get_device_name(i) for i in range(count)})
    return {"medgym.cuda": torch.version.cuda or ABSENT, "medgym.gpu.count": str(count),
            "medgym.gpu.model": ", ".join(models) or ABSENT, "medgym.gpu.driver": driver() if count else ABSENT}


def base_checkpoints(cfg: PipelineConfig) -> dict[str, str]:
    """`medgym.base_model[.diag]` -> the checkpoint the profile's training (and DiagGym's agent) start from."""
    out = {"medgym.base_model": cfg.training.base_model}
    if cfg.diag is not None:
        out["medgym.base_model.diag"] = cfg.diag.base_model
    return out


def environment_tags(cfg: PipelineConfig, root: Path, digests: DigestCache | None = None) -> dict[str, str]:
    """Libraries, accelerator and the base checkpoints with their content digests (`<tag>.sha256`; `missing` for a
    name that is no folder here). `digests` defaults to the pipeline's cache, the one stage keys hash checkpoints
    with, so a 7B checkpoint is read once per change, not once per run."""
    from components.pipeline.state import DIGESTS

    digests = digests or DigestCache(root / cfg.pipeline.state_dir / DIGESTS)
    tags = library_versions() | accelerator_tags()
    for tag, name in base_checkpoints(cfg).items():
        folder = model_folder(name, root)
        tags[tag] = name
        tags[f"{tag}.sha256"] = digests.digest(folder) if folder is not None else "missing"
    digests.save()
    return tags
