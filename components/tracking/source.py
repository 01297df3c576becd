"""Where a run's code and data versions come from: a git checkout, or an image built without one.

A checkout answers with `git`. An image (infra/docker/trainer.Dockerfile) has no `.git` (it is kept out of the
build context), so its build writes BUILD_FILE at the project root: the commit it was built from (a build argument)
and the text of the DVC lock files (dvc.lock, pipelines/<profile>/dvc.lock) as they were in the build context.
Runs tracked from the image then record the same commit and data versions a run from the checkout would.

    python -m components.tracking.source --commit "$(git rev-parse HEAD)" --dirty false --locks . --out medgym-build.json
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

BUILD_FILE = "medgym-build.json"
# the lock files a run reads its data versions from (components/pipeline/dvc.py: dvc_file), relative to the root
LOCK_GLOBS = ("dvc.lock", "pipelines/*/dvc.lock")
UNKNOWN = "unknown"
Origin = Literal["checkout", "image", "none"]


class BuildInfo(BaseModel):
    """What an image knows of its source, written once at build time."""

    model_config = ConfigDict(extra="forbid")

    # a hex commit id (short or full), or `unknown` when the build was given none
    git_commit: str = Field(default=UNKNOWN, pattern=r"^([0-9a-f]{7,40}|unknown)$")
    git_dirty: bool = False
    dvc_locks: dict[str, str] = Field(default_factory=dict)  # lock path relative to the root (posix) -> its text

    @field_validator("git_commit", mode="before")
    @classmethod
    def _blank_is_unknown(cls, value: object) -> object:
        # `--build-arg MEDGYM_GIT_COMMIT=$(git rev-parse HEAD)` run outside a checkout passes an empty string
        if isinstance(value, str):
            return value.strip().lower() or UNKNOWN
        return value


class CodeVersion(BaseModel):
    commit: str
    dirty: bool
    origin: Origin  # where the commit was read: a git checkout, an image's build file, or nowhere


def read_build_info(root: Path) -> BuildInfo | None:
    path = root / BUILD_FILE
    return BuildInfo.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else None


def code_version(root: Path) -> CodeVersion:
    """HEAD of the checkout at `root` and whether its tracked files changed; outside a checkout, the build file's
    commit; else `unknown`."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout

    try:
        return CodeVersion(commit=git("rev-parse", "HEAD").strip(), origin="checkout",
                           dirty=bool(git("status", "--porcelain", "--untracked-files=no").strip()))
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout (an image: .git is not copied in)
        pass
    build = read_build_info(root)
    if build is not None and build.git_commit != UNKNOWN:
        return CodeVersion(commit=build.git_commit, dirty=build.git_dirty, origin="image")
    return CodeVersion(commit=UNKNOWN, dirty=False, origin="none")


def git_commit(root: Path) -> tuple[str, bool]:
    """(commit, dirty) as code_version reads them; ("unknown", False) with neither a checkout nor a build file."""
    v = code_version(root)
    return v.commit, v.dirty


def lock_text(root: Path, lock_file: Path) -> str | None:
    """The text of `lock_file` (relative to `root`): the file where it exists, else the copy the image's build file
    holds; None with neither."""
    path = root / lock_file
    if path.is_file():
        return path.read_text(encoding="utf-8")
    build = read_build_info(root)
    if build is None:
        return None
    rel = lock_file.relative_to(root) if lock_file.is_absolute() and lock_file.is_relative_to(root) else lock_file
    return build.dvc_locks.get(rel.as_posix())


def stamp(commit: str, dirty: bool, locks: Path) -> BuildInfo:
    """The build file's content: `commit`, `dirty`, and every lock file of LOCK_GLOBS under `locks`."""
    found = sorted({p for pattern in LOCK_GLOBS for p in locks.glob(pattern) if p.is_file()})
    return BuildInfo(git_commit=commit, git_dirty=dirty,
                     dvc_locks={p.relative_to(locks).as_posix(): p.read_text(encoding="utf-8") for p in found})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=f"write {BUILD_FILE}: an image's commit and DVC lock files")
    parser.add_argument("--commit", default="", help="the commit the image is built from (empty: unknown)")
    parser.add_argument("--dirty", default="false", help="true when the build context had uncommitted changes")
    parser.add_argument("--locks", type=Path, required=True, help="the folder holding dvc.lock and pipelines/")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    # pydantic reads the flags: a malformed commit or `--dirty maybe` stops the build, not a run months later
    info = stamp(args.commit, args.dirty or "false", args.locks)  # type: ignore[arg-type]
    args.out.write_text(info.model_dump_json(indent=1) + "\n", encoding="utf-8")
    print(f"{args.out}: commit {info.git_commit}{' (dirty)' if info.git_dirty else ''}, "
          f"lock files {', '.join(info.dvc_locks) or 'none'}")


if __name__ == "__main__":
    main()
