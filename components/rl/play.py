"""A checkpoint played in DiagEnv for evaluation, many episodes at once, on the exact-token contexts GRPO trains on.

Evaluation through `PolicyAgent` plays one case at a time and rebuilds each turn's context from text; a trained
model is played here instead the way `DiagRollout` plays it during training (components.rl.multiturn): every
waiting episode's next turn in one `generate` call, the context grown by the ids sampled and the observation's ids.
Sample i of a case sees the environment's draws for sample i, as the baselines do (components.diag.evaluate), so
the episodes pair with theirs; the model's own draws come from `seed` (one torch generator for the run, so the
same seed and batch size give the same episodes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from components.diag.catalogue import Catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode, PolicyInfo, Sampling
from components.policies.models import resolve_model
from components.policies.tokens import ChatTokens
from components.rl.multiturn import TurnSampling, hf_sampler, play_batch
from components.training.models import load_tokenizer


def play_model(model: str | Path, cases: Sequence[Case], world: WorldModel, config: DiagEnvConfig | None = None,
               sampling: TurnSampling | None = None, *, samples: int = 1, batch: int = 64, seed: int = 0,
               dtype: str = "float32", name: str | None = None, catalogue: Catalogue | None = None,
               progress: Callable[[str], None] | None = None) -> list[Episode]:
    """`samples` episodes of each case played by the checkpoint (or embedded model name) `model`, `batch` at a time."""
    import torch
    from transformers import AutoModelForCausalLM

    sampling = sampling or TurnSampling()
    path = resolve_model(str(model))
    chat = ChatTokens(load_tokenizer(str(path)))
    lm = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype))
    lm.eval()
    pad = chat.tokenizer.pad_token_id
    sample = hf_sampler(lm, sampling, chat.eos_id, chat.eos_id if pad is None else pad)
    info = PolicyInfo(backend="hf", model=name or str(model), sampling=Sampling(
        temperature=sampling.temperature, top_p=sampling.top_p, max_new_tokens=sampling.max_new_tokens))
    jobs = [(case, s) for case in cases for s in range(samples)]
    torch.manual_seed(seed)  # the same draws for every model evaluated with this seed
    episodes: list[Episode] = []
    for start in range(0, len(jobs), batch):
        chunk = jobs[start:start + batch]
        envs = [DiagEnv(world, config, catalogue) for _ in chunk]
        played = play_batch(envs, [c for c, _ in chunk], [s for _, s in chunk], chat, sample, sampling)
        for s in played:
            s.episode.policy = info
            episodes.append(s.episode)
        if progress:
            progress(f"{name or model}: {len(episodes)}/{len(jobs)} episodes")
    return episodes
