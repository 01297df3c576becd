"""A warm pool of sandbox containers: created ahead of time, handed out only when they answer, used by one sandbox
each, and refilled in the background.

A used container is never handed on: whatever the last tenant left (files and modes in any tmpfs, SysV or POSIX IPC
objects, processes) goes with it, since it is removed, in the background, when its sandbox closes.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import docker

from components.sandbox.docker_container import ChannelError, RunnerContainer, docker_client
from components.sandbox.docker_image import default_image
from components.sandbox.docker_reaper import reap_orphans
from components.sandbox.protocol import Limits

DEFAULT_LIMITS = Limits()
PING_TIMEOUT_S = 5.0


class DockerPool:
    """Keeps `size` idle containers ready for sandboxes with these exact limits.

    `start()` reaps orphans of dead owners, then fills the pool; `acquire()` never waits for the filler:
    with no idle container it creates one on the spot (a cold start).
    """

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        size: int = 2,
        image: str | None = None,
        cpus: float = 1.0,
        lifetime_s: float = 7200.0,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.limits = limits
        self.size = size
        self.image = image or default_image()
        self.cpus = cpus
        self.lifetime_s = lifetime_s
        self.client = client or docker_client()
        self._idle: list[RunnerContainer] = []
        self._lock = threading.Condition()
        self._closed = False
        self._filler: threading.Thread | None = None
        self._remover = ThreadPoolExecutor(max_workers=1, thread_name_prefix="medgym-docker-remove")
        self.reaped = 0

    def start(self) -> DockerPool:
        self.reaped = reap_orphans(self.client)
        self._filler = threading.Thread(target=self._fill, name="medgym-docker-pool", daemon=True)
        self._filler.start()
        return self

    def __enter__(self) -> DockerPool:
        return self.start() if self._filler is None else self

    def __exit__(self, *_: object) -> None:
        self.close()

    def create(self) -> RunnerContainer:
        return RunnerContainer.create(self.client, self.image, self.limits, self.cpus, self.lifetime_s)

    def _fill(self) -> None:
        while True:
            with self._lock:
                while not self._closed and len(self._idle) >= self.size:
                    self._lock.wait()
                if self._closed:
                    return
            try:
                box = self.create()
            except Exception:  # noqa: BLE001 - engine hiccup: acquire() falls back to cold starts
                with self._lock:
                    self._lock.wait(timeout=5.0)
                continue
            with self._lock:
                if self._closed:
                    box.destroy()
                    return
                self._idle.append(box)
                self._lock.notify_all()

    def wait_ready(self, timeout_s: float = 120.0) -> bool:
        """Block until the pool holds `size` idle containers (for benchmarks and tests)."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._idle) >= self.size or self._closed, timeout=timeout_s)

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    def acquire(self) -> RunnerContainer:
        """A live container: an idle one that answers a ping, else a freshly created one."""
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("pool is closed")
                box = self._idle.pop() if self._idle else None
                self._lock.notify_all()  # wake the filler
            if box is None:
                return self.create()
            try:
                box.request({"op": "ping"}, timeout_s=PING_TIMEOUT_S, max_reply=1024)
                return box
            except ChannelError:
                box.destroy()

    def release(self, box: RunnerContainer) -> None:
        """Take a used container back: it is removed in the background, never handed to anyone else."""
        box.dead = True
        try:
            self._remover.submit(box.destroy)
        except RuntimeError:  # the pool is closing: remove it now
            box.destroy()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._lock.notify_all()
        for box in idle:
            box.destroy()
        self._remover.shutdown(wait=True)
        if self._filler is not None:
            self._filler.join(timeout=60)
