from __future__ import annotations

from components.diag.env import DiagEnv, DiagEnvConfig
from components.diag.world import StatisticalWorldModel
from components.envs.episode import Outcome
from components.policies.tokens import episode_token_ids
from components.rl.oracle import oracle_episode, oracle_episodes, oracle_replies
from tests.rl.conftest import spans


def test_every_oracle_episode_is_correct_in_the_fewest_turns(rl_train, rl_world, chat):
    episodes = oracle_episodes(rl_train, rl_world, chat)
    assert len(episodes) == len(rl_train) > 20
    assert all(ep.outcome == Outcome.CORRECT and ep.diag.correct for ep in episodes)
    for ep, case in zip(episodes, rl_train, strict=True):
        assert ep.diag.exams.recall == 1.0  # every key exam ordered
        assert len(ep.turns) == len(oracle_replies(case, DiagEnvConfig()))
        assert ep.reward > 1.0
        assert not any(t.parse_error or t.error for t in ep.turns)


def test_more_oracle_episodes_of_a_case_see_other_draws_of_the_world(rl_train, chat):
    world = StatisticalWorldModel.fit(rl_train, seed=0)
    cases = rl_train[:4]
    episodes = oracle_episodes(cases, world, chat, samples=3)
    assert [e.episode_id for e in episodes] == [f"{c.case_id}#{i}" for c in cases for i in range(3)]
    assert all(e.outcome == Outcome.CORRECT for e in episodes)
    for k in range(len(cases)):
        same_case = episodes[3 * k:3 * k + 3]
        assert len({tuple(t.raw_text for t in e.turns) for e in same_case}) == 1  # the same orders and diagnosis
        assert len({tuple(t.observation for t in e.turns) for e in same_case}) == 3  # other results


def test_loss_mask_covers_exactly_the_agent_turns(rl_train, rl_world, chat):
    tok = chat.tokenizer
    for ep in oracle_episodes(rl_train[:5], rl_world, chat):
        tk = episode_token_ids(ep, chat)
        assert tk.exact  # the recorded ids, not rebuilt from text
        agent = spans(tk.loss_mask, 1)
        assert [tok.decode(tk.input_ids[a:b]) for a, b in agent] == [t.raw_text + tok.eos_token for t in ep.turns]
        context = spans(tk.loss_mask, 0)
        # before the first reply: system prompt and presentation; between replies: each observation, templated
        assert tok.decode(tk.input_ids[slice(*context[0])]).count(ep.first_observation) == 1
        for (a, b), turn in zip(context[1:], ep.turns, strict=False):
            assert tk.input_ids[a:b] == chat.observation(turn.observation)
        assert len(context) == len(ep.turns)  # nothing after the final diagnosis


def test_recorded_ids_equal_the_text_build(rl_train, rl_world, chat):
    """The ids attached to the turns are exactly what episode_token_ids builds from the text alone."""
    for ep in oracle_episodes(rl_train[:5], rl_world, chat):
        text_only = ep.model_copy(deep=True)
        for t in text_only.turns:
            t.prompt_token_ids = t.response_token_ids = t.loss_mask = None
        a, b = episode_token_ids(ep, chat), episode_token_ids(text_only, chat)
        assert (a.input_ids, a.loss_mask, a.exact, b.exact) == (b.input_ids, b.loss_mask, True, False)


def test_a_short_turn_limit_still_ends_with_the_diagnosis(rl_train, rl_world, chat):
    cfg = DiagEnvConfig(max_turns=2, max_exams_per_turn=1)
    case = max(rl_train, key=lambda c: len(c.key_exams))
    replies = oracle_replies(case, cfg)
    assert len(replies) == 2 and replies[-1].startswith("Final diagnosis:")
    env = DiagEnv(rl_world, cfg)
    assert oracle_episode(env, case, chat).outcome == Outcome.CORRECT
