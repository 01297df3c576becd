"""Provenance from an image built without `.git`: trainer.Dockerfile's own step 5 (its COPY lines and its RUN
line, read from the Dockerfile and run here with the build arguments as the builder passes them, no Docker) writes
the build file into a folder that is no checkout and holds no lock file, as /opt/medgym in the image; the
provenance code run on that folder records the commit and the DVC versions a run from the checkout records."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.pipeline.provenance import dvc_versions, provenance_tags
from components.registry import git_commit
from components.tracking.source import BUILD_FILE, code_version
from tests.conftest import ROOT
from tests.test_infra import TRAINER_DOCKERFILE, _instructions

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DIAG_LOCK = Path("pipelines/diag-demo/dvc.lock")
IMAGE_ROOT = "/opt/medgym"


def _build_step(tmp: Path, args: dict[str, str]) -> Path:
    """Step 5 of trainer.Dockerfile run in `tmp`: each COPY into the staging folder copies from the repository, the
    RUN line runs under sh with the build arguments in its environment; the image's project root is tmp/image."""
    steps = _instructions(TRAINER_DOCKERFILE)
    run = next(rest for word, rest in steps if word == "RUN" and "components.tracking.source" in rest)
    staging = run.split("--locks ", 1)[1].split()[0]  # /tmp/medgym-build
    image = tmp / "image"
    image.mkdir()
    for word, rest in steps:
        if word == "COPY" and staging in rest:
            src, dst = shlex.split(rest)
            target = tmp / "staging" / Path(dst).relative_to(staging)
            if (ROOT / src).is_dir():
                shutil.copytree(ROOT / src, target, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / src, target)
    defaults = {rest.split("=", 1)[0]: rest.split("=", 1)[1] for word, rest in steps
                if word == "ARG" and rest.startswith("MEDGYM_GIT_")}
    cmd = run.replace(staging, str(tmp / "staging")).replace(IMAGE_ROOT, str(image))
    cmd = cmd.replace("python -m", f"{shlex.quote(sys.executable)} -m", 1)
    env = {**os.environ, **defaults, **args, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["sh", "-ec", cmd], env=env, capture_output=True, text=True, cwd=image, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (tmp / "staging").exists(), "the build removes what it staged"
    return image


def test_an_image_records_its_commit_and_dvc_versions_without_git(tmp_path: Path) -> None:
    image = _build_step(tmp_path, {"MEDGYM_GIT_COMMIT": COMMIT, "MEDGYM_GIT_DIRTY": "true"})
    assert sorted(p.name for p in image.iterdir()) == [BUILD_FILE]  # no .git, no lock file: only the build file
    assert subprocess.run(["git", "-C", str(image), "rev-parse", "HEAD"], capture_output=True).returncode != 0

    assert provenance_tags(image) == {"medgym.git.commit": COMMIT, "medgym.git.dirty": "true",
                                      "medgym.git.origin": "image", "mlflow.source.git.commit": COMMIT}
    assert git_commit(image) == (COMMIT, True)  # what the registry tags a version with
    # the data versions of the checkout's lock files, the root pipeline's and a DiagGym profile's
    for lock in (Path("dvc.lock"), DIAG_LOCK):
        want = dvc_versions(ROOT, lock)
        assert want and dvc_versions(image, lock) == want
    assert dvc_versions(image, image / DIAG_LOCK) == dvc_versions(ROOT, DIAG_LOCK)  # named by its absolute path too
    assert dvc_versions(image, Path("pipelines/paper/dvc.lock")) == {}  # a lock file the build did not have


def test_without_build_arguments_an_image_says_unknown_and_still_has_its_dvc_versions(tmp_path: Path) -> None:
    image = _build_step(tmp_path, {})
    assert json.loads((image / BUILD_FILE).read_text())["git_commit"] == "unknown"
    assert provenance_tags(image)["medgym.git.commit"] == "unknown"
    assert provenance_tags(image)["medgym.git.origin"] == "none"
    assert dvc_versions(image) == dvc_versions(ROOT) != {}


def test_a_malformed_commit_stops_the_build(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="git_commit"):
        _build_step(tmp_path, {"MEDGYM_GIT_COMMIT": "main; rm -rf /"})


def test_a_checkout_is_read_with_git_and_a_bare_folder_records_nothing(tmp_path: Path) -> None:
    here = code_version(ROOT)
    assert here.origin == "checkout" and len(here.commit) == 40
    # a stale build file in a checkout is never read: git is the truth there
    (tmp_path / "checkout").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path / "checkout")], check=True)
    subprocess.run(["git", "-C", str(tmp_path / "checkout"), "-c", "user.email=t@t", "-c", "user.name=t", "commit",
                    "-q", "--allow-empty", "-m", "x"], check=True)
    (tmp_path / "checkout" / BUILD_FILE).write_text(json.dumps({"git_commit": COMMIT}))
    assert code_version(tmp_path / "checkout").origin == "checkout"
    assert code_version(tmp_path / "checkout").commit != COMMIT
    bare = tmp_path / "bare"
    bare.mkdir()
    assert provenance_tags(bare)["medgym.git.commit"] == "unknown" and dvc_versions(bare) == {}
