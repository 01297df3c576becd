from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from components.policies.tokens import ChatTokens
from components.rl.grpo import GRPOSettings, load_grpo_episodes, train_grpo
from components.training.config import LoraSettings
from components.training.models import load_tokenizer


def varied(completion_ids: list[list[int]], **_: object) -> list[float]:
    """A stand-in shaping reward that differs between samples: a random tiny model never writes an action, so
    the environment's reward alone is the same across a group (no advantage, nothing to learn)."""
    return [(sum(ids) % 97) / 97 for ids in completion_ids]


def test_grpo_trains_lora_on_agent_tokens_only(rl_train, rl_world, tiny_model, tmp_path, monkeypatch):
    from trl import GRPOTrainer

    seen: list[dict] = []
    lora_before: dict[str, torch.Tensor] = {}
    original = GRPOTrainer._generate_and_score_completions

    def capture(self, inputs):  # noqa: ANN001
        if not seen:  # generation comes before the first optimizer step: the adapter as initialized
            lora_before.update({n: p.detach().clone() for n, p in self.model.named_parameters() if "lora_B" in n})
        out = original(self, inputs)
        # the trainer's loss, with the sampling-time log-probs moved far away on the environment's tokens only: it
        # must not change (they carry no loss); with those tokens unmasked it must
        env = ((1 - out["tool_mask"]) * out["completion_mask"]).float()
        old = torch.zeros_like(env)
        ones = torch.ones_like(out["tool_mask"])

        def loss(**over):  # noqa: ANN003
            with torch.no_grad():
                return float(self._compute_loss(self.model, {**out, **over}))

        # the rollout's sampling log-probs are the trainer's own log-probs of the agent tokens (LoRA, temperature)
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, attention,
                                                                  out["completion_ids"].size(1))
        agent = (out["tool_mask"] * out["completion_mask"]).bool()
        gap = float((logps - out["sampling_per_token_logps"])[agent].abs().max())
        seen.append({"out": out, "inputs": inputs, "logp_gap": gap,
                     "masked": (loss(old_per_token_logps=old), loss(old_per_token_logps=old - 20 * env)),
                     "unmasked": (loss(old_per_token_logps=old, tool_mask=ones),
                                  loss(old_per_token_logps=old - 20 * env, tool_mask=ones))})
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", capture)
    settings = GRPOSettings(num_generations=2, prompts_per_step=1, max_turns=2, max_new_tokens=8, steps=3,
                            learning_rate=1e-2, lora=LoraSettings(r=4, alpha=8, dropout=0.0), save_steps=1000)
    run = train_grpo(rl_train[:4], rl_world, str(tiny_model), tmp_path / "grpo", settings, extra_rewards=[varied])
    assert run.global_step == 3 and len(seen) == 3

    chat = ChatTokens(load_tokenizer(str(tiny_model)))
    episodes = load_grpo_episodes(run.out_dir)
    assert run.episodes == len(episodes) == 6
    assert len({e.episode_id for e in episodes}) == 6 and all(e.policy.backend == "grpo" for e in episodes)
    by_id = {e.episode_id: e for e in episodes}
    for step, record in enumerate(seen):
        out, rewards = record["out"], []
        assert record["logp_gap"] < 5e-3  # fp32 sums in another order (TRL scores in tiles)
        assert record["masked"][0] == pytest.approx(record["masked"][1], rel=1e-6)
        assert record["unmasked"][0] != pytest.approx(record["unmasked"][1], rel=1e-3)
        for row, inp in enumerate(record["inputs"]):
            ep = by_id[inp["episode_id"]]
            assert (ep.task_id, ep.reward, ep.metadata["grpo"]["step"]) == (inp["prompt"], inp["episode_reward"], step)
            ids = out["completion_ids"][row][out["completion_mask"][row].bool()].tolist()
            tool = out["tool_mask"][row][out["completion_mask"][row].bool()].tolist()
            agent = [i for i, t in zip(ids, tool, strict=True) if t == 1]
            assert agent == [i for t in ep.turns for i in t.response_token_ids]  # loss only on what was sampled
            assert len(ids) - sum(tool) == sum(len(chat.close_response(t.response_token_ids))
                                               + len(chat.observation(t.observation)) for t in ep.turns[:-1])
            rewards.append(ep.reward + varied([ids])[0])
        # advantages in reward units (scale_rewards "none"): each sample's reward minus its group's mean, however
        # small the group's spread; TRL's default would divide by that spread (to +-0.71 for a group of two)
        group_mean = [sum(rewards[i - i % 2:i - i % 2 + 2]) / 2 for i in range(len(rewards))]
        assert out["advantages"].tolist() == pytest.approx([r - m for r, m in zip(rewards, group_mean, strict=True)],
                                                           abs=1e-5)
    # LoRA B matrices start at zero: after three steps they are not, and the merge changed the base weights
    assert lora_before and all(not p.any() for p in lora_before.values())
    adapter = load_file(str(run.out_dir / "final" / "adapter_model.safetensors"))
    assert sum("lora_B" in k for k in adapter) == len(lora_before)
    assert any(v.any() for k, v in adapter.items() if "lora_B" in k)
    base = load_file(str(tiny_model / "model.safetensors"))
    merged = load_file(str(run.model_dir / "model.safetensors"))
    assert any(not torch.equal(base[k], merged[k]) for k in base if "proj" in k)
    assert json.loads((run.model_dir / "medgym_provenance.json").read_text())["adapter"].endswith("final")
    logged = [h for h in run.log_history if "reward" in h]
    assert logged and all("rewards/episode_reward/mean" in h for h in logged)
