"""The sandbox the calls-mode judge's tests check submissions in: the judge starts a fresh interpreter inside it, so
both backends must let it, and hold it as they hold the rest."""

from __future__ import annotations

import pytest

from components.sandbox.factory import open_sandbox
from tests.sandbox.conftest import require_backend

BACKENDS = ["process", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(scope="module", params=BACKENDS)
def sandbox(request):
    require_backend(request.param)
    box = open_sandbox(request.param)
    yield box
    box.close()
