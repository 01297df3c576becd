"""Reports over rollouts: a candidate against a baseline task by task, and the verifier's ranking."""

from __future__ import annotations

import pytest

from components.envs.episode import Outcome
from components.evaluation.metrics import best_at_k, roc_auc
from components.evaluation.report import compare, verifier_report
from tests.evaluation.test_metrics import ep

C, W = Outcome.CORRECT, Outcome.WRONG_ANSWER


def test_compare_pairs_the_shared_tasks_and_splits_by_domain():
    base = [ep(f"t{i}", 0, W, "calc" if i < 4 else "ehr") for i in range(8)]
    cand = [ep(f"t{i}", s, C if i < 2 and s == 0 else W, "calc" if i < 4 else "ehr") for i in range(8) for s in (0, 1)]
    cand.append(ep("extra", 0, C, "ehr"))
    rep = compare(base, cand)
    assert rep["tasks"] == 8 and rep["candidate_only"] == 1 and rep["baseline_only"] == 0
    assert rep["overall"]["baseline"] == 0.0 and rep["overall"]["candidate"] == pytest.approx(2 * 0.5 / 8)
    assert rep["by_domain"]["calc"]["candidate"] == pytest.approx(0.25)
    assert rep["by_domain"]["ehr"]["difference"]["value"] == 0.0
    diff = rep["overall"]["difference"]
    assert diff["low"] <= diff["value"] <= diff["high"] and diff["value"] > 0
    with pytest.raises(ValueError, match="share no task"):
        compare(base, [ep("other", 0, C)])


def test_verifier_report_ranks_episodes_and_says_when_auc_is_undefined():
    eps = [ep(f"t{i}", s, C if s == i % 2 else W) for i in range(6) for s in (0, 1)]
    good = {e.episode_id: (0.9 if e.outcome == C else 0.1) for e in eps}
    rep = verifier_report(eps, good, ks=(1, 2, 4))
    assert rep["auc"]["value"] == 1.0 and rep["accuracy"] == 1.0
    assert rep["at_k"]["2"]["best@k"] == 1.0 and rep["at_k"]["2"]["pass@k"] == 1.0 and rep["pass@1"] == 0.5
    assert "4" not in rep["at_k"]  # no task has 4 episodes
    flipped = {k: 1 - v for k, v in good.items()}
    rep = verifier_report(eps, flipped, ks=(2,))
    tasks = [[(flipped[e.episode_id], e.outcome == C) for e in eps if e.task_id == f"t{i}"] for i in range(6)]
    assert rep["at_k"]["2"]["best@k"] == best_at_k(tasks, 2) == 0.0
    assert rep["auc"]["value"] == roc_auc(list(flipped.values()), [e.outcome == C for e in eps]) == 0.0
    wrong_only = [e for e in eps if e.outcome == W]
    assert verifier_report(wrong_only, good)["auc"] is None


def test_verifier_report_gives_the_auc_over_submitted_episodes_beside_the_all_episode_one():
    # per task: a correct and a wrong submission the verifier cannot tell apart, and a run that never submitted,
    # which it calls NO: over all episodes it looks good, over the answers it judged it is a coin
    eps = [ep(f"t{i}", s, o) for i in range(10) for s, o in enumerate((C, W, Outcome.NO_ANSWER))]
    scores = {e.episode_id: 0.0 if e.outcome == Outcome.NO_ANSWER else 0.6 for e in eps}
    rep = verifier_report(eps, scores)
    assert rep["episodes"] == 30 and rep["submitted"] == 20
    assert rep["auc"]["value"] == roc_auc(list(scores.values()), [e.outcome == C for e in eps]) == 0.75
    assert rep["auc_submitted"]["value"] == 0.5
    for key in ("auc", "auc_submitted"):
        assert rep[key]["n"] == 10  # tasks, the bootstrap's unit
        assert rep[key]["low"] <= rep[key]["value"] <= rep[key]["high"]
    assert rep["auc"]["low"] > rep["auc_submitted"]["high"]  # the flattery is not noise here

    unsubmitted_only = [e for e in eps if e.outcome != W]  # correct answers against runs that never submitted
    rep = verifier_report(unsubmitted_only, scores)
    assert rep["auc"]["value"] == 1.0 and rep["auc_submitted"] is None
    assert rep["auc_submitted_undefined"] == ("10 of 10 scored episodes that submitted are correct: AUC needs both "
                                              "classes")
