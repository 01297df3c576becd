"""Evaluation: success rates over episodes (pass@k, verifier best@k), ROC AUC and 95% intervals."""

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

__all__ = [
    "Estimate",
    "accuracy",
    "best_at_k",
    "bootstrap_interval",
    "paired_difference",
    "pass_at_k",
    "roc_auc",
    "success_report",
    "wilson_interval",
]
