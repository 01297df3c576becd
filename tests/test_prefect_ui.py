"""What a person finds of a run in Prefect's UI, read back through the Prefect client from real flow runs on the
command's own temporary server (flows.runtime.prefect_api: `prefect server start` in a PREFECT_HOME of the test's):
the stage lines and the summary in the pipeline flow run's logs; the leaderboard, each stage's headline figures and
the registry's decision as artifacts under stable keys."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import psutil
import pytest
from prefect import flow

from components.profile.config import PipelineConfig
from flows.runtime import say
from tests.evaluation.test_leaderboard import played
from tests.test_registry import rollout, write_tasks
from tests.training.conftest import write_rollout

pytestmark = pytest.mark.slow


@flow(name="medgym-earlier-command")
def earlier_command() -> None:
    say("the last line of an earlier command")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """The temporary server a `medgym` command starts, on a fresh state folder, after an earlier command's server on
    the same folder ran one flow and stopped; this process reports to it. Yields (its API URL, that flow run's id)."""
    from flows.runtime import prefect_api

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PREFECT_HOME", str(tmp_path_factory.mktemp("prefect-home")))
        mp.delenv("PREFECT_API_URL", raising=False)
        with prefect_api():
            earlier = earlier_command(return_state=True)
        assert earlier.is_completed(), earlier
        with prefect_api() as url:
            yield url, earlier.state_details.flow_run_id


def _client(call):
    from prefect.client.orchestration import get_client

    async def go():
        async with get_client() as client:
            return await call(client)

    return asyncio.run(go())


def _logs(flow_run_id) -> list[str]:
    """The flow run's log lines on the server, once the ones this process still holds are sent."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
    return [entry.message for entry in _client(lambda c: c.read_logs(log_filter=log_filter))]


def _artifact(key: str):
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    found = _client(lambda c: c.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]))))
    assert found, f"no artifact {key!r} on the server"
    return max(found, key=lambda a: a.created)


def _table(key: str) -> list[dict]:
    artifact = _artifact(key)
    assert artifact.type == "table"
    return json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data


def _profile(tmp_path: Path) -> Path:
    """A profile whose two test rollouts are already played (a base model solving 3 of 12 tasks, a stronger one
    9): its evaluate stage ranks them on the leaderboard."""
    dirs = {"base": write_rollout(tmp_path / "rollouts" / "base", played(rollout(3))),
            "strong": write_rollout(tmp_path / "rollouts" / "strong", played(rollout(9)))}
    write_tasks(tmp_path / "suite" / "tasks.jsonl")
    cfg = PipelineConfig.model_validate({
        "profile": "ui", "data": {"out_dir": str(tmp_path / "suite")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlruns.db'}", "artifact_location": str(tmp_path / "art"),
                     "experiment": "ui"},
        "rollouts": {n: {"policy": {"backend": "scripted"}, "split": "test", "out_dir": str(d)} for n, d in dirs.items()},
        "pipeline": {"baseline": "base", "state_dir": str(tmp_path / "state"), "reports_dir": str(tmp_path / "reports")}})
    path = tmp_path / "ui.yaml"
    path.write_text(json.dumps(cfg.model_dump(mode="json", exclude_defaults=True)))
    return path


@pytest.mark.timeout(900)
def test_the_server_is_prefect_server_start_and_keeps_past_runs_with_their_last_lines(server) -> None:
    """Prefect's public way to run a server, on the state folder `prefect server start` browses (README): an earlier
    command's run is there, its last log line included (sent before that command's server stopped)."""
    from prefect.settings import PREFECT_UI_URL

    _, earlier = server
    def served(cmd: list[str]) -> bool:  # `prefect server start` under its orphan guard (the guard is our child)
        at = next((i for i, a in enumerate(cmd) if Path(a).name == "prefect"), None)
        return at is not None and cmd[at + 1:at + 3] == ["server", "start"] and Path(cmd[2]).name == "orphan_guard.py"

    started = [p.cmdline() for p in psutil.Process().children()]
    assert any(served(cmd) for cmd in started if len(cmd) > 3), started
    run = _client(lambda c: c.read_flow_run(earlier))
    assert run.state.is_completed() and run.flow_id is not None
    assert "the last line of an earlier command" in _logs(earlier)
    assert PREFECT_UI_URL.value() == "http://127.0.0.1:4200"  # the "View at" links: `prefect server start`'s UI


@pytest.mark.timeout(900)
def test_a_pipeline_runs_progress_summary_leaderboard_and_stage_figures_are_on_the_server(server,
                                                                                         tmp_path: Path) -> None:
    from flows.pipeline import pipeline_flow

    state = pipeline_flow(profile=str(_profile(tmp_path)), only=["evaluate"], return_state=True)
    assert state.is_completed(), state
    run_id = state.state_details.flow_run_id

    deadline = time.monotonic() + 60  # the server stores log batches as they come
    lines = _logs(run_id)
    while not any(m.startswith("pipeline ui:") for m in lines) and time.monotonic() < deadline:
        time.sleep(1)
        lines = _logs(run_id)
    assert "[evaluate] running (stage 1 of 1)" in lines, lines
    assert any(m.startswith("[evaluate] ran in ") and "strong.success=0.750" in m for m in lines), lines
    summary = next(m for m in lines if m.startswith("pipeline ui:"))
    assert "evaluate" in summary and "strong.success=0.750" in summary

    figures = {row["figure"]: row["value"] for row in _table("ui-stage-evaluate")}
    assert figures["status"] == "ran" and figures["strong.success"] == 0.75 and figures["base.success"] == 0.25
    assert _artifact("ui-stage-evaluate").flow_run_id == run_id  # on the pipeline's run, where the UI shows it

    board = _table("ui-leaderboard")
    assert [(r["rank"], r["rollout"]) for r in board] == [(1, "strong"), (2, "base (baseline)")]
    assert board[0]["greedy pass@1"] == 0.75 and board[0]["low"] <= 0.75 <= board[0]["high"]
    assert board[0]["vs baseline"] == 0.5 and board[1]["vs baseline"] == ""
    assert board[0]["tasks"] == 12 and board[0]["episodes"] == 24


@pytest.mark.timeout(900)
def test_the_registry_decision_is_a_markdown_artifact_of_the_register_run(server, model_store,
                                                                          tmp_path: Path) -> None:
    from flows.register import register_flow

    tracking, uri = model_store
    dirs = {"base-test": write_rollout(tmp_path / "base", rollout(1)),
            "sft-test": write_rollout(tmp_path / "sft", rollout(9))}
    write_tasks(tmp_path / "suite" / "tasks.jsonl")
    cfg = PipelineConfig.model_validate({"profile": "ui-register", "tracking": tracking.model_dump(),
                                         "data": {"out_dir": str(tmp_path / "suite")},
                                         "rollouts": {k: {"out_dir": str(v)} for k, v in dirs.items()}})
    state = register_flow(cfg, "sft-test", baseline="base-test", model_uri=uri, return_state=True)
    assert state.is_completed(), state
    decision = state.result()

    artifact = _artifact("ui-register-registry-decision")
    assert artifact.type == "markdown" and artifact.flow_run_id == state.state_details.flow_run_id
    page = artifact.data
    assert f"## {decision['name']} v{decision['version']} → `{decision['alias']}`" in page
    assert decision["reason"] in page and f"promoted: **{'yes' if decision['promoted'] else 'no'}**" in page
    t = decision["comparison"]["test"]
    assert f"| baseline | success | {t['n_tasks']} | {t['difference']:+.4f} |" in page
