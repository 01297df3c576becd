"""Importer of the public MedAgentGym release: real sample rows in, validated Task records out."""

from __future__ import annotations

import json
import shutil

import pytest

from components.sandbox.factory import open_sandbox
from components.tasks.checkers import check_answer
from components.tasks.importers.medagentgym import REFUSED_DATASETS, ImportOptions, import_release
from components.tasks.record import AnswerType, load_tasks
from components.tasks.validation import validate_tasks

NON_EHR = ("medcalcbench", "npowerai", "biocoder", "biodsbench", "ehrcon", "ehrshot", "mimic_extract", "medagentbench")


@pytest.fixture(scope="module")
def imported(sample_release, tmp_path_factory):
    """The sample's non-EHRSQL datasets (EHRSQL re-grounding has its own tests)."""
    src = tmp_path_factory.mktemp("src")
    for name in NON_EHR:
        shutil.copytree(sample_release / name, src / name)
    out = tmp_path_factory.mktemp("out")
    report = import_release(src, out, ImportOptions(open_sandbox=lambda: open_sandbox("process")))
    return src, out, report, load_tasks(out / "tasks.jsonl")


def test_ids_follow_the_release_rows(imported, sample_release):
    _, _, _, tasks = imported
    by_id = {t.task_id: t for t in tasks}
    rows = [json.loads(line) for line in (sample_release / "medcalcbench/test_tasks.jsonl").read_text().splitlines()]
    for index, row in enumerate(rows):
        task = by_id[f"medcalcbench/test/{index}"]
        assert row["Patient Note"][:200] in task.prompt
        assert check_answer(task, row["Ground Truth Answer"]).correct


def test_every_dataset_is_imported_or_refused_with_a_reason(imported):
    _, _, report, _ = imported
    for key, counts in report.per_file.items():
        dataset = key.split("/")[0]
        assert counts.rows > 0
        assert counts.imported + sum(counts.refused.values()) + len(counts.malformed) == counts.rows, key
        if dataset in REFUSED_DATASETS:
            assert counts.imported == 0 and REFUSED_DATASETS[dataset] in counts.refused
    assert report.per_file["medcalcbench/test"].imported == 40
    assert report.per_file["npowerai/train"].imported == 20


def test_answer_types(imported):
    _, _, _, tasks = imported
    npower = [t for t in tasks if t.dataset == "npowerai"]
    assert {t.answer_spec.type for t in npower if t.category.endswith("_size")} == {AnswerType.INTEGER}
    assert {t.answer_spec.type for t in npower if t.category.endswith("_power")} == {AnswerType.NUMERIC}
    interval = [t for t in tasks if t.dataset == "medcalcbench" and t.answer_spec.lower is not None]
    assert interval and all(t.answer_spec.lower <= t.answer <= t.answer_spec.upper for t in interval)


def test_biocoder_reference_reproduces_its_output(imported):
    _, out, report, tasks = imported
    biocoder = [t for t in tasks if t.dataset == "biocoder"]
    assert biocoder, report.per_file["biocoder/test"]
    with open_sandbox("process") as box:
        for task in biocoder[:3]:
            assert check_answer(task, task.answer, sandbox=box).correct, task.task_id
            assert not check_answer(task, "def nothing():\n    pass\n", sandbox=box).correct


def test_import_validates(imported):
    _, out, _, _ = imported
    report = validate_tasks(out / "tasks.jsonl")
    assert report.success, report.failures


def test_malformed_rows_are_named_and_good_rows_kept(tmp_path):
    src = tmp_path / "src"
    (src / "npowerai").mkdir(parents=True)
    good = {"task_type": "One-sample t-test", "task_id": 1, "estimate_target": "size",
            "question": "How large a sample is needed for this one-sample study?", "answer": 12}
    lines = [json.dumps(good), "{not json", json.dumps({**good, "answer": "lots"}),
             json.dumps({k: v for k, v in good.items() if k != "question"}), json.dumps({**good, "answer": 13})]
    (src / "npowerai" / "train_tasks.jsonl").write_text("\n".join(lines) + "\n")
    (src / "npowerai" / "notes.jsonl").write_text(json.dumps({"note": "not a task file"}) + "\n")
    (src / "mystery").mkdir()
    (src / "mystery" / "train_tasks.jsonl").write_text(json.dumps({"x": 1}) + "\n")
    report = import_release(src, tmp_path / "out")
    counts = report.per_file["npowerai/train"]
    assert counts.imported == 2
    path = str(src / "npowerai" / "train_tasks.jsonl")
    assert any(m.startswith(f"{path}, line 2:") and "JSON" in m for m in counts.malformed)
    assert any(m.startswith(f"{path}, line 3, field 'answer'") for m in counts.malformed)
    assert any(m.startswith(f"{path}, line 4, field 'question'") for m in counts.malformed)
    ids = [t.task_id for t in load_tasks(tmp_path / "out" / "tasks.jsonl")]
    assert ids == ["npowerai/train/0", "npowerai/train/4"]  # the release's line indexes, gaps kept
    assert "unknown dataset 'mystery'" in next(iter(report.per_file["mystery/train"].refused))
    assert report.ignored == ["npowerai/notes.jsonl"]


def test_missing_source_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        import_release(tmp_path / "nowhere", tmp_path / "out")


@pytest.fixture(scope="module")
def ehrsql_imported(sample_release, tmp_path_factory):
    src = tmp_path_factory.mktemp("ehrsrc")
    for name in ("mimic_iii", "eicu", "treqs"):
        shutil.copytree(sample_release / name, src / name)
    out = tmp_path_factory.mktemp("ehrout")
    report = import_release(src, out)
    return out, report, load_tasks(out / "tasks.jsonl")


def test_ehrsql_questions_are_regrounded_with_answers(ehrsql_imported):
    out, report, tasks = ehrsql_imported
    for dataset in ("mimic_iii", "eicu", "treqs"):
        counts = report.per_file[f"{dataset}/train"]
        assert counts.imported / counts.rows >= 0.9, (dataset, counts)
    assert all(t.context_files[0].path.startswith("files/ehr/") for t in tasks)
    assert validate_tasks(out / "tasks.jsonl").success


def test_ehrsql_reference_code_reproduces_the_answer_in_the_sandbox(ehrsql_imported):
    out, _, tasks = ehrsql_imported
    from components.tasks.confirm import confirm_tasks

    with open_sandbox("process") as box:
        box.upload_dir(out / "files", "files")
        confirmations = confirm_tasks(tasks, box)
    assert all(c.confirmed for c in confirmations), [c for c in confirmations if not c.confirmed][:3]


def test_a_real_database_keeps_the_release_answers(sample_release, tmp_path, ehrsql_imported):
    """With --ehr-db the release's answers are kept and the task reads the user's database (linked, not copied)."""
    out_synthetic, _, _ = ehrsql_imported
    real_db = tmp_path / "my_treqs.sqlite"  # stands in for a credentialed database the user holds
    real_db.write_bytes((out_synthetic / "files/ehr/treqs.sqlite").read_bytes())
    src = tmp_path / "src"
    shutil.copytree(sample_release / "treqs", src / "treqs")
    report = import_release(src, tmp_path / "out", ImportOptions(ehr_databases={"treqs": real_db}))
    tasks = load_tasks(tmp_path / "out" / "tasks.jsonl")
    rows = [json.loads(line) for line in (sample_release / "treqs/train_tasks.jsonl").read_text().splitlines()]
    assert report.per_file["treqs/train"].imported == len(tasks) > 0
    for task in tasks:
        index = int(task.task_id.rsplit("/", 1)[1])
        # kept as rows of typed cells; run together as strings they are the release's answer
        assert [str(v) for row in task.answer for v in row] == [str(v) for v in rows[index]["answer"]]
        assert check_answer(task, rows[index]["answer"]).correct
        assert task.metadata["grounding"] == "real"
    assert (tmp_path / "out/files/ehr/treqs.sqlite").resolve() == real_db.resolve()


def test_biocoder_references_that_print_a_random_draw_are_refused(tmp_path):
    """An expected output that is a random draw would score a right answer wrong (and a wrong one right)."""
    def row(main_body: str, solution: str = "def pick(xs):\n    return random.choice(xs)\n") -> dict:
        context = ("import random\n<<insert solution here>>\ndef main():\n" + main_body +
                   "if __name__ == '__main__':\n    main()\n")
        return {"idx": "x", "problem": "write pick(xs) returning one element of xs", "context": context,
                "solution": solution, "signature": "def pick(xs)", "code": ""}

    src = tmp_path / "src" / "biocoder"
    src.mkdir(parents=True)
    rows = [row("    random.seed(42)\n    print(pick([random.randint(0, 999) for _ in range(9)]))\n"),  # seeded: fine
            row("    print(pick(list(range(100))))\n"),  # unseeded draw
            row("    import time\n    print(pick([time.perf_counter_ns() for _ in range(3)]))\n",  # a clock
                "def pick(xs):\n    return list(xs)\n")]
    (src / "test_tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = import_release(src.parent, tmp_path / "out", ImportOptions(open_sandbox=lambda: open_sandbox("process")))
    counts = report.per_file["biocoder/test"]
    assert [t.task_id for t in load_tasks(tmp_path / "out" / "tasks.jsonl")] == ["biocoder/test/0"]
    assert counts.refused == {"the reference solution draws random numbers without a seed": 1,
                              "the reference solution prints something different on each run": 1}


def test_biocoder_tasks_are_checked_on_several_inputs(imported):
    """Every seed variant reaches the function (numpy's RandomState stays a type, so `import scipy.stats` works),
    and a program that gives the function one input only is refused: `return BIT_DEPTH_8` passed test/18 and
    `return 'Hello'` passed test/15 when they were checked on that one input."""
    from components.tasks import code_judge

    _, _, report, tasks = imported
    biocoder = [t for t in tasks if t.dataset == "biocoder"]
    several = [t for t in biocoder if code_judge.distinct_inputs(t.answer_spec.expected_trace or []) >= 2]
    assert biocoder and len(several) / len(biocoder) >= 0.9, [t.task_id for t in biocoder if t not in several]
    assert all(code_judge.calls_recorded([run]) > 0 for t in biocoder for run in t.answer_spec.expected_trace or [])
    ids = {t.task_id for t in biocoder}
    assert "biocoder/test/15" not in ids and "biocoder/test/18" not in ids
    refused = report.per_file["biocoder/test"].refused
    assert refused["the program gives the function one input only, under every seed variant"] >= 2
