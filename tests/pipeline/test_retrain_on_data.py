"""A scheduled retraining run through a real Prefect server reruns what new data reaches and nothing else: the
pipeline deployed with `serve_pipeline` runs on an imported MedAgentGym release (a slice of ../shared's sample,
copied to a tmp folder, never into the repository), runs again with nothing new (every stage cached, recorded on
its parent run), and again after a new drop of tasks lands in the release (the suite reruns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, SAMPLE
from tests.test_serve import prefect_server, probe_env, served_env  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def _profile(tmp: Path) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw["data"].update(source="medagentgym", import_from=str(tmp / "release"), out_dir=str(tmp / "data" / "suite"))
    raw["tracking"] = {"mlflow_uri": f"sqlite:///{tmp / 'mlruns.db'}", "experiment": "retrain-test"}
    raw["pipeline"] = {"stages": ["suite"], "state_dir": str(tmp / "state"), "reports_dir": str(tmp / "reports")}
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


@pytest.mark.timeout(1800)
def test_a_scheduled_run_reruns_only_what_new_data_reaches(served_env: dict, prefect_server: str,  # noqa: F811
                                                            tmp_path: Path) -> None:
    from flows.serve import serve_pipeline

    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent: the MedAgentGym sample lives beside the project in ../shared")
    _release_slice(SAMPLE / "medcalcbench" / "test_tasks.jsonl", tmp_path / "release" / "medcalcbench" / "test_tasks.jsonl", 6)
    profile = _profile(tmp_path)
    record = tmp_path / "state" / "smoke" / "suite.json"

    def run() -> dict:
        out = serve_pipeline(str(profile), name="retrain", run_now=True, api_url=prefect_server, timeout_s=900)
        assert out["state"] == "COMPLETED", out
        return json.loads(record.read_text())

    first = run()
    tasks = (tmp_path / "data" / "suite" / "tasks.jsonl").read_text().count("\n")
    assert first["status"] == "done" and tasks > 0

    second = run()  # nothing arrived: the suite is not run again
    assert second["started_at"] == first["started_at"]
    assert [t.get("medgym.nothing_new") for t in _parent_tags(tmp_path)] == ["false", "true"]

    _release_slice(SAMPLE / "biocoder" / "test_tasks.jsonl", tmp_path / "release" / "biocoder" / "test_tasks.jsonl", 4)
    third = run()  # a new drop of tasks: the suite imports it
    assert third["started_at"] > second["started_at"] and third["key"] != second["key"]
    assert (tmp_path / "data" / "suite" / "tasks.jsonl").read_text().count("\n") > tasks
    assert [t.get("medgym.nothing_new") for t in _parent_tags(tmp_path)] == ["false", "true", "false"]
