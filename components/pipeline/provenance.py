"""What a pipeline run records about where it came from: its profile as params, the git commit, and the content
hashes DVC holds for the data it versions (dvc.lock), so a run on the dashboard names exactly what it read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from components.profile.config import PipelineConfig
from components.registry import git_commit
from components.tracking.tracker import flatten


def config_params(cfg: PipelineConfig) -> dict[str, str]:
    """The whole profile as `key.path -> value` params (lists as their JSON-ish text)."""
    return {k: str(v) for k, v in flatten(cfg.model_dump(mode="json", exclude={"tracking": {"parent_run_id"}})).items()}


def dvc_versions(root: Path, lock_file: Path = Path("dvc.lock")) -> dict[str, str]:
    """`dvc.<stage>.<out path>` -> md5 of each output in the lock file (empty without one)."""
    lock = root / lock_file
    if not lock.is_file():
        return {}
    doc: dict[str, Any] = yaml.safe_load(lock.read_text(encoding="utf-8")) or {}
    versions = {}
    for stage, body in (doc.get("stages") or {}).items():
        for out in body.get("outs") or []:
            if "md5" in out:
                versions[f"dvc.{stage}.{out['path']}"] = str(out["md5"])
    return versions


def provenance_tags(root: Path) -> dict[str, str]:
    commit, dirty = git_commit(root)
    return {"medgym.git.commit": commit, "medgym.git.dirty": str(dirty).lower(), "mlflow.source.git.commit": commit}
