"""Reference computations over a clinical cohort CSV; each function's source is embedded in reference_code.

Every function reads the CSV itself, drops rows with a missing value in any column it uses, and returns a
plain Python number so json.dumps prints it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

IMPORTS = ("import numpy as np", "import pandas as pd", "from scipy import stats")


def two_sample_ttest(path, value, group_col, group_a, group_b, equal_var, stat):
    df = pd.read_csv(path).dropna(subset=[value, group_col])
    a = df.loc[df[group_col] == group_a, value].to_numpy(dtype=float)
    b = df.loc[df[group_col] == group_b, value].to_numpy(dtype=float)
    res = stats.ttest_ind(a, b, equal_var=equal_var)
    return float(res.statistic if stat == "statistic" else res.pvalue)


def chi2_independence(path, row_col, col_col, correction, stat):
    df = pd.read_csv(path).dropna(subset=[row_col, col_col])
    table = pd.crosstab(df[row_col], df[col_col]).to_numpy()
    chi2, p, _, _ = stats.chi2_contingency(table, correction=correction)
    return float(chi2 if stat == "statistic" else p)


def mann_whitney(path, value, group_col, group_a, group_b, stat):
    df = pd.read_csv(path).dropna(subset=[value, group_col])
    a = df.loc[df[group_col] == group_a, value].to_numpy(dtype=float)
    b = df.loc[df[group_col] == group_b, value].to_numpy(dtype=float)
    res = stats.mannwhitneyu(a, b, alternative="two-sided", use_continuity=True, method="asymptotic")
    return float(res.statistic if stat == "statistic" else res.pvalue)


def correlation(path, x, y, method, stat):
    df = pd.read_csv(path).dropna(subset=[x, y])
    fn = stats.pearsonr if method == "pearson" else stats.spearmanr
    res = fn(df[x].to_numpy(dtype=float), df[y].to_numpy(dtype=float))
    return float(res.statistic if stat == "statistic" else res.pvalue)


def ols_coefficient(path, outcome, predictors, term):
    df = pd.read_csv(path).dropna(subset=[outcome, *predictors])
    design = np.column_stack([np.ones(len(df))] + [df[p].to_numpy(dtype=float) for p in predictors])
    coef, *_ = np.linalg.lstsq(design, df[outcome].to_numpy(dtype=float), rcond=None)
    names = ["intercept", *predictors]
    return float(coef[names.index(term)])


def filtered_summary(path, value, summary, filters):
    """summary of `value` over rows meeting all (column, op, constant) filters; 'count' counts those rows."""
    df = pd.read_csv(path)
    ops = {"==": lambda s, c: s == c, "!=": lambda s, c: s != c, ">=": lambda s, c: s >= c,
           "<": lambda s, c: s < c, ">": lambda s, c: s > c, "<=": lambda s, c: s <= c}
    mask = pd.Series(True, index=df.index)
    for col, op, const in filters:
        mask &= ops[op](df[col], const) & df[col].notna()
    if summary == "count":
        return int(mask.sum())
    vals = df.loc[mask, value].dropna().to_numpy(dtype=float)
    if len(vals) < 2:
        return float("nan")  # too few rows for a summary; generators redraw such questions
    if summary == "mean":
        return float(np.mean(vals))
    if summary == "median":
        return float(np.median(vals))
    return float(np.std(vals, ddof=1))
