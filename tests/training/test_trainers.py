"""Real TRL trainers on the tiny model: SFT (LoRA and full), DPO with per-pair masks, both verifiers, merge-and-save.

Every job takes real optimizer steps on rows built from episodes by components.training.data; nothing is mocked.
Steps are few and sequences short, so the file runs on a busy CPU.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from components.training import data, trainers, verifier
from components.training.config import DPOSettings, LoraSettings, Schedule, SFTSettings, VerifierSettings
from components.training.datasets import to_records
from components.training.models import ADAPTER_FILE, is_adapter, merge_and_save
from components.training.trainers import TrainJob
from tests.training.conftest import text_episodes

LORA = LoraSettings(r=4, alpha=8, dropout=0.0)


def schedule(**kw) -> Schedule:
    base = dict(max_steps=2, batch_size=2, max_length=1024, logging_steps=1, save_steps=1000, learning_rate=1e-3,
                warmup_ratio=0.0, precision="fp32")
    return Schedule(**{**base, **kw})


def job(method: str, model: Path, out: Path, settings) -> TrainJob:
    return TrainJob(method=method, base_model=str(model), dataset_dir=out / "unused", out_dir=out,
                    **{method: settings})


def losses(result) -> list[float]:
    return [h["loss"] for h in result.log_history if "loss" in h]


@pytest.fixture(scope="module")
def episodes():
    return text_episodes(4)


@pytest.fixture(scope="module")
def sft_rows(episodes, tiny_chat):
    return to_records(data.sft_examples(episodes, tiny_chat))


@pytest.fixture(scope="module")
def sft_lora(tiny_model, sft_rows, tmp_path_factory):
    """One SFT run with LoRA and packing, shared by the tests that read its outputs."""
    out = tmp_path_factory.mktemp("sft-lora")
    j = job("sft", tiny_model, out, SFTSettings(packing=True, schedule=schedule(max_steps=3), lora=LORA))
    return j, trainers.train(j, rows=sft_rows)


# ---------------------------------------------------------------------- SFT
def test_sft_with_lora_takes_its_steps_and_saves_a_trained_adapter(sft_lora):
    j, result = sft_lora
    final = j.out_dir / "final"
    assert result.global_step == 3 and result.final_dir == final
    assert (final / ADAPTER_FILE).is_file() and (final / "adapter_model.safetensors").is_file()
    assert (final / "tokenizer_config.json").is_file()  # the tokenizer and chat template beside the weights
    assert not (final / "model.safetensors").exists()
    assert result.train_loss is not None and math.isfinite(result.train_loss)
    assert len(losses(result)) == 3 and all(math.isfinite(v) for v in losses(result))
    assert result.tokens > 0 and result.tokens_per_s > 0 and result.processes == 1 and result.resumed_from is None
    # the adapter moved: LoRA's B matrices start at zero
    lora_b = [v for k, v in load_file(final / "adapter_model.safetensors").items() if "lora_B" in k]
    assert lora_b and any(v.abs().max() > 0 for v in lora_b)
    on_disk = trainers.read_result(j.out_dir)
    assert on_disk.global_step == 3 and on_disk.tokens == result.tokens
    assert json.loads((j.out_dir / "rank-0.json").read_text()) == {"rank": 0, "global_step": 3,
                                                                   "tokens": result.tokens, "pid": os.getpid()}


@pytest.mark.parametrize("packing", [False, True])
def test_sft_labels_are_ignored_exactly_where_the_loss_mask_is_zero(tiny_model, sft_rows, tmp_path, packing):
    j = job("sft", tiny_model, tmp_path, SFTSettings(packing=packing, schedule=schedule(), lora=LORA))
    train_data = trainers.sft_trainer(j, sft_rows, []).train_dataset
    if not packing:
        assert len(train_data) == len(sft_rows)
        for row, src in zip(train_data, sft_rows, strict=True):
            assert row["input_ids"] == src["input_ids"]
            assert [lab == -100 for lab in row["labels"]] == [m == 0 for m in src["loss_mask"]]
            assert all(lab == t for lab, t, m in zip(row["labels"], row["input_ids"], src["loss_mask"], strict=True)
                       if m)
        return
    # packed: whole episodes end to end; each one's labels are its own ids under its own mask
    by_ids = {tuple(r["input_ids"]): r["loss_mask"] for r in sft_rows}
    seen = 0
    for row in train_data:
        start = 0
        for n in row["seq_lengths"]:
            ids, labels = row["input_ids"][start:start + n], row["labels"][start:start + n]
            mask = by_ids[tuple(ids)]
            assert [lab == -100 for lab in labels] == [m == 0 for m in mask]
            start, seen = start + n, seen + 1
        assert start == len(row["input_ids"])
    assert seen == len(sft_rows)


@pytest.mark.parametrize("packing", [True, False])
def test_packing_on_and_off_both_train_and_count_every_token(tiny_model, sft_rows, tmp_path, packing):
    # one step of batch 4 holds the whole epoch either way (the rows differ in length: unpacked, they are padded)
    assert len({len(r["input_ids"]) for r in sft_rows}) > 1
    s = SFTSettings(packing=packing, schedule=schedule(max_steps=1, batch_size=4), lora=LORA)
    result = trainers.train(job("sft", tiny_model, tmp_path, s), rows=sft_rows)
    assert result.global_step == 1 and result.train_loss is not None and math.isfinite(result.train_loss)
    assert result.tokens == sum(len(r["input_ids"]) for r in sft_rows)  # no padding counted, no real token missed
    assert result.tokens_per_s > 0


def test_full_fine_tuning_saves_changed_weights(tiny_model, sft_rows, tmp_path):
    s = SFTSettings(packing=False, schedule=schedule(max_steps=2), lora=LoraSettings(enabled=False))
    result = trainers.train(job("sft", tiny_model, tmp_path, s), rows=sft_rows)
    final = tmp_path / "final"
    assert result.global_step == 2 and not is_adapter(final)
    before, after = load_file(tiny_model / "model.safetensors"), load_file(final / "model.safetensors")
    assert set(before) == set(after)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2  # every layer trains, not an adapter


def test_merged_sft_checkpoint_is_a_plain_model_the_hf_policy_loads_and_generates_with(sft_lora, tiny_chat):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    from components.envs.episode import Sampling
    from components.policies.hf import HFConfig, HFPolicy
    from components.policies.protocol import GenerationRequest

    j, _ = sft_lora
    merged = merge_and_save(j.out_dir / "final", j.out_dir / "merged")
    assert (merged / "config.json").is_file() and (merged / "model.safetensors").is_file()
    assert not (merged / ADAPTER_FILE).exists() and not is_adapter(merged)
    assert (merged / "chat_template.jinja").is_file() or "chat_template" in (merged / "tokenizer_config.json").read_text()
    # the merged weights compute what base + adapter computed
    ids = torch.tensor([data.sft_examples(text_episodes(1), tiny_chat)[0].input_ids[:40]])
    with torch.no_grad():
        want = AutoPeftModelForCausalLM.from_pretrained(j.out_dir / "final").eval()(input_ids=ids).logits
        got = AutoModelForCausalLM.from_pretrained(merged).eval()(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)

    policy = HFPolicy(HFConfig(model=str(merged), max_batch=1))
    try:
        messages = text_episodes(1)[0].messages()[:2]
        gen = policy.generate([GenerationRequest(key="e#0", messages=messages, sampling=Sampling(max_new_tokens=6),
                                                 prompt_token_ids=tiny_chat.start(messages))])[0]
    finally:
        policy.close()
    assert gen.token_ids and len(gen.token_ids) <= 6 and len(gen.logprobs) == len(gen.token_ids)


# ---------------------------------------------------------------------- DPO
@pytest.fixture(scope="module")
def pairs(episodes, tiny_chat):
    rows = to_records(data.across_episode_pairs(episodes, tiny_chat, per_task=1))
    assert rows and all(0 in r["chosen_mask"] for r in rows)  # continuations hold observations: masked out
    return rows


def test_the_masked_preference_collator_trains_only_the_pairs_own_model_tokens(tiny_tokenizer, pairs):
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    collator = trainers._masked_preference_collator()(pad_token_id=tiny_tokenizer.pad_token_id, max_length=1024)
    examples = pairs[:2]
    batch = collator(examples)
    plain = DataCollatorForPreference(pad_token_id=tiny_tokenizer.pad_token_id, max_length=1024)(examples)
    n, width = len(examples), batch["input_ids"].shape[1]
    assert batch["input_ids"].shape == batch["completion_mask"].shape == (2 * n, width)
    for i, e in enumerate(examples):
        for row, side in ((i, "chosen"), (n + i, "rejected")):
            seq, mask = e["prompt_ids"] + e[f"{side}_ids"], [0] * len(e["prompt_ids"]) + e[f"{side}_mask"]
            assert batch["input_ids"][row, :len(seq)].tolist() == seq
            assert batch["completion_mask"][row].tolist() == mask + [0] * (width - len(seq))
            assert batch["attention_mask"][row].tolist() == [1] * len(seq) + [0] * (width - len(seq))
    # TRL's own collator would train on the observations inside the continuation; this one does not
    differs = (plain["completion_mask"] == 1) & (batch["completion_mask"] == 0)
    assert differs.any() and not ((batch["completion_mask"] == 1) & (plain["completion_mask"] == 0)).any()


def test_dpo_with_the_masked_collator_takes_its_steps(tiny_model, pairs, tmp_path):
    s = DPOSettings(schedule=schedule(max_steps=2, batch_size=2), lora=LORA)
    j = job("dpo", tiny_model, tmp_path, s)
    trainer = trainers.build_trainer(j, pairs, [])
    assert type(trainer.data_collator).__name__ == "MaskedPreferenceCollator"
    del trainer
    result = trainers.train(j, rows=pairs)
    assert result.global_step == 2 and result.train_loss is not None and math.isfinite(result.train_loss)
    assert len(losses(result)) == 2 and is_adapter(tmp_path / "final")


# ---------------------------------------------------------------------- verifiers
@pytest.fixture(scope="module")
def verifier_rows(episodes, tiny_chat):
    return to_records(data.verifier_examples(episodes, tiny_chat, max_tokens=4096))


def test_generative_verifier_trains_on_the_answer_and_its_merged_model_scores(tiny_model, tiny_tokenizer, tiny_chat,
                                                                               verifier_rows, episodes, tmp_path):
    rows = verifier.trainer_rows(verifier_rows, tiny_tokenizer, "generative")
    question = verifier.question_ids(tiny_chat)
    for src, row in zip(verifier_rows, rows, strict=True):
        n = len(src["input_ids"]) + len(question)
        assert row["input_ids"][:n] == src["input_ids"] + question
        assert row["loss_mask"] == [0] * n + [1] * (len(row["input_ids"]) - n)
        trained = tiny_tokenizer.decode([t for t, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m])
        assert trained == ("YES" if src["label"] == 1 else "NO") + tiny_tokenizer.eos_token

    s = VerifierSettings(kind="generative", episodes=["x"], schedule=schedule(max_steps=2), lora=LORA)
    result = trainers.train(job("verifier", tiny_model, tmp_path, s), rows=verifier_rows)
    assert result.global_step == 2 and result.train_loss is not None and math.isfinite(result.train_loss)
    merged = merge_and_save(tmp_path / "final", tmp_path / "merged")
    assert not is_adapter(merged)
    scores = verifier.VerifierScorer(merged, kind="generative").score(episodes)
    assert set(scores) == {e.episode_id for e in episodes}
    assert all(0.0 <= v <= 1.0 for v in scores.values())


def test_reward_verifier_pairs_correct_with_incorrect_trains_and_its_merged_model_scores(
        tiny_model, tiny_tokenizer, verifier_rows, episodes, tmp_path):
    rows = verifier.trainer_rows(verifier_rows, tiny_tokenizer, "reward")
    label = {tuple(r["input_ids"]): (r["label"], r["task_id"]) for r in verifier_rows}
    assert len(rows) == sum(r["label"] for r in verifier_rows)
    for pair in rows:
        (good, good_task), (bad, bad_task) = label[tuple(pair["chosen_ids"])], label[tuple(pair["rejected_ids"])]
        assert (good, bad) == (1, 0) and good_task == bad_task  # every task here has one of each

    s = VerifierSettings(kind="reward", episodes=["x"], schedule=schedule(max_steps=2), lora=LORA)
    result = trainers.train(job("verifier", tiny_model, tmp_path, s), rows=verifier_rows)
    assert result.global_step == 2 and result.train_loss is not None and math.isfinite(result.train_loss)
    adapter = tmp_path / "final"
    assert json.loads((adapter / ADAPTER_FILE).read_text())["task_type"] == "SEQ_CLS"
    merged = merge_and_save(adapter, tmp_path / "merged")
    head = [v for k, v in load_file(adapter / "adapter_model.safetensors").items() if k.endswith("score.weight")]
    assert len(head) == 1  # the trained head is saved with the adapter, and is the merged model's head
    torch.testing.assert_close(load_file(merged / "model.safetensors")["score.weight"], head[0])
    scorer = verifier.VerifierScorer(merged, kind="reward")
    scores = scorer.score(episodes)
    assert set(scores) == {e.episode_id for e in episodes}
    assert all(0.0 <= v <= 1.0 for v in scores.values())


# ---------------------------------------------------------------------- LoRA on the last layers
def test_lora_on_the_last_layers_adapts_and_trains_only_those(tiny_model, sft_rows, tmp_path):
    """`lora.last_layers`: adapters in the model's last N decoder layers only, so the layers below take no
    gradient; more layers than the model has is refused with both counts named."""
    from components.training.models import decoder_linear_names, lora_config

    names, depth = decoder_linear_names(tiny_model)
    assert depth == 2 and {"q_proj", "down_proj"} <= set(names)
    lora = LoraSettings(r=4, alpha=8, dropout=0.0, last_layers=1)
    j = job("sft", tiny_model, tmp_path, SFTSettings(packing=True, schedule=schedule(max_steps=1), lora=lora))
    trainer = trainers.build_trainer(j, sft_rows, [])
    trained = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trained and all(".layers.1." in n and "lora_" in n for n in trained)
    assert {n.split(".layers.1.")[1].split(".lora_")[0].split(".")[-1] for n in trained} == set(names)
    with pytest.raises(ValueError, match="last_layers is 3, and .* has 2 decoder layers"):
        lora_config(LoraSettings(last_layers=3), model=tiny_model)


# ---------------------------------------------------------------------- the frozen base's dtype
def _dtypes(trainer) -> tuple[set, set]:
    params = list(trainer.model.named_parameters())
    return {p.dtype for _, p in params if not p.requires_grad}, {p.dtype for _, p in params if p.requires_grad}


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_a_bf16_lora_run_holds_its_frozen_base_in_bf16_and_trains_float32_adapters(tiny_model, sft_rows, pairs,
                                                                                    tmp_path, method, monkeypatch):
    """`lora.frozen_dtype: auto`: with bf16 compute the frozen weights load in bf16 and the adapters stay float32,
    each adapter taking its input as autocast gives it; the first step's loss is float32-frozen's within bf16's
    rounding. float32, fp32 compute, or DeepSpeed (which shards the weights) keep the base as saved."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    from components.training.models import bf16_supported, frozen_base_kwargs

    if not bf16_supported():
        pytest.skip("this machine computes no bf16: the frozen base stays float32 here")
    settings_cls, rows = (SFTSettings, sft_rows) if method == "sft" else (DPOSettings, pairs)
    first = {}
    for frozen in ("auto", "float32"):
        s = settings_cls(schedule=schedule(max_steps=1, batch_size=2, precision="bf16"),
                         lora=LORA.model_copy(update={"frozen_dtype": frozen}))
        j = job(method, tiny_model, tmp_path / frozen, s)
        trainer = trainers.build_trainer(j, rows, [])
        frozen_dtypes, trained_dtypes = _dtypes(trainer)
        assert frozen_dtypes == {torch.bfloat16 if frozen == "auto" else torch.float32}
        assert trained_dtypes == {torch.float32}
        casts = {m.cast_input_dtype_enabled for m in trainer.model.modules() if isinstance(m, BaseTunerLayer)}
        assert casts == ({False} if frozen == "auto" else {True})
        del trainer
        result = trainers.train(j, rows=rows)
        assert result.global_step == 1 and math.isfinite(result.train_loss)
        first[frozen] = losses(result)[0]
    assert first["auto"] == pytest.approx(first["float32"], rel=0.02, abs=0.01)

    lora = LORA.model_copy(update={"frozen_dtype": "auto"})
    assert frozen_base_kwargs(lora, "bf16") == {"dtype": "bfloat16"}
    assert frozen_base_kwargs(lora, "fp32") == {} and frozen_base_kwargs(LORA.model_copy(update={"enabled": False}),
                                                                         "bf16") == {}
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert frozen_base_kwargs(lora, "bf16") == {}
