"""What the orchestration around the stages costs, cut without dropping what users rely on: flows on the command's
temporary Prefect server run without heartbeats unless the user asks for them, MLflow's telemetry is off in every
command, a run's tags are written in batches that all land, and a stage is a task run of the pipeline's flow run, not
a flow run of its own (bench/pipeline.py measures the cost)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_flows_on_the_temporary_server_run_without_heartbeats_unless_the_user_sets_a_frequency(monkeypatch):
    from prefect import flow
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

    from flows.runtime import prefect_api, temporary_server_settings

    @flow
    def frequency() -> int | None:
        return get_current_settings().flows.heartbeat_frequency  # what the flow engine starts its heartbeats from

    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # this command's own server, not one configured outside
    assert get_current_settings().flows.heartbeat_frequency is not None  # Prefect's default sends them
    with prefect_api():
        assert frequency() is None
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 60}), temporary_server_settings("http://x/api"):
        assert get_current_settings().flows.heartbeat_frequency == 60


def test_clients_of_the_temporary_server_load_no_ca_bundle_unless_the_user_says_so(monkeypatch):
    # the temporary server is plain HTTP on loopback: a client's CA bundle would be loaded for nothing
    from prefect import flow
    from prefect.settings import PREFECT_API_TLS_INSECURE_SKIP_VERIFY, get_current_settings, temporary_settings

    from flows.runtime import prefect_api, temporary_server_settings

    @flow
    def skips() -> bool:
        return get_current_settings().api.tls_insecure_skip_verify

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert get_current_settings().api.tls_insecure_skip_verify is False  # Prefect's default verifies
    with prefect_api() as url:
        assert url.startswith("http://127.0.0.1:")
        assert skips() is True
    with temporary_settings(updates={PREFECT_API_TLS_INSECURE_SKIP_VERIFY: False}), \
            temporary_server_settings("http://x/api"):
        assert get_current_settings().api.tls_insecure_skip_verify is False


def test_mlflow_sends_no_telemetry_from_a_command():
    # a bare environment: MLflow turns its telemetry off by itself under pytest or CI, which would hide the setting
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "PYTHONPATH": str(ROOT),
           "PREFECT_HOME": os.environ["PREFECT_HOME"]}
    code = ("import flows, mlflow\n"
            "from mlflow.telemetry.client import get_telemetry_client\n"
            "print(get_telemetry_client() is None)")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True"]


def test_a_runs_tags_are_written_in_batches_and_all_land(tmp_path: Path):
    from mlflow.tracking import MlflowClient

    from components.tracking.tracker import MlflowTracker, TrackingConfig

    tracking = TrackingConfig(mlflow_uri=f"sqlite:///{tmp_path / 'm.db'}", artifact_location=str(tmp_path / "a"),
                              experiment="tags")
    tags = {f"medgym.tag{i}": i for i in range(150)}  # more than the API takes in one batch; values not strings
    with MlflowTracker(tracking).run("tags") as run:
        run.set_tags(tags)
    logged = MlflowClient(tracking_uri=tracking.mlflow_uri).get_run(run.run_id).data.tags
    assert {k: logged.get(k) for k in tags} == {k: str(v) for k, v in tags.items()}


def test_params_metrics_and_tags_logged_together_all_land_past_every_batch_limit(tmp_path: Path):
    """One `log` call for what a run records: more params and tags than one batch takes, and more entities in all
    than one batch takes; tags given at the run's start land on it; `log_artifacts` logs a folder's files."""
    from mlflow.tracking import MlflowClient

    from components.tracking.tracker import BATCH_ENTITIES, BATCH_PARAMS, BATCH_TAGS, MlflowTracker, TrackingConfig

    tracking = TrackingConfig(mlflow_uri=f"sqlite:///{tmp_path / 'm.db'}", artifact_location=str(tmp_path / "a"),
                              experiment="batches")
    params = {f"p{i}": i for i in range(BATCH_PARAMS + 30)}
    tags = {f"t{i}": i for i in range(BATCH_TAGS + 30)}
    metrics = {f"m{i}": i / 2 for i in range(BATCH_ENTITIES + 50)}
    files = tmp_path / "files"
    files.mkdir()
    (files / "one.json").write_text("{}")
    (files / "two.jsonl").write_text("{}\n")
    with MlflowTracker(tracking).run("batches", tags={"medgym.stage": "x"}) as run:
        run.log(params=params, metrics=metrics, tags=tags, step=3)
        run.log_artifacts(files)
    client = MlflowClient(tracking_uri=tracking.mlflow_uri)
    data = client.get_run(run.run_id).data
    assert data.params == {k: str(v) for k, v in params.items()}
    assert data.metrics == metrics
    assert {k: data.tags.get(k) for k in tags} == {k: str(v) for k, v in tags.items()}
    assert data.tags["medgym.stage"] == "x"
    assert client.get_metric_history(run.run_id, "m7")[0].step == 3
    assert sorted(f.path for f in client.list_artifacts(run.run_id)) == ["one.json", "two.jsonl"]


def test_a_command_killed_with_sigkill_leaves_no_prefect_server(tmp_path: Path):
    """The temporary server runs in a session of its own, so that stopping it stops its workers; a command killed
    with SIGKILL runs no exit hook, and the orphan guard above the server stops its group instead."""
    from components.policies.vllm_server import group_members
    from tests.servers import outlived_by

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(ROOT)}
    code = ("import os, time, flows\n"
            "from flows.runtime import prefect_api\n"
            "with prefect_api() as url:\n"
            "    print(url, flush=True)\n"
            "    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:"), url
        [guard] = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                   text=True).stdout.split()]
        assert os.getpgid(guard) == guard and len(group_members(guard)) >= 2  # the guard leads; the server below it
    finally:
        proc.kill()
        proc.wait()
    assert not (left := outlived_by(guard)), f"the Prefect server outlived its killed command: {left}"


def test_a_rollout_stage_is_retried_once_as_a_task_run_and_a_refusing_policy_never():
    """Each stage is a task run of the pipeline's flow run (no flow run of its own); a rollout, whose rerun skips
    the episodes it finished, is retried once, while a policy that refuses every task fails at once."""
    from prefect import flow
    from prefect.context import FlowRunContext, TaskRunContext

    from components.pipeline.plan import Stage
    from components.policies.protocol import PolicyRefusal
    from flows.pipeline import run_as_task
    from flows.runtime import prefect_api

    calls: list[str] = []
    runs: set[bool] = set()

    def flaky() -> dict:
        task = TaskRunContext.get()
        calls.append(task.task_run.name)
        runs.add(task.task_run.flow_run_id == FlowRunContext.get().flow_run.id)  # a task run of the pipeline's run
        if len(calls) == 1:
            raise ConnectionError("the engine dropped a request")
        return {"episodes": 4}

    def refusing() -> dict:
        calls.append("refusing")
        raise PolicyRefusal("vllm cannot play these tasks")

    @flow
    def pipeline(call, kind: str) -> dict:
        return run_as_task(Stage("base", kind, ()), call)

    with prefect_api():
        out = pipeline(flaky, "rollout")
        assert calls == ["base", "base"] and out["episodes"] == 4 and runs == {True}
        calls.clear()
        with pytest.raises(PolicyRefusal):
            pipeline(refusing, "rollout")
        assert calls == ["refusing"]
        calls.clear()
        with pytest.raises(ConnectionError):  # a training stage resumes from its checkpoint on the next run instead
            pipeline(flaky, "train")
        assert calls == ["base"]
