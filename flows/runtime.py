"""Process settings every flow needs before Prefect or MLflow is imported: state inside the project, no telemetry;
the Prefect API the flows report to, started once per command when none is configured; and `say`, the one way a
flow reports progress."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from components.common.orphan_guard import guarded
from components.common.paths import PROJECT_ROOT

STATE_DIR = PROJECT_ROOT / ".state"
# Prefect's default is 20 s; a fresh state folder migrates its database first, and on a busy 2-core machine
# that alone has taken longer. A slow start is not an error: wait, and say so.
SERVER_STARTUP_TIMEOUT_S = 600
# where `prefect server start` serves its UI by default (README: browsing past runs)
LOCAL_UI_URL = "http://127.0.0.1:4200"
# The temporary server serves this command's flow runs only. The services that act on deployments, work pools and
# schedules are off: the state folder is the one `prefect server start` browses (README), so it may hold a
# deployment served elsewhere, whose runs this server must neither schedule nor mark late. The rest stay on:
# recording task runs, events and logs is what the UI reads afterwards; concurrency leases still expire.
IDLE_SERVICES = ("SCHEDULER", "LATE_RUNS", "FOREMAN", "CANCELLATION_CLEANUP", "PAUSE_EXPIRATIONS")


def configure_runtime() -> None:
    """Idempotent; user-set values win, so a Prefect server or MLflow server configured outside still applies."""
    defaults = {
        "PREFECT_HOME": str(STATE_DIR / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        # a flow run's own logger at INFO: `say` lines, `log_prints` output and Prefect's state changes reach the
        # flow run's logs in the UI (and the console); the rest of Prefect's client chatter stays at WARNING
        "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL": "INFO",
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
    up front, with a generous timeout and a message while it starts; every flow of the command reuses it.

    The temporary server is `prefect server start` (Prefect's public way to run a server; Prefect 3.9 has no public
    Python one, only the private `SubprocessASGIServer` behind its ephemeral mode) on a free loopback port, without
    the UI, on the database in PREFECT_HOME: the same runs that `prefect server start` shows afterwards (README)."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    timeout = int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", SERVER_STARTUP_TIMEOUT_S))
    home = Path(os.environ["PREFECT_HOME"])
    sys.stderr.write(f"Starting Prefect's temporary server (state in {home}; waiting up to {timeout} s) ...\n")
    started = time.monotonic()
    with _local_server(home, timeout) as api_url:
        sys.stderr.write(f"Prefect server ready at {api_url} after {time.monotonic() - started:.1f} s\n")
        with temporary_server_settings(api_url):
            try:
                yield api_url
            finally:
                _flush_to_server()


def _flush_to_server() -> None:
    """Send the run logs and events still queued to the server before it stops: Prefect ships them in batches from
    threads, and the last flow run's lines (its summary) and the last stages' task-run states (a task run's states
    travel as events) would otherwise be lost with the server."""
    if "prefect" in sys.modules:
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogHandler

        APILogHandler().flush()
        EventsWorker.drain_all(timeout=30)


@contextlib.contextmanager
def _local_server(home: Path, timeout: float) -> Iterator[str]:
    """`prefect server start` in a session of its own (so that stopping it stops its workers too), under the orphan
    guard (components/common/orphan_guard.py), its output in
    PREFECT_HOME/server.log; yields its API URL once /api/health answers and stops it on exit."""
    port = _free_port()
    log = home / "server.log"
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false",
           **{f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false" for name in IDLE_SERVICES}}
    env.pop("PREFECT_API_URL", None)  # else `prefect server start` would talk about a server configured elsewhere
    prefect_cli = Path(sys.executable).with_name("prefect")
    cmd = [str(prefect_cli), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui",
           "--log-level", "WARNING"]
    with log.open("wb") as out:  # under the orphan guard: a command killed with SIGKILL leaves no server behind
        proc = subprocess.Popen(guarded(cmd), env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        api_url = f"http://127.0.0.1:{port}/api"
        deadline = time.monotonic() + timeout
        while not _healthy(api_url):
            if proc.poll() is not None:
                raise RuntimeError(f"prefect server start exited with {proc.returncode} before it answered; "
                                   f"{log}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Prefect's temporary server did not answer within {timeout} s "
                                   "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS); "
                                   f"{log}:\n{_tail(log)}")
            time.sleep(0.2)
        yield api_url
    finally:
        _stop(proc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def temporary_server_settings(api_url: str) -> Iterator[None]:
    """Prefect's settings while flows report to a temporary server of this command's own at `api_url`.

    No flow run heartbeats unless the user set a frequency (environment, Prefect profile): they let a long-lived
    server mark a run whose process died as crashed, but this server dies with the process, so they would tell it
    nothing, and the end of every flow run waits up to a second for its heartbeat thread to wake.

    The "View at" links of flow runs point at LOCAL_UI_URL unless the user set PREFECT_UI_URL: this server has no UI
    and stops with the command, but `prefect server start` on the same PREFECT_HOME (README) shows the same runs
    there.

    The server speaks plain HTTP on loopback, so no certificate is ever checked; without TLS_INSECURE_SKIP_VERIFY
    each Prefect client (one a flow run) would still load the CA bundle it never uses (20 ms a flow run)."""
    from prefect.settings import (
        PREFECT_API_TLS_INSECURE_SKIP_VERIFY,
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_UI_URL,
        temporary_settings,
    )

    with temporary_settings(updates={PREFECT_API_URL: api_url},
                            set_defaults={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None, PREFECT_UI_URL: LOCAL_UI_URL,
                                          PREFECT_API_TLS_INSECURE_SKIP_VERIFY: True}):
        yield


def say(message: str) -> None:
    """A progress line or a stage's summary. Inside a flow run it goes through Prefect's run logger, so that it is in
    the flow run's logs on the server (the UI) and on the console; outside one, to stderr. Never `print`: stdout
    carries the commands' JSON results."""
    logger = _run_logger()
    if logger is not None and logger.isEnabledFor(logging.INFO):
        logger.info(message)
        return
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _run_logger() -> logging.LoggerAdapter | logging.Logger | None:
    """The current flow or task run's logger; None outside a run (or in a thread that runs none). Prefect not yet
    imported means no run: importing it here would cost a command that never starts one a second or two."""
    if "prefect" not in sys.modules:
        return None
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.logging import get_run_logger

    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return None
    return get_run_logger()
