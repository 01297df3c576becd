"""The cold start: SFT on oracle trajectories, so that GRPO starts from a model that writes actions the
environment reads (a model that never does gets the same reward in every sample of a group: no advantage, no
gradient).

Rows are `{"input_ids", "loss_mask"}` from `sft_examples` (correct episodes only, the loss on the agent's turns),
trained by components.training.trainers.train (TRL's SFTTrainer, LoRA by default) and merged into a plain
checkpoint that the policies and `train_grpo` load, as components.training.stage does for the pipeline's stages.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from components.diag.env import DiagEnvConfig
from components.diag.lm_world import result_loss
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode, save_episodes
from components.policies.models import resolve_model
from components.policies.tokens import ChatTokens
from components.rl.oracle import oracle_episodes
from components.training.config import DistributedSettings, Schedule, SFTSettings
from components.training.data import sft_examples
from components.training.models import is_adapter, load_tokenizer, merge_and_save
from components.training.stage import launch_rows
from components.training.trainers import MERGED, TrainJob, TrainResult

ORACLE_EPISODES = "oracle_episodes.jsonl"


class ColdStart(BaseModel):
    episodes: int  # oracle episodes played
    correct: int  # of them correct: the SFT rows
    result: TrainResult
    model_dir: Path  # the merged checkpoint


def oracle_rows(episodes: Sequence[Episode], chat: ChatTokens, max_tokens: int | None = None) -> list[dict[str, Any]]:
    return [{"input_ids": ex.input_ids, "loss_mask": ex.loss_mask} for ex in sft_examples(episodes, chat, max_tokens)]


def cold_start(cases: Sequence[Case], world: WorldModel, base_model: str, out_dir: Path | str,
               settings: SFTSettings | None = None, env_config: DiagEnvConfig | None = None,
               callbacks: list[Any] | None = None, episodes_per_case: int = 1,
               distributed: DistributedSettings | None = None) -> ColdStart:
    """`episodes_per_case` oracle episodes of each of `cases` (train split) → SFT → `<out_dir>/merged`. The episodes
    are kept beside it. `distributed` launches the SFT as the pipeline's stages are (in this process by default)."""
    out = Path(out_dir)
    # one episode per micro-batch by default: SmolLM2's activations for a packed batch of four (~6k tokens) peak
    # near 18 GB on CPU
    settings = settings or SFTSettings(schedule=Schedule(batch_size=1, grad_accum=4))
    chat = ChatTokens(load_tokenizer(base_model))
    episodes = oracle_episodes(cases, world, chat, env_config, samples=episodes_per_case)
    save_episodes(out / ORACLE_EPISODES, episodes)
    rows = oracle_rows(episodes, chat, settings.schedule.max_length)
    # the rows are passed in, so the job's dataset folder is never read; a rerun resumes from <out>/sft checkpoints
    job = TrainJob(method="sft", base_model=base_model, dataset_dir=out, out_dir=out / "sft", sft=settings)
    result = launch_rows(job, rows, distributed, log_to=out / "sft.launch.log", callbacks=callbacks)
    model_dir = out / MERGED
    if is_adapter(result.final_dir):
        merge_and_save(result.final_dir, model_dir)
    else:
        shutil.rmtree(model_dir, ignore_errors=True)
        shutil.copytree(result.final_dir, model_dir)
    return ColdStart(episodes=len(episodes), correct=len(rows), result=result, model_dir=model_dir)


def masked_nll(model: str | Path, rows: Sequence[dict[str, Any]]) -> float:
    """Mean negative log-likelihood per loss-masked token of `rows` under a checkpoint (or embedded model name)."""
    return result_loss(resolve_model(str(model)), rows)
