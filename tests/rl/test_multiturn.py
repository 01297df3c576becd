from __future__ import annotations

import pytest

from components.diag.env import DiagEnv, DiagEnvConfig
from components.envs.episode import Outcome
from components.policies.tokens import episode_token_ids
from components.rl.multiturn import TurnSampling, hf_sampler, play_batch
from components.rl.oracle import oracle_episode, oracle_replies
from tests.rl.conftest import spans


def check_masks(sample, chat) -> None:
    """1-spans are exactly the agent's replies; 0-spans exactly what the environment added between them."""
    ep, tok = sample.episode, chat.tokenizer
    assert len(sample.completion_ids) == len(sample.env_mask) == len(sample.logprobs)
    first = [{"role": "system", "content": ep.system_prompt}, {"role": "user", "content": ep.first_observation}]
    assert sample.prompt_ids == chat.start(first)
    agent, env = spans(sample.env_mask, 1), spans(sample.env_mask, 0)
    assert len(agent) == len(ep.turns) and len(env) == len(ep.turns) - 1
    for (a, b), turn in zip(agent, ep.turns, strict=True):
        assert sample.completion_ids[a:b] == turn.response_token_ids
        assert tok.decode(sample.completion_ids[a:b], skip_special_tokens=True) == turn.raw_text
        assert sample.logprobs[a:b] == turn.response_logprobs
    for (a, b), turn in zip(env, ep.turns, strict=False):
        closing = chat.close_response(turn.response_token_ids)
        assert sample.completion_ids[a:b] == closing + chat.observation(turn.observation)
        assert tok.decode(sample.completion_ids[a + len(closing):b]).count(turn.observation) == 1
        assert set(sample.logprobs[a:b]) == {0.0}
    for prev, turn in zip(ep.turns, ep.turns[1:], strict=False):  # the context only grows
        assert turn.prompt_token_ids[: len(prev.prompt_token_ids)] == prev.prompt_token_ids
    whole = sample.prompt_ids + sample.completion_ids
    assert ep.turns[-1].prompt_token_ids + ep.turns[-1].response_token_ids == whole
    assert episode_token_ids(ep, chat).input_ids[: len(whole)] == whole


def scripted(chat, cases, stumble: set[str]):
    """Replies the oracle's actions; a case in `stumble` first sends a reply with no action in it."""

    def sample(contexts):
        out = []
        for ctx in contexts:
            text = chat.tokenizer.decode(ctx)
            case = next(c for c in cases if c.profile.strip() in text)
            done = text.count("<|im_start|>assistant") - 1
            plan = (["I would like to think about this."] if case.case_id in stumble else []) + oracle_replies(
                case, DiagEnvConfig())
            ids = chat.response(plan[done]) + [chat.eos_id]
            out.append((ids, [-1.0] * len(ids)))
        return out

    return sample


def test_scripted_batch_masks_and_rewards(rl_train, rl_world, chat):
    cases = [rl_train[0], rl_train[0], rl_train[1], rl_train[1]]
    envs = [DiagEnv(rl_world) for _ in cases]
    samples = play_batch(envs, cases, [0, 1, 0, 1], chat, scripted(chat, cases, {rl_train[1].case_id}),
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


def test_model_sampled_batch_masks_logprobs_and_context_limit(rl_train, rl_world, chat, tiny_model):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model)).eval()
    sampling = TurnSampling(max_new_tokens=6, max_context=4096)
    cfg = DiagEnvConfig(max_turns=3)
    cases = rl_train[:2] * 2
    samples = play_batch([DiagEnv(rl_world, cfg) for _ in cases], cases, [0, 0, 1, 1], chat,
                         hf_sampler(model, sampling, chat.eos_id, chat.tokenizer.pad_token_id), sampling)
    for s in samples:
        check_masks(s, chat)
        assert s.episode.outcome in (Outcome.NO_ANSWER, Outcome.STUCK_LOOP, Outcome.WRONG_ANSWER)
        assert all(len(t.response_token_ids) <= 6 for t in s.episode.turns)
        # the sampling log-probs are the model's own, as the trainer scores them (temperature 1)
        ids = torch.tensor([s.prompt_ids + s.completion_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
        scored = logp.gather(1, ids[0, 1:, None])[:, 0][len(s.prompt_ids) - 1:]
        agent = torch.tensor(s.env_mask, dtype=torch.bool)
        assert torch.allclose(scored[agent], torch.tensor(s.logprobs)[agent], atol=1e-4)
    # a context that cannot hold another reply ends the episode before the call (outcome context_limit)
    tight = TurnSampling(max_new_tokens=6, max_context=len(samples[0].prompt_ids) + 10)
    [short] = play_batch([DiagEnv(rl_world, cfg)], cases[:1], [5], chat,
                         hf_sampler(model, tight, chat.eos_id, chat.tokenizer.pad_token_id), tight)
    assert short.episode.outcome == Outcome.CONTEXT_LIMIT and len(short.episode.turns) == 1
    check_masks(short, chat)


def test_greedy_sampling_is_for_evaluation_and_refused_for_grpo():
    from components.rl.grpo import GRPOSettings

    assert TurnSampling(temperature=0).temperature == 0  # evaluation decodes greedily (components.rl.play)
    with pytest.raises(ValueError):  # GRPO's samples must differ within a group
        GRPOSettings(temperature=0)
