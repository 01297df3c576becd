"""GRPO over the multi-turn diagnostic environment: TRL's GRPOTrainer with a rollout_func that plays DiagEnv.

The dataset is the train cases, one row per case (`prompt` = its case id). For each generation batch TRL hands the
rollout the prompts of its slice, each case repeated num_generations times (its RepeatSampler); the rollout plays
one episode per entry with the trainer's current model through the rollout engine (components.rl.multiturn) and
returns

  prompt_ids       the first turn's prompt (system prompt and presentation), the same for a case's group
  completion_ids   everything after it: every agent reply and every observation between them
  env_mask         1 on agent tokens, 0 on environment tokens: TRL multiplies it into the loss mask
                   (completion_mask * tool_mask), so observations carry no loss, no KL and no entropy term
  logprobs         the sampling log-probs of agent tokens (0.0 on environment tokens); TRL uses them only for
                   vLLM importance-sampling correction and the off-policy mask, both masked the same way
  episode_reward   the environment's reward, forwarded by TRL to `episode_reward` (the reward function)
  episode_id       which recorded Episode the sample is (reward functions and TRL's completion logs see it)
  correct          whether the diagnosis was right, logged as diag/accuracy

Sample i of a generation batch at optimizer step s is the case's sample `(s * processes + rank) * batch + i`:
episode ids stay unique across the run, and each sample sees its own world-model draws
(DiagEnvConfig.vary_world_by_sample). The episodes are written to `<out>/episodes/step-NNNNN-rankR.jsonl` as
platform Episodes (`load_grpo_episodes` reads them back; components.diag.evaluate summarizes them). LoRA adapters
(peft) are merged into `<out>/merged` at the end.

CPU defaults (SmolLM2-135M): 2 cases x 4 samples per step, 6 turns of at most 64 tokens, one episode per
forward/backward. On a GPU raise num_generations to 8, prompts_per_step to 8-16, micro_batch to 8-16,
max_new_tokens to 256 and steps to a few hundred. Generation runs through the rollout engine's hf policy over the
trainer's model (each episode's keys and values kept between its turns, each episode's draws seeded by itself;
TRL's vLLM path does not drive a multi-turn environment).
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from components.diag.catalogue import Catalogue, default_catalogue
from components.diag.env import DiagEnvConfig
from components.diag.record import Case
from components.diag.world import WorldModel
from components.envs.episode import Episode, PolicyInfo, load_episodes, save_episodes
from components.policies.hf import HFConfig, HFPolicy
from components.policies.models import resolve_model
from components.policies.tokens import ChatTokens
from components.rl.multiturn import TurnSampling, play_samples
from components.training.config import LoraSettings
from components.training.models import is_adapter, load_tokenizer, lora_config, merge_and_save, precision_flags
from components.training.trainers import FINAL, MERGED, last_checkpoint

EPISODES = "episodes"


class GRPOSettings(BaseModel):
    """GRPO's knobs; defaults sized for a CPU run of SmolLM2-135M (see the module docstring for a GPU)."""

    model_config = ConfigDict(extra="forbid")

    num_generations: int = Field(default=4, ge=2, description="episodes per case per step: the group whose rewards "
                                 "set each other's advantage")
    prompts_per_step: int = Field(default=2, ge=1, description="cases per optimizer step")
    max_turns: int = Field(default=6, ge=1, description="the environment's turn limit during training")
    max_new_tokens: int = Field(default=64, gt=0, description="per agent turn")
    max_context: int = Field(default=2048, gt=0, description="prompt + new tokens of any turn")
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    beta: float = Field(default=0.0, ge=0, description="KL to the starting model (0: no reference pass; with LoRA "
                        "the reference is the model with the adapter disabled)")
    epsilon: float = Field(default=0.2, gt=0, description="ratio clipping")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = Field(
        default="dapo", description="dapo: token-level, normalized by the agent tokens of the batch (no length bias)")
    # The diagnostic reward is sparse: while accuracy is near zero, most groups differ only in exam F1 (a few
    # hundredths). TRL's default "group" divides each group by its own std, which blows those hundredths up to
    # unit advantages, as large as a right diagnosis gets in a group that has one; "batch" does the same wherever
    # the batch holds no right diagnosis. "none" (Dr. GRPO) keeps the advantage in reward units: reward minus the
    # group's mean.
    scale_rewards: Literal["group", "batch", "none"] = Field(
        default="none", description="TRL's advantage scaling: none keeps the reward's units (see the comment)")
    learning_rate: float = Field(default=1e-5, gt=0)
    steps: int = Field(default=50, gt=0, description="optimizer steps (one generation batch each)")
    micro_batch: int = Field(default=1, gt=0, description="episodes per forward/backward: a step's episodes are "
                             "accumulated in micro-batches of this size (activation memory; SmolLM2 on CPU needs "
                             "about 1.4 MB per token, so a 2k-token episode is ~3 GB)")
    lora: LoraSettings = Field(default_factory=LoraSettings)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    gradient_checkpointing: bool = False
    logging_steps: int = Field(default=1, gt=0)
    save_steps: int = Field(default=25, gt=0, description="a checkpoint every N steps, for resume")
    seed: int = 0

    @model_validator(mode="after")
    def _micro_batches_fill_a_step(self) -> GRPOSettings:
        if self.episodes_per_step % self.micro_batch:
            raise ValueError(f"micro_batch {self.micro_batch} does not divide the {self.episodes_per_step} episodes "
                             "of a step (prompts_per_step x num_generations)")
        return self

    @property
    def episodes_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations

    def turn_sampling(self) -> TurnSampling:
        return TurnSampling(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens,
                            max_context=self.max_context)


class GRPORun(BaseModel):
    out_dir: Path
    model_dir: Path  # merged checkpoint (or the full weights without LoRA)
    global_step: int
    runtime_s: float
    episodes: int
    log_history: list[dict[str, Any]] = Field(default_factory=list)


class DiagRollout:
    """TRL's rollout_func: plays DiagEnv with the trainer's current model; keeps what it played on disk."""

    def __init__(self, cases: Sequence[Case], world: WorldModel, chat: ChatTokens, settings: GRPOSettings,
                 env_config: DiagEnvConfig | None = None, catalogue: Catalogue | None = None,
                 episodes_dir: Path | None = None, model_name: str = ""):
        self.cases = {c.case_id: c for c in cases}
        self.world, self.chat, self.settings = world, chat, settings
        self.env_config = (env_config or DiagEnvConfig()).model_copy(update={"max_turns": settings.max_turns})
        self.catalogue = catalogue or default_catalogue()
        self.episodes_dir, self.model_name = episodes_dir, model_name

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        import torch
        from trl.models import unwrap_model_for_generation

        step, rank = trainer.state.global_step, trainer.accelerator.process_index
        cases = [self.cases[str(p)] for p in prompts]
        indices = [(step * trainer.accelerator.num_processes + rank) * len(prompts) + i for i in range(len(prompts))]
        sampling = self.settings.turn_sampling()
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs
                                         ) as model, torch.no_grad():
            training = model.training
            model.eval()  # no dropout while sampling: the log-probs are the policy's
            # a policy per call: the keys and values it keeps were computed with this step's weights only
            policy = HFPolicy(HFConfig(model=self.model_name or "grpo", max_context=sampling.max_context,
                                       max_batch=len(cases), kv_cache_episodes=len(cases), logprobs="sampling"),
                              model=model, tokenizer=self.chat.tokenizer)
            try:
                samples = play_samples(policy, self.world, cases, indices, self.chat, sampling,
                                       env_config=self.env_config, catalogue=self.catalogue, seed=self.settings.seed)
            finally:
                policy.close()
                model.train(training)
        for s in samples:  # the sampling the engine recorded (with each episode's seed), under GRPO's name
            s.episode.policy = PolicyInfo(backend="grpo", model=self.model_name, sampling=s.episode.policy.sampling)
            s.episode.metadata["grpo"] = {"step": step, "rank": rank}
        if self.episodes_dir is not None:
            save_episodes(self.episodes_dir / f"step-{step:05d}-rank{rank}.jsonl", [s.episode for s in samples])
        return {"prompt_ids": [s.prompt_ids for s in samples], "completion_ids": [s.completion_ids for s in samples],
                "env_mask": [s.env_mask for s in samples], "logprobs": [s.logprobs for s in samples],
                "episode_id": [s.episode.episode_id for s in samples],
                "episode_reward": [s.episode.reward for s in samples],
                "correct": [bool(s.episode.diag and s.episode.diag.correct) for s in samples]}


def episode_reward(completions: list[Any], episode_reward: list[float], correct: list[bool] | None = None,
                   log_metric: Callable[[str, float], None] | None = None, **_: Any) -> list[float]:
    """The environment's reward of each episode (the rollout played it; TRL forwards it here)."""
    if correct and log_metric is not None:
        log_metric("diag/accuracy", sum(correct) / len(correct))
    return [float(r) for r in episode_reward]


def build_grpo_trainer(cases: Sequence[Case], world: WorldModel, base_model: str, out_dir: Path | str,
                       settings: GRPOSettings | None = None, env_config: DiagEnvConfig | None = None,
                       extra_rewards: Sequence[Callable[..., list[float]]] = (), callbacks: Sequence[Any] = ()) -> Any:
    """A GRPOTrainer over `cases` (the train split). `extra_rewards` are further TRL reward functions (each called
    with the completions and the rollout's fields, summed with the episode reward)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    settings = settings or GRPOSettings()
    out = Path(out_dir)
    tokenizer = load_tokenizer(base_model)
    rollout = DiagRollout(cases, world, ChatTokens(tokenizer), settings, env_config, episodes_dir=out / EPISODES,
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
        use_cpu=not _cuda(), dataloader_num_workers=0, **precision_flags(settings.precision))
    return GRPOTrainer(
        model=str(resolve_model(base_model)), reward_funcs=[episode_reward, *extra_rewards], args=args,
        train_dataset=Dataset.from_list([{"prompt": c.case_id} for c in cases]), processing_class=tokenizer,
        peft_config=lora_config(settings.lora) if settings.lora.enabled else None, rollout_func=rollout,
        callbacks=list(callbacks))


def train_grpo(cases: Sequence[Case], world: WorldModel, base_model: str, out_dir: Path | str,
               settings: GRPOSettings | None = None, env_config: DiagEnvConfig | None = None,
               extra_rewards: Sequence[Callable[..., list[float]]] = (), callbacks: Sequence[Any] = ()) -> GRPORun:
    """Train, resume from `<out>/checkpoint-*` when present, save `<out>/final` and merge it into `<out>/merged`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trainer = build_grpo_trainer(cases, world, base_model, out, settings, env_config, extra_rewards, callbacks)
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=last_checkpoint(out))
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


def load_grpo_episodes(out_dir: Path | str) -> list[Episode]:
    """The episodes a GRPO run played, in step order."""
    return [ep for path in sorted((Path(out_dir) / EPISODES).glob("step-*.jsonl")) for ep in load_episodes(path)]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
