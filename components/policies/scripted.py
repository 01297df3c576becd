"""The scripted teacher: plays generated tasks from their reference solution, with mistakes it then repairs.

It exists for offline demos and tests, and for trajectories that hold errors and recoveries. Each episode:

  solve   a short sentence, then compact code for this one task: the reference program pruned with `ast` to
          what its final statements need (`compact_reference`), with at most one injected mistake
  verify  (after a mistaken run that did not fail; with `verify_clean`, after every first run) the value is
          re-derived a second way and compared, by an assert, with what the run printed
  repair  when the environment reported a failure (an error, or the failed assert): one sentence naming what
          went wrong, then the corrected code
  submit  what the last good run printed (its last stdout line, read as JSON, as solvability.py does); code
          tasks submit the solution program itself; on the environment's last turn it submits what it has

The teacher never reads `task.answer`, and it repairs only after an observation showing a failure: a mistake
that the environment never exposes stays in, and the episode ends as it ends. Whether an episode gets a
mistake, which kind and where are drawn from (task_id, sampling seed), so a rerun reproduces every text. Each
turn's `Generation.metadata["teacher"]` says what happened (see `TeacherTurn`).

Mistakes (only those that apply to a task are drawn; when none does, nothing is injected):
  wrong_column    a `table.column` of the SQL, or a CSV column literal, renamed   (no such column / KeyError)
  typo            a use of a defined name misspelt                                  (NameError)
  missing_import  a used import left out                                            (NameError)
  off_by_one      an integer literal (in the code or the SQL) shifted by one        (silent: the verify catches it)
  wrong_unit      a calculator's unit conversion call dropped, the raw value used    (silent: the verify catches it)
"""

from __future__ import annotations

import ast
import builtins
import json
import keyword
import random
import re
import textwrap
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from components.envs.answers import printed_answer
from components.policies.protocol import Generation, GenerationRequest, PolicyRefusal
from components.tasks.record import SUBMISSION_SLOT, AnswerType, Domain, Task

MistakeKind = Literal["wrong_column", "typo", "off_by_one", "wrong_unit", "missing_import"]
MISTAKE_KINDS: tuple[MistakeKind, ...] = ("wrong_column", "typo", "off_by_one", "wrong_unit", "missing_import")
Stage = Literal["solve", "verify", "repair", "submit", "give_up"]

_FAILED = ("Execution failed:", "Could not read an action")  # how coding_env starts an observation of a failure
_LAST_TURN = "next turn is the last"  # coding_env's warning: the teacher submits rather than lose the episode
# what coding_env appends after the program's output; the output is what comes before the first of them
_TRAILERS = ("\n\nstderr:\n", "\n\nOutput was cut", "\n\nNote: ", "\n\n[turn ", "\n\nTurn limit", "\n\nThe episode is stopped")
_NOTHING_PRINTED = "(the code ran and printed nothing"
_SHOWN_CHARS = 60  # a value quoted in a sentence is cut here (sequences run to thousands of letters)


class ScriptedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mistake_rate: float = Field(default=0.5, ge=0, le=1, description="probability that an episode gets one injected mistake")
    mistakes: list[MistakeKind] = Field(
        default_factory=lambda: list(MISTAKE_KINDS), description="the kinds drawn from; a kind that does not apply to a task is skipped"
    )
    unrepaired_rate: float = Field(
        default=0.0, ge=0, le=1,
        description="probability that an episode with a mistake submits what the mistaken code printed instead of "
        "noticing and repairing it (or gives up when it raised): the incorrect episodes a verifier and DPO need",
    )
    verify_clean: bool = Field(
        default=False,
        description="re-derive the answer before submitting in clean episodes too (one more turn), so that a verify "
        "turn does not by itself tell a reader that a mistake was made",
    )


@dataclass(frozen=True)
class Edit:
    """Replace program[start:end] with `text` (character offsets into the compact program)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Mistake:
    kind: MistakeKind
    edits: tuple[Edit, ...]
    cause: str  # the clause of the repair sentence that names what went wrong, e.g. "I forgot `import json`"


@dataclass(frozen=True)
class TeacherTurn:
    """What `Generation.metadata["teacher"]` holds for one turn (plain JSON values)."""

    stage: Stage
    mistake: MistakeKind | None = None  # the mistake injected on this turn (only the solve turn injects)
    repair: bool = False  # this turn fixes the episode's mistake after a failure the environment showed
    repaired: MistakeKind | None = None  # which mistake this turn repairs
    evidence: str | None = None  # the observation's failure line that the repair answers
    planned: MistakeKind | None = None  # the episode's mistake, on every turn (None: a clean episode)
    backend: str = "scripted"


# ---------------------------------------------------------------------------------------------- the policy


class ScriptedTeacher:
    backend = "scripted"
    model_id = "scripted-teacher"
    uses_tokens = False
    max_context: int | None = None

    def __init__(self, config: ScriptedConfig | None = None) -> None:
        self.config = config or ScriptedConfig()

    @staticmethod
    def refuse(task: Task) -> str | None:
        """Why the teacher cannot play `task` (None: it can); needs no teacher built, so a driver can ask first."""
        if not (task.reference_code or "").strip():
            return (
                f"the scripted teacher needs a reference solution; task {task.task_id} ({task.dataset}) has none — "
                "imported tasks are played by model policies (hf, vllm, openai)"
            )
        try:
            ast.parse(task.reference_code or "")
        except SyntaxError as exc:
            return f"the scripted teacher cannot read the reference solution of task {task.task_id} ({task.dataset}): {exc.msg}"
        return None

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out = []
        for req in requests:
            start = time.monotonic()
            text, turn = self._turn(req)
            out.append(Generation(text=text, model_time_s=time.monotonic() - start, metadata={"teacher": asdict(turn)}))
        return out

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------------------------------ one turn
    def _turn(self, req: GenerationRequest) -> tuple[str, TeacherTurn]:
        task = req.task
        if task is None:
            raise ValueError("the scripted teacher plays from the task's reference solution: the request carries no task")
        mem = req.memory
        if "last" not in mem:
            reason = self.refuse(task)
            if reason:
                raise PolicyRefusal(reason)
            mem.update(plan_episode(task, req.sampling.seed, self.config))
            return self._solve(task, mem)
        planned = mem["mistake"]["kind"] if mem["mistake"] else None
        obs = req.messages[-1]["content"] if req.messages else ""
        failure = failure_line(obs)
        if failure is None and mem["last"] in ("run_bad", "run_good"):
            mem["printed"] = printed_line(obs)
        if _LAST_TURN in obs or mem["last"] == "submitted":  # no turn left for anything but the answer
            return self._submit(mem, "This is the last turn: I submit what I have.", planned)
        last = mem["last"]
        if last == "run_bad" and mem.get("unrepaired"):
            if failure is None:
                return self._submit(mem, f"The code printed {_shown(mem['printed'])}, so I submit it.", planned)
            mem["last"] = "submitted"
            text = f"The run failed ({_clip(failure, 200)}); I submit no answer.\n\n{submit_block(None)}"
            return text, TeacherTurn(stage="give_up", planned=planned)
        if failure is not None and last in ("run_bad", "verify") and mem["mistake"] and not mem["repaired"]:
            return self._repair(mem, failure, planned)
        if failure is not None:  # the correct program failed: nothing left to fix
            mem["last"] = "submitted"
            text = f"The run failed ({_clip(failure, 200)}) and I see nothing to fix; I submit no answer.\n\n{submit_block(None)}"
            return text, TeacherTurn(stage="give_up", planned=planned)
        if last == "run_bad" or (last == "run_good" and self.config.verify_clean and not mem["verified"] and not mem["repaired"]):
            return self._verify(mem, planned)
        if last == "verify":
            return self._submit(mem, f"Both derivations agree on {_shown(mem['printed'])}, so I submit it.", planned)
        lead = "The corrected code printed" if mem["repaired"] else "The code printed"
        return self._submit(mem, f"{lead} {_shown(mem['printed'])}, so I submit it.", planned)

    def _solve(self, task: Task, mem: dict[str, Any]) -> tuple[str, TeacherTurn]:
        mistake = mem["mistake"]
        if task.answer_spec.type == AnswerType.CODE:
            mem["last"] = "submitted"
            target = task.answer_spec.target
            what = f"the `{target}` function" if target else "the program"
            return f"This is a coding task: I submit {what}.\n\n{submit_block(mem['good'])}", TeacherTurn(stage="submit")
        code = mem["bad"] if mistake else mem["good"]
        mem["last"] = "run_bad" if mistake else "run_good"
        kind = mistake["kind"] if mistake else None
        return f"{plan_sentence(task, code)}\n\n{python_block(code)}", TeacherTurn(stage="solve", mistake=kind, planned=kind)

    def _verify(self, mem: dict[str, Any], planned: MistakeKind | None) -> tuple[str, TeacherTurn]:
        mem["last"], mem["verified"] = "verify", True
        code = verify_program(mem["good"], mem["printed"])
        if code is None:  # no final print to compare with: take the printed value as it is
            return self._submit(mem, f"The code printed {_shown(mem['printed'])}, so I submit it.", planned)
        text = (
            f"The code printed {_shown(mem['printed'])}. Before submitting, I re-derive it a second way and check "
            f"that the two agree.\n\n{python_block(code)}"
        )
        return text, TeacherTurn(stage="verify", planned=planned)

    def _repair(self, mem: dict[str, Any], failure: str, planned: MistakeKind | None) -> tuple[str, TeacherTurn]:
        mem["last"], mem["repaired"] = "run_good", True
        mistake = mem["mistake"]
        said = _evidence_clause(failure)
        text = f"{said}: {mistake['cause']}. Here is the corrected code.\n\n{python_block(mem['good'])}"
        return text, TeacherTurn(stage="repair", repair=True, repaired=mistake["kind"], evidence=_clip(failure, 300), planned=planned)

    def _submit(self, mem: dict[str, Any], lead: str, planned: MistakeKind | None) -> tuple[str, TeacherTurn]:
        mem["last"] = "submitted"
        return f"{lead}\n\n{submit_block(printed_answer(mem.get('printed')))}", TeacherTurn(stage="submit", planned=planned)


# ---------------------------------------------------------------------------------------------- the plan


def plan_episode(task: Task, seed: int, config: ScriptedConfig) -> dict[str, Any]:
    """The episode's programs and its mistake (or None), drawn from (task_id, seed): the teacher's memory."""
    rng = random.Random(f"scripted-teacher:{task.task_id}:{seed}")  # str seeds hash with SHA-512: stable everywhere
    inject = rng.random() < config.mistake_rate  # drawn first, always, so the rate does not shift later draws
    if task.answer_spec.type == AnswerType.CODE:
        return _memory(code_solution(task), None)
    good = compact_reference(task.reference_code or "")
    sites = mistake_sites(task, good)
    if verify_program(good, "null") is None:  # a silent mistake would go unseen: no final print to re-derive
        sites["off_by_one"], sites["wrong_unit"] = [], []
    kinds = [k for k in MISTAKE_KINDS if k in config.mistakes and sites[k]]
    if not (inject and kinds):
        return _memory(good, None)
    mistake = rng.choice(sites[rng.choice(kinds)])
    memory = _memory(good, mistake)
    # its own stream: a nonzero rate leaves every other draw (and so every episode at rate 0) as it was
    memory["unrepaired"] = random.Random(f"scripted-teacher-unrepaired:{task.task_id}:{seed}").random() \
        < config.unrepaired_rate
    return memory


def _memory(good: str, mistake: Mistake | None) -> dict[str, Any]:
    return {
        "good": good,
        "bad": apply_edits(good, mistake.edits) if mistake else None,
        "mistake": {"kind": mistake.kind, "cause": mistake.cause} if mistake else None,
        "last": "planned",  # what the teacher sent last: run_bad, run_good, verify or submitted
        "printed": None,  # the last stdout line of the last run that succeeded
        "repaired": False,
        "verified": False,
    }


def apply_edits(code: str, edits: tuple[Edit, ...]) -> str:
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        code = code[: e.start] + e.text + code[e.end :]
    return code


# ---------------------------------------------------------------------------------------------- compaction

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_IMPORTS = (ast.Import, ast.ImportFrom)


def compact_reference(code: str) -> str:
    """The reference program cut to what its final statements need, imports first.

    The final statements (those after the last definition) are kept; then, transitively, every top-level
    function, class, import and assignment that binds a name they use (a bare call among the definitions binds
    nothing and goes too). Generators paste a domain's whole helper library into every task (six FASTA helpers
    for a GC-content question); an agent would write the three it needs. A program it cannot cut safely (no
    final statements, two statements on one line) comes back whole.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    body = tree.body
    roots = _roots(body)
    starts = [_first_line(s) for s in body]
    if not roots or len(set(starts)) < len(starts):
        return code
    binders: dict[str, list[int]] = {}
    for i, stmt in enumerate(body):
        if i not in roots:
            for name in _bound_names(stmt):
                binders.setdefault(name, []).append(i)
    keep, todo = set(roots), list(roots)
    while todo:
        for name in _used_names(body[todo.pop()]):
            for j in binders.get(name, ()):
                if j not in keep:
                    keep.add(j)
                    todo.append(j)
    lines = code.splitlines()

    def source(stmt: ast.stmt) -> str:
        return "\n".join(lines[_first_line(stmt) - 1 : stmt.end_lineno])

    kept = [body[i] for i in sorted(keep)]
    annotated = any(_has_annotations(s) for s in kept)
    future = [source(s) for s in body if _is_future(s)] if annotated else []
    imports = sorted({source(s) for s in kept if isinstance(s, _IMPORTS) and not _is_future(s)}, key=_import_key)
    head = "\n\n".join(part for part in ("\n".join(future), "\n".join(imports)) if part)
    defs = [source(body[i]) for i in sorted(keep) if i not in roots and not isinstance(body[i], _IMPORTS)]
    tail = "\n".join(source(body[i]) for i in roots)
    blocks = [head, *defs, tail] if head else [*defs, tail]
    return ("\n\n\n" if defs else "\n\n").join(blocks) + "\n"


def _import_key(line: str) -> tuple[str, str]:
    # by module, as an agent (or isort) lists them: `import json` before `from scipy import stats`
    words = line.split()
    return (words[1] if len(words) > 1 else line), line


def _roots(body: list[ast.stmt]) -> list[int]:
    last_def = max((i for i, s in enumerate(body) if isinstance(s, _DEFS)), default=-1)
    return [i for i, s in enumerate(body) if i > last_def and not isinstance(s, _IMPORTS)]


def _first_line(stmt: ast.stmt) -> int:
    return min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])


def _is_future(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"


def _bound_names(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, _DEFS):
        return {stmt.name}
    if isinstance(stmt, _IMPORTS):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    return {n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)}


def _used_names(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}


def _has_annotations(stmt: ast.stmt) -> bool:
    for node in ast.walk(stmt):
        if isinstance(node, ast.AnnAssign) or (isinstance(node, ast.arg) and node.annotation is not None):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            return True
    return False


def code_solution(task: Task) -> str:
    """A code task's submission: the solution the reference program holds, without the test harness around it.

    BioCoder's reference is the harness with the solution in its slot (code_judge.insert_submission); the
    solution is what stands where the slot was. Without a slot the program itself is the submission.
    """
    ref, harness = task.reference_code or "", task.answer_spec.tests or ""
    at = harness.find(SUBMISSION_SLOT)
    after = harness[at + len(SUBMISSION_SLOT) :] if at >= 0 else ""
    if at < 0 or not ref.startswith(harness[:at]) or not ref.endswith(after):
        return ref
    body = ref[at : len(ref) - len(after)]
    line_start = harness.rfind("\n", 0, at) + 1
    return textwrap.dedent(harness[line_start:at] + body).strip("\n") + "\n"


# ---------------------------------------------------------------------------------------------- mistakes


class _Source:
    """Character offsets of ast positions (whose columns count UTF-8 bytes)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        return self.starts[lineno - 1] + len(self.lines[lineno - 1].encode()[:col].decode("utf-8", "ignore"))

    def span(self, node: ast.expr | ast.stmt) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)

    def segment(self, node: ast.expr | ast.stmt) -> str:
        start, end = self.span(node)
        return self.text[start:end]


def mistake_sites(task: Task, program: str) -> dict[MistakeKind, list[Mistake]]:
    """Every way each kind of mistake can be made in `program` (empty lists where a kind does not apply)."""
    src, tree = _Source(program), ast.parse(program)
    roots = [tree.body[i] for i in _roots(tree.body)]
    root_nodes = [n for stmt in roots for n in ast.walk(stmt)]
    return {
        "wrong_column": _wrong_columns(task, src, root_nodes),
        "typo": _typos(src, tree, root_nodes),
        "off_by_one": _off_by_ones(src, root_nodes),
        "wrong_unit": _wrong_units(task, src, tree, root_nodes),
        "missing_import": _missing_imports(src, tree),
    }


_SQL = re.compile(r"^\s*(select|with)\b", re.IGNORECASE)
_SQL_TABLE = re.compile(r"\b(?:from|join)\s+([A-Za-z_]\w*)", re.IGNORECASE)
_CSV_COLUMNS = re.compile(r"\bcolumns\s+([A-Za-z_]\w*(?:,\s*[A-Za-z_]\w*)+)")
# the names an agent plausibly guesses instead; each is checked against the names the task shows
_SYNONYMS = {
    "gender": "sex", "sex": "gender", "drug": "drug_name", "age": "age_years", "sbp": "systolic_bp", "ldl": "ldl_c",
    "hba1c": "hb_a1c", "bmi": "body_mass_index", "arm": "treatment_arm", "smoker": "smoking", "diabetes": "diabetic",
    "response": "responder", "time": "survival_time", "event": "status", "group": "treatment_group",
    "route": "drug_route", "label": "lab_name", "cost": "total_cost", "diagnosis": "diagnosis_name",
}
_SUFFIXES = ("time", "date", "id", "name", "type", "num", "numeric", "value", "path", "label", "source", "title", "code", "year")


def wrong_name(name: str, known: set[str]) -> str:
    """A column name an agent might guess for `name` that is none of the `known` names."""
    taken = {k.lower() for k in known}
    candidates = [_SYNONYMS.get(name.lower(), "")]
    if "_" in name.strip("_"):
        candidates.append(name.replace("_", ""))
    candidates += [f"{name[: -len(s)]}_{s}" for s in _SUFFIXES if name.lower().endswith(s) and len(name) > len(s) + 1]
    candidates += [f"{name}_value", f"{name}_col"]
    return next(c for c in candidates if c and c.lower() not in taken)


def _wrong_columns(task: Task, src: _Source, nodes: list[ast.AST]) -> list[Mistake]:
    out: list[Mistake] = []
    strings = [n for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    for node in strings:
        if not _SQL.match(node.value):
            continue
        start, end = src.span(node)
        literal = src.text[start:end]
        tables = set(_SQL_TABLE.findall(node.value))
        known = set(re.findall(r"[A-Za-z_]\w*", node.value))
        refs = re.finditer(r"\b([A-Za-z_]\w*)\.([A-Za-z_]\w*)\b", literal)
        for table, column in dict.fromkeys((m.group(1), m.group(2)) for m in refs if m.group(1) in tables):
            wrong = wrong_name(column, known)
            pattern = re.compile(rf"\b{re.escape(table)}\.{re.escape(column)}\b")
            edits = tuple(Edit(start + m.start(), start + m.end(), f"{table}.{wrong}") for m in pattern.finditer(literal))
            out.append(Mistake("wrong_column", edits, f"the column is {table}.{column}, not {table}.{wrong}"))
    found = _CSV_COLUMNS.search(task.prompt)
    columns = {c.strip() for c in found.group(1).split(",")} if found else set()
    for node in strings:
        if node.value in columns:
            wrong = wrong_name(node.value, columns)
            start, end = src.span(node)
            out.append(Mistake("wrong_column", (Edit(start, end, repr(wrong)),), f"the CSV has no column {wrong!r}; it is {node.value!r}"))
    return out


def _defined(tree: ast.Module) -> set[str]:
    return {name for stmt in tree.body if not isinstance(stmt, _IMPORTS) for name in _bound_names(stmt)}


def misspell(name: str, taken: set[str]) -> str | None:
    """`name` with two neighbouring letters swapped near its middle, the commonest typo; None if every swap is taken."""
    mid = len(name) // 2
    for i in sorted(range(1, len(name) - 1), key=lambda i: (abs(i - mid), i)):
        a, b = name[i], name[i + 1]
        typo = name[:i] + b + a + name[i + 2 :]
        if a != b and a.isalpha() and b.isalpha() and typo not in taken and not keyword.iskeyword(typo) and not hasattr(builtins, typo):
            return typo
    return None


def _typos(src: _Source, tree: ast.Module, nodes: list[ast.AST]) -> list[Mistake]:
    defined = _defined(tree)
    taken = defined | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    out, seen = [], set()
    for node in nodes:
        # short names (con, df) make a typo that reads as a different name rather than a slip
        loaded = isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
        if loaded and node.id in defined and len(node.id) >= 4 and node.id not in seen:
            seen.add(node.id)
            typo = misspell(node.id, taken)
            if typo:
                start, end = src.span(node)
                out.append(Mistake("typo", (Edit(start, end, typo),), f"I mistyped {node.id} as {typo}"))
    return out


_SQL_INT = re.compile(r"(?<![\w.%-])\d+(?![\w.])")


def _off_by_ones(src: _Source, nodes: list[ast.AST]) -> list[Mistake]:
    # indices (rows[0][0]) and round()'s digits are left alone: shifting them errs loudly or changes nothing
    skip = {id(n.slice) for n in nodes if isinstance(n, ast.Subscript)}
    skip |= {id(a) for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "round" for a in n.args[1:]}
    out = []
    for node in nodes:
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        if type(node.value) is int and abs(node.value) >= 2:
            start, end = src.span(node)
            shifted = node.value + 1
            cause = f"I wrote {shifted} where it should be {node.value}, off by one"
            out.append(Mistake("off_by_one", (Edit(start, end, str(shifted)),), cause))
        elif isinstance(node.value, str) and _SQL.match(node.value):
            start, end = src.span(node)
            for m in _SQL_INT.finditer(src.text[start:end]):
                value = int(m.group())
                if value >= 2:
                    edit = Edit(start + m.start(), start + m.end(), str(value + 1))
                    out.append(Mistake("off_by_one", (edit,), f"the query says {value + 1} where it should say {value}, off by one"))
    return out


_CONVERTER = re.compile(r"^[a-z0-9_]+_to_[a-z0-9_]+$")


def _wrong_units(task: Task, src: _Source, tree: ast.Module, nodes: list[ast.AST]) -> list[Mistake]:
    if task.domain != Domain.CALCULATOR:
        return []
    defined = _defined(tree)
    out = []
    for node in nodes:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defined
                and _CONVERTER.match(node.func.id) and len(node.args) == 1 and not node.keywords):
            start, end = src.span(node)
            raw = src.segment(node.args[0])
            cause = f"I passed {raw} as if it were already in the formula's unit instead of converting it with {node.func.id}()"
            out.append(Mistake("wrong_unit", (Edit(start, end, raw),), cause))
    return out


def _missing_imports(src: _Source, tree: ast.Module) -> list[Mistake]:
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out = []
    for stmt in tree.body:
        if isinstance(stmt, _IMPORTS) and not _is_future(stmt) and _bound_names(stmt) & used:
            start = src.starts[stmt.lineno - 1]
            end = src.starts[stmt.end_lineno or stmt.lineno]  # the whole lines, newline included
            line = src.text[start:end].strip()
            out.append(Mistake("missing_import", (Edit(start, end, ""),), f"I forgot `{line}`"))
    return out


# ---------------------------------------------------------------------------------------------- texts


def verify_program(program: str, printed: str | None) -> str | None:
    """`program` with its final `print(json.dumps(X))` replaced by a check that X equals what the last run printed.

    Both sides go through JSON, so the comparison is exact (a float prints as its shortest round-trip repr).
    """
    tree = ast.parse(program)
    last = tree.body[-1] if tree.body else None
    call = last.value if isinstance(last, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print" and len(call.args) == 1):
        return None
    dumps = call.args[0]
    if not (isinstance(dumps, ast.Call) and ast.unparse(dumps.func) == "json.dumps" and len(dumps.args) == 1):
        return None
    src = _Source(program)
    start, _ = src.span(last)
    shown = f"json.dumps(first)[:{_SHOWN_CHARS}]"
    check = (
        f"second = json.loads(json.dumps({src.segment(dumps.args[0])}))\n"
        f"first = json.loads({printed!r})  # what the last run printed\n"
        f'print("printed:", json.dumps(first)[:{_SHOWN_CHARS}], "| re-derived:", json.dumps(second)[:{_SHOWN_CHARS}])\n'
        f'assert first == second, f"the printed value {{{shown}}} differs from the re-derived '
        f'{{json.dumps(second)[:{_SHOWN_CHARS}]}}"\n'
    )
    return program[:start] + check


def plan_sentence(task: Task, code: str) -> str:
    """The one sentence of reasoning before the first run, from what the code it precedes does."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "I compute the answer directly."
    roots = [n for i in _roots(tree.body) for n in ast.walk(tree.body[i])]
    sql = [n.value for n in roots if isinstance(n, ast.Constant) and isinstance(n.value, str) and _SQL.match(n.value)]
    if sql:
        tables = list(dict.fromkeys(t for q in sql for t in _SQL_TABLE.findall(q)))
        return f"I answer this with one SQL query over the {_and(tables)} table{'s' if len(tables) > 1 else ''}."
    defined = _defined(tree)
    calls = [n.func.id for n in roots if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defined]
    converters = list(dict.fromkeys(c for c in calls if _CONVERTER.match(c)))
    main = next((c for c in calls if c not in converters), None)
    what = main.replace("_", " ") if main else "answer"
    if task.domain == Domain.CALCULATOR:
        name = task.metadata.get("calculator") or what
        conv = f", convert units with {_and(converters)}," if converters else ""
        return f"I take the values from the note{conv} and apply the {name} formula."
    if task.domain == Domain.BIOINFO:
        return f"I read the FASTA records and compute the {what} the question asks for."
    if any(cf.path.endswith(".csv") for cf in task.context_files):
        return f"I load the CSV with pandas and compute the {what} the question asks for."
    return f"I put the numbers from the question into the {what} calculation." if main else \
        "I put the numbers from the question into the calculation."


def python_block(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def submit_block(answer: Any) -> str:
    return f"```json\n{json.dumps({'type': 'submit_answer', 'answer': answer})}\n```"


def failure_line(observation: str) -> str | None:
    """The first line of an observation that reports a failure; None when the action succeeded."""
    text = observation.lstrip()
    if not text.startswith(_FAILED):
        return None
    return text.splitlines()[0].removeprefix("Execution failed:").strip()


def printed_line(observation: str) -> str | None:
    """The last line the program printed, from a successful run's observation (coding_env appends its notes after it)."""
    if observation.startswith(_NOTHING_PRINTED):
        return None
    cut = min((at for t in _TRAILERS if (at := observation.find(t)) >= 0), default=len(observation))
    lines = [line for line in observation[:cut].splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


def _evidence_clause(failure: str) -> str:
    kind, _, message = failure.partition(": ")
    if kind == "AssertionError":
        return f"The check failed ({_clip(message, 200)})"
    # "name 'json' is not defined" reads as a sentence; "'gender'" needs its KeyError
    said = message if " " in message.strip() and message else failure
    return f"The error says {_clip(said, 200)}"


def _shown(printed: str | None) -> str:
    if printed is None:
        return "nothing"
    return printed if len(printed) <= _SHOWN_CHARS else "the answer"


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
