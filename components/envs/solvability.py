"""Can every task be solved through the environment? A scripted agent runs the task's reference code as its
first action and submits what that printed (code tasks submit the reference solution).

This checks the whole path an agent takes, which the suite builder's batch confirmation does not: context
files uploaded where the prompt says, the sandbox's limits, output parsing, and the checker applied to a
submission. Any task it cannot solve is a broken task, not a hard one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

from components.envs.actions import RunCode, SubmitAnswer
from components.envs.answers import printed_answer
from components.envs.coding_env import CodingEnv, EnvConfig
from components.envs.episode import Episode
from components.sandbox.protocol import Sandbox
from components.tasks.record import AnswerType, Task


class SolvabilityReport(BaseModel):
    episodes: int
    solved: int
    by_domain: dict[str, list[int]]  # domain -> [episodes, solved]
    # "task_id: outcome (grader's reason)" for the first few unsolved tasks: an operator's report on broken tasks,
    # grader-side like Check.grader_reason (it may state the truth), never an input to a policy
    failures: list[str]
    outcomes: dict[str, int]

    @property
    def rate(self) -> float:
        return self.solved / self.episodes if self.episodes else 0.0


def reference_episode(env: CodingEnv, task: Task) -> Episode:
    env.reset(task)
    if task.answer_spec.type == AnswerType.CODE:
        env.step(SubmitAnswer(answer=task.answer))
        return env.episode
    step = env.step(RunCode(code=task.reference_code or ""))
    printed = env.episode.turns[-1].exec_result
    answer = None
    if not step.done and printed is not None and printed.stdout.strip():
        answer = printed_answer(printed.stdout.strip().splitlines()[-1])
    if not env.episode.done:
        env.step(SubmitAnswer(answer=answer))
    return env.episode


def check_solvability(tasks: Sequence[Task], task_root: Path, sandbox_factory: Callable[[], Sandbox],
                      config: EnvConfig | None = None, on_episode: Callable[[Episode], None] | None = None
                      ) -> SolvabilityReport:
    env = CodingEnv(task_root, sandbox_factory, config or EnvConfig(max_turns=2))
    by_domain: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    try:
        for task in tasks:
            episode = reference_episode(env, task)
            solved = episode.outcome == "correct"
            by_domain[task.domain.value][0] += 1
            by_domain[task.domain.value][1] += solved
            outcomes[str(episode.outcome)] += 1
            if not solved and len(failures) < 10:
                reason = episode.check.grader_reason if episode.check else "no check"
                failures.append(f"{task.task_id}: {episode.outcome} ({reason})")
            if on_episode:
                on_episode(episode)
    finally:
        env.close()
    return SolvabilityReport(episodes=len(tasks), solved=sum(s for _, s in by_domain.values()),
                             by_domain=dict(by_domain), failures=failures, outcomes=dict(outcomes))
