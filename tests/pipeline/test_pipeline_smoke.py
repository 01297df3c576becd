"""The whole pipeline on the smoke profile through the real CLI (slow): every stage a Prefect flow run nested in
one MLflow run, a leaderboard, a registered version; a rerun takes everything from the cache; a changed setting
reruns its stage and what is downstream of it only; the paper profile's dry run (fast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

MEDGYM = [sys.executable, "-c", "from flows.cli import main; main()"]


def smoke_profile(tmp_path: Path) -> tuple[Path, dict]:
    """configs/smoke.yaml with every path it writes moved under tmp_path."""
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    models = tmp_path / "models"
    raw["profile"] = "smoke"
    raw["data"]["out_dir"] = str(tmp_path / "data" / "smoke")
    raw["tracking"] = {"mlflow_uri": f"sqlite:///{tmp_path / 'mlruns.db'}",
                       "artifact_location": str(tmp_path / "artifacts"), "experiment": "smoke-e2e"}
    raw["training"]["out_dir"] = str(models)
    raw["training"]["data_dir"] = str(tmp_path / "training")
    for r in raw["rollouts"].values():
        model = r["policy"]["options"].get("model", "")
        if isinstance(model, str) and model.startswith("models/"):  # {stage: ...} resolves under training.out_dir
            r["policy"]["options"]["model"] = str(tmp_path / model)
    raw["pipeline"]["state_dir"] = str(tmp_path / "state")
    raw["pipeline"]["reports_dir"] = str(tmp_path / "reports")
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, raw


def result_of(proc: subprocess.CompletedProcess) -> dict:
    """The command's JSON result: the last document on stdout (libraries such as DeepSpeed log there too)."""
    out = proc.stdout
    start = out.rindex("\n{\n") + 1 if "\n{\n" in out else out.index("{")
    return json.JSONDecoder().raw_decode(out[start:])[0]  # a dry run prints its estimate after it


def pipeline_runs(client, experiment: str) -> tuple:
    """The experiment's pipeline run and every other run, which must all nest under it."""
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parent = next(r for r in runs if r.data.tags.get("medgym.stage") == "pipeline")
    children = [r for r in runs if r.info.run_id != parent.info.run_id]
    assert {r.data.tags.get("mlflow.parentRunId") for r in children} == {parent.info.run_id}
    return parent, children


def medgym(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    return subprocess.run([*MEDGYM, *args], capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # every stage three times over, the first for real: minutes
def test_the_smoke_pipeline_runs_every_stage_nested_caches_and_reruns_only_what_changed(tmp_path):
    path, raw = smoke_profile(tmp_path)
    first = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert first.returncode == 0, first.stderr[-4000:]
    result = result_of(first)
    stages = result["stages"]
    assert list(stages) == ["suite", "teacher", "base", "sft", "sft_train", "grpo", "grpo_test", "verifier", "dpo",
                            "dpo_test", "round1_train", "round1-sft", "round1-dpo", "round1_test", "evaluate",
                            "register"]
    assert all(s["status"] == "ran" for s in stages.values())
    assert 0.5 < stages["teacher"]["success"] < 1.0  # half its mistakes go unrepaired
    assert stages["sft"]["global_step"] == 2
    assert stages["register"]["alias"] in ("champion", "challenger") and stages["register"]["version"] == "1"
    for name in ("sft", "verifier", "dpo", "round1-sft", "round1-dpo", "grpo"):
        assert (tmp_path / "models" / "smoke" / name / "merged" / "config.json").is_file(), name
    # online GRPO: 2 optimizer steps of 2 train tasks x 2 episodes, played in the sandbox, recorded per step
    grpo = stages["grpo"]
    assert (grpo["global_step"], grpo["episodes"], grpo["train_tasks"]) == (2, 8, 2)
    from components.rl.grpo import load_grpo_episodes

    played = load_grpo_episodes(tmp_path / "models" / "smoke" / "grpo")  # the rank's validated EpisodeStore shards
    assert [(e.metadata["grpo"]["step"], e.split) for e in played] == [(0, "train")] * 4 + [(1, "train")] * 4
    assert stages["grpo_test"]["episodes"] > 0

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=raw["tracking"]["mlflow_uri"])
    parent, children = pipeline_runs(client, "smoke-e2e")
    names = {r.info.run_name for r in children}
    assert {"smoke-sft", "smoke-verifier", "smoke-dpo", "smoke-round1-sft", "smoke-round1-dpo", "smoke-grpo",
            "leaderboard", "rollout-round1_test", "rollout-grpo_test", "register-medgym-agent-smoke"} <= names
    grpo_run = next(r for r in children if r.info.run_name == "smoke-grpo")
    for key in ("loss", "reward", "rewards_episode_reward_mean", "coding_accuracy"):  # per optimizer step
        assert [m.step for m in client.get_metric_history(grpo_run.info.run_id, key)] == [1, 2], key
    assert grpo_run.data.metrics["global_step"] == 2 and grpo_run.data.tags["medgym.method"] == "grpo"
    assert parent.data.params["training.dpo.beta"] == "0.1" and len(parent.data.tags["medgym.git.commit"]) == 40
    # what reproducing it needs beyond the commit: the libraries, the accelerator, the base checkpoint's content
    from importlib.metadata import version

    assert parent.data.tags["medgym.lib.trl"] == version("trl") and "medgym.gpu.count" in parent.data.tags
    assert len(parent.data.tags["medgym.base_model.sha256"]) == 64
    # its DVC versions are its own pipeline's (pipelines/smoke/dvc.lock, never reproduced here), not the demo's
    assert not any(k.startswith("dvc.") for k in parent.data.params)
    assert parent.data.metrics["pipeline.wall_s"] > 0 and "round1-dpo.wall_s" in parent.data.metrics
    assert parent.data.metrics["pipeline.engine_starts"] == 0  # smoke generates in hf: no vLLM engine was started

    version = client.get_model_version("medgym-agent-smoke", "1")
    assert version.tags["medgym.data.dataset.round1-dpo"] and version.tags["medgym.git.commit"]
    # the final rollout and the base model's are played under equal conditions, so the two are paired and tested
    assert version.tags["medgym.decision.against"] == "baseline" and version.tags["medgym.decision.look"] == "1"
    assert version.tags["medgym.decision.test"] in ("exact sign test", "sign-flip permutation test"), version.description
    # smoke plays no trained policy on valid: its last one is registered, and the version says no choice was made
    assert (version.tags["medgym.selection.on"], version.tags["medgym.selection.chosen"]) == ("none", "round1-dpo")
    assert version.tags["medgym.selection.test_reads"] == "3" and stages["register"]["chosen_on"] == "none"
    board = tmp_path / "reports" / "smoke" / "leaderboard"
    assert {"leaderboard.md", "leaderboard.json"} <= {p.name for p in board.iterdir()}
    assert any(p.suffix == ".png" for p in board.iterdir())
    rows = json.loads((board / "leaderboard.json").read_text())
    assert "round1_test" in json.dumps(rows) and "dpo_test" in json.dumps(rows) and "grpo_test" in json.dumps(rows)

    again = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert again.returncode == 0, again.stderr[-4000:]
    assert {s["status"] for s in result_of(again)["stages"].values()} == {"cached"}

    raw["pipeline"]["self_improve"]["dpo"]["beta"] = 0.2  # the last round's DPO and what reads it
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    changed = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert changed.returncode == 0, changed.stderr[-4000:]
    status = {n: s["status"] for n, s in result_of(changed)["stages"].items()}
    assert {n for n, s in status.items() if s != "cached"} == {"round1-dpo", "round1_test", "evaluate", "register"}
    assert "inputs changed: cleared" in changed.stderr + changed.stdout


def test_the_paper_dry_run_prints_the_plan_without_a_gpu_or_a_server(tmp_path):
    proc = medgym(tmp_path, "pipeline", "run", "--profile", "paper", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = result_of(proc)
    rows = {r["stage"]: r for r in plan["stages"]}
    assert plan["dry_run"] and "Prefect server" not in proc.stderr
    assert rows["suite"]["what"] == "import data/medagentgym-release"
    base = rows["base_train"]
    assert base["what"] == "vllm checkpoints/Qwen2.5-7B-Instruct" and base["k"] == 16
    assert base["temperature"] == "0.0 then 0.6" and base["sandbox"] == "docker"
    assert rows["sft"]["learning_rate"] == 1e-4 and rows["dpo"]["learning_rate"] == 5e-6 and rows["dpo"]["beta"] == 0.1
    assert rows["sft"]["deepspeed"] == "zero3" and rows["sft"]["processes"] == 8
    assert "accelerate/zero3.yaml --num_processes 8" in rows["sft"]["launch"]
    assert {"round2-sft", "round2-dpo", "round2_test", "evaluate", "register"} <= set(rows)
    assert all(r["cache"] == "new" for r in rows.values())
    assert "pipeline paper (dry run)" in proc.stdout


def test_a_stage_the_profile_lacks_is_refused_by_name(tmp_path):
    proc = medgym(tmp_path, "pipeline", "run", "--profile", "paper", "--only", "sfft")
    assert proc.returncode != 0
    assert "--only names sfft, not stages of profile paper" in proc.stderr
