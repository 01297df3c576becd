"""Synthetic clinical CSVs: a trial cohort with realistic columns and gaps, and survival follow-up data.

Values are written with fixed formatting so the same rng state always yields byte-identical files.
"""

from __future__ import annotations

import math
import random

COHORT_COLUMNS = ("patient_id", "age", "sex", "arm", "bmi", "sbp", "ldl", "hba1c", "smoker", "diabetes", "response")
NUMERIC = ("age", "bmi", "sbp", "ldl", "hba1c")
MISSING_RATE = 0.06  # applied to bmi, sbp, ldl, hba1c independently


def _maybe(rng: random.Random, text: str) -> str:
    return "" if rng.random() < MISSING_RATE else text


def cohort_csv(rng: random.Random, n_rows: int) -> str:
    """A two-arm trial cohort: sbp rises with age and bmi, the treatment arm lowers sbp and ldl a little."""
    effect_sbp = rng.uniform(-8, 0)
    effect_ldl = rng.uniform(-20, 0)
    p_resp = (rng.uniform(0.2, 0.45), rng.uniform(0.3, 0.65))
    lines = [",".join(COHORT_COLUMNS)]
    for i in range(n_rows):
        age = rng.randint(35, 85)
        sex = rng.choice("FM")
        treated = rng.random() < 0.5
        bmi = rng.gauss(28, 4.5)
        smoker = int(rng.random() < 0.22)
        diabetes = int(rng.random() < 0.15 + 0.01 * max(0.0, bmi - 28))
        sbp = 95 + 0.45 * age + 0.8 * (bmi - 28) + (4 if sex == "M" else 0) + (effect_sbp if treated else 0)
        sbp += rng.gauss(0, 11)
        ldl = 130 + 0.3 * (age - 60) + 8 * smoker + (effect_ldl if treated else 0) + rng.gauss(0, 28)
        hba1c = (7.4 if diabetes else 5.4) + 0.03 * (bmi - 28) + rng.gauss(0, 0.5)
        response = "yes" if rng.random() < p_resp[treated] else "no"
        lines.append(",".join((
            f"P{i + 1:04d}", str(age), sex, "treatment" if treated else "placebo",
            _maybe(rng, f"{bmi:.1f}"), _maybe(rng, str(round(sbp))), _maybe(rng, f"{ldl:.1f}"),
            _maybe(rng, f"{hba1c:.1f}"), str(smoker), str(diabetes), response,
        )))
    return "\n".join(lines) + "\n"


SURVIVAL_GROUPS = (("treatment", "control"), ("low_risk", "high_risk"), ("drug_A", "drug_B"))


def survival_csv(rng: random.Random, n_per_group: int, groups: tuple[str, str]) -> str:
    """Exponential event times in days (integers, so ties occur) with uniform censoring; every group's
    Kaplan-Meier curve must fall to 0.5, which callers check and redraw otherwise."""
    lines = ["patient_id,time,event,group"]
    median_base = rng.uniform(150, 600)
    hr = rng.uniform(0.4, 1.2)
    follow = median_base * rng.uniform(2.5, 4.0)
    pid = 0
    for g, name in enumerate(groups):
        rate = math.log(2) / median_base * (hr if g == 0 else 1.0)
        for _ in range(n_per_group):
            pid += 1
            t_event = rng.expovariate(rate)
            t_cens = rng.uniform(0.2, 1.0) * follow
            t = max(1, round(min(t_event, t_cens)))
            lines.append(f"S{pid:04d},{t},{int(t_event <= t_cens)},{name}")
    return "\n".join(lines) + "\n"
