"""DiagGym as pipeline profiles: the plan of a `diag` profile (cohort → world → cold_start → grpo → evaluate →
register), its DVC file, which stages a changed setting reruns, one world seed and a valid split, and (slow)
diag-smoke end to end through the CLI: every stage a Prefect flow nested in one MLflow run, the world-model card
and the evaluation report (valid, and test for the registered agents) with figures in reports/, every stage on the
one saved world, both models registered, a rerun from the cache, a GRPO run extended by more steps, a changed GRPO
setting rerunning only what it feeds, a changed world refitted and every stage after it rerun in it."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import struct

import pytest
import yaml

from components.common.io import RecordError
from components.diag.evaluate import agent_episodes_dir
from components.diag.record import load_cases
from components.pipeline.dvc import dvc_file, render
from components.pipeline.plan import PlanError, build_plan
from components.pipeline.state import PipelineState, decide, stage_key
from components.profile.config import CONFIG_DIR, PipelineConfig, load_config
from components.rollout.store import load_episodes_dir
from tests.conftest import ROOT
from tests.pipeline.test_pipeline_smoke import medgym, pipeline_runs, result_of

STAGES = ["cohort", "world", "cold_start", "grpo", "evaluate", "register"]


def keys(cfg: PipelineConfig) -> dict[str, str]:
    plan, out = build_plan(cfg), {}
    for stage in plan.stages:
        out[stage.name] = stage_key(plan, stage, out, ROOT)
    return out


def test_a_diag_profile_chains_the_diaggym_stages():
    plan = build_plan(load_config("diag-demo"))
    assert plan.names == STAGES
    assert plan["cold_start"].needs == ("cohort", "world")  # each later stage plays in the world the world stage saved
    assert plan["grpo"].needs == ("cohort", "world", "cold_start")
    assert plan["evaluate"].needs == ("cohort", "world", "cold_start", "grpo")
    assert plan["register"].needs == ("world", "evaluate", "grpo")
    assert str(plan["evaluate"].outputs[0]) == "reports/diag-demo/evaluation"
    assert build_plan(load_config("diag-smoke")).names == STAGES


def test_a_diag_profile_refuses_the_coding_pipelines_sections():
    raw = yaml.safe_load((CONFIG_DIR / "diag-smoke.yaml").read_text())
    raw["rollouts"] = {"teacher": {"policy": {"backend": "scripted"}, "split": "train"}}
    with pytest.raises(PlanError, match="runs DiagGym's stages only"):
        build_plan(PipelineConfig.model_validate(raw))
    raw.pop("rollouts")
    raw["pipeline"] = {"stages": ["cohort", "sft"]}
    with pytest.raises(PlanError, match="not DiagGym stages"):
        build_plan(PipelineConfig.model_validate(raw))


def test_the_diag_demo_dvc_file_is_its_plan_and_runs_from_the_root():
    cfg = load_config("diag-demo")
    path = ROOT / dvc_file(cfg)
    assert path == ROOT / "pipelines" / "diag-demo" / "dvc.yaml"
    text = render(build_plan(cfg), CONFIG_DIR / "diag-demo.yaml", ROOT)
    assert path.read_text() == text, "stale: run `medgym pipeline dvc --profile diag-demo`"
    stages = yaml.safe_load(text)["stages"]
    assert list(stages) == STAGES[:-1]  # registration writes no data
    assert all(s["wdir"] == "../.." for s in stages.values())
    assert stages["grpo"]["cmd"] == ".venv/bin/medgym pipeline run --profile diag-demo --only grpo"
    assert {"components/rl/grpo.py", "models/diag-demo/cold_start", "models/diag-demo/world",
            "data/diag-demo"} <= set(stages["grpo"]["deps"])
    assert stages["grpo"]["params"] == [{"configs/diag-demo.yaml": ["diag.grpo", "diag.env", "diag.models_dir"]}]
    assert stages["evaluate"]["metrics"] == ["reports/diag-demo/metrics.json"]  # cached: dvc exp show reads it


def test_a_changed_grpo_setting_changes_the_keys_of_grpo_and_what_reads_it_only():
    cfg = load_config("diag-demo")
    before = keys(cfg)
    after = keys(with_grpo(cfg, steps=cfg.diag.grpo.settings.steps + 1))
    assert [n for n in STAGES if before[n] != after[n]] == ["grpo", "evaluate", "register"]


def test_a_changed_world_changes_the_keys_of_the_world_and_every_stage_that_plays_in_it():
    cfg = load_config("diag-demo")
    reseeded = cfg.model_copy(update={"diag": cfg.diag.model_copy(update={
        "world": cfg.diag.world.model_copy(update={"seed": cfg.diag.world.seed + 1})})})
    before, after = keys(cfg), keys(reseeded)
    assert [n for n in STAGES if before[n] != after[n]] == STAGES[1:]


def test_a_diag_profile_has_one_world_seed_and_a_valid_split(tmp_path):
    raw = yaml.safe_load((CONFIG_DIR / "diag-smoke.yaml").read_text())
    raw["diag"]["env"]["world_seed"] = 0  # the same as world.seed: one world still
    assert PipelineConfig.model_validate(raw).diag.env.world_seed == 0
    for key, value, message in [
            (("env", "world_seed"), 3, "diag.env.world_seed 3 differs from diag.world.seed 0: the world stage fits and "
                                       "seeds the one world every later stage loads; drop diag.env.world_seed"),
            (("cohort", "valid_fraction"), 0.0, "diag.cohort.valid_fraction is 0: the pipeline reads the GRPO steps")]:
        changed = copy.deepcopy(raw)
        changed["diag"][key[0]][key[1]] = value
        path = tmp_path / "diag-bad.yaml"
        path.write_text(yaml.safe_dump(changed))
        with pytest.raises(RecordError, match=re.escape(message)) as err:
            load_config(str(path))
        assert str(err.value).startswith(f"{path}, field 'diag': ") and "\n" not in str(err.value)


def test_what_the_agent_is_registered_on_changes_the_registration_key_only():
    cfg = load_config("diag-smoke")
    assert cfg.diag.register_on == "accuracy"
    on_f1 = cfg.model_copy(update={"diag": cfg.diag.model_copy(update={"register_on": "exam_f1"})})
    before, after = keys(cfg), keys(on_f1)
    assert [n for n in STAGES if before[n] != after[n]] == ["register"]


def with_grpo(cfg: PipelineConfig, **update) -> PipelineConfig:
    settings = cfg.diag.grpo.settings.model_copy(update=update)
    return cfg.model_copy(update={"diag": cfg.diag.model_copy(update={
        "grpo": cfg.diag.grpo.model_copy(update={"settings": settings})})})


def test_a_finished_grpo_run_asked_for_more_steps_is_extended_and_anything_else_starts_over(tmp_path):
    demo = load_config("diag-demo")
    cfg = demo.model_copy(update={"diag": demo.diag.model_copy(update={"models_dir": tmp_path / "models"})})
    steps = cfg.diag.grpo.settings.steps
    state = PipelineState(tmp_path / "state")
    ran = keys(cfg)
    state.finish("grpo", ran["grpo"], 0.0, {"global_step": steps})

    def decision(changed: PipelineConfig) -> str:
        plan = build_plan(changed)
        return decide(plan, state, plan["grpo"], keys(changed), ROOT)

    assert decision(with_grpo(cfg, steps=steps * 2)) == "stale"  # no checkpoint to carry on from
    checkpoint = tmp_path / "models" / "grpo" / f"checkpoint-{steps}"
    checkpoint.mkdir(parents=True)
    assert decision(with_grpo(cfg, steps=steps * 2)) == "stale"  # half-written: the trainer writes its state last
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": steps}))
    assert decision(with_grpo(cfg, steps=steps * 2)) == "extend"
    assert decision(with_grpo(cfg, steps=steps - 1)) == "stale"  # fewer steps: the run is not a prefix of it
    assert decision(with_grpo(cfg, steps=steps * 2, learning_rate=1e-6)) == "stale"
    state.finish("grpo", ran["grpo"], 0.0, {})  # a run that did not say how far it got
    assert decision(with_grpo(cfg, steps=steps * 2)) == "stale"
    state.start("grpo", ran["grpo"])  # killed while running: resumed on its own key, never extended
    assert decision(with_grpo(cfg, steps=steps * 2)) == "stale"


def diag_smoke_profile(tmp_path):
    raw = yaml.safe_load((CONFIG_DIR / "diag-smoke.yaml").read_text())
    raw["tracking"] = {"mlflow_uri": f"sqlite:///{tmp_path / 'mlruns.db'}",
                       "artifact_location": str(tmp_path / "artifacts"), "experiment": "diag-smoke-e2e"}
    raw["diag"]["out_dir"] = str(tmp_path / "data")
    raw["diag"]["models_dir"] = str(tmp_path / "models")
    raw["pipeline"] = {"state_dir": str(tmp_path / "state"), "reports_dir": str(tmp_path / "reports")}
    path = tmp_path / "diag-smoke.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, raw


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_diag_smoke_runs_every_stage_tracked_registered_and_cached(tmp_path):
    path, raw = diag_smoke_profile(tmp_path)
    first = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert first.returncode == 0, first.stderr[-4000:]
    stages = result_of(first)["stages"]
    assert list(stages) == STAGES and all(s["status"] == "ran" for s in stages.values())
    for stage in STAGES[:-1]:
        assert f"[{stage}] running" in first.stderr
    assert stages["cohort"]["cases"] > 0 and stages["grpo"]["global_step"] == 2
    assert stages["grpo"]["episodes"] == 2 * 2  # steps x (prompts_per_step x num_generations)
    assert stages["cold_start"]["global_step"] == 2 and stages["world"]["lm_global_step"] == 2
    for name in ("world", "cold_start", "grpo"):
        assert (tmp_path / "models" / name / "merged" / "config.json").is_file(), name
    world = hashlib.sha256((tmp_path / "models" / "world" / "statistical.json").read_bytes()).hexdigest()
    assert {n: stages[n]["world"] for n in STAGES[1:]} == {n: world for n in STAGES[1:]}  # one world, saved once

    reports = tmp_path / "reports" / "diag-smoke"
    report = json.loads((reports / "evaluation" / "report.json").read_text())
    assert report["split"] == "valid"  # what every choice is read off
    assert [a["agent"] for a in report["agents"]] == ["random", "greedy", "untrained", "cold_start", "grpo"]
    assert [(c["a"], c["b"]) for c in report["comparisons"]][0] == ("grpo", "cold_start")
    assert all(a["cases"] == 3 for a in report["agents"])
    assert "| grpo - cold_start | 3 |" in (reports / "evaluation" / "report.md").read_text()
    tested = json.loads((reports / "evaluation" / "test" / "report.json").read_text())  # the registration's
    assert tested["split"] == "test" and [a["agent"] for a in tested["agents"]] == ["grpo", "cold_start"]
    cases = {c.case_id: c.split for c in load_cases(tmp_path / "data" / "cases.jsonl")}
    for folder, split in (("evaluation", "valid"), ("evaluation/test", "test")):
        played = load_episodes_dir(agent_episodes_dir(reports / folder, "grpo"), strict=True).episodes  # shards
        assert played and {cases[e.task_id] for e in played} == {split}
    for png in ("accuracy.png", "exam_f1.png"):
        width, height = png_size(reports / "evaluation" / png)
        assert width > 100 and height > 100
    card = json.loads((reports / "world" / "card.json").read_text())
    assert [m["model"] for m in card["models"]] == ["recorded", "statistical", "lm"]
    metrics = json.loads((reports / "metrics.json").read_text())
    assert {"valid.grpo-cold_start.accuracy_low", "test.grpo-cold_start.accuracy_low"} <= set(metrics)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=raw["tracking"]["mlflow_uri"])
    parent, children = pipeline_runs(client, "diag-smoke-e2e")
    names = {r.info.run_name for r in children}
    assert {"diag-world-lm", "diag-fidelity", "diag-cold-start", "diag-grpo", "diag-evaluate",
            "register-medgym-diag-agent-smoke", "register-medgym-diag-world-smoke"} <= names
    grpo = next(r for r in children if r.info.run_name == "diag-grpo")
    assert len(client.get_metric_history(grpo.info.run_id, "reward")) == 2  # one per logging step
    assert parent.data.metrics["grpo.global_step"] == 2
    for name in ("medgym-diag-agent-smoke", "medgym-diag-world-smoke"):
        version = client.get_model_version(name, "1")
        assert version.tags["medgym.decision"] in ("champion", "challenger")
        assert version.tags["medgym.data.cases"] and int(version.tags["medgym.eval.tasks"]) > 0
    assert client.get_model_version("medgym-diag-agent-smoke", "1").tags["medgym.eval.metric"] == "accuracy"
    assert client.get_model_version("medgym-diag-world-smoke", "1").tags["medgym.eval.metric"] == "consistency"

    again = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert again.returncode == 0, again.stderr[-4000:]
    assert all(s["status"] == "cached" for s in result_of(again)["stages"].values())

    raw["diag"]["grpo"]["settings"]["steps"] = 3  # one more step: the finished run carries on from its checkpoint
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    longer = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert longer.returncode == 0, longer.stderr[-4000:]
    stages = result_of(longer)["stages"]
    assert {n: s["status"] for n, s in stages.items()} == {
        "cohort": "cached", "world": "cached", "cold_start": "cached", "grpo": "extended", "evaluate": "ran",
        "register": "ran"}
    assert "[grpo] more steps asked: continuing from its last checkpoint" in longer.stderr
    assert stages["grpo"]["global_step"] == 3 and stages["grpo"]["episodes"] == 3 * 2  # the first two steps kept

    raw["diag"]["grpo"]["settings"]["learning_rate"] = 2e-5
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    third = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert third.returncode == 0, third.stderr[-4000:]
    status = {n: s["status"] for n, s in result_of(third)["stages"].items()}
    assert status == {"cohort": "cached", "world": "cached", "cold_start": "cached", "grpo": "ran",
                      "evaluate": "ran", "register": "ran"}
    assert result_of(third)["stages"]["grpo"]["episodes"] == 3 * 2  # cleared, then trained anew
    assert str(client.get_model_version("medgym-diag-agent-smoke", "3").version) == "3"

    champion = client.get_registered_model("medgym-diag-agent-smoke").aliases.get("champion")
    raw["diag"]["register_on"] = "exam_f1"  # what the agent is paired on: the registration alone reruns
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    fourth = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert fourth.returncode == 0, fourth.stderr[-4000:]
    status = {n: s["status"] for n, s in result_of(fourth)["stages"].items()}
    assert status == {**{n: "cached" for n in STAGES[:-1]}, "register": "ran"}
    v4 = client.get_model_version("medgym-diag-agent-smoke", "4")
    assert v4.tags["medgym.eval.metric"] == "exam_f1"
    if champion is None:  # paired with the cold start's exam F1
        assert v4.description.startswith("candidate − the baseline exam_f1 ")
    else:  # a champion promoted on accuracy is not paired with an exam F1
        assert v4.description == (f"the candidate was evaluated on exam_f1, champion v{champion} on accuracy: not "
                                  "comparable, so no promotion")

    raw["diag"]["world"]["seed"] = 1  # another world: refitted, and every stage after it played in the new one
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    fifth = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert fifth.returncode == 0, fifth.stderr[-4000:]
    stages = result_of(fifth)["stages"]
    assert {n: s["status"] for n, s in stages.items()} == {"cohort": "cached", **{n: "ran" for n in STAGES[1:]}}
    refit = hashlib.sha256((tmp_path / "models" / "world" / "statistical.json").read_bytes()).hexdigest()
    assert refit != world and {n: stages[n]["world"] for n in STAGES[1:]} == {n: refit for n in STAGES[1:]}
