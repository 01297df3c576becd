"""`medgym env`: MedGym's coding environment for clients outside the project (an OpenEnv server)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from components.adapters.served import ServedTasks
from components.envs.coding_env import EnvConfig

app = typer.Typer(help="Serve MedGym's coding environment to outside clients.", no_args_is_help=True)


@app.callback()
def _main() -> None:
    """Keep `serve` a sub-command while it is the only one."""


@app.command()
def serve(
    tasks: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="tasks.jsonl; context files under its folder")],
    host: Annotated[str, typer.Option(help="address to bind; anything but loopback lets others run code here")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 8000,
    split: Annotated[str | None, typer.Option(help="serve only this split")] = None,
    backend: Annotated[str, typer.Option(help="sandbox backend: process, docker or auto")] = "auto",
    max_turns: Annotated[int, typer.Option(min=1, help="actions per episode")] = EnvConfig().max_turns,
    exec_timeout: Annotated[float, typer.Option(min=0.1, help="seconds per run_code / inspect_data")] = EnvConfig().exec_timeout_s,
    max_sessions: Annotated[int, typer.Option(min=1, help="client sessions at once (each holds a sandbox)")] = 4,
) -> None:
    """An OpenEnv environment server (HTTP reset/step, WebSocket sessions for OpenEnv clients) over the tasks of
    FILE; sandbox and checker run here, and no response holds a task's answer."""
    from components.adapters.openenv_app import ServeConfig
    from components.adapters.openenv_app import serve as run_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if backend not in ("process", "docker", "auto"):
        raise typer.BadParameter("process, docker or auto", param_hint="--backend")
    settings = ServedTasks(tasks=tasks, split=split, backend=backend,
                           env=EnvConfig(max_turns=max_turns, exec_timeout_s=exec_timeout))
    run_server(settings, ServeConfig(host=host, port=port, max_sessions=max_sessions))
