"""`medgym tasks score` and `medgym tasks validate` through the real console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from components.tasks.record import AnswerSpec, AnswerType, Domain, Task, save_tasks

MEDGYM = [sys.executable, "-c", "from flows.cli import main; main()"]


def _tasks(tmp_path: Path) -> Path:
    def t(i: int, answer, spec: AnswerSpec, dataset="synthetic_biostat") -> Task:
        return Task(task_id=f"cat/test/{i}", dataset=dataset, category="cat", domain=Domain.BIOSTAT, split="test",
                    prompt=f"Question number {i}: what is the value?", answer=answer, answer_spec=spec)

    path = tmp_path / "tasks.jsonl"
    save_tasks(path, [t(0, 100.0, AnswerSpec(type=AnswerType.NUMERIC, rel_tol=0.05)),
                      t(1, 1, AnswerSpec(type=AnswerType.INTEGER)),
                      t(2, ["po", "iv"], AnswerSpec(type=AnswerType.SET)),
                      t(3, "atg", AnswerSpec(type=AnswerType.STRING)),
                      t(4, "def double(x):\n    return 2 * x\n",
                        AnswerSpec(type=AnswerType.CODE, tests="assert double(21) == 42\n")),
                      t(5, "def double(x):\n    return 2 * x\n",
                        AnswerSpec(type=AnswerType.CODE, tests="assert double(21) == 42\nassert double(0) == 0\n"))])
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*MEDGYM, *args], capture_output=True, text=True, timeout=120)


def test_score_writes_a_verdict_per_task_then_a_summary(tmp_path):
    tasks = _tasks(tmp_path)
    answers = tmp_path / "answers.jsonl"
    answers.write_text("\n".join(json.dumps(a) for a in [
        {"task_id": "cat/test/0", "answer": 104},
        {"task_id": "cat/test/1", "answer": "10"},  # "10" must not pass for 1
        {"task_id": "cat/test/2", "answer": ["IV", "po"]},
        {"task_id": "cat/test/4", "answer": "def double(x):\n    return x + x\n"},  # run in a sandbox
        {"task_id": "cat/test/5", "answer": "def double(x):\n    return 42\n"},  # passes the first assert only
    ]) + "\n")  # cat/test/3 unanswered: counted wrong
    out = tmp_path / "scores.jsonl"
    proc = run("tasks", "score", "--tasks", str(tasks), "--answers", str(answers), "--out", str(out),
               "--backend", "process")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    verdicts = {v["task_id"]: v for v in lines[:-1]}
    assert [verdicts[f"cat/test/{i}"]["correct"] for i in range(6)] == [True, False, True, False, True, False]
    assert verdicts["cat/test/3"]["reason"] == "no answer submitted"
    summary = lines[-1]["summary"]
    assert summary["total"] == {"n": 6, "correct": 3} and summary["answered"] == 5


def test_bad_answers_file_names_file_line_and_field(tmp_path):
    tasks = _tasks(tmp_path)
    answers = tmp_path / "answers.jsonl"
    rows = [{"task_id": "cat/test/0", "answer": 1}, {"task_id": "cat/test/9", "answer": 1}]
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run("tasks", "score", "--tasks", str(tasks), "--answers", str(answers), "--backend", "process")
    assert proc.returncode == 2
    assert f"{answers}, line 2, field 'task_id'" in proc.stderr
    assert not answers.with_suffix(".scores.jsonl").exists()  # nothing half-written


def test_validate_flags_a_bad_task_file(tmp_path):
    good = _tasks(tmp_path)
    assert run("tasks", "validate", "--tasks", str(good)).returncode == 0
    bad = tmp_path / "bad" / "tasks.jsonl"
    bad.parent.mkdir()
    rows = [json.loads(line) for line in good.read_text().splitlines()]
    rows[1]["task_id"] = rows[0]["task_id"]
    rows[2]["answer"] = ""
    bad.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    proc = run("tasks", "validate", "--tasks", str(bad))
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    failed = {f["expectation"] for f in report["failures"]}
    assert {"expect_column_values_to_be_unique", "expect_column_value_lengths_to_be_between"} <= failed
