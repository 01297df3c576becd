"""Typed training configuration: one section per method (sft, dpo, verifier on collected episodes; grpo online in the
coding environment), each holding that method's knobs with CPU defaults.

A profile's `training:` section (configs/<profile>.yaml) is a `TrainingConfig`. The same file drives one CPU
process here and N GPU processes on a node: `launch` picks the accelerate/DeepSpeed files under infra/deepspeed/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoraSettings(_Strict):
    enabled: bool = True
    r: int = Field(default=16, gt=0)
    alpha: int = Field(default=32, gt=0)
    dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: list[str] | str = "all-linear"
    # The layers below the adapted ones take no gradient, so the backward pass stops at the lowest adapted layer: on
    # SmolLM2 (30 layers, bf16, the demo's 1,536-token SFT rows) a step with the last 10 adapted took 0.65x the time
    # of all 30, the last 20 0.83x (bench/stage_memory.py). It learns less: the demo's SFT with the last 10 reached
    # loss 0.369 against 0.270 and 2 of 16 valid tasks against 7. Gradient checkpointing makes every layer's input
    # need a gradient, which undoes the saving.
    last_layers: int | None = Field(default=None, gt=0, description="adapt only the model's last N decoder layers "
                                    "(None: all of them)")
    # Autocast computes every product in bf16 anyway, but with the frozen base in float32 it casts each weight again
    # at every call and each layer's float32 input again for every module reading it, and PEFT casts each adapter's
    # input up to float32 for autocast to cast it down again: on SmolLM2 (the demo's 1,536-token SFT rows, a CPU)
    # a step took 1.33x the time. The adapters stay float32, as their optimizer updates need.
    frozen_dtype: Literal["auto", "float32"] = Field(
        default="auto", description="the frozen base's weights: auto holds them in bf16 where the run computes in "
        "bf16 (the residual stream then in bf16 too, as vLLM serves it), except under DeepSpeed, which shards them; "
        "float32 keeps them as saved")


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


class GRPOKnobs(_Strict):
    """GRPO's knobs, whichever environment it plays (components.rl.grpo); defaults sized for a CPU run of
    SmolLM2-135M (see that module's docstring for a GPU)."""

    num_generations: int = Field(default=4, ge=2, description="episodes per task per step: the group whose rewards "
                                 "set each other's advantage")
    prompts_per_step: int = Field(default=2, ge=1, description="tasks (cases) per optimizer step on each process")
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
    # The rewards are sparse: while accuracy is near zero, most groups differ only by a few hundredths (DiagGym's
    # exam F1) or not at all. TRL's default "group" divides each group by its own std, which blows those hundredths
    # up to unit advantages, as large as a right answer gets in a group that has one; "batch" does the same wherever
    # the batch holds no right answer. "none" (Dr. GRPO) keeps the advantage in reward units: reward minus the
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
    # where episodes are generated: hf samples with the trainer's own model in its process; vllm on engines that
    # load the trainer's weights at each new step (components.rl.engine_weights), as a GPU run should
    generation: Literal["hf", "vllm"] = "hf"
    sampler_copy: bool = Field(default=True, description="generation: hf samples on a plain copy of the model in the "
                               "training precision, LoRA merged in, refreshed each step (components.rl.hf_sampler: "
                               "3x faster decoding on a CPU than through the trainer's model); off: through the "
                               "trainer's model, one copy of the weights less")
    shared_prompt: bool = Field(default=True, description="the scoring forward runs each distinct prompt of a "
                                "micro-batch once, its episodes' completions on its keys and values "
                                "(components.rl.shared_prompt): with a group's episodes in one micro-batch, its prompt "
                                "is trained once, not once per episode; off: TRL's forward, every episode whole")
    # options, not the vllm policy's own config type: importing it here would make every training stage's key hash
    # the vllm policy's code; the profile validates them (components/profile/config.py) and the engines take them
    vllm: dict[str, Any] = Field(default_factory=dict, description="the engines' options (VLLMPolicyConfig: engines, "
                                 "devices, dtype, ...; generation: vllm); the model is the run's starting checkpoint")
    # The engine's log-probs are not the trainer's, even for the same weights (other kernels, bf16 sums in another
    # order): the ratio trainer/sampler weights each token (truncated importance sampling, TIS); TRL's modes
    importance_sampling: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = Field(
        default="token_truncate", description="how the trainer/sampler ratio is applied (generation: vllm)")
    importance_sampling_cap: float = Field(default=2.0, gt=1, description="the ratio's cap (truncate) or the ratio "
                                           "above which a token or episode is dropped (mask)")

    @model_validator(mode="after")
    def _micro_batches_fill_a_step(self) -> GRPOKnobs:
        if self.episodes_per_step % self.micro_batch:
            raise ValueError(f"micro_batch {self.micro_batch} does not divide the {self.episodes_per_step} episodes "
                             "of a step (prompts_per_step x num_generations)")
        return self

    @property
    def episodes_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations


class CodingGRPOSettings(GRPOKnobs):
    """Online GRPO on the coding environment (the `grpo` stage): its own episodes, played on train tasks in the
    sandbox each step and rewarded by the tasks' checkers, instead of a dataset of collected rollouts."""

    init: str = Field(default="sft", description="the model it starts from: base, the merged output of another "
                      "stage (sft, dpo, verifier), or a checkpoint folder")
    tasks: int | None = Field(default=None, ge=1, description="at most this many train tasks, spread over categories "
                              "(None: every train task of the profile's categories)")
    max_new_tokens: int = Field(default=256, gt=0, description="per agent turn: room for a run_code block")


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
    grpo: CodingGRPOSettings = Field(default_factory=CodingGRPOSettings)
    distributed: DistributedSettings = Field(default_factory=DistributedSettings)
    checkpoints: CheckpointSettings = Field(default_factory=CheckpointSettings)
