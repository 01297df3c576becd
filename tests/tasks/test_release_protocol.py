"""The release's own evaluation protocol on import: MIMIC-III's and eICU's valid files are the evaluation split,
and `rollout_indices.json` restricts that split to the paper's subset. Release folders are written in tmp_path and
go through the real importer and the real `medgym` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.common.io import RecordError
from components.tasks.importers.medagentgym import ImportOptions, import_release
from components.tasks.record import load_tasks

DRUGS = ("methimazole", "metformin", "heparin", "insulin", "aspirin", "warfarin")
# the release's EHRSQL medication question, on each dataset's own table
EHR_QUERY = {"mimic_iii": "select distinct prescriptions.route from prescriptions where prescriptions.drug = '{}'",
             "eicu": "select distinct medication.routeadmin from medication where medication.drugname = '{}'"}


def ehr_rows(dataset: str, drugs: tuple[str, ...]) -> list[dict]:
    return [{"db_id": dataset, "question": f"what is the intake method of {d}?", "query": EHR_QUERY[dataset].format(d),
             "value": {"drug_name": d}, "is_impossible": False, "id": f"{dataset}-{i}", "answer": ["po"]}
            for i, d in enumerate(drugs)]


def npower_rows(n: int) -> list[dict]:
    return [{"task_type": "One-sample t-test", "task_id": i, "estimate_target": "size", "answer": 10 + i,
             "question": f"How many subjects does one-sample study {i} need?"} for i in range(n)]


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """MIMIC-III and eICU as the release ships them (train + valid, no test file); N-PowerAI with all three files."""
    src = tmp_path / "release"
    for dataset in EHR_QUERY:
        write(src / dataset / "train_tasks.jsonl", ehr_rows(dataset, DRUGS[:2]))
        write(src / dataset / "valid_tasks.jsonl", ehr_rows(dataset, DRUGS))
    for split, n in (("train", 3), ("valid", 2), ("test", 5)):
        write(src / "npowerai" / f"{split}_tasks.jsonl", npower_rows(n))
    return src


def subset_file(src: Path, subset: dict) -> Path:
    path = src / "rollout_indices.json"
    path.write_text(json.dumps(subset, indent=4))
    return path


def test_a_valid_file_without_a_test_file_is_imported_as_the_evaluation_split(release, tmp_path):
    report = import_release(release, tmp_path / "out")
    tasks = load_tasks(tmp_path / "out" / "tasks.jsonl")
    for dataset in EHR_QUERY:
        test = [t for t in tasks if t.dataset == dataset and t.split == "test"]
        assert [t.task_id for t in test] == [f"{dataset}/test/{i}" for i in range(len(DRUGS))]
        assert {t.metadata["release_file"] for t in test} == {f"{dataset}/valid_tasks.jsonl"}
        assert report.per_file[f"{dataset}/test"].release_file == f"{dataset}/valid_tasks.jsonl"
        assert report.per_file[f"{dataset}/test"].imported == len(DRUGS)
        assert f"{dataset}/valid" not in report.per_file
    # a dataset that ships a test file keeps its valid split as it is
    assert {t.split for t in tasks if t.dataset == "npowerai"} == {"train", "valid", "test"}
    assert {t.metadata["release_file"] for t in tasks if t.task_id.startswith("npowerai/valid/")} == {"npowerai/valid_tasks.jsonl"}
    assert report.valid_as_test == ["eicu", "mimic_iii"]
    notes = report.notes()
    assert len(notes) == 2
    assert notes[1].startswith("mimic_iii: mimic_iii/valid_tasks.jsonl (no test file beside it) is the evaluation split 'test'")
    assert notes[1].endswith(f"{len(DRUGS)} rows, {len(DRUGS)} imported")


def test_rollout_indices_keep_only_the_listed_evaluation_rows(release, tmp_path):
    # the release's layout: dataset -> {"train": [...], "test": [...]}, 0-based rows of the file it evaluates on
    subset_file(release, {"mimic_iii": {"train": [0], "test": [4, 1, 9]}, "eicu": {"train": [1, 0], "test": [0, 5]},
                          "treqs": {"train": [], "test": [3]}})
    report = import_release(release, tmp_path / "out", ImportOptions(rollout_indices=True))
    ids = {t.task_id for t in load_tasks(tmp_path / "out" / "tasks.jsonl")}
    assert {i for i in ids if "/test/" in i and not i.startswith("npowerai")} == {
        "mimic_iii/test/1", "mimic_iii/test/4", "eicu/test/0", "eicu/test/5"}
    assert {"mimic_iii/train/0", "mimic_iii/train/1", "eicu/train/0", "eicu/train/1"} <= ids  # train is not restricted
    mimic = report.per_file["mimic_iii/test"]
    assert mimic.subset is not None and mimic.subset.model_dump() == {"listed": 3, "kept": 2, "outside": 4, "missing": [9]}
    assert mimic.imported + sum(mimic.refused.values()) + len(mimic.malformed) + mimic.subset.outside == mimic.rows
    assert report.per_file["mimic_iii/train"].subset is None
    # a dataset the file lists nothing for keeps its whole evaluation split, and the report says so
    assert report.subset_absent == ["npowerai"]
    assert {f"npowerai/test/{i}" for i in range(5)} <= ids
    notes = report.notes()
    assert "mimic_iii/test: 2 of 6 rows kept by rollout_indices.json (3 listed), 2 imported; " \
           "1 listed indices name no row, e.g. [9]" in notes
    assert "npowerai/test: rollout_indices.json lists no test subset for npowerai; every row kept" in notes


@pytest.mark.parametrize(("content", "where", "problem"), [
    ("[1, 2]", "", "expected an object of datasets"),
    ('{"mimic_iii": [1, 2]}', ", field 'mimic_iii'", "expected an object of 'train' and 'test' lists"),
    ('{"mimic_iii": {"valid": [1], "test": []}}', ", field 'mimic_iii.valid'", "unexpected key"),
    ('{"mimic_iii": {"train": [1]}}', ", field 'mimic_iii.test'", "missing"),
    ('{"mimic_iii": {"test": {"0": 1}}}', ", field 'mimic_iii.test'", "expected a list of row indices"),
    ('{"mimic_iii": {"test": [0, "3"]}}', ", field 'mimic_iii.test[1]'", "expected a row index (an integer >= 0), got '3'"),
    ('{"eicu": {"train": [-1], "test": [0]}}', ", field 'eicu.train[0]'", "got -1"),
    ('{"eicu": {"test": [true]}}', ", field 'eicu.test[0]'", "got True"),
    ('{"eicu": {"test": [0,]}}', ", line 1", "not valid JSON"),
])
def test_a_subset_file_of_another_layout_is_refused_naming_the_file_and_field(release, tmp_path, content, where, problem):
    path = release / "rollout_indices.json"
    path.write_text(content)
    with pytest.raises(RecordError) as err:
        import_release(release, tmp_path / "out", ImportOptions(rollout_indices=True))
    assert str(err.value).startswith(f"{path}{where}: ") and problem in str(err.value)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out" / "tasks.jsonl").exists()


def test_a_missing_subset_file_is_named(release, tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{release / 'rollout_indices.json'}: not found"):
        import_release(release, tmp_path / "out", ImportOptions(rollout_indices=True))


def test_release_rows_of_the_sample_become_the_evaluation_split(sample_release, tmp_path):
    """The sample ships no valid file: its own MIMIC-III and eICU rows are laid out as the release's valid file."""
    src = tmp_path / "release"
    for dataset in EHR_QUERY:
        rows = [json.loads(line) for line in (sample_release / dataset / "train_tasks.jsonl").read_text().splitlines()]
        write(src / dataset / "train_tasks.jsonl", rows[:10])
        write(src / dataset / "valid_tasks.jsonl", rows[10:])
    subset_file(src, {"mimic_iii": {"train": [], "test": [0, 2, 4, 6, 8]}, "eicu": {"train": [], "test": [1, 3, 5, 7, 9]}})
    report = import_release(src, tmp_path / "out", ImportOptions(rollout_indices=True))
    tasks = load_tasks(tmp_path / "out" / "tasks.jsonl")
    for dataset, listed in (("mimic_iii", {0, 2, 4, 6, 8}), ("eicu", {1, 3, 5, 7, 9})):
        counts = report.per_file[f"{dataset}/test"]
        assert counts.release_file == f"{dataset}/valid_tasks.jsonl" and counts.rows == 10
        assert counts.subset is not None and counts.subset.kept == 5 and counts.subset.missing == []
        test = [t for t in tasks if t.dataset == dataset and t.split == "test"]
        assert test and {int(t.task_id.rsplit("/", 1)[1]) for t in test} <= listed
        assert counts.imported == len(test) >= 4  # a re-grounded question may still be refused, with its reason
        assert all(t.metadata["release_file"] == f"{dataset}/valid_tasks.jsonl" for t in test)


# --------------------------------------------------------------------------------------------------------- CLI

MEDGYM = [sys.executable, "-c", "from flows.cli import main; main()"]


def medgym(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "imp.yaml"
    profile.write_text(yaml.safe_dump({
        "profile": "imp", "sandbox": {"backend": "process"},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlruns.db'}", "artifact_location": str(tmp_path / "artifacts"),
                     "experiment": "imp"}}))
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    return subprocess.run([*MEDGYM, *args, "--profile", str(profile)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=Path(__file__).resolve().parents[2])


@pytest.mark.timeout(600)
def test_the_import_command_restricts_to_the_subset_and_says_what_became_the_evaluation_split(release, tmp_path):
    subset_file(release, {"mimic_iii": {"train": [], "test": [0, 3]}, "eicu": {"train": [], "test": [2]},
                          "npowerai": {"train": [], "test": [1, 4]}})
    out = tmp_path / "imported"
    proc = medgym(tmp_path, "data", "import-medagentgym", str(release), "--out", str(out), "--rollout-indices")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mimic_iii: mimic_iii/valid_tasks.jsonl (no test file beside it) is the evaluation split 'test'" in proc.stdout
    assert "eicu/test: 1 of 6 rows kept by rollout_indices.json (1 listed), 1 imported" in proc.stdout
    report = json.loads((out / "import_report.json").read_text())
    assert report["valid_as_test"] == ["eicu", "mimic_iii"] and report["rollout_indices"] == "rollout_indices.json"
    assert report["per_file"]["npowerai/test"]["subset"] == {"listed": 2, "kept": 2, "outside": 3, "missing": []}
    test_ids = sorted(t.task_id for t in load_tasks(out / "tasks.jsonl") if t.split == "test")
    assert test_ids == ["eicu/test/2", "mimic_iii/test/0", "mimic_iii/test/3", "npowerai/test/1", "npowerai/test/4"]


def test_the_import_command_refuses_a_bad_subset_file_in_one_line(release, tmp_path):
    path = subset_file(release, {"mimic_iii": {"train": [], "test": [0, 1.5]}})
    proc = medgym(tmp_path, "data", "import-medagentgym", str(release), "--out", str(tmp_path / "o"), "--rollout-indices")
    assert proc.returncode == 2
    assert proc.stderr == f"error: {path}, field 'mimic_iii.test[1]': expected a row index (an integer >= 0), got 1.5\n"
    assert not (tmp_path / "o").exists()
