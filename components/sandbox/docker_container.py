"""One sandbox container and the framed channel to the runner inside it (components/sandbox/runner.py).

The host talks to the runner over the container's attach stream: requests go to its stdin, answers come back
multiplexed on stdout. The container is created with StdinOnce and auto-remove, so when the owning process
dies -- even by SIGKILL -- the daemon closes the runner's stdin, the runner exits and the container is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import time
from typing import Any

import docker
import docker.errors
from docker.types import Ulimit

from components.sandbox.channel import (
    WORKDIR,
    ChannelClosed,
    ChannelError,
    ChannelTimeout,
    FrameBuffer,
    encode_request,
)
from components.sandbox.protocol import PIDS_OVERHEAD, RUNNER_OVERHEAD_MB, Limits

__all__ = ["ChannelClosed", "ChannelError", "ChannelTimeout", "RunnerContainer", "docker_client"]

LABEL = "medgym.sandbox"
LABEL_OWNER_PID = "medgym.owner_pid"
LABEL_OWNER_START = "medgym.owner_start"
LABEL_OWNER_HOST = "medgym.owner_host"

SANDBOX_USER = "1000:1000"
STARTUP_TIMEOUT_S = 60.0
MAX_RUNNER_STDERR = 8192


def docker_client(timeout_s: float = 30.0) -> docker.DockerClient:
    # "auto" negotiates down to what the engine speaks (Debian's docker.io 20.10 tops out at API 1.41).
    return docker.from_env(version="auto", timeout=int(max(1, timeout_s)))


def process_start_ticks(pid: int) -> str | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat): tells pid reuse apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()[19].decode()


def owner_labels() -> dict[str, str]:
    pid = os.getpid()
    return {
        LABEL: "1",
        LABEL_OWNER_PID: str(pid),
        LABEL_OWNER_START: process_start_ticks(pid) or "",
        LABEL_OWNER_HOST: socket.gethostname(),
    }


def _host_config(api: docker.APIClient, limits: Limits, cpus: float) -> dict[str, Any]:
    mem = (limits.memory_mb + RUNNER_OVERHEAD_MB) * 1024 * 1024
    fsize = limits.max_file_mb * 1024 * 1024
    caps = f"size={limits.disk_mb}m,nr_inodes={limits.max_files}"  # tmpfs pages count against the memory limit too
    return api.create_host_config(
        network_mode="none",
        read_only=True,
        tmpfs={
            WORKDIR: f"rw,nosuid,nodev,{caps},uid=1000,gid=1000,mode=0700",
            "/tmp": f"rw,nosuid,nodev,{caps},mode=1777",
        },
        # No log driver: the runner speaks over the attach stream, and a program that prints without end must not
        # fill the host's disk through the daemon's log files.
        log_config={"type": "none", "config": {}},
        shm_size="16m",
        mem_limit=mem,
        memswap_limit=mem,  # no swap: hitting the limit is an OOM kill, not a slowdown
        nano_cpus=int(cpus * 1e9),
        pids_limit=limits.max_processes + PIDS_OVERHEAD,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        ulimits=[
            Ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files),
            Ulimit(name="fsize", soft=fsize, hard=fsize),
            Ulimit(name="core", soft=0, hard=0),
        ],
        auto_remove=True,
        ipc_mode="private",
    )


class RunnerContainer:
    """A started container whose runner has said it is ready. Not thread-safe: one caller at a time."""

    def __init__(self, client: docker.DockerClient, container_id: str, sock: Any) -> None:
        self.client = client
        self.id = container_id
        self._sockio = sock  # keeps the HTTP response (and so the connection) referenced
        self._sock: socket.socket = getattr(sock, "_sock", sock)
        self._frames = bytearray()  # undecoded multiplexed stream
        self._out = FrameBuffer()  # runner stdout: our framed messages
        self._err = bytearray()  # runner stderr: diagnostics only, bounded
        self._next_id = 0
        self.dead = False
        self.since = int(time.time()) - 1  # for the engine's event log: an OOM kill of any process in it

    # ---- lifecycle -----------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        client: docker.DockerClient,
        image: str,
        limits: Limits,
        cpus: float = 1.0,
        lifetime_s: float = 7200.0,
    ) -> RunnerContainer:
        api = client.api
        cfg = {"limits": limits.model_dump(), "lifetime_s": lifetime_s}
        created = api.create_container(
            image,
            command=["container", json.dumps(cfg)],
            user=SANDBOX_USER,
            working_dir=WORKDIR,
            stdin_open=True,
            detach=False,  # with stdin_open this sets StdinOnce: our socket closing closes the runner's stdin
            tty=False,
            network_disabled=True,
            labels=owner_labels(),
            host_config=_host_config(api, limits, cpus),
        )
        cid = created["Id"]
        try:
            # Attach before start so no output is missed and StdinOnce ties the container's life to this socket.
            sock = api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            box = cls(client, cid, sock)
            api.start(cid)
            ready = box._read_message(time.monotonic() + STARTUP_TIMEOUT_S, 1024)
            if not ready.get("ready"):
                raise ChannelError(f"runner sent {ready!r} instead of ready")
        except BaseException:
            _force_remove(client, cid)
            raise
        return box

    def destroy(self) -> None:
        """Close the channel (the runner exits on EOF) and remove the container now. Never raises."""
        self.dead = True
        with contextlib.suppress(OSError):
            self._sock.close()
        # The reaper and the container's own exit on stdin EOF are the backstops if this fails.
        with contextlib.suppress(Exception):
            _force_remove(self.client, self.id)

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a process of this container. The engine's event log, not the container's
        state: State.OOMKilled is set only once the engine has handled the exit, and auto-remove may take the
        container first (the runner killed after the code's tmpfs filled the memory limit)."""
        with contextlib.suppress(Exception):  # auto-remove may already have taken it
            if self.client.api.inspect_container(self.id)["State"].get("OOMKilled"):
                return True
        try:
            events = self.client.api.events(since=self.since, until=int(time.time()) + 1, decode=True,
                                            filters={"container": self.id, "event": "oom"})
            return any(True for _ in events)
        except Exception:  # noqa: BLE001 - no event log: no evidence of an OOM kill
            return False

    # ---- requests ------------------------------------------------------------------------------
    def request(self, header: dict[str, Any], payload: bytes = b"", *, timeout_s: float, max_reply: int) -> dict:
        """Send one request, wait for its answer. Any ChannelError leaves the container dead."""
        if self.dead:
            raise ChannelClosed("container already gone")
        self._next_id += 1
        deadline = time.monotonic() + timeout_s
        try:
            self._sock.settimeout(max(0.001, timeout_s))
            self._sock.sendall(encode_request({**header, "id": self._next_id}, payload))
            reply = self._read_message(deadline, max_reply)
        except (OSError, ValueError) as exc:
            self.dead = True
            raise ChannelClosed(f"runner channel failed: {exc}{self.runner_stderr()}") from exc
        except ChannelError:
            self.dead = True
            raise
        if reply.get("id") != self._next_id:
            self.dead = True
            raise ChannelError(f"answer to request {reply.get('id')} while waiting for {self._next_id}")
        return reply

    def runner_stderr(self) -> str:
        return f"; runner stderr: {self._err.decode(errors='replace')}" if self._err else ""

    def _read_message(self, deadline: float, max_bytes: int) -> dict:
        while True:
            msg = self._out.message(max_bytes)
            if msg is not None:
                return msg
            self._read_some(deadline)

    def _read_some(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ChannelTimeout("runner did not answer in time")
        self._sock.settimeout(left)
        try:
            chunk = self._sock.recv(1 << 16)
        except TimeoutError as exc:
            raise ChannelTimeout("runner did not answer in time") from exc
        if not chunk:
            raise ChannelClosed(f"runner closed the stream{self.runner_stderr()}")
        self._frames += chunk
        # Docker's multiplexed stream: [stream, 0, 0, 0, size (4 bytes BE)] + payload.
        while len(self._frames) >= 8:
            stream = self._frames[0]
            (size,) = struct.unpack(">I", self._frames[4:8])
            if len(self._frames) < 8 + size:
                break
            data = self._frames[8 : 8 + size]
            del self._frames[: 8 + size]
            if stream == 1:
                self._out.feed(data)
            elif len(self._err) < MAX_RUNNER_STDERR:
                self._err += data[: MAX_RUNNER_STDERR - len(self._err)]


def _force_remove(client: docker.DockerClient, cid: str) -> None:
    try:
        client.api.remove_container(cid, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: auto-remove is already removing it
            raise
