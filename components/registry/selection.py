"""Which trained policy a pipeline registers: chosen on the valid split, so that the test split is read for the
registered candidate and not used to pick it.

The candidates are the profile's trained policies that a valid rollout plays. Each is scored by the leaderboard's
headline on its valid episodes (greedy pass@1, the mean over datasets, with its 95% interval); the highest is
chosen, and a tie goes to the stage trained first (the simpler model). The registry then tests the chosen one's
test rollout against the champion or the baseline. A profile without valid rollouts registers its last trained
policy, and the record says that no validation choice was made.

Either way the record counts the trained policies whose test rollouts the leaderboard read in the run: each is a
look at the test split, whichever of them is registered, so a reader can tell how far the reported test figure
was the only one read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from components.envs.episode import Episode
from components.evaluation.leaderboard import Interval


class Candidate(BaseModel):
    """A trained policy, the rollouts that play it, and its figure on valid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str  # the training stage whose merged model it is
    valid_rollout: str
    test_rollout: str
    valid: Interval  # greedy pass@1 on valid, the mean over datasets, with its 95% interval


class Selection(BaseModel):
    """The choice of the model to register: among which candidates, on which split, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    on: Literal["valid"] | None  # the split the choice was read off; None: no choice was made
    candidates: list[Candidate] = Field(default_factory=list)  # in training order
    chosen: str  # the registered stage
    test_rollout: str  # its test rollout: what the registry compares
    not_candidates: list[str] = Field(default_factory=list)  # trained policies no valid rollout plays
    test_reads: int  # trained policies of the profile read on test in this run (looks at the test split)
    reason: str


def valid_figure(rollout: str, episodes: Sequence[Episode]) -> Interval:
    """The leaderboard's headline of a valid rollout: greedy pass@1, the mean over datasets, with its interval."""
    from components.evaluation.leaderboard import leaderboard

    # the profile's `split:` line says what the rollout was meant to play; its episodes say what they played
    held = [e for e in episodes if e.split != "valid"]
    if held:
        raise ValueError(f"rollout {rollout!r} chooses the model to register on valid, and its episode "
                         f"{held[0].episode_id!r} of task {held[0].task_id!r} is from the {held[0].split!r} split"
                         + (f" ({len(held) - 1} more)" if len(held) > 1 else ""))
    headline = leaderboard({rollout: episodes}).row(rollout).success
    if headline is None:
        raise ValueError(f"rollout {rollout!r} has no greedy episodes (first sample at temperature 0): the model to "
                         "register is chosen on greedy pass@1 on valid; set its plan.first_temperature: 0")
    return headline


def _looks(test_reads: int) -> str:
    return (f"the leaderboard read {test_reads} trained polic{'y' if test_reads == 1 else 'ies'} of this profile on "
            f"test in this run: {test_reads} look{'' if test_reads == 1 else 's'} at the test split")


def select(candidates: Sequence[Candidate], test_reads: int, not_candidates: Sequence[str] = ()) -> Selection:
    """The candidate (in training order) with the highest greedy pass@1 on valid; a tie goes to the first."""
    if not candidates:
        raise ValueError("select: no candidate played on valid")
    best = max(candidates, key=lambda c: c.valid.value)  # max keeps the first of equal keys: the one trained first
    tied = [c.stage for c in candidates if c.valid.value == best.valid.value and c is not best]
    others = "; ".join(f"{c.stage} {c.valid.cell()}" for c in candidates if c is not best)
    reason = (f"chosen on valid: {best.stage}, greedy pass@1 (mean over datasets) {best.valid.cell()} over "
              f"{best.valid.n} valid tasks, the highest of {len(candidates)} candidate(s)"
              + (f" (against {others})" if others else "")
              + (f"; tied with {', '.join(tied)}, which were trained later: the first trained is kept" if tied else "")
              + (f"; not played on valid, so not candidates: {', '.join(not_candidates)}" if not_candidates else "")
              + f". Its test rollout {best.test_rollout} is the figure reported; {_looks(test_reads)}")
    return Selection(on="valid", candidates=list(candidates), chosen=best.stage, test_rollout=best.test_rollout,
                     not_candidates=list(not_candidates), test_reads=test_reads, reason=reason)


def unselected(stage: str, test_rollout: str, test_reads: int) -> Selection:
    """The record of a registration made without a choice on valid: the last trained policy."""
    reason = (f"no validation choice was made: no valid rollout plays a trained policy of this profile, so the last "
              f"one trained, {stage}, is registered on its test rollout {test_rollout}; {_looks(test_reads)}")
    return Selection(on=None, chosen=stage, test_rollout=test_rollout, test_reads=test_reads, reason=reason)
