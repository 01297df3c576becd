"""The host's side of the runner protocol (components/sandbox/runner.py), shared by both backends.

Requests and answers are length-framed JSON (a request may carry raw bytes after its header). Every read is
bounded in size and in time; anything else the runner sends is a protocol error, never a result.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from components.sandbox.protocol import ExecResult

WORKDIR = "/work"  # where code runs and uploads land, in both backends
UPLOAD_TIMEOUT_S = 120.0


class ChannelError(RuntimeError):
    """The runner broke the protocol, went away, or did not answer in time."""


class ChannelTimeout(ChannelError):
    pass


class ChannelClosed(ChannelError):
    pass


def encode_request(header: dict[str, Any], payload: bytes = b"") -> bytes:
    data = json.dumps({**header, "size": len(payload)}).encode()
    return struct.pack(">I", len(data)) + data + payload


class FrameBuffer:
    """Accumulates bytes from the runner and yields whole messages."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def message(self, max_bytes: int) -> dict | None:
        """The next whole message, or None if more bytes are needed."""
        if len(self._buf) < 4:
            return None
        (length,) = struct.unpack(">I", self._buf[:4])
        if length > max_bytes:
            raise ChannelError(f"runner message of {length} bytes exceeds {max_bytes}")
        if len(self._buf) < 4 + length:
            return None
        body = bytes(self._buf[4 : 4 + length])
        del self._buf[: 4 + length]
        try:
            msg = json.loads(body)
        except ValueError as exc:
            raise ChannelError(f"runner sent a malformed message: {exc}") from exc
        if not isinstance(msg, dict):
            raise ChannelError("runner sent a message that is not an object")
        return msg


def exec_header(code: str, timeout_s: float, stateful: bool, max_output: int) -> dict[str, Any]:
    return {"op": "exec", "code": code, "timeout": timeout_s, "stateful": stateful, "max_output": max_output}


def max_exec_reply(max_output: int) -> int:
    return 4 * max_output + 64 * 1024  # two base64-encoded streams plus the envelope


def exec_result(reply: dict, notice: str = "") -> ExecResult:
    """The runner's answer to `exec` as an ExecResult; output bytes are decoded, invalid UTF-8 replaced."""
    if "status" not in reply:
        raise ChannelError(f"runner failure: {reply.get('error')}")
    return ExecResult(
        status=reply["status"],
        exit_code=reply["exit_code"],
        stdout=_decode(reply["stdout"]),
        stderr=notice + _decode(reply["stderr"]),
        truncated=bool(reply["truncated"]),
        duration_s=float(reply["duration"]),
    )


def _decode(b64: str) -> str:
    return base64.b64decode(b64).decode("utf-8", "replace")


def put_header(dest: str, mode: int) -> dict[str, Any]:
    """The `put` request for an upload to `dest` (relative to /work, or under it); anything outside is refused."""
    rel = dest[len(WORKDIR) + 1 :] if dest.startswith(WORKDIR + "/") else dest
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in parts or not parts:
        raise ValueError(f"upload destination {dest!r} is outside the sandbox working dir ({WORKDIR})")
    return {"op": "put", "path": rel, "mode": mode & 0o777}


def dir_uploads(src: Path, dest: str) -> Iterator[tuple[Path, str]]:
    """(file, destination) for every regular file under `src`; links on the host side are not followed either."""
    src = Path(src)
    if not src.is_dir():
        raise NotADirectoryError(f"upload_dir: {src} is not a directory")
    for path in sorted(src.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path, f"{dest.rstrip('/')}/{path.relative_to(src).as_posix()}"


def check_put_reply(reply: dict, dest: str) -> None:
    if not reply.get("ok"):
        raise OSError(f"upload of {dest!r} failed: {reply.get('error')}")
