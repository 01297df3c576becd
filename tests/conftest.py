from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT.parent / "shared" / "medagentgym-sample"

os.environ.setdefault("PREFECT_HOME", str(ROOT / ".state" / "prefect-tests"))
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session")
def sample_release() -> Path:
    """The first rows of the public MedAgentGym task files, read in place from ../shared (never copied)."""
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent: the MedAgentGym sample lives beside the project in ../shared")
    return SAMPLE
