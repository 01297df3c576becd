"""Every generated task is solvable through the environment; a broken one is caught."""

from __future__ import annotations

import pytest

from components.envs.solvability import check_solvability
from components.sandbox.protocol import Limits
from components.sandbox.warm import sandbox_supply
from components.tasks.generators import GenContext, all_generators


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    by_domain = {}
    for gen in sorted(all_generators(), key=lambda g: g.category):
        by_domain.setdefault(gen.domain, gen)
    tasks = [t for g in by_domain.values() for t in g.generate(GenContext(out_dir=out, seed=5, split="test"), 2)]
    return out, tasks


def test_reference_agent_solves_every_task_through_the_env(suite):
    out, tasks = suite
    with sandbox_supply("process", Limits(timeout_s=30)) as supply:
        report = check_solvability(tasks, out, supply)
    assert report.solved == report.episodes == len(tasks), report.failures
    assert set(report.by_domain) == {"ehr", "calculator", "biostat", "bioinfo"}


def test_a_task_whose_answer_disagrees_with_its_reference_is_reported(suite):
    out, tasks = suite
    broken = tasks[0].model_copy(update={"reference_code": "print('[\"not the answer\"]')\n"})
    with sandbox_supply("process", Limits(timeout_s=30), warm=1) as supply:
        report = check_solvability([broken, tasks[1]], out, supply)
    assert report.solved == 1 and report.outcomes == {"correct": 1, "wrong_answer": 1}
    assert report.failures[0].startswith(f"{broken.task_id}: wrong_answer")
