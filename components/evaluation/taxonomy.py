"""Why episodes ended as they did: one outcome class per episode, read from the recorded Episode fields only.

The classes, first that applies:
  success              outcome correct
  unfinished           outcome None: the episode was still running (or was cut off) when the record was taken
  context_limit        the next model call would not have fit the model's context (outcome context_limit)
  format_error         submitted, and the checker could not read the answer: nothing was given (is_missing), or
                       the checker's reason says "unparsable" (tasks.checkers.check_value's prefix)
  wrong_answer         submitted, read and checked wrong (a loop seen on the way does not change it: it submitted)
  code_error:<Kind>    nothing submitted and the last turn's action failed; <Kind> is the turn's structured error
                       (envs.feedback.ErrorInfo.kind: SyntaxError, NameError, KeyError, TimeoutError, MemoryError,
                       NonZeroExit, InspectDataError, sqlite3.OperationalError, ...)
  parse_error          nothing submitted and the last reply held no readable action (Turn.parse_error)
  stuck_loop           nothing submitted, the last turn ran, and a loop was seen (the same action again and again)
  no_submission        nothing submitted and the turn limit came

The episode record has no refusal field, so no class claims to detect one. `family` folds the exception kinds
of code_error into one class for plots and short tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from components.envs.episode import Episode, Outcome
from components.evaluation.metrics import NO_DOMAIN
from components.tasks.checkers import is_missing

SUCCESS = "success"
UNFINISHED = "unfinished"
CONTEXT_LIMIT = "context_limit"
FORMAT_ERROR = "format_error"
WRONG_ANSWER = "wrong_answer"
CODE_ERROR = "code_error"
PARSE_ERROR = "parse_error"
STUCK_LOOP = "stuck_loop"
NO_SUBMISSION = "no_submission"

# the display order of the families (a code_error:<Kind> class sorts within its family by name)
FAMILIES: tuple[str, ...] = (SUCCESS, WRONG_ANSWER, FORMAT_ERROR, CODE_ERROR, PARSE_ERROR, STUCK_LOOP, NO_SUBMISSION,
                             CONTEXT_LIMIT, UNFINISHED)
UNPARSABLE_PREFIX = "unparsable"  # components.tasks.checkers.check_value: "unparsable answer: ..."


def classify(episode: Episode) -> str:
    """The episode's outcome class (see the module docstring for the order)."""
    if episode.outcome is Outcome.CORRECT:
        return SUCCESS
    if episode.outcome is None:
        return UNFINISHED
    if episode.outcome is Outcome.CONTEXT_LIMIT:
        return CONTEXT_LIMIT
    if episode.submitted:
        reason = episode.check.grader_reason if episode.check is not None else ""
        if is_missing(episode.submitted_answer) or reason.startswith(UNPARSABLE_PREFIX):
            return FORMAT_ERROR
        return WRONG_ANSWER
    last = episode.turns[-1] if episode.turns else None
    if last is not None and last.parse_error is not None:
        return PARSE_ERROR
    if last is not None and last.error is not None:
        return PARSE_ERROR if last.error.kind == "ParseError" else f"{CODE_ERROR}:{last.error.kind}"
    if episode.loop_detected or episode.outcome is Outcome.STUCK_LOOP:
        return STUCK_LOOP
    return NO_SUBMISSION


def family(cls: str) -> str:
    """A class without its exception kind: code_error:KeyError -> code_error."""
    return cls.split(":", 1)[0]


def class_order(classes: Iterable[str]) -> list[str]:
    """Classes in display order: by family as in FAMILIES, then by name (unknown families last)."""
    rank = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(set(classes), key=lambda c: (rank.get(family(c), len(FAMILIES)), c))


def _ordered(counts: Mapping[str, int]) -> dict[str, int]:
    return {c: int(counts[c]) for c in class_order(counts)}


def taxonomy(episodes: Sequence[Episode], by_family: bool = False) -> dict[str, int]:
    """Episodes per outcome class (classes with none left out), in display order; `by_family` folds the
    code_error kinds into one code_error count."""
    counts = Counter(family(c) if by_family else c for c in map(classify, episodes))
    return _ordered(counts)


def taxonomy_by_domain(episodes: Sequence[Episode], by_family: bool = False) -> dict[str, dict[str, int]]:
    """taxonomy() per domain (domain None is "unknown", as in metrics.success_report), domains sorted."""
    groups: dict[str, list[Episode]] = {}
    for e in episodes:
        groups.setdefault(e.domain if e.domain is not None else NO_DOMAIN, []).append(e)
    return {d: taxonomy(groups[d], by_family) for d in sorted(groups)}


def taxonomy_report(episodes: Sequence[Episode]) -> dict[str, dict[str, int] | dict[str, dict[str, int]]]:
    """{"overall": taxonomy(episodes), "by_domain": taxonomy_by_domain(episodes)}: plain JSON."""
    return {"overall": taxonomy(episodes), "by_domain": taxonomy_by_domain(episodes)}
