"""The rollout engine over HTTP engines: each episode's turn is sent as soon as its step ends (no batch-wide
wait), played on real sandboxes against two vLLM look-alikes on loopback."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest

from components.envs.coding_env import EnvConfig
from components.envs.episode import Episode
from components.policies.models import SMOLLM2
from components.policies.registry import PolicyConfig
from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig
from components.rollout.collect import select_tasks
from components.rollout.jobs import SamplingPlan, plan_jobs
from components.rollout.runner import CollectionConfig, run_local
from components.tasks.record import load_tasks
from tests.policies.fake_vllm import FakeVLLM, Seen

SLOW_S = 6.0
ROOT = Path(__file__).resolve().parents[2]


def test_a_slow_reply_holds_up_only_its_own_episode(small_suite, tmp_path):
    lock, first = threading.Lock(), [True]

    def delay(body: dict) -> float:  # the very first request of the collection is slow, every other one instant
        with lock:
            slow, first[0] = first[0], False
        return SLOW_S if slow else 0.0

    with FakeVLLM(delay=delay) as a, FakeVLLM(delay=delay) as b:
        options = {"base_url": [a.base_url, b.base_url], "tokenizer": SMOLLM2}
        config = CollectionConfig(policy=PolicyConfig(backend="vllm", options=options),
                                  plan=SamplingPlan(k=2, max_new_tokens=8), split="test", limit=3, workers=2,
                                  sandbox_backend="process", env=EnvConfig(max_turns=3))
        tasks = select_tasks(load_tasks(small_suite), config.split, config.limit)
        eps: list[Episode] = []
        with VLLMPolicy(VLLMPolicyConfig(**options)) as policy:
            stats = run_local(policy, plan_jobs(tasks, config.plan), small_suite.parent, config, eps.extend)
            assert policy._router.episodes() == [0, 0]  # every ended episode let go of its engine
    assert stats.failed == 0 and len(eps) == 6, stats.errors
    for e in eps:  # the context only grows, by the sampled ids, whichever turn waited for whom
        for prev, turn in zip(e.turns, e.turns[1:], strict=False):
            assert turn.prompt_token_ids[: len(prev.prompt_token_ids) + len(prev.response_token_ids)] == \
                prev.prompt_token_ids + prev.response_token_ids

    seen = sorted(a.seen + b.seen, key=lambda s: s.arrived)
    [slow] = [s for s in seen if s.answered is not None and s.answered - s.arrived >= SLOW_S - 0.5]

    def later_turn(s: Seen) -> bool:
        return any(len(o.prompt) < len(s.prompt) and s.prompt[: len(o.prompt)] == o.prompt for o in seen)

    meanwhile = [s for s in seen if slow.arrived < s.arrived < slow.answered and later_turn(s)]
    # a batch-synchronous loop sends no second turn before the batch holding the slow request is back
    assert len(meanwhile) >= 2, f"{len(meanwhile)} later turns were sent while the slow request was out"


@pytest.mark.slow
def test_ray_actors_ask_for_the_gpus_their_engines_use(small_suite, tmp_path):
    ray = pytest.importorskip("ray")
    from components.rollout.ray_workers import run_on_ray

    # a cluster that says it has two GPUs: Ray hands them out (CUDA_VISIBLE_DEVICES) whether or not they exist
    with tempfile.TemporaryDirectory(prefix="ray", dir="/tmp") as tmp:  # short: Ray's socket paths have a limit
        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, _temp_dir=tmp, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
        try:
            config = CollectionConfig(policy=PolicyConfig(backend="scripted"), plan=SamplingPlan(k=1), split="test",
                                      limit=2, workers=2, gpus_per_worker=1, ray_address="local",
                                      sandbox_backend="process", env=EnvConfig(max_turns=4))
            jobs = plan_jobs(select_tasks(load_tasks(small_suite), "test", 2), config.plan)
            eps: list[Episode] = []
            stats = run_on_ray(jobs, small_suite.parent, config, eps.extend)
            assert stats.failed == 0 and len(eps) == 2
            assert sorted(stats.devices) == ["0", "1"]  # one GPU each, as asked; without num_gpus Ray shows none
            with pytest.raises(ValueError, match="3 workers x 1 GPUs, the Ray cluster has 2 GPUs"):
                run_on_ray(jobs, small_suite.parent, config.model_copy(update={"workers": 3}), eps.extend)
        finally:
            ray.shutdown()
