"""A stage's key follows the code it runs: the import closure of the components its flow calls, read with `ast`
(components/pipeline/closure.py). The tests copy the project's code into a temporary root, change one file there
and compare each stage's own key (the keys of the stages it reads held fixed) with the untouched copy's; a tiny
project tree pins down what the closure follows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from components.pipeline.closure import ClosureError, closure
from components.pipeline.plan import build_plan
from components.pipeline.state import stage_key
from components.profile.config import load_config
from tests.conftest import ROOT

COPIED = ("components", "infra/deepspeed", "flows", "tests/pipeline")


def _copy(dst: Path) -> Path:
    for rel in COPIED:
        shutil.copytree(ROOT / rel, dst / rel, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(tmp_path_factory.mktemp("untouched"))


def _own_keys(profile: str, root: Path) -> dict[str, str]:
    plan = build_plan(load_config(profile))
    fixed = dict.fromkeys(plan.names, "")  # upstream keys held fixed: only the stage's own code can differ
    return {s.name: stage_key(plan, s, fixed, root) for s in plan.stages}


def rekeyed(profile: str, untouched: Path, edited: Path) -> set[str]:
    before, after = _own_keys(profile, untouched), _own_keys(profile, edited)
    return {name for name in before if before[name] != after[name]}


def edit(root: Path, rel: str) -> Path:
    path = root / rel
    path.write_text(path.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    return root


def test_a_changed_reward_reruns_cold_start_grpo_and_what_reads_them(untouched: Path, tmp_path: Path):
    edited = edit(_copy(tmp_path), "components/diag/metrics.py")
    assert rekeyed("diag-demo", untouched, edited) == {"cold_start", "grpo", "evaluate", "register"}


@pytest.mark.parametrize("checker", ["answer_forms.py", "code_judge.py", "judge_program.py", "record.py"])
def test_a_changed_checker_reruns_every_rollout(untouched: Path, tmp_path: Path, checker: str):
    edited = edit(_copy(tmp_path), f"components/tasks/{checker}")
    rollouts = {s.name for s in build_plan(load_config("demo")).stages if s.kind == "rollout"}
    assert rollouts and rollouts <= rekeyed("demo", untouched, edited)


def test_a_module_imported_inside_a_function_is_followed(untouched: Path, tmp_path: Path):
    # GRPO reaches the episode store only through function-level imports (training datasets, verifier scoring)
    edited = edit(_copy(tmp_path), "components/rollout/store.py")
    assert "grpo" in rekeyed("diag-demo", untouched, edited)


@pytest.mark.parametrize("unrelated", ["flows/serve.py", "tests/pipeline/test_plan.py",
                                       "components/tasks/scoring.py",  # `medgym tasks score`, no stage's code
                                       "components/tasks/calculators/medcalc_rows.py"])  # read by tests only
def test_a_file_no_stage_runs_changes_no_key(untouched: Path, tmp_path: Path, unrelated: str):
    edited = edit(_copy(tmp_path), unrelated)
    assert rekeyed("demo", untouched, edited) == set()
    assert rekeyed("diag-demo", untouched, edited) == set()


# ---------------------------------------------------------------------- the closure on a tiny project
def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_the_closure_follows_lazy_relative_and_named_imports_and_files_read_beside(tmp_path: Path):
    root = _tree(tmp_path, {
        "components/__init__.py": "",
        "components/app/__init__.py": "",
        "components/app/main.py": ("import numpy\nfrom flows import cli\nfrom components.profile.config import Profile\n"
                                   "from . import sibling\n\n\ndef later():\n    from ..lib.deep import thing\n"
                                   "    importlib.import_module('components.plugins.one')\n"
                                   "    return Path(__file__).with_name('table.lock').read_text()\n"),
        "components/app/sibling.py": "",
        "components/app/table.lock": "pinned",
        "components/app/unused.py": "",
        "components/lib/__init__.py": "from components.lib import base\n",
        "components/lib/base.py": "",
        "components/lib/deep.py": "thing = 1\n",
        "components/plugins/one.py": "",
        "components/plugins/two.py": "",
        "components/profile/config.py": "from components.app import unused\n",
        "flows/cli.py": "",
    })
    assert closure(root, ("components.app.main",)) == (
        "components/__init__.py", "components/app/__init__.py", "components/app/main.py", "components/app/sibling.py",
        "components/app/table.lock", "components/lib/__init__.py", "components/lib/base.py", "components/lib/deep.py",
        "components/plugins/one.py")


def test_an_entry_that_is_not_a_module_or_a_module_that_does_not_parse_is_named(tmp_path: Path):
    root = _tree(tmp_path, {"components/app.py": "from components import broken\n",
                            "components/broken.py": "def f(:\n"})
    with pytest.raises(ClosureError, match=r"entry module components\.missing: no components/missing\.py"):
        closure(root, ("components.missing",))
    with pytest.raises(ClosureError, match=r"^components/broken\.py:1: cannot parse"):
        closure(root, ("components.app",))


def test_the_parsed_imports_kept_between_commands_follow_an_edit_and_a_new_file_beside(tmp_path: Path):
    from components.pipeline import closure as module

    root = _tree(tmp_path / "project", {"components/__init__.py": "", "components/app.py": "from . import a\n",
                                        "components/a.py": "A = 1\n", "components/b.py": ""})
    store = tmp_path / "state" / "closure-names.json"

    def command() -> tuple[str, ...]:  # a new command: nothing of the last one's in memory, only the store on disk
        module.forget()
        return module.closure(root, ("components.app",), store)

    assert command() == ("components/__init__.py", "components/a.py", "components/app.py")
    assert store.is_file() and module.name_store(store).parsed == 3
    assert command() == ("components/__init__.py", "components/a.py", "components/app.py")
    assert module.name_store(store).parsed == 0  # every module's imports came from the store
    (root / "components/app.py").write_text("from . import a, b\n", encoding="utf-8")
    assert command() == ("components/__init__.py", "components/a.py", "components/app.py", "components/b.py")
    # a file beside a module is one it may read by name: its arrival makes the module's names be read again
    (root / "components/app.py").write_text("from . import a\nPath(__file__).with_name('rules.yaml')\n",
                                            encoding="utf-8")
    assert "components/rules.yaml" not in command()
    (root / "components/rules.yaml").write_text("x: 1\n", encoding="utf-8")
    assert "components/rules.yaml" in command()
    store.write_text("{not json", encoding="utf-8")  # a damaged store costs a parse, never a wrong closure
    assert command() == ("components/__init__.py", "components/a.py", "components/app.py", "components/rules.yaml")
