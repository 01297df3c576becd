"""Real 2-process runs on CPU through `accelerate launch`, the command GPU nodes use: DeepSpeed ZeRO-2 SFT of a
pipeline stage, and DiagGym's LM world model under plain DDP through the same launcher."""

from __future__ import annotations

import json
import random

import pytest

from components.training.config import DistributedSettings, LoraSettings, Schedule, SFTSettings
from components.training.data import SFTExample
from components.training.datasets import write_dataset
from components.training.stage import launch
from components.training.trainers import TrainJob

pytestmark = pytest.mark.slow


def _rows(n: int, seed: int = 0) -> list[SFTExample]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        length = rng.randint(24, 120)  # mixed lengths, as episodes are
        prompt = rng.randint(8, length // 2)
        ids = [rng.randrange(1, 2000) for _ in range(length)]
        rows.append(SFTExample(f"e{i}", f"t{i}", "calculator", ids, [0] * prompt + [1] * (length - prompt)))
    return rows


@pytest.mark.timeout(900)
def test_zero2_two_processes_take_the_same_steps_and_save_a_loadable_model(tiny_model, tmp_path):
    data = tmp_path / "data"
    write_dataset(data, "sft", _rows(32), sources=[], tokenizer=str(tiny_model), settings={})
    steps = 4
    job = TrainJob(method="sft", base_model=str(tiny_model), dataset_dir=data, out_dir=tmp_path / "run",
                   sft=SFTSettings(packing=True, lora=LoraSettings(enabled=False),
                                   schedule=Schedule(max_steps=steps, batch_size=2, max_length=256, logging_steps=1,
                                                     save_steps=100, precision="fp32")))
    result = launch(job, DistributedSettings(processes=2, deepspeed="zero2"), log_to=tmp_path / "launch.log")

    assert result.processes == 2
    ranks = [json.loads((job.out_dir / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["global_step"] for r in ranks] == [steps, steps]
    assert result.global_step == steps and result.tokens > 0
    losses = [e["loss"] for e in result.log_history if "loss" in e]
    assert len(losses) == steps and all(x == x for x in losses)  # finite, one per step

    import torch
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(tiny_model)
    after = AutoModelForCausalLM.from_pretrained(result.final_dir)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    assert torch.isfinite(after(input_ids=ids).logits).all()
    changed = [n for (n, p), (_, q) in zip(before.named_parameters(), after.named_parameters(), strict=True)
               if not torch.equal(p, q)]
    assert changed, "ZeRO-2 training changed no weight"


@pytest.mark.timeout(900)
def test_the_lm_world_model_trains_on_two_ddp_processes_through_the_launcher(tiny_model, tmp_path):
    from components.diag.cohort import CohortConfig, build_cohort
    from components.diag.lm_world import train_world_model

    cases = [c for c in build_cohort(CohortConfig(patients=20, seed=3)) if c.split == "train"][:2]
    steps = 2
    settings = SFTSettings(packing=True, lora=LoraSettings(enabled=False),
                           schedule=Schedule(max_steps=steps, batch_size=2, max_length=512, logging_steps=1,
                                             save_steps=100, precision="fp32"))
    trained = train_world_model(cases, str(tiny_model), tmp_path / "world", settings,
                                distributed=DistributedSettings(processes=2))

    run = tmp_path / "world" / "run"
    ranks = [json.loads((run / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert len({r["pid"] for r in ranks}) == 2 and [r["global_step"] for r in ranks] == [steps, steps]
    assert trained.result.processes == 2 and trained.result.global_step == steps
    assert (tmp_path / "world" / "run.launch.log").is_file()  # the ranks' output, beside the run
    # the launched ranks read the rows the caller built, not a dataset folder
    assert sum(1 for _ in (run / "rows.jsonl").open()) == trained.data["rows"]
    assert (trained.model_dir / "model.safetensors").is_file()


@pytest.mark.timeout(900)
def test_grpo_takes_a_step_on_two_processes_each_playing_its_own_samples(tiny_model, tmp_path):
    from components.diag.cohort import CohortConfig, build_cohort
    from components.diag.world import StatisticalWorldModel
    from components.rl.grpo import GRPOSettings, load_grpo_episodes
    from components.rl.grpo_launch import launch_grpo

    train = [c for c in build_cohort(CohortConfig(patients=20, seed=3)) if c.split == "train"]
    settings = GRPOSettings(num_generations=2, prompts_per_step=1, max_turns=2, max_new_tokens=8, steps=1,
                            lora=LoraSettings(enabled=False), precision="fp32", save_steps=100)
    run = launch_grpo(train[:2], StatisticalWorldModel.fit(train, seed=0), str(tiny_model), tmp_path / "grpo",
                      settings, distributed=DistributedSettings(processes=2))

    assert run.global_step == 1 and (run.model_dir / "model.safetensors").is_file()
    # one generation batch of 2 x 2 episodes: each rank played its own half, under its own episode ids
    stores = sorted(p.name for p in (tmp_path / "grpo" / "episodes").iterdir())
    assert stores == ["rank0", "rank1"]  # one episode store per rank: no two writers of one store
    episodes = load_grpo_episodes(tmp_path / "grpo")
    assert len(episodes) == run.episodes == 4 and len({e.episode_id for e in episodes}) == 4
    assert (tmp_path / "grpo.launch.log").is_file()


@pytest.mark.timeout(900)
def test_coding_grpo_takes_a_step_on_two_processes_through_the_launcher(tiny_model, small_suite, tmp_path):
    """The coding stage launched as DiagGym's is: each rank builds the gym from the job's spec (the task file, the
    chosen train tasks, the sandbox), opens its own sandboxes and plays its own half of the step; every episode's
    reward is its task's checker's; the step's figures reach the stage's MLflow run once, from rank 0."""
    from mlflow.tracking import MlflowClient

    from components.envs.coding_env import EnvConfig
    from components.rl.grpo import load_grpo_episodes
    from components.rl.stage import run_coding_grpo
    from components.sandbox.protocol import Limits
    from components.tasks.checkers import check_answer
    from components.tasks.record import load_tasks
    from components.tracking.tracker import TrackingConfig
    from components.training.config import CodingGRPOSettings

    # one task per rank per step: each rank plays its own group of 2
    settings = CodingGRPOSettings(num_generations=2, prompts_per_step=1, max_turns=2, max_new_tokens=8, steps=1,
                                  tasks=2, lora=LoraSettings(enabled=False), precision="fp32", save_steps=100)
    tracking = TrackingConfig(mlflow_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                              artifact_location=str(tmp_path / "artifacts"), experiment="grpo-launch")
    out = run_coding_grpo(small_suite, tmp_path / "grpo", settings, str(tiny_model), env=EnvConfig(exec_timeout_s=20),
                          backend="process", limits=Limits(), categories=None, tracking=tracking,
                          run_name="coding-grpo", distributed=DistributedSettings(processes=2))

    assert out.run.global_step == 1 and (out.run.model_dir / "model.safetensors").is_file()
    assert sorted(p.name for p in (tmp_path / "grpo" / "episodes").iterdir()) == ["rank0", "rank1"]
    episodes = load_grpo_episodes(tmp_path / "grpo")
    assert len(episodes) == out.figures["episodes"] == 4 and len({e.episode_id for e in episodes}) == 4
    assert {e.metadata["grpo"]["rank"] for e in episodes} == {0, 1}
    by_id = {t.task_id: t for t in load_tasks(small_suite)}
    assert {by_id[e.task_id].split for e in episodes} == {"train"} and len({e.task_id for e in episodes}) == 2
    for e in episodes:
        assert e.reward == float(e.submitted and check_answer(by_id[e.task_id], e.submitted_answer).correct)
    client = MlflowClient(tracking_uri=tracking.mlflow_uri)
    run = client.get_run(out.run_id)
    assert run.data.params["processes"] == "2" and run.data.tags["medgym.method"] == "grpo"
    assert [m.step for m in client.get_metric_history(out.run_id, "loss")] == [1]  # rank 0 alone logs it
    assert (tmp_path / "grpo.launch.log").is_file()


def test_coding_grpo_refuses_fewer_train_tasks_than_its_processes_play_a_step(tiny_model, small_suite, tmp_path):
    """Each rank plays prompts_per_step tasks a step: with fewer, TRL's sampler hands out no full step and the run
    would end after zero steps as if it had trained."""
    from components.envs.coding_env import EnvConfig
    from components.rl.stage import run_coding_grpo
    from components.sandbox.protocol import Limits
    from components.tracking.tracker import TrackingConfig
    from components.training.config import CodingGRPOSettings

    settings = CodingGRPOSettings(num_generations=2, prompts_per_step=2, tasks=2, steps=1)
    tracking = TrackingConfig(mlflow_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_location=str(tmp_path / "a"))
    with pytest.raises(ValueError, match=r"2 train task\(s\).*prompts_per_step=2.*on each of 2 process"):
        run_coding_grpo(small_suite, tmp_path / "grpo", settings, str(tiny_model), env=EnvConfig(), backend="process",
                        limits=Limits(), categories=None, tracking=tracking, run_name="x",
                        distributed=DistributedSettings(processes=2))
    assert not (tmp_path / "grpo").exists()  # refused before anything was written
