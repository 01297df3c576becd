"""The project's root folder, named once: where configs/, infra/, .state/ and the default data and model folders
are, whatever the working directory."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
