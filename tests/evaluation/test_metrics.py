from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest

from components.envs.episode import Check, Episode, Outcome
from components.evaluation.metrics import (
    Estimate,
    accuracy,
    best_at_k,
    bootstrap_interval,
    paired_difference,
    pass_at_k,
    roc_auc,
    success_report,
    wilson_interval,
)

# ------------------------------------------------------------------------------------------- brute force


def brute_pass_at_k(labels: list[bool], k: int) -> float:
    subsets = list(itertools.combinations(range(len(labels)), k))
    return sum(any(labels[i] for i in s) for s in subsets) / len(subsets)


def brute_best_at_k(scored: list[tuple[float, bool]], k: int) -> float:
    """Every k-subset; the verifier's pick is a uniform random one of the subset's top-scored episodes."""
    subsets = list(itertools.combinations(range(len(scored)), k))
    total = 0.0
    for s in subsets:
        top = max(scored[i][0] for i in s)
        tied = [scored[i][1] for i in s if scored[i][0] == top]
        total += sum(tied) / len(tied)
    return total / len(subsets)


def brute_auc(scores: list[float], labels: list[bool]) -> float:
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


# ---------------------------------------------------------------------------------------------- pass@k


def test_pass_at_k_matches_enumeration_over_all_subsets():
    rng = random.Random(1)
    for _ in range(60):
        n = rng.randint(1, 9)
        labels = [rng.random() < rng.random() for _ in range(n)]
        for k in range(1, n + 1):
            assert pass_at_k(n, sum(labels), k) == pytest.approx(brute_pass_at_k(labels, k), abs=1e-12)


def test_pass_at_k_edges_and_closed_form():
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 8, 3) == 1.0  # n - c < k: every subset holds a correct one
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(200, 17, 50) == pytest.approx(1 - math.comb(183, 50) / math.comb(200, 50), rel=1e-12)


def test_pass_at_k_is_stable_where_the_binomials_are_huge():
    v = pass_at_k(5000, 1, 10)
    assert v == pytest.approx(10 / 5000, rel=1e-9)


@pytest.mark.parametrize("n,c,k", [(4, 2, 5), (3, 1, 0), (0, 0, 1)])
def test_pass_at_k_rejects_k_outside_1_to_n(n, c, k):
    with pytest.raises(ValueError, match=rf"n={n}.*k={k}"):
        pass_at_k(n, c, k)


def test_pass_at_k_rejects_c_outside_0_to_n():
    with pytest.raises(ValueError, match="c="):
        pass_at_k(4, 5, 1)


# ---------------------------------------------------------------------------------------------- best@k


def test_best_at_k_matches_enumeration_with_ties():
    rng = random.Random(2)
    for _ in range(80):
        n = rng.randint(1, 8)
        # few distinct scores, so ties are common
        scored = [(float(rng.randint(0, 3)), rng.random() < 0.5) for _ in range(n)]
        for k in range(1, n + 1):
            assert best_at_k([scored], k) == pytest.approx(brute_best_at_k(scored, k), abs=1e-12)


def test_best_at_k_is_the_mean_over_tasks():
    rng = random.Random(3)
    tasks = [[(rng.random(), rng.random() < 0.4) for _ in range(rng.randint(3, 7))] for _ in range(5)]
    expected = np.mean([brute_best_at_k(t, 3) for t in tasks])
    assert best_at_k(tasks, 3) == pytest.approx(expected, abs=1e-12)


def test_best_at_k_special_cases():
    scored = [(0.9, True), (0.1, False), (0.5, False), (0.3, True)]
    assert best_at_k([scored], 1) == pytest.approx(0.5)  # k=1: a random episode
    assert best_at_k([scored], 4) == 1.0  # all of them: the top-scored one, which is correct
    # a perfect verifier turns best@k into pass@k
    perfect = [(1.0 if y else 0.0, y) for _, y in scored]
    for k in range(1, 5):
        assert best_at_k([perfect], k) == pytest.approx(pass_at_k(4, 2, k))
    # all scores tied: the pick is random whatever k is
    flat = [(0.5, y) for _, y in scored]
    for k in range(1, 5):
        assert best_at_k([flat], k) == pytest.approx(0.5)


def test_best_at_k_rejects_k_above_n():
    with pytest.raises(ValueError, match="n=2.*k=3"):
        best_at_k([[(0.1, True), (0.2, False)]], 3)


# ----------------------------------------------------------------------------------------- classification


def test_roc_auc_matches_pair_counting_with_ties():
    rng = random.Random(4)
    for _ in range(50):
        n = rng.randint(2, 30)
        labels = [rng.random() < 0.5 for _ in range(n)]
        if all(labels) or not any(labels):
            labels[0] = not labels[0]
        scores = [float(rng.randint(0, 4)) for _ in range(n)]
        assert roc_auc(scores, labels) == pytest.approx(brute_auc(scores, labels), abs=1e-12)


def test_roc_auc_known_values():
    assert roc_auc([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [False, False, True, True]) == 0.0
    assert roc_auc([0.5] * 4, [False, True, False, True]) == 0.5


@pytest.mark.parametrize("labels,absent", [([True, True], "negative"), ([False, False], "positive")])
def test_roc_auc_one_class_is_a_clear_error(labels, absent):
    with pytest.raises(ValueError, match=f"one class.*{absent}"):
        roc_auc([0.2, 0.7], labels)


def test_roc_auc_rejects_mismatched_lengths_and_nan():
    with pytest.raises(ValueError, match="one length"):
        roc_auc([0.1, 0.2, 0.3], [True, False])
    with pytest.raises(ValueError, match="NaN"):
        roc_auc([0.1, float("nan")], [True, False])


def test_accuracy_thresholds_at_greater_or_equal():
    scores = [0.1, 0.5, 0.7, 0.4]
    labels = [False, True, False, True]
    assert accuracy(scores, labels) == pytest.approx(0.5)  # right: 0.1/F, 0.5/T
    assert accuracy(scores, labels, threshold=0.35) == pytest.approx(0.75)


# ---------------------------------------------------------------------------------------------- intervals


def test_wilson_known_values():
    zero = wilson_interval(0, 16)
    assert zero.value == 0.0 and zero.low == 0.0
    assert zero.high == pytest.approx(0.1936, abs=1e-4)  # z^2 / (n + z^2)
    half = wilson_interval(8, 16)
    assert half.value == 0.5 and half.n == 16
    assert half.low == pytest.approx(0.2800, abs=1e-4) and half.high == pytest.approx(0.7200, abs=1e-4)
    full = wilson_interval(16, 16)
    assert full.high == 1.0 and full.low == pytest.approx(1 - 0.1936, abs=1e-4)
    # 1/10: a textbook value (Newcombe 1998 style tables)
    one = wilson_interval(1, 10)
    assert one.low == pytest.approx(0.0179, abs=1e-4) and one.high == pytest.approx(0.4042, abs=1e-4)


def test_wilson_rejects_bad_counts():
    with pytest.raises(ValueError):
        wilson_interval(0, 0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


def mean(g):
    return float(np.mean(g))


def test_bootstrap_is_reproducible_with_its_seed():
    rng = np.random.default_rng(5)
    data = list(rng.random(40))
    a = bootstrap_interval(mean, data, n_boot=500, seed=7)
    b = bootstrap_interval(mean, data, n_boot=500, seed=7)
    c = bootstrap_interval(mean, data, n_boot=500, seed=8)
    assert a == b
    assert (a.low, a.high) != (c.low, c.high)
    assert a.low < a.value < a.high and a.n == 40
    assert a.value == pytest.approx(np.mean(data))


def test_bootstrap_agrees_with_wilson_on_independent_trials():
    data = [1.0] * 60 + [0.0] * 140
    boot = bootstrap_interval(mean, data, n_boot=2000, seed=0)
    wil = wilson_interval(60, 200)
    assert boot.low == pytest.approx(wil.low, abs=0.015)
    assert boot.high == pytest.approx(wil.high, abs=0.015)


def test_bootstrap_covers_the_true_mean_most_of_the_time():
    rng = np.random.default_rng(11)
    covered = 0
    reps = 60
    for r in range(reps):
        data = list((rng.random(80) < 0.3).astype(float))
        est = bootstrap_interval(mean, data, n_boot=300, seed=r)
        covered += est.low <= 0.3 <= est.high
    assert covered / reps >= 0.85  # nominal 95%; a broken interval (e.g. zero width) covers far less


def test_bootstrap_resamples_clusters_not_items():
    # two tasks of ten identical episodes each: resampling items would give a tight interval around 0.5,
    # resampling tasks gives the three means 0, 0.5 and 1
    groups = [[1.0] * 10, [0.0] * 10]
    est = bootstrap_interval(lambda g: float(np.mean([x for t in g for x in t])), groups, n_boot=400, seed=0)
    assert est.low == 0.0 and est.high == 1.0 and est.n == 2


def test_bootstrap_skips_resamples_where_the_statistic_is_undefined():
    # AUC over tasks: a resample may hold one class only
    groups = [[(0.9, True)], [(0.1, False)], [(0.6, True)], [(0.4, False)]]

    def auc(g):
        pairs = [p for t in g for p in t]
        return roc_auc([s for s, _ in pairs], [y for _, y in pairs])

    est = bootstrap_interval(auc, groups, n_boot=300, seed=0)
    assert est.value == 1.0 and est.high == 1.0

    with pytest.raises(ValueError, match="one class"):
        bootstrap_interval(auc, [[(0.9, True)]], n_boot=10, seed=0)


def test_paired_difference_sign_and_shared_tasks():
    a = {f"t{i}": 1.0 if i % 4 else 0.0 for i in range(40)}  # 0.75
    b = {f"t{i}": 1.0 if i % 2 else 0.0 for i in range(40)}  # 0.5
    b["only_b"] = 1.0
    a["only_a"] = 0.0
    d = paired_difference(a, b, seed=0)
    assert isinstance(d, Estimate)
    assert d.n == 40
    assert d.value == pytest.approx(0.25)
    assert 0.0 < d.low < d.value < d.high
    r = paired_difference(b, a, seed=0)
    assert r.value == pytest.approx(-0.25) and r.high < 0
    assert paired_difference(a, b, seed=0) == d  # seeded


def test_paired_difference_of_identical_runs_is_zero():
    a = {f"t{i}": (i % 3) / 2 for i in range(20)}
    d = paired_difference(a, dict(a))
    assert d.value == 0.0 and d.low == 0.0 and d.high == 0.0


def test_paired_difference_errors():
    with pytest.raises(ValueError, match="no shared"):
        paired_difference({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        paired_difference({"a": 2.0}, {"a": 1.0})


# ---------------------------------------------------------------------------------------------- the report


def ep(task: str, sample: int, outcome: Outcome | None, domain: str | None = "calc") -> Episode:
    submitted = outcome in (Outcome.CORRECT, Outcome.WRONG_ANSWER)
    return Episode(episode_id=f"{task}#{sample}", task_id=task, sample_index=sample, domain=domain,
                   first_observation="q", submitted=submitted,
                   check=Check(correct=outcome is Outcome.CORRECT, grader_reason="r") if submitted else None,
                   reward=1.0 if outcome is Outcome.CORRECT else 0.0, outcome=outcome)


C, W, N = Outcome.CORRECT, Outcome.WRONG_ANSWER, Outcome.NO_ANSWER


def test_success_report_one_episode_per_task_uses_wilson():
    eps = [ep(f"t{i}", 0, C if i < 8 else W) for i in range(16)]
    rep = success_report(eps, ks=(1, 2))
    json.dumps(rep)
    o = rep["overall"]
    assert o["n_tasks"] == 16 and o["n_episodes"] == 16 and o["n_unfinished"] == 0
    assert o["pass@1"]["method"] == "wilson"
    assert o["pass@1"]["value"] == 0.5
    assert o["pass@1"]["low"] == pytest.approx(0.2800, abs=1e-4)
    assert o["pass@k"] == {"1": 0.5}
    assert "2" in o["skipped_k"] and "fewer than 2" in o["skipped_k"]["2"]
    assert "best@k" not in o


def test_success_report_per_domain_pass_at_k_best_at_k_and_unfinished():
    eps = [
        # calc: t1 has 2/4 correct, t2 0/4; one unfinished episode of t2 is left out
        ep("t1", 0, C), ep("t1", 1, W), ep("t1", 2, C), ep("t1", 3, N),
        ep("t2", 0, W), ep("t2", 1, W), ep("t2", 2, N), ep("t2", 3, W), ep("t2", 4, None),
        # ehr: one task, 1/4 correct
        ep("e1", 0, W, "ehr"), ep("e1", 1, C, "ehr"), ep("e1", 2, W, "ehr"), ep("e1", 3, W, "ehr"),
        # an unfinished-only task: counted, but no task
        ep("e2", 0, None, "ehr"),
    ]
    scores = {e.episode_id: (0.9 if e.outcome is C else 0.2) for e in eps}
    scores["t1#0"] = 0.1  # a correct episode the verifier ranks low
    rep = success_report(eps, ks=(1, 2, 4, 8), scores=scores)
    json.dumps(rep)
    assert rep["ks"] == [1, 2, 4, 8]
    assert set(rep["by_domain"]) == {"calc", "ehr"}

    o = rep["overall"]
    assert o["n_tasks"] == 3 and o["n_episodes"] == 12 and o["n_unfinished"] == 2
    assert o["pass@1"]["method"] == "bootstrap" and o["pass@1"]["n"] == 3
    assert o["pass@1"]["value"] == pytest.approx((0.5 + 0.0 + 0.25) / 3)
    assert o["pass@1"]["low"] <= o["pass@1"]["value"] <= o["pass@1"]["high"]
    assert o["pass@k"]["2"] == pytest.approx((pass_at_k(4, 2, 2) + 0.0 + pass_at_k(4, 1, 2)) / 3)
    assert o["pass@k"]["4"] == pytest.approx((1.0 + 0.0 + 1.0) / 3)
    assert set(o["pass@k"]) == {"1", "2", "4"} and set(o["skipped_k"]) == {"8"}

    calc = rep["by_domain"]["calc"]
    assert calc["n_tasks"] == 2 and calc["n_episodes"] == 8 and calc["n_unfinished"] == 1
    assert calc["pass@1"]["value"] == pytest.approx(0.25)
    t1 = [(scores[f"t1#{i}"], i in (0, 2)) for i in range(4)]
    assert calc["best@k"]["2"] == pytest.approx((brute_best_at_k(t1, 2) + 0.0) / 2)
    assert calc["best@k"]["4"] == pytest.approx(0.5)  # t1: top is t1#2 (correct); t2 has none

    ehr = rep["by_domain"]["ehr"]
    assert ehr["n_tasks"] == 1 and ehr["n_unfinished"] == 1
    assert ehr["best@k"]["4"] == 1.0


def test_success_report_domain_with_no_finished_episode_and_none_domain():
    eps = [ep("a", 0, None, "x"), ep("b", 0, C, None)]
    rep = success_report(eps, ks=(1,))
    json.dumps(rep)
    x = rep["by_domain"]["x"]
    assert x["n_tasks"] == 0 and x["n_unfinished"] == 1 and x["pass@1"] is None
    assert rep["by_domain"]["unknown"]["pass@1"]["value"] == 1.0


def test_success_report_errors():
    with pytest.raises(ValueError, match="no score"):
        success_report([ep("a", 0, C)], scores={})
    with pytest.raises(ValueError, match="more than once"):
        success_report([ep("a", 0, C), ep("a", 0, W)])
    with pytest.raises(ValueError, match="domains"):
        success_report([ep("a", 0, C, "x"), ep("a", 1, W, "y")])
