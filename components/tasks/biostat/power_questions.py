"""N-PowerAI-style sample size / power questions: a researcher's story, then the explicit conventions, then the ask.

Each builder draws one question from `rng` and returns (prompt, answer, call) where `call` is the
power-module function name and its arguments; the generator evaluates and embeds that same function.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from components.tasks.biostat import power

# continuous outcomes: (outcome, unit, population, intervention, control, reference mean range, sd range, direction)
CONTINUOUS = (
    ("systolic blood pressure", "mmHg", "adults with stage 1 hypertension", "a Nordic diet", "their usual diet",
     (120, 145), (6, 18), "lower"),
    ("LDL cholesterol", "mg/dL", "adults with hypercholesterolaemia", "a plant-sterol supplement", "placebo",
     (120, 170), (15, 35), "lower"),
    ("HbA1c", "%", "adults with type 2 diabetes", "a structured exercise programme", "usual care",
     (7.0, 9.0), (0.6, 1.5), "lower"),
    ("six-minute walk distance", "metres", "patients recovering from cardiac surgery", "home-based rehabilitation",
     "standard discharge advice", (320, 450), (40, 110), "raise"),
    ("pain score on a 0-100 visual analogue scale", "points", "patients with chronic low back pain",
     "a mindfulness course", "a waiting list", (45, 70), (12, 25), "lower"),
    ("body weight", "kg", "adults with obesity", "a meal-replacement programme", "dietary advice alone",
     (95, 120), (8, 20), "lower"),
    ("forced expiratory volume in one second (FEV1)", "litres", "adults with moderate asthma", "a new inhaler",
     "the standard inhaler", (2.0, 3.0), (0.3, 0.8), "raise"),
)

# binary outcomes: (event, population, intervention, control, reference proportion range, direction)
BINARY = (
    ("30-day hospital readmission", "patients discharged after heart failure", "a nurse-led follow-up call",
     "standard discharge", (0.15, 0.30), "lower"),
    ("smoking abstinence at 6 months", "adult smokers who want to quit", "varenicline plus counselling",
     "counselling alone", (0.10, 0.25), "raise"),
    ("surgical site infection", "patients undergoing colorectal surgery", "a chlorhexidine skin preparation",
     "povidone-iodine", (0.08, 0.18), "lower"),
    ("HbA1c below 7% at one year", "adults with type 2 diabetes", "a telemonitoring programme", "usual care",
     (0.30, 0.50), "raise"),
    ("post-operative nausea", "patients undergoing laparoscopic surgery", "prophylactic dexamethasone",
     "no prophylaxis", (0.25, 0.45), "lower"),
    ("influenza-like illness over the winter", "care-home residents", "a high-dose influenza vaccine",
     "the standard-dose vaccine", (0.10, 0.22), "lower"),
)

ALPHAS = (0.01, 0.05, 0.05, 0.05, 0.1)
POWERS = (0.8, 0.8, 0.85, 0.9, 0.9, 0.95)
T_RULE = ("Compute power from the noncentral t distribution (the exact t-test power, as statsmodels' "
          "TTestPower/TTestIndPower do).")
H_RULE = ("Use Cohen's effect size h = 2*asin(sqrt(p_a)) - 2*asin(sqrt(p_b)) with the normal approximation "
          "(as statsmodels' proportion_effectsize with NormalIndPower does).")
POWER_ASK = "What is the power of the test? Give it as a number between 0 and 1 (not a percentage), unrounded."


@dataclass(frozen=True)
class PowerQuestion:
    prompt: str
    func: str  # name of a function in components.tasks.biostat.power
    kwargs: dict[str, Any]  # its full arguments, including n/n1 or power
    answer: int | float
    target: str  # size | power


def _researcher(rng: random.Random) -> tuple[str, str]:
    return rng.choice((("Dr. Lee", "she"), ("Dr. Okafor", "he"), ("Dr. Novak", "she"), ("Dr. Haddad", "he"),
                       ("Dr. Moreau", "she"), ("Dr. Tanaka", "he")))


def _sided(rng: random.Random, direction: str) -> tuple[str, str]:
    """(statsmodels alternative, wording); one-sided tests point the way the researcher hypothesises."""
    if rng.random() < 0.6:
        return "two-sided", "a two-sided test"
    word = "lower" if direction == "lower" else "higher"
    return "larger", f"a one-sided test (alternative: the true value is {word} than under the null hypothesis)"


def settle(rng: random.Random, func: str, params: dict[str, Any], size_key: str, n_min: int,
           target: str) -> tuple[dict[str, Any], int | float] | None:
    """Complete the arguments for the asked target and compute the answer, or None when the draw is ill posed.

    Size answers whose power at n is within 1e-4 of the target are refused: there ceil(solve_power) and the
    integer search could disagree by one. Power answers are kept between 0.1 and 0.98 to be informative.
    """
    fn = getattr(power, func)
    if target == "size":
        goal = rng.choice(POWERS)
        n = fn(**params, power=goal)
        if not n_min <= n <= 5000 or fn(**params, **{size_key: n}) - goal <= 1e-4:
            return None
        return {**params, "power": goal}, n
    n80 = fn(**params, power=0.8)
    if n80 > 5000:
        return None
    n = rng.randint(max(n_min, int(n80 * 0.3)), max(n_min + 1, int(n80 * 1.4)))
    p = fn(**params, **{size_key: n})
    if not 0.1 <= p <= 0.98:
        return None
    return {**params, size_key: n}, p


def _ask(target: str, alpha: float, kw: dict[str, Any], sided: str, rule: str, unit_word: str, group_note: str) -> str:
    conventions = f"Use {sided} at significance level alpha = {alpha}. {rule}"
    if target == "size":
        return (f"{conventions} How large a sample should the study include to reach a power of "
                f"{kw['power']:.0%}? Answer with the smallest whole number of {unit_word}{group_note} "
                f"that reaches this power.")
    return f"{conventions} {POWER_ASK}"


def one_sample_t(rng: random.Random, target: str) -> PowerQuestion:
    while True:
        outcome, unit, pop, interv, _, mrange, srange, direction = rng.choice(CONTINUOUS)
        digits = 1 if mrange[1] < 20 else 0
        mu0 = round(rng.uniform(*mrange), digits)
        sd = round(rng.uniform(*srange), 1 if srange[1] < 20 else 0) or 1.0
        d = rng.uniform(0.15, 1.2)
        mu1 = round(mu0 - d * sd if direction == "lower" else mu0 + d * sd, digits + 1)
        alpha = rng.choice(ALPHAS)
        alt, sided = _sided(rng, direction)
        params = {"mean_null": mu0, "mean_alt": mu1, "sd": sd, "alpha": alpha, "alternative": alt}
        got = settle(rng, "one_sample_t", params, "n", 3, target)
        if got is None:
            continue
        kw, ans = got
        name, pron = _researcher(rng)
        verb = "lower" if direction == "lower" else "raise"
        story = (f"{name} plans a study of {outcome} in {pop} who will receive {interv}. From the literature, "
                 f"the average {outcome} in this population is {mu0} {unit}. {pron.capitalize()} hypothesizes "
                 f"that {interv} will {verb} it, and assumes that the mean {outcome} in the sample will be "
                 f"{mu1} {unit} with a standard deviation of {sd} {unit}. The study will be analysed with a "
                 f"one-sample t-test against the literature value {mu0}.")
        if target == "power":
            story += f" {pron.capitalize()} can recruit {kw['n']} participants."
        return PowerQuestion(f"{story} {_ask(target, alpha, kw, sided, T_RULE, 'participants', '')}",
                             "one_sample_t", kw, ans, target)


def paired_t(rng: random.Random, target: str) -> PowerQuestion:
    while True:
        outcome, unit, pop, interv, _, mrange, srange, direction = rng.choice(CONTINUOUS)
        digits = 1 if mrange[1] < 20 else 0
        sd = round(rng.uniform(*srange) * 0.8, 1 if srange[1] < 20 else 0) or 1.0
        d = rng.uniform(0.15, 1.2)
        change = round(d * sd, digits + 1)
        alpha = rng.choice(ALPHAS)
        alt, sided = _sided(rng, direction)
        signed = -change if direction == "lower" else change
        params = {"mean_null": 0.0, "mean_alt": signed, "sd": sd, "alpha": alpha, "alternative": alt}
        got = settle(rng, "one_sample_t", params, "n", 3, target)
        if got is None:
            continue
        kw, ans = got
        name, pron = _researcher(rng)
        story = (f"{name} will measure {outcome} in {pop} before and after 12 weeks of {interv}, in the same "
                 f"participants. {pron.capitalize()} expects a mean within-person change (after minus before) "
                 f"of {signed} {unit}, with a standard deviation of the changes of {sd} {unit}. The data will "
                 f"be analysed with a paired t-test of the null hypothesis that the mean change is 0.")
        if target == "power":
            story += f" {pron.capitalize()} can enrol {kw['n']} participants (pairs)."
        return PowerQuestion(f"{story} {_ask(target, alpha, kw, sided, T_RULE, 'participants (pairs)', '')}",
                             "one_sample_t", kw, ans, target)


def two_sample_t(rng: random.Random, target: str) -> PowerQuestion:
    while True:
        outcome, unit, pop, interv, control, mrange, srange, direction = rng.choice(CONTINUOUS)
        digits = 1 if mrange[1] < 20 else 0
        mu2 = round(rng.uniform(*mrange), digits)
        sd = round(rng.uniform(*srange), 1 if srange[1] < 20 else 0) or 1.0
        d = rng.uniform(0.15, 1.2)
        mu1 = round(mu2 - d * sd if direction == "lower" else mu2 + d * sd, digits + 1)
        alpha = rng.choice(ALPHAS)
        alt, sided = _sided(rng, direction)
        ratio = rng.choice((1, 1, 1, 2, 3))
        params = {"mean1": mu1, "mean2": mu2, "sd": sd, "alpha": alpha, "alternative": alt, "ratio": ratio}
        got = settle(rng, "two_sample_t", params, "n1", 3, target)
        if got is None:
            continue
        kw, ans = got
        name, pron = _researcher(rng)
        alloc = ("Both groups will have the same size." if ratio == 1 else
                 f"The group receiving {control} will have {ratio} times as many participants as the group "
                 f"receiving {interv}.")
        story = (f"{name} plans a randomised trial in {pop} comparing {interv} with {control}. "
                 f"{pron.capitalize()} assumes a mean {outcome} of {mu1} {unit} with {interv} and {mu2} {unit} "
                 f"with {control}, with a common standard deviation of {sd} {unit}. {alloc} The groups will be "
                 f"compared with a two-sample t-test assuming equal variances.")
        if target == "power":
            n2 = kw["n1"] * ratio
            story += (f" {pron.capitalize()} can recruit {kw['n1']} participants in the group receiving {interv} and "
                      f"{n2} in the group receiving {control}.")
        unit_word = "participants per group" if ratio == 1 else "participants"
        note = "" if ratio == 1 else f" in the group receiving {interv}"
        return PowerQuestion(f"{story} {_ask(target, alpha, kw, sided, T_RULE, unit_word, note)}",
                             "two_sample_t", kw, ans, target)


def two_proportions(rng: random.Random, target: str) -> PowerQuestion:
    while True:
        event, pop, interv, control, prange, direction = rng.choice(BINARY)
        p2 = round(rng.uniform(*prange), 2)
        delta = rng.uniform(0.04, 0.25)
        p1 = round(p2 - delta * p2 * 2 if direction == "lower" else p2 + delta, 2)
        if not 0.01 <= p1 <= 0.95 or p1 == p2:
            continue
        alpha = rng.choice(ALPHAS)
        alt, sided = _sided(rng, direction)
        ratio = rng.choice((1, 1, 1, 2))
        params = {"p1": p1, "p2": p2, "alpha": alpha, "alternative": alt, "ratio": ratio}
        got = settle(rng, "two_proportions", params, "n1", 5, target)
        if got is None:
            continue
        kw, ans = got
        name, pron = _researcher(rng)
        alloc = ("Both groups will have the same size." if ratio == 1 else
                 f"The group receiving {control} will have {ratio} times as many participants as the group "
                 f"receiving {interv}.")
        story = (f"{name} plans a randomised trial in {pop} comparing {interv} with {control}. The expected "
                 f"proportion with {event} is {p2} with {control}; {pron} hypothesizes it will be {p1} with "
                 f"{interv} (p_a = {p1}, p_b = {p2}). {alloc}")
        if target == "power":
            story += (f" {pron.capitalize()} can recruit {kw['n1']} participants in the group receiving {interv} and "
                      f"{kw['n1'] * ratio} in the group receiving {control}.")
        unit_word = "participants per group" if ratio == 1 else "participants"
        note = "" if ratio == 1 else f" in the group receiving {interv}"
        return PowerQuestion(f"{story} {_ask(target, alpha, kw, sided, H_RULE, unit_word, note)}",
                             "two_proportions", kw, ans, target)


def one_proportion(rng: random.Random, target: str) -> PowerQuestion:
    while True:
        event, pop, interv, _, prange, direction = rng.choice(BINARY)
        p0 = round(rng.uniform(*prange), 2)
        delta = rng.uniform(0.04, 0.25)
        p1 = round(p0 - delta * p0 * 2 if direction == "lower" else p0 + delta, 2)
        if not 0.01 <= p1 <= 0.95 or p1 == p0:
            continue
        alpha = rng.choice(ALPHAS)
        alt, sided = _sided(rng, direction)
        params = {"p_null": p0, "p_alt": p1, "alpha": alpha, "alternative": alt}
        got = settle(rng, "one_proportion", params, "n", 5, target)
        if got is None:
            continue
        kw, ans = got
        name, pron = _researcher(rng)
        story = (f"Registry data show that the proportion of {pop} with {event} is {p0}. {name} will give "
                 f"{interv} to a single group of such patients and hypothesizes that the proportion will be "
                 f"{p1} (p_a = {p1}, tested against p_b = {p0}). The result will be compared with {p0} using "
                 f"a one-sample test of a proportion.")
        if target == "power":
            story += f" {pron.capitalize()} can enrol {kw['n']} patients."
        return PowerQuestion(f"{story} {_ask(target, alpha, kw, sided, H_RULE, 'patients', '')}",
                             "one_proportion", kw, ans, target)


BUILDERS = {
    "biostat_power_one_sample_t": one_sample_t,
    "biostat_power_paired_t": paired_t,
    "biostat_power_two_sample_t": two_sample_t,
    "biostat_power_two_proportions": two_proportions,
    "biostat_power_one_proportion": one_proportion,
}
