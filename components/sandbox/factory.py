"""Pick a sandbox backend by name: `auto` prefers docker where an engine answers, else the process backend."""

from __future__ import annotations

from typing import Literal

from components.sandbox.protocol import Limits, Sandbox

Backend = Literal["process", "docker", "auto"]


def docker_backend_available() -> bool:
    """True when the docker backend module exists and a docker engine answers (never raises)."""
    try:
        from components.sandbox.docker import docker_available
    except ImportError:
        return False
    try:
        return bool(docker_available())
    except Exception:  # noqa: BLE001 - availability probes must not raise
        return False


def open_sandbox(backend: Backend = "auto", limits: Limits | None = None, stateful: bool = False) -> Sandbox:
    limits = limits or Limits()
    if backend == "auto":
        backend = "docker" if docker_backend_available() else "process"
    if backend == "docker":
        from components.sandbox.docker import DockerSandbox  # lazy: the docker SDK is only needed here

        return DockerSandbox(limits=limits, stateful=stateful)
    if backend == "process":
        from components.sandbox.process import ProcessSandbox

        return ProcessSandbox(limits=limits, stateful=stateful)
    raise ValueError(f"unknown sandbox backend {backend!r}; expected process, docker or auto")
