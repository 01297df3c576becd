"""components/tracking with its artifacts on an S3-compatible object store: a real S3 server (moto's standalone
`moto_server`, an HTTP server from PyPI run here as a process on a free loopback port, not moto's in-process mock
of the client), a sqlite backend store, and `tracking.artifact_uri: s3://bucket/prefix`. MLflow reaches the server
as any MLflow client reaches MinIO or AWS: MLFLOW_S3_ENDPOINT_URL and the AWS_* credentials from the environment.
What MLflow wrote is read back through MLflow and listed in the bucket through boto3 against the same server."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.tracking.tracker import MlflowTracker, TrackingConfig
from tests.servers import free_port, listening, running

BUCKET, PREFIX = "medgym-artifacts", "mlflow/demo"
STARTUP_S = 120  # moto_server imports every AWS service it knows before it listens: slow on a busy 2-core machine
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "medgym-test", "AWS_SECRET_ACCESS_KEY": "medgym-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`moto_server` on 127.0.0.1:<free port>; its endpoint URL. Stopped (its process group) when the module ends."""
    exe = Path(sys.executable).parent / "moto_server"
    assert exe.is_file(), f"{exe}: moto[server] is a dev dependency (pyproject.toml); `make setup` installs it"
    port = free_port()
    with running("moto_server", [str(exe), "-H", "127.0.0.1", "-p", str(port)],
                 tmp_path_factory.mktemp("s3") / "moto_server.log", listening(port), STARTUP_S, poll_s=0.5, grace_s=30):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture()
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator:
    """The environment an MLflow client on MinIO has, pointed at the test's server; a boto3 client of the same
    server with the bucket created. training_run sets MLflow's process-wide tracking URI: restored after."""
    import boto3
    from mlflow.tracking._tracking_service import utils

    import mlflow

    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", s3_server)
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    # nothing from this machine's own AWS setup: the test's credentials and endpoint only
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    client = boto3.client("s3", endpoint_url=s3_server, region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
                          aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    previous = utils._tracking_uri
    yield client
    mlflow.set_tracking_uri(previous)


def _keys(client, prefix: str) -> set[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def _tracking(tmp_path: Path, experiment: str, **kw) -> TrackingConfig:
    return TrackingConfig(mlflow_uri=f"sqlite:///{tmp_path / 'mlruns.db'}", artifact_location=str(tmp_path / "local"),
                          experiment=experiment, **kw)


@pytest.mark.slow
def test_a_training_run_keeps_its_artifacts_and_model_in_the_bucket(s3, tmp_path: Path, tiny_model: Path) -> None:
    from mlflow.tracking import MlflowClient

    import mlflow
    from components.tracking.training import training_run

    config = _tracking(tmp_path, "s3-train", artifact_uri=f"s3://{BUCKET}/{PREFIX}/")
    assert config.artifact_uri == f"s3://{BUCKET}/{PREFIX}"  # one form, whatever the profile wrote
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"pass@1": 0.5}))
    # a training stage's run as run_stage opens it: params, per-step metrics, an artifact, the merged model
    with training_run(config, "sft-s3", system_metrics=False) as run:
        run.set_tags({"medgym.stage": "sft"})
        run.log_params({"lr": 1e-4, "lora.r": 8})
        for step, loss in enumerate([2.0, 1.5, 1.25]):
            run.log_metrics({"train_loss": loss}, step=step)
        run.log_artifact(report, artifact_path="eval")
        model_uri = run.log_model(tiny_model)
        run_id = run.run_id

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns.db'}")
    got = client.get_run(run_id)
    assert got.info.status == "FINISHED" and got.data.params["lr"] == "0.0001"
    assert [m.value for m in client.get_metric_history(run_id, "train_loss")] == [2.0, 1.5, 1.25]
    assert client.get_experiment(got.info.experiment_id).artifact_location == f"s3://{BUCKET}/{PREFIX}"
    assert got.info.artifact_uri == f"s3://{BUCKET}/{PREFIX}/{run_id}/artifacts"

    # read back through MLflow: the artifact, and the logged model as a pipeline that generates
    back = Path(client.download_artifacts(run_id, "eval/report.json", str(tmp_path / "dl")))
    assert json.loads(back.read_text()) == {"pass@1": 0.5}
    model = mlflow.get_logged_model(model_uri.removeprefix("models:/"))
    assert model.artifact_location.startswith(f"s3://{BUCKET}/{PREFIX}/")
    pipe = mlflow.transformers.load_model(model_uri)
    out = pipe("Compute the BMI", max_new_tokens=3, do_sample=False)[0]["generated_text"]
    assert out.startswith("Compute the BMI")

    # and in the bucket itself, listed by boto3 against the same server
    keys = _keys(s3, f"{PREFIX}/")
    assert f"{PREFIX}/{run_id}/artifacts/eval/report.json" in keys
    body = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{run_id}/artifacts/eval/report.json")["Body"].read()
    assert json.loads(body) == {"pass@1": 0.5}
    model_key = model.artifact_location.removeprefix(f"s3://{BUCKET}/")
    model_files = {k.removeprefix(f"{model_key}/") for k in keys if k.startswith(f"{model_key}/")}
    assert {"MLmodel", "requirements.txt", "model/config.json", "model/model.safetensors"} <= model_files, model_files
    # nothing went to the local artifact folder the profile also names
    assert not (tmp_path / "local").exists()


@pytest.mark.slow
def test_an_experiment_created_elsewhere_is_refused_not_silently_kept(s3, tmp_path: Path) -> None:
    """MLflow fixes an experiment's artifact location when it creates it: a profile that now names a bucket for an
    existing local experiment is told so, instead of its artifacts going on to the old folder."""
    local = _tracking(tmp_path, "s3-moved")
    with MlflowTracker(local).run("before") as run:
        run.log_metrics({"x": 1.0})
    moved = _tracking(tmp_path, "s3-moved", artifact_uri=f"s3://{BUCKET}/moved")
    with pytest.raises(ValueError, match="name a new tracking.experiment"), MlflowTracker(moved).run("after"):
        pass
    # the same experiment under the same bucket opens as before, through the Tracker protocol too
    fresh = _tracking(tmp_path, "s3-fresh", artifact_uri=f"s3://{BUCKET}/fresh")
    for _ in range(2):
        with MlflowTracker(fresh).run("stage") as run:
            (tmp_path / "out.txt").write_text("stage output")
            run.log_artifact(tmp_path / "out.txt")
    assert len([k for k in _keys(s3, "fresh/") if k.endswith("/artifacts/out.txt")]) == 2


@pytest.mark.parametrize("bad", ["gs://bucket/x", "s3://", "s3://Upper/x", "s3://ab", "/local/path", "s3://b b/x"])
def test_artifact_uri_takes_only_an_s3_bucket_uri(bad: str) -> None:
    with pytest.raises(ValueError, match="not an s3://"):
        TrackingConfig(artifact_uri=bad)


@pytest.mark.slow
def test_the_registry_keeps_its_model_and_evidence_in_the_bucket_and_reads_them_back(s3, tmp_path: Path,
                                                                                       tiny_model: Path) -> None:
    """Registration on S3: the checkpoint logged into the bucket, each version's per-task evidence stored there and
    read back from it when the next candidate is paired with the champion."""
    from mlflow.tracking import MlflowClient

    import mlflow
    from components.registry import Evaluation, RegistryConfig, read_evaluation, register

    config = _tracking(tmp_path, "s3-registry", artifact_uri=f"s3://{BUCKET}/registry")
    tasks = [f"t{i:02d}" for i in range(12)]

    def evaluation(solved: int) -> Evaluation:
        return Evaluation(task_success={t: float(i < solved) for i, t in enumerate(tasks)},
                          task_hashes={t: f"content of {t}" for t in tasks}, conditions={"k": 1, "split": "test"})

    registry = RegistryConfig(name="s3-agent")
    first = register(registry, config, evaluation(10), model_dir=tiny_model, baseline=evaluation(1), commit="abc1234")
    assert first.promoted and first.task_success_uri.startswith(f"runs:/{first.run_id}/")
    second = register(registry, config, evaluation(10), model_uri=first.source, commit="abc1234")
    # paired with the champion's evidence, which was read from the bucket: the same scores, nothing to promote on
    assert second.comparison is not None and second.comparison.against_version == "1"
    assert (second.comparison.test.wins, second.comparison.test.losses) == (0, 0) and not second.promoted

    client = MlflowClient(tracking_uri=config.mlflow_uri)
    champion = client.get_model_version_by_alias("s3-agent", "champion")
    assert read_evaluation(champion, config.mlflow_uri) == evaluation(10)
    assert mlflow.get_logged_model(first.source.removeprefix("models:/")).artifact_location.startswith(
        f"s3://{BUCKET}/registry/")
    fetched = Path(mlflow.artifacts.download_artifacts("models:/s3-agent@champion", dst_path=str(tmp_path / "m"),
                                                       tracking_uri=config.mlflow_uri))
    assert (fetched / "MLmodel").is_file() and (fetched / "model" / "config.json").is_file()
    keys = _keys(s3, "registry/")
    for run_id in (first.run_id, second.run_id):
        for name in ("task_success.json", "task_hashes.json", "conditions.json", "decision.json"):
            assert f"registry/{run_id}/artifacts/evaluation/{name}" in keys
    assert not (tmp_path / "local").exists()
