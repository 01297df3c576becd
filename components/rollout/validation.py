"""Great Expectations suite for rollout shards (DIR/episodes/shard-NNNNN.jsonl): every line a JSON Episode, the
keys unique, outcome and reward consistent, the stored checksum equal to the record's own.

The reward rule depends on the environment: a coding episode's reward is 1 exactly when it is correct (in [0, 1]); a
DiagGym episode's (one with `diag`) is its recorded reward parts' total, which may pass 1 (a right diagnosis plus
exam F1), and its `diag.correct` agrees with the outcome.

The frame is built from the raw lines, not from pydantic objects, so that GE sees the bad rows; a row that fails
Episode.model_validate is one more failing expectation, naming its line and field. A hand edit that keeps the
JSON valid (a changed answer, reward and outcome flipped together) passes every shape check and fails the
checksum, which is why a shard's checksum is recomputed from the row rather than trusted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ValidationError

from components.common.gx import validate_frame
from components.common.io import RecordError, iter_jsonl_lenient
from components.envs.episode import SCHEMA_VERSION, Episode, Outcome, row_checksum

# shards carry a checksum, which arrived with schema 3: an older record cannot be in one
KNOWN_SCHEMA_VERSIONS = tuple(range(3, SCHEMA_VERSION + 1))
REQUIRED = ("episode_id", "task_id", "sample_index", "outcome", "reward", "schema_version", "checksum")
MAX_SHOWN = 10  # offending lines named per failure; the count says how many there were

Record = tuple[int, dict[str, Any] | RecordError]


class EpisodeFailure(BaseModel):
    expectation: str  # the GE expectation type, e.g. expect_column_values_to_be_in_set
    description: str  # what it asks, in words
    column: str | None
    unexpected: list[str]  # "line 3: <value or problem>", at most MAX_SHOWN
    unexpected_count: int


class EpisodeValidationReport(BaseModel):
    path: str
    rows: int
    success: bool
    failures: list[EpisodeFailure]

    def summary(self) -> str:
        """One line per failing expectation: what failed, where, and the first offending lines."""
        if self.success:
            return f"{self.path}: valid ({self.rows} episodes)"
        parts = [f"{f.description} [{f.expectation}{f' on {f.column}' if f.column else ''}]: {f.unexpected_count} row(s)"
                 + (f" ({'; '.join(f.unexpected[:3])})" if f.unexpected else "") for f in self.failures]
        return f"{self.path}: " + " | ".join(parts)


def read_episode_records(path: Path | str) -> list[Record]:
    """The file's (line, object or the RecordError of a line that is no JSON object) pairs."""
    return list(iter_jsonl_lenient(path))


COLUMNS = ("line", "json_problem", "missing_required", "episode_id", "key", "outcome", "reward", "coding_reward", "schema_version",
           "reward_problem", "turns_problem", "schema_problem", "checksum_problem")
PROBLEM_COLUMNS = ("json_problem", "missing_required", "reward_problem", "turns_problem", "schema_problem", "checksum_problem")
OUTCOMES = tuple(o.value for o in Outcome)


def flat_row(lineno: int, obj: dict[str, Any] | RecordError) -> dict[str, Any]:
    """One line as the expectations read it. The derived columns are "" where the rule holds and say what is
    wrong otherwise (a report then shows the cause, not a bare False); a line that is no JSON object has only
    `json_problem`, its other columns null, which the value expectations skip, so it is reported once."""
    if isinstance(obj, RecordError):
        return {"line": lineno, "json_problem": obj.problem, **{c: "" for c in PROBLEM_COLUMNS[1:]}}
    schema_problem, checksum_problem = _model_problems(obj)
    task_id, sample = obj.get("task_id"), obj.get("sample_index")
    return {
        "line": lineno,
        "json_problem": "",
        "missing_required": ",".join(k for k in REQUIRED if obj.get(k) is None),
        "episode_id": _scalar(obj.get("episode_id")),
        # the pair as one value: uniqueness then skips a line without it (missing_required names that line)
        "key": None if task_id is None or sample is None else json.dumps([task_id, sample]),
        "outcome": _scalar(obj.get("outcome")),
        "reward": _number(obj.get("reward")),
        # the [0, 1] range holds for coding episodes; null (skipped) for DiagGym's, whose rule is in reward_problem
        "coding_reward": None if _diag(obj) is not None else _number(obj.get("reward")),
        "schema_version": _scalar(obj.get("schema_version")),
        "reward_problem": _reward_problem(obj),
        "turns_problem": _turns_problem(obj),
        "schema_problem": schema_problem,
        "checksum_problem": checksum_problem,
    }


def episodes_frame(records: list[Record]) -> pd.DataFrame:
    # object columns keep values as written (an int stays an int beside a torn line's null); reward is numeric
    # for the range check
    frame = pd.DataFrame([flat_row(n, obj) for n, obj in records], columns=list(COLUMNS), dtype=object)
    return frame.astype({"line": int, "reward": float, "coding_reward": float})


def row_problems(obj: dict[str, Any]) -> list[str]:
    """The suite's per-row rules in plain Python, for the store to check records before it writes them (a GE
    run costs a few tenths of a second, too much for every commit). Uniqueness spans rows: the caller's."""
    row = flat_row(0, obj)
    problems = [f"{c}: {row[c]}" for c in PROBLEM_COLUMNS if row[c]]
    if row["outcome"] is not None and row["outcome"] not in OUTCOMES:
        problems.append(f"outcome {row['outcome']!r} is not an Outcome")
    if row["coding_reward"] is not None and not 0 <= row["coding_reward"] <= 1:
        problems.append(f"reward {row['coding_reward']} is outside [0, 1]")
    if row["schema_version"] is not None and row["schema_version"] not in KNOWN_SCHEMA_VERSIONS:
        problems.append(f"schema_version {row['schema_version']!r} is not one of {list(KNOWN_SCHEMA_VERSIONS)}")
    return problems


def _scalar(value: Any) -> Any:
    # GE hashes values for uniqueness: a list or dict where a string belongs becomes its JSON text
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _number(value: Any) -> float | None:
    # a non-number reward is null here (the not-null and Episode expectations name it); bool is no reward
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _reward_problem(obj: dict[str, Any]) -> str:
    reward, outcome = _number(obj.get("reward")), obj.get("outcome")
    if reward is None or outcome is None:
        return ""  # the not-null expectations report it
    if not math.isfinite(reward):
        return f"reward {reward} is not a finite number"
    diag = _diag(obj)
    if diag is not None:  # DiagGym: the reward its parts add up to, and the verdict the outcome says
        total = _number((diag.get("reward") or {}).get("total") if isinstance(diag.get("reward"), dict) else None)
        if total is None or abs(total - reward) > 1e-9:
            return f"reward {reward:g} is not diag.reward.total {total}"
        if bool(diag.get("correct")) != (outcome == Outcome.CORRECT.value):
            return f"diag.correct {diag.get('correct')!r} with outcome {outcome!r}"
        return ""
    if (reward == 1.0) != (outcome == Outcome.CORRECT.value):
        return f"reward {reward:g} with outcome {outcome!r}"
    return ""


def _diag(obj: dict[str, Any]) -> dict[str, Any] | None:
    diag = obj.get("diag")
    return diag if isinstance(diag, dict) else None


def _turns_problem(obj: dict[str, Any]) -> str:
    outcome, turns = obj.get("outcome"), obj.get("turns")
    # a context_limit episode may end before the first model call: its prompt alone did not fit
    if outcome is None or outcome == Outcome.CONTEXT_LIMIT.value:
        return ""
    return "" if isinstance(turns, list) and turns else f"outcome {outcome!r} with no turns"


def _model_problems(obj: dict[str, Any]) -> tuple[str, str]:
    """(why the row is no Episode, why its checksum is wrong); "" where fine or where the other one already says."""
    try:
        Episode.model_validate(obj)
    except ValidationError as exc:
        errs = exc.errors()
        first = "; ".join(f"field '{'.'.join(str(p) for p in e['loc']) or '?'}': {e['msg']}" for e in errs[:3])
        return first + (f" (+{len(errs) - 3} more)" if len(errs) > 3 else ""), ""
    stored = obj.get("checksum")
    if stored is None:
        return "", ""  # the not-null expectation reports it
    actual = row_checksum(obj)
    return "", "" if stored == actual else f"stored {str(stored)[:12]}… != recomputed {actual[:12]}…"


def _expectations(E: Any) -> tuple[Any, ...]:
    return (
        E.ExpectColumnValuesToBeInSet(column="json_problem", value_set=[""], description="each line is a JSON object"),
        E.ExpectColumnValuesToBeInSet(column="missing_required", value_set=[""], description=f"{', '.join(REQUIRED)} are not null"),
        E.ExpectColumnValuesToBeUnique(column="episode_id_in_shard", description="episode_id is unique"),
        E.ExpectColumnValuesToBeUnique(column="key_in_shard", description="(task_id, sample_index) is unique"),
        E.ExpectColumnValuesToBeInSet(column="outcome", value_set=list(OUTCOMES), description="outcome is an Outcome"),
        E.ExpectColumnValuesToBeBetween(column="coding_reward", min_value=0, max_value=1,
                                        description="a coding episode's reward is in [0, 1]"),
        E.ExpectColumnValuesToBeInSet(column="reward_problem", value_set=[""],
                                      description="reward == 1 exactly when outcome is correct (DiagGym: reward == "
                                      "diag.reward.total, diag.correct as the outcome)"),
        E.ExpectColumnValuesToBeInSet(column="schema_version", value_set=list(KNOWN_SCHEMA_VERSIONS),
                                      description=f"schema_version is one of {list(KNOWN_SCHEMA_VERSIONS)}"),
        E.ExpectColumnValuesToBeInSet(column="turns_problem", value_set=[""],
                                      description="a finished episode has turns (unless context_limit)"),
        E.ExpectColumnValuesToBeInSet(column="schema_problem", value_set=[""], description="the row validates as an Episode"),
        E.ExpectColumnValuesToBeInSet(column="checksum_problem", value_set=[""], description="checksum equals row_checksum(row)"),
    )


def validate_episode_file(path: Path | str) -> EpisodeValidationReport:
    return validate_episode_shards([(path, read_episode_records(path))])[0]


def validate_episode_shards(shards: list[tuple[Path | str, list[Record]]]) -> list[EpisodeValidationReport]:
    """The suite over several shards' records in one GE run (its cost is per run, a few tenths of a second,
    hardly per row), one report per shard. Uniqueness is per shard: the ids are scoped by the shard's index."""
    if not shards:
        return []
    frame = pd.concat([episodes_frame(records).assign(shard=i) for i, (_, records) in enumerate(shards)], ignore_index=True)
    for column, scoped in _SCOPED.items():
        frame[scoped] = [None if pd.isna(v) else json.dumps([int(i), v]) for i, v in zip(frame["shard"], frame[column], strict=True)]
    failures: dict[int, list[EpisodeFailure]] = {i: [] for i in range(len(shards))}
    if not frame.empty:
        result = validate_frame(frame, "medgym_episodes", "episodes", _expectations)
        for r in result.results:
            if not r.success:
                for i, failure in _failures(r, frame, len(shards)).items():
                    failures[i].append(failure)
    reports = []
    for i, (path, records) in enumerate(shards):
        if not records:
            failures[i].append(EpisodeFailure(expectation="non-empty file", description="the shard holds at least one episode",
                                              column=None, unexpected=[], unexpected_count=0))
        reports.append(EpisodeValidationReport(path=str(path), rows=len(records), success=not failures[i], failures=failures[i]))
    return reports


# the uniqueness expectations read these: the value prefixed with its shard, so that one run checks each shard alone
_SCOPED = {"episode_id": "episode_id_in_shard", "key": "key_in_shard"}
_SHOWN_AS = {scoped: column for column, scoped in _SCOPED.items()}


def _show(value: Any) -> str:
    return repr(value.item() if hasattr(value, "item") else value)  # numpy scalars print as plain numbers


def _failures(r: Any, frame: pd.DataFrame, n_shards: int) -> dict[int, EpisodeFailure]:
    """A failed expectation, split into one failure per shard it names."""
    cfg = r.expectation_config
    column = _SHOWN_AS.get(cfg.kwargs.get("column"), cfg.kwargs.get("column"))
    reported = "task_id,sample_index" if column == "key" else column

    def failure(unexpected: list[str], count: int) -> EpisodeFailure:
        return EpisodeFailure(expectation=cfg.type, description=cfg.description or cfg.type, column=reported,
                              unexpected=unexpected, unexpected_count=count)

    idx = r.result.get("unexpected_index_list") or []
    if not idx:  # GE could not evaluate it (it keeps the error per metric): every shard in the run is suspect
        infos = r.exception_info.values() if "raised_exception" not in (r.exception_info or {}) else [r.exception_info]
        shown = [str(i.get("exception_message"))[:200] for i in infos if isinstance(i, dict) and i.get("raised_exception")]
        return {i: failure(shown, 0) for i in range(n_shards)}
    by_shard: dict[int, list[int]] = {}
    for i in idx:
        by_shard.setdefault(int(frame.loc[i, "shard"]), []).append(i)
    return {s: failure([f"line {frame.loc[i, 'line']}: {_show(frame.loc[i, column])}" for i in rows[:MAX_SHOWN]], len(rows))
            for s, rows in by_shard.items()}
