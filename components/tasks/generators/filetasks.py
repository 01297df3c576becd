"""Questions about shared context files: a few per file, and no prompt asked twice in a generator call.

File-based generators (biostat CSVs, bioinfo FASTAs) write a context file, ask up to `per_file` questions
about it, then write the next. A draw whose prompt was already asked is redrawn; when a file's questions run
out (MAX_REDRAWS draws in a row repeat) the next file starts early. Prompts name their file and file paths
carry the split, so prompts distinct within a call are distinct across splits too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from components.tasks.generators.base import GenContext, task_id
from components.tasks.generators.refcode import RefProgram
from components.tasks.record import AnswerSpec, ContextFile, Domain, Task

# a file with a question space of s that already gave k questions repeats with probability k/s per draw;
# 50 draws in a row only all repeat once the space is (nearly) used up
MAX_REDRAWS = 50

F = TypeVar("F")


@dataclass(frozen=True)
class Question:
    prompt: str
    func: Callable[..., Any]
    args: tuple[Any, ...]  # after the file path
    spec: AnswerSpec


def questions_per_file(n: int, per_file: int, open_file: Callable[[int], F], ask: Callable[[F], Question],
                       answer: Callable[[F, Question], Any]) -> Iterator[tuple[F, Question, Any]]:
    """`n` (file, question, answer) triples with distinct prompts, at most `per_file` per file.

    open_file(group) writes file number `group` and returns what `ask` and `answer` need about it; `answer`
    returns None for a question the file cannot answer (too few rows left by a filter), which is redrawn.
    """
    seen: set[str] = set()
    made = group = 0
    while made < n:
        file = open_file(group)
        asked = 0
        while asked < per_file and made < n:
            got = _draw_new(file, ask, answer, seen)
            if got is None:
                break
            q, value = got
            yield file, q, value
            asked += 1
            made += 1
        if asked == 0:  # a fresh file with no question at all would loop forever
            raise RuntimeError(f"context file {group} gave no new answerable question in {MAX_REDRAWS} draws")
        group += 1


def _draw_new(file: F, ask: Callable[[F], Question], answer: Callable[[F, Question], Any],
              seen: set[str]) -> tuple[Question, Any] | None:
    for _ in range(MAX_REDRAWS):
        q = ask(file)
        if q.prompt in seen:
            continue
        seen.add(q.prompt)  # an unanswerable prompt stays seen: redrawing it cannot help
        value = answer(file, q)
        if value is not None:
            return q, value
    return None


def file_task(*, dataset: str, category: str, domain: Domain, ctx: GenContext, i: int, rel: str, kind: str,
              q: Question, answer: Any, program: RefProgram) -> Task:
    """The Task for question `q` about context file `rel`; its reference program calls `q.func` on that file."""
    return Task(
        task_id=task_id(category, ctx.split, i), dataset=dataset, category=category, domain=domain,
        split=ctx.split, prompt=q.prompt, answer=answer, answer_spec=q.spec,
        context_files=[ContextFile(path=rel, kind=kind)],
        reference_code=program.render(q.func.__name__, rel, *q.args),
        metadata={"function": q.func.__name__},
    )
