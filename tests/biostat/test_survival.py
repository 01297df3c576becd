"""Kaplan-Meier and log-rank reference functions: a hand-worked example and statsmodels as a second opinion."""

from __future__ import annotations

import random

import numpy as np
import pytest
from statsmodels.duration.survfunc import SurvfuncRight, survdiff

from components.tasks.biostat import data, survival


def _write(tmp_path, rows):
    p = tmp_path / "s.csv"
    p.write_text("patient_id,time,event,group\n" + "".join(f"S{i},{t},{e},{g}\n" for i, (t, e, g) in enumerate(rows)))
    return str(p)


def test_km_hand_worked(tmp_path):
    # times 2,3+,4,4,6,7+ ; S(2)=5/6, S(4)=5/6*(1-2/4)=5/12 <= 0.5 -> median 4; S(6)=5/12*(1-1/2)=5/24
    path = _write(tmp_path, [(2, 1, "a"), (3, 0, "a"), (4, 1, "a"), (4, 1, "a"), (6, 1, "a"), (7, 0, "a")])
    assert survival.km_median(path, "group", None) == 4.0
    assert survival.km_survival_at(path, "group", "a", 3) == pytest.approx(5 / 6)
    assert survival.km_survival_at(path, "group", "a", 4) == pytest.approx(5 / 12)
    assert survival.km_survival_at(path, "group", "a", 6.5) == pytest.approx(5 / 24)
    assert survival.km_survival_at(path, "group", "a", 1) == 1.0


def test_logrank_hand_worked(tmp_path):
    # a: 1, 3 ; b: 2+, 4. At t=1: n=4, n_a=2, d=1 -> O-E = 0.5, V = 0.25; t=3: n=2 (a:3, b:4), n_a=1, d=1 ->
    # O-E += 0.5, V += 0.25; t=4: n=1, n_a=0 -> O-E += 0. chi2 = 1 / 0.5 = 2
    path = _write(tmp_path, [(1, 1, "a"), (3, 1, "a"), (2, 0, "b"), (4, 1, "b")])
    assert survival.logrank(path, "group", "a", "b", "statistic") == pytest.approx(2.0)
    assert survival.logrank(path, "group", "a", "b", "pvalue") == pytest.approx(0.1572992, abs=1e-6)


def test_km_and_logrank_agree_with_statsmodels_on_synthetic_data(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text(data.survival_csv(random.Random(3), 60, ("treatment", "control")))
    import pandas as pd

    df = pd.read_csv(p)
    sub = df[df.group == "control"]
    sf = SurvfuncRight(sub.time.to_numpy(float), sub.event.to_numpy(int))
    times, surv = survival.km_curve(sub.time, sub.event)
    np.testing.assert_allclose(surv, sf.surv_prob, rtol=1e-12)
    np.testing.assert_allclose(times, sf.surv_times)
    chi2, pval = survdiff(df.time.to_numpy(float), df.event.to_numpy(int), df.group.to_numpy())
    assert survival.logrank(str(p), "group", "treatment", "control", "statistic") == pytest.approx(chi2, rel=1e-9)
    assert survival.logrank(str(p), "group", "treatment", "control", "pvalue") == pytest.approx(pval, rel=1e-9)
