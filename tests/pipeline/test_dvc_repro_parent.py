"""One `dvc repro` is one MLflow parent run: DVC runs each stage as its own `medgym pipeline run --only <stage>`
command, and every stage of the same reproduction joins the parent run its first stage opened; the next `dvc repro`
opens its own. Runs real `dvc repro` in a fresh git + DVC repository on the smoke profile's first two stages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
MEDGYM = Path(sys.executable).parent / "medgym"


def _repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw["data"]["out_dir"] = str(repo / "data" / "suite")
    for r in raw["rollouts"].values():
        r.pop("out_dir", None)
    raw["tracking"] = {"mlflow_uri": f"sqlite:///{tmp / 'mlruns.db'}", "experiment": "dvc-parent"}
    # the run reads this repository's lock, which DVC rewrites after the first stage, before the second joins
    raw.setdefault("pipeline", {}).update(state_dir=str(tmp / "state"), reports_dir=str(tmp / "reports"),
                                          dvc_file=str(repo / "dvc.yaml"))
    (repo / "profile.yaml").write_text(yaml.safe_dump(raw))
    cmd = f"{MEDGYM} pipeline run --profile {repo / 'profile.yaml'} --only"
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {
        "suite": {"cmd": f"{cmd} suite", "deps": ["profile.yaml"], "outs": [{"data/suite": {"persist": True}}]},
        "teacher": {"cmd": f"{cmd} teacher", "deps": ["data/suite"],
                    "outs": [{"data/rollouts/smoke/teacher": {"persist": True}}]}}}))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    for argv in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(argv, cwd=repo, env=env, check=True)
    return repo


def _parents(tmp: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp / 'mlruns.db'}")
    exp = client.get_experiment_by_name("dvc-parent")
    return client.search_runs([exp.experiment_id], "tags.`medgym.stage` = 'pipeline'")


@pytest.mark.timeout(1800)
def test_the_stages_of_one_dvc_repro_share_one_parent_run(tmp_path: Path):
    repo = _repo(tmp_path)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PYTHONPATH": str(ROOT)}
    repro = subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=repo, env=env, capture_output=True, text=True)
    assert repro.returncode == 0, repro.stdout[-3000:] + repro.stderr[-3000:]

    parents = _parents(tmp_path)
    assert len(parents) == 1, [p.data.tags.get("medgym.stages") for p in parents]
    tags = parents[0].data.tags
    assert tags["medgym.stages"] == "suite,teacher" and tags["medgym.dvc_session"]
    assert parents[0].info.status == "FINISHED"
    # the parent's DVC versions are the lock as the reproduction found it: before its first stage, none
    assert not any(k.startswith("dvc.") for k in parents[0].data.params)

    forced = subprocess.run([sys.executable, "-m", "dvc", "repro", "--force", "--single-item", "teacher"], cwd=repo, env=env,
                            capture_output=True, text=True)
    assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
    parents = _parents(tmp_path)
    assert len(parents) == 2  # another reproduction, another parent
    sessions = {p.data.tags["medgym.dvc_session"] for p in parents}
    assert len(sessions) == 2 and tags["medgym.dvc_session"] in sessions
    latest = max(parents, key=lambda p: p.info.start_time)
    assert latest.data.tags["medgym.stages"] == "teacher"
