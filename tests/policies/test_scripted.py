"""The scripted teacher on real generated tasks, through CodingEnv on the real process sandbox.

It solves every domain from the compacted reference; each injected mistake shows in the environment (an error,
or a failed re-derivation) and is repaired from that observation; reruns reproduce; tasks without a reference
solution are refused.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pydantic
import pytest

from components.envs.actions import SubmitAnswer, find_actions
from components.envs.coding_env import CodingEnv, EnvConfig
from components.envs.episode import Episode, Outcome, Sampling
from components.policies.protocol import Generation, GenerationRequest, Policy, PolicyRefusal
from components.policies.registry import PolicyConfig, refusal
from components.policies.scripted import MISTAKE_KINDS, ScriptedConfig, ScriptedTeacher, compact_reference, mistake_sites
from components.sandbox.factory import open_sandbox
from components.sandbox.protocol import Limits
from components.sandbox.warm import sandbox_supply
from components.tasks import code_judge
from components.tasks.generators import GenContext, all_generators
from components.tasks.record import AnswerSpec, AnswerType, Domain, Task
from tests.envs.conftest import process_backend_unavailable

# three categories per domain, chosen so that every mistake kind applies somewhere (wrong_unit: calculators with
# a unit conversion; wrong_column: SQL and CSV tasks; off_by_one: an id, an age, a k-mer length)
CATEGORIES = (
    "ehr_admissions_in_year", "ehr_drug_route", "ehr_treqs_avg_age",
    "calc_bmi", "calc_cockcroft_gault", "calc_due_date",
    "biostat_ttest_csv", "biostat_power_two_sample_t", "biostat_km_median",
    "bioinfo_gc_content", "bioinfo_kmer", "bioinfo_translation",
)
SILENT = ("off_by_one", "wrong_unit")  # the code runs and prints a wrong value: only the re-derivation shows it
_REPLY = re.compile(r"^(?:(?!```)[^\n])+\n\n```(python|json)\n.*\n```$", re.DOTALL)  # one line of prose, then one fenced block


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Task]]:
    out = tmp_path_factory.mktemp("suite")
    gens = {g.category: g for g in all_generators()}
    tasks = {c: next(iter(gens[c].generate(GenContext(out_dir=out, seed=5, split="test"), 1))) for c in CATEGORIES}
    return out, tasks


@pytest.fixture(scope="module")
def supply() -> Any:
    reason = process_backend_unavailable()
    if reason:
        pytest.skip(reason)
    with sandbox_supply("process", Limits(timeout_s=30), warm=2) as factory:
        yield factory


@pytest.fixture(scope="module")
def env(suite: tuple[Path, dict[str, Task]], supply: Any) -> Any:
    with CodingEnv(suite[0], supply, EnvConfig(max_turns=10, exec_timeout_s=30)) as coding_env:
        yield coding_env


def play(env: CodingEnv, teacher: ScriptedTeacher, task: Task, seed: int = 0) -> tuple[Episode, list[Generation]]:
    """One episode, driven the way the rollout scheduler drives a policy (its metadata lands on the turn)."""
    env.reset(task)
    memory: dict[str, Any] = {}
    gens = []
    while not env.episode.done:
        request = GenerationRequest(key=env.episode.episode_id, messages=env.episode.messages(), sampling=Sampling(seed=seed),
                                    task=task, memory=memory)
        gen = teacher.generate([request])[0]
        env.step(gen.text)
        env.episode.turns[-1].metadata.update(gen.metadata)
        gens.append(gen)
    return env.episode, gens


def assert_reads_like_an_agent(gen: Generation) -> None:
    assert _REPLY.match(gen.text) and gen.text.count("```") == 2, gen.text
    assert len(find_actions(gen.text)) == 1
    assert gen.metadata["teacher"]["backend"] == "scripted"


def test_the_teacher_is_a_policy_with_a_strict_config() -> None:
    teacher = ScriptedTeacher()
    assert isinstance(teacher, Policy)
    assert (teacher.backend, teacher.model_id, teacher.uses_tokens, teacher.max_context) == ("scripted", "scripted-teacher", False, None)
    assert teacher.config.mistake_rate == 0.5 and teacher.config.mistakes == list(MISTAKE_KINDS)
    with pytest.raises(pydantic.ValidationError):
        ScriptedConfig(mistake_rate=0.5, temperature=0.7)
    with pytest.raises(pydantic.ValidationError):
        ScriptedConfig(mistakes=["wrong_table"])
    with pytest.raises(pydantic.ValidationError):
        ScriptedConfig(mistake_rate=1.5)


def test_without_mistakes_it_solves_every_domain(env: CodingEnv, suite: tuple[Path, dict[str, Task]]) -> None:
    teacher = ScriptedTeacher(ScriptedConfig(mistake_rate=0))
    outcomes: Counter[tuple[str, str]] = Counter()
    for task in suite[1].values():
        episode, gens = play(env, teacher, task)
        outcomes[(task.domain.value, episode.outcome.value)] += 1
        assert [g.metadata["teacher"]["stage"] for g in gens] == ["solve", "submit"], task.task_id
        assert not any(g.metadata["teacher"]["mistake"] or g.metadata["teacher"]["repair"] for g in gens)
        for gen in gens:
            assert_reads_like_an_agent(gen)
    assert outcomes == {(d.value, "correct"): 3 for d in Domain}, outcomes


def test_each_mistake_shows_in_the_environment_and_is_repaired(env: CodingEnv, suite: tuple[Path, dict[str, Task]]) -> None:
    injected: Counter[str] = Counter()
    repaired: Counter[str] = Counter()
    for kind in MISTAKE_KINDS:
        teacher = ScriptedTeacher(ScriptedConfig(mistake_rate=1, mistakes=[kind]))
        applicable = [t for t in suite[1].values() if mistake_sites(t, compact_reference(t.reference_code or ""))[kind]]
        assert applicable, kind
        for task in applicable[:6]:  # six episodes per kind keep the file well under a minute
            episode, gens = play(env, teacher, task)
            meta = [g.metadata["teacher"] for g in gens]
            assert meta[0]["stage"] == "solve" and meta[0]["mistake"] == kind, task.task_id
            assert all(m["mistake"] is None for m in meta[1:])  # injected once, on the first turn
            assert episode.outcome == Outcome.CORRECT, (task.task_id, kind, [g.text for g in gens])
            for gen in gens:
                assert_reads_like_an_agent(gen)
            injected[kind] += 1
            fixes = [i for i, m in enumerate(meta) if m["repair"]]
            if not fixes:  # the mistake changed nothing the environment could show: it must then be harmless
                assert kind in SILENT and "verify" in [m["stage"] for m in meta], (task.task_id, kind)
                continue
            repaired[kind] += 1
            (at,) = fixes
            failed = episode.turns[at - 1]  # the turn the repair answers: a real error in the observation
            assert failed.error is not None and failed.observation.startswith("Execution failed:")
            assert meta[at]["repaired"] == kind and meta[at]["evidence"] in failed.observation
            if kind in SILENT:  # the code ran; the re-derivation's assert is what failed
                assert meta[at - 1]["stage"] == "verify" and failed.error.kind == "AssertionError"
                assert episode.turns[0].error is None
            else:
                assert at == 1 and failed.error.kind in ("NameError", "KeyError", "OperationalError", "sqlite3.OperationalError")
            assert gens[at].text.startswith(("The error says ", "The check failed ("))
            assert episode.turns[at].error is None  # the fixed code runs
    print(f"\nscripted teacher: injected {dict(injected)}, repaired {dict(repaired)}")
    assert set(injected) == set(MISTAKE_KINDS) and set(repaired) == set(MISTAKE_KINDS)
    for kind in ("wrong_column", "typo", "missing_import"):  # error-producing mistakes always show
        assert repaired[kind] == injected[kind], kind
    assert sum(repaired.values()) >= 0.8 * sum(injected.values())


def test_verify_clean_and_a_short_turn_budget(suite: tuple[Path, dict[str, Task]], supply: Any) -> None:
    task = suite[1]["calc_bmi"]
    with CodingEnv(suite[0], supply, EnvConfig(max_turns=10, exec_timeout_s=30)) as coding_env:
        episode, gens = play(coding_env, ScriptedTeacher(ScriptedConfig(mistake_rate=0, verify_clean=True)), task)
    assert [g.metadata["teacher"]["stage"] for g in gens] == ["solve", "verify", "submit"]
    assert episode.outcome == Outcome.CORRECT and all(t.error is None for t in episode.turns)
    # two turns leave no room for a repair: the teacher submits on the last one instead of running out
    with CodingEnv(suite[0], supply, EnvConfig(max_turns=2, exec_timeout_s=30)) as coding_env:
        episode, gens = play(coding_env, ScriptedTeacher(ScriptedConfig(mistake_rate=1, mistakes=["wrong_unit"])), task)
    assert [g.metadata["teacher"]["stage"] for g in gens] == ["solve", "submit"]
    assert episode.submitted and episode.outcome == Outcome.WRONG_ANSWER  # the unseen mistake stays in


def test_the_repair_waits_for_the_environment_and_the_submission_is_what_ran(suite: tuple[Path, dict[str, Task]]) -> None:
    """Fed observations in which nothing failed, the teacher repairs nothing and submits what was printed."""
    task = suite[1]["calc_bmi"]
    teacher = ScriptedTeacher(ScriptedConfig(mistake_rate=1, mistakes=["typo"]))
    memory: dict[str, Any] = {}
    chat = [{"role": "user", "content": task.prompt}]

    def reply(observation: str | None) -> Generation:
        if observation is not None:
            chat.append({"role": "user", "content": observation})
        gen = teacher.generate([GenerationRequest(key="k", messages=list(chat), sampling=Sampling(), task=task, memory=memory)])[0]
        chat.append({"role": "assistant", "content": gen.text})
        return gen

    assert reply(None).metadata["teacher"]["mistake"] == "typo"
    verify = reply("31.5\n\n[turn 1 of 10]")  # the typo did not show: no repair, a check instead
    assert verify.metadata["teacher"]["stage"] == "verify" and not verify.metadata["teacher"]["repair"]
    submit = reply("printed: 31.5 | re-derived: 31.5\n\n[turn 2 of 10]")
    action = find_actions(submit.text)[0]
    assert isinstance(action, SubmitAnswer) and action.answer == 31.5 != task.answer  # what ran, not the truth
    assert not submit.metadata["teacher"]["repair"]


def test_reruns_reproduce_and_seeds_vary_the_mistakes(env: CodingEnv, suite: tuple[Path, dict[str, Task]]) -> None:
    task = suite[1]["calc_cockcroft_gault"]
    teacher = ScriptedTeacher(ScriptedConfig(mistake_rate=0.5))

    def first_turn(seed: int) -> Generation:
        request = GenerationRequest(key="k", messages=[{"role": "user", "content": task.prompt}], sampling=Sampling(seed=seed), task=task)
        return teacher.generate([request])[0]

    plans = [first_turn(s).metadata["teacher"]["mistake"] for s in range(24)]
    assert plans == [first_turn(s).metadata["teacher"]["mistake"] for s in range(24)]
    assert None in plans and len(set(plans)) >= 3, plans  # some clean episodes, several kinds of mistake
    seed = plans.index(next(p for p in plans if p is not None))
    first, again = play(env, teacher, task, seed), play(env, teacher, task, seed)
    assert [g.text for g in first[1]] == [g.text for g in again[1]]
    assert [g.metadata for g in first[1]] == [g.metadata for g in again[1]]
    assert first[0].outcome == again[0].outcome == Outcome.CORRECT


def test_a_task_without_a_reference_solution_is_refused(suite: tuple[Path, dict[str, Task]]) -> None:
    imported = suite[1]["ehr_drug_route"].model_copy(update={"reference_code": None, "task_id": "mimic_iii/7", "dataset": "mimic_iii"})
    teacher = ScriptedTeacher()
    reason = teacher.refuse(imported)
    assert reason is not None and "needs a reference solution" in reason and "mimic_iii/7 (mimic_iii)" in reason
    assert "hf, vllm, openai" in reason
    # what a collection asks before building anything
    assert "reference solution" in (refusal(PolicyConfig(backend="scripted"))(imported) or "")
    with pytest.raises(PolicyRefusal):
        teacher.generate([GenerationRequest(key="k", messages=[], sampling=Sampling(), task=imported)])
    assert teacher.refuse(suite[1]["ehr_drug_route"]) is None


def test_compact_code_keeps_only_what_the_answer_needs(suite: tuple[Path, dict[str, Task]]) -> None:
    task = suite[1]["bioinfo_kmer"]
    reference = task.reference_code or ""
    compact = compact_reference(reference)
    assert len(compact) < 0.6 * len(reference), (len(compact), len(reference))
    tree = ast.parse(compact)
    defs = {s.name for s in tree.body if isinstance(s, ast.FunctionDef)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert defs and defs <= used  # every function kept is called
    helpers = {s.name for s in ast.parse(reference).body if isinstance(s, ast.FunctionDef)}
    assert {"codon_table", "revcomp"} <= helpers - defs  # the library's other helpers are gone
    solve = ScriptedTeacher(ScriptedConfig(mistake_rate=0)).generate(
        [GenerationRequest(key="k", messages=[{"role": "user", "content": task.prompt}], sampling=Sampling(), task=task)])[0]
    assert compact.rstrip() in solve.text and "def codon_table" not in solve.text


HARNESS = (
    "import math, random\n<<insert solution here>>\n"
    "def main():\n    random.seed(7)\n    for _ in range(3):\n        print(area(random.uniform(0.5, 4.0)))\n"
    "if __name__ == '__main__':\n    main()\n"
)
AREA = "def area(r):\n    return math.pi * r * r\n"


def test_a_code_task_gets_the_solution_out_of_its_reference_program(tmp_path: Path) -> None:
    reason = process_backend_unavailable()
    if reason:
        pytest.skip(reason)
    box = open_sandbox("process")
    try:
        trace = code_judge.trace(box, HARNESS, "area", AREA)
    finally:
        box.close()
    task = Task(task_id="biocoder/0", dataset="biocoder", category="biocoder", domain=Domain.BIOINFO, split="test",
                prompt="Write the function `def area(r)`: the area of a circle of radius r.", answer=AREA,
                answer_spec=AnswerSpec(type=AnswerType.CODE, tests=HARNESS, target="area", expected_trace=trace),
                reference_code=code_judge.insert_submission(HARNESS, AREA), source="medagentgym")
    cfg = EnvConfig(max_turns=3, exec_timeout_s=30)
    with sandbox_supply("process", Limits(timeout_s=30), warm=1) as supply, CodingEnv(tmp_path, supply, cfg) as coding_env:
        episode, gens = play(coding_env, ScriptedTeacher(ScriptedConfig(mistake_rate=1)), task)
    assert episode.outcome == Outcome.CORRECT and len(gens) == 1
    assert episode.submitted_answer == AREA and "def main" not in gens[0].text
    assert gens[0].metadata["teacher"]["stage"] == "submit" and gens[0].metadata["teacher"]["mistake"] is None


def test_an_unrepaired_mistake_is_submitted_wrong_or_given_up_and_the_rate_leaves_other_draws_alone(
        env: CodingEnv, suite: tuple[Path, dict[str, Task]]) -> None:
    tasks = [t for t in suite[1].values() if t.answer_spec.type != AnswerType.CODE][:12]
    sloppy = ScriptedTeacher(ScriptedConfig(mistake_rate=1, unrepaired_rate=1))
    outcomes: Counter[str] = Counter()
    for task in tasks:
        episode, gens = play(env, sloppy, task)
        meta = [g.metadata["teacher"] for g in gens]
        if meta[0]["mistake"] is None:  # no mistake applies to this task: solved as ever
            assert episode.outcome == Outcome.CORRECT
            continue
        assert not any(m["repair"] for m in meta) and len(gens) == 2, task.task_id
        assert episode.outcome != Outcome.CORRECT, task.task_id
        if episode.turns[0].error is None:  # what the mistaken code printed, submitted
            assert meta[1]["stage"] == "submit" and episode.submitted_answer is not None
            outcomes["submitted wrong"] += 1
        else:  # it raised: nothing to submit
            assert meta[1]["stage"] == "give_up" and episode.submitted_answer is None
            outcomes["gave up"] += 1
    assert outcomes["submitted wrong"] >= 1 and outcomes["gave up"] >= 1, outcomes
    # the rate draws from its own stream: the mistakes planned at rate 0 and rate 1 are the same
    careful = ScriptedTeacher(ScriptedConfig(mistake_rate=1, unrepaired_rate=0))
    for task in tasks[:4]:
        def req(task: Task = task) -> GenerationRequest:
            return GenerationRequest(key="k", messages=[{"role": "user", "content": task.prompt}],
                                     sampling=Sampling(seed=3), task=task)
        assert sloppy.generate([req()])[0].text == careful.generate([req()])[0].text
