"""The plan of each profile: which stages, in what order, reading what; and the errors a bad profile gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.pipeline.plan import PlanError, build_plan
from components.pipeline.state import PipelineState, clear_outputs, stage_key
from components.profile.config import CONFIG_DIR, PipelineConfig, load_config
from tests.conftest import ROOT


def test_the_demo_plan_chains_every_stage_in_dependency_order():
    plan = build_plan(load_config("demo"))
    rounds = ["round1_train", "round1-sft", "round1-dpo", "round1_test", "round1_valid"]
    assert plan.names == ["suite", "teacher", "base", "sft", "sft_test", "sft_valid", "sft_train", "verifier", "dpo",
                          "dpo_test", "dpo_valid", *rounds, "evaluate", "register"]
    assert plan["sft"].needs == ("teacher",)
    assert plan["sft_test"].needs == ("suite", "sft")  # it plays the SFT model
    assert set(plan["dpo"].needs) == {"teacher", "sft_train", "sft", "verifier"}  # verifier-ranked pairs
    assert set(plan["round1-sft"].needs) == {"round1_train", "dpo", "verifier"}  # the DPO model's approved successes
    assert plan["evaluate"].needs == ("base", "sft_test", "dpo_test", "round1_test", "sft_valid", "dpo_valid",
                                      "round1_valid", "verifier")
    assert plan.evaluated() == ["base", "sft_test", "dpo_test", "round1_test"]  # valid has a board of its own
    assert plan.baseline() == "base"
    assert plan.final()[0].name == "round1-dpo" and plan.final()[1] == "round1_test"
    # the model to register is chosen on valid: every candidate, its valid and its test rollout
    assert plan["register"].needs == ("evaluate", "sft", "sft_valid", "sft_test", "dpo", "dpo_valid", "dpo_test",
                                      "round1-dpo", "round1_valid", "round1_test")
    # every model plays through vLLM with the same server settings: the run keeps one server for them all
    engines = {json.dumps({k: v for k, v in r.policy.options.items() if k != "model"}, sort_keys=True)
               for r in plan.cfg.rollouts.values() if r.policy.backend == "vllm"}
    assert len(engines) == 1 and len([r for r in plan.cfg.rollouts.values() if r.policy.backend == "vllm"]) == 9


def test_self_improvement_rounds_become_stages_that_play_and_train_from_the_previous_round():
    plan = build_plan(load_config("paper"))
    r1, r2 = plan.cfg.rollouts["round1_train"], plan.cfg.rollouts["round2_train"]
    assert r1.policy.options["model"] == "models/paper/dpo/merged"
    assert r2.policy.options["model"] == "models/paper/round1-dpo/merged"
    assert plan["round1-sft"].settings.init == "models/paper/dpo/merged"
    assert plan["round1-sft"].settings.episodes == ["round1_train"]  # the round's own episodes only
    assert plan["round1-sft"].settings.min_verifier_score == 0.5
    assert set(plan["round1-sft"].needs) == {"round1_train", "dpo", "verifier"}
    assert plan["round2-dpo"].settings.init == "models/paper/round2-sft/merged"
    assert plan.names.index("round1_test") < plan.names.index("round2_train")
    assert plan.final()[0].name == "round2-dpo" and plan.final()[1] == "round2_test"
    assert plan.baseline() == "base_test"
    # each round's stage trains with the round's settings and writes its own folders
    tcfg = plan.training_config(plan["round2-sft"])
    assert tcfg.training.sft.init == "models/paper/round1-dpo/merged"
    assert plan["round2-sft"].outputs == (Path("data/training/paper/round2-sft"), Path("models/paper/round2-sft"))


def _cfg(**over) -> PipelineConfig:
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    return PipelineConfig.model_validate({**raw, **over})


def test_a_method_the_profile_does_not_configure_is_not_trained():
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    raw["training"] = {"base_model": "tiny-random-llama", "sft": raw["training"]["sft"]}
    raw["rollouts"] = {k: v for k, v in raw["rollouts"].items() if k in ("teacher", "base")}
    raw.pop("pipeline")
    plan = build_plan(PipelineConfig.model_validate(raw))
    assert plan.names == ["suite", "teacher", "base", "sft", "evaluate"]  # no held-out rollout plays sft: no register


def test_a_rollout_names_the_stage_whose_model_it_plays_and_the_plan_sets_its_folder():
    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    assert raw["rollouts"]["dpo_test"]["plays"] == "dpo" and "model" not in raw["rollouts"]["dpo_test"]["policy"]["options"]
    plan = build_plan(load_config("smoke"))
    assert plan.cfg.rollouts["dpo_test"].policy.options["model"] == "models/smoke/dpo/merged"
    assert plan["dpo_test"].needs == ("suite", "dpo") and plan["base"].needs == ("suite",)  # base: a checkpoint
    assert (plan.cfg.rollouts["round1_test"].plays, plan.cfg.rollouts["round1_train"].plays) == ("round1-dpo", "dpo")
    with pytest.raises(ValueError, match=r"rollouts.dpo_test plays the dpo stage's model, whose folder the plan sets"):
        load_config("smoke").collection("dpo_test")

    def with_model(model: object) -> PipelineConfig:
        rollouts = {**raw["rollouts"], "dpo_test": {**raw["rollouts"]["dpo_test"], "plays": None,
                                                    "policy": {"backend": "hf", "options": {"model": model}}}}
        return PipelineConfig.model_validate({**raw, "rollouts": rollouts})

    with pytest.raises(PlanError, match=r"rollouts.dpo_test plays models/smoke/dpo/merged, the dpo stage's model: "
                                        r"write `model: \{stage: dpo\}`"):
        build_plan(with_model("models/smoke/dpo/merged"))
    with pytest.raises(PlanError, match=r"rollouts.dpo_test plays the model of stage 'dpo2', which profile smoke does "
                                        r"not train \(it trains: sft, verifier, dpo, round1-sft, round1-dpo, grpo\)"):
        build_plan(with_model({"stage": "dpo2"}))
    with pytest.raises(ValueError, match=r"policy.options.model is a checkpoint \(a path or a model name\) or"):
        with_model({"stage": "dpo", "path": "x"})


def test_bad_stage_lists_name_what_is_wrong():
    with pytest.raises(PlanError, match=r"names 'sfft', which profile smoke does not configure"):
        build_plan(_cfg(pipeline={"stages": ["suite", "teacher", "sfft"]}))
    with pytest.raises(PlanError, match=r"stage 'sft' needs teacher, which comes later"):
        build_plan(_cfg(pipeline={"stages": ["suite", "sft", "teacher"]}))
    with pytest.raises(PlanError, match=r"dpo needs sft_train"):
        raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
        raw["rollouts"].pop("sft_train")
        raw.pop("pipeline")
        build_plan(PipelineConfig.model_validate(raw))


def test_an_explicit_stage_list_runs_in_its_order_and_self_improve_expands():
    plan = build_plan(_cfg(pipeline={"stages": ["suite", "teacher", "base", "sft", "sft_train", "verifier", "dpo",
                                                "dpo_test", "self_improve", "evaluate"],
                                     "self_improve": load_config("smoke").pipeline.self_improve.model_dump()}))
    assert plan.names[-5:] == ["round1_train", "round1-sft", "round1-dpo", "round1_test", "evaluate"]
    assert "register" not in plan.names  # an explicit list registers only when it says so


# ---------------------------------------------------------------------- keys and state
def test_a_changed_setting_changes_its_stage_key_and_every_key_downstream_only():
    def keys(cfg: PipelineConfig) -> dict[str, str]:
        plan, out = build_plan(cfg), {}
        for s in plan.stages:
            out[s.name] = stage_key(plan, s, out, ROOT)
        return out

    raw = load_config("smoke").model_dump(mode="json", exclude_unset=True)
    before = keys(PipelineConfig.model_validate(raw))
    assert before == keys(PipelineConfig.model_validate(raw))  # deterministic
    raw["training"]["verifier"]["schedule"]["learning_rate"] = 3e-4
    after = keys(PipelineConfig.model_validate(raw))
    changed = {n for n in before if before[n] != after[n]}
    assert changed == {"verifier", "dpo", "dpo_test", "round1_train", "round1-sft", "round1-dpo", "round1_test",
                       "evaluate", "register"}
    raw["tracking"]["experiment"] = "elsewhere"  # where runs are tracked decides no result
    assert keys(PipelineConfig.model_validate(raw)) == after


def test_state_decides_new_resume_cached_stale_and_a_stale_stage_is_cleared(tmp_path):
    plan = build_plan(load_config("smoke"))
    stage = plan["sft"].__class__(name="sft", kind="train", outputs=(Path("out"),))
    state = PipelineState(tmp_path / "state")
    assert state.decide(stage, "k1", tmp_path) == "new"
    state.start("sft", "k1")
    assert state.decide(stage, "k1", tmp_path) == "resume"  # killed while running: run on its outputs
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f").write_text("x")
    rec = state.finish("sft", "k1", state.read("sft").started_at, {"rows": 3})
    assert rec.wall_s is not None and state.read("sft").result == {"rows": 3}
    assert state.decide(stage, "k1", tmp_path) == "cached"
    assert state.decide(stage, "k2", tmp_path) == "stale"
    assert clear_outputs(stage.outputs, tmp_path) == [tmp_path / "out"] and not (tmp_path / "out").exists()
    assert state.decide(stage, "k1", tmp_path) == "resume"  # done, but its outputs are gone
    assert not list((tmp_path / "state").glob("*.tmp*"))


def test_a_done_stage_whose_outputs_were_replaced_runs_again(tmp_path):
    """`dvc exp run` checks the baseline's outputs out before it reproduces: a key that still holds must not vouch
    for another version's bytes (state.output_digests)."""
    from components.pipeline.state import decide, output_digests

    raw = load_config("smoke").model_dump(mode="json")
    raw["pipeline"]["state_dir"] = str(tmp_path / "state")
    plan = build_plan(PipelineConfig.model_validate(raw))
    stage = plan["suite"]
    (out,) = stage.outputs
    (tmp_path / out).mkdir(parents=True)
    (tmp_path / out / "tasks.jsonl").write_text('{"id": 1}\n')
    state, keys = PipelineState(tmp_path / "state"), {"suite": "k1"}
    state.start("suite", "k1")
    state.finish("suite", "k1", 0.0, {}, output_digests(plan, stage, tmp_path))
    assert decide(plan, state, stage, keys, tmp_path) == "cached"
    (tmp_path / out / "tasks.jsonl").write_text('{"id": 2}\n')  # another version checked out in place
    assert decide(plan, state, stage, keys, tmp_path) == "replaced"
    (tmp_path / out / "tasks.jsonl").write_text('{"id": 1}\n')  # the bytes it wrote, in a new file
    assert decide(plan, state, stage, keys, tmp_path) == "cached"
    state.finish("suite", "k1", 0.0, {})  # a record from before outputs were recorded: its outputs are trusted
    (tmp_path / out / "tasks.jsonl").write_text('{"id": 3}\n')
    assert decide(plan, state, stage, keys, tmp_path) == "cached"


def test_a_deployment_points_every_profile_at_its_tracking_server(monkeypatch):
    from components.tracking.tracker import URI_ENV, MlflowTracker, TrackingConfig

    assert MlflowTracker(TrackingConfig(mlflow_uri="http://127.0.0.1:5000")).uri == "http://127.0.0.1:5000"
    monkeypatch.setenv(URI_ENV, "http://mlflow:5000")
    assert MlflowTracker(TrackingConfig(mlflow_uri="http://127.0.0.1:5000")).uri == "http://mlflow:5000"


def test_dvc_yaml_is_the_demo_plan_one_dvc_stage_per_pipeline_stage():
    import yaml

    from components.pipeline.dvc import render
    from components.profile.config import CONFIG_DIR

    plan = build_plan(load_config("demo"))
    text = render(plan, CONFIG_DIR / "demo.yaml", ROOT)
    assert (ROOT / "dvc.yaml").read_text() == text, "dvc.yaml is stale: run `medgym pipeline dvc --profile demo`"
    stages = yaml.safe_load(text)["stages"]
    assert list(stages) == [n for n in plan.names if n != "register"]  # registration writes no data
    assert stages["dpo"]["cmd"] == ".venv/bin/medgym pipeline run --profile demo --only dpo"
    assert {"data/rollouts/demo/sft_train", "models/demo/sft/merged", "models/demo/verifier/merged"} <= \
        set(stages["dpo"]["deps"])
    assert stages["dpo"]["params"] == [{"configs/demo.yaml": ["training.dpo", "training.base_model", "training.distributed"]}]
    assert stages["sft_test"]["outs"] == [{"data/rollouts/demo/sft_test": {"persist": True}}]


def test_demo_rl_trains_grpo_after_sft_pairs_them_on_valid_and_test_and_has_its_checked_in_pipeline():
    """The embedded default with online RL: GRPO starts from the SFT model, both play valid and test with the same
    plans, the leaderboards pair GRPO with SFT, and the model to register is chosen on valid."""
    from components.pipeline.dvc import dvc_file, render

    cfg = load_config("demo-rl")
    plan = build_plan(cfg)
    assert plan["grpo"].needs == ("suite", "sft") and plan["grpo"].settings.init == "sft"
    assert plan.parents(plan.evaluated()) == {"grpo_test": "sft_test"}
    assert plan.parents(plan.valid_rollouts()) == {"grpo_valid": "sft_valid"}
    # asked over both splits at once (the evaluate stage's key hashes it so), each is paired on its own split
    assert plan.parents([*plan.evaluated(), *plan.valid_rollouts()]) == {"grpo_test": "sft_test",
                                                                          "grpo_valid": "sft_valid"}
    assert [p.stage.name for p in plan.on_valid()] == ["sft", "grpo"] and plan.baseline() == "base"
    for split in ("valid", "test"):  # paired task by task: the same plan and turn limit
        sft, grpo = cfg.rollouts[f"sft_{split}"], cfg.rollouts[f"grpo_{split}"]
        assert sft.plan == grpo.plan and sft.env == grpo.env and sft.split == grpo.split == split
    text = render(plan, CONFIG_DIR / "demo-rl.yaml", ROOT)
    assert (ROOT / dvc_file(cfg)).read_text() == text, "stale: run `medgym pipeline dvc --profile demo-rl`"


def test_a_stage_is_paired_with_the_nearest_model_its_training_started_from():
    demo = build_plan(load_config("demo"))
    # a round's DPO model started from the round's SFT step, which no rollout plays: paired with what the round
    # started from (the DPO model)
    assert demo.parents(demo.evaluated()) == {"dpo_test": "sft_test", "round1_test": "dpo_test"}
    assert demo.parents(demo.valid_rollouts()) == {"dpo_valid": "sft_valid", "round1_valid": "dpo_valid"}
    smoke = build_plan(load_config("smoke"))
    assert "grpo_test" not in smoke.parents(smoke.evaluated())  # its SFT model plays no test rollout


def test_an_interrupted_pipeline_run_is_carried_on_under_its_parent_run_and_a_changed_profile_starts_anew(tmp_path):
    from mlflow.tracking import MlflowClient

    from components.tracking.tracker import MlflowTracker, TrackingConfig

    tracking = TrackingConfig(mlflow_uri=f"sqlite:///{tmp_path / 'm.db'}", artifact_location=str(tmp_path / "a"),
                              experiment="resume")
    state = PipelineState(tmp_path / "state")
    tracker = MlflowTracker(tracking)
    with pytest.raises(KeyboardInterrupt), tracker.run("pipeline-x") as first:
        state.mark_run(first.run_id, "running", "p1")
        first.log_metrics({"sft.wall_s": 3.0})
        raise KeyboardInterrupt  # killed mid-run
    client = MlflowClient(tracking_uri=tracking.mlflow_uri)
    assert client.get_run(first.run_id).info.status == "FAILED"
    assert state.interrupted_run("p2") is None  # other params: a new run
    resumed = state.interrupted_run("p1")
    assert resumed == first.run_id
    with tracker.run("pipeline-x", resume=resumed) as again:
        again.log_metrics({"dpo.wall_s": 5.0})
        state.mark_run(again.run_id, "done", "p1")
    run = client.get_run(first.run_id)
    assert run.info.status == "FINISHED" and set(run.data.metrics) == {"sft.wall_s", "dpo.wall_s"}
    assert state.interrupted_run("p1") is None  # it ended well
    assert len(client.search_runs([client.get_experiment_by_name("resume").experiment_id])) == 1


def test_each_profile_has_its_own_dvc_pipeline_and_the_paper_suite_depends_on_the_release():
    from components.pipeline.dvc import dvc_file, dvc_stages

    files = {name: dvc_file(load_config(name)) for name in ("demo", "demo-rl", "smoke", "paper", "diag-demo")}
    assert files["demo"] == Path("dvc.yaml") and files["smoke"] == Path("pipelines/smoke/dvc.yaml")
    assert len(set(files.values())) == len(files)  # no two profiles write one file
    plan = build_plan(load_config("paper"))
    stages = dvc_stages(plan, CONFIG_DIR / "paper.yaml", ROOT)["stages"]
    assert stages["suite"]["wdir"] == "../.." and "data/medagentgym-release" in stages["suite"]["deps"]
    assert not any("medagentgym-release" in d for s, body in stages.items() if s != "suite" for d in body["deps"])


def test_regenerating_a_dvc_file_keeps_the_stages_dvc_froze(tmp_path):
    import os
    import subprocess
    import sys

    import yaml

    from components.pipeline.dvc import dvc_stages, frozen_stages

    doc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    for body in doc["stages"].values():
        body.pop("frozen", None)  # none frozen, then one
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, env=env, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "freeze", "teacher"], cwd=tmp_path, env=env, check=True)
    plan = build_plan(load_config("demo"))
    stages = dvc_stages(plan, CONFIG_DIR / "demo.yaml", ROOT, frozen_stages(tmp_path / "dvc.yaml"))["stages"]
    assert stages["teacher"]["frozen"] is True
    assert not any(body.get("frozen") for name, body in stages.items() if name != "teacher")
