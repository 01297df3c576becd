"""`medgym sandbox`: run a file of Python code in a sandbox and print the ExecResult as one JSON object."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from components.sandbox.protocol import ExecResult, Limits

app = typer.Typer(help="Run code in a MedGym sandbox (process or docker backend).", no_args_is_help=True)


class BackendChoice(StrEnum):
    process = "process"
    docker = "docker"
    auto = "auto"


@app.callback()
def _main() -> None:
    """Keep `run` a sub-command even while it is the only one."""


@app.command()
def run(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="Python file to run.")],
    backend: Annotated[BackendChoice, typer.Option(help="Sandbox backend.")] = BackendChoice.auto,
    timeout: Annotated[float, typer.Option(min=0.01, help="Deadline in seconds.")] = Limits().timeout_s,
    memory_mb: Annotated[int, typer.Option(min=1, help="Memory limit in MiB.")] = Limits().memory_mb,
    stateful: Annotated[bool, typer.Option(help="Keep one interpreter (notebook-like), not a fresh one.")] = False,
) -> None:
    """Run FILE and print exactly one JSON object: status, exit_code, stdout, stderr, truncated, duration_s."""
    from components.sandbox.factory import open_sandbox

    code = file.read_text(encoding="utf-8", errors="replace")
    limits = Limits(timeout_s=timeout, memory_mb=memory_mb)
    try:
        sb = open_sandbox(backend.value, limits=limits, stateful=stateful)
        try:
            result = sb.exec(code, timeout_s=timeout)
        finally:
            sb.close()
    except Exception as e:  # noqa: BLE001 - the contract is one JSON object on stdout, whatever happens
        result = ExecResult(
            status="error", exit_code=None, stdout="", stderr=f"[sandbox] {type(e).__name__}: {e}\n", duration_s=0.0
        )
        typer.echo(json.dumps(result.model_dump()))
        raise typer.Exit(2) from None
    typer.echo(json.dumps(result.model_dump()))


if __name__ == "__main__":
    app()
