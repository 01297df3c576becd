"""TRL trainers over datasets of token ids: SFT, DPO and the verifier (generative YES/NO or a reward model).

`train(job)` runs in every process of a launch (one here, N under accelerate/DeepSpeed): it reads the dataset
from disk, builds the TRL trainer for the job's method, resumes from the last checkpoint in the job's folder
if there is one, trains, and saves the final weights (an adapter with LoRA) to `<out>/final`. Rank 0 writes
`<out>/result.json`. Nothing here chats with text: every row is ids and masks built from episodes.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from components.common.io import atomic_write
from components.policies.models import resolve_model
from components.training import native_head, packed_attention
from components.training.config import DPOSettings, Schedule, SFTSettings, VerifierSettings
from components.training.models import (
    adapters_take_autocast_inputs,
    frozen_base_kwargs,
    load_tokenizer,
    lora_config,
    precision_flags,
)

Method = Literal["sft", "dpo", "verifier"]
# a run folder's layout, for every trainer here and in components/rl: `checkpoint-<step>` while it trains, the
# last weights in FINAL (an adapter with LoRA), and in MERGED the plain checkpoint that policies load
FINAL = "final"
MERGED = "merged"
RESULT = "result.json"


class TrainJob(BaseModel):
    """Everything a training process needs, as JSON: launched ranks read it from a file."""

    model_config = ConfigDict(extra="forbid")

    method: Method
    base_model: str
    dataset_dir: Path
    out_dir: Path
    sft: SFTSettings | None = None
    dpo: DPOSettings | None = None
    verifier: VerifierSettings | None = None
    rows_file: Path | None = Field(default=None, description="rows a caller built in memory (DiagGym's world model "
                                   "and cold start), as JSON lines, read instead of dataset_dir by launched ranks")
    liger_kernels: bool = Field(default=False, description="training.distributed.liger_kernels")
    tracking_uri: str | None = Field(default=None, description="MLflow store that per-step metrics go to")
    run_id: str | None = None
    report_tokens: bool = True

    def settings(self) -> SFTSettings | DPOSettings | VerifierSettings:
        s = getattr(self, self.method)
        if s is None:
            raise ValueError(f"a {self.method} job needs its {self.method} settings")
        return s


class TrainResult(BaseModel):
    method: Method
    out_dir: Path
    final_dir: Path
    global_step: int
    epochs: float
    train_loss: float | None
    runtime_s: float
    tokens: int = Field(description="non-padding input tokens the model read (all processes)")
    tokens_per_s: float
    processes: int
    resumed_from: str | None = None
    log_history: list[dict[str, Any]] = Field(default_factory=list)


def training_args(schedule: Schedule, out_dir: Path, **extra: Any) -> dict[str, Any]:
    """The TrainingArguments fields a Schedule sets; method configs add their own."""
    return dict(
        output_dir=str(out_dir), learning_rate=schedule.learning_rate, num_train_epochs=schedule.epochs,
        max_steps=schedule.max_steps, per_device_train_batch_size=schedule.batch_size,
        gradient_accumulation_steps=schedule.grad_accum, warmup_steps=schedule.warmup_ratio,
        lr_scheduler_type=schedule.scheduler, weight_decay=schedule.weight_decay, max_grad_norm=schedule.max_grad_norm,
        gradient_checkpointing=schedule.gradient_checkpointing, logging_steps=schedule.logging_steps,
        save_strategy="steps", save_steps=schedule.save_steps, save_total_limit=schedule.save_total_limit,
        seed=schedule.seed, data_seed=schedule.seed, report_to=[], disable_tqdm=False, dataloader_num_workers=0,
        include_num_input_tokens_seen="non_padding", use_cpu=not _cuda(), **precision_flags(schedule.precision),
        **extra,
    )


def kernel_args(liger: bool) -> dict[str, Any]:
    """TrainingArguments' Liger fields (training.distributed.liger_kernels). TRL's SFT and DPO trainers already score
    through a chunked, fused LM head (the logits of a long packed row are never materialised), and refuse Liger's own
    fused cross-entropy; what Liger adds is its layer kernels, which are Triton: a CUDA GPU and the package."""
    if not liger:
        return {}
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is None:
        raise ValueError("training.distributed.liger_kernels is true, and the liger-kernel package is not installed "
                         "(install liger-kernel on the GPU node, or set liger_kernels: false)")
    if not _cuda():
        raise ValueError("training.distributed.liger_kernels is true, and no CUDA GPU is visible: Liger's kernels are "
                         "Triton GPU kernels (set liger_kernels: false to train on the CPU)")
    return {"use_liger_kernel": True}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _peft(job: TrainJob, task_type: str = "CAUSAL_LM", modules_to_save: list[str] | None = None) -> Any:
    lora = job.settings().lora
    return lora_config(lora, task_type, modules_to_save, model=job.base_model) if lora.enabled else None


# ---------------------------------------------------------------------- SFT
def sft_trainer(job: TrainJob, rows: list[dict[str, Any]], callbacks: list[Any]) -> Any:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    s: SFTSettings | VerifierSettings = job.settings()  # the generative verifier is SFT on its YES/NO rows
    packing = getattr(s, "packing", True)
    data = Dataset.from_list([{"input_ids": r["input_ids"], "assistant_masks": r["loss_mask"]} for r in rows])
    fields = training_args(s.schedule, job.out_dir, **kernel_args(job.liger_kernels),
                           max_length=s.schedule.max_length, packing=packing,
                           packing_strategy="bfd", padding_free=packing, dataset_num_proc=None,
                           model_init_kwargs={"attn_implementation": packed_attention.register(),
                                              **frozen_base_kwargs(s.lora, s.schedule.precision)})
    if packing:  # a padding-free row holds no padding: "non_padding" would count ids != pad, and pad is often eos
        fields["include_num_input_tokens_seen"] = "all"
    args = SFTConfig(**fields)
    tokenizer = load_tokenizer(job.base_model)
    trainer = SFTTrainer(model=str(resolve_model(job.base_model)), args=args, train_dataset=data,
                         processing_class=tokenizer, peft_config=_peft(job), callbacks=callbacks)
    native_head.use_cpu_head(trainer, ("log_probs", "entropy", "is_top1"))  # the fields SFTTrainer reads
    adapters_take_autocast_inputs(trainer.model)
    return trainer


# ---------------------------------------------------------------------- DPO
def dpo_trainer(job: TrainJob, rows: list[dict[str, Any]], callbacks: list[Any]) -> Any:
    from datasets import Dataset
    from trl import DPOConfig

    s = job.settings()
    assert isinstance(s, DPOSettings)
    cols = ("prompt_ids", "chosen_ids", "rejected_ids", "chosen_mask", "rejected_mask")
    data = Dataset.from_list([{c: r[c] for c in cols} for r in rows
                              if len(r["prompt_ids"]) < s.schedule.max_length])
    args = DPOConfig(**training_args(s.schedule, job.out_dir, **kernel_args(job.liger_kernels),
                                     max_length=s.schedule.max_length, beta=s.beta,
                                     loss_type=[s.loss_type], remove_unused_columns=False,
                                     model_init_kwargs=frozen_base_kwargs(s.lora, s.schedule.precision) or None))
    tokenizer = load_tokenizer(job.base_model)
    trainer_cls = _masked_dpo_trainer()
    trainer = trainer_cls(model=str(resolve_model(job.base_model)), args=args, train_dataset=data,
                          processing_class=tokenizer, peft_config=_peft(job), callbacks=callbacks,
                          data_collator=_masked_preference_collator()(pad_token_id=tokenizer.pad_token_id,
                                                                      max_length=s.schedule.max_length))
    # the fields DPOTrainer reads (log_sum_sq_probs: WPO's weights)
    fields = ("log_probs", "entropy", "mean_logits", "is_top1") + (("log_sum_sq_probs",) if trainer.use_weighting else ())
    native_head.use_cpu_head(trainer, fields, pairs=True)
    adapters_take_autocast_inputs(trainer.model)
    return trainer


def _masked_dpo_trainer() -> type:
    from trl import DPOTrainer

    class MaskedDPOTrainer(DPOTrainer):
        """DPO over pre-tokenized pairs: the rows already hold prompt, chosen and rejected ids (TRL would
        otherwise look for text to tokenize)."""

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):  # noqa: ANN001
            return dataset

    return MaskedDPOTrainer


def _masked_preference_collator() -> type:
    import torch
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    class MaskedPreferenceCollator(DataCollatorForPreference):
        """TRL's preference collator, with the completion mask taken from each pair's own masks: in a
        multi-turn continuation the environment's observations are context, not the model's choice."""

        def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
            out = super().torch_call(examples)
            width = out["input_ids"].shape[1]
            masks = [[0] * len(e["prompt_ids"]) + list(e["chosen_mask"]) for e in examples]
            masks += [[0] * len(e["prompt_ids"]) + list(e["rejected_mask"]) for e in examples]
            if self.max_length is not None:
                masks = [m[: self.max_length] for m in masks]
            out["completion_mask"] = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.long)
            return out

    return MaskedPreferenceCollator


# ---------------------------------------------------------------------- reward model
def reward_trainer(job: TrainJob, rows: list[dict[str, Any]], callbacks: list[Any]) -> Any:
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    s = job.settings()
    data = Dataset.from_list([{"chosen_ids": r["chosen_ids"], "rejected_ids": r["rejected_ids"]} for r in rows])
    args = RewardConfig(**training_args(s.schedule, job.out_dir, **kernel_args(job.liger_kernels),
                                        max_length=s.schedule.max_length))
    tokenizer = load_tokenizer(job.base_model)
    return RewardTrainer(model=str(resolve_model(job.base_model)), args=args, train_dataset=data,
                         processing_class=tokenizer, peft_config=_peft(job, "SEQ_CLS", ["score"]),
                         callbacks=callbacks)


# ---------------------------------------------------------------------- one entry for every process
def build_trainer(job: TrainJob, rows: list[dict[str, Any]], callbacks: list[Any]) -> Any:
    if job.method == "sft":
        return sft_trainer(job, rows, callbacks)
    if job.method == "dpo":
        return dpo_trainer(job, rows, callbacks)
    assert job.verifier is not None
    return (sft_trainer if job.verifier.kind == "generative" else reward_trainer)(job, rows, callbacks)


def train(job: TrainJob, rows: list[dict[str, Any]] | None = None, callbacks: list[Any] | None = None) -> TrainResult:
    """Train `job` in this process (one rank of a launch); resume from `<out>/checkpoint-*` when present."""
    from components.training.datasets import read_dataset
    from components.training.verifier import trainer_rows

    if rows is None and job.rows_file is not None:
        with open(job.rows_file, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    if rows is None:
        _, rows = read_dataset(job.dataset_dir)
    if job.method == "verifier":
        assert job.verifier is not None
        rows = trainer_rows(rows, load_tokenizer(job.base_model), job.verifier.kind)
    callbacks = list(callbacks or [])
    if job.run_id and job.tracking_uri:
        from components.tracking.training import MlflowStepLogger

        callbacks.append(MlflowStepLogger(job.tracking_uri, job.run_id))
    job.out_dir.mkdir(parents=True, exist_ok=True)
    trainer = build_trainer(job, rows, callbacks)
    last = last_checkpoint(job.out_dir)
    start = time.perf_counter()
    train_loss = train_or_resume(trainer, last)
    runtime = time.perf_counter() - start
    final = job.out_dir / FINAL
    trainer.save_model(str(final))
    state = trainer.state
    tokens = int(state.num_input_tokens_seen or 0)
    result = TrainResult(
        method=job.method, out_dir=job.out_dir, final_dir=final, global_step=state.global_step, epochs=state.epoch or 0.0,
        train_loss=_finite(train_loss), runtime_s=runtime, tokens=tokens,
        tokens_per_s=tokens / runtime if runtime > 0 else 0.0, processes=trainer.accelerator.num_processes,
        resumed_from=last, log_history=state.log_history)
    rank = trainer.accelerator.process_index
    with atomic_write(job.out_dir / f"rank-{rank}.json") as fh:  # each rank's own count: launches check they agree
        json.dump({"rank": rank, "global_step": state.global_step, "tokens": tokens, "pid": os.getpid()}, fh)
    if trainer.is_world_process_zero():
        trainer.processing_class.save_pretrained(str(final))  # tokenizer and chat template beside the weights
        with atomic_write(job.out_dir / RESULT) as fh:
            fh.write(result.model_dump_json(indent=1))
    trainer.accelerator.wait_for_everyone()
    return result


def train_or_resume(trainer: Any, last: str | None) -> float | None:
    """`trainer.train`, from the checkpoint `last` when there is one; returns the mean training loss. A checkpoint of
    the planned last step is loaded, not resumed: transformers resumes a run that ended mid-epoch at `max_steps` with
    one more optimizer step (a run started again after it finished, or after DVC put another version of its model
    back, trained 13 steps of 12)."""
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_callback import TrainerState

    if last is not None and trainer.args.max_steps > 0:
        state = TrainerState.load_from_json(str(Path(last) / TRAINER_STATE_NAME))
        if state.global_step >= trainer.args.max_steps:
            trainer._load_from_checkpoint(last)
            trainer.state = state
            losses = [h["loss"] for h in state.log_history if "loss" in h]
            return sum(losses) / len(losses) if losses else None
    return trainer.train(resume_from_checkpoint=last).training_loss


def last_checkpoint(out_dir: Path) -> str | None:
    """The newest complete `checkpoint-N` in `out_dir`: the Trainer writes trainer_state.json last, so a folder
    without it is one a killed process left half-written (resuming from it would fail)."""
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not out_dir.is_dir():
        return None
    steps = [(int(p.name.rsplit("-", 1)[1]), p) for p in out_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*")
             if p.name.rsplit("-", 1)[1].isdigit() and (p / TRAINER_STATE_NAME).is_file()]
    return str(max(steps)[1]) if steps else None


def read_result(out_dir: Path) -> TrainResult:
    return TrainResult.model_validate(json.loads((out_dir / RESULT).read_text()))


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
