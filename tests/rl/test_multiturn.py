from __future__ import annotations

import pytest

from components.diag.env import DiagEnv, DiagEnvConfig
from components.envs.episode import Outcome
from components.policies.hf import HFConfig, HFPolicy
from components.policies.protocol import Generation
from components.rl.multiturn import TurnSampling, play_samples
from components.rl.oracle import oracle_episode, oracle_replies
from tests.rl.conftest import check_masks


class ScriptedTokens:
    """A token policy replying the oracle's actions (it reads the case off the request, as a scripted policy may); a
    case in `stumble` first sends a reply with no action in it."""

    backend, model_id, uses_tokens, max_context = "scripted", "oracle-tokens", True, 4096

    def __init__(self, chat, stumble: set[str]):
        self.chat, self.tokenizer, self.stumble = chat, chat.tokenizer, stumble

    def generate(self, requests):
        out = []
        for r in requests:
            done = sum(m["role"] == "assistant" for m in r.messages)
            plan = (["I would like to think about this."] if r.task.case_id in self.stumble else []) + oracle_replies(
                r.task, DiagEnvConfig())
            ids = self.chat.response(plan[done]) + [self.chat.eos_id]
            out.append(Generation(text=self.tokenizer.decode(ids, skip_special_tokens=True), token_ids=ids,
                                  logprobs=[-1.0] * len(ids)))
        return out

    def close(self):
        pass


def test_scripted_batch_masks_and_rewards(rl_train, rl_world, chat):
    cases = [rl_train[0], rl_train[0], rl_train[1], rl_train[1]]
    samples = play_samples(ScriptedTokens(chat, {rl_train[1].case_id}), rl_world, cases, [0, 1, 0, 1], chat,
                           TurnSampling())
    for s in samples:
        check_masks(s, chat)
        assert s.episode.outcome == Outcome.CORRECT
    assert [s.episode.episode_id for s in samples] == [f"{c.case_id}#{i}" for c, i in zip(cases, [0, 1, 0, 1], strict=True)]
    clean, stumbled = samples[3].episode, samples[2].episode
    oracle = oracle_episode(DiagEnv(rl_world), rl_train[1], chat, 1)
    assert stumbled.turns[0].parse_error and len(stumbled.turns) == len(oracle.turns) + 1
    assert stumbled.reward == pytest.approx(oracle.reward - DiagEnvConfig().reward.w_turn)  # one turn more
    assert clean.reward == pytest.approx(stumbled.reward)


def scored_logprobs(model, sample, temperature: float = 1.0):
    """The log-probs a trainer gives the sample's agent tokens: one forward over the whole sequence."""
    import torch

    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float() / temperature, dim=-1)
    scored = logp.gather(1, ids[0, 1:, None])[:, 0][len(sample.prompt_ids) - 1:]
    return scored[torch.tensor(sample.env_mask, dtype=torch.bool)]


def test_model_sampled_batch_masks_logprobs_cache_reuse_and_context_limit(rl_train, rl_world, chat, tiny_model):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model)).eval()  # as a trainer holds it: not the policy's
    fed: list[int] = []
    model.register_forward_pre_hook(lambda _, args, kwargs: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True)

    def policy(max_context: int = 4096) -> HFPolicy:
        return HFPolicy(HFConfig(max_context=max_context, logprobs="sampling"), model=model, tokenizer=chat.tokenizer)

    sampling = TurnSampling(max_new_tokens=6, max_context=4096)
    cfg = DiagEnvConfig(max_turns=3)
    cases = rl_train[:2] * 2
    samples = play_samples(policy(), rl_world, cases, [0, 0, 1, 1], chat, sampling, env_config=cfg)
    # a later turn computes only its new tokens: the prompts fed are far shorter than the contexts the turns saw
    prefills = [w for w in fed if w > 1]
    contexts = [len(t.prompt_token_ids) for s in samples for t in s.episode.turns]
    assert len(contexts) > len(samples) and sum(prefills) < sum(contexts) / 2
    for s in samples:
        check_masks(s, chat)
        assert s.episode.outcome in (Outcome.NO_ANSWER, Outcome.STUCK_LOOP, Outcome.WRONG_ANSWER)
        assert all(len(t.response_token_ids) <= 6 for t in s.episode.turns)
        # the sampling log-probs are the model's own, as the trainer scores them (temperature 1)
        assert torch.allclose(scored_logprobs(model, s), torch.tensor(s.logprobs)[torch.tensor(s.env_mask) == 1],
                              atol=1e-4)
    # at another temperature, the log-probs of the distribution each token was drawn from, as GRPO scores them
    [hot] = play_samples(policy(), rl_world, cases[:1], [7], chat, sampling.model_copy(update={"temperature": 0.7}),
                         env_config=cfg)
    agent = torch.tensor(hot.env_mask) == 1
    assert torch.allclose(scored_logprobs(model, hot, 0.7), torch.tensor(hot.logprobs)[agent], atol=1e-4)
    # a context that cannot hold another reply ends the episode before the call (outcome context_limit)
    tight = TurnSampling(max_new_tokens=6, max_context=len(samples[0].prompt_ids) + 10)
    [short] = play_samples(policy(tight.max_context), rl_world, cases[:1], [5], chat, tight, env_config=cfg)
    assert short.episode.outcome == Outcome.CONTEXT_LIMIT and len(short.episode.turns) == 1
    check_masks(short, chat)
