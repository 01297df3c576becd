"""The sandbox supply rollouts draw from, one fresh sandbox per episode.

Starting a container costs a few hundred milliseconds, which would sit on every episode's critical path: the
docker backend keeps a pool of started containers (and reuses wiped ones). A `process` sandbox is a fork of the
zygote (about 10 ms), so it is started when asked for: sandboxes started ahead would only hold namespaces, a
cgroup and memory, and take CPU from the episodes beside them (bench/rollout.py measured it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from components.sandbox.factory import Backend, docker_backend_available
from components.sandbox.protocol import Limits, Sandbox


@contextlib.contextmanager
def sandbox_supply(backend: Backend = "auto", limits: Limits | None = None, stateful: bool = False,
                   warm: int = 2) -> Iterator[Callable[[], Sandbox]]:
    """A sandbox factory for many episodes: a pool of `warm` started containers for docker, forks of the zygote
    for process. Everything it started is gone when the block exits."""
    limits = limits or Limits()
    if backend == "auto":
        backend = "docker" if docker_backend_available() else "process"
    if backend == "docker":
        from components.sandbox.docker import DockerPool, DockerSandbox

        with DockerPool(limits, size=warm) as pool:
            yield lambda: DockerSandbox(limits, stateful=stateful, pool=pool)
    elif backend == "process":
        from components.sandbox.process import ProcessSandbox

        yield lambda: ProcessSandbox(limits, stateful=stateful)
    else:
        raise ValueError(f"unknown sandbox backend {backend!r}; expected process, docker or auto")
