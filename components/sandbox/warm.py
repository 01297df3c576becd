"""Sandboxes started ahead of time, so that an episode never waits for one to start.

Rollouts open one sandbox per episode. Starting one costs a few hundred milliseconds (a `process` runner imports
numpy and pandas; a container is created), which would otherwise sit on every episode's critical path.
`WarmSandboxes` keeps `size` starts in flight in the background and hands out the oldest; the caller closes what
it gets as usual. The docker backend's own pool goes further and reuses wiped containers.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from components.sandbox.factory import Backend, docker_backend_available
from components.sandbox.protocol import Limits, Sandbox


class WarmSandboxes:
    """A callable like a sandbox factory, whose sandboxes were started before they were asked for."""

    def __init__(self, factory: Callable[[], Sandbox], size: int = 2):
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self._factory = factory
        self._starter = ThreadPoolExecutor(max_workers=size, thread_name_prefix="warm-sandbox")
        self._pending: deque[Future[Sandbox]] = deque(self._starter.submit(factory) for _ in range(size))
        self._closed = False

    def __call__(self) -> Sandbox:
        if self._closed:
            raise RuntimeError("warm sandboxes are closed")
        ready = self._pending.popleft()
        self._pending.append(self._starter.submit(self._factory))
        box = ready.result()
        if not box.is_alive():  # died while waiting (killed from outside): start one now rather than fail
            box.close()
            box = self._factory()
        return box

    def close(self) -> None:
        """Close every sandbox started but not handed out."""
        self._closed = True
        for fut in self._pending:
            fut.cancel()
        self._starter.shutdown(wait=True)
        for fut in self._pending:
            if not fut.cancelled() and fut.exception() is None:
                fut.result().close()
        self._pending.clear()

    def __enter__(self) -> WarmSandboxes:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@contextlib.contextmanager
def sandbox_supply(backend: Backend = "auto", limits: Limits | None = None, stateful: bool = False,
                   warm: int = 2) -> Iterator[Callable[[], Sandbox]]:
    """A sandbox factory for many episodes: a pool of reused, wiped containers for docker, started-ahead
    runners for process. Everything it started is gone when the block exits."""
    limits = limits or Limits()
    if backend == "auto":
        backend = "docker" if docker_backend_available() else "process"
    if backend == "docker":
        from components.sandbox.docker import DockerPool, DockerSandbox

        with DockerPool(limits, size=warm) as pool:
            yield lambda: DockerSandbox(limits, stateful=stateful, pool=pool)
    elif backend == "process":
        from components.sandbox.process import ProcessSandbox

        with WarmSandboxes(lambda: ProcessSandbox(limits, stateful=stateful), size=warm) as supply:
            yield supply
    else:
        raise ValueError(f"unknown sandbox backend {backend!r}; expected process, docker or auto")
