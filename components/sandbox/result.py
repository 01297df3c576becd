"""What one execution in a sandbox gave: a record of its own, so that what reads it (an episode's turns, feedback)
depends on this record and not on the sandboxes that make it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Status = Literal["ok", "error", "timeout", "oom"]


class ExecResult(BaseModel):
    status: Status
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool = False  # stdout or stderr was cut at max_output_bytes
    duration_s: float
