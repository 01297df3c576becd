"""Import the public MedAgentGym release (`<dataset>/<split>_tasks.jsonl`) into Task records.

Every dataset of the release either maps to tasks or is refused with the reason. A malformed row is reported
with file, line and field, and the good rows are still imported. Task ids are `<dataset>/<split>/<line index,
0-based>` and each task's metadata names its release file (`release_file`), so answers can be matched to the
release's rows.

The evaluation split follows the release's own protocol. MIMIC-III and eICU ship `valid_tasks.jsonl` and no test
file; the release's task classes read that file in test mode and its metadata.json counts those rows as the test
split, so here they are split `test` too. With `rollout_indices` the evaluation split keeps only the rows the
release's `rollout_indices.json` lists (the paper's 100 test tasks per dataset).
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from components.common.io import RecordError, iter_jsonl_lenient
from components.sandbox.protocol import Sandbox
from components.tasks import code_judge
from components.tasks.answer_forms import asked_unit, format_weeks_days, parse_date, parse_weeks_days, string_form
from components.tasks.record import SUBMISSION_SLOT, AnswerSpec, AnswerType, Domain, Task, ValueKind, save_tasks

# Datasets whose tasks cannot run without material that the release does not ship.
REFUSED_DATASETS: dict[str, str] = {
    "medagentbench": "its tasks read and write patient records through a FHIR server that the release does not ship",
    "ehrcon": "its questions are about credentialed MIMIC-III clinical notes and database rows that are not in the release",
    "ehrshot": "the release holds task descriptions only; the EHRSHOT features and labels are credentialed and not shipped",
    "mimic_extract": "the release holds task descriptions only; the MIMIC-Extract features and labels are credentialed and not shipped",
}
EHRSQL_DATASETS = ("mimic_iii", "eicu", "treqs")
EVALUATION_SPLIT = "test"
ROLLOUT_INDICES = "rollout_indices.json"  # beside the dataset folders, as in the release's data/


class SubsetCounts(BaseModel):
    """What rollout_indices.json did to one evaluation file."""

    listed: int  # distinct row indices the release lists for the dataset's test split
    kept: int  # well-formed rows among them: only these are imported
    outside: int  # well-formed rows it does not list: left out
    missing: list[int] = Field(default_factory=list)  # listed indices naming no well-formed row (past the end, malformed)


class ImportCounts(BaseModel):
    release_file: str = ""  # the release's own file, relative to the source folder
    rows: int = 0
    imported: int = 0
    refused: Counter[str] = Field(default_factory=Counter)  # reason -> count
    malformed: list[str] = Field(default_factory=list)  # messages naming file, line, field
    subset: SubsetCounts | None = None  # with rollout_indices, on evaluation files the subset file lists


class ImportReport(BaseModel):
    out: str
    per_file: dict[str, ImportCounts] = Field(default_factory=dict)  # "<dataset>/<split>" -> counts
    ignored: list[str] = Field(default_factory=list)  # .jsonl files that are not task files (e.g. method notes)
    valid_as_test: list[str] = Field(default_factory=list)  # datasets whose valid file became the evaluation split
    rollout_indices: str | None = None  # the subset file the evaluation split was restricted to
    subset_absent: list[str] = Field(default_factory=list)  # datasets that file lists nothing for: kept whole

    @property
    def imported(self) -> int:
        return sum(c.imported for c in self.per_file.values())

    def notes(self) -> list[str]:
        """One line per choice the import made about the evaluation split, for people reading the report."""
        lines = []
        for dataset in self.valid_as_test:
            c = self.per_file[f"{dataset}/{EVALUATION_SPLIT}"]
            lines.append(f"{dataset}: {c.release_file} (no test file beside it) is the evaluation split "
                         f"'{EVALUATION_SPLIT}', as the release evaluates it: {c.rows} rows, {c.imported} imported")
        if self.rollout_indices is None:
            return lines
        for key, c in self.per_file.items():
            if (s := c.subset) is not None:
                missing = f"; {len(s.missing)} listed indices name no row, e.g. {s.missing[:5]}" if s.missing else ""
                lines.append(f"{key}: {s.kept} of {c.rows} rows kept by {self.rollout_indices} ({s.listed} listed), "
                             f"{c.imported} imported{missing}")
        lines += [f"{d}/{EVALUATION_SPLIT}: {self.rollout_indices} lists no test subset for {d}; every row kept"
                  for d in self.subset_absent]
        return lines


@dataclass(frozen=True)
class ImportOptions:
    seed: int = 0
    # dataset -> path of a real (credentialed) database; with one, EHRSQL tasks keep the release's answers
    ehr_databases: dict[str, Path] = field(default_factory=dict)
    # runs BioCoder reference programs to take the output a submission must reproduce
    open_sandbox: Callable[[], Sandbox] | None = None
    # keep only the evaluation rows `<src>/rollout_indices.json` lists: the subset the paper reports
    rollout_indices: bool = False


class Refused(Exception):
    """This row (or dataset) cannot become a runnable task; the message says why."""


def _require(row: dict[str, Any], path: Path, line: int, name: str, kinds: type | tuple[type, ...] = str) -> Any:
    if name not in row:
        raise RecordError(path, line, name, "missing")
    value = row[name]
    if not isinstance(value, kinds) or (isinstance(value, str) and not value.strip()):
        raise RecordError(path, line, name, f"expected a non-empty {getattr(kinds, '__name__', kinds)}, got {value!r}")
    return value


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


# ---------------------------------------------------------------- per-dataset row adapters


def _number(path: Path, line: int, name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise RecordError(path, line, name, f"expected a number, got {value!r}") from None


def medcalc_answer(truth: str, question: str, row: dict[str, Any], path: Path, line: int) -> tuple[Any, AnswerSpec, str]:
    """The stored answer, its spec and the submission hint for one MedCalc-Bench ground truth.

    Gestational ages and dates are stored in the one form the generated calculators store, so that a checker
    reads both alike: '(19 weeks, 6 days)' for the release's "('19 weeks', '6 days')", '07/26/2014' for
    '7/26/2014'. Numbers keep the release's limits and record the unit the question asks for.
    """
    form = string_form(truth)
    if form == "weeks_days":
        hint = "Submit the gestational age as (weeks, days), e.g. (4 weeks, 3 days)."
        return format_weeks_days(*parse_weeks_days(truth)), AnswerSpec(type=AnswerType.STRING), hint
    if form == "date":
        date = parse_date(truth)
        return date.strftime("%m/%d/%Y"), AnswerSpec(type=AnswerType.STRING), "Submit the date as MM/DD/YYYY."
    lower = _number(path, line, "Lower Limit", row.get("Lower Limit"))
    upper = _number(path, line, "Upper Limit", row.get("Upper Limit"))
    value = _number(path, line, "Ground Truth Answer", truth)
    if not lower <= value <= upper:
        raise RecordError(path, line, "Ground Truth Answer", f"{value} lies outside [{lower}, {upper}]")
    unit = asked_unit(question) or None  # '' (a plain number) is what no unit already means here
    if lower == upper and value == int(value):
        return int(value), AnswerSpec(type=AnswerType.INTEGER, unit=unit), "Submit a single number."
    return value, AnswerSpec(type=AnswerType.NUMERIC, lower=lower, upper=upper, unit=unit), "Submit a single number."


def medcalcbench_task(row: dict[str, Any], path: Path, line: int, base: dict[str, Any]) -> Task:
    name = _require(row, path, line, "Calculator Name")
    note = _require(row, path, line, "Patient Note")
    question = _require(row, path, line, "Question")
    truth = row.get("Ground Truth Answer")
    if truth is None or str(truth).strip() == "":
        raise RecordError(path, line, "Ground Truth Answer", "missing")
    answer, spec, hint = medcalc_answer(str(truth).strip(), question, row, path, line)
    prompt = f"Patient note:\n{note}\n\nQuestion: {question}\n{hint}"
    return Task(**base, category=f"medcalc_{slug(name)}", domain=Domain.CALCULATOR, prompt=prompt,
                answer=answer, answer_spec=spec,
                metadata={"calculator_id": row.get("Calculator ID"), "calculator_name": name,
                          "relevant_entities": row.get("Relevant Entities")})


def npowerai_task(row: dict[str, Any], path: Path, line: int, base: dict[str, Any]) -> Task:
    task_type = _require(row, path, line, "task_type")
    target = _require(row, path, line, "estimate_target")
    question = _require(row, path, line, "question")
    if "answer" not in row:
        raise RecordError(path, line, "answer", "missing")
    value = _number(path, line, "answer", row["answer"])
    if target == "size":
        if value != int(value) or value <= 0:
            raise RecordError(path, line, "answer", f"a sample size must be a positive integer, got {row['answer']!r}")
        answer, spec = int(value), AnswerSpec(type=AnswerType.INTEGER, kind=ValueKind.COUNT)
        hint = "Submit the sample size as an integer."
    elif target == "power":
        if not 0 <= value <= 1:
            raise RecordError(path, line, "answer", f"a power must lie in [0, 1], got {row['answer']!r}")
        answer, spec = value, AnswerSpec(type=AnswerType.NUMERIC, abs_tol=0.01, kind=ValueKind.PROBABILITY)
        hint = "Submit the power as a number between 0 and 1."
    else:
        raise RecordError(path, line, "estimate_target", f"expected 'size' or 'power', got {target!r}")
    return Task(**base, category=f"npower_{slug(task_type)}_{target}", domain=Domain.BIOSTAT,
                prompt=f"{question}\n{hint}", answer=answer, answer_spec=spec,
                metadata={"task_type": task_type, "release_task_id": row.get("task_id")})


def biocoder_task(row: dict[str, Any], path: Path, line: int, base: dict[str, Any]) -> Task:
    problem = _require(row, path, line, "problem")
    context = _require(row, path, line, "context")
    solution = _require(row, path, line, "solution")
    signature = _require(row, path, line, "signature")
    if SUBMISSION_SLOT not in context:
        raise RecordError(path, line, "context", "has no '<<insert solution here>>' marker")
    name = re.search(r"^\s*(?:async\s+)?def\s+(\w+)", signature, re.M)
    if not name:
        raise RecordError(path, line, "signature", f"not a function signature: {signature!r}")
    # Some release contexts already define the target function after the slot, so any submission would
    # pass by calling the context's own copy; the harness must hold only the submission's definition.
    context, leaked = strip_definitions(context, name.group(1))
    # BioCoder checks a function by running its context program with the function inserted; every call to it is
    # traced and compared with the reference's trace, taken in the sandbox (`take_reference_outputs`).
    spec = AnswerSpec(type=AnswerType.CODE, tests=context, target=name.group(1))
    prompt = (f"{problem}\n\nWrite the function `{signature}`. It is inserted into a larger program that "
              f"provides the imports and helpers it uses. Submit the function's code.")
    return Task(**base, category="biocoder", domain=Domain.BIOINFO, prompt=prompt, answer=solution,
                answer_spec=spec, reference_code=code_judge.insert_submission(context, solution),
                metadata={"idx": row.get("idx"), "signature": signature, "leaked_definitions_removed": leaked})


def strip_definitions(harness: str, name: str) -> tuple[str, int]:
    """Remove every definition of function `name` from a harness (the slot stays); returns (harness, removed)."""
    probe = re.sub(r"^([ \t]*)" + re.escape(SUBMISSION_SLOT), r"\1pass", harness, count=1, flags=re.M)
    try:
        tree = ast.parse(probe)
    except SyntaxError:
        return harness, 0
    spans = [(min([n.lineno, *(d.lineno for d in n.decorator_list)]), n.end_lineno or n.lineno)
             for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if not spans:
        return harness, 0
    lines = harness.splitlines(keepends=True)
    drop = {i for start, end in spans for i in range(start - 1, end)}
    return "".join(line for i, line in enumerate(lines) if i not in drop), len(spans)


# a call such as random.randint(...) or np.random.rand(...); with no .seed( anywhere the output is a draw
_UNSEEDED_RANDOM = re.compile(r"\b(?:random|np\.random|numpy\.random)\.(?!seed\b)\w+\(")


def take_reference_outputs(tasks: list[Task], open_sandbox: Callable[[], Sandbox] | None,
                           counts: ImportCounts, variants: int = code_judge.DEFAULT_VARIANTS) -> list[Task]:
    """Trace each BioCoder reference in the sandbox: every call its program makes to the function, as plain values,
    under each seed variant. That trace is what a submission must reproduce (components/tasks/code_judge.py).

    Refused: a program that draws random numbers without seeding; one that never calls the function or does not
    finish; one whose trace differs between two sandboxes (clocks, the OS's randomness; set order does not: every
    sandbox has the same string-hash seed),
    which could not be scored fairly; one that gives the function a single input under every seed variant; and one
    whose trace a cheap guess reproduces (one fixed value such as a module constant or a literal of the harness,
    one of its own arguments), which could not tell solving from not.
    """
    if open_sandbox is None:
        counts.refused["needs a sandbox to take the reference program's output"] += len(tasks)
        return []
    kept = []
    first, second = open_sandbox(), open_sandbox()
    try:
        for task in tasks:
            ref = task.reference_code or ""
            if _UNSEEDED_RANDOM.search(ref) and ".seed(" not in ref:
                counts.refused["the reference solution draws random numbers without a seed"] += 1
                continue
            harness, target = task.answer_spec.tests or "", task.answer_spec.target or ""
            plain_run = first.exec(ref)
            if plain_run.status != "ok":
                last = (plain_run.stderr.strip().splitlines() or [plain_run.status])[-1]
                counts.refused[f"the reference solution does not run in the sandbox: {last[:80]}"] += 1
                continue
            try:
                runs = code_judge.trace(first, harness, target, task.answer, variants)
                again = code_judge.trace(second, harness, target, task.answer, variants)
            except code_judge.JudgeError:
                counts.refused["the reference solution cannot be traced in the sandbox"] += 1
                continue
            if not code_judge.complete(runs) or code_judge.calls_recorded(runs[:1]) == 0:
                counts.refused["the program never calls the function, or does not finish"] += 1
                continue
            if runs != again:
                counts.refused["the reference solution prints something different on each run"] += 1
                continue
            if code_judge.distinct_inputs(runs) < 2:
                counts.refused["the program gives the function one input only, under every seed variant"] += 1
                continue
            if (guess := code_judge.cheap_guess(runs)) is not None:
                counts.refused[f"a body that ignores the task reproduces every call: {guess}"] += 1
                continue
            spec = task.answer_spec.model_copy(update={"expected_trace": runs})
            kept.append(task.model_copy(update={"answer_spec": spec}))
    finally:
        first.close()
        second.close()
    return kept


def _refuse_biodsbench(row: dict[str, Any], path: Path, line: int, base: dict[str, Any]) -> Task:
    _require(row, path, line, "queries")
    raise Refused("its dataframes (cBioPortal study tables read from /workdir) are not shipped in the release")


RowAdapter = Callable[[dict[str, Any], Path, int, dict[str, Any]], Task]
ROW_ADAPTERS: dict[str, RowAdapter] = {
    "medcalcbench": medcalcbench_task,
    "npowerai": npowerai_task,
    "biocoder": biocoder_task,
    "biodsbench": _refuse_biodsbench,
}


# ---------------------------------------------------------------- the import


def release_files(src: Path) -> Iterator[tuple[str, str, Path]]:
    """(dataset, split, path) for every `<dataset>/<split>_tasks.jsonl` (and `<dataset>/task.jsonl`) under src.

    A dataset with `valid_tasks.jsonl` and no `test_tasks.jsonl` gets its valid file as split `test`: that is the
    file the release evaluates on (its MIMIC-III and eICU tasks read it in test mode)."""
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: not a folder laid out as the MedAgentGym release (<dataset>/<split>_tasks.jsonl)")
    for folder in sorted(p for p in src.iterdir() if p.is_dir()):
        has_test = (folder / f"{EVALUATION_SPLIT}_tasks.jsonl").is_file()
        for path in sorted(folder.glob("*.jsonl")):
            if m := re.fullmatch(r"(.+)_tasks", path.stem):
                yield folder.name, EVALUATION_SPLIT if m.group(1) == "valid" and not has_test else m.group(1), path
            elif path.stem == "task":
                yield folder.name, "all", path


def read_rollout_indices(path: Path) -> dict[str, set[int]]:
    """dataset -> the 0-based row indices of its evaluation file that the release's rollout_indices.json lists.

    The layout, as the release ships it and its rollout.py reads it (`indices[task][mode]`):
    {"<dataset>": {"train": [int, ...], "test": [int, ...]}, ...}, each index a line of the file the release reads
    in that mode. Only `test` is used. Any other shape is refused, naming the file and the field.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; the rollout subset is read from the release's {ROLLOUT_INDICES} "
                                "beside the dataset folders")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise RecordError(path, None, None, f"expected an object of datasets, got {type(data).__name__}")
    subset: dict[str, set[int]] = {}
    for dataset, splits in data.items():
        if not isinstance(splits, dict):
            raise RecordError(path, None, dataset, f"expected an object of 'train' and 'test' lists, got {splits!r:.60}")
        if unexpected := sorted(set(splits) - {"train", EVALUATION_SPLIT}):
            raise RecordError(path, None, f"{dataset}.{unexpected[0]}", "unexpected key: only 'train' and 'test' are known")
        if EVALUATION_SPLIT not in splits:
            raise RecordError(path, None, f"{dataset}.{EVALUATION_SPLIT}", "missing")
        for split, indices in splits.items():
            if not isinstance(indices, list):
                raise RecordError(path, None, f"{dataset}.{split}", f"expected a list of row indices, got {indices!r:.60}")
            for i, index in enumerate(indices):
                if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                    raise RecordError(path, None, f"{dataset}.{split}[{i}]",
                                      f"expected a row index (an integer >= 0), got {index!r}")
        subset[dataset] = set(splits[EVALUATION_SPLIT])
    return subset


def _keep_listed(rows: list[tuple[int, dict[str, Any]]], listed: set[int],
                 counts: ImportCounts) -> list[tuple[int, dict[str, Any]]]:
    kept = [(index, row) for index, row in rows if index in listed]
    counts.subset = SubsetCounts(listed=len(listed), kept=len(kept), outside=len(rows) - len(kept),
                                 missing=sorted(listed - {index for index, _ in kept}))
    return kept


def _base(dataset: str, split: str, index: int) -> dict[str, Any]:
    return {"task_id": f"{dataset}/{split}/{index}", "dataset": dataset, "split": split, "source": "medagentgym"}


def import_release(src: Path, out: Path, options: ImportOptions | None = None,
                   progress: Callable[[str], None] | None = None) -> ImportReport:
    """Import every dataset under `src` into `out/tasks.jsonl` (context files beside it)."""
    from components.tasks.importers.ehrsql import import_ehrsql

    options = options or ImportOptions()
    report = ImportReport(out=str(out))
    tasks: list[Task] = []
    ehrsql: dict[str, list[tuple[str, Path, list[tuple[int, dict[str, Any]]], ImportCounts]]] = {}
    task_files = list(release_files(src))
    subset = read_rollout_indices(src / ROLLOUT_INDICES) if options.rollout_indices else None
    if subset is not None:
        report.rollout_indices = ROLLOUT_INDICES
    taken = {path for *_, path in task_files}
    report.ignored = sorted(str(p.relative_to(src)) for p in src.glob("*/*.jsonl") if p not in taken)
    for dataset, split, path in task_files:
        key = f"{dataset}/{split}"
        if progress:
            progress(key)
        counts = report.per_file.setdefault(key, ImportCounts(release_file=path.relative_to(src).as_posix()))
        rows = _read_rows(path, counts)
        counts.rows = len(rows) + len(counts.malformed)
        if split == EVALUATION_SPLIT and path.stem == "valid_tasks":
            report.valid_as_test.append(dataset)
        if subset is not None and split == EVALUATION_SPLIT:
            if dataset in subset:
                rows = _keep_listed(rows, subset[dataset], counts)
            else:
                report.subset_absent.append(dataset)
        if dataset in REFUSED_DATASETS:
            counts.refused[REFUSED_DATASETS[dataset]] += len(rows)
        elif dataset in EHRSQL_DATASETS:
            # all splits of one dataset share one seeded database, so they are grounded together
            ehrsql.setdefault(dataset, []).append((split, path, rows, counts))
        elif dataset in ROW_ADAPTERS:
            imported = _import_rows(ROW_ADAPTERS[dataset], dataset, split, path, rows, counts)
            if dataset == "biocoder":
                imported = take_reference_outputs(imported, options.open_sandbox, counts)
            counts.imported = len(imported)
            tasks.extend(imported)
        else:
            counts.refused[f"unknown dataset {dataset!r}: no importer maps it"] += len(rows)
    for dataset, files in ehrsql.items():
        if progress:
            progress(f"{dataset}: grounding questions on the database")
        tasks.extend(import_ehrsql(dataset, files, out, options))
    files = {key: c.release_file for key, c in report.per_file.items()}
    tasks = [t.model_copy(update={"metadata": {**t.metadata, "release_file": files[f"{t.dataset}/{t.split}"]}}) for t in tasks]
    save_tasks(out / "tasks.jsonl", tasks)
    return report


def _read_rows(path: Path, counts: ImportCounts) -> list[tuple[int, dict[str, Any]]]:
    """Rows with their 0-based line index; unparsable lines are reported and skipped."""
    rows: list[tuple[int, dict[str, Any]]] = []
    for lineno, obj in iter_jsonl_lenient(path):
        if isinstance(obj, RecordError):
            counts.malformed.append(str(obj))
        else:
            rows.append((lineno - 1, obj))
    return rows


def _import_rows(adapter: RowAdapter, dataset: str, split: str, path: Path,
                 rows: list[tuple[int, dict[str, Any]]], counts: ImportCounts) -> list[Task]:
    tasks = []
    for index, row in rows:
        try:
            tasks.append(adapter(row, path, index + 1, _base(dataset, split, index)))
        except RecordError as exc:
            counts.malformed.append(str(exc))
        except Refused as exc:
            counts.refused[str(exc)] += 1
        except ValueError as exc:  # pydantic validation of the built Task
            counts.malformed.append(str(RecordError(path, index + 1, None, str(exc).splitlines()[0])))
    return tasks


__all__ = ["EHRSQL_DATASETS", "EVALUATION_SPLIT", "REFUSED_DATASETS", "ROLLOUT_INDICES", "ImportOptions", "ImportReport",
           "import_release", "read_rollout_indices"]
