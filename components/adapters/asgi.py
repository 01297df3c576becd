"""The OpenEnv server as an ASGI app factory configured by environment variables, for uvicorn in the image
(infra/openenv): `uvicorn --factory components.adapters.asgi:app_from_env`. `medgym env serve` is the same server
from the command line; the image runs this instead because the CLI imports the whole pipeline (Prefect, MLflow,
torch), which a server of the coding environment does not need.

MEDGYM_TASKS (required) the tasks.jsonl; MEDGYM_SPLIT; MEDGYM_SANDBOX_BACKEND (process, docker, auto; default
docker, the agent's code in sibling sandbox containers); MEDGYM_MAX_SESSIONS; MEDGYM_MAX_TURNS; MEDGYM_EXEC_TIMEOUT_S.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from components.adapters.openenv_app import ServeConfig, create_server_app
from components.adapters.served import ServedTasks
from components.envs.coding_env import EnvConfig


def settings_from_env(environ: dict[str, str] | None = None) -> tuple[ServedTasks, ServeConfig]:
    env = dict(os.environ if environ is None else environ)
    if not env.get("MEDGYM_TASKS"):
        raise SystemExit("MEDGYM_TASKS must name the tasks.jsonl to serve")
    defaults = EnvConfig()
    settings = ServedTasks(
        tasks=Path(env["MEDGYM_TASKS"]), split=env.get("MEDGYM_SPLIT") or None,
        backend=env.get("MEDGYM_SANDBOX_BACKEND", "docker"),
        env=EnvConfig(max_turns=int(env.get("MEDGYM_MAX_TURNS", defaults.max_turns)),
                      exec_timeout_s=float(env.get("MEDGYM_EXEC_TIMEOUT_S", defaults.exec_timeout_s))),
    )
    return settings, ServeConfig(max_sessions=int(env.get("MEDGYM_MAX_SESSIONS", 4)))


def app_from_env() -> Any:
    settings, config = settings_from_env()
    return create_server_app(settings, config)
