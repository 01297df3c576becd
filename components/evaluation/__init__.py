"""Evaluation: success rates over episodes (pass@k, verifier best@k), ROC AUC and 95% intervals (metrics),
and reports over rollouts (report)."""
