"""A scheduled retraining run through a real Prefect server reruns what new data reaches and nothing else, and the
registry decides on what it trained: the pipeline deployed with `serve_pipeline` runs on an imported MedAgentGym
release (slices of ../shared's sample, copied to a tmp folder, never into the repository), runs again with nothing
new (every stage cached, recorded on its parent run, nothing registered), and again after a new drop of test tasks
lands in the release: the suite reruns, so does everything downstream of it, and the new version is promoted only
if the registry's paired test supports it; the decision is on the version (MLflow) and on the flow run (Prefect)."""

from __future__ import annotations

import asyncio
import json
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


@pytest.mark.timeout(2400)
def test_a_scheduled_run_reruns_only_what_new_data_reaches(served_env: dict, prefect_server: str,  # noqa: F811
                                                            tmp_path: Path) -> None:
    from flows.serve import serve_pipeline

    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent: the MedAgentGym sample lives beside the project in ../shared")
    release = tmp_path / "release"
    _release_slice(SAMPLE / "treqs" / "train_tasks.jsonl", release / "treqs" / "train_tasks.jsonl", 6)
    _release_slice(SAMPLE / "medcalcbench" / "test_tasks.jsonl", release / "medcalcbench" / "test_tasks.jsonl", 6)
    profile = _profile(tmp_path)
    record = tmp_path / "state" / "smoke" / "suite.json"

    def run() -> dict:
        out = serve_pipeline(str(profile), name="retrain", run_now=True, api_url=prefect_server, timeout_s=1200)
        assert out["state"] == "COMPLETED", out
        return json.loads(record.read_text())

    first = run()
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


def _registered_aliases(tmp: Path) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{tmp / 'mlruns.db'}").get_registered_model(REGISTERED).aliases
