"""Evaluating diagnostic agents: the baselines (random exams; the greedy most-informative-exam oracle) end to end on
held-out cases with bootstrap intervals and paired differences, what an agent is shown, single-turn evaluation on
recorded prefixes, the Policy adapter, the report, and the `medgym diag eval` command."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from components.diag.baselines import (
    DiseaseModel,
    GreedyOracleAgent,
    RandomExamsAgent,
    exam_results,
    make_baselines,
    most_common_diagnosis,
)
from components.diag.env import DIAG_SYSTEM_PROMPT, DiagEnv
from components.diag.evaluate import (
    METRICS,
    DiagReport,
    DiagView,
    PolicyAgent,
    agent_episodes_dir,
    compare,
    evaluate_agents,
    oracle_prefix,
    run_agent,
    single_turn,
    summarize_agent,
    write_evaluation,
)
from components.diag.metrics import summarize_episodes
from components.diag.world import RecordedWorldModel
from components.policies.protocol import Generation
from components.rollout.store import load_episodes_dir, shard_paths

HELD_OUT = 50  # test cases played end to end: enough for the intervals to separate, a few seconds each agent


@pytest.fixture(scope="module")
def agents(train, world):
    return RandomExamsAgent.fit(train, seed=0), GreedyOracleAgent.fit(train, world, seed=0)


@pytest.fixture(scope="module")
def played(agents, test_cases, world):
    random_agent, greedy = agents
    cases = test_cases[:HELD_OUT]
    return {"random": run_agent(random_agent, cases, world), "greedy": run_agent(greedy, cases, world)}


class Spy:
    """Wraps an agent and keeps every view it was given."""

    def __init__(self, agent):
        self.agent, self.name, self.views = agent, agent.name, []

    def act(self, view):
        self.views.append(view)
        return self.agent.act(view)


class Replay:
    """Orders each recorded exam in turn, then names the true diagnosis: it knows the cases (found by their
    presentation), which no real agent does. Single-turn evaluation should score it perfect."""

    def __init__(self, cases, catalogue):
        self.name = "replay"
        self.by_profile = {c.profile.strip(): c for c in cases}
        self.catalogue = catalogue

    def act(self, view):
        case = next(c for p, c in self.by_profile.items() if view.observations[0].startswith(p))
        exams = [e.exam for e in case.events if e.exam in self.catalogue.exams]
        if len(view.replies) < len(exams):
            return json.dumps({"type": "order_exams", "exams": [exams[len(view.replies)]]})
        return f"Final diagnosis: {case.diagnosis}"


# ------------------------------------------------------------------------------------------------ end to end


def test_the_greedy_oracle_beats_random_exams_beyond_the_intervals(played):
    rnd, greedy = (summarize_agent(n, played[n]) for n in ("random", "greedy"))
    for metric in ("accuracy", "f1_mean", "f1_of_means"):
        assert greedy.metrics[metric].low > rnd.metrics[metric].high, metric
    diff = compare("greedy", played["greedy"], "random", played["random"])
    assert diff.cases == HELD_OUT
    for metric in ("accuracy", "f1_mean", "f1_of_means", "precision"):
        assert diff.differences[metric].low > 0, metric
    assert greedy.metrics["accuracy"].value >= 0.6 and rnd.metrics["accuracy"].value <= 0.15
    assert greedy.outcomes.get("correct", 0) + greedy.outcomes.get("wrong_answer", 0) == HELD_OUT  # always answers


def test_summaries_are_the_metrics_of_the_episodes_with_intervals_around_them(played):
    for name, episodes in played.items():
        s = summarize_agent(name, episodes)
        plain = summarize_episodes(episodes)
        assert s.cases == s.episodes == HELD_OUT and set(s.metrics) == set(METRICS)
        for metric, interval in s.metrics.items():
            assert interval.value == pytest.approx(getattr(plain, metric))
            assert interval.low <= interval.value <= interval.high and interval.n == HELD_OUT
        assert s.metrics["accuracy"].high > s.metrics["accuracy"].low or s.metrics["accuracy"].value in (0, 1)
    diff = compare("greedy", played["greedy"], "random", played["random"])
    for metric, interval in diff.differences.items():
        assert interval.low <= interval.value <= interval.high, metric
        a, b = summarize_episodes(played["greedy"]), summarize_episodes(played["random"])
        assert interval.value == pytest.approx(getattr(a, metric) - getattr(b, metric))


def test_an_agent_compared_with_itself_differs_by_exactly_zero(played):
    diff = compare("greedy", played["greedy"], "greedy", played["greedy"])
    assert set(diff.differences) == set(METRICS)
    for interval in diff.differences.values():
        assert (interval.value, interval.low, interval.high) == (0.0, 0.0, 0.0)


def test_compare_pairs_only_the_same_cases_and_samples(played, agents, test_cases, world):
    twice = run_agent(agents[0], test_cases[:3], world, samples=2)
    with pytest.raises(ValueError, match="no case played by both"):
        compare("random", twice, "random", played["random"])  # samples {0, 1} against {0}: other draws
    assert compare("random", twice, "random", twice).cases == 3
    assert compare("greedy", played["greedy"], "random", played["random"][:10]).cases == 10


def test_runs_are_reproducible_and_seeded(agents, test_cases, world, train):
    cases = test_cases[:4]
    first = [t.raw_text for e in run_agent(agents[0], cases, world) for t in e.turns]
    again = [t.raw_text for e in run_agent(agents[0], cases, world) for t in e.turns]
    other = [t.raw_text for e in run_agent(RandomExamsAgent.fit(train, seed=1), cases, world) for t in e.turns]
    assert first == again and first != other
    timing = {"duration_s", "env_time_s", "model_time_s", "turns"}
    greedy = [e.model_dump(exclude=timing) for e in run_agent(agents[1], cases, world)]
    assert greedy == [e.model_dump(exclude=timing) for e in run_agent(agents[1], cases, world)]


# ------------------------------------------------------------------------------------------------ what agents see


def test_agents_are_shown_only_the_observations_and_their_own_replies(agents, test_cases, world):
    for agent in agents:
        spy = Spy(agent)
        for case in test_cases[:5]:
            before = len(spy.views)
            [ep] = run_agent(spy, [case], world)
            views = spy.views[before:]
            shown = [ep.first_observation] + [t.observation for t in ep.turns]
            assert len(views) == len(ep.turns)
            for k, view in enumerate(views):
                assert type(view) is DiagView and view.key == ep.episode_id
                assert all(type(x) is str for x in (*view.observations, *view.replies))
                assert list(view.observations) == shown[:k + 1]
                assert list(view.replies) == [t.raw_text for t in ep.turns[:k]]
                assert ep.check is None or all(ep.check.grader_reason not in o for o in view.observations)


def test_the_truth_changes_nothing_an_agent_does(agents, test_cases):
    """On a world that reads only recorded results, a case relabelled with another diagnosis and other key exams
    shows the agent the same observations, so it must play the same replies: it cannot be reading the truth."""
    world = RecordedWorldModel()
    for case in test_cases[:6]:
        liar = case.model_copy(update={"diagnosis": "Sarcoidosis", "icd10": None, "key_exams": ["Lipase"]})
        for agent in agents:
            [real], [fake] = run_agent(agent, [case], world), run_agent(agent, [liar], world)
            assert [t.raw_text for t in real.turns] == [t.raw_text for t in fake.turns]


def test_the_baselines_are_fit_on_the_train_split_only(train, test_cases, world):
    with pytest.raises(ValueError, match="train split only"):
        DiseaseModel.fit(test_cases, world)
    with pytest.raises(ValueError, match="train split only"):
        RandomExamsAgent.fit(train + test_cases[:1])
    with pytest.raises(ValueError, match="unknown baseline"):
        make_baselines(["greedy", "oracle"], train, world)
    assert [a.name for a in make_baselines(["greedy", "random"], train, world)] == ["greedy", "random"]
    counts = {}
    for c in train:
        counts[c.diagnosis] = counts.get(c.diagnosis, 0) + 1
    assert counts[most_common_diagnosis(train)] == max(counts.values())


def test_the_greedy_oracle_orders_the_most_informative_exam_and_diagnoses_on_the_last_turn(agents, test_cases,
                                                                                           world):
    greedy = agents[1]
    env = DiagEnv(world)
    obs = env.reset(test_cases[0]).text
    view = DiagView(key="x#0", observations=(obs,), replies=())
    evidence = greedy.evidence([obs])
    post = np.exp(evidence.logpost - evidence.logpost.max())
    gains = greedy.gains(post / post.sum(), evidence)
    reply = json.loads(greedy.act(view))
    assert reply == {"type": "order_exams", "exams": [max(gains, key=gains.get)]}
    assert set(gains) >= {"Complete blood count", "Chest X-ray", "Lipase"} and gains[reply["exams"][0]] > 0.2
    step = env.step(greedy.act(view))
    assert exam_results(step.observation.text)[0][0] == reply["exams"][0]
    after = greedy.evidence([obs, step.observation.text])
    assert after.ordered == {reply["exams"][0]} and after.known
    assert reply["exams"][0] not in greedy.gains(post / post.sum(), after)  # never ordered twice
    last = DiagView(key="x#0", observations=(obs.replace("You have 12 turns", "You have 1 turns"),), replies=())
    assert json.loads(greedy.act(last))["type"] == "diagnose"


# ------------------------------------------------------------------------------------------------ single turn


def test_the_oracle_prefix_is_what_the_environment_shows_for_the_recorded_exams(test_cases, world):
    case = test_cases[0]
    prefix = oracle_prefix(case, world.catalogue)
    recorded = [e for e in case.events if e.exam in world.catalogue.exams]
    assert prefix.exams == tuple(e.exam for e in recorded) and len(prefix.observations) == len(recorded) + 1
    assert prefix.observations[0].startswith(case.profile.strip())
    for obs, event in zip(prefix.observations[1:], recorded, strict=True):
        assert exam_results(obs)[0][0] == event.exam
    assert "give your final diagnosis" in prefix.observations[-1]
    assert [json.loads(r)["exams"] for r in prefix.replies] == [[e.exam] for e in recorded]


def test_single_turn_hit_ratio_is_one_for_the_recorded_next_exam_and_low_for_random(agents, test_cases, world):
    cases = test_cases[:20]
    replay = single_turn(Replay(cases, world.catalogue), cases, world.catalogue)
    assert replay.next_exam_hit.value == 1.0 and replay.diagnosis_accuracy.value == 1.0
    assert replay.steps == sum(len([e for e in c.events if e.exam]) for c in cases)
    rnd = single_turn(agents[0], cases, world.catalogue)
    assert rnd.steps == replay.steps and rnd.next_exam_hit.value < 0.15
    assert rnd.next_exam_hit.low <= rnd.next_exam_hit.value <= rnd.next_exam_hit.high
    assert rnd.diagnosis_accuracy.value < 0.3
    greedy = single_turn(agents[1], cases[:8], world.catalogue)
    assert greedy.diagnosis_accuracy.value >= 0.5  # the whole record: the greedy agent names the disease


# ------------------------------------------------------------------------------------------------ a model policy


class EchoPolicy:
    """A text policy that orders a CBC, then diagnoses; it keeps the requests it got."""

    backend, model_id, uses_tokens, max_context = "fake", "org/fake-model", False, None

    def __init__(self):
        self.requests = []

    def generate(self, requests):
        self.requests += requests
        return [Generation(text="Order: CBC" if len(r.messages) < 4 else "Final diagnosis: Sepsis") for r in requests]

    def close(self):
        pass


def test_a_policy_plays_through_the_engine_with_the_episode_as_chat(test_cases, world):
    policy = EchoPolicy()
    [ep] = run_agent(policy, test_cases[:1], world)  # a platform Policy plays as itself
    assert len(ep.turns) == 2 and ep.submitted_answer == "Sepsis" and ep.policy.model == "org/fake-model"
    full = ep.messages()
    assert full[0] == {"role": "system", "content": DIAG_SYSTEM_PROMPT}
    for k, request in enumerate(policy.requests):
        assert request.key == ep.episode_id and request.messages == full[:2 + 2 * k]
        assert request.task == test_cases[0]  # the case travels with the request: only a scripted policy reads it
    # the same policy as a DiagAgent (single turn's adapter), played as an agent: the same episode, memory released
    agent = PolicyAgent(EchoPolicy())
    [again] = run_agent(agent, test_cases[:1], world)
    assert agent.name == "org/fake-model" and again.policy.backend == "agent" and agent._memory == {}
    assert [t.raw_text for t in again.turns] == [t.raw_text for t in ep.turns] and again.reward == ep.reward

    class TokenPolicy(EchoPolicy):
        uses_tokens = True

    with pytest.raises(ValueError, match="ChatTokens"):
        PolicyAgent(TokenPolicy())


# ------------------------------------------------------------------------------------------------ the report


def test_the_report_is_written_atomically_and_reads_back(agents, test_cases, world, tmp_path):
    report, episodes = evaluate_agents(list(agents), test_cases[:6], world, single_turn_cases=2, n_boot=200,
                                       cases_file="cases.jsonl")
    assert [a.agent for a in report.agents] == ["random", "greedy"] and report.cases == 6
    assert [(c.a, c.b) for c in report.comparisons] == [("greedy", "random")]
    assert [s.agent for s in report.single_turn] == ["random", "greedy"] and report.single_turn[0].cases == 2
    paths = write_evaluation(report, episodes, tmp_path / "eval")
    assert DiagReport.model_validate_json(paths[0].read_text()) == report
    md = paths[1].read_text()
    assert "| greedy | " in md and "| greedy - random | 6 |" in md and "next-exam hit ratio" in md
    stored = load_episodes_dir(agent_episodes_dir(tmp_path / "eval", "greedy"), strict=True)  # validated shards
    assert [e.model_copy(update={"checksum": None}) for e in stored] == episodes["greedy"]
    assert not list((tmp_path / "eval").glob(".*.tmp"))
    metrics = report.metrics()
    assert metrics["greedy.accuracy"] == report.agents[1].metrics["accuracy"].value
    assert "greedy-random.f1_mean" in metrics and "random.next_exam_hit" in metrics
    with pytest.raises(ValueError, match="distinct names"):
        evaluate_agents([agents[0], agents[0]], test_cases[:2], world)


class CountingAgent:
    """The greedy baseline, counting the episodes it starts."""

    def __init__(self, inner):
        self.inner, self.name, self.started = inner, inner.name, 0

    def act(self, view):
        self.started += len(view.replies) == 0
        return self.inner.act(view)


def test_an_evaluation_lands_in_validated_shards_and_resumes(agents, test_cases, world, tmp_path):
    cases, store = test_cases[:5], tmp_path / "eval"
    fresh = run_agent(agents[1], cases, world, samples=2)  # in memory, for reference
    first = CountingAgent(agents[1])
    run_agent(first, cases[:3], world, samples=2, out_dir=store)  # a run that stopped after three cases
    assert first.started == 6 and len(shard_paths(store)) == 1
    again = CountingAgent(agents[1])
    resumed = run_agent(again, cases, world, samples=2, out_dir=store)
    assert again.started == 4  # only what the folder did not hold
    timing = {"duration_s", "env_time_s", "model_time_s", "turns", "checksum"}
    # in (case, sample) order, the same episodes one uninterrupted run plays
    assert [e.model_dump(exclude=timing) for e in resumed] == [e.model_dump(exclude=timing) for e in fresh]
    assert [[t.raw_text for t in e.turns] for e in resumed] == [[t.raw_text for t in e.turns] for e in fresh]
    # the folder holds each once, in the order they finished
    assert sorted(e.episode_id for e in load_episodes_dir(store, strict=True)) == sorted(e.episode_id for e in resumed)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_eval_stage_writes_and_tracks(tmp_path):
    from mlflow.tracking import MlflowClient

    from components.diag.cohort import CohortConfig, write_cohort
    from components.profile.config import PipelineConfig
    from flows.diag import eval_stage

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = PipelineConfig.model_validate({"profile": "diag-test", "tracking": {
        "mlflow_uri": uri, "artifact_location": str(tmp_path / "artifacts"), "experiment": "diag-test"}})
    write_cohort(tmp_path / "cohort", CohortConfig(patients=150, seed=5))
    out = eval_stage(cfg, tmp_path / "cohort" / "cases.jsonl", tmp_path / "eval", limit=8, single_turn_cases=2,
                     world="recorded")
    assert out["cases"] == 8 and (tmp_path / "eval" / "report.md").is_file()
    shards = tmp_path / "eval" / "episodes" / "random"  # each agent's episodes in a store of its own
    assert (shards / "manifest.json").is_file() and list((shards / "episodes").glob("shard-*.jsonl"))
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("diag-test").experiment_id])
    assert run.data.tags["medgym.stage"] == "diag.eval" and run.data.params["world"] == "recorded"
    assert run.data.metrics["greedy.accuracy"] == out["metrics"]["greedy.accuracy"]
    with pytest.raises(ValueError, match="held-out"):
        eval_stage(cfg, tmp_path / "cohort" / "cases.jsonl", tmp_path / "x", split="train")


def test_the_eval_command_passes_its_options_to_the_flow(monkeypatch, tmp_path):
    import flows.diag
    import flows.runtime
    from flows.cli_diag import app

    calls = []
    (tmp_path / "report.md").write_text("# the report\n")
    monkeypatch.setattr(flows.runtime, "prefect_api", contextlib.nullcontext)
    monkeypatch.setattr(flows.diag, "eval_flow",
                        lambda **kw: calls.append(kw) or {"report": str(tmp_path / "report.md")})
    res = CliRunner().invoke(app, ["eval", "--cases", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "o"),
                                   "--agents", "greedy, random", "--world", "recorded", "--limit", "10"])
    assert res.exit_code == 0, res.output
    assert calls == [{"cases": tmp_path / "c.jsonl", "out_dir": tmp_path / "o", "agents": ["greedy", "random"],
                      "split": "test", "world": "recorded", "limit": 10, "samples": 1, "single_turn_cases": 50,
                      "seed": 0, "profile": "demo"}]
    assert "# the report" in res.output
