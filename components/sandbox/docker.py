"""The docker sandbox backend: each sandbox is one locked-down container running the warm runner.

Containers have no network, a read-only root, tmpfs /work and /tmp capped in bytes and inodes, memory/CPU/pid
limits, nofile/fsize ulimits, a non-root user, no capabilities, no-new-privileges, Docker's seccomp profile with the
runner's own filter on top (components/sandbox/runner.py, the program both backends run), and no log driver. The
runner enforces the deadline and the output cap; the host keeps a backstop deadline and bounds every read. A
container serves one sandbox only and is removed when it closes (a pool keeps fresh ones started); one that timed
out, lost its runner or broke the protocol is replaced at the next `exec` (stateful state is then lost and the
result says so).
"""

from __future__ import annotations

import time
from pathlib import Path

from components.sandbox.channel import (
    UPLOAD_TIMEOUT_S,
    ChannelClosed,
    ChannelError,
    check_put_reply,
    dir_uploads,
    exec_header,
    exec_result,
    max_exec_reply,
    put_header,
)
from components.sandbox.docker_container import RunnerContainer, docker_client
from components.sandbox.docker_image import default_image
from components.sandbox.docker_pool import DockerPool
from components.sandbox.docker_reaper import reap_orphans
from components.sandbox.protocol import ExecResult, Limits

__all__ = ["DEFAULT_IMAGE", "DockerPool", "DockerSandbox", "docker_available", "reap_orphans"]

DEFAULT_IMAGE = default_image()
DEFAULT_LIMITS = Limits()
BACKSTOP_GRACE_S = 5.0  # the runner answers right at its deadline; this covers kill and drain time


def docker_available(image: str = DEFAULT_IMAGE) -> bool:
    """An engine answers and has `image`. Never raises; fails fast when no daemon socket exists."""
    try:
        client = docker_client(timeout_s=5)
        try:
            client.ping()
            client.images.get(image)
            return True
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - availability probes must not raise
        return False


class DockerSandbox:
    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        stateful: bool = False,
        image: str = DEFAULT_IMAGE,
        pool: DockerPool | None = None,
        cpus: float = 1.0,
    ) -> None:
        if pool is not None and (pool.limits != limits or pool.image != image):
            raise ValueError(
                f"pool serves limits={pool.limits!r} image={pool.image!r}, "
                f"sandbox wants limits={limits!r} image={image!r}"
            )
        self.limits = limits
        self.stateful = stateful
        self.image = image
        self.cpus = cpus
        self._pool = pool
        self._client = pool.client if pool is not None else docker_client()
        self._box: RunnerContainer | None = self._new_box()
        self._lost_state: str | None = None
        self._closed = False

    # ---- container bookkeeping ---------------------------------------------------------------------------
    def _new_box(self) -> RunnerContainer:
        if self._pool is not None:
            return self._pool.acquire()
        return RunnerContainer.create(self._client, self.image, self.limits, self.cpus)

    def _drop_box(self) -> None:
        box, self._box = self._box, None
        if box is None:
            return
        if self._pool is not None:
            self._pool.release(box)
        else:
            box.destroy()

    def _live_box(self) -> RunnerContainer:
        if self._closed:
            raise RuntimeError("sandbox is closed")
        if self._box is None or self._box.dead:
            self._drop_box()
            self._box = self._new_box()
        return self._box

    # ---- the protocol ------------------------------------------------------------------------------------
    def exec(self, code: str, timeout_s: float | None = None) -> ExecResult:
        timeout = float(timeout_s if timeout_s is not None else self.limits.timeout_s)
        cap = self.limits.max_output_bytes
        box = self._live_box()
        notice = ""
        if self._lost_state and self.stateful:
            notice = f"[sandbox] the previous interpreter was lost ({self._lost_state}); state was reset\n"
        self._lost_state = None
        start = time.monotonic()
        try:
            reply = box.request(exec_header(code, timeout, self.stateful, cap), timeout_s=timeout + BACKSTOP_GRACE_S,
                                max_reply=max_exec_reply(cap))
        except ChannelError as exc:
            return self._lost(box, exc, time.monotonic() - start)
        try:
            return exec_result(reply, notice)
        except ChannelError as exc:
            return ExecResult(status="error", exit_code=None, stdout="", stderr=f"[sandbox] {exc}\n",
                              duration_s=time.monotonic() - start)

    def _lost(self, box: RunnerContainer, exc: ChannelError, duration: float) -> ExecResult:
        """The runner did not answer: the container is gone or is being killed now."""
        oom = box.oom_killed()
        box.destroy()
        if isinstance(exc, ChannelClosed):
            status, reason = ("oom", "out of memory") if oom else ("error", "the sandbox process was killed")
        else:
            status, reason = "timeout", "no answer before the deadline"
        self._lost_state = reason
        return ExecResult(
            status=status,
            exit_code=None,
            stdout="",
            stderr=f"[sandbox] {reason}; container replaced\n",
            duration_s=duration,
        )

    def upload_file(self, src: Path, dest: str) -> None:
        self._put(Path(src), dest)

    def upload_dir(self, src: Path, dest: str) -> None:
        for path, to in dir_uploads(src, dest):
            self._put(path, to)

    def _put(self, src: Path, dest: str) -> None:
        header = put_header(dest, src.stat().st_mode)
        box = self._live_box()
        try:
            reply = box.request(header, src.read_bytes(), timeout_s=UPLOAD_TIMEOUT_S, max_reply=64 * 1024)
        except ChannelError as exc:
            box.destroy()
            raise OSError(f"upload of {dest!r} failed: {exc}") from exc
        check_put_reply(reply, dest)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        box, self._box = self._box, None
        if box is None:
            return
        if self._pool is not None:
            self._pool.release(box)
        else:
            box.destroy()

    def is_alive(self) -> bool:
        try:
            if self._closed or self._box is None or self._box.dead:
                return False
            self._box.request({"op": "ping"}, timeout_s=5.0, max_reply=1024)
            return True
        except Exception:  # noqa: BLE001 - is_alive never raises
            return False

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

