"""Which sandbox image this checkout needs: `medgym-sandbox:<hash of infra/sandbox inputs>`.

infra/sandbox/build_image.sh tags the image with the same hash, so code and runner can never drift apart:
change runner.py or runtime.lock and the code asks for an image that does not exist yet until it is rebuilt.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from components.common.paths import PROJECT_ROOT

HERE = Path(__file__).resolve().parent
INFRA = PROJECT_ROOT / "infra" / "sandbox"
# order matters: build_image.sh cats them so
IMAGE_INPUTS = (INFRA / "Dockerfile", HERE / "runner.py", INFRA / "packages.txt", HERE / "runtime.lock")
IMAGE_REPO = "medgym-sandbox"


def image_version() -> str:
    digest = hashlib.sha256()
    for path in IMAGE_INPUTS:
        digest.update(path.read_bytes())
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
