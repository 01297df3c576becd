"""Training datasets on disk: the content hash, the suite per kind, and the all-or-nothing directory swap."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from components.common.io import RecordError
from components.rollout.store import EPISODES, shard_name
from components.training.data import EmptyDatasetError, PreferencePair, SFTExample, VerifierExample
from components.training.datasets import (
    MANIFEST,
    ROWS,
    DatasetValidationError,
    read_dataset,
    source_digest,
    source_ref,
    to_records,
    validate_rows,
    write_dataset,
)


def sft_rows(n: int = 3) -> list[SFTExample]:
    return [SFTExample(f"ep-{i}", f"task-{i % 2}", "ehr" if i % 2 else "biostat", [5, 6, 7, 8 + i], [0, 0, 1, 1])
            for i in range(n)]


def pair_rows() -> list[PreferencePair]:
    return [PreferencePair("within_episode", "task-0", [1, 2], [3, 4], [3, 5], [1, 1], [1, 1], {"episode": "ep-0"}),
            PreferencePair("across_episodes", "task-1", [1, 2, 3], [9], [8, 7], [1], [0, 1])]


def verifier_rows(labels: tuple[int, ...] = (1, 0, 1, 0)) -> list[VerifierExample]:
    return [VerifierExample(f"ep-{i}", "task-0", [4, 5, i + 1], label) for i, label in enumerate(labels)]


def write(out: Path, kind: str, rows: list, **kw):
    return write_dataset(out, kind, rows, sources=kw.pop("sources", []), tokenizer="tiny", settings={"seed": 0}, **kw)


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir()) if path.parent.exists() else []


def test_round_trip_and_the_same_hash_on_rewrite(tmp_path):
    run = tmp_path / "run"
    (run / EPISODES).mkdir(parents=True)
    (run / EPISODES / shard_name(1)).write_text('{"a": 2}\n')
    (run / EPISODES / shard_name(0)).write_text('{"a": 1}\n')
    digest = hashlib.sha256(b'{"a": 1}\n{"a": 2}\n').hexdigest()  # shard order, bytes as written
    assert source_digest(run) == source_digest(run / EPISODES) == digest
    ref = source_ref(run)
    assert (ref.episodes, ref.digest) == (2, digest)

    out = tmp_path / "data" / "sft"
    first = write(out, "sft", sft_rows(), sources=[ref])
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, ROWS]
    assert first.content_hash == hashlib.sha256((out / ROWS).read_bytes()).hexdigest()
    assert first.rows == 3 and first.sources == [ref] and first.tokenizer == "tiny"
    assert first.stats == {"tasks": 2, "by_domain": {"biostat": 2, "ehr": 1}, "tokens": 12, "loss_tokens": 6}
    manifest, rows = read_dataset(out)
    assert manifest == first and rows == to_records(sft_rows())

    again = write(out, "sft", sft_rows(), sources=[ref])  # replaces the directory
    assert again.content_hash == first.content_hash
    assert siblings(out) == ["sft"]  # no temp or old directory left beside it

    p = write(tmp_path / "pref", "preference", pair_rows())
    assert p.stats["by_kind"] == {"across_episodes": 1, "within_episode": 1}
    assert read_dataset(tmp_path / "pref")[1][0]["source"] == {"episode": "ep-0"}
    v = write(tmp_path / "ver", "verifier", verifier_rows())
    assert v.stats["labels"] == {"0": 2, "1": 2}


def test_a_changed_rows_file_fails_the_content_hash(tmp_path):
    out = tmp_path / "sft"
    write(out, "sft", sft_rows())
    lines = (out / ROWS).read_text().splitlines(keepends=True)
    (out / ROWS).write_text(lines[0].replace('"ep-0"', '"ep-9"') + "".join(lines[1:]))
    with pytest.raises(RecordError, match="content_hash") as err:
        read_dataset(out)
    assert err.value.field == "content_hash" and err.value.path == str(out / ROWS)

    (out / ROWS).write_text(lines[0] + "{not json\n")
    with pytest.raises(RecordError, match=r"rows\.jsonl, line 2"):
        read_dataset(out)


@pytest.mark.parametrize(("kind", "rows", "expected"), [
    ("sft", sft_rows()[:2] + [SFTExample("ep-2", "task-0", None, [5, 6, 7], [0, 1])],
     "row 3, field 'loss_mask': loss_mask has the length of input_ids"),
    ("verifier", verifier_rows((1, 1, 0)), "rows 1-3, field 'label': the labels are balanced"),
    ("preference", pair_rows() + [PreferencePair("within_episode", "task-2", [1], [4, 4], [4, 4], [1, 1], [1, 1])],
     "row 3, field 'chosen_ids': chosen_ids differ from rejected_ids"),
])
def test_bad_rows_are_refused_and_nothing_changes_on_disk(tmp_path, kind, rows, expected):
    out = tmp_path / "data" / kind
    with pytest.raises(DatasetValidationError) as err:
        write(out, kind, rows)
    assert str(err.value).startswith(f"{out / ROWS}, {expected}")
    assert not (tmp_path / "data").exists() or siblings(out) == []  # no directory, no partial files

    good = {"sft": sft_rows(), "verifier": verifier_rows(), "preference": pair_rows()}[kind]
    before = write(out, kind, good)
    with pytest.raises(DatasetValidationError):
        write(out, kind, rows)
    assert siblings(out) == [kind]
    manifest, kept = read_dataset(out)  # the earlier dataset, whole
    assert manifest == before and kept == to_records(good)


def test_every_sft_rule_names_its_row_and_field():
    rows = to_records([SFTExample("a", "t", None, [1, 2], [1, 1]),  # trains on the prompt
                       SFTExample("a", "t", None, [1, 2], [0, 0]),  # nothing to train on, id repeated
                       SFTExample("c", "t", None, [1, 99], [0, 2])])  # id out of the vocabulary, mask not 0/1
    rows.append({"episode_id": "d", "task_id": "t", "input_ids": [1, True], "loss_mask": None})
    problems = validate_rows("sft", rows, "x/rows.jsonl", vocab_size=50)
    joined = "\n".join(problems)
    for want in ["row 1, field 'loss_mask': loss_mask[0] is 0",
                 "row 1, field 'episode_id': episode_id is unique", "row 2, field 'episode_id': episode_id is unique",
                 "row 2, field 'loss_mask': loss_mask has at least one 1",
                 "row 3, field 'input_ids': input_ids holds ids below the vocabulary size 50 (expect_column_values_to_be_between: 99)",
                 "row 3, field 'loss_mask': loss_mask holds only 0 and 1",
                 "row 4, field 'input_ids': input_ids is a non-empty list of ints",
                 "row 4, field 'loss_mask': episode_id, task_id, input_ids, loss_mask are present"]:
        assert f"x/rows.jsonl, {want}" in joined, (want, problems)
    assert validate_rows("sft", to_records(sft_rows()), "x", vocab_size=50) == []
    bad_kind = dict(to_records(pair_rows())[0], kind="sideways")
    assert any("row 1, field 'kind'" in p for p in validate_rows("preference", [bad_kind], "p"))
    assert any("row 2, field 'label': label is 0 or 1" in p
               for p in validate_rows("verifier", to_records(verifier_rows((1, 2))), "v"))


def test_zero_rows_is_an_empty_dataset(tmp_path):
    with pytest.raises(EmptyDatasetError, match="no sft rows"):
        write(tmp_path / "sft", "sft", [])
    assert not (tmp_path / "sft").exists()


def test_manifest_is_plain_json(tmp_path):
    out = tmp_path / "v"
    write(out, "verifier", verifier_rows())
    body = json.loads((out / MANIFEST).read_text())
    assert body["kind"] == "verifier" and body["schema_version"] == 1 and body["settings"] == {"seed": 0}
