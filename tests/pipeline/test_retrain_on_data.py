"""A scheduled retraining run through a real Prefect server reruns what new data reaches and nothing else, and the
registry decides on what it trained: the pipeline deployed with `serve_pipeline` runs on an imported MedAgentGym
release (slices of ../shared's sample, copied to a tmp folder, never into the repository), runs again with nothing
new (every stage cached, recorded on its parent run, nothing registered), and again after a new drop of test tasks
lands in the release: the suite reruns, so does everything downstream of it, and the new version is promoted only
if the registry's paired test supports it; the decision is on the version (MLflow) and on the flow run (Prefect)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, SAMPLE
from tests.test_serve import prefect_server, probe_env, served_env  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

REGISTERED = "retrain-test"


def _profile(tmp: Path) -> Path:
    """The smoke profile cut to the shortest chain that registers a model: the scripted teacher on the release's
    train tasks, SFT on its episodes, the base model and the SFT model on its test tasks, the leaderboard, the
    registry. The smoke categories are dropped: the release's tasks are in none of them."""
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw.pop("focus")
    raw["data"].update(source="medagentgym", import_from=str(tmp / "release"), out_dir=str(tmp / "data" / "suite"))
    raw["tracking"] = {"mlflow_uri": f"sqlite:///{tmp / 'mlruns.db'}", "artifact_location": str(tmp / "artifacts"),
                       "experiment": "retrain-test"}
    played = {"plan": {"k": 1, "max_new_tokens": 16}, "split": "test", "env": {"max_turns": 1}}
    raw["rollouts"] = {"teacher": {**raw["rollouts"]["teacher"], "plan": {"k": 1}},
                       "base": {**played, "policy": {"backend": "hf", "options": {"model": "tiny-random-llama"}}},
                       "sft_test": {**played, "policy": {"backend": "hf", "options": {"model": {"stage": "sft"}}}}}
    sft = raw["training"]["sft"]
    sft["schedule"].update(max_steps=1, save_steps=1)
    raw["training"] = {"base_model": raw["training"]["base_model"], "sft": sft, "out_dir": str(tmp / "models"),
                       "data_dir": str(tmp / "training")}
    raw["pipeline"] = {"state_dir": str(tmp / "state"), "reports_dir": str(tmp / "reports")}
    raw["registry"] = {"name": REGISTERED}
    path = tmp / "retrain.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _release_slice(src: Path, dest: Path, rows: int) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(src.read_text().splitlines(keepends=True)[:rows]))


def _parent_tags(tmp: Path) -> list[dict[str, str]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp / 'mlruns.db'}")
    exp = client.get_experiment_by_name("retrain-test")
    runs = client.search_runs([exp.experiment_id], "tags.`medgym.stage` = 'pipeline'", order_by=["attributes.start_time ASC"])
    return [r.data.tags for r in runs]


def _versions(tmp: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp / 'mlruns.db'}")
    return sorted(client.search_model_versions(f"name = '{REGISTERED}'"), key=lambda v: int(v.version))


def _decisions(api_url: str) -> list[tuple[str, str]]:
    """The registry-decision artifacts on the Prefect server, oldest first: (flow run id, markdown)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def read() -> list:
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["smoke-registry-decision"])))

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        found = asyncio.run(read())
    return [(str(a.flow_run_id), a.data) for a in sorted(found, key=lambda a: a.created)]


def _run_records(api_url: str, flow_run_id: str) -> dict[str, int]:
    """What a person opening a pipeline's flow run in the UI finds: its log lines and artifacts (its stages are task
    runs of it), with those of any subflow run below it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def read() -> dict[str, int]:
        async with get_client() as client:
            runs, frontier = {flow_run_id}, [flow_run_id]
            while frontier:  # the subflows, level by level
                children = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)))
                frontier = [str(r.id) for r in children if str(r.id) not in runs]
                runs |= set(frontier)
            logs, offset = 0, 0
            while batch := await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=sorted(runs))),
                                                  limit=200, offset=offset):
                logs, offset = logs + len(batch), offset + len(batch)
            artifacts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=sorted(runs))))
            return {"flow_runs": len(runs), "log_lines": logs, "artifacts": len(artifacts)}

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        return asyncio.run(read())


@pytest.mark.timeout(2400)
def test_a_scheduled_run_reruns_only_what_new_data_reaches(served_env: dict, prefect_server: str,  # noqa: F811
                                                            tmp_path: Path, record_property) -> None:
    from flows.serve import serve_pipeline

    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent: the MedAgentGym sample lives beside the project in ../shared")
    release = tmp_path / "release"
    _release_slice(SAMPLE / "treqs" / "train_tasks.jsonl", release / "treqs" / "train_tasks.jsonl", 6)
    _release_slice(SAMPLE / "medcalcbench" / "test_tasks.jsonl", release / "medcalcbench" / "test_tasks.jsonl", 6)
    profile = _profile(tmp_path)
    record = tmp_path / "state" / "smoke" / "suite.json"

    walls: list[float] = []
    out_of_run: list[str] = []

    def run() -> dict:
        started = time.monotonic()
        out = serve_pipeline(str(profile), name="retrain", run_now=True, api_url=prefect_server, timeout_s=1200)
        walls.append(round(time.monotonic() - started, 1))
        assert out["state"] == "COMPLETED", out
        out_of_run.append(out["flow_run_id"])
        return json.loads(record.read_text())

    first = run()
    # the first (full) run as the Prefect UI shows it: every stage's lines and headline figures are there
    shown = _run_records(prefect_server, out_of_run[0])
    print(f"[retrain] full run: {shown}")
    record_property("full_run_records", shown)
    assert shown["log_lines"] > 0 and shown["artifacts"] > 0
    tasks = (tmp_path / "data" / "suite" / "tasks.jsonl").read_text().count("\n")
    assert first["status"] == "done" and tasks > 0
    assert [str(v.version) for v in _versions(tmp_path)] == ["1"]

    second = run()  # nothing arrived: the suite is not run again, nothing is trained or registered
    assert second["started_at"] == first["started_at"]
    assert [t.get("medgym.nothing_new") for t in _parent_tags(tmp_path)] == ["false", "true"]
    assert [str(v.version) for v in _versions(tmp_path)] == ["1"]
    assert len(_decisions(prefect_server)) == 1

    _release_slice(SAMPLE / "biocoder" / "test_tasks.jsonl", release / "biocoder" / "test_tasks.jsonl", 4)
    third = run()  # a new drop of tasks: the suite imports it
    assert third["started_at"] > second["started_at"] and third["key"] != second["key"]
    assert (tmp_path / "data" / "suite" / "tasks.jsonl").read_text().count("\n") > tasks
    assert [t.get("medgym.nothing_new") for t in _parent_tags(tmp_path)] == ["false", "true", "false"]

    # what the registry decided about the model retrained on the new data: the paired test against the baseline (no
    # version is champion: two random models solve nothing, so neither got past the test), looked at a second time
    # on the tasks the first version was tested on, and short of the disagreements a promotion needs
    v1, v2 = _versions(tmp_path)
    tags = v2.tags
    assert v1.tags["medgym.decision"] == tags["medgym.decision"] == "challenger", (v1.tags, tags)
    assert tags["medgym.decision.against"] == "baseline" and tags["medgym.decision.look"] == "2", tags
    assert int(tags["medgym.decision.wins"]) + int(tags["medgym.decision.losses"]) < int(tags["medgym.decision.min_discordant"])
    assert int(tags["medgym.decision.shared_tasks"]) > int(v1.tags["medgym.decision.shared_tasks"])  # the new drop
    assert "champion" not in _registered_aliases(tmp_path)
    # and the same decision on the scheduled run that made it, as the Prefect UI shows it
    decisions = _decisions(prefect_server)
    assert len(decisions) == 2, decisions
    assert f"{REGISTERED} v2 → `challenger`" in decisions[-1][1] and "promoted: **no**" in decisions[-1][1]
    # the figures: a run with nothing new against a full run and one with new data (submit to finish)
    print(f"[retrain] wall s: full {walls[0]}, nothing new {walls[1]}, new data {walls[2]}")
    record_property("wall_s", {"full": walls[0], "nothing_new": walls[1], "new_data": walls[2]})


def _registered_aliases(tmp: Path) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{tmp / 'mlruns.db'}").get_registered_model(REGISTERED).aliases
