"""Models for training: precision per device, LoRA adapters, and merge-and-save into a plain checkpoint.

A merged checkpoint is a folder the `hf` and `vllm` policies load like any other: weights, config, tokenizer
and chat template. Merging happens in one process after training, from the base and the saved adapter, so it
is the same whether training ran in one process or under DeepSpeed ZeRO-3 with sharded parameters.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from components.common.io import atomic_dir
from components.policies.models import resolve_model
from components.training.config import LoraSettings

ADAPTER_FILE = "adapter_config.json"


def bf16_supported() -> bool:
    """bf16 training where it is fast and exact enough: CUDA with bf16, or a CPU with AVX-512 bf16 / AMX."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    capability = torch.backends.cpu.get_cpu_capability()  # e.g. "AVX512", "AVX2", "DEFAULT"
    return capability.startswith("AVX512") and _cpu_has_bf16()


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def precision_flags(precision: str) -> dict[str, bool]:
    """TrainingArguments' bf16/fp16 flags for a Schedule.precision (auto: bf16 where supported, else fp32)."""
    if precision == "auto":
        precision = "bf16" if bf16_supported() else "fp32"
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


def frozen_base_kwargs(lora: LoraSettings, precision: str) -> dict[str, str]:
    """`from_pretrained` keywords for the base a run adapts: its frozen weights in bf16 where the run computes in
    bf16 with LoRA and no DeepSpeed (`LoraSettings.frozen_dtype`), else none (TRL then loads float32)."""
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"  # set by `accelerate launch`
    if not lora.enabled or lora.frozen_dtype == "float32" or deepspeed or not precision_flags(precision)["bf16"]:
        return {}
    return {"dtype": "bfloat16"}


def adapters_take_autocast_inputs(model: Any) -> int:
    """Where the frozen base is bf16 (`frozen_base_kwargs`: loaded so only for a run under bf16 autocast), stop
    PEFT casting each adapter's input to the adapter's float32 before autocast casts it back to bf16 for the
    product: two copies of every adapted module's input, forward and backward, for the same result. A float32 base
    is left as it is. Returns the adapted modules changed."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if not any(p.dtype == torch.bfloat16 for m in layers for p in m.get_base_layer().parameters()):
        return 0
    for m in layers:
        m.cast_input_dtype_enabled = False
    return len(layers)


def lora_config(settings: LoraSettings, task_type: str = "CAUSAL_LM", modules_to_save: list[str] | None = None,
                model: str | Path | None = None) -> Any:
    """PEFT's LoraConfig for the settings; `model` (a name or folder) is needed where `last_layers` is set, to
    count its layers and name its linear modules."""
    from peft import LoraConfig

    targets, layers = settings.target_modules, None
    if settings.last_layers is not None:
        if model is None:
            raise ValueError("lora.last_layers needs the model it adapts")
        names, depth = decoder_linear_names(model)
        if settings.last_layers > depth:
            raise ValueError(f"lora.last_layers is {settings.last_layers}, and {model} has {depth} decoder layers")
        layers = list(range(depth - settings.last_layers, depth))
        if targets == "all-linear":  # PEFT takes a layer subset with named modules only
            targets = names
    return LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                      target_modules=targets, layers_to_transform=layers, task_type=task_type,
                      modules_to_save=modules_to_save)


def decoder_linear_names(model: str | Path) -> tuple[list[str], int]:
    """The linear modules of a decoder layer (q_proj, ..., down_proj) and the number of layers, read from the
    model's config on the meta device (no weights are loaded)."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(resolve_model(str(model)))
    with init_empty_weights():
        body = AutoModelForCausalLM.from_config(config)
    layers = next(m for m in body.modules() if isinstance(m, torch.nn.ModuleList))
    names = sorted({name.rsplit(".", 1)[-1] for name, m in layers[0].named_modules()
                    if isinstance(m, torch.nn.Linear)})
    return names, len(layers)


def load_tokenizer(model: str | Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(str(model)))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def is_adapter(path: Path) -> bool:
    return (path / ADAPTER_FILE).is_file()


def merge_and_save(adapter_dir: Path, out_dir: Path, *, dtype: str = "float32") -> Path:
    """Fold a LoRA adapter into its base model's weights and save a plain checkpoint at `out_dir`, atomically."""
    import torch
    from peft import AutoPeftModelForCausalLM, AutoPeftModelForSequenceClassification

    if _adapter_config(adapter_dir).get("task_type") == "SEQ_CLS":  # the reward verifier: one scalar score head
        model = AutoPeftModelForSequenceClassification.from_pretrained(adapter_dir, dtype=getattr(torch, dtype),
                                                                       num_labels=1)
    else:
        model = AutoPeftModelForCausalLM.from_pretrained(adapter_dir, dtype=getattr(torch, dtype))
    merged = model.merge_and_unload()
    tokenizer = load_tokenizer(adapter_dir)
    save_checkpoint(merged, tokenizer, out_dir, provenance={"adapter": str(adapter_dir),
                                                           "base": _adapter_base(adapter_dir)})
    return out_dir


def save_checkpoint(model: Any, tokenizer: Any, out_dir: Path, provenance: dict[str, Any] | None = None) -> Path:
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if provenance:
            (tmp / "medgym_provenance.json").write_text(json.dumps(provenance, indent=1))
    return out_dir


def _adapter_config(adapter_dir: Path) -> dict[str, Any]:
    return json.loads((adapter_dir / ADAPTER_FILE).read_text())


def _adapter_base(adapter_dir: Path) -> str:
    return _adapter_config(adapter_dir).get("base_model_name_or_path", "")
