"""Configuration profiles and the shared file I/O."""

from __future__ import annotations

import json

import pytest

from components.common.io import RecordError, atomic_write, iter_jsonl, write_jsonl
from components.profile.config import CONFIG_DIR, load_config
from components.tasks.record import load_tasks


@pytest.mark.parametrize("profile", ["demo", "smoke", "paper"])
def test_every_profile_loads(profile):
    cfg = load_config(profile)
    assert cfg.profile == profile
    assert cfg.data.suites["full"].train_per_category + cfg.data.suites["full"].test_per_category > 0


def test_profiles_directory_holds_the_three_profiles():
    assert {p.stem for p in CONFIG_DIR.glob("*.yaml")} >= {"demo", "smoke", "paper"}


def test_a_bad_profile_names_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: x\nsandbox:\n  backend: kubernetes\n")
    with pytest.raises(RecordError) as err:
        load_config(bad)
    assert str(bad) in str(err.value) and "sandbox.backend" in str(err.value)
    with pytest.raises(FileNotFoundError, match="profiles: demo"):
        load_config("nonexistent")


def test_atomic_write_leaves_nothing_half_written(tmp_path):
    target = tmp_path / "out.jsonl"
    write_jsonl(target, [{"a": 1}])
    with pytest.raises(RuntimeError), atomic_write(target) as fh:
        fh.write('{"a": 2}\n{"broken')
        raise RuntimeError("crash mid-write")
    assert [obj for _, obj in iter_jsonl(target)] == [{"a": 1}]  # the old file, intact
    assert list(tmp_path.iterdir()) == [target]  # no temporary file left


def test_task_file_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "tasks.jsonl"
    good = {"task_id": "c/train/0", "dataset": "synthetic_bioinfo", "category": "c", "domain": "bioinfo",
            "split": "train", "prompt": "What is it?", "answer": "ATG", "answer_spec": {"type": "string"}}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "task_id": "c/train/1", "answer_spec": {"type": "nope"}}) + "\n")
    with pytest.raises(RecordError, match=r"line 2, field 'answer_spec.type'"):
        load_tasks(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(RecordError, match=r"line 2, field 'task_id': duplicate of line 1"):
        load_tasks(path)
    path.write_text(json.dumps({**good, "answer": ""}) + "\n")
    with pytest.raises(RecordError, match=r"line 1, field 'answer'"):
        load_tasks(path)


def test_a_suite_that_leaves_out_a_played_category_is_refused_where_the_profile_loads(tmp_path):
    demo = load_config("demo")
    assert demo.data.categories == demo.focus  # the demo builds what it plays
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: x\nfocus: [calc_anion_gap, bioinfo_hamming]\ndata:\n  categories: [calc_anion_gap]\n")
    with pytest.raises(RecordError, match=r"focus plays \['bioinfo_hamming'\], which data.categories leaves out"):
        load_config(bad)
