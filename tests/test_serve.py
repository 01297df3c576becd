"""`medgym serve` against a real Prefect server (`prefect server start` on a free loopback port, its own home):
a served deployment runs on demand and keeps its cron schedule; the work-pool route runs through a real
`prefect worker`; a deployment's runs never overlap; the CLI registers the pipeline itself, in the work pool its
profile needs. The runs execute a tiny flow through flows.serve's code."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.servers import free_port as _free_port
from tests.servers import http_ok, running
from tests.servers import stop_group as _stop
from tests.servers import tail as _tail

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
STARTUP_S = 600  # a fresh server migrates its database first; on a busy 2-core machine that is slow

PROBE = '''
"""Tiny flows for the serve tests: record each run's profile and process, or its start and end, where the test looks."""
import os
import time
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run


@flow(name="medgym-probe")
def probe_flow(profile: str = "demo") -> str:
    Path(os.environ["MEDGYM_PROBE_OUT"], str(flow_run.id)).write_text(f"{profile} {os.getpid()}")
    return profile


@flow(name="medgym-slow-probe")
def slow_probe_flow(profile: str = "demo") -> str:
    """Records when it started and ended, 5 s apart: two runs at once would overlap."""
    started = time.time()
    time.sleep(5)
    Path(os.environ["MEDGYM_PROBE_OUT"], str(flow_run.id)).write_text(f"{started} {time.time()}")
    return profile
'''


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def probe_env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The probe flow's module on PYTHONPATH (so runs import it by module path), its output folder."""
    mod_dir = tmp_path_factory.mktemp("probe")
    (mod_dir / "medgym_probe.py").write_text(PROBE)
    out = tmp_path_factory.mktemp("probe-out")
    return {"dir": mod_dir, "out": out}


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory, probe_env: dict):
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_UI_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_API_URL", None)
    url = f"http://127.0.0.1:{port}/api"
    with running("prefect server", [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                 home / "server.log", http_ok(f"{url}/health"), STARTUP_S, env=env):
        yield url


@pytest.fixture()
def served_env(prefect_server: str, probe_env: dict, monkeypatch: pytest.MonkeyPatch) -> dict:
    """This process and every process it starts talk to the test server and can import the probe."""
    monkeypatch.syspath_prepend(str(probe_env["dir"]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(probe_env["dir"]), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PREFECT_API_URL", prefect_server)
    monkeypatch.setenv("MEDGYM_PROBE_OUT", str(probe_env["out"]))
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "2")
    monkeypatch.setenv("PREFECT_WORKER_QUERY_SECONDS", "2")
    return {**os.environ}


def _api(url: str, call):
    """Run `call(client)` against the server at `url`."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def go():
        async with get_client() as client:
            return await call(client)

    with temporary_settings(updates={PREFECT_API_URL: url}):
        return asyncio.run(go())


def _deployment(url: str, name: str):
    return _api(url, lambda c: c.read_deployment_by_name(name))


def _probe_record(out: Path, flow_run_id: str) -> tuple[str, int]:
    profile, pid = (out / flow_run_id).read_text().split()
    return profile, int(pid)


def test_run_now_runs_the_served_deployment_and_keeps_its_cron(served_env: dict, prefect_server: str,
                                                               probe_env: dict) -> None:
    import medgym_probe

    from flows.serve import serve_pipeline

    result = serve_pipeline("demo", cron="0 4 * * 2", run_now=True, flow=medgym_probe.probe_flow,
                            api_url=prefect_server)
    assert result["deployment"] == "medgym-probe/demo"
    assert result["state"] == "COMPLETED", result
    profile, pid = _probe_record(probe_env["out"], result["flow_run_id"])
    assert profile == "demo" and pid != os.getpid()  # ran in a flow-run process of the runner
    dep = _deployment(prefect_server, "medgym-probe/demo")
    assert dep.parameters == {"profile": "demo"}
    assert dep.entrypoint == "medgym_probe.probe_flow"
    assert [s.schedule.cron for s in dep.schedules] == ["0 4 * * 2"]
    assert dep.schedules[0].schedule.timezone == "UTC"
    assert dep.schedules[0].active and not dep.paused  # a one-off run leaves the schedule running


def test_long_running_serve_runs_triggered_runs_and_pauses_on_stop(served_env: dict, prefect_server: str,
                                                                   probe_env: dict, tmp_path: Path) -> None:
    """The `medgym serve` process itself: serves until SIGTERM, then pauses its schedule."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    code = ("import medgym_probe; from flows.serve import serve_pipeline; "
            "serve_pipeline('smoke', name='served', flow=medgym_probe.probe_flow)")
    log = tmp_path / "serve.log"
    proc = _start([sys.executable, "-c", code], served_env, log)
    try:
        name = "medgym-probe/served"
        deadline = time.monotonic() + 300
        while not _api(prefect_server, lambda c: c.read_deployments(
                deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["served"])))):
            assert proc.poll() is None, _tail(log)
            assert time.monotonic() < deadline, f"deployment never registered:\n{_tail(log)}"
            time.sleep(1)
        dep = _deployment(prefect_server, name)
        assert [s.schedule.cron for s in dep.schedules] == ["0 3 * * 1"]  # the weekly default
        run = _api(prefect_server, lambda c: c.create_flow_run_from_deployment(dep.id))
        deadline = time.monotonic() + 300
        while (state := _api(prefect_server, lambda c: c.read_flow_run(run.id)).state).type.value != "COMPLETED":
            assert not state.is_final(), f"{state}:\n{_tail(log)}"
            assert proc.poll() is None and time.monotonic() < deadline, _tail(log)
            time.sleep(1)
        assert _probe_record(probe_env["out"], str(run.id))[0] == "smoke"
    finally:
        rc = _stop(proc)
    assert rc == 0, _tail(log)
    assert _deployment(prefect_server, name).paused  # stopping the server of a schedule pauses it


def test_work_pool_route_runs_through_a_prefect_worker(served_env: dict, prefect_server: str, probe_env: dict,
                                                       tmp_path: Path) -> None:
    import medgym_probe

    from flows.serve import WORK_POOL, serve_pipeline

    registered = serve_pipeline("demo", name="pooled", flow=medgym_probe.probe_flow, work_pool=WORK_POOL,
                                api_url=prefect_server)
    assert "state" not in registered  # registered only: the worker runs it
    assert _api(prefect_server, lambda c: c.read_work_pool(WORK_POOL)).type == "process"
    log = tmp_path / "worker.log"
    worker = _start([str(BIN / "prefect"), "worker", "start", "--pool", WORK_POOL, "--limit", "1"], served_env, log)
    try:
        result = serve_pipeline("demo", name="pooled", run_now=True, flow=medgym_probe.probe_flow,
                                work_pool=WORK_POOL, api_url=prefect_server, timeout_s=400)
    finally:
        _stop(worker)
    assert result["state"] == "COMPLETED", (result, _tail(log))
    assert _probe_record(probe_env["out"], result["flow_run_id"])[0] == "demo"
    dep = _deployment(prefect_server, "medgym-probe/pooled")
    assert dep.work_pool_name == WORK_POOL and [s.schedule.cron for s in dep.schedules] == ["0 3 * * 1"]


def test_a_deployments_runs_never_overlap_even_on_a_worker_that_takes_two(served_env: dict, prefect_server: str,
                                                                          probe_env: dict, tmp_path: Path) -> None:
    """Two runs due at once on a worker with room for both: the deployment's limit of 1 (the default) makes the
    second wait for the first to end, and the server holds that limit."""
    import medgym_probe

    from flows.serve import serve_pipeline

    pool = "medgym-exclusive"
    serve_pipeline("demo", name="exclusive", flow=medgym_probe.slow_probe_flow, work_pool=pool, api_url=prefect_server)
    dep = _deployment(prefect_server, "medgym-slow-probe/exclusive")
    assert dep.global_concurrency_limit is not None and dep.global_concurrency_limit.limit == 1
    assert dep.concurrency_options is not None and dep.concurrency_options.collision_strategy.value == "ENQUEUE"
    runs = [_api(prefect_server, lambda c: c.create_flow_run_from_deployment(dep.id)) for _ in range(2)]
    log = tmp_path / "worker.log"
    worker = _start([str(BIN / "prefect"), "worker", "start", "--pool", pool, "--limit", "2"], served_env, log)
    try:
        deadline = time.monotonic() + 500
        for run in runs:
            while (state := _api(prefect_server, lambda c, r=run: c.read_flow_run(r.id)).state).type.value != "COMPLETED":
                assert not state.is_final(), f"{state}:\n{_tail(log)}"
                assert worker.poll() is None and time.monotonic() < deadline, _tail(log)
                time.sleep(1)
    finally:
        _stop(worker)
    spans = sorted(tuple(map(float, (probe_env["out"] / str(r.id)).read_text().split())) for r in runs)
    assert spans[0][1] <= spans[1][0], spans  # the second started after the first ended

    # --concurrency-limit 0 (None here): no limit on the deployment
    serve_pipeline("demo", name="exclusive", flow=medgym_probe.slow_probe_flow, work_pool=pool,
                   api_url=prefect_server, concurrency_limit=None)
    assert _deployment(prefect_server, "medgym-slow-probe/exclusive").global_concurrency_limit is None


def test_cli_registers_the_pipeline_deployment(served_env: dict, prefect_server: str) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    res = CliRunner().invoke(app, ["serve", "--profile", "smoke", "--cron", "30 2 * * 0", "--work-pool",
                                   "medgym-process", "--api-url", prefect_server])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["deployment"] == "medgym-pipeline/smoke"
    dep = _deployment(prefect_server, "medgym-pipeline/smoke")
    assert dep.entrypoint == "flows.pipeline.pipeline_flow"
    assert dep.parameters == {"profile": "smoke"} and dep.work_pool_name == "medgym-process"
    assert [s.schedule.cron for s in dep.schedules] == ["30 2 * * 0"]
    assert dep.global_concurrency_limit is not None and dep.global_concurrency_limit.limit == 1
    bad = CliRunner().invoke(app, ["serve", "--profile", "no-such-profile", "--api-url", prefect_server])
    assert bad.exit_code != 0


def test_cli_puts_a_gpu_profile_in_the_gpu_pool_and_any_other_in_the_process_pool(served_env: dict,
                                                                                  prefect_server: str) -> None:
    """Without --work-pool the profile decides (the paper profile trains on 8 GPUs); --work-pool still wins."""
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.serve import GPU_WORK_POOL, WORK_POOL

    for profile, pool in (("paper", GPU_WORK_POOL), ("demo", WORK_POOL)):
        res = CliRunner().invoke(app, ["serve", "--profile", profile, "--api-url", prefect_server])
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["work_pool"] == pool
        assert _deployment(prefect_server, f"medgym-pipeline/{profile}").work_pool_name == pool
        assert _api(prefect_server, lambda c, p=pool: c.read_work_pool(p)).type == "process"
    res = CliRunner().invoke(app, ["serve", "--profile", "paper", "--work-pool", WORK_POOL, "--concurrency-limit", "2",
                                   "--api-url", prefect_server])
    assert res.exit_code == 0, res.output
    dep = _deployment(prefect_server, "medgym-pipeline/paper")
    assert dep.work_pool_name == WORK_POOL and dep.global_concurrency_limit.limit == 2


@pytest.mark.timeout(1200)
def test_the_served_pipeline_runs_through_the_server_and_tracks_its_stages(served_env: dict, prefect_server: str,
                                                                          tmp_path: Path) -> None:
    """The real pipeline flow as the deployment: a run triggered through the server builds a one-task-per-category
    suite and plays the teacher, each stage nested under the pipeline's MLflow run."""
    import yaml
    from mlflow.tracking import MlflowClient

    from flows.serve import serve_pipeline

    db = tmp_path / "mlruns.db"
    profile = {"profile": "served", "sandbox": {"backend": "process"},
               "data": {"out_dir": str(tmp_path / "suite"),
                        "suites": {"demo": {"train_per_category": 1, "test_per_category": 1},
                                   "full": {"train_per_category": 2, "test_per_category": 1}}},
               "tracking": {"mlflow_uri": f"sqlite:///{db}", "artifact_location": str(tmp_path / "artifacts"),
                            "experiment": "served"},
               "rollouts": {"teacher": {"policy": {"backend": "scripted"}, "plan": {"k": 1}, "split": "train",
                                        "limit": 2}},
               "pipeline": {"state_dir": str(tmp_path / "state"), "reports_dir": str(tmp_path / "reports")}}
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    result = serve_pipeline(str(path), cron="0 5 * * 3", name="served", run_now=True)
    assert result["deployment"] == "medgym-pipeline/served" and result["state"] == "COMPLETED", result
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    runs = client.search_runs([client.get_experiment_by_name("served").experiment_id])
    parent = next(r for r in runs if r.data.tags.get("medgym.stage") == "pipeline")
    children = {r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert {"rollout-teacher", "solvability-test"} <= children and parent.info.status == "FINISHED"
    assert len(runs) == len(children) + 1
