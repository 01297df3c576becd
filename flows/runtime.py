"""Process settings every flow needs before Prefect or MLflow is imported: state inside the project, no telemetry."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = PROJECT_ROOT / ".state"


def configure_runtime() -> None:
    """Idempotent; user-set values win, so a Prefect server or MLflow server configured outside still applies."""
    defaults = {
        "PREFECT_HOME": str(STATE_DIR / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "DO_NOT_TRACK": "1",
        "GX_ANALYTICS_ENABLED": "false",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        "DVC_NO_ANALYTICS": "1",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
