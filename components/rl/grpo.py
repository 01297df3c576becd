"""GRPO over a multi-turn environment: TRL's GRPOTrainer with a rollout_func that plays any Env through the engine.

What it trains on is a `Gym` (the seam): the items a group is played on, a fresh environment per episode and which
episodes were right. `DiagGym` plays DiagEnv on patient cases in a world model; `components.rl.coding.CodingGym`
plays CodingEnv on train tasks with the sandbox in the loop. Both go through `run_grpo`.

The dataset is the gym's items, one row per item (`prompt` = its task id). For each generation batch TRL hands the
rollout the prompts of its slice, each item repeated num_generations times (its RepeatSampler): those repeats are
the group whose rewards set each other's advantage. The rollout plays one episode per entry with the trainer's
current model through the rollout engine (components.rl.multiturn.play_episodes) and returns

  prompt_ids       the first turn's prompt (system prompt and the task), the same for an item's group
  completion_ids   everything after it: every agent reply and every observation between them
  env_mask         1 on agent tokens, 0 on environment tokens: TRL multiplies it into the loss mask
                   (completion_mask * tool_mask), so observations carry no loss, no KL and no entropy term
  logprobs         the sampling log-probs of agent tokens (0.0 on environment tokens); TRL uses them only for
                   vLLM importance-sampling correction and the off-policy mask, both masked the same way
  episode_reward   the environment's reward (Episode.reward: the checker's verdict on what a coding episode
                   submitted, DiagGym's diagnosis and exams), forwarded by TRL to `episode_reward` (the reward
                   function), which never reads the completion text
  episode_id       which recorded Episode the sample is (reward functions and TRL's completion logs see it)
  correct, gym     whether the episode was right, logged as <gym>/accuracy

Sample i of a generation batch at optimizer step s is the item's sample `(s * processes + rank) * batch + i`:
episode ids stay unique across the run, and each sample sees its own draws (DiagGym's world model:
DiagEnvConfig.vary_world_by_sample). The episodes are committed step by step to an EpisodeStore per rank,
`<out>/episodes/rank<R>/` (validated shards, as every collection's; `load_grpo_episodes` reads them back in step
order). A rerun resumes from the last complete checkpoint; a step it plays again keeps the episodes committed the
first time (the same keys). LoRA adapters (peft) are merged into `<out>/merged` at the end.

CPU defaults (SmolLM2-135M): 2 items x 4 samples per step, 6 turns of at most 64 tokens, one episode per
forward/backward; a micro-batch of a whole group (micro_batch = num_generations) trains the group's prompt once
instead of once per episode (components.rl.shared_prompt), for the activations of one prompt and its n completions.
On a GPU raise num_generations to 8, prompts_per_step to 8-16, micro_batch to 8-16, max_new_tokens to 256 and
steps to a few hundred. Generation (`generation`) runs through the rollout engine: by
default its hf policy, in the trainer's process, on a plain copy of the model that holds the trainer's weights of the
step (components.rl.hf_sampler; each episode's keys and values kept between its turns, each episode's draws seeded
by itself); with `generation: vllm` its vllm policy on engines that load the trainer's
weights at each step, the sampler/trainer gap weighed by TRL's importance sampling (components.rl.engine_weights).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from components.diag.catalogue import Catalogue, default_catalogue
from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode, PolicyInfo
from components.envs.protocol import Env
from components.policies.hf import HFConfig, HFPolicy
from components.policies.models import resolve_model
from components.policies.protocol import Policy
from components.policies.tokens import ChatTokens
from components.rl.engine_weights import attach_engines
from components.rl.hf_sampler import SamplerCopy
from components.rl.multiturn import Sample, TurnSampling, play_episodes
from components.rl.shared_prompt import trainer_class as shared_prompt_trainer
from components.rollout.store import EpisodeStore, load_episodes_dir
from components.training.config import GRPOKnobs
from components.training.models import (
    adapters_take_autocast_inputs,
    frozen_base_kwargs,
    is_adapter,
    load_tokenizer,
    lora_config,
    merge_and_save,
    precision_flags,
)
from components.training.trainers import FINAL, MERGED, last_checkpoint, train_or_resume

EPISODES = "episodes"
REWARD_SERIES = "train_reward.json"  # beside a stage's merged model: [{"step", "reward"}], the mean reward per step


class GRPOSettings(GRPOKnobs):
    """DiagGym's GRPO settings (the `diag.grpo` profile section): the knobs, and the sampling of a turn."""

    def turn_sampling(self) -> TurnSampling:
        return turn_sampling(self)


def turn_sampling(settings: GRPOKnobs) -> TurnSampling:
    return TurnSampling(temperature=settings.temperature, top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                        max_context=settings.max_context)


class GRPORun(BaseModel):
    out_dir: Path
    model_dir: Path  # merged checkpoint (or the full weights without LoRA)
    global_step: int
    runtime_s: float
    episodes: int
    log_history: list[dict[str, Any]] = Field(default_factory=list)


class Gym(Protocol):
    """What GRPO trains on, the seam between the trainer and an environment: the items a group is played on (a
    group is `num_generations` episodes of one item), a fresh environment per episode, and which episodes were
    right (logged as `<name>/accuracy`). The reward is the environment's own (`Episode.reward`, set when it ends),
    never read off the policy's text."""

    name: str  # "diag", "coding": the accuracy metric's prefix

    @property
    def items(self) -> Sequence[Any]: ...  # what the environment resets to, each named by `task_id`

    def envs(self, max_turns: int) -> AbstractContextManager[Callable[[], Env]]: ...

    def correct(self, episode: Episode) -> bool: ...


class DiagGym:
    """DiagEnv over patient cases and a world model."""

    name = "diag"

    def __init__(self, cases: Sequence[Case], world: WorldModel, env_config: DiagEnvConfig | None = None,
                 catalogue: Catalogue | None = None):
        self.items, self.world = list(cases), world
        self.env_config, self.catalogue = env_config or DiagEnvConfig(), catalogue or default_catalogue()

    def envs(self, max_turns: int) -> AbstractContextManager[Callable[[], Env]]:
        config = self.env_config.model_copy(update={"max_turns": max_turns})
        return contextlib.nullcontext(lambda: DiagEnv(self.world, config, self.catalogue))

    def correct(self, episode: Episode) -> bool:
        return bool(episode.diag and episode.diag.correct)


class EpisodeRollout:
    """TRL's rollout_func: plays the gym's environment with the trainer's current model; keeps what it played on
    disk."""

    def __init__(self, gym: Gym, chat: ChatTokens, settings: GRPOKnobs, episodes_dir: Path | None = None,
                 model_name: str = ""):
        self.gym, self.items = gym, {item.task_id: item for item in gym.items}
        self.chat, self.settings = chat, settings
        self.episodes_dir, self.model_name = episodes_dir, model_name
        self.engine: Policy | None = None  # generation: vllm: the engines that serve the trainer's weights
        self._store: EpisodeStore | None = None  # opened at the first step, when the rank is known
        self._sampler: SamplerCopy | None = None  # generation: hf, built at the first step

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        step, rank = trainer.state.global_step, trainer.accelerator.process_index
        items = [self.items[str(p)] for p in prompts]
        indices = [(step * trainer.accelerator.num_processes + rank) * len(prompts) + i for i in range(len(prompts))]
        sampling = turn_sampling(self.settings)
        if self.engine is not None:  # the engines already serve this step's weights (EngineWeights.sync_weights)
            with self.gym.envs(self.settings.max_turns) as envs:
                samples = play_episodes(self.engine, envs, items, indices, self.chat, sampling, seed=self.settings.seed)
        else:
            samples = self._play_here(trainer, items, indices, sampling)
        for s in samples:  # the sampling the engine recorded (with each episode's seed), under GRPO's name
            s.episode.policy = PolicyInfo(backend="grpo", model=self.model_name, sampling=s.episode.policy.sampling)
            s.episode.metadata["grpo"] = {"step": step, "rank": rank, "generation": self.settings.generation}
        if self.episodes_dir is not None:
            self.record(rank, [s.episode for s in samples])
        return samples_columns(samples, self.gym)

    def _play_here(self, trainer: Any, items: list[Any], indices: list[int], sampling: TurnSampling) -> list[Sample]:
        """The episodes sampled with the trainer's current weights, in this process (generation: hf): on the
        sampler copy (components.rl.hf_sampler), or through the trainer's own model with `sampler_copy` off."""
        import torch

        if self.settings.sampler_copy:
            self._sampler = self._sampler or SamplerCopy(self.settings.precision)
            with torch.no_grad(), self.gym.envs(self.settings.max_turns) as envs:
                return self._play_with(self._sampler.current(trainer), items, indices, sampling, envs)
        from trl.models import unwrap_model_for_generation

        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs
                                         ) as model, torch.no_grad(), self.gym.envs(self.settings.max_turns) as envs:
            training = model.training
            model.eval()  # no dropout while sampling: the log-probs are the policy's
            try:
                return self._play_with(model, items, indices, sampling, envs)
            finally:
                model.train(training)

    def _play_with(self, model: Any, items: list[Any], indices: list[int], sampling: TurnSampling,
                   envs: Callable[[], Env]) -> list[Sample]:
        # a policy per call: the keys and values it keeps were computed with this step's weights only
        policy = HFPolicy(HFConfig(model=self.model_name or "grpo", max_context=sampling.max_context,
                                   max_batch=len(items), kv_cache_episodes=len(items), logprobs="sampling"),
                          model=model, tokenizer=self.chat.tokenizer)
        try:
            return play_episodes(policy, envs, items, indices, self.chat, sampling, seed=self.settings.seed)
        finally:
            policy.close()

    def record(self, rank: int, episodes: list[Episode]) -> None:
        """Commit a step's episodes to this rank's store. Sample indices are unique over the run, so a key already
        there is the same step replayed after a resume from an earlier checkpoint: the first record stays."""
        if self._store is None:
            assert self.episodes_dir is not None
            self._store = EpisodeStore(self.episodes_dir / f"rank{rank}")
        done = self._store.done_keys()
        self._store.commit([e for e in episodes if (e.task_id, e.sample_index) not in done])

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def samples_columns(samples: Sequence[Sample], gym: Gym) -> dict[str, list[Any]]:
    """What TRL takes from a rollout_func: the token columns, and per sample the fields its reward functions are
    called with. The reward is the episode's, as its environment set it (the checker's verdict on what it
    submitted, DiagGym's diagnosis and exams); nothing here reads the policy's text."""
    return {"prompt_ids": [s.prompt_ids for s in samples], "completion_ids": [s.completion_ids for s in samples],
            "env_mask": [s.env_mask for s in samples], "logprobs": [s.logprobs for s in samples],
            "episode_id": [s.episode.episode_id for s in samples],
            "episode_reward": [s.episode.reward for s in samples],
            "correct": [gym.correct(s.episode) for s in samples], "gym": [gym.name] * len(samples)}


def episode_reward(completions: list[Any], episode_reward: list[float], correct: list[bool] | None = None,
                   gym: list[str] | None = None, log_metric: Callable[[str, float], None] | None = None,
                   **_: Any) -> list[float]:
    """The environment's reward of each episode (the rollout played it; TRL forwards it here). `completions`, the
    policy's text, is never read: text that claims a reward earns nothing."""
    if correct and log_metric is not None:
        log_metric(f"{gym[0] if gym else 'diag'}/accuracy", sum(correct) / len(correct))
    return [float(r) for r in episode_reward]


def build_trainer(gym: Gym, base_model: str, out_dir: Path | str, settings: GRPOKnobs | None = None,
                  extra_rewards: Sequence[Callable[..., list[float]]] = (), callbacks: Sequence[Any] = ()) -> Any:
    """A GRPOTrainer over the gym's items (the train split). `extra_rewards` are further TRL reward functions (each
    called with the completions and the rollout's fields, summed with the episode reward)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    settings = settings or GRPOSettings()
    out = Path(out_dir)
    tokenizer = load_tokenizer(base_model)
    rollout = EpisodeRollout(gym, ChatTokens(tokenizer), settings, episodes_dir=out / EPISODES,
                             model_name=str(base_model))
    args = GRPOConfig(
        output_dir=str(out), max_steps=settings.steps, learning_rate=settings.learning_rate,
        lr_scheduler_type="constant", warmup_steps=0, seed=settings.seed, data_seed=settings.seed,
        # one generation batch per optimizer step (steps_per_generation = accumulation steps): every step is on-policy
        per_device_train_batch_size=settings.micro_batch,
        gradient_accumulation_steps=settings.episodes_per_step // settings.micro_batch,
        steps_per_generation=settings.episodes_per_step // settings.micro_batch, num_generations=settings.num_generations,
        temperature=settings.temperature, top_p=settings.top_p, beta=settings.beta, epsilon=settings.epsilon,
        loss_type=settings.loss_type, scale_rewards=settings.scale_rewards, max_completion_length=settings.max_context,
        disable_dropout=True,  # the same log-probs when sampling and when scoring
        gradient_checkpointing=settings.gradient_checkpointing, logging_steps=settings.logging_steps,
        save_strategy="steps", save_steps=settings.save_steps, save_total_limit=2, report_to=[],
        use_cpu=not _cuda(), dataloader_num_workers=0,
        # read by TRL only while engines generate (attach_engines): the sampler/trainer ratio (components.rl.engine_weights)
        vllm_importance_sampling_correction=True, vllm_importance_sampling_mode=settings.importance_sampling,
        vllm_importance_sampling_clip_max=settings.importance_sampling_cap, **precision_flags(settings.precision),
        model_init_kwargs=_frozen_base(settings) or None)
    init = resolve_model(base_model)
    trainer = (shared_prompt_trainer() if settings.shared_prompt else GRPOTrainer)(
        model=str(init), reward_funcs=[episode_reward, *extra_rewards], args=args,
        train_dataset=Dataset.from_list([{"prompt": item.task_id} for item in gym.items]), processing_class=tokenizer,
        peft_config=lora_config(settings.lora, model=init) if settings.lora.enabled else None, rollout_func=rollout,
        callbacks=list(callbacks))
    adapters_take_autocast_inputs(trainer.model)
    if settings.generation == "vllm":
        rollout.engine = attach_engines(trainer, settings.vllm, Path(init), out)
    return trainer


def _frozen_base(settings: GRPOKnobs) -> dict[str, str]:
    """The frozen base's dtype (training.models.frozen_base_kwargs). Generating on vLLM engines keeps it as saved:
    the engines load the trainer's merged weights each step in the checkpoint's dtype, and the sampler/trainer gap
    the importance weights correct was measured (and is tested) against a float32 base."""
    return {} if settings.generation == "vllm" else frozen_base_kwargs(settings.lora, settings.precision)


def run_grpo(gym: Gym, base_model: str, out_dir: Path | str, settings: GRPOKnobs | None = None,
             extra_rewards: Sequence[Callable[..., list[float]]] = (), callbacks: Sequence[Any] = ()) -> GRPORun:
    """Train on `gym`, resume from `<out>/checkpoint-*` when present, save `<out>/final` and merge it into
    `<out>/merged`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trainer = build_trainer(gym, base_model, out, settings, extra_rewards, callbacks)
    started = time.perf_counter()
    try:
        train_or_resume(trainer, last_checkpoint(out))
    finally:
        trainer.rollout_func.close()  # the rank's episode store
    runtime = time.perf_counter() - started
    final, merged = out / FINAL, out / MERGED
    trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        trainer.processing_class.save_pretrained(str(final))
        if is_adapter(final):
            merge_and_save(final, merged)
        else:
            shutil.rmtree(merged, ignore_errors=True)
            shutil.copytree(final, merged)
    trainer.accelerator.wait_for_everyone()
    history = [{k: v for k, v in row.items() if not (isinstance(v, float) and not math.isfinite(v))}
               for row in trainer.state.log_history]
    return GRPORun(out_dir=out, model_dir=merged, global_step=trainer.state.global_step, runtime_s=runtime,
                   episodes=len(load_grpo_episodes(out)), log_history=history)


def train_grpo(cases: Sequence[Case], world: WorldModel, base_model: str, out_dir: Path | str,
               settings: GRPOKnobs | None = None, env_config: DiagEnvConfig | None = None,
               extra_rewards: Sequence[Callable[..., list[float]]] = (), callbacks: Sequence[Any] = ()) -> GRPORun:
    """DiagGym's GRPO: `run_grpo` over DiagEnv on `cases` (the train split) in `world`."""
    return run_grpo(DiagGym(cases, world, env_config), base_model, out_dir, settings, extra_rewards, callbacks)


def load_grpo_episodes(out_dir: Path | str) -> list[Episode]:
    """The episodes a GRPO run played (every rank's store), in step order, then rank, then sample."""
    ranks = sorted((Path(out_dir) / EPISODES).glob("rank*"))
    episodes = [ep for folder in ranks for ep in load_episodes_dir(folder, strict=True)]
    return sorted(episodes, key=lambda e: (e.metadata["grpo"]["step"], e.metadata["grpo"]["rank"], e.sample_index))


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
