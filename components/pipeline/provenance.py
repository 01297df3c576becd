"""What a pipeline run records about where it came from: its profile as params, the git commit, and the content
hashes DVC holds for the data it versions (dvc.lock), so a run on the dashboard names exactly what it read.

From a checkout both come from git and the lock files; from an image (no `.git`, no lock files at the root) from
the build file the image carries (components/tracking/source.py), so a run from the compose stack names them too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

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
