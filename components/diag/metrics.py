"""End-to-end diagnostic metrics, as DiagGym reports them: average turns, exam precision, recall and F1, and
diagnosis accuracy.

Exam precision and recall compare the distinct exams an agent ordered with the case's key exams (both under their
credit names, see components.diag.grading). F1 is reported two ways, because DiagGym's tables use both: the mean
of per-case F1 (`f1_mean`), and the F1 of the mean precision and mean recall (`f1_of_means`). Conventions: nothing
ordered has precision 0; a case without key exams has recall 1 (and precision 1 only if nothing was ordered).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from components.envs.episode import Episode, ExamScore


class CaseOutcome(BaseModel):
    case_id: str
    correct: bool
    turns: int
    exams: ExamScore


class DiagSummary(BaseModel):
    n: int
    accuracy: float
    avg_turns: float
    precision: float
    recall: float
    f1_mean: float  # the mean of per-case F1
    f1_of_means: float  # the F1 of mean precision and mean recall


def f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def exam_scores(ordered: Iterable[str], key: Iterable[str]) -> ExamScore:
    got, want = set(ordered), set(key)
    hits = len(got & want)
    if not want:
        precision, recall = (0.0 if got else 1.0), 1.0
    else:
        precision, recall = (hits / len(got) if got else 0.0), hits / len(want)
    return ExamScore(precision=precision, recall=recall, f1=f1(precision, recall), ordered=len(got), key=len(want),
                     hits=hits)


def summarize(outcomes: Sequence[CaseOutcome]) -> DiagSummary:
    n = len(outcomes)
    if n == 0:
        return DiagSummary(n=0, accuracy=0.0, avg_turns=0.0, precision=0.0, recall=0.0, f1_mean=0.0, f1_of_means=0.0)
    precision = sum(o.exams.precision for o in outcomes) / n
    recall = sum(o.exams.recall for o in outcomes) / n
    return DiagSummary(n=n, accuracy=sum(o.correct for o in outcomes) / n, avg_turns=sum(o.turns for o in outcomes) / n,
                       precision=precision, recall=recall, f1_mean=sum(o.exams.f1 for o in outcomes) / n,
                       f1_of_means=f1(precision, recall))


def outcome_of(episode: Episode) -> CaseOutcome:
    """A finished diagnostic episode's outcome, from what the environment recorded in `Episode.diag`."""
    if episode.diag is None:
        raise ValueError(f"episode {episode.episode_id} has no diagnostic outcome (Episode.diag): not a finished "
                         "diagnostic episode")
    return CaseOutcome(case_id=episode.task_id, correct=bool(episode.check and episode.check.correct),
                       turns=len(episode.turns), exams=episode.diag.exams)


def summarize_episodes(episodes: Iterable[Episode]) -> DiagSummary:
    return summarize([outcome_of(e) for e in episodes])
