"""The OpenEnv server's packaging: the openenv extra and `make setup`, the image's Dockerfile and build script, the
image's package list against what the server really imports, and the image's ASGI factory."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from components.adapters.asgi import settings_from_env
from components.adapters.openenv_app import ServeConfig
from tests.conftest import ROOT
from tests.envs.conftest import process_backend_unavailable
from tests.test_infra import _instructions

HERE = ROOT / "infra" / "openenv"
DOCKERFILE = HERE / "Dockerfile"
MAKEFILE = (ROOT / "Makefile").read_text()
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;]+)$")


def requirements() -> dict[str, str]:
    lines = [ln.strip() for ln in (HERE / "requirements.txt").read_text().splitlines()]
    return dict(PIN.match(ln).groups() for ln in lines if ln and not ln.startswith("#"))


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_setup_installs_the_openenv_extra_and_openenv_core_without_its_dependencies():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["openenv"]
    assert re.search(r"\$\(INSTALL\) .*-e '\.\[dev,openenv\]'", MAKEFILE)
    core = re.search(r"\$\(INSTALL\) --no-deps .*(openenv-core==[\d.]+)", MAKEFILE).group(1)
    assert core == f"openenv-core=={md.version('openenv-core')}"
    for req in extra:  # each pinned as installed here
        name, version = PIN.match(req).groups()
        assert md.version(name) == version, req


def test_dockerfile_builds_from_the_sandbox_base_offline_and_serves_the_app():
    instructions = _instructions(DOCKERFILE)
    assert instructions[:2] == [("ARG", "BASE"), ("FROM", "${BASE}")]
    copied = [rest.split()[0] for word, rest in instructions if word == "COPY"]
    assert copied == ["site-packages/", "components/", "infra/sandbox/"]
    script = (HERE / "build_image.sh").read_text()
    for src in copied:  # the build script lays out each source in the context
        assert f'"$context/{src.rstrip("/")}"' in script
    assert "--network none" in script and "infra/sandbox/build_image.sh" in script and "--no-deps" in script
    assert subprocess.run(["bash", "-n", str(HERE / "build_image.sh")]).returncode == 0
    cmd = json.loads(dict(instructions)["CMD"])
    assert cmd[cmd.index("--factory") + 1] == "components.adapters.asgi:app_from_env"
    assert int(cmd[cmd.index("--ws-max-size") + 1]) == ServeConfig().max_message_bytes
    assert ("EXPOSE", "8000") in instructions and "/health" in dict(instructions)["HEALTHCHECK"]
    assert "MEDGYM_SANDBOX_BACKEND=docker" in dict(instructions)["ENV"], "agent code never runs in the server's container"


def test_the_images_packages_cover_what_the_server_imports(tasks_file: Path):
    """A fresh interpreter builds the app and plays an episode in-process; every distribution it imported is in
    requirements.txt at the version installed here (an import added to the server without its package fails this)."""
    reason = process_backend_unavailable()
    if reason:
        pytest.skip(reason)
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("closure_probe.py")), str(tasks_file)],
                         capture_output=True, text=True, timeout=240, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    imported = {norm(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}
    listed = {norm(k): v for k, v in requirements().items()}
    listed[norm("openenv-core")] = re.search(r"openenv-core==([\d.]+)", MAKEFILE).group(1)  # installed beside them
    assert {k: v for k, v in imported.items() if listed.get(k) != v} == {}


def test_the_images_app_factory_reads_its_settings_from_the_environment(tasks_file: Path):
    settings, config = settings_from_env({"MEDGYM_TASKS": str(tasks_file), "MEDGYM_MAX_TURNS": "3",
                                          "MEDGYM_MAX_SESSIONS": "2"})
    assert settings.backend == "docker" and settings.env.max_turns == 3 and config.max_sessions == 2
    with pytest.raises(SystemExit, match="MEDGYM_TASKS"):
        settings_from_env({})


@pytest.mark.docker
@pytest.mark.docker
@pytest.mark.timeout(900)
def test_the_image_builds_offline_and_its_server_answers_health(tasks_file):
    """infra/openenv/build_image.sh builds the image as users do (no registry: FROM the sandbox's debootstrapped
    base, `--network none`; its own RUN imports the app), and the server it starts answers /health inside it."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        if os.environ.get("MEDGYM_REQUIRE_DOCKER"):
            pytest.fail("MEDGYM_REQUIRE_DOCKER is set and no Docker engine answers")
        pytest.skip("no Docker engine answers")
    built = subprocess.run(["bash", str(HERE / "build_image.sh")], capture_output=True, text=True, timeout=840)
    assert built.returncode == 0, built.stderr[-3000:]
    image = built.stdout.strip().splitlines()[-1]
    probe = ("python3 -m uvicorn --factory components.adapters.asgi:app_from_env --host 127.0.0.1 --port 8000 "
             "--http h11 --ws websockets >/tmp/log 2>&1 & for i in $(seq 1 60); do python3 -c \"import urllib.request; "
             "print(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).read().decode())\" 2>/dev/null "
             "&& exit 0; sleep 1; done; cat /tmp/log; exit 1")
    run = subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{tasks_file.parent}:/tasks:ro", image,
                          "sh", "-c", probe], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0 and "healthy" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]

