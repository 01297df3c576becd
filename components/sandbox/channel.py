"""The host's side of the runner protocol (components/sandbox/runner.py), shared by both backends.

Requests and answers are length-framed JSON (a request may carry raw bytes after its header). Every read is
bounded in size and in time; anything else the runner sends is a protocol error, never a result.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from components.sandbox.protocol import ExecResult


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
