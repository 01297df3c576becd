"""Typed training configuration: one section per method, each holding that method's knobs with CPU defaults.

A profile's `training:` section (configs/<profile>.yaml) is a `TrainingConfig`. The same file drives one CPU
process here and N GPU processes on a node: `launch` picks the accelerate/DeepSpeed files under infra/deepspeed/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoraSettings(_Strict):
    enabled: bool = True
    r: int = Field(default=16, gt=0)
    alpha: int = Field(default=32, gt=0)
    dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: list[str] | str = "all-linear"


class Schedule(_Strict):
    """The optimizer and batch knobs every method shares (TrainingArguments fields)."""

    learning_rate: float = Field(default=2e-4, gt=0)
    epochs: float = Field(default=1.0, gt=0)
    max_steps: int = Field(default=-1, description="stop after this many optimizer steps (-1: run the epochs)")
    batch_size: int = Field(default=4, gt=0, description="sequences per device per micro-batch")
    grad_accum: int = Field(default=1, gt=0)
    max_length: int = Field(default=2048, gt=0, description="tokens per sequence (per packed row when packing)")
    warmup_ratio: float = Field(default=0.05, ge=0, lt=1)
    scheduler: str = "cosine"
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        default="auto", description="auto: bf16 where the device supports it in training (GPU), else fp32")
    gradient_checkpointing: bool = False
    logging_steps: int = Field(default=5, gt=0)
    save_steps: int = Field(default=50, gt=0, description="a checkpoint every N optimizer steps, for resume")
    save_total_limit: int = Field(default=2, gt=0)
    seed: int = 0


class SFTSettings(_Strict):
    episodes: list[str] = Field(default_factory=lambda: ["teacher"], description="rollout names whose correct "
                                "episodes are the data")
    init: str = Field(default="base", description="the model it starts from: base, the merged output of another "
                      "stage (sft, dpo, verifier), or a checkpoint folder")
    per_task: int | None = Field(default=None, ge=1, description="at most N correct episodes per task, shortest "
                                 "first (None: all)")
    packing: bool = Field(default=True, description="padding-free best-fit packing of whole episodes")
    min_verifier_score: float | None = Field(default=None, ge=0, le=1, description="keep only correct episodes "
                                             "the verifier stage's model scores at least this (rejection sampling)")
    schedule: Schedule = Field(default_factory=Schedule)
    lora: LoraSettings = Field(default_factory=LoraSettings)


class DPOSettings(_Strict):
    episodes: list[str] = Field(default_factory=lambda: ["teacher"])
    init: str = Field(default="sft", description="the model it starts from: base, the merged output of another "
                      "stage (sft, dpo, verifier), or a checkpoint folder")
    beta: float = Field(default=0.1, gt=0)
    loss_type: str = "sigmoid"
    pairs_per_task: int = Field(default=2, gt=0, description="across-episode pairs drawn per task")
    verifier_pairs: bool = Field(default=False, description="add verifier-ranked pairs, scored by the verifier "
                                 "stage's merged model (train it first)")
    schedule: Schedule = Field(default_factory=lambda: Schedule(learning_rate=5e-5, batch_size=2))
    lora: LoraSettings = Field(default_factory=LoraSettings)


class VerifierSettings(_Strict):
    episodes: list[str] = Field(default_factory=list)
    init: str = Field(default="sft", description="the model it starts from: base, the merged output of another "
                      "stage (sft, dpo, verifier), or a checkpoint folder")
    kind: Literal["generative", "reward"] = Field(
        default="generative", description="generative: the model answers YES/NO, scored p(YES)/(p(YES)+p(NO)); "
        "reward: a sequence-classification head trained on (correct, incorrect) pairs")
    max_tokens: int = Field(default=2048, gt=0, description="episodes longer than this are left out")
    schedule: Schedule = Field(default_factory=lambda: Schedule(learning_rate=1e-4))
    lora: LoraSettings = Field(default_factory=LoraSettings)


class DistributedSettings(_Strict):
    """How training is launched. The machine fields are also read from the environment
    (components/training/launcher.py says which names, in which order)."""

    processes: int = Field(default=1, ge=1, description="accelerate processes per machine (one per GPU; CPU "
                           "processes here)")
    deepspeed: Literal["none", "zero2", "zero3", "zero3_offload"] = "none"
    num_machines: int | None = Field(default=None, ge=1, description="machines of a multi-node launch "
                                     "(MEDGYM_NUM_MACHINES overrides it; None: SLURM_NNODES or NNODES, else 1)")
    machine_rank: int | None = Field(default=None, ge=0, description="this machine's rank "
                                     "(MEDGYM_MACHINE_RANK overrides it; None: SLURM_NODEID or NODE_RANK, else 0)")
    main_addr: str | None = Field(default=None, description="address of the rank-0 machine "
                                  "(MEDGYM_MAIN_ADDR overrides it; None: MASTER_ADDR, else 127.0.0.1)")
    main_port: int | None = Field(default=None, gt=0, lt=65536, description="its rendezvous port "
                                  "(MEDGYM_MAIN_PORT overrides it; None: MASTER_PORT, else 29500; on one machine a free "
                                  "port)")
    liger_kernels: bool = Field(default=False, description="Liger's Triton kernels for the model's layers (RMSNorm, "
                                "RoPE, SwiGLU: less activation memory on long rows); needs a CUDA GPU and the "
                                "liger-kernel package. The loss is chunked without it: TRL's fused LM head never "
                                "materialises the logits of a whole row")
    child_process: bool = Field(default=False, description="train a one-process run in a child process too: what "
                                "training allocated goes back to the system when it ends, instead of staying in the "
                                "caller's heap (a launch of several processes always runs in children)")


class CheckpointSettings(_Strict):
    keep: Literal["all", "last", "none"] = Field(
        default="all", description="a stage's intermediate checkpoints once its merged model is written and recorded: "
        "all kept, the last kept (a rerun asking more steps continues from it), or none (a ZeRO-3 checkpoint of a 7B "
        "model is about 105 GB)")


class TrainingConfig(_Strict):
    base_model: str = Field(default="SmolLM2-135M-Instruct", description="checkpoint folder or embedded model")
    out_dir: Path = Field(default=Path("models"), description="runs go to <out_dir>/<profile>/<method>")
    data_dir: Path = Field(default=Path("data/training"), description="datasets go to <data_dir>/<profile>/<method>")
    sft: SFTSettings = Field(default_factory=SFTSettings)
    dpo: DPOSettings = Field(default_factory=DPOSettings)
    verifier: VerifierSettings = Field(default_factory=VerifierSettings)
    distributed: DistributedSettings = Field(default_factory=DistributedSettings)
    checkpoints: CheckpointSettings = Field(default_factory=CheckpointSettings)
