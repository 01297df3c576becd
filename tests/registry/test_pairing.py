"""The registry pairs a challenger with the champion only on the same tasks under the same conditions, promotes only
on the exact paired test, and counts its looks: a real sqlite MLflow store, real task files and rollout episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.envs.coding_env import EnvConfig
from components.envs.episode import Episode, PolicyInfo, Sampling
from components.evaluation.metrics import paired_difference
from components.registry import Evaluation, RegistryConfig, decide, register, rollout_evaluation
from components.tasks.record import AnswerSpec, ContextFile, Task, save_tasks
from tests.evaluation.test_leaderboard import episode

TASKS = 12


def prompt(i: int, seed: int) -> str:
    return f"Compute the mean of column x in t{i:02d}.csv (cohort seed {seed})."


def suite(folder: Path, seed: int, csv_seed: dict[int, int] | None = None) -> Path:
    """TASKS tasks with ids t00..t11, as a suite built with `seed` writes them: the prompt names the seed, and each
    task reads its own CSV (whose bytes follow `csv_seed`, per task, where given)."""
    (folder / "files").mkdir(parents=True)
    tasks = []
    for i in range(TASKS):
        s = (csv_seed or {}).get(i, seed)
        (folder / "files" / f"t{i:02d}.csv").write_text(f"x\n{i + s}\n{2 * i + s}\n")
        tasks.append(Task(task_id=f"t{i:02d}", dataset="d", category="c", domain="biostat", split="test",
                          prompt=prompt(i, seed), answer=1.5 * i + s, answer_spec=AnswerSpec(type="numeric", rel_tol=0.01),
                          context_files=[ContextFile(path=f"files/t{i:02d}.csv", kind="csv")]))
    save_tasks(folder / "tasks.jsonl", tasks)
    return folder / "tasks.jsonl"


def played(seed: int, solved: int, *, max_turns: int = 6, temperature: float = 1.0) -> list[Episode]:
    """Two episodes per task of the suite built with `seed` (sample 0 greedy, sample 1 at `temperature`), played
    with `max_turns`: tasks below `solved` solved both times, the rest never."""
    env = EnvConfig(max_turns=max_turns).model_dump(mode="json")
    return [episode(f"t{i:02d}", s, "success" if i < solved else "wrong").model_copy(update={
        "first_observation": f"{prompt(i, seed)}\nFiles in your working directory:\n- files/t{i:02d}.csv (csv)",
        "env_config": env, "policy": PolicyInfo(backend="hf", model=f"model-{solved}",
                                                sampling=Sampling(temperature=0.0 if s == 0 else temperature))})
        for i in range(TASKS) for s in range(2)]


def test_a_suite_rebuilt_with_reused_ids_is_not_paired_and_one_whose_files_changed_is_paired_on_the_rest(model_store, tmp_path):
    tracking, uri = model_store
    cfg = RegistryConfig(name="rebuilt")
    first = suite(tmp_path / "seed0", seed=0)
    one = register(cfg, tracking, rollout_evaluation(played(0, 9), first, reference="sft"), model_uri=uri,
                   baseline=rollout_evaluation(played(0, 1), first, reference="base"))
    assert one.promoted

    # the same ids, other tasks: a better candidate by its ids, but not one task in common by content
    rebuilt = suite(tmp_path / "seed1", seed=1)
    two = register(cfg, tracking, rollout_evaluation(played(1, 12), rebuilt), model_uri=uri)
    assert not two.promoted and two.alias == "challenger" and two.comparison is None
    assert two.reason == ("12 shared task ids hold different tasks (content hash differs), e.g. t00: no task to pair "
                          "on, so no promotion")

    # the same prompts and answers, six tasks' data files rewritten: only the other six are paired
    files_changed = suite(tmp_path / "files", seed=0, csv_seed={i: 7 for i in range(6)})
    three = register(cfg, tracking, rollout_evaluation(played(0, 12), files_changed), model_uri=uri)
    c = three.comparison
    assert c is not None and c.content_differs == 6 and c.tasks == [f"t{i:02d}" for i in range(6, TASKS)]
    assert (c.test.n_tasks, c.test.wins, c.test.losses) == (6, 3, 0)
    assert "6 paired tasks (0 candidate-only, 0 champion-only, 6 shared ids holding different tasks left out)" in three.reason


def test_a_rollout_is_refused_against_a_task_file_other_than_the_one_it_played(tmp_path):
    rebuilt = suite(tmp_path / "seed1", seed=1)
    with pytest.raises(ValueError, match=r"^runs/a: episode t00#0 was not shown the prompt of task t00 in .*seed1/tasks"
                                         r".jsonl: the rollout played another version of that task file$"):
        rollout_evaluation(played(0, 9), rebuilt, reference="runs/a")
    with pytest.raises(ValueError, match=r"runs/a: 2 played task\(s\) are not in .*: pass the task file"):
        rollout_evaluation([*played(1, 9), *[e.model_copy(update={"task_id": f"x{n}"}) for n, e in enumerate(played(1, 1)[:2])]],
                           rebuilt, reference="runs/a")


def test_other_conditions_keep_a_challenger_and_name_what_differs_equal_ones_pair(model_store, tmp_path):
    tracking, uri = model_store
    cfg = RegistryConfig(name="conditions")
    tasks = suite(tmp_path / "s", seed=0)
    one = register(cfg, tracking, rollout_evaluation(played(0, 9), tasks), model_uri=uri,
                   baseline=rollout_evaluation(played(0, 1), tasks))
    assert one.promoted

    hotter = rollout_evaluation(played(0, 12, max_turns=4, temperature=0.7), tasks)
    two = register(cfg, tracking, hotter, model_uri=uri)
    assert two.alias == "challenger" and two.comparison is None
    # the decision reads the greedy episodes: the sampled ones' temperature is no condition of it
    assert two.reason == "conditions differ (candidate vs champion v1): max_turns 4 vs 6: not comparable, so no promotion"

    same = register(cfg, tracking, rollout_evaluation(played(0, 12), tasks), model_uri=uri)
    assert same.comparison is not None and same.comparison.test.n_tasks == TASKS
    assert (same.comparison.test.wins, same.comparison.test.losses) == (3, 0)

    # a version registered before hashes and conditions were recorded is never paired
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.mlflow_uri)
    for tag in ("medgym.eval.task_hashes", "medgym.eval.conditions"):
        client.delete_model_version_tag("conditions", "1", tag)
    old = register(cfg, tracking, rollout_evaluation(played(0, 12), tasks), model_uri=uri)
    assert old.comparison is None and old.reason.startswith(
        "champion v1's evaluation records no task content hashes and no conditions (a version registered before "
        "they were recorded has none): its tasks cannot be matched by content, so no promotion")


def test_a_rollout_with_greedy_and_sampled_episodes_is_decided_on_its_greedy_ones(model_store, tmp_path):
    """The demo's SFT rollout plays each task greedily and once sampled, its baseline greedily only: the decision
    pairs greedy with greedy, as the leaderboard's headline does, instead of refusing on k and temperature."""
    tracking, uri = model_store
    tasks = suite(tmp_path / "s", seed=0)
    candidate = rollout_evaluation(played(0, 9), tasks)
    assert (candidate.conditions["k"], candidate.conditions["first_temperature"]) == (1, 0.0)
    assert "temperature" not in candidate.conditions
    greedy_base = rollout_evaluation([e for e in played(0, 1) if e.sample_index == 0], tasks)
    d = register(RegistryConfig(name="greedy"), tracking, candidate, model_uri=uri, baseline=greedy_base)
    assert d.comparison is not None and (d.comparison.test.wins, d.comparison.test.losses) == (8, 0)
    # a rollout without greedy episodes is decided on its sampled ones, which no greedy evaluation pairs with
    sampled = rollout_evaluation([e for e in played(0, 9) if e.sample_index == 1], tasks)
    assert sampled.conditions["temperature"] == 1.0 and "first_temperature" not in sampled.conditions
    d = register(RegistryConfig(name="greedy"), tracking, sampled, model_uri=uri)
    assert d.comparison is None and "conditions differ" in d.reason


def test_four_wins_and_no_loss_over_fifty_tasks_are_not_promoted_though_their_interval_excludes_zero(model_store):
    tracking, uri = model_store
    ids = [f"t{i:02d}" for i in range(50)]
    base = {t: 0.0 for t in ids}
    cand = {t: 1.0 if i < 4 else 0.0 for i, t in enumerate(ids)}
    assert paired_difference(cand, base).low > 0  # what the registry promoted on before

    recorded = {"task_hashes": {t: f"content of {t}" for t in ids}, "conditions": {"k": 1, "split": "test"}}
    d = register(RegistryConfig(name="four"), tracking, Evaluation(task_success=cand, **recorded), model_uri=uri,
                 baseline=Evaluation(task_success=base, **recorded))
    assert not d.promoted and d.alias == "challenger"
    t = d.comparison.test
    assert (t.test, t.wins, t.losses, t.ties, t.p_value) == ("exact sign test", 4, 0, 46, 0.0625)
    assert "not promoted: p 0.0625 > alpha 0.0304; 4 discordant task(s) < the 5 required" in d.reason


def test_looks_at_one_champion_on_the_same_tasks_are_counted_and_spend_alpha_a_fresh_draw_starts_over(model_store):
    """Champion v1 was evaluated on 24 tasks. Three candidates tested on its first 12 are looks 1, 2 and 3: the third,
    7 wins and no loss (p = 1/128), would pass at look 1 but not at 0.05·6/(π²·9). A candidate tested on the other
    12 tasks is a first look there and passes on the same evidence."""
    from mlflow.tracking import MlflowClient

    tracking, uri = model_store
    cfg = RegistryConfig(name="looks")
    ids = [f"t{i:02d}" for i in range(24)]
    first, second = ids[:12], ids[12:]

    def evaluation(solved: set[str], tasks: list[str] = ids) -> Evaluation:
        return Evaluation(task_success={t: float(t in solved) for t in tasks}, task_hashes={t: f"c-{t}" for t in tasks},
                          conditions={"k": 1, "split": "test"})

    champion_solves = {*first[:3], *second[:3]}
    one = register(cfg, tracking, evaluation(champion_solves), model_uri=uri, baseline=evaluation(set()))
    assert one.promoted and one.comparison.test.look == 1
    looks = [register(cfg, tracking, evaluation(champion_solves, first), model_uri=uri) for _ in range(2)]
    assert [d.comparison.test.look for d in looks] == [1, 2] and not any(d.promoted for d in looks)

    better = evaluation(set(first[:10]), first)
    third = register(cfg, tracking, better, model_uri=uri)
    t = third.comparison.test
    assert (t.look, t.wins, t.losses, t.p_value) == (3, 7, 0, 1 / 128) and not third.promoted
    assert t.alpha == pytest.approx(0.05 * 6 / (3.141592653589793 ** 2 * 9))
    assert ("Look 3 against champion v1 on any of these 12 tasks: alpha 0.05 spent as 0.05·6/(π²·9) = 0.0034; only "
            "tasks no earlier candidate was tested on against it start the count afresh") in third.reason
    assert "not promoted: p 0.007812 > alpha 0.003377" in third.reason
    # the same evidence as a first look passes: what the count cost
    champion_eval = evaluation(champion_solves)
    assert decide(better, champion_eval, "champion", cfg, version="1")[0].supported

    client = MlflowClient(tracking_uri=tracking.mlflow_uri)
    tags = [client.get_model_version("looks", v).tags for v in ("2", "3", "4")]
    assert [x["medgym.decision.look"] for x in tags] == ["1", "2", "3"]
    assert {x["medgym.decision.against"] for x in tags} == {"champion v1"}
    assert len({x["medgym.decision.tasks_digest"] for x in tags}) == 1

    fresh = register(cfg, tracking, evaluation(set(second[:10]), second), model_uri=uri)
    assert fresh.comparison.test.look == 1 and fresh.promoted and fresh.alias == "champion"
    assert client.get_model_version("looks", fresh.version).tags["medgym.decision.tasks_digest"] != \
        tags[0]["medgym.decision.tasks_digest"]
    decision = json.loads(Path(client.download_artifacts(third.run_id, "evaluation/decision.json")).read_text())
    assert decision["comparison"]["test"]["look"] == 3 and decision["comparison"]["tasks_digest"] == \
        tags[2]["medgym.decision.tasks_digest"]


def test_a_look_on_fewer_or_more_of_the_same_tasks_is_counted_not_a_first_look(model_store):
    """Champion v1 was evaluated on 24 tasks and a first candidate tested on 12 of them. A candidate whose episode on
    one of those 12 did not finish (so 11 are paired), and one scored on all 24, look at the same evidence again:
    looks 2 and 3, not first looks on a new set of tasks. A task whose content changed since is not the same task."""
    tracking, uri = model_store
    cfg = RegistryConfig(name="overlapping-looks")
    ids = [f"t{i:02d}" for i in range(24)]

    def evaluation(solved: set[str], tasks: list[str]) -> Evaluation:
        return Evaluation(task_success={t: float(t in solved) for t in tasks}, task_hashes={t: f"c-{t}" for t in tasks},
                          conditions={"k": 1, "split": "test"})

    solved = set(ids[:3] + ids[12:15])
    assert register(cfg, tracking, evaluation(solved, ids), model_uri=uri, baseline=evaluation(set(), ids)).promoted
    looks = [register(cfg, tracking, evaluation(solved, tasks), model_uri=uri).comparison.test.look
             for tasks in (ids[:12], ids[:11], ids)]
    assert looks == [1, 2, 3]

    # an earlier candidate whose first 6 tasks were rebuilt (other content) was tested on the other 6 only: a later
    # candidate on those first 6, as the champion played them, is the first look at them
    other = RegistryConfig(name="rebuilt-looks")
    assert register(other, tracking, evaluation(solved, ids), model_uri=uri, baseline=evaluation(set(), ids)).promoted
    partly = evaluation(solved, ids[:12])
    partly = partly.model_copy(update={"task_hashes": {**partly.task_hashes, **{t: f"rebuilt-{t}" for t in ids[:6]}}})
    assert register(other, tracking, partly, model_uri=uri).comparison.tasks == ids[6:12]
    assert register(other, tracking, evaluation(solved, ids[:6]), model_uri=uri).comparison.test.look == 1
