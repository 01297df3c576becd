"""Power and sample-size reference functions against statsmodels and textbook values."""

from __future__ import annotations

import math
import random

import pytest
from statsmodels.stats.power import NormalIndPower, TTestIndPower, TTestPower
from statsmodels.stats.proportion import proportion_effectsize

from components.tasks.biostat import power
from components.tasks.biostat.power_questions import BUILDERS


def test_textbook_two_sample_t_needs_64_per_group_for_medium_effect():
    # Cohen's classic table: d = 0.5, two-sided alpha 0.05, power 0.80 -> 64 per group
    assert power.two_sample_t(10.5, 10.0, 1.0, 0.05, "two-sided", 1, power=0.8) == 64


def test_one_sample_t_matches_statsmodels():
    d = (100.0 - 120.0) / 7.3
    assert power.one_sample_t(120, 100, 7.3, 0.05, "two-sided", power=0.9) == math.ceil(
        TTestPower().solve_power(abs(d), alpha=0.05, power=0.9))
    assert power.one_sample_t(120, 117, 7.3, 0.05, "larger", n=37) == pytest.approx(
        TTestPower().power(3 / 7.3, 37, 0.05, alternative="larger"), abs=1e-9)


def test_two_sample_t_with_allocation_ratio_matches_statsmodels():
    sm = TTestIndPower()
    assert power.two_sample_t(10, 8, 5, 0.05, "two-sided", 2, n1=30) == pytest.approx(
        sm.power(0.4, 30, 0.05, ratio=2), abs=1e-9)
    assert power.two_sample_t(10, 8, 5, 0.01, "larger", 3, power=0.85) == math.ceil(
        sm.solve_power(0.4, alpha=0.01, power=0.85, ratio=3, alternative="larger"))


def test_proportions_match_statsmodels_cohen_h():
    h = proportion_effectsize(0.3, 0.2)
    sm = NormalIndPower()
    assert power.two_proportions(0.3, 0.2, 0.05, "two-sided", 1, power=0.8) == math.ceil(
        sm.solve_power(h, alpha=0.05, power=0.8, ratio=1))
    assert power.two_proportions(0.3, 0.2, 0.05, "larger", 2, n1=100) == pytest.approx(
        sm.power(h, 100, 0.05, ratio=2, alternative="larger"), abs=1e-9)
    assert power.one_proportion(0.2, 0.3, 0.05, "two-sided", n=100) == pytest.approx(
        sm.power(h, 100, 0.05, ratio=0), abs=1e-9)
    assert power.one_proportion(0.2, 0.3, 0.05, "two-sided", power=0.9) == math.ceil(
        sm.solve_power(h, alpha=0.05, power=0.9, ratio=0))


@pytest.mark.parametrize("category", sorted(BUILDERS))
def test_generated_sample_sizes_agree_with_statsmodels_solve_power(category):
    """A few drawn questions per builder: the integer answer is ceil(statsmodels solve_power)."""
    rng = random.Random(category)
    for _ in range(3):
        q = BUILDERS[category](rng, "size")
        kw = q.kwargs
        if q.func == "one_sample_t":
            d = abs(kw["mean_alt"] - kw["mean_null"]) / kw["sd"]
            expected = TTestPower().solve_power(d, alpha=kw["alpha"], power=kw["power"], alternative=kw["alternative"])
        elif q.func == "two_sample_t":
            d = abs(kw["mean1"] - kw["mean2"]) / kw["sd"]
            expected = TTestIndPower().solve_power(d, alpha=kw["alpha"], power=kw["power"], ratio=kw["ratio"],
                                                   alternative=kw["alternative"])
        else:
            pa, pb = (kw["p1"], kw["p2"]) if q.func == "two_proportions" else (kw["p_alt"], kw["p_null"])
            h = abs(proportion_effectsize(pa, pb))
            expected = NormalIndPower().solve_power(h, alpha=kw["alpha"], power=kw["power"],
                                                    ratio=kw.get("ratio", 0), alternative=kw["alternative"])
        assert q.answer == math.ceil(expected - 1e-9), (q.prompt, expected)
        assert f"{kw['power']:.0%}" in q.prompt and str(kw["alpha"]) in q.prompt


def test_reproduces_npowerai_one_sample_sizes(sample_release):
    """The public N-PowerAI rows (one-sample t, two-sided) give the same sample sizes as our reference."""
    import json
    import re

    checked = 0
    for line in (sample_release / "npowerai" / "train_tasks.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["task_type"] != "One-sample t-test" or row["estimate_target"] != "size":
            continue
        q = row["question"]
        mu0 = float(re.search(r"in general is ([\d.]+)", q).group(1))
        story = re.search(r"sample to be ([\d.]+) with a standard deviation of (\d+(?:\.\d+)?)", q)
        mu1, sd = map(float, story.groups())
        pw = float(re.search(r"power of (\d+)%", q).group(1)) / 100
        alpha = float(re.search(r"significance level of ([\d.]+?)\??$", q).group(1))
        assert power.one_sample_t(mu0, mu1, sd, alpha, "two-sided", power=pw) == row["answer"], q[-200:]
        checked += 1
    assert checked > 0
