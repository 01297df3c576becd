"""What GRPO hands its vLLM engines, without an engine: the trainer's weights with LoRA merged in, under the
checkpoint's own names, as a folder written whole; and the engine options a profile may give."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import yaml
from safetensors.torch import load_file

from components.common.io import RecordError
from components.profile.config import CONFIG_DIR, load_config
from components.rl.engine_weights import EngineWeights, engine_config, write_checkpoint


def test_the_engines_get_the_merged_weights_under_the_checkpoints_names(tiny_model, tmp_path):
    from accelerate import Accelerator
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    trainer = SimpleNamespace(accelerator=Accelerator(cpu=True), model=model, state=SimpleNamespace(global_step=3),
                              _metrics={"train": {}})
    state = EngineWeights(trainer, policy=None, init_dir=tiny_model, out_dir=tmp_path)._merged_state()

    base = load_file(str(tiny_model / "model.safetensors"))
    assert set(state) == set(base)  # no lora_ tensors, no base_model.model. prefixes, no .base_layer
    # the live model is unmerged again: training goes on with its base weights and its adapter apart
    live = {n.removeprefix("base_model.model.").replace(".base_layer", ""): p for n, p in model.named_parameters()
            if "lora_" not in n}
    assert all(torch.equal(live[k], base[k].to(live[k].dtype)) for k in base)
    merged = model.merge_and_unload().state_dict()
    assert all(torch.equal(state[k], merged[k]) for k in state)
    assert any(not torch.equal(state[k], base[k].to(state[k].dtype)) for k in state if "proj" in k)

    folder = tmp_path / "engine-weights" / "0"
    write_checkpoint(state, tiny_model, folder)
    assert sorted(p.name for p in folder.iterdir() if p.suffix != ".json") == sorted(
        p.name for p in tiny_model.iterdir() if p.suffix != ".json")  # config, tokenizer, one weights file
    assert not list(folder.glob("*.partial"))
    assert all(torch.equal(v, state[k]) for k, v in load_file(str(folder / "model.safetensors")).items())


def test_a_profiles_engine_options_are_checked_when_it_loads(tmp_path):
    raw = yaml.safe_load((CONFIG_DIR / "diag-paper.yaml").read_text())
    assert load_config(CONFIG_DIR / "diag-paper.yaml").diag.grpo.settings.generation == "vllm"
    raw["diag"]["grpo"]["settings"]["vllm"]["enginez"] = 2
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(RecordError, match=r"diag\.grpo\.settings\.vllm\.enginez: Extra inputs"):
        load_config(path)


def test_the_engines_serve_the_runs_own_checkpoint_and_report_what_they_sampled_from():
    config = engine_config({"engines": 2, "dtype": "bfloat16"}, "/ckpt")
    assert (config.model, config.engines, config.logprobs_mode) == ("/ckpt", 2, "processed_logprobs")
    for bad in ({"model": "other"}, {"base_url": "http://127.0.0.1:8000"}):
        with pytest.raises(ValueError, match="neither model"):
            engine_config(bad, "/ckpt")
