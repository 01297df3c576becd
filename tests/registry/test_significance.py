"""The paired test a promotion rests on: exact where it can be, checked against brute force, and spent over looks."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from pydantic import ValidationError

from components.evaluation.metrics import paired_difference
from components.registry import RegistryConfig
from components.registry.significance import EXACT_MAX_NONZERO, PairedTest, paired_test, spent_alpha


def evals(candidate: list[float], reference: list[float]) -> tuple[dict[str, float], dict[str, float]]:
    return ({f"t{i:03d}": float(x) for i, x in enumerate(candidate)},
            {f"t{i:03d}": float(x) for i, x in enumerate(reference)})


def wins_losses(wins: int, losses: int, n: int, tied_value: float = 0.0) -> tuple[dict[str, float], dict[str, float]]:
    """n binary tasks: the candidate solves `wins` the reference fails, and fails `losses` the reference solves."""
    cand = [1.0] * wins + [0.0] * losses + [tied_value] * (n - wins - losses)
    ref = [0.0] * wins + [1.0] * losses + [tied_value] * (n - wins - losses)
    return evals(cand, ref)


def brute_sign_flip_p(d: list[float]) -> float:
    """Every one of the 2^n sign patterns, zeros included: the share whose sum reaches the observed one."""
    observed = sum(d)
    sums = [sum(s * x for s, x in zip(signs, d, strict=True)) for signs in itertools.product((1, -1), repeat=len(d))]
    return sum(1 for s in sums if s >= observed - 1e-9) / len(sums)


def lattice_sign_flip_p(units: list[int]) -> float:
    """The exact sign-flip p-value of integer differences by convolution: feasible where 2^n enumeration is not."""
    offset = sum(abs(u) for u in units)
    counts = np.zeros(2 * offset + 1, dtype=object)  # exact integers: 2^n overflows int64 for n >= 63
    counts[offset] = 1
    for u in (abs(u) for u in units):
        shifted = np.zeros_like(counts)
        shifted[u:] += counts[: counts.size - u] if u else counts
        shifted[: counts.size - u] += counts[u:] if u else counts
        counts = shifted
    return float(counts[offset + sum(units):].sum() / 2 ** len(units))


# ------------------------------------------------------------------------------------------ the exact sign test


def test_four_wins_no_losses_of_fifty_is_not_promoted_though_the_bootstrap_interval_clears_zero() -> None:
    cand, ref = wins_losses(4, 0, 50)
    old = paired_difference(cand, ref, n_boot=2000, seed=0)
    assert old.low > 0  # the percentile interval the registry promoted on: [+0.02, +0.16]

    t = paired_test(cand, ref)

    assert t.test == "exact sign test"
    assert (t.wins, t.losses, t.ties, t.discordant, t.n_tasks) == (4, 0, 46, 4, 50)
    assert t.p_value == pytest.approx(0.0625, rel=1e-12)  # 1 / 2^4
    assert (t.low, t.high) == pytest.approx((old.low, old.high))
    assert t.difference == pytest.approx(0.08)
    assert not t.promote


@pytest.mark.parametrize(("wins", "losses"), [(0, 0), (0, 3), (3, 3), (7, 2), (12, 1), (30, 10)])
def test_sign_test_p_is_the_binomial_upper_tail(wins: int, losses: int) -> None:
    n = wins + losses
    expected = 1.0 if n == 0 else sum(math.comb(n, j) for j in range(wins, n + 1)) / 2 ** n
    cand, ref = wins_losses(wins, losses, n + 20, tied_value=1.0)  # 20 tasks both solve: they change nothing
    assert paired_test(cand, ref).p_value == pytest.approx(expected, rel=1e-12)


def test_a_clear_binary_win_is_promoted() -> None:
    cand, ref = wins_losses(12, 1, 50)
    t = paired_test(cand, ref)
    assert t.test == "exact sign test"
    assert t.p_value < 0.002
    assert t.promote


# --------------------------------------------------------------------------------- the sign-flip permutation test


def test_exact_enumeration_matches_brute_force_on_fractional_scores() -> None:
    cand = [0.75, 0.5, 1.0, 0.25, 0.5, 1.0, 0.0, 0.75, 0.5, 0.25, 1.0, 0.5]
    ref = [0.25, 0.5, 0.5, 0.5, 0.0, 0.75, 0.0, 0.25, 0.75, 0.25, 0.5, 0.25]
    t = paired_test(*evals(cand, ref))
    assert t.test == "sign-flip permutation test"
    assert (t.wins, t.losses, t.ties) == (7, 2, 3)
    assert t.p_value == pytest.approx(brute_sign_flip_p([a - b for a, b in zip(cand, ref, strict=True)]), abs=1e-12)


def test_exam_f1_like_scores_match_brute_force() -> None:
    rng = np.random.default_rng(3)
    cand, ref = rng.uniform(0, 1, 14).round(3).tolist(), rng.uniform(0, 1, 14).round(3).tolist()
    t = paired_test(*evals(cand, ref), metric="exam_f1")
    assert t.metric == "exam_f1"
    assert t.p_value == pytest.approx(brute_sign_flip_p([a - b for a, b in zip(cand, ref, strict=True)]), abs=1e-12)


def test_monte_carlo_is_seeded_and_close_to_the_exact_p_value() -> None:
    rng = np.random.default_rng(7)
    units_c, units_r = rng.integers(0, 5, 60), rng.integers(0, 5, 60)  # k = 4 episodes per task
    units_c[:10] = np.minimum(units_c[:10] + 1, 4)  # a small real edge, so p is neither ~0 nor ~1
    cand, ref = evals((units_c / 4).tolist(), (units_r / 4).tolist())
    diffs = [int(u) for u in units_c - units_r]
    assert sum(1 for u in diffs if u) > EXACT_MAX_NONZERO
    exact = lattice_sign_flip_p(diffs)
    n_perm = 20000

    t = paired_test(cand, ref, n_perm=n_perm, seed=11)

    assert 0.001 < exact < 0.5
    assert abs(t.p_value - exact) < 4 * math.sqrt(exact * (1 - exact) / n_perm) + 1 / n_perm
    assert (t.p_value * (1 + n_perm)) == pytest.approx(round(t.p_value * (1 + n_perm)))  # (1 + hits) / (1 + n_perm)
    assert paired_test(cand, ref, n_perm=n_perm, seed=11).p_value == t.p_value
    assert paired_test(cand, ref, n_perm=n_perm, seed=12).p_value != t.p_value


def test_enumeration_stops_at_the_threshold_and_monte_carlo_takes_over() -> None:
    n_perm = 999
    at = paired_test(*evals([0.5] * EXACT_MAX_NONZERO, [0.25] * EXACT_MAX_NONZERO), n_perm=n_perm)
    above = paired_test(*evals([0.5] * (EXACT_MAX_NONZERO + 1), [0.25] * (EXACT_MAX_NONZERO + 1)), n_perm=n_perm)
    assert at.p_value == pytest.approx(2.0 ** -EXACT_MAX_NONZERO)  # only the all-positive pattern reaches the sum
    assert above.p_value == pytest.approx(1 / (1 + n_perm))  # Monte Carlo never goes below 1 / (1 + n_perm)


def test_a_clear_fractional_win_is_promoted() -> None:
    rng = np.random.default_rng(0)
    ref = rng.integers(0, 3, 40) / 4
    cand = np.minimum(ref + rng.integers(0, 3, 40) / 4, 1.0)
    t = paired_test(*evals(cand.tolist(), ref.tolist()))
    assert t.test == "sign-flip permutation test"
    assert t.losses == 0 and t.wins >= 20
    assert t.promote


def test_noise_is_not_promoted() -> None:
    same = paired_test(*evals([0.25, 0.5, 1.0, 0.0] * 10, [0.25, 0.5, 1.0, 0.0] * 10))
    assert (same.p_value, same.ties, same.promote) == (1.0, 40, False)
    balanced = paired_test(*evals([0.75, 0.25] * 20, [0.25, 0.75] * 20))
    assert balanced.difference == 0.0 and balanced.p_value > 0.5 and not balanced.promote
    rng = np.random.default_rng(5)  # two draws of one model
    p_i = rng.uniform(0, 1, 200)
    t = paired_test(*evals((rng.binomial(4, p_i) / 4).tolist(), (rng.binomial(4, p_i) / 4).tolist()))
    assert not t.promote


# ------------------------------------------------------------------------------------------- what a promotion needs


def test_too_few_discordant_tasks_block_a_promotion_that_p_alone_would_pass() -> None:
    cand, ref = wins_losses(4, 0, 50)
    t = paired_test(cand, ref, alpha=0.2)  # spent to 0.1216 at look 1: p = 0.0625 passes
    assert t.p_value <= t.alpha and t.difference > t.margin
    assert not t.promote
    assert "4 discordant task(s) < the 5 required" in t.explain()
    assert paired_test(cand, ref, alpha=0.2, min_discordant=4).promote


def test_the_difference_must_exceed_the_margin() -> None:
    cand, ref = wins_losses(12, 1, 50)  # difference +0.22
    assert paired_test(cand, ref, margin=0.2).promote
    blocked = paired_test(cand, ref, margin=0.25)
    assert blocked.p_value <= blocked.alpha and not blocked.promote
    assert "difference +0.2200 <= margin +0.2500" in blocked.explain()


def test_only_tasks_both_scored_are_paired() -> None:
    cand, ref = wins_losses(8, 0, 30)
    cand["only-candidate"] = 1.0
    ref.update({"only-reference-1": 0.0, "only-reference-2": 0.0})
    t = paired_test(cand, ref)
    assert (t.n_tasks, t.wins, t.ties) == (30, 8, 22)


def test_no_shared_task_or_a_bad_score_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"no shared task ids \(2 in the candidate, 3 in the reference\)"):
        paired_test({"a": 1.0, "b": 0.0}, {"c": 1.0, "d": 0.0, "e": 1.0})
    with pytest.raises(ValueError, match="task 'b'"):
        paired_test({"a": 1.0, "b": 1.5}, {"a": 1.0, "b": 0.0})


# ---------------------------------------------------------------------------------------------------- many looks


def test_spent_alpha_sums_to_alpha_over_every_look_and_decreases() -> None:
    alpha = 0.05
    looks = np.arange(1, 1_000_001)
    levels = np.array([spent_alpha(alpha, int(k)) for k in looks[:100]])
    partial = float(np.sum(alpha * 6 / (math.pi ** 2 * looks.astype(float) ** 2)))
    assert levels[0] == pytest.approx(alpha * 6 / math.pi ** 2)
    assert np.all(np.diff(levels) < 0)
    assert levels.sum() < partial <= alpha
    assert alpha - partial < alpha * 1e-6 * 1.01  # the tail past look N is about alpha * 6 / (pi^2 N)
    assert partial - levels.sum() == pytest.approx(alpha * 6 / math.pi ** 2 * np.sum(1 / looks[100:].astype(float) ** 2))
    for bad_alpha, bad_look in ((0.0, 1), (1.0, 1), (0.05, 0)):
        with pytest.raises(ValueError, match="spent_alpha"):
            spent_alpha(bad_alpha, bad_look)


def test_a_later_look_is_tested_at_a_smaller_level() -> None:
    cand, ref = wins_losses(9, 1, 50)  # p = 11 / 1024 = 0.0107
    first, fourth = paired_test(cand, ref, look=1), paired_test(cand, ref, look=4)
    assert first.p_value == fourth.p_value
    assert (first.alpha, fourth.alpha) == pytest.approx((spent_alpha(0.05, 1), spent_alpha(0.05, 4)))
    assert first.promote and not fourth.promote
    assert "look 4" in fourth.explain()


# ------------------------------------------------------------------------------------------ the recorded decision


def test_explain_names_the_test_alpha_look_counts_and_p() -> None:
    cand, ref = wins_losses(4, 0, 50)
    line = paired_test(cand, ref).explain()
    assert "\n" not in line
    for part in ("exact sign test on success", "alpha 0.05 spent to 0.0304 at look 1", "4 wins, 0 losses, 46 ties",
                 "50 paired tasks", "difference +0.0800", "[+0.0200, +0.1600]", "p = 0.0625", "not promoted",
                 "p 0.0625 > alpha 0.0304"):
        assert part in line, part
    promoted = paired_test(*wins_losses(12, 1, 50)).explain()
    assert "; promoted: " in promoted and "13 >= 5 discordant" in promoted


def test_the_test_is_a_frozen_record() -> None:
    t = paired_test(*wins_losses(12, 1, 50))
    with pytest.raises(ValidationError):
        t.promote = False  # type: ignore[misc]
    assert PairedTest.model_validate(t.model_dump()) == t


def test_registry_config_carries_the_test_settings() -> None:
    config = RegistryConfig()
    assert (config.alpha, config.min_discordant, config.n_perm) == (0.05, 5, 20000)
    cand, ref = wins_losses(12, 1, 50)
    t = paired_test(cand, ref, alpha=config.alpha, min_discordant=config.min_discordant, margin=config.margin,
                    n_perm=config.n_perm, n_boot=config.n_boot, seed=config.seed)
    assert t.promote
    for bad in ({"alpha": 0.0}, {"alpha": 1.0}, {"min_discordant": -1}, {"n_perm": 0}):
        with pytest.raises(ValidationError):
            RegistryConfig(**bad)
