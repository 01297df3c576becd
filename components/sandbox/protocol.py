"""The sandbox protocol: five methods, small enough to hold in your head (after rLLM's sandbox protocol).

Every backend enforces the deadline, the output cap and the cleanup itself; callers never need to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from components.sandbox.result import ExecResult, Status

__all__ = ["ExecResult", "Limits", "Sandbox", "Status"]

class Limits(BaseModel):
    """Resource limits applied to every execution."""

    timeout_s: float = Field(default=10.0, gt=0)
    memory_mb: int = Field(default=1024, gt=0)
    max_output_bytes: int = Field(default=64 * 1024, gt=0, description="cap for stdout and for stderr, each")
    max_processes: int = Field(default=64, gt=0)
    max_file_mb: int = Field(default=64, gt=0)
    max_open_files: int = Field(default=256, gt=0)
    disk_mb: int = Field(default=256, gt=0, description="bytes cap of the working dir and of /tmp, each (tmpfs)")
    max_files: int = Field(default=8192, gt=0, description="inode cap of the working dir and of /tmp, each")


@runtime_checkable
class Sandbox(Protocol):
    """An isolated place to run Python code.

    Stateless sandboxes give every `exec` a fresh interpreter; stateful ones keep variables between calls,
    as a notebook does. Files uploaded land in the sandbox's working directory, which code sees as its cwd.
    """

    def exec(self, code: str, timeout_s: float | None = None) -> ExecResult: ...

    def upload_file(self, src: Path, dest: str) -> None: ...

    def upload_dir(self, src: Path, dest: str) -> None: ...

    def close(self) -> None: ...

    def is_alive(self) -> bool:
        """Never raises."""
        ...
