"""Which sandbox image this checkout needs: `medgym-sandbox:<hash of infra/sandbox inputs>`.

infra/sandbox/build_image.sh tags the image with the same hash, so code and runner can never drift apart:
change runner.py and the code asks for an image that does not exist yet until it is rebuilt.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

SANDBOX_DIR = Path(__file__).resolve().parents[2] / "infra" / "sandbox"
IMAGE_INPUTS = ("Dockerfile", "runner.py", "packages.txt")  # order matters: build_image.sh cats them so
IMAGE_REPO = "medgym-sandbox"


def image_version(sandbox_dir: Path = SANDBOX_DIR) -> str:
    digest = hashlib.sha256()
    for name in IMAGE_INPUTS:
        digest.update((sandbox_dir / name).read_bytes())
    return digest.hexdigest()[:12]


def default_image() -> str:
    """MEDGYM_SANDBOX_IMAGE overrides (e.g. an image built elsewhere); else the one matching this checkout
    (`:latest` when the infra/sandbox sources are not beside the code, as in an installed wheel)."""
    override = os.environ.get("MEDGYM_SANDBOX_IMAGE")
    if override:
        return override
    try:
        return f"{IMAGE_REPO}:{image_version()}"
    except OSError:
        return f"{IMAGE_REPO}:latest"
