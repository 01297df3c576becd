"""End to end through the real CLI: a Prefect flow run, a validated suite, an MLflow run (slow)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow
MEDGYM = [sys.executable, "-c", "from flows.cli import main; main()"]


def profile(tmp_path: Path, name: str, rollouts: dict | None = None) -> Path:
    cfg = {"profile": name, **({"rollouts": rollouts} if rollouts else {}),
           "pipeline": {"state_dir": str(tmp_path / "state")},
           "data": {"seed": 0, "out_dir": str(tmp_path / "suite"),
                    "suites": {"demo": {"train_per_category": 1, "test_per_category": 1},
                               "full": {"train_per_category": 2, "test_per_category": 1}}},
           "sandbox": {"backend": "process"},
           "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlruns.db'}",
                        "artifact_location": str(tmp_path / "artifacts"), "experiment": "e2e"}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))  # rollouts play in the order they are declared
    return path


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    return subprocess.run([*MEDGYM, *args], capture_output=True, text=True, timeout=900, env=env)


@contextlib.contextmanager
def cpu_load(n: int = 3):
    """Busy processes on every core, as a user's machine running other work: the pipeline must still start."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_pipeline_runs_as_a_prefect_flow_and_is_tracked_on_a_busy_machine(tmp_path, tiny_model):
    rollouts = {
        "teacher": {"policy": {"backend": "scripted", "options": {"mistake_rate": 0.5}}, "plan": {"k": 2},
                    "split": "train", "limit": 12},
        "base": {"policy": {"backend": "hf", "options": {"model": str(tiny_model)}},
                 "plan": {"k": 1, "max_new_tokens": 32}, "split": "test", "limit": 4, "env": {"max_turns": 2}},
    }
    with cpu_load():  # a fresh Prefect home: its temporary server migrates a new database while the cores are busy
        proc = run(tmp_path, "pipeline", "run", "--profile", str(profile(tmp_path, "e2e", rollouts)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Starting Prefect's temporary server" in proc.stderr and "Prefect server ready" in proc.stderr
    result = json.loads(proc.stdout)
    stages = result["stages"]
    assert list(stages) == ["suite", "teacher", "base", "evaluate"]  # no training configured: nothing registered
    assert stages["suite"]["tasks"] >= 80 and stages["suite"]["solvable_test"] == stages["suite"]["tasks"] // 2

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = client.get_experiment_by_name("e2e")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("medgym.stage") == "pipeline")
    children = [r for r in runs if r.info.run_id != parent.info.run_id]
    assert all(r.data.tags.get("mlflow.parentRunId") == parent.info.run_id for r in children)
    assert all(r.info.status == "FINISHED" for r in runs)
    by_stage = {r.data.tags["medgym.stage"]: r for r in children}
    assert set(by_stage) == {"data.build", "data.solvability", "rollout", "evaluate"}
    assert by_stage["data.build"].data.metrics["tasks"] == stages["suite"]["tasks"]
    assert by_stage["data.build"].data.params["suite"] == "demo"
    assert by_stage["data.solvability"].data.metrics["rate"] == 1.0
    assert parent.data.params["rollouts.teacher.plan.k"] == "2" and parent.data.tags["medgym.git.commit"]

    rollout_runs = {r.data.tags["medgym.collection"]: r for r in children if r.data.tags.get("medgym.stage") == "rollout"}
    assert set(rollout_runs) == {"teacher", "base"}
    teacher = rollout_runs["teacher"].data
    assert teacher.metrics["episodes"] == 24 and teacher.metrics["success"] == 1.0
    assert teacher.params["policy"] == "scripted" and teacher.metrics["teacher_mistakes"] >= 1
    assert rollout_runs["base"].data.metrics["episodes"] == 4 and rollout_runs["base"].data.params["policy"] == "hf"
    assert stages["teacher"]["success"] == 1.0 and parent.data.metrics["teacher.success"] == 1.0
    artifacts = {a.path for a in client.list_artifacts(rollout_runs["teacher"].info.run_id)}
    assert {"episodes_sample.jsonl", "collection.json"} <= artifacts

    # one flow run, each stage a task run of it, its final state recorded before the temporary server stopped
    with sqlite3.connect(tmp_path / "prefect" / "prefect.db") as db:
        flows = list(db.execute("select f.name, r.state_type, r.id from flow_run r join flow f on r.flow_id = f.id"))
        tasks = list(db.execute("select name, state_type, flow_run_id from task_run order by start_time"))
    assert [f[:2] for f in flows] == [("medgym-pipeline", "COMPLETED")]
    stage_runs = [(name, state) for name, state, _ in tasks if name in stages]
    assert stage_runs == [(name, "COMPLETED") for name in stages]  # in the order they ran
    assert {run for *_, run in tasks} == {flows[0][2]}  # the suite's own tasks too


def test_cli_build_is_byte_for_byte_reproducible(tmp_path):
    """What `dvc repro` relies on: the same command writes the same bytes."""
    digests = []
    for name in ("a", "b"):
        out = tmp_path / name
        proc = run(tmp_path, "data", "build", "--suite", "demo", "--seed", "3", "--out", str(out),
                   "--profile", str(profile(tmp_path, "repro")))
        assert proc.returncode == 0, proc.stderr[-3000:]
        digests.append({str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in sorted(out.rglob("*")) if p.is_file()})
    assert digests[0] == digests[1] and len(digests[0]) > 10


def test_import_cli_on_the_release_sample(tmp_path, sample_release):
    out = tmp_path / "imported"
    proc = run(tmp_path, "data", "import-medagentgym", str(sample_release), "--out", str(out),
               "--profile", str(profile(tmp_path, "imp")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "medcalcbench/test" in proc.stdout
    report = json.loads((out / "import_report.json").read_text())
    assert report["per_file"]["medcalcbench/test"]["imported"] == 40
    assert report["per_file"]["medagentbench/train"]["imported"] == 0
    assert any("FHIR server" in why for why in report["per_file"]["medagentbench/train"]["refused"])
    from components.tasks.record import load_tasks

    datasets = {t.dataset for t in load_tasks(out / "tasks.jsonl")}
    assert {"medcalcbench", "npowerai", "biocoder", "mimic_iii", "eicu", "treqs"} <= datasets

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns.db'}")
    run_ = client.search_runs([client.get_experiment_by_name("e2e").experiment_id])[0]
    assert run_.data.metrics["imported_medcalcbench_test"] == 40


def test_rollout_cli_collects_resumes_and_tracks(tmp_path, small_suite):
    prof = str(profile(tmp_path, "ro"))
    out = tmp_path / "episodes"
    args = ["rollout", "--tasks", str(small_suite), "--policy", "scripted", "--split", "train", "--limit", "4",
            "--k", "2", "--workers", "2", "--out", str(out), "--profile", prof]
    first = run(tmp_path, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.loads(first.stdout)
    assert result["planned"] == 8 and result["summary"]["episodes"] == 8 and result["summary"]["success"] == 1.0
    assert "success=" in first.stderr and "ep/s" in first.stderr  # the progress bar: done, success so far, rate
    again = run(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["skipped"] == 8 and json.loads(again.stdout)["planned"] == 0

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns.db'}")
    runs = client.search_runs([client.get_experiment_by_name("e2e").experiment_id])
    assert len(runs) == 2 and all(r.data.tags["medgym.stage"] == "rollout" for r in runs)
    assert {r.data.params["k"] for r in runs} == {"2"} and runs[0].data.metrics["episodes"] == 8


def test_rollout_cli_refuses_what_the_teacher_cannot_play(tmp_path, small_suite):
    rows = [json.loads(line) for line in small_suite.read_text().splitlines()][:3]
    for r in rows:
        r["reference_code"] = None
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run(tmp_path, "rollout", "--tasks", str(tasks), "--policy", "scripted", "--out", str(tmp_path / "o"),
               "--profile", str(profile(tmp_path, "ref")))
    assert proc.returncode != 0
    assert "cannot play any of the 3 tasks" in proc.stderr and "reference solution" in proc.stderr
