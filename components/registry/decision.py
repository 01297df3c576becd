"""The decision rule, pure: whether a candidate can be paired with a reference, on which tasks, and whether the paired
test on them supports promoting it.

Pairing, in this order; the first check that fails keeps the candidate a challenger and the reason says why:
1. both evaluations are on the same metric;
2. both record their tasks' content hashes and their conditions (versions registered before these were do not);
3. their conditions are equal (every one that differs is named);
4. the task ids both hold whose content hashes are equal are paired; shared ids that hold different tasks are left
   out and counted, and with none left there is nothing to pair.
The paired tasks are tested with `paired_test` (components.registry.significance) at the level of this look: the
caller counts the candidates already tested against the same reference on any of the paired tasks (same id, same
content hash; `prior_looks`), and look k is tested at alpha · 6 / (π² k²). Any shared task counts, not only the same
set: a candidate scored on one task fewer (an unfinished episode, another --limit) looks at the same evidence again.

The registry (components.registry.store) and `medgym eval compare` both call `decide`: a promotion and a comparison
a person runs are the same test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from components.registry.conditions import differences
from components.registry.content import tasks_digest
from components.registry.evaluation import Evaluation
from components.registry.significance import PairedTest, paired_test

Role = Literal["champion", "baseline", "reference"]


class RegistryConfig(BaseModel):
    """Where models are registered and what a promotion needs: a profile's `registry` section."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="medgym-agent", min_length=1, description="the registered model's name")
    margin: float = Field(default=0.0, description="the observed mean candidate − reference must also exceed it")
    champion_alias: str = "champion"
    challenger_alias: str = "challenger"
    # the same defaults as `components.evaluation.report.compare`, so a registry decision and an eval report agree
    n_boot: int = Field(default=2000, ge=1)
    seed: int = 0
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0,
                         description="the one-sided level of the paired test, spent over the looks at one champion")
    min_discordant: int = Field(default=5, ge=0, description="tasks on which the two disagree, needed before any promotion")
    n_perm: int = Field(default=20000, ge=1, description="sign flips of the Monte Carlo permutation test (fractional scores)")


def describe(against: Role, version: str | None = None) -> str:
    """How a reason names the reference: 'champion v2', 'the baseline', 'the reference'."""
    return f"champion v{version}" if against == "champion" else f"the {against}"


class Comparison(BaseModel):
    """candidate − reference on the tasks they were paired on, and the paired test behind the verdict."""

    against: Role
    against_version: str | None = None  # the champion's version; None otherwise
    against_reference: str | None = None  # where the reference's episodes are
    tasks: list[str]  # the paired task ids
    tasks_digest: str  # of the paired tasks and their content: tagged, so a later look on the same set is counted unread
    candidate_only: int  # task ids only the candidate holds
    reference_only: int
    content_differs: int  # task ids both hold for different tasks (their content hashes differ): left out
    test: PairedTest

    @property
    def supported(self) -> bool:
        return self.test.promote

    @property
    def who(self) -> str:
        return describe(self.against, self.against_version)


def _unpairable(candidate: Evaluation, reference: Evaluation, who: str) -> str | None:
    """Why the two cannot be paired at all (checks 1 to 3), or None."""
    if reference.metric != candidate.metric:  # a per-task accuracy paired with a per-task F1 would mean nothing
        return (f"the candidate was evaluated on {candidate.metric}, {who} on {reference.metric}: not comparable, so "
                "no promotion")
    for name, e in (("the candidate", candidate), (who, reference)):
        missing = [what for what, v in (("task content hashes", e.task_hashes), ("conditions", e.conditions))
                   if v is None]
        if missing:
            return (f"{name}'s evaluation records no {' and no '.join(missing)} (a version registered before they "
                    "were recorded has none): its tasks cannot be matched by content, so no promotion; evaluate it "
                    "again")
    diff = differences(candidate.conditions or {}, reference.conditions or {})
    if diff:
        return f"conditions differ (candidate vs {who}): {', '.join(diff)}: not comparable, so no promotion"
    return None


def decide(candidate: Evaluation, reference: Evaluation, against: Role, config: RegistryConfig, *,
           version: str | None = None, prior_looks: Callable[[Mapping[str, str]], int] = lambda paired: 0
           ) -> tuple[Comparison | None, str]:
    """The comparison and its reason; None and the reason when the two cannot be paired. `prior_looks(paired)`
    counts the candidates tested before against this reference on any of `paired` (task id -> content hash)."""
    who = describe(against, version)
    problem = _unpairable(candidate, reference, who)
    if problem:
        return None, problem
    a, b = candidate.task_hashes or {}, reference.task_hashes or {}
    shared = sorted(set(a) & set(b))
    if not shared:
        return None, (f"the candidate shares no task with {who}'s evaluation ({len(a)} vs {len(b)} tasks): evaluate "
                      "both on the same split, limit and seed")
    paired = [t for t in shared if a[t] == b[t]]
    if not paired:
        return None, (f"{len(shared)} shared task ids hold different tasks (content hash differs), e.g. {shared[0]}: "
                      "no task to pair on, so no promotion")
    digest = tasks_digest(a, paired)
    test = paired_test({t: candidate.task_success[t] for t in paired}, {t: reference.task_success[t] for t in paired},
                       metric=candidate.metric, alpha=config.alpha, look=prior_looks({t: a[t] for t in paired}) + 1,
                       min_discordant=config.min_discordant, margin=config.margin, n_perm=config.n_perm,
                       n_boot=config.n_boot, seed=config.seed)
    comparison = Comparison(against=against, against_version=version, against_reference=reference.reference,
                            tasks=paired, tasks_digest=digest, candidate_only=len(set(a) - set(b)),
                            reference_only=len(set(b) - set(a)), content_differs=len(shared) - len(paired), test=test)
    return comparison, explain(comparison)


def explain(c: Comparison) -> str:
    t = c.test
    left_out = f", {c.content_differs} shared ids holding different tasks left out" if c.content_differs else ""
    return (f"candidate − {c.who} {t.metric} over {t.n_tasks} paired tasks ({c.candidate_only} candidate-only, {c.reference_only} "
            f"{c.against}-only{left_out}); {t.explain()}. Look {t.look} against {c.who} on any of these {t.n_tasks} "
            f"tasks: alpha {t.nominal_alpha:g} spent as {t.nominal_alpha:g}·6/(π²·{t.look ** 2}) = {t.alpha:.4f}; only "
            "tasks no earlier candidate was tested on against it start the count afresh")
