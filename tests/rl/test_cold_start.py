from __future__ import annotations

from components.envs.episode import load_episodes
from components.policies.tokens import ChatTokens
from components.rl.cold_start import ORACLE_EPISODES, cold_start, masked_nll, oracle_rows
from components.rl.oracle import oracle_episodes
from components.training.config import LoraSettings, Schedule, SFTSettings
from components.training.models import load_tokenizer


def test_cold_start_sft_lowers_the_loss_on_oracle_rows(rl_train, rl_world, tiny_model, tmp_path):
    # full weights: a random tiny model's logits move only through its (tied) embeddings, which LoRA leaves alone;
    # the LoRA merge path is exercised by the GRPO test
    cases = rl_train[:3]
    settings = SFTSettings(schedule=Schedule(learning_rate=1e-2, max_steps=3, batch_size=2, warmup_ratio=0.0,
                                             scheduler="constant", logging_steps=1, save_steps=1000),
                           lora=LoraSettings(enabled=False))
    chat = ChatTokens(load_tokenizer(str(tiny_model)))
    rows = oracle_rows(oracle_episodes(cases, rl_world, chat), chat)
    before = masked_nll(tiny_model, rows)
    out = cold_start(cases, rl_world, str(tiny_model), tmp_path / "cold", settings, episodes_per_case=2)
    assert (out.episodes, out.correct, out.result.global_step) == (6, 6, 3)
    assert (out.model_dir / "config.json").is_file() and (out.model_dir / "tokenizer_config.json").is_file()
    after = masked_nll(out.model_dir, rows)
    assert after < before - 1.0, (before, after)
    kept = load_episodes(tmp_path / "cold" / ORACLE_EPISODES)
    assert [e.episode_id for e in kept] == [f"{c.case_id}#{i}" for c in cases for i in range(2)]
