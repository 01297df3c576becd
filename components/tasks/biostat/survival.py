"""Kaplan-Meier and log-rank with numpy only; each function's source is embedded in reference_code.

Conventions (stated in the prompts): S(t) is right-continuous (events at t count at t); the median is the
smallest observed time with S(t) <= 0.5; the log-rank test uses the hypergeometric variance with ties.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

IMPORTS = ("import numpy as np", "import pandas as pd", "from scipy import stats")


def km_curve(time, event):
    """(distinct event times, S just after each) for right-censored data."""
    time = np.asarray(time, dtype=float)
    event = np.asarray(event, dtype=int)
    uniq = np.unique(time[event == 1])
    surv, s = [], 1.0
    for t in uniq:
        at_risk = np.sum(time >= t)
        deaths = np.sum((time == t) & (event == 1))
        s *= 1.0 - deaths / at_risk
        surv.append(s)
    return uniq, np.array(surv)


def _subset(path, group_col, group):
    df = pd.read_csv(path)
    if group is not None:
        df = df[df[group_col] == group]
    return df["time"].to_numpy(dtype=float), df["event"].to_numpy(dtype=int)


def km_median(path, group_col, group):
    times, surv = km_curve(*_subset(path, group_col, group))
    hit = np.nonzero(surv <= 0.5)[0]
    return float(times[hit[0]])


def km_survival_at(path, group_col, group, t):
    times, surv = km_curve(*_subset(path, group_col, group))
    before = surv[times <= t]
    return float(before[-1]) if len(before) else 1.0


def logrank(path, group_col, group_a, group_b, stat):
    """Two-group log-rank chi-square (1 df) or its p-value."""
    df = pd.read_csv(path)
    df = df[df[group_col].isin([group_a, group_b])]
    time = df["time"].to_numpy(dtype=float)
    event = df["event"].to_numpy(dtype=int)
    in_a = (df[group_col] == group_a).to_numpy()
    obs_minus_exp, var = 0.0, 0.0
    for t in np.unique(time[event == 1]):
        at_risk = time >= t
        n, n_a = at_risk.sum(), (at_risk & in_a).sum()
        died = (time == t) & (event == 1)
        d, d_a = died.sum(), (died & in_a).sum()
        obs_minus_exp += d_a - d * n_a / n
        if n > 1:
            var += d * (n_a / n) * (1 - n_a / n) * (n - d) / (n - 1)
    chi2 = obs_minus_exp**2 / var
    return float(chi2 if stat == "statistic" else stats.chi2.sf(chi2, 1))
