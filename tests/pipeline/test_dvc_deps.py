"""A DVC stage's code deps are its pipeline stage key's files: the same import closure, folders written whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.pipeline.dvc import _as_folders, code_deps
from components.pipeline.state import stage_files

ROOT = Path(__file__).resolve().parents[2]
CODING = ("suite", "rollout", "train", "evaluate", "diag_cohort", "diag_world", "diag_cold_start", "diag_grpo",
          "diag_evaluate")


def _expand(root: Path, deps: list[str]) -> set[str]:
    out: set[str] = set()
    for d in deps:
        p = root / d
        if p.is_dir():
            out |= {f.relative_to(root).as_posix() for f in p.rglob("*")
                    if f.is_file() and f.suffix != ".pyc" and "__pycache__" not in f.parts}
        else:
            out.add(d)
    return out


@pytest.mark.parametrize("kind", CODING)
def test_a_coding_stage_depends_on_exactly_the_files_its_key_hashes(kind: str) -> None:
    deps = code_deps(ROOT, kind)
    assert _expand(ROOT, deps) == _expand(ROOT, list(stage_files(ROOT, kind)))
    files = stage_files(ROOT, kind)
    assert len(deps) <= len(files)
    for folder in {Path(f).parent for f in files}:  # a folder whose every file the stage runs is written once
        inside = {f for f in _expand(ROOT, [folder.as_posix()]) if f.endswith(".py")}
        if inside and inside <= set(files):
            assert folder.as_posix() in deps and not inside & set(deps), folder


def test_the_rollouts_depend_on_the_checkers_that_decide_what_counts_as_correct() -> None:
    deps = _expand(ROOT, code_deps(ROOT, "rollout"))
    assert {"components/tasks/answer_forms.py", "components/tasks/code_judge.py", "components/tasks/judge_program.py",
            "components/tasks/record.py", "components/tasks/checkers.py"} <= deps
    assert not any(d.startswith("components/diag/") for d in deps)


def test_a_folder_is_written_whole_only_while_every_file_in_it_is_in_the_closure(tmp_path: Path) -> None:
    pkg = tmp_path / "components" / "pkg"
    (pkg / "__pycache__").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py"):
        (pkg / name).write_text("")
    (pkg / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"")  # ignored by .dvcignore: not a file of the folder
    files = ("components/pkg/__init__.py", "components/pkg/a.py", "components/pkg/b.py", "infra/x")
    assert _as_folders(tmp_path, files) == ["components/pkg", "infra/x"]
    (pkg / "unused.py").write_text("")  # a module nothing imports: the folder is no longer the stage's code
    assert _as_folders(tmp_path, files) == list(files)


def test_grpo_depends_on_the_reward_and_not_on_the_coding_pipelines_stage_runner() -> None:
    deps = _expand(ROOT, code_deps(ROOT, "diag_grpo"))
    assert {"components/diag/metrics.py", "components/diag/grading.py"} <= deps
    assert "components/training/stage.py" not in deps
