"""The compose stack up for real (slow, docker): infra/compose/docker-compose.yml with its offline override, on images
built here without any registry (infra/docker/offline/build.sh), brought up under a project name of its own on free
loopback ports; a smoke run is submitted through it (`medgym serve --run-now` in a one-off container of the worker's
image, so the Prefect server hands the run to the stack's worker) and must reach a registered model in the stack's
MLflow, whose store is the stack's PostgreSQL and whose artifacts land in its S3 server.

Skips where no Docker engine or compose CLI answers, unless MEDGYM_REQUIRE_DOCKER=1 (CI), where it fails instead.
The fixture builds every missing image, cold on a clean machine (175 s on 2 cores: the deps layer is copied out of
this environment, infra/docker/offline/copy_packages.py). Timings go to the test's output (`-s`) and to its record
properties."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.servers import free_port, http_ok
from tests.test_infra import _compose_cli, _env_example

pytestmark = [pytest.mark.slow, pytest.mark.docker]

COMPOSE = ROOT / "infra" / "compose"
FILES = [COMPOSE / "docker-compose.yml", COMPOSE / "docker-compose.offline.yml"]
BUILD = ROOT / "infra" / "docker" / "offline" / "build.sh"
REGISTERED = "medgym-stack-smoke"
STACK_PROFILE = "/opt/medgym/data/stack-smoke.yaml"  # MEDGYM_DATA, a host folder here, is /opt/medgym/data there
UP_S = 420  # moto and both servers import for a minute or two each on a busy 2-core machine
RUN_S = 900


def _unavailable(reason: str) -> None:
    if os.environ.get("MEDGYM_REQUIRE_DOCKER") == "1":
        pytest.fail(f"MEDGYM_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


def _say(msg: str) -> None:
    print(f"[compose stack] {msg}", flush=True)


@dataclass
class Stack:
    compose: list[str]  # the compose command with project, env file and files
    env: dict[str, str]  # the env file's settings
    data: Path  # the host folder mounted at /opt/medgym/data
    timings: dict[str, float]

    def url(self, port_var: str) -> str:
        return f"http://127.0.0.1:{self.env[port_var]}"

    def run(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([*self.compose, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                             env=_clean_env())
        if check:
            assert out.returncode == 0, f"compose {' '.join(args)} exited {out.returncode}:\n{out.stderr[-4000:]}"
        return out


def _clean_env() -> dict[str, str]:
    """The caller's environment less what the env file sets: compose prefers the environment's values."""
    assigned, documented = _env_example()
    drop = set(assigned) | documented | {"MEDGYM_STACK_IMAGE", "MEDGYM_POSTGRES_IMAGE"}
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("COMPOSE_")}


@pytest.fixture(scope="module")
def compose_cmd() -> list[str]:
    if shutil.which("docker") is None:
        _unavailable("no docker CLI on PATH (bash infra/ci/install_docker.sh installs one)")
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        _unavailable(f"no Docker engine answers: {info.stderr.strip()[:300]}")
    cmd, detail = _compose_cli()
    if cmd is None:
        _unavailable(f"no compose CLI answers: {detail}")
    return cmd


@pytest.fixture(scope="module")
def images(compose_cmd: list[str]) -> tuple[dict[str, str], float]:
    """The stack's images (build.sh's env lines) and the seconds their build took (warm: seconds). The sandbox
    image too: the worker's docker backend starts it on this engine."""
    started = time.monotonic()
    out = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3600, cwd=ROOT)
    assert out.returncode == 0, f"{BUILD} exited {out.returncode}:\n{out.stderr[-4000:]}"
    took = time.monotonic() - started
    _say(f"images in {took:.1f} s:\n{out.stderr.strip()}")
    sandbox = subprocess.run(["bash", str(ROOT / "infra" / "sandbox" / "build_image.sh")], capture_output=True,
                             text=True, timeout=3600, cwd=ROOT)
    assert sandbox.returncode == 0, sandbox.stderr[-4000:]
    return dict(line.split("=", 1) for line in out.stdout.split()), took


@pytest.fixture(scope="module")
def stack(compose_cmd: list[str], images: tuple[dict[str, str], float], tmp_path_factory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    data = tmp / "data"
    data.mkdir()
    assigned, _ = _env_example()
    env = {**assigned, **images[0],
           "COMPOSE_PROJECT_NAME": f"medgym-test-{secrets.token_hex(4)}",
           "POSTGRES_PASSWORD": secrets.token_hex(12), "MINIO_ROOT_PASSWORD": secrets.token_hex(12),
           "BIND_ADDRESS": "127.0.0.1", "MEDGYM_DATA": str(data),
           **{k: str(free_port()) for k in ("MLFLOW_PORT", "PREFECT_PORT", "MINIO_PORT", "MINIO_CONSOLE_PORT")}}
    env_file = tmp / "stack.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    cmd = [*compose_cmd, "--project-name", env["COMPOSE_PROJECT_NAME"], "--env-file", str(env_file),
           *[a for f in FILES for a in ("-f", str(f))]]
    s = Stack(cmd, env, data, {"images_s": images[1]})
    started = time.monotonic()
    try:
        # v1 and v2 both start a service once what it depends on is healthy (or, for minio-buckets, done)
        s.run("up", "-d", "--no-build", timeout=UP_S)
        deadline = time.monotonic() + UP_S
        checks = {"mlflow": http_ok(s.url("MLFLOW_PORT") + "/health"),
                  "prefect": http_ok(s.url("PREFECT_PORT") + "/api/health"), "worker": lambda: _healthy(s, "prefect-worker")}
        while checks and time.monotonic() < deadline:
            checks = {k: c for k, c in checks.items() if not c()}
            time.sleep(2)
        assert not checks, f"not up after {UP_S} s: {sorted(checks)}\n{_logs(s)}"
        s.timings["up_s"] = time.monotonic() - started
        _say(f"stack up in {s.timings['up_s']:.1f} s")
        yield s
    finally:
        s.run("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout=300, check=False)


def _healthy(s: Stack, service: str) -> bool:
    cid = s.run("ps", "-q", service, check=False).stdout.strip()
    if not cid:
        return False
    state = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", cid], capture_output=True, text=True)
    return state.stdout.strip() == "healthy"


def _logs(s: Stack) -> str:
    return s.run("logs", "--no-color", "--tail", "40", check=False).stdout[-8000:]


def _stack_profile() -> dict:
    """configs/smoke.yaml cut to the shortest chain that registers a model (teacher, base, SFT, SFT on test,
    leaderboard, registration), its sandboxes on the host's engine: the worker container has no namespaces of its
    own to give the process backend. Its data paths are absolute, under the image's /opt/medgym volumes, which the
    host mounts to read the results."""
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    rollouts = raw["rollouts"]
    raw.update(profile="stack-smoke", registry={"name": REGISTERED}, pipeline={},
               training={"base_model": raw["training"]["base_model"], "sft": raw["training"]["sft"]},
               rollouts={"teacher": rollouts["teacher"], "base": rollouts["base"],
                         "sft_test": {**rollouts["dpo_test"], "policy": {"backend": "hf", "options": {"model": {"stage": "sft"}}}}})
    raw["sandbox"]["backend"] = "docker"
    home = "/opt/medgym"
    raw["data"]["out_dir"] = f"{home}/data/stack-smoke"  # rollouts go beside it, in data/rollouts/
    raw["training"].update(out_dir=f"{home}/models", data_dir=f"{home}/data/training")
    raw["pipeline"] = {"state_dir": f"{home}/.state/pipeline", "reports_dir": f"{home}/reports"}
    raw["tracking"]["experiment"] = "stack-smoke"  # the URI: MEDGYM_MLFLOW_URI, the stack's server
    return raw


def test_a_smoke_run_submitted_through_the_stack_reaches_a_registered_model(stack: Stack, record_property) -> None:
    import boto3
    from mlflow.tracking import MlflowClient

    (stack.data / "stack-smoke.yaml").write_text(yaml.safe_dump(_stack_profile(), sort_keys=False))
    started = time.monotonic()
    out = stack.run("run", "--rm", "--no-deps", "--entrypoint", "medgym", "prefect-worker", "serve",
                    "--profile", STACK_PROFILE, "--work-pool", "medgym-process", "--run-now", timeout=RUN_S, check=False)
    stack.timings["smoke_run_s"] = time.monotonic() - started
    assert out.returncode == 0, f"the smoke run failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}\n{_logs(stack)}"
    result = json.loads(out.stdout[out.stdout.index("{"):])
    assert result["state"] == "COMPLETED" and result["work_pool"] == "medgym-process", result

    # the run was the worker's: the Prefect server hands it out, the one-off container only waited for it
    with urllib.request.urlopen(f"{stack.url('PREFECT_PORT')}/api/flow_runs/{result['flow_run_id']}", timeout=30) as r:
        flow_run = json.load(r)
    assert flow_run["work_pool_name"] == "medgym-process" and flow_run["state_type"] == "COMPLETED"
    workers = stack.run("logs", "--no-color", "prefect-worker").stdout
    assert result["flow_run_id"] in workers, "the stack's worker never mentions the flow run"

    # a registered version, through the stack's MLflow server
    client = MlflowClient(stack.url("MLFLOW_PORT"))
    versions = client.search_model_versions(f"name = '{REGISTERED}'")
    assert [v.version for v in versions] == ["1"], versions
    model = client.get_registered_model(REGISTERED)
    assert set(model.aliases) & {"champion", "challenger"}, model.aliases
    assert versions[0].run_id and client.get_run(versions[0].run_id).info.status == "FINISHED"

    # its files in the S3 server, by the server's hand (--serve-artifacts: the client holds no S3 credentials)
    s3 = boto3.client("s3", endpoint_url=stack.url("MINIO_PORT"), region_name="us-east-1",
                      aws_access_key_id=stack.env["MINIO_ROOT_USER"], aws_secret_access_key=stack.env["MINIO_ROOT_PASSWORD"])
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.env["MLFLOW_BUCKET"])
            for o in page.get("Contents", [])]
    assert any(k.endswith("MLmodel") for k in keys), keys[:20]

    # and the registry in PostgreSQL, the MLflow server's backend store
    sql = stack.run("exec", "-T", "postgres", "psql", "-U", stack.env["POSTGRES_USER"], "-d", stack.env["MLFLOW_DB"],
                    "-tAc", "SELECT name, version FROM model_versions").stdout.split()
    assert sql == [f"{REGISTERED}|1"], sql

    for k, v in stack.timings.items():
        record_property(k, round(v, 1))
    _say("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in stack.timings.items()))
