"""Content digests of what a stage reads from outside the pipeline: an imported release folder, a base checkpoint.

A stage's key hashes its profile section, its code and its upstream keys (state.py); those say nothing of a release
folder that gained a file or a checkpoint folder rewritten in place, so a scheduled run would find every stage
cached whatever arrived. The key also hashes these digests. Hashing a 7B checkpoint reads 15 GB, so each file's
digest is kept beside the pipeline's state, keyed by its size, modification time and inode (what DVC's state keeps
too): a run that finds nothing changed stats the files and reads none.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from components.common.io import JsonCache

MISSING = "missing"  # a path that is not there: the stage that reads it says so when it runs
_CHUNK = 1 << 20


class DigestCache(JsonCache):
    """sha256 of files and folders, remembered per file by (size, mtime_ns, inode) in one JSON file."""

    def digest(self, target: Path) -> str:
        """One digest of a file, or of a folder's files (their paths relative to it and their contents), hidden
        files and folders included: a release's manifest may be one."""
        target = target.resolve()
        if not target.exists():
            return MISSING
        if target.is_file():
            return self._file(target)
        h = hashlib.sha256()
        for f in sorted(p for p in target.rglob("*") if p.is_file()):
            h.update(f.relative_to(target).as_posix().encode() + b"\0" + self._file(f).encode() + b"\n")
        return h.hexdigest()

    def _file(self, path: Path) -> str:
        st = os.stat(path)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        known = self._entries.get(str(path))
        if known is not None and known[:3] == stamp:
            return str(known[3])
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        self._put(str(path), [*stamp, h.hexdigest()])
        return h.hexdigest()


def model_folder(name_or_path: str, root: Path) -> Path | None:
    """The folder a stage's model is read from: a checkpoint folder (relative to `root` unless absolute), or an
    embedded model, converted now if it was not yet (the stage would convert it; a key computed before and after
    that must agree). None for a name that is neither: the stage itself refuses it."""
    from components.policies.models import resolve_model

    path = Path(name_or_path)
    if not path.is_absolute() and (root / path).is_dir():
        return root / path
    try:
        return resolve_model(name_or_path)
    except FileNotFoundError:
        return None
