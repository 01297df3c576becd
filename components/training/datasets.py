"""Training datasets on disk: DIR/rows.jsonl (one row a line) and DIR/manifest.json (what it holds and how it was made).

A dataset is written whole or not at all. Its rows pass a Great Expectations suite for their kind first (the same
pattern as components.rollout.validation: helper columns computed in pandas, "" where a rule holds and the cause
where it does not, expected in a set or a range); then both files are built in a temporary sibling directory and
that directory is renamed into place. An existing DIR is replaced by renaming it aside, renaming the new one in and
deleting the old, so a reader sees the old dataset, the new one, or (between the two renames) none, never a mix.
A process killed between them leaves the previous dataset at .<name>.<hex>.old beside DIR. One writer per DIR.

rows.jsonl is deterministic (sorted keys, no spaces), so the same rows give the same bytes and the same
`content_hash` (sha256 of those bytes), which the manifest records and `read_dataset` checks. Each source is a
rollout directory named by the sha256 of its shards' bytes in shard order (`cat DIR/episodes/shard-*.jsonl |
sha256sum`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ValidationError

from components.common.gx import validate_frame
from components.common.io import RecordError, atomic_dir, iter_jsonl
from components.rollout.store import EPISODES, shard_paths
from components.training.data import EmptyDatasetError

Kind = Literal["sft", "preference", "verifier"]
KINDS: tuple[str, ...] = ("sft", "preference", "verifier")
PAIR_KINDS = ("within_episode", "across_episodes", "verifier_ranked")
ROWS, MANIFEST = "rows.jsonl", "manifest.json"
SCHEMA_VERSION = 1
MAX_SHOWN = 10  # offending rows named per failing expectation
MAX_IN_MESSAGE = 5  # problems spelled out in a DatasetValidationError's message (all are on .problems)

__all__ = [
    "KINDS", "MANIFEST", "PAIR_KINDS", "ROWS", "SCHEMA_VERSION", "DatasetManifest", "DatasetValidationError",
    "EmptyDatasetError", "Kind", "SourceRef", "dataset_stats", "read_dataset", "row_line", "rows_bytes",
    "source_digest", "source_ref", "to_records", "validate_rows", "write_dataset",
]


class DatasetValidationError(ValueError):
    """Rows that fail their kind's suite; nothing was written. Each problem names file, row, field and expectation."""

    def __init__(self, path: Path | str, problems: list[str]):
        self.path, self.problems = str(path), problems
        shown = "; ".join(problems[:MAX_IN_MESSAGE])
        more = f" (+{len(problems) - MAX_IN_MESSAGE} more)" if len(problems) > MAX_IN_MESSAGE else ""
        super().__init__(shown + more)


class SourceRef(BaseModel):
    path: str  # the rollout directory (the one holding episodes/)
    episodes: int
    digest: str  # source_digest(path)


class DatasetManifest(BaseModel):
    kind: Kind
    rows: int
    content_hash: str  # sha256 hex of rows.jsonl's exact bytes
    sources: list[SourceRef]
    tokenizer: str
    stats: dict[str, Any]
    settings: dict[str, Any]  # what built it
    schema_version: int = SCHEMA_VERSION


# ---- sources ---------------------------------------------------------------------------------------------------


def _shards(episodes_dir: Path | str) -> list[Path]:
    d = Path(episodes_dir)
    found = shard_paths(d)
    if not found and d.name == EPISODES:  # the episodes/ folder itself rather than the rollout directory
        found = shard_paths(d.parent)
    if not found:
        raise FileNotFoundError(f"{d}: no episode shards (expected {d / EPISODES}/shard-NNNNN.jsonl)")
    return found


def source_digest(episodes_dir: Path | str) -> str:
    """sha256 of the shard files' bytes, concatenated in shard order. `episodes_dir` is a rollout directory
    (what shard_paths takes) or its episodes/ folder; one with no shards raises FileNotFoundError."""
    h = hashlib.sha256()
    for p in _shards(episodes_dir):
        with open(p, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def source_ref(episodes_dir: Path | str, episodes: int | None = None) -> SourceRef:
    """A SourceRef for a rollout directory; `episodes` defaults to the shards' non-blank lines."""
    if episodes is None:
        episodes = 0
        for p in _shards(episodes_dir):
            with open(p, "rb") as fh:
                episodes += sum(1 for line in fh if line.strip())
    return SourceRef(path=str(episodes_dir), episodes=episodes, digest=source_digest(episodes_dir))


# ---- rows ------------------------------------------------------------------------------------------------------


def to_records(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Dataclass rows (SFTExample, PreferencePair, VerifierExample) or mappings as plain dicts."""
    out = []
    for row in rows:
        if dataclasses.is_dataclass(row) and not isinstance(row, type):
            out.append(dataclasses.asdict(row))
        elif isinstance(row, Mapping):
            out.append(dict(row))
        else:
            raise TypeError(f"a dataset row is a dataclass or a mapping, not {type(row).__name__}")
    return out


def row_line(row: dict[str, Any]) -> str:
    """A row as rows.jsonl stores it: sorted keys, no spaces, one line."""
    return json.dumps(row, separators=(",", ":"), sort_keys=True, ensure_ascii=False) + "\n"


def rows_bytes(rows: Iterable[dict[str, Any]]) -> bytes:
    return "".join(row_line(r) for r in rows).encode("utf-8")


def _ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def dataset_stats(kind: Kind, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows per domain (sft) or pair kind (preference), label counts (verifier), tokens, and sft's loss tokens."""
    def n(value: Any) -> int:
        return len(value) if isinstance(value, list) else 0

    def ones(value: Any) -> int:
        return sum(1 for v in value if v == 1) if isinstance(value, list) else 0

    stats: dict[str, Any] = {"tasks": len({str(r.get("task_id")) for r in rows})}
    if kind == "sft":
        stats["by_domain"] = dict(sorted(Counter(str(r.get("domain") or "unknown") for r in rows).items()))
        stats["tokens"] = sum(n(r.get("input_ids")) for r in rows)
        stats["loss_tokens"] = sum(ones(r.get("loss_mask")) for r in rows)
    elif kind == "preference":
        stats["by_kind"] = dict(sorted(Counter(str(r.get("kind")) for r in rows).items()))
        stats["tokens"] = sum(n(r.get("prompt_ids")) + n(r.get("chosen_ids")) + n(r.get("rejected_ids")) for r in rows)
        stats["loss_tokens"] = sum(ones(r.get("chosen_mask")) + ones(r.get("rejected_mask")) for r in rows)
    else:
        stats["labels"] = dict(sorted(Counter(str(r.get("label")) for r in rows).items()))
        stats["tokens"] = sum(n(r.get("input_ids")) for r in rows)
    return stats


# ---- the suite -------------------------------------------------------------------------------------------------

REQUIRED: dict[str, tuple[str, ...]] = {
    "sft": ("episode_id", "task_id", "input_ids", "loss_mask"),
    "preference": ("kind", "task_id", "prompt_ids", "chosen_ids", "rejected_ids", "chosen_mask", "rejected_mask"),
    "verifier": ("episode_id", "task_id", "input_ids", "label"),
}
IDS_FIELDS: dict[str, tuple[str, ...]] = {
    "sft": ("input_ids",), "preference": ("prompt_ids", "chosen_ids", "rejected_ids"), "verifier": ("input_ids",),
}
MASKS: dict[str, tuple[tuple[str, str], ...]] = {  # (mask, the ids it covers)
    "sft": (("loss_mask", "input_ids"),),
    "preference": (("chosen_mask", "chosen_ids"), ("rejected_mask", "rejected_ids")),
    "verifier": (),
}


@dataclasses.dataclass(frozen=True)
class _Check:
    column: str  # in the frame
    field: str | None  # named in the message; None: the cell's value names the fields (the missing-fields check)
    description: str
    make: Callable[[Any, str, str], Any]  # (gx.expectations, column, description) -> expectation


def _in_set(values: list[Any]) -> Callable[[Any, str, str], Any]:
    return lambda E, column, description: E.ExpectColumnValuesToBeInSet(column=column, value_set=values, description=description)


def _between(lo: float | None, hi: float | None) -> Callable[[Any, str, str], Any]:
    return lambda E, column, description: E.ExpectColumnValuesToBeBetween(column=column, min_value=lo, max_value=hi,
                                                                         description=description)


def _unique(E: Any, column: str, description: str) -> Any:
    return E.ExpectColumnValuesToBeUnique(column=column, description=description)


def _balanced(E: Any, column: str, description: str) -> Any:
    # labels are 0/1: a mean of exactly 0.5 is as many of one as of the other
    return E.ExpectColumnMeanToBeBetween(column=column, min_value=0.5, max_value=0.5, description=description)


_OK = _in_set([""])


def _checks(kind: str, vocab_size: int | None) -> list[_Check]:
    checks = [_Check("missing", None, f"{', '.join(REQUIRED[kind])} are present and not null", _OK)]
    for f in IDS_FIELDS[kind]:
        checks.append(_Check(f"{f}_problem", f, f"{f} is a non-empty list of ints", _OK))
        checks.append(_Check(f"{f}_min", f, f"{f} holds no negative id", _between(0, None)))
        if vocab_size is not None:
            checks.append(_Check(f"{f}_max", f, f"{f} holds ids below the vocabulary size {vocab_size}",
                                 _between(None, vocab_size - 1)))
    for mask, ids in MASKS[kind]:
        checks.append(_Check(f"{mask}_length", mask, f"{mask} has the length of {ids}", _OK))
        checks.append(_Check(f"{mask}_values", mask, f"{mask} holds only 0 and 1", _OK))
        checks.append(_Check(f"{mask}_trains", mask, f"{mask} has at least one 1", _OK))
    if kind == "sft":
        checks.append(_Check("loss_mask_first", "loss_mask", "loss_mask[0] is 0 (the prompt is never trained on)", _in_set([0])))
    if kind == "preference":
        checks.append(_Check("kind", "kind", f"kind is one of {', '.join(PAIR_KINDS)}", _in_set(list(PAIR_KINDS))))
        checks.append(_Check("chosen_differs", "chosen_ids", "chosen_ids differ from rejected_ids", _OK))
    if kind in ("sft", "verifier"):
        checks.append(_Check("episode_id", "episode_id", "episode_id is unique", _unique))
    if kind == "verifier":
        checks.append(_Check("label", "label", "label is 0 or 1", _in_set([0, 1])))
        checks.append(_Check("label_num", "label", "the labels are balanced (as many 0 as 1)", _balanced))
    return checks


def _scalar(value: Any) -> Any:
    # GE hashes values for sets and uniqueness: lists and dicts become their JSON; a bool is no 0/1 label
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return repr(value) if isinstance(value, bool) else value


def _flat_row(kind: str, n: int, row: dict[str, Any]) -> dict[str, Any]:
    """One row as the expectations read it: "" where a rule holds, the cause where not; a field that is missing
    leaves its own checks "" or null (the missing check names it once)."""
    flat: dict[str, Any] = {"row": n, "missing": ",".join(f for f in REQUIRED[kind] if row.get(f) is None)}
    ids: dict[str, list[int] | None] = {}
    for f in IDS_FIELDS[kind]:
        value = row.get(f)
        ids[f] = _ids(value)
        if value is None:
            problem = ""
        elif not isinstance(value, list):
            problem = f"a {type(value).__name__}, not a list"
        elif ids[f] is None:
            bad = next(i for i, v in enumerate(value) if not isinstance(v, int) or isinstance(v, bool))
            problem = f"position {bad} holds {value[bad]!r}"
        else:
            problem = "empty" if not value else ""
        flat[f"{f}_problem"] = problem
        flat[f"{f}_min"] = float(min(ids[f])) if ids[f] else math.nan
        flat[f"{f}_max"] = float(max(ids[f])) if ids[f] else math.nan
    for mask, of in MASKS[kind]:
        value, covered = row.get(mask), row.get(of)
        length = values = trains = ""
        if isinstance(value, list):
            if isinstance(covered, list) and len(value) != len(covered):
                length = f"{len(value)} values for {len(covered)} {of}"
            bad = next((i for i, v in enumerate(value) if not (isinstance(v, int) and not isinstance(v, bool) and v in (0, 1))), None)
            if bad is not None:
                values = f"position {bad} holds {value[bad]!r}"
            elif 1 not in value:
                trains = f"no 1 in {len(value)} values"
        elif value is not None:
            length = f"a {type(value).__name__}, not a list"
        flat[f"{mask}_length"], flat[f"{mask}_values"], flat[f"{mask}_trains"] = length, values, trains
    if kind == "sft":
        mask = row.get("loss_mask")
        flat["loss_mask_first"] = _scalar(mask[0]) if isinstance(mask, list) and mask else None
    if kind == "preference":
        flat["kind"] = _scalar(row.get("kind"))
        chosen, rejected = row.get("chosen_ids"), row.get("rejected_ids")
        flat["chosen_differs"] = (f"both are the same {len(chosen)} ids" if isinstance(chosen, list) and chosen == rejected
                                  else "")
    if kind in ("sft", "verifier"):
        flat["episode_id"] = _scalar(row.get("episode_id"))
    if kind == "verifier":
        label = row.get("label")
        flat["label"] = _scalar(label)
        flat["label_num"] = float(label) if label in (0, 1) and not isinstance(label, bool) else math.nan
    return flat


def rows_frame(kind: Kind, rows: list[dict[str, Any]], vocab_size: int | None = None) -> pd.DataFrame:
    """The frame the suite reads: one line per row, `row` its 1-based number, then one column per check."""
    columns = ["row"] + [c.column for c in _checks(kind, vocab_size)]
    frame = pd.DataFrame([_flat_row(kind, n, r) for n, r in enumerate(rows, start=1)], dtype=object)
    frame = frame.reindex(columns=list(dict.fromkeys(columns + list(frame.columns))))
    numeric = [c for c in frame.columns if c.endswith(("_min", "_max")) or c == "label_num"]
    return frame.astype({"row": int, **{c: float for c in numeric}})


def _show(value: Any) -> str:
    value = value.item() if hasattr(value, "item") else value  # numpy scalars print as plain numbers
    return repr(int(value) if isinstance(value, float) and value.is_integer() else value)  # ids are ints


def validate_rows(kind: Kind, rows: list[dict[str, Any]], path_for_messages: Path | str,
                  vocab_size: int | None = None) -> list[str]:
    """The kind's suite over the rows in one GE run: the problems, each "<path>, row N, field 'F': <what the
    expectation asks> (<expectation type>: <what the row holds>)", by row; empty when the rows are fine."""
    if kind not in KINDS:
        raise ValueError(f"unknown dataset kind {kind!r}; one of {', '.join(KINDS)}")
    path = str(path_for_messages)
    if not rows:
        return [f"{path}: no rows"]
    bad = [n for n, r in enumerate(rows, start=1) if not isinstance(r, dict)]
    if bad:
        return [f"{path}, row {n}: a {type(rows[n - 1]).__name__}, not a JSON object" for n in bad[:MAX_SHOWN]]
    checks = _checks(kind, vocab_size)
    by_column = {c.column: c for c in checks}
    frame = rows_frame(kind, rows, vocab_size)
    result = validate_frame(frame, f"medgym_{kind}_dataset", f"{kind}_rows",
                            lambda E: [c.make(E, c.column, c.description) for c in checks])
    found: list[tuple[int, int, str]] = []  # (row, check order, message)
    order = {c.column: i for i, c in enumerate(checks)}
    for r in result.results:
        if r.success:
            continue
        cfg = r.expectation_config
        column = cfg.kwargs.get("column")
        check = by_column[column]
        what = f"{check.description} ({cfg.type}"
        if check.make is _balanced and frame[column].isna().all():
            continue  # no row holds a 0/1 label: the label check names them
        if check.make is _balanced and r.result.get("observed_value") is not None:
            counts = Counter(v for v in frame["label"] if v in (0, 1))
            found.append((0, order[column], f"{path}, rows 1-{len(rows)}, field 'label': {what}: {counts[1]} rows labelled 1, "
                                            f"{counts[0]} labelled 0)"))
            continue
        idx = r.result.get("unexpected_index_list") or []
        if not idx:  # GE could not evaluate it: say so rather than pass it
            info = r.exception_info or {}
            infos = [info] if "raised_exception" in info else list(info.values())
            why = "; ".join(str(i.get("exception_message"))[:200] for i in infos if isinstance(i, dict) and i.get("raised_exception"))
            found.append((0, order[column], f"{path}, field '{check.field or column}': {what} could not be evaluated: {why})"))
            continue
        for i in idx[:MAX_SHOWN]:
            value = frame.loc[i, column]
            if check.field is None:  # the missing check: its cell lists the fields
                where, shown = ", ".join(f"field '{f}'" for f in str(value).split(",")), "missing"
            else:  # a problem column holds the cause in words; any other its value
                where, shown = f"field '{check.field}'", value if check.make is _OK else _show(value)
            found.append((int(frame.loc[i, "row"]), order[column], f"{path}, row {frame.loc[i, 'row']}, {where}: {what}: {shown})"))
        if len(idx) > MAX_SHOWN:
            found.append((int(frame.loc[idx[MAX_SHOWN], "row"]), order[column],
                          f"{path}, field '{check.field or column}': {check.description}: {len(idx) - MAX_SHOWN} more rows"))
    return [m for _, _, m in sorted(found)]


# ---- writing and reading ---------------------------------------------------------------------------------------


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_dataset(out_dir: Path | str, kind: Kind, rows: Iterable[Any], *, sources: list[SourceRef], tokenizer: str,
                  settings: dict[str, Any], vocab_size: int | None = None) -> DatasetManifest:
    """Validate the rows, then put DIR/rows.jsonl and DIR/manifest.json in place in one rename (an existing DIR is
    replaced). Zero rows raise EmptyDatasetError, failing rows DatasetValidationError; either way nothing on disk
    changes. `vocab_size`, where given, bounds every id."""
    out_dir = Path(out_dir)
    records = to_records(rows)
    rows_path = out_dir / ROWS
    if not records:
        raise EmptyDatasetError(f"{rows_path}: no {kind} rows to write")
    problems = validate_rows(kind, records, rows_path, vocab_size)
    if problems:
        raise DatasetValidationError(rows_path, problems)
    data = rows_bytes(records)
    manifest = DatasetManifest(kind=kind, rows=len(records), content_hash=hashlib.sha256(data).hexdigest(),
                               sources=list(sources), tokenizer=tokenizer, stats=dataset_stats(kind, records),
                               settings=settings)
    manifest_bytes = (json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    with atomic_dir(out_dir) as tmp:
        _write_synced(tmp / ROWS, data)
        _write_synced(tmp / MANIFEST, manifest_bytes)
        _fsync_dir(tmp)
    _fsync_dir(out_dir.parent)
    return manifest


def read_manifest(dataset_dir: Path | str) -> DatasetManifest:
    path = Path(dataset_dir) / MANIFEST
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(path, None, None, f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    try:
        manifest = DatasetManifest.model_validate(obj)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise RecordError(path, None, ".".join(str(p) for p in e["loc"]) or None, e["msg"]) from exc
    if manifest.schema_version != SCHEMA_VERSION:
        raise RecordError(path, None, "schema_version", f"{manifest.schema_version}, this code reads {SCHEMA_VERSION}")
    return manifest


def read_dataset(dataset_dir: Path | str) -> tuple[DatasetManifest, list[dict[str, Any]]]:
    """The manifest and the rows; a line that is no JSON object raises RecordError naming file and line, rows whose
    bytes no longer hash to the manifest's content_hash raise RecordError on field 'content_hash'."""
    dataset_dir = Path(dataset_dir)
    manifest = read_manifest(dataset_dir)
    rows_path = dataset_dir / ROWS
    data = rows_path.read_bytes()
    rows = [obj for _, obj in iter_jsonl(rows_path)]
    actual = hashlib.sha256(data).hexdigest()
    if actual != manifest.content_hash:
        raise RecordError(rows_path, None, "content_hash", f"the rows hash to {actual[:12]}…, the manifest records "
                                                           f"{manifest.content_hash[:12]}…: {ROWS} changed after it was written")
    if len(rows) != manifest.rows:
        raise RecordError(dataset_dir / MANIFEST, None, "rows", f"{manifest.rows}, {ROWS} holds {len(rows)}")
    return manifest, rows

