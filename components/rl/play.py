"""A checkpoint played in DiagEnv for evaluation, many episodes at once, by the rollout engine with the hf policy.

The engine (components.rollout.play) keeps every waiting episode's next turn in one batch and each context as exact
ids (the ids sampled and the observation's ids, never re-tokenized), and the hf policy keeps an episode's keys and
values between turns, so a turn computes only its new tokens. Sample i of a case sees the environment's draws for
sample i, as the baselines do (components.diag.evaluate), so the episodes pair with theirs; the model's draws are
seeded per episode from `seed`, the case and the sample (components.rollout.jobs.episode_seed), so they do not
depend on the batch. With `out_dir` the episodes land in an EpisodeStore there and a rerun resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from components.diag.catalogue import Catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode
from components.policies.hf import HFConfig, HFPolicy
from components.rl.multiturn import TurnSampling
from components.rollout.jobs import SamplingPlan, plan_jobs
from components.rollout.play import play_jobs


def play_model(model: str | Path, cases: Sequence[Case], world: WorldModel, config: DiagEnvConfig | None = None,
               sampling: TurnSampling | None = None, *, samples: int = 1, batch: int = 64, seed: int = 0,
               dtype: str = "float32", name: str | None = None, catalogue: Catalogue | None = None,
               out_dir: Path | str | None = None, progress: Callable[[str], None] | None = None) -> list[Episode]:
    """`samples` episodes of each case played by the checkpoint (or embedded model name) `model`, up to `batch` at
    a time, in (case, sample) order."""
    sampling = sampling or TurnSampling()
    policy = HFPolicy(HFConfig(model=str(model), dtype=dtype, max_context=sampling.max_context, max_batch=batch,
                               kv_cache_episodes=batch))
    policy.model_id = name or str(model)  # what the episodes and the report call it
    plan = SamplingPlan(k=samples, first_temperature=sampling.temperature, temperature=sampling.temperature,
                        top_p=sampling.top_p, max_new_tokens=sampling.max_new_tokens, seed=seed)
    jobs = plan_jobs(cases, plan)
    finished: list[int] = [0]

    def tell(episodes: list[Episode]) -> None:
        finished[0] += len(episodes)
        if progress:
            progress(f"{policy.model_id}: {finished[0]}/{len(jobs)} episodes")

    try:
        return play_jobs(policy, lambda: DiagEnv(world, config, catalogue), jobs, out_dir, max_in_flight=batch,
                         on_progress=tell).episodes
    finally:
        policy.close()
