"""A model logged by reference: MLflow records where its folder is and what it holds, and copies none of its weights.

A 7B checkpoint is about 15 GB; each stage of the paper profile would copy one into the artifact store beside the
merged folder that DVC already versions. By reference the run names that folder, its content digest and its size as
an external LoggedModel (MLflow's own record of a model kept outside its store) and as run tags, so a reader can
check that the folder on disk is still the one the run made.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

_CHUNK = 1 << 20
PATH_TAG, DIGEST_TAG, BYTES_TAG, TASK_TAG = ("medgym.model.path", "medgym.model.sha256", "medgym.model.bytes",
                                             "medgym.model.task")


class ModelReference(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str  # absolute
    sha256: str
    bytes: int
    files: int

    def tags(self, task: str) -> dict[str, str]:
        return {PATH_TAG: self.path, DIGEST_TAG: self.sha256, BYTES_TAG: str(self.bytes), TASK_TAG: task}


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def folder_digest(folder: Path) -> str:
    """sha256 over a folder's files, each as its path relative to the folder and its own sha256: the same digest
    the pipeline keys a base checkpoint by (components/pipeline/digest.py), so the two can be compared."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + file_digest(f).encode() + b"\n")
    return h.hexdigest()


def reference(folder: Path) -> ModelReference:
    folder = folder.resolve()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder}: no model to log by reference (config.json missing)")
    files = [p for p in folder.rglob("*") if p.is_file()]
    return ModelReference(path=str(folder), sha256=folder_digest(folder), bytes=sum(p.stat().st_size for p in files),
                          files=len(files))
