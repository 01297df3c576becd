"""Generated EHR-querying tasks over the synthetic MIMIC-III, eICU and TREQS databases.

Each category enumerates every question it can ask of one shared database per schema
(files/ehr/<schema>_<content hash>.sqlite under ctx.out_dir, built on first use and sized by
ctx.suite_per_category), keeps the questions whose split key falls in ctx.split, shuffles them with the split's rng,
and yields those whose reference SQL gives a non-empty answer. `reference_code` opens the same database by its
relative path, runs the same SQL and applies the same conversion (one expression, evaluated here and embedded there).

Held-out splits do not leak: every question carries a key (usually the patient it is about, or the drug /
procedure / diagnosis it names) and a key belongs to exactly one split, by a SHA-256 of the seed and the key, so
train and test ask about disjoint patients and entities; the same patient is held out in every category.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from components.ehr.synth import DEFAULT_PATIENTS, build_database
from components.tasks.generators.balance import answer_key, balanced
from components.tasks.generators.base import GenContext, task_id
from components.tasks.record import AnswerSpec, AnswerType, ContextFile, Domain, Task

CONVERT: dict[str, str] = {
    "integer": "int(rows[0][0])",
    "numeric": "round(float(rows[0][0]), 4)",
    "string": "str(rows[0][0])",
    "set": "sorted({str(r[0]) for r in rows})",
    "list": "[str(r[0]) for r in rows]",
}
_COMPILED = {k: compile(v, f"<convert {k}>", "eval") for k, v in CONVERT.items()}
SPECS = {
    "integer": AnswerSpec(type=AnswerType.INTEGER),
    "numeric": AnswerSpec(type=AnswerType.NUMERIC, abs_tol=0.01, rel_tol=1e-4),
    "string": AnswerSpec(type=AnswerType.STRING),
    "set": AnswerSpec(type=AnswerType.SET),
    "list": AnswerSpec(type=AnswerType.LIST),
}
LAYOUT = {
    "mimic_iii": "MIMIC-III (EHRSQL layout: patients, admissions, icustays, transfers, diagnoses_icd, procedures_icd, "
    "d_icd_diagnoses, d_icd_procedures, labevents, d_labitems, prescriptions, chartevents, inputevents_cv, "
    "outputevents, d_items, microbiologyevents, cost)",
    "eicu": "eICU (EHRSQL layout: patient, diagnosis, treatment, lab, medication, intakeoutput, vitalperiodic, "
    "allergy, "
    "microlab, cost)",
    "treqs": "TREQS / MIMICSQL (demographic, diagnoses, procedures, prescriptions, lab)",
}
ANSWER_HINT = {
    "integer": "Answer with a single integer.",
    "numeric": "Answer with a single number.",
    "string": "Answer with a single value.",
    "set": "Answer with a JSON list of values (order does not matter).",
    "list": "Answer with a JSON list of values in the order asked.",
}

# Shares of the key space per split. Test and valid are held out; a suite asking for a larger held-out fraction
# than its share gets fewer held-out tasks (the databases are sized with room to spare, see n_patients).
SPLIT_SHARES: tuple[tuple[str, float], ...] = (("test", 0.20), ("valid", 0.05), ("train", 0.75))
MAX_PATIENTS = 10_000  # about 13 s to build the MIMIC-III database
# Questions answered per task asked for, before `balanced` picks the tasks: answers in a synthetic database pile
# up (nine in ten lab-count answers were 1), so the pick needs a few times more candidates than tasks to find
# enough of the rarer answers.
SCAN = 4


def split_of(seed: int, key: str) -> str:
    """The split that owns `key`: a stable function of the seed and the key (SHA-256, not hash())."""
    u = int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "big") / 2**64
    acc = 0.0
    for name, share in SPLIT_SHARES:
        acc += share
        if u < acc:
            return name
    return SPLIT_SHARES[-1][0]


def n_patients(suite_per_category: int) -> int:
    """Patients per database: every category asks several questions per patient, so half the suite size leaves
    each split's share of the questions well above what the split asks for."""
    return min(MAX_PATIENTS, max(DEFAULT_PATIENTS, suite_per_category // 2))


def db_relpath(schema: str, content_sha256: str) -> str:
    """The database's name: its schema and a prefix of its bytes' SHA-256, nothing of how it was generated.

    The agent reads this name in the prompt; a seed or a size in it would tell a policy which generation it
    faces (and a train and a test suite apart). The content hash keeps identity: the same bytes, one file.
    """
    return f"files/ehr/{schema}_{content_sha256[:16]}.sqlite"


# (out_dir, schema, seed, patients) -> the relative path built for them in this process. The name no longer
# says which parameters made a file, so this is how a second category finds the database the first one built.
_BUILT: dict[tuple[str, str, int, int], str] = {}


def ensure_db(ctx: GenContext, schema: str) -> str:
    """Build the shared database for (out_dir, seed, size) once per process; later calls reuse the file.

    A new process builds it again (seconds) and, the build being byte-for-byte deterministic, finds the same
    name: an existing file is left as it is.
    """
    size = n_patients(ctx.suite_per_category)
    out_dir = Path(ctx.out_dir)
    key = (str(out_dir.resolve()), schema, ctx.seed, size)
    rel = _BUILT.get(key)
    if rel is not None and (out_dir / rel).is_file():
        return rel
    scratch = out_dir / "files" / "ehr" / f".{schema}.{os.getpid()}.building.sqlite"
    build_database(schema, scratch, seed=ctx.seed, n_patients=size)  # type: ignore[arg-type]
    rel = db_relpath(schema, _sha256(scratch))
    if (out_dir / rel).is_file():
        scratch.unlink()
    else:
        scratch.replace(out_dir / rel)
    _BUILT[key] = rel
    return rel


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def convert(rows: list[tuple[Any, ...]], kind: str) -> Any:
    return eval(_COMPILED[kind], {}, {"rows": rows})  # noqa: S307 - our own constant expressions


def reference_program(rel: str, sql: str, kind: str) -> str:
    return (
        "import json\nimport sqlite3\n\n"
        f"con = sqlite3.connect({rel!r})\n"
        f"rows = con.execute({sql!r}).fetchall()\n"
        f"answer = {CONVERT[kind]}\n"
        "print(json.dumps(answer))\n"
    )


class Question(NamedTuple):
    key: str  # what the question is about; its split is split_of(seed, key)
    text: str
    sql: str


# A source: SQL listing candidate rows, and a function turning all of them into questions.
Expand = Callable[[list[tuple[Any, ...]]], Iterable[Question]]


@dataclass(frozen=True)
class Source:
    sql: str
    expand: Expand


def each(fn: Callable[[tuple[Any, ...]], Iterable[Question]]) -> Expand:
    """An Expand that makes questions from each candidate row on its own."""
    return lambda rows: (qq for row in rows for qq in fn(row))


@dataclass(frozen=True)
class SqlCategory:
    category: str
    schema: str
    kind: str  # integer | numeric | string | set | list
    sources: tuple[Source, ...]
    # skip questions whose set answer is longer than this (0: no limit): ties in small groups make long lists
    max_set: int = 0
    domain: ClassVar[Domain] = Domain.EHR
    description: str = field(default="")

    def questions(self, con: sqlite3.Connection, seed: int, split: str) -> list[Question]:
        """Every question of this category that `split` owns, in a fixed order."""
        return [
            qn
            for src in self.sources
            for qn in src.expand(con.execute(src.sql).fetchall())
            if split_of(seed, qn.key) == split
        ]

    def generate(self, ctx: GenContext, n: int) -> Iterator[Task]:
        if ctx.split not in dict(SPLIT_SHARES):
            raise ValueError(f"{self.category}: unknown split {ctx.split!r}; expected one of {dict(SPLIT_SHARES)}")
        rng = ctx.rng(self.category)
        rel = ensure_db(ctx, self.schema)
        con = sqlite3.connect(f"file:{Path(ctx.out_dir) / rel}?mode=ro", uri=True)
        try:
            pool = self.questions(con, ctx.seed, ctx.split)
            rng.shuffle(pool)
            answered = self._answered(con, pool, SCAN * n)
            chosen = balanced(answered, n, rng, key=lambda item: answer_key(item[1]))
            for i, (qn, answer) in enumerate(chosen):
                prompt = (
                    f"The SQLite database `{rel}` holds synthetic electronic health records in the "
                    f"{LAYOUT[self.schema]}. "
                    f"Times are stored as 'YYYY-MM-DD HH:MM:SS' text.\nQuestion: {qn.text}\n{ANSWER_HINT[self.kind]}"
                )
                yield Task(
                    task_id=task_id(self.category, ctx.split, i),
                    dataset=f"synthetic_{self.schema}",
                    category=self.category,
                    domain=Domain.EHR,
                    split=ctx.split,
                    prompt=prompt,
                    answer=answer,
                    answer_spec=SPECS[self.kind],
                    context_files=[ContextFile(path=rel, kind="sqlite")],
                    reference_code=reference_program(rel, qn.sql, self.kind),
                    metadata={"schema": self.schema, "sql": qn.sql},
                )
        finally:
            con.close()

    def _answered(self, con: sqlite3.Connection, pool: list[Question], limit: int) -> list[tuple[Question, Any]]:
        """The first `limit` questions of `pool` with distinct texts and a usable answer, with their answers."""
        seen: set[str] = set()
        out: list[tuple[Question, Any]] = []
        for qn in pool:
            if len(out) >= limit:
                break
            if qn.text in seen:
                continue
            rows = con.execute(qn.sql).fetchall()
            if not rows or rows[0][0] is None or (self.max_set and len(rows) > self.max_set):
                continue
            seen.add(qn.text)
            out.append((qn, convert(rows, self.kind)))
        return out


def q(s: object) -> str:
    """An SQL string literal."""
    return "'" + str(s).replace("'", "''") + "'"


YEARS = tuple(range(2100, 2106))  # EHRSQL's shifted years
YEAR_SPANS = tuple(combinations(YEARS, 2))
AGE_GROUPS = ((18, 39, "aged 18 to 39"), (40, 64, "aged 40 to 64"), (65, 200, "aged 65 or older"))


def mimic(sid: object) -> str:
    return f"mimic_iii:patient:{sid}"


def eicu(pid: object) -> str:
    return f"eicu:patient:{pid}"


def treqs(sid: object) -> str:
    return f"treqs:patient:{sid}"


def years_of(text: str | None) -> list[str]:
    return sorted(set((text or "").split(",")) - {""})


# ---- MIMIC-III ------------------------------------------------------------------------------------------------
def _gender(c):
    yield Question(
        mimic(c[0]),
        f"What is the gender of patient {c[0]}?",
        f"select patients.gender from patients where patients.subject_id = {c[0]}",
    )


def _gender_of_admission(c):
    sid, hadm, icu = c
    yield Question(
        mimic(sid),
        f"What is the gender of the patient of hospital admission {hadm}?",
        "select patients.gender from patients where patients.subject_id in (select admissions.subject_id from "
        f"admissions where admissions.hadm_id = {hadm})",
    )
    yield Question(
        mimic(sid),
        f"What is the gender of the patient of ICU stay {icu}?",
        "select patients.gender from patients where patients.subject_id in (select icustays.subject_id from "
        f"icustays where icustays.icustay_id = {icu})",
    )


def _admissions_in_year(c):
    sid, years = c[0], years_of(c[1])
    count = f"select count(*) from admissions where admissions.subject_id = {sid} and strftime('%Y', admissions.admittime)"
    for y in years:
        yield Question(mimic(sid), f"How many hospital admissions did patient {sid} have in the year {y}?", f"{count} = '{y}'")
    for a, b in YEAR_SPANS:
        yield Question(
            mimic(sid),
            f"How many hospital admissions did patient {sid} have from the year {a} to the year {b} (inclusive)?",
            f"{count} between '{a}' and '{b}'",
        )


def _lab_first_last(c):
    sid, label = c
    for word, order in (("last", "desc"), ("first", "asc")):
        yield Question(
            mimic(sid),
            f"What was the value of the {word} '{label}' lab test of patient {sid}?",
            f"select labevents.valuenum from labevents where labevents.subject_id = {sid} and labevents.itemid in "
            f"(select d_labitems.itemid from d_labitems where d_labitems.label = {q(label)}) order by "
            f"labevents.charttime {order} limit 1",
        )


def _drug_routes(c):
    drug = c[0]
    key = f"mimic_iii:drug:{drug}"
    base = f"select distinct prescriptions.route from prescriptions where prescriptions.drug = {q(drug)}"
    in_year = "strftime('%Y', prescriptions.startdate) = '{}'"
    of_gender = "prescriptions.subject_id in (select patients.subject_id from patients where patients.gender = '{}')"
    of_type = (
        "prescriptions.hadm_id in (select admissions.hadm_id from admissions where admissions.admission_type = '{}')"
    )
    in_unit = (
        "prescriptions.hadm_id in (select icustays.hadm_id from icustays where icustays.first_careunit = '{}')"
    )
    genders = (("m", "male"), ("f", "female"))
    types = ("emergency", "elective", "urgent")
    filters: list[tuple[str, list[str]]] = [("", [])]
    filters += [(f" in the year {y}", [in_year.format(y)]) for y in YEARS]
    filters += [(f" to {word} patients", [of_gender.format(g)]) for g, word in genders]
    filters += [(f" during {t} admissions", [of_type.format(t)]) for t in types]
    filters += [(f" during admissions whose ICU stay was in care unit '{u}'", [in_unit.format(u)])
                for u in ("micu", "sicu", "ccu", "csru", "tsicu")]
    filters += [(f" to {word} patients in the year {y}", [of_gender.format(g), in_year.format(y)])
                for g, word in genders for y in YEARS]
    filters += [(f" during {t} admissions in the year {y}", [of_type.format(t), in_year.format(y)])
                for t in types for y in YEARS]
    for text, conds in filters:
        yield Question(
            key,
            f"Through which routes has the drug '{drug}' been administered{text}?",
            " and ".join([base, *conds]),
        )


def _diagnosis_filters() -> list[tuple[str, str, str]]:
    """(split-key part, text, condition on diagnoses_icd) for the top-k questions."""
    adm = "diagnoses_icd.hadm_id in (select admissions.hadm_id from admissions where {})"
    out = [("all", "", "1 = 1")]
    out += [(f"gender={g}", f" for {w} patients",
             "diagnoses_icd.subject_id in (select patients.subject_id from patients where patients.gender = "
             f"'{g}')") for g, w in (("m", "male"), ("f", "female"))]
    out += [(f"type={t}", f" during {t} admissions", adm.format(f"admissions.admission_type = '{t}'"))
            for t in ("emergency", "elective", "urgent")]
    out += [(f"insurance={i}", f" for patients with {i} insurance", adm.format(f"admissions.insurance = '{i}'"))
            for i in ("medicare", "private", "medicaid", "government", "self pay")]
    out += [(f"ethnicity={e}", f" for patients of ethnicity '{e}'", adm.format(f"admissions.ethnicity = {q(e)}"))
            for e in ("white", "black/african american", "hispanic or latino", "asian", "unknown/not specified")]
    out += [(f"age={lo}", f" for patients {w} at admission", adm.format(f"admissions.age between {lo} and {hi}"))
            for lo, hi, w in AGE_GROUPS]
    out += [(f"unit={u}", f" during admissions whose ICU stay was in care unit '{u}'",
             "diagnoses_icd.hadm_id in (select icustays.hadm_id from icustays where icustays.first_careunit = "
             f"'{u}')") for u in ("micu", "sicu", "ccu", "csru", "tsicu")]
    out += [(f"from={loc}", f" during admissions from '{loc}'", adm.format(f"admissions.admission_location = {q(loc)}"))
            for loc in ("emergency room admit", "phys referral/normal deli", "clinic referral/premature",
                        "transfer from hosp/extram", "transfer from skild nur")]
    return out


def _topk_diagnoses(rows):
    years = sorted(str(r[0]) for r in rows)
    periods = [(y, f"in {y}", f"= '{y}'") for y in years]
    periods += [(f"{a}-{b}", f"from {a} to {b}", f"between '{a}' and '{b}'") for a, b in combinations(years, 2)]
    for pkey, ptext, pcond in periods:
        for fkey, ftext, fcond in _diagnosis_filters():
            for k in range(3, 8):
                yield Question(
                    # k is left out of the key: the same period and filter with another k stays in one split
                    f"ehr_topk_diagnoses_year:{pkey}:{fkey}",
                    f"Which diagnoses (short titles) were among the {k} most frequently recorded {ptext}{ftext} "
                    "(ties included)?",
                    "select d_icd_diagnoses.short_title from d_icd_diagnoses where d_icd_diagnoses.icd9_code in "
                    "(select t1.icd9_code from (select diagnoses_icd.icd9_code, rank() over (order by count(*) "
                    f"desc) as c1 from diagnoses_icd where strftime('%Y', diagnoses_icd.charttime) {pcond} and {fcond} "
                    f"group by diagnoses_icd.icd9_code) as t1 where t1.c1 <= {k})",
                )


def _length_of_stay_admission(c):
    sid, hadm = c
    yield Question(
        mimic(sid),
        f"How many days (fractional) did hospital admission {hadm} last, from admission to discharge?",
        "select julianday(admissions.dischtime) - julianday(admissions.admittime) from admissions where "
        f"admissions.hadm_id = {hadm}",
    )


def _length_of_stay_patient(c):
    sid = c[0]
    closed = f"from admissions where admissions.subject_id = {sid} and admissions.dischtime is not null"
    days = "julianday(admissions.dischtime) - julianday(admissions.admittime)"
    for word, order in (("first", "asc"), ("most recent", "desc")):
        yield Question(
            mimic(sid),
            f"How many days (fractional) did the {word} completed hospital admission of patient {sid} last, from "
            "admission to discharge?",
            f"select {days} {closed} order by admissions.admittime {order} limit 1",
        )
    yield Question(
        mimic(sid),
        f"How many days (fractional) in total did patient {sid} spend in hospital over all completed admissions?",
        f"select sum({days}) {closed}",
    )


def _procedure_cost(c):
    title = c[0]
    key = f"mimic_iii:procedure:{title}"
    events = (
        "select procedures_icd.row_id from procedures_icd where procedures_icd.icd9_code = (select "
        f"d_icd_procedures.icd9_code from d_icd_procedures where d_icd_procedures.short_title = {q(title)})"
    )
    yield Question(
        key,
        f"What is the cost charged for the procedure '{title}'?",
        f"select distinct cost.cost from cost where cost.event_type = 'procedures_icd' and cost.event_id in ({events})",
    )
    for y in YEARS:
        yield Question(
            key,
            f"What was the total cost charged for the procedure '{title}' in the year {y}?",
            "select sum(cost.cost) from cost where cost.event_type = 'procedures_icd' and strftime('%Y', "
            f"cost.chargetime) = '{y}' and cost.event_id in ({events})",
        )


def _procedure_cost_admission(c):
    sid, hadm = c
    yield Question(
        mimic(sid),
        f"What was the total cost charged for procedures during hospital admission {hadm}?",
        f"select sum(cost.cost) from cost where cost.event_type = 'procedures_icd' and cost.hadm_id = {hadm}",
    )


def _procedure_cost_patient(c):
    sid = c[0]
    yield Question(
        mimic(sid),
        f"What was the total cost charged for procedures of patient {sid} over all hospital admissions?",
        f"select sum(cost.cost) from cost where cost.event_type = 'procedures_icd' and cost.subject_id = {sid}",
    )


HOURS = "24 * (julianday(icustays.outtime) - julianday(icustays.intime))"


def _icu_hours_stay(c):
    sid, hadm, icu = c
    yield Question(
        mimic(sid),
        f"How many hours did ICU stay {icu} last?",
        f"select {HOURS} from icustays where icustays.icustay_id = {icu}",
    )
    yield Question(
        mimic(sid),
        f"How many hours did the ICU stay of hospital admission {hadm} last?",
        f"select {HOURS} from icustays where icustays.hadm_id = {hadm}",
    )


def _icu_hours_patient(c):
    sid = c[0]
    closed = f"from icustays where icustays.subject_id = {sid} and icustays.outtime is not null"
    for word, order in (("first", "asc"), ("most recent", "desc")):
        yield Question(
            mimic(sid),
            f"How many hours did the {word} completed ICU stay of patient {sid} last?",
            f"select {HOURS} {closed} order by icustays.intime {order} limit 1",
        )
    yield Question(
        mimic(sid),
        f"How many hours in total did patient {sid} spend in completed ICU stays?",
        f"select sum({HOURS}) {closed}",
    )


def _distinct_drugs_admission(c):
    sid, hadm, routes = c[0], c[1], years_of(c[2])
    base = f"select count(distinct prescriptions.drug) from prescriptions where prescriptions.hadm_id = {hadm}"
    yield Question(mimic(sid), f"How many distinct drugs were prescribed during hospital admission {hadm}?", base)
    for r in routes:
        yield Question(
            mimic(sid),
            f"How many distinct drugs were given by route '{r}' during hospital admission {hadm}?",
            f"{base} and prescriptions.route = {q(r)}",
        )


def _distinct_drugs_patient(c):
    sid, years = c[0], years_of(c[1])
    base = f"select count(distinct prescriptions.drug) from prescriptions where prescriptions.subject_id = {sid}"
    yield Question(mimic(sid), f"How many distinct drugs were prescribed to patient {sid} over all admissions?", base)
    for y in years:
        yield Question(
            mimic(sid),
            f"How many distinct drugs were prescribed to patient {sid} in the year {y}?",
            f"{base} and strftime('%Y', prescriptions.startdate) = '{y}'",
        )


def _abnormal_labs(c):
    sid, label, lo, hi = c
    if hi is None or lo is None or hi <= lo:
        return
    digits = 3 if hi - lo < 1 else 2 if hi - lo < 10 else 1
    for frac in (0.25, 0.5, 0.75):
        thr = round(lo + (hi - lo) * frac, digits)
        for word, op in (("above", ">"), ("below", "<")):
            yield Question(
                mimic(sid),
                f"How many '{label}' results of patient {sid} were {word} {thr}?",
                f"select count(*) from labevents where labevents.subject_id = {sid} and labevents.valuenum {op} {thr} "
                "and labevents.itemid in "
                f"(select d_labitems.itemid from d_labitems where d_labitems.label = {q(label)})",
            )


def _abnormal_labs_population(rows):
    """Counts over all patients (or all of one gender), overall and per year: a patient has a handful of
    results per test, so per-patient counts are nearly all 1 or 2; counts over the database spread from a few
    to hundreds. There are about as many of these questions as per-patient ones, so neither kind crowds out
    the other's answers."""
    values: dict[str, list[float]] = {}
    for label, value in rows:
        values.setdefault(label, []).append(value)
    periods = [("", "")] + [(f" in the year {y}", f" and strftime('%Y', labevents.charttime) = '{y}'") for y in YEARS]
    of_gender = " and labevents.subject_id in (select patients.subject_id from patients where patients.gender = '{}')"
    groups = [("all patients", "")] + [(f"all {w} patients", of_gender.format(g)) for g, w in (("m", "male"), ("f", "female"))]
    for label, vals in values.items():
        vals.sort()
        if vals[-1] <= vals[0]:
            continue
        digits = 3 if vals[-1] - vals[0] < 1 else 2 if vals[-1] - vals[0] < 10 else 1
        thresholds = sorted({round(vals[int(d / 10 * (len(vals) - 1))], digits) for d in range(1, 10)})
        for thr in thresholds:
            for word, op in (("above", ">"), ("below", "<")):
                for gtext, gcond in groups:
                    for ptext, pcond in periods:
                        yield Question(
                            f"mimic_iii:lab:{label}",
                            f"How many '{label}' results, over {gtext}{ptext}, were {word} {thr}?",
                            f"select count(*) from labevents where labevents.valuenum {op} {thr}{pcond}{gcond} and "
                            "labevents.itemid in "
                            f"(select d_labitems.itemid from d_labitems where d_labitems.label = {q(label)})",
                        )


def _first_labs_of_admission(c):
    sid, hadm = c
    for word, order, then in (("first", "asc", "earliest"), ("last", "desc", "latest")):
        for k in (2, 3, 4):
            yield Question(
                mimic(sid),
                f"List the times of the {word} {k} lab tests (any kind) of hospital admission {hadm}, {then} first.",
                f"select labevents.charttime from labevents where labevents.hadm_id = {hadm} order by "
                f"labevents.charttime {order}, labevents.row_id {order} limit {k}",
            )


# ---- eICU -----------------------------------------------------------------------------------------------------
VITALS = (
    ("heartrate", "heart rate"),
    ("sao2", "SaO2"),
    ("respiration", "respiration rate"),
    ("systemicsystolic", "systolic blood pressure"),
    ("temperature", "temperature"),
)


def _eicu_vital_extreme(c):
    pid, stay = c
    for col, word in VITALS:
        for agg, adj in (("max", "highest"), ("min", "lowest")):
            yield Question(
                eicu(pid),
                f"What was the {adj} {word} recorded during unit stay {stay}?",
                f"select {agg}(vitalperiodic.{col}) from vitalperiodic where vitalperiodic.patientunitstayid = {stay}",
            )


def _eicu_diag_patients(c):
    name = c[0]
    key = f"eicu:diagnosis:{name}"
    in_year = "strftime('%Y', diagnosis.diagnosistime) = '{}'"
    of_gender = "patient.gender = '{}'"
    filters: list[tuple[str, list[str], list[str]]] = [("", [], [])]  # (text, diagnosis conds, patient conds)
    filters += [(f" in the year {y}", [in_year.format(y)], []) for y in YEARS]
    filters += [(f" among {g} patients", [], [of_gender.format(g)]) for g in ("male", "female")]
    filters += [(f" among patients {w}", [], [f"cast(patient.age as integer) between {lo} and {hi}"])
                for lo, hi, w in AGE_GROUPS]
    filters += [(f" among patients of ethnicity '{e}'", [], [f"patient.ethnicity = {q(e)}"])
                for e in ("caucasian", "african american", "hispanic", "asian", "native american", "other/unknown")]
    filters += [(f" among patients admitted to hospital from '{s}'", [], [f"patient.hospitaladmitsource = {q(s)}"])
                for s in ("emergency department", "direct admit", "floor", "operating room", "other hospital")]
    filters += [(f" among {g} patients in the year {y}", [in_year.format(y)], [of_gender.format(g)])
                for g in ("male", "female") for y in YEARS]
    for text, dconds, pconds in filters:
        diag = " and ".join([f"diagnosis.diagnosisname = {q(name)}", *dconds])
        yield Question(
            key,
            f"How many distinct patients were diagnosed with '{name}'{text}?",
            "select count(distinct patient.uniquepid) from patient where patient.patientunitstayid in (select "
            f"diagnosis.patientunitstayid from diagnosis where {diag})" + "".join(f" and {p}" for p in pconds),
        )


def _eicu_io_total(c):
    pid, stay = c
    for which in ("intake", "output"):
        yield Question(
            eicu(pid),
            f"What was the total recorded {which} (ml) during unit stay {stay}?",
            "select sum(intakeoutput.cellvaluenumeric) from intakeoutput where intakeoutput.patientunitstayid = "
            f"{stay} and intakeoutput.cellpath like '%{which}%'",
        )


def _eicu_io_label(c):
    pid, stay, label, which = c
    yield Question(
        eicu(pid),
        f"What was the total recorded {which} of '{label}' (ml) during unit stay {stay}?",
        "select sum(intakeoutput.cellvaluenumeric) from intakeoutput where intakeoutput.patientunitstayid = "
        f"{stay} and intakeoutput.celllabel = {q(label)} and intakeoutput.cellpath like '%{which}%'",
    )


# ---- TREQS ----------------------------------------------------------------------------------------------------
def _treqs_two_filters(c):
    title = c[0]
    key = f"treqs:diagnosis:{title}"
    join = (
        "select count(distinct demographic.subject_id) from demographic inner join diagnoses on demographic.hadm_id "
        f"= diagnoses.hadm_id where diagnoses.short_title = {q(title)}"
    )
    for gender in ("m", "f"):
        for age in (30, 40, 50, 60, 70, 80):
            for word, op in (("younger than", "<"), ("older than", ">")):
                yield Question(
                    key,
                    f"How many patients of gender '{gender}' were {word} {age} at admission and had a diagnosis of "
                    f"'{title}'?",
                    f"{join} and demographic.gender = {q(gender)} and demographic.age {op} {age}",
                )
    for t in ("emergency", "elective", "urgent"):
        yield Question(
            key,
            f"How many patients with admission type '{t}' had a diagnosis of '{title}'?",
            f"{join} and demographic.admission_type = {q(t)}",
        )
    for i in ("medicare", "private", "medicaid", "government", "self pay"):
        yield Question(
            key,
            f"How many patients with insurance '{i}' had a diagnosis of '{title}'?",
            f"{join} and demographic.insurance = {q(i)}",
        )


TREQS_ATTRS = {
    "admission_type": "admission type",
    "insurance": "insurance",
    "gender": "gender",
    "ethnicity": "ethnicity",
    "marital_status": "marital status",
    "language": "language",
    "religion": "religion",
    "admission_location": "admission location",
    "discharge_location": "discharge location",
    "diagnosis": "primary admission diagnosis",
}
TREQS_VALUES_SQL = " union ".join(f"select distinct '{a}', {a} from demographic" for a in TREQS_ATTRS) + " order by 1, 2"


def _treqs_avg_age(rows):
    values: dict[str, list[str]] = {a: [] for a in TREQS_ATTRS}
    for attr, val in rows:
        if val is not None:
            values[attr].append(val)
    groups: list[tuple[tuple[str, str], ...]] = [((a, v),) for a in TREQS_ATTRS for v in values[a]]
    groups += [((a, v), (b, w)) for a, b in combinations(TREQS_ATTRS, 2) for v in values[a] for w in values[b]]
    others = [a for a in TREQS_ATTRS if a != "gender"]
    groups += [
        (("gender", g), (a, v), (b, w))
        for g in values["gender"]
        for a, b in combinations(others, 2)
        for v in values[a]
        for w in values[b]
    ]
    for group in groups:
        text = " and ".join(f"{TREQS_ATTRS[a]} '{v}'" for a, v in group)
        yield Question(
            f"ehr_treqs_avg_age:{text}",
            f"What is the average age of patients with {text}?",
            "select avg(demographic.age) from demographic where "
            + " and ".join(f"demographic.{a} = {q(v)}" for a, v in group),
        )


def _treqs_diagnosis_admission(c):
    sid, hadm = c
    yield Question(
        treqs(sid),
        f"What is the primary admission diagnosis of the admission {hadm}?",
        f"select demographic.diagnosis from demographic where demographic.hadm_id = {hadm}",
    )


def _treqs_diagnosis_patient(c):
    sid, years = c[0], years_of(c[1])
    for word, order in (("first", "asc"), ("most recent", "desc")):
        yield Question(
            treqs(sid),
            f"What is the primary admission diagnosis of the {word} admission of patient {sid}?",
            f"select demographic.diagnosis from demographic where demographic.subject_id = {sid} order by "
            f"demographic.admittime {order} limit 1",
        )
    for y in years:
        yield Question(
            treqs(sid),
            f"What is the primary admission diagnosis of the admission of patient {sid} in the year {y}?",
            f"select demographic.diagnosis from demographic where demographic.subject_id = {sid} and "
            f"demographic.admityear = {y}",
        )


def _sources(*pairs: tuple[str, Expand]) -> tuple[Source, ...]:
    return tuple(Source(sql, expand) for sql, expand in pairs)


GENERATORS: list[SqlCategory] = [
    SqlCategory(
        "ehr_patient_gender",
        "mimic_iii",
        "string",
        _sources(
            ("select subject_id from patients order by 1", each(_gender)),
            ("select subject_id, hadm_id, icustay_id from icustays order by 2", each(_gender_of_admission)),
        ),
    ),
    SqlCategory(
        "ehr_admissions_in_year",
        "mimic_iii",
        "integer",
        _sources(
            (
                "select subject_id, group_concat(y) from (select distinct subject_id, strftime('%Y', admittime) as y "
                "from admissions) group by subject_id order by 1",
                each(_admissions_in_year),
            ),
        ),
    ),
    SqlCategory(
        "ehr_lab_latest_value",
        "mimic_iii",
        "numeric",
        _sources(
            (
                "select distinct l.subject_id, d.label from labevents l join d_labitems d on l.itemid = d.itemid "
                "order by 1, 2",
                each(_lab_first_last),
            ),
        ),
    ),
    SqlCategory(
        "ehr_drug_route",
        "mimic_iii",
        "set",
        _sources(("select distinct drug from prescriptions order by 1", each(_drug_routes))),
    ),
    SqlCategory(
        "ehr_topk_diagnoses_year",
        "mimic_iii",
        "set",
        _sources(("select distinct strftime('%Y', charttime) from diagnoses_icd order by 1", _topk_diagnoses)),
        max_set=10,
    ),
    SqlCategory(
        "ehr_length_of_stay",
        "mimic_iii",
        "numeric",
        _sources(
            (
                "select subject_id, hadm_id from admissions where dischtime is not null order by 2",
                each(_length_of_stay_admission),
            ),
            (
                "select distinct subject_id from admissions where dischtime is not null order by 1",
                each(_length_of_stay_patient),
            ),
        ),
    ),
    SqlCategory(
        "ehr_procedure_cost",
        "mimic_iii",
        "numeric",
        _sources(
            (
                "select distinct d.short_title from procedures_icd p join d_icd_procedures d on p.icd9_code = "
                "d.icd9_code order by 1",
                each(_procedure_cost),
            ),
            (
                "select distinct subject_id, hadm_id from procedures_icd order by 2",
                each(_procedure_cost_admission),
            ),
            ("select distinct subject_id from procedures_icd order by 1", each(_procedure_cost_patient)),
        ),
    ),
    SqlCategory(
        "ehr_icu_stay_hours",
        "mimic_iii",
        "numeric",
        _sources(
            (
                "select subject_id, hadm_id, icustay_id from icustays where outtime is not null order by 3",
                each(_icu_hours_stay),
            ),
            (
                "select distinct subject_id from icustays where outtime is not null order by 1",
                each(_icu_hours_patient),
            ),
        ),
    ),
    SqlCategory(
        "ehr_distinct_drugs_admission",
        "mimic_iii",
        "integer",
        _sources(
            (
                "select subject_id, hadm_id, group_concat(distinct route) from prescriptions group by subject_id, "
                "hadm_id order by 2",
                each(_distinct_drugs_admission),
            ),
            (
                "select subject_id, group_concat(distinct strftime('%Y', startdate)) from prescriptions group by "
                "subject_id order by 1",
                each(_distinct_drugs_patient),
            ),
        ),
    ),
    SqlCategory(
        "ehr_abnormal_lab_count",
        "mimic_iii",
        "integer",
        _sources(
            (
                "select l.subject_id, d.label, min(l.valuenum), max(l.valuenum) from labevents l join d_labitems d "
                "on l.itemid = d.itemid group by l.subject_id, d.label order by 1, 2",
                each(_abnormal_labs),
            ),
            (
                "select d.label, l.valuenum from labevents l join d_labitems d on l.itemid = d.itemid where "
                "l.valuenum is not null order by 1, 2",
                _abnormal_labs_population,
            ),
        ),
    ),
    SqlCategory(
        "ehr_first_labs_of_admission",
        "mimic_iii",
        "list",
        _sources(
            (
                "select subject_id, hadm_id from labevents group by subject_id, hadm_id having count(*) >= 4 "
                "order by 2",
                each(_first_labs_of_admission),
            ),
        ),
    ),
    SqlCategory(
        "ehr_eicu_vital_extreme",
        "eicu",
        "numeric",
        _sources(
            (
                "select distinct p.uniquepid, v.patientunitstayid from vitalperiodic v join patient p on "
                "p.patientunitstayid = v.patientunitstayid order by 2",
                each(_eicu_vital_extreme),
            ),
        ),
    ),
    SqlCategory(
        "ehr_eicu_diagnosis_patients",
        "eicu",
        "integer",
        _sources(("select distinct diagnosisname from diagnosis order by 1", each(_eicu_diag_patients))),
    ),
    SqlCategory(
        "ehr_eicu_intake_output_total",
        "eicu",
        "numeric",
        _sources(
            (
                "select distinct p.uniquepid, i.patientunitstayid from intakeoutput i join patient p on "
                "p.patientunitstayid = i.patientunitstayid order by 2",
                each(_eicu_io_total),
            ),
            (
                "select distinct p.uniquepid, i.patientunitstayid, i.celllabel, case when i.cellpath like "
                "'%intake%' then 'intake' else 'output' end from intakeoutput i join patient p on "
                "p.patientunitstayid = i.patientunitstayid order by 2, 3, 4",
                each(_eicu_io_label),
            ),
        ),
    ),
    SqlCategory(
        "ehr_treqs_count_two_filters",
        "treqs",
        "integer",
        _sources(("select distinct short_title from diagnoses order by 1", each(_treqs_two_filters))),
    ),
    SqlCategory("ehr_treqs_avg_age", "treqs", "numeric", _sources((TREQS_VALUES_SQL, _treqs_avg_age))),
    SqlCategory(
        "ehr_treqs_admission_diagnosis",
        "treqs",
        "string",
        _sources(
            ("select subject_id, hadm_id from demographic order by 2", each(_treqs_diagnosis_admission)),
            (
                "select subject_id, group_concat(admityear) from (select subject_id, admityear from demographic "
                "group by subject_id, admityear having count(*) = 1) group by subject_id order by 1",
                each(_treqs_diagnosis_patient),
            ),
        ),
    ),
]
