"""GRPO generating on vLLM engines: the engines serve the trainer's current weights, loaded again at each step.

TRL's GRPOTrainer keeps its generation backend behind one object, `trainer.vllm_generation`, whose `sync_weights()`
it calls once per new optimizer step before the rollout; with `use_vllm` on, it also scores each generation batch
with the trainer before the update and weighs each agent token by the ratio of the trainer's probability to the
sampler's. `attach_engines` puts `EngineWeights` in that seam: rank 0 starts the engines (the vllm policy, N of
them as the profile says) on the starting checkpoint; at each step it writes the trainer's weights, LoRA merged in,
as a checkpoint folder beside it and has every engine load it in place (`VLLMPolicy.reload`, vLLM's
`reload_weights`); the other ranks attach to the same engines. The rollout plays through that policy.

The mismatch between sampler and trainer, named: even with the same weights, vLLM's kernels (bf16 on a GPU, sums
in another order, a reload in the weights' dtype) give other log-probabilities than the trainer's forward. The
engines return the log-probs of the distribution they sampled from (`--logprobs-mode processed_logprobs`: after
temperature and top-p, what the trainer's temperature-scaled forward computes); TRL forms the ratio
trainer/sampler per token and applies it as `importance_sampling` says: truncated importance sampling (TIS,
`token_truncate`, capped at `importance_sampling_cap`) by default. The run logs the gap it corrected:
`sampling/sampling_logp_difference/{mean,max}` and `sampling/importance_sampling_ratio/{min,mean,max}`, beside
`engine/sync_seconds`, the time a step spent loading its weights into the engines.

Weights travel through the file system (two folders used in turn, so the one served is never overwritten): a
step's sync is a write and a read of the model, seconds for a 0.5B model, about a minute for a 7B one; TRL's NCCL
path would stream them instead and is the next step for large runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig

log = logging.getLogger(__name__)

SYNC_DIR = "engine-weights"  # under the run's output folder: <out>/engine-weights/{0,1}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


class EngineWeights:
    """TRL's `vllm_generation` for a trainer whose rollout plays on `policy`'s engines: `sync_weights()` loads the
    trainer's weights into them. Only rank 0 owns and reloads the engines; every rank takes part in gathering
    sharded parameters (ZeRO-3)."""

    def __init__(self, trainer: Any, policy: VLLMPolicy, init_dir: Path, out_dir: Path):
        from trl.distributed import DistributedBackend

        self.trainer, self.policy, self.init_dir = trainer, policy, Path(init_dir)
        self.sync_root = Path(out_dir) / SYNC_DIR
        self._dist = DistributedBackend(trainer.accelerator)
        self._turn = 0
        self.reloads: list[dict[str, Any]] = []  # per sync: step, how ("inplace" | "restart"), seconds

    def sync_weights(self) -> None:
        trainer = self.trainer
        step = trainer.state.global_step
        if step == 0 and not self.reloads:
            return  # a fresh run: the engines were started on these very weights
        started = time.perf_counter()
        tensors = self._merged_state()
        if trainer.accelerator.is_main_process:
            folder = self.sync_root / str(self._turn % 2)
            self._turn += 1
            write_checkpoint(tensors, self.init_dir, folder)
            how = self.policy.reload(folder)
            seconds = time.perf_counter() - started
            self.reloads.append({"step": step, "how": how, "seconds": round(seconds, 3)})
            trainer._metrics["train"]["engine/sync_seconds"].append(seconds)
            log.info("step %d: the engines serve the trainer's weights (%s, %.1f s)", step, how, seconds)
        trainer.accelerator.wait_for_everyone()

    def _merged_state(self) -> dict[str, Any]:
        """The trainer's weights under the checkpoint's names, LoRA added in (on rank 0; {} elsewhere)."""
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        with self._dist.gather_params(list(model.parameters())):
            if not self.trainer.accelerator.is_main_process:
                return {}
            return {name: tensor.to("cpu", copy=True).contiguous() for name, tensor in merged_weights(model)}


def merged_weights(model: Any) -> Iterator[tuple[str, Any]]:
    """A model's weights under the checkpoint's names, each LoRA layer's weight its base weight plus the adapter's
    delta, computed aside: merging into the live model and unmerging after, as TRL's own sync does, leaves the base
    weights off by a rounding each step. A weight without a delta is the parameter itself (no copy). Under ZeRO-3,
    call it inside a gather of the parameters."""
    deltas = lora_deltas(model)
    for name, param in model.named_parameters():
        if deltas is None:
            yield name, param.detach()
            continue
        if "lora_" in name or "original_module" in name:
            continue  # added below / replaced by its trained copy
        delta = deltas.get(name)
        name = (name.removeprefix("base_model.model.").replace(".base_layer", "")
                .replace("modules_to_save.default.", ""))
        yield name, param.detach() if delta is None else param.detach() + delta.to(param.dtype)


def lora_deltas(model: Any) -> dict[str, Any] | None:
    """For a peft model, each LoRA layer's base weight name and its active adapters' delta; None for a plain model."""
    if not hasattr(model, "peft_config"):
        return None
    from peft.tuners.lora import LoraLayer

    deltas: dict[str, Any] = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and not module.merged:
            active = [a for a in module.active_adapters if a in module.lora_A]
            if active:
                deltas[f"{name}.base_layer.weight"] = sum(module.get_delta_weight(a) for a in active)
    return deltas


def write_checkpoint(tensors: dict[str, Any], init_dir: Path, folder: Path) -> None:
    """`tensors` as a checkpoint folder the engines load: the starting checkpoint's config and tokenizer files, the
    weights as one safetensors file, written aside and renamed, so that no reader sees half a file."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for entry in init_dir.iterdir():
        if entry.is_file() and not entry.name.endswith(_WEIGHT_SUFFIXES) and entry.name not in _WEIGHT_INDEXES:
            shutil.copy2(entry, folder / entry.name)
    partial = folder / "model.safetensors.partial"
    save_file(tensors, str(partial), metadata={"format": "pt"})
    os.replace(partial, folder / "model.safetensors")


def engine_config(options: dict[str, Any], init_dir: Path | str) -> VLLMPolicyConfig:
    """The engines GRPO generates on: the vllm policy's `options` serving `init_dir`, reporting the log-probs of
    the distribution they sample from."""
    if "model" in options or "base_url" in options:
        raise ValueError("GRPO's vllm options name neither model (the engines serve the run's starting checkpoint) "
                         "nor base_url (the engines load the trainer's weights: they must be the run's own)")
    return VLLMPolicyConfig(**{**options, "model": str(init_dir), "logprobs_mode": "processed_logprobs"})


def attach_engines(trainer: Any, options: dict[str, Any], init_dir: Path, out_dir: Path) -> VLLMPolicy:
    """Start the engines on `init_dir` (rank 0; the other ranks attach to them) and make them the trainer's
    generation backend: TRL then loads each step's weights into them and corrects for their log-probs."""
    from accelerate.utils import broadcast_object_list

    accelerator = trainer.accelerator
    served = engine_config(options, init_dir)
    policy = VLLMPolicy(served) if accelerator.is_main_process else None
    urls = [policy.base_urls if policy is not None else None]
    if accelerator.num_processes > 1:
        broadcast_object_list(urls, from_process=0)
    if policy is None:
        policy = VLLMPolicy(VLLMPolicyConfig(model=str(init_dir), base_url=urls[0],
                                             concurrency=served.concurrency,
                                             request_timeout_s=served.request_timeout_s))
    trainer.use_vllm = True  # TRL's switch for sync_weights() before each rollout and the importance weights
    trainer.vllm_generation = EngineWeights(trainer, policy, init_dir, out_dir)
    trainer._last_loaded_step = -1
    return policy
