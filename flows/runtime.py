"""Process settings every flow needs before Prefect or MLflow is imported: state inside the project, no telemetry;
and the Prefect API the flows report to, started once per command when none is configured."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from components.common.paths import PROJECT_ROOT

STATE_DIR = PROJECT_ROOT / ".state"
# Prefect's default is 20 s; a fresh state folder migrates its database first, and on a busy 2-core machine
# that alone has taken longer. A slow start is not an error: wait, and say so.
SERVER_STARTUP_TIMEOUT_S = 600


def configure_runtime() -> None:
    """Idempotent; user-set values win, so a Prefect server or MLflow server configured outside still applies."""
    defaults = {
        "PREFECT_HOME": str(STATE_DIR / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": str(SERVER_STARTUP_TIMEOUT_S),
        "DO_NOT_TRACK": "1",
        "GX_ANALYTICS_ENABLED": "false",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        # MLflow reads DO_NOT_TRACK as on only when it says "true"; "1", the convention, leaves its telemetry on
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DVC_NO_ANALYTICS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def prefect_api() -> Iterator[str]:
    """The Prefect API for this command: PREFECT_API_URL when set, else one temporary local server started here,
    up front, with a generous timeout and a message while it starts; every flow of the command reuses it."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    from prefect.server.api.server import SubprocessASGIServer

    timeout = int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", SERVER_STARTUP_TIMEOUT_S))
    sys.stderr.write(f"Starting Prefect's temporary server (state in {os.environ['PREFECT_HOME']}; "
                     f"waiting up to {timeout} s) ...\n")
    started = time.monotonic()
    server = SubprocessASGIServer()
    server.start(timeout=timeout)
    sys.stderr.write(f"Prefect server ready at {server.api_url} after {time.monotonic() - started:.1f} s\n")
    try:
        with temporary_server_settings(server.api_url):
            yield server.api_url
    finally:
        server.stop()


@contextlib.contextmanager
def temporary_server_settings(api_url: str) -> Iterator[None]:
    """Prefect's settings while flows report to a temporary server of this command's own at `api_url`.

    No flow run heartbeats unless the user set a frequency (environment, Prefect profile): they let a long-lived
    server mark a run whose process died as crashed, but this server dies with the process, so they would tell it
    nothing, and the end of every flow run waits up to a second for its heartbeat thread to wake."""
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url}, set_defaults={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def say(message: str) -> None:
    """A progress line on stderr. Not `print`: under `log_prints` Prefect turns it into an INFO record, which the
    runtime's WARNING level drops, and stdout carries the JSON result."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
