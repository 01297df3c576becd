"""components/tracking against a real MLflow server on PostgreSQL: a throwaway cluster (Debian's postgresql, run
as `nobody`) on a free loopback port, `mlflow server` on it with proxied artifacts; runs, metrics, artifacts,
a registered model version and its alias go through the server and are read back, from MLflow and from the
database itself. Skipped when postgres or psycopg2 is absent, unless MEDGYM_REQUIRE_SERVERS=1 (CI)."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import free_port, http_ok, running

pytestmark = pytest.mark.slow

REQUIRE = os.environ.get("MEDGYM_REQUIRE_SERVERS") == "1"
STARTUP_S = 300  # mlflow migrates a fresh database before it answers; slow on a busy 2-core machine
PG_USER = "nobody"  # postgres refuses to run as root


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"{reason} (MEDGYM_REQUIRE_SERVERS=1: CI must test MLflow on PostgreSQL)")
    pytest.skip(reason)


def _pg_bin() -> Path | None:
    def version(initdb: str) -> tuple[int, ...]:  # /usr/lib/postgresql/<version>/bin/initdb
        return tuple(int(x) for x in Path(initdb).parents[1].name.split(".") if x.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    return Path(found[-1]).parent if found else None


def _as_pg(*cmd: str | Path) -> subprocess.CompletedProcess:
    res = subprocess.run(["runuser", "-u", PG_USER, "--", *map(str, cmd)], capture_output=True, text=True,
                         timeout=STARTUP_S)
    if res.returncode:
        raise RuntimeError(f"{cmd[0]} failed ({res.returncode}): {res.stdout[-2000:]}{res.stderr[-2000:]}")
    return res


@contextlib.contextmanager
def _postgres() -> Iterator[str]:
    """A fresh cluster in a temporary folder owned by the unprivileged user; yields the database URI."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        _unavailable("PostgreSQL is not installed (apt-get install postgresql: /usr/lib/postgresql/*/bin)")
    if os.geteuid() == 0:
        try:
            pg_uid = pwd.getpwnam(PG_USER).pw_uid
        except KeyError:
            _unavailable(f"no user {PG_USER!r} to run postgres as")
    if importlib.util.find_spec("psycopg2") is None:
        _unavailable("psycopg2 is not installed (pip install psycopg2-binary): MLflow's PostgreSQL driver")
    root = Path(tempfile.mkdtemp(prefix="medgym-pg-"))  # under /tmp: reachable by the postgres user
    data, port = root / "data", free_port()
    if os.geteuid() == 0:
        os.chown(root, pg_uid, -1)
    run = _as_pg if os.geteuid() == 0 else (lambda *c: subprocess.run(list(map(str, c)), check=True,
                                                                         capture_output=True))
    try:
        run(bin_dir / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        run(bin_dir / "pg_ctl", "-D", data, "-l", root / "postgres.log", "-o", options, "-w", "-t", "120", "start")
        try:
            import psycopg2

            conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("CREATE DATABASE mlflow")
            conn.close()
            # the driver named: SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3, not psycopg2
            yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/mlflow"
        finally:
            run(bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with _postgres() as uri:
        yield uri


@pytest.fixture(scope="module")
def mlflow_server(postgres: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("mlflow-server")
    artifacts, port, log = tmp / "artifacts", free_port(), tmp / "server.log"
    cmd = [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", postgres,
           "--artifacts-destination", str(artifacts), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    url = f"http://127.0.0.1:{port}"
    with running("mlflow server", cmd, log, http_ok(f"{url}/health"), STARTUP_S, env=env):
        yield {"url": url, "artifacts": artifacts, "db": postgres}


@pytest.fixture()
def restore_mlflow_uri(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """training_run sets MLflow's process-wide tracking URI; the tests after this one keep theirs."""
    from mlflow.tracking._tracking_service import utils

    import mlflow

    previous = utils._tracking_uri
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    yield
    mlflow.set_tracking_uri(previous)


def _query(db: str, sql: str, *args) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(db.replace("+psycopg2", ""))
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


def test_tracking_and_registry_on_postgres(mlflow_server: dict, tmp_path: Path, restore_mlflow_uri: None) -> None:
    from mlflow.tracking import MlflowClient

    import mlflow
    from components.tracking.tracker import MlflowTracker, TrackingConfig
    from components.tracking.training import training_run

    url, db = mlflow_server["url"], mlflow_server["db"]
    config = TrackingConfig(mlflow_uri=url, experiment="medgym-postgres")
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"pass@1": 0.75}))

    # a stage's run through the Tracker protocol
    tracker = MlflowTracker(config)
    with tracker.run("solvability-test") as run:
        run.set_tags({"medgym.stage": "data.solvability", "medgym.profile": "smoke"})  # the tags every stage sets
        run.log_params({"split": "test", "limits": {"timeout_s": 30}})
        run.log_metrics({"rate": 0.5})
        run.log_metrics({"rate": 1.0}, step=1)
        run.log_artifact(report)
        stage_run_id = run.run_id

    # a training run through the fluent API, with a model folder to register
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    with training_run(config, "sft-test", system_metrics=False) as train:
        train.log_params({"lr": 1e-4, "epochs": 1})
        for step, loss in enumerate([2.0, 1.5, 1.2]):
            train.log_metrics({"train_loss": loss}, step=step)
        train.log_artifact(report, artifact_path="eval")
        train.mlflow.log_artifacts(str(model_dir), artifact_path="model")
        train_run_id = train.run_id

    client = MlflowClient(tracking_uri=url)
    stage = client.get_run(stage_run_id)
    assert stage.info.status == "FINISHED" and stage.info.run_name == "solvability-test"
    assert stage.data.params == {"split": "test", "limits": "{'timeout_s': 30}"}
    assert stage.data.tags["medgym.stage"] == "data.solvability"
    assert [(m.step, m.value) for m in client.get_metric_history(stage_run_id, "rate")] == [(0, 0.5), (1, 1.0)]
    assert stage.info.artifact_uri.startswith("mlflow-artifacts:")  # proxied by the server
    assert json.loads(Path(client.download_artifacts(stage_run_id, "report.json", str(tmp_path / "dl"))).read_text()) \
        == {"pass@1": 0.75}
    assert list(mlflow_server["artifacts"].rglob("report.json"))  # stored where the server keeps artifacts

    train = client.get_run(train_run_id)
    assert train.info.status == "FINISHED" and train.data.params["lr"] == "0.0001"
    assert [m.value for m in client.get_metric_history(train_run_id, "train_loss")] == [2.0, 1.5, 1.2]
    assert sorted(a.path for a in client.list_artifacts(train_run_id)) == ["eval", "model"]

    # the registry: a version from the training run's model folder, promoted by alias
    name = "medgym-agent-postgres"
    client.create_registered_model(name)
    version = client.create_model_version(name, source=f"{train.info.artifact_uri}/model", run_id=train_run_id)
    client.set_registered_model_alias(name, "champion", version.version)
    champion = client.get_model_version_by_alias(name, "champion")
    assert (champion.version, champion.run_id) == (version.version, train_run_id)
    fetched = Path(mlflow.artifacts.download_artifacts(f"models:/{name}@champion", dst_path=str(tmp_path / "m"),
                                                       tracking_uri=url))
    assert json.loads((fetched / "config.json").read_text())["num_hidden_layers"] == 2

    # and all of it is in PostgreSQL
    assert _query(db, "SELECT name FROM experiments WHERE name = %s", "medgym-postgres")
    assert set(_query(db, "SELECT run_uuid FROM runs WHERE status = 'FINISHED'")) >= {(stage_run_id,), (train_run_id,)}
    assert _query(db, "SELECT value FROM params WHERE run_uuid = %s AND key = 'lr'", train_run_id) == [("0.0001",)]
    assert _query(db, "SELECT alias, version FROM registered_model_aliases WHERE name = %s", name) \
        == [("champion", int(version.version))]


def test_a_pipeline_run_tracks_into_the_server_nested(mlflow_server: dict, small_suite: Path, tmp_path: Path) -> None:
    """The pipeline as a deployment runs it: MEDGYM_MLFLOW_URI points the profile (a sqlite store in its YAML) at
    the server; the parent run and every stage's run land in PostgreSQL, nested."""
    import yaml
    from mlflow.tracking import MlflowClient

    rollouts = {"teacher": {"policy": {"backend": "scripted"}, "plan": {"k": 1}, "split": "train", "limit": 4},
                "base": {"policy": {"backend": "hf", "options": {"model": "tiny-random-llama"}},
                         "plan": {"k": 1, "max_new_tokens": 16}, "split": "test", "limit": 2, "env": {"max_turns": 1}}}
    profile = {"profile": "pg", "data": {"out_dir": str(small_suite.parent)}, "sandbox": {"backend": "process"},
               "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'unused.db'}", "experiment": "pg-pipeline"},
               "rollouts": rollouts,
               "pipeline": {"state_dir": str(tmp_path / "state"), "reports_dir": str(tmp_path / "reports")}}
    path = tmp_path / "pg.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    env = {**os.environ, "MEDGYM_MLFLOW_URI": mlflow_server["url"], "PREFECT_HOME": str(tmp_path / "prefect")}
    cmd = [sys.executable, "-c", "from flows.cli import main; main()", "pipeline", "run", "--profile", str(path),
           "--only", "teacher", "--only", "base", "--only", "evaluate"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "unused.db").exists()  # nothing went to the profile's own store

    client = MlflowClient(tracking_uri=mlflow_server["url"])
    runs = client.search_runs([client.get_experiment_by_name("pg-pipeline").experiment_id])
    parent = next(r for r in runs if r.data.tags.get("medgym.stage") == "pipeline")
    children = {r.info.run_name: r for r in runs if r.info.run_id != parent.info.run_id}
    assert set(children) == {"rollout-teacher", "rollout-base", "leaderboard"}
    assert {r.data.tags["mlflow.parentRunId"] for r in children.values()} == {parent.info.run_id}
    assert children["rollout-teacher"].data.metrics["episodes"] == 4
    names = {n for (n,) in _query(mlflow_server["db"], "select name from runs")}
    assert {"pipeline-pg", "rollout-teacher", "rollout-base", "leaderboard"} <= names
