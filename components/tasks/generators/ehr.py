"""Generated EHR-querying tasks over the synthetic MIMIC-III, eICU and TREQS databases.

Each category samples its parameters from candidates read once per `generate` call from one shared database per
schema (files/ehr/synthetic_<schema>_s<seed>.sqlite under ctx.out_dir, built on first use), writes a reference SQL
query, and takes the answer from running it. `reference_code` opens the same database by its relative path, runs the
same SQL and applies the same conversion (the conversion is one expression, evaluated here and embedded there).
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from components.ehr.synth import build_database
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


def db_relpath(schema: str, seed: int) -> str:
    return f"files/ehr/synthetic_{schema}_s{seed}.sqlite"


def ensure_db(ctx: GenContext, schema: str) -> str:
    """Build the shared database for (out_dir, seed) once; later calls reuse the file (same seed, same bytes)."""
    rel = db_relpath(schema, ctx.seed)
    path = Path(ctx.out_dir) / rel
    if not path.is_file():
        build_database(schema, path, seed=ctx.seed)  # type: ignore[arg-type]
    return rel


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


# A question maker gets one candidate row and the rng, and returns (question text, SQL) or None to skip.
Maker = Callable[[tuple[Any, ...], random.Random], "tuple[str, str] | None"]


@dataclass(frozen=True)
class SqlCategory:
    category: str
    schema: str
    kind: str  # integer | numeric | string | set | list
    candidates_sql: str
    make: Maker
    domain: ClassVar[Domain] = Domain.EHR
    description: str = field(default="")

    def generate(self, ctx: GenContext, n: int) -> Iterator[Task]:
        rng = ctx.rng(self.category)
        rel = ensure_db(ctx, self.schema)
        con = sqlite3.connect(f"file:{Path(ctx.out_dir) / rel}?mode=ro", uri=True)
        try:
            cands = con.execute(self.candidates_sql).fetchall()
            if not cands:
                raise RuntimeError(f"{self.category}: no candidates in {rel}")
            i = tries = 0
            while i < n:
                tries += 1
                if tries > 20 * n + 100:
                    raise RuntimeError(f"{self.category}: could only make {i} of {n} tasks with non-empty answers")
                made = self.make(rng.choice(cands), rng)
                if made is None:
                    continue
                question, sql = made
                rows = con.execute(sql).fetchall()
                if not rows or rows[0][0] is None:
                    continue
                answer = convert(rows, self.kind)
                prompt = (
                    f"The SQLite database `{rel}` holds synthetic electronic health records in the "
                    f"{LAYOUT[self.schema]}. "
                    f"Times are stored as 'YYYY-MM-DD HH:MM:SS' text.\nQuestion: {question}\n{ANSWER_HINT[self.kind]}"
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
                    reference_code=reference_program(rel, sql, self.kind),
                    metadata={"schema": self.schema, "sql": sql},
                )
                i += 1
        finally:
            con.close()


def q(s: str) -> str:
    """An SQL string literal."""
    return "'" + str(s).replace("'", "''") + "'"


# ---- question makers ------------------------------------------------------------------------------------------
def _gender(c, rng):
    return (
        f"What is the gender of patient {c[0]}?",
        f"select patients.gender from patients where patients.subject_id = {c[0]}",
    )


def _admissions_in_year(c, rng):
    return (
        f"How many hospital admissions did patient {c[0]} have in the year {c[1]}?",
        f"select count(*) from admissions where admissions.subject_id = {c[0]} and strftime('%Y', "
        f"admissions.admittime) = '{c[1]}'",
    )


def _lab_latest(c, rng):
    sid, label = c
    return (
        f"What was the value of the last '{label}' lab test of patient {sid}?",
        f"select labevents.valuenum from labevents where labevents.subject_id = {sid} and labevents.itemid in "
        f"(select d_labitems.itemid from d_labitems where d_labitems.label = {q(label)}) order by "
        "labevents.charttime desc limit 1",
    )


def _drug_route(c, rng):
    return (
        f"Through which routes has the drug '{c[0]}' been administered?",
        f"select distinct prescriptions.route from prescriptions where prescriptions.drug = {q(c[0])}",
    )


def _topk_diagnoses(c, rng):
    k = rng.randint(3, 5)
    return (
        f"Which diagnoses (short titles) were among the {k} most frequently recorded in {c[0]} (ties included)?",
        "select d_icd_diagnoses.short_title from d_icd_diagnoses where d_icd_diagnoses.icd9_code in (select "
        "t1.icd9_code from "
        "(select diagnoses_icd.icd9_code, dense_rank() over (order by count(*) desc) as c1 from diagnoses_icd "
        f"where strftime('%Y', diagnoses_icd.charttime) = '{c[0]}' group by diagnoses_icd.icd9_code) as t1 "
        f"where t1.c1 <= {k})",
    )


def _length_of_stay(c, rng):
    return (
        f"How many days (fractional) did hospital admission {c[0]} last, from admission to discharge?",
        "select julianday(admissions.dischtime) - julianday(admissions.admittime) from admissions where "
        f"admissions.hadm_id = {c[0]}",
    )


def _procedure_cost(c, rng):
    return (
        f"What is the cost charged for the procedure '{c[0]}'?",
        "select distinct cost.cost from cost where cost.event_type = 'procedures_icd' and cost.event_id in (select "
        "procedures_icd.row_id from procedures_icd where procedures_icd.icd9_code = (select "
        "d_icd_procedures.icd9_code from "
        f"d_icd_procedures where d_icd_procedures.short_title = {q(c[0])}))",
    )


def _icu_hours(c, rng):
    return (
        f"How many hours did ICU stay {c[0]} last?",
        "select 24 * (julianday(icustays.outtime) - julianday(icustays.intime)) from icustays where "
        f"icustays.icustay_id = {c[0]}",
    )


def _distinct_drugs(c, rng):
    return (
        f"How many distinct drugs were prescribed during hospital admission {c[0]}?",
        f"select count(distinct prescriptions.drug) from prescriptions where prescriptions.hadm_id = {c[0]}",
    )


def _abnormal_labs(c, rng):
    sid, label, lo, hi = c
    if hi is None or lo is None or hi <= lo:
        return None
    thr = round(lo + (hi - lo) * rng.uniform(0.3, 0.7), 1)
    return (
        f"How many '{label}' results of patient {sid} were above {thr}?",
        f"select count(*) from labevents where labevents.subject_id = {sid} and labevents.valuenum > {thr} and "
        "labevents.itemid in "
        f"(select d_labitems.itemid from d_labitems where d_labitems.label = {q(label)})",
    )


def _first_labs_of_visit(c, rng):
    return (
        f"List the times of the first three lab tests (any kind) of hospital admission {c[0]}, earliest first.",
        f"select labevents.charttime from labevents where labevents.hadm_id = {c[0]} order by labevents.charttime asc, "
        "labevents.row_id asc limit 3",
    )


def _eicu_vital_extreme(c, rng):
    col, word = rng.choice(
        [
            ("heartrate", "heart rate"),
            ("sao2", "SaO2"),
            ("respiration", "respiration rate"),
            ("systemicsystolic", "systolic blood pressure"),
            ("temperature", "temperature"),
        ]
    )
    agg = rng.choice(["max", "min"])
    return (
        f"What was the {'highest' if agg == 'max' else 'lowest'} {word} recorded during unit stay {c[0]}?",
        f"select {agg}(vitalperiodic.{col}) from vitalperiodic where vitalperiodic.patientunitstayid = {c[0]}",
    )


def _eicu_diag_patients(c, rng):
    return (
        f"How many distinct patients were diagnosed with '{c[0]}'?",
        "select count(distinct patient.uniquepid) from patient where patient.patientunitstayid in (select "
        f"diagnosis.patientunitstayid from diagnosis where diagnosis.diagnosisname = {q(c[0])})",
    )


def _eicu_io_total(c, rng):
    which = rng.choice(["intake", "output"])
    return (
        f"What was the total recorded {which} (ml) during unit stay {c[0]}?",
        f"select sum(intakeoutput.cellvaluenumeric) from intakeoutput where intakeoutput.patientunitstayid = {c[0]} "
        f"and intakeoutput.cellpath like '%{which}%'",
    )


def _treqs_two_filters(c, rng):
    gender, age = c[0], int(c[1]) + rng.randint(1, 15)
    return (
        f"How many patients of gender '{gender}' were younger than {age} at admission and had a diagnosis of '{c[2]}'?",
        "select count(distinct demographic.subject_id) from demographic inner join diagnoses on demographic.hadm_id = "
        f"diagnoses.hadm_id where demographic.gender = {q(gender)} and demographic.age < {age} and "
        f"diagnoses.short_title = {q(c[2])}",
    )


def _treqs_avg_age(c, rng):
    return (
        f"What is the average age of patients with admission type '{c[0]}' and insurance '{c[1]}'?",
        f"select avg(demographic.age) from demographic where demographic.admission_type = {q(c[0])} and "
        f"demographic.insurance = {q(c[1])}",
    )


def _treqs_name_lookup(c, rng):
    return (
        f"What is the primary admission diagnosis of the admission {c[0]}?",
        f"select demographic.diagnosis from demographic where demographic.hadm_id = {c[0]}",
    )


GENERATORS: list[SqlCategory] = [
    SqlCategory(
        "ehr_patient_gender", "mimic_iii", "string", "select subject_id from patients order by subject_id", _gender
    ),
    SqlCategory(
        "ehr_admissions_in_year",
        "mimic_iii",
        "integer",
        "select distinct subject_id, strftime('%Y', admittime) from admissions order by 1, 2",
        _admissions_in_year,
    ),
    SqlCategory(
        "ehr_lab_latest_value",
        "mimic_iii",
        "numeric",
        "select distinct l.subject_id, d.label from labevents l join d_labitems d on l.itemid = d.itemid order by 1, 2",
        _lab_latest,
    ),
    SqlCategory(
        "ehr_drug_route", "mimic_iii", "set", "select distinct drug from prescriptions order by 1", _drug_route
    ),
    SqlCategory(
        "ehr_topk_diagnoses_year",
        "mimic_iii",
        "set",
        "select distinct strftime('%Y', charttime) from diagnoses_icd order by 1",
        _topk_diagnoses,
    ),
    SqlCategory(
        "ehr_length_of_stay",
        "mimic_iii",
        "numeric",
        "select hadm_id from admissions where dischtime is not null order by 1",
        _length_of_stay,
    ),
    SqlCategory(
        "ehr_procedure_cost",
        "mimic_iii",
        "numeric",
        "select distinct d.short_title from procedures_icd p join d_icd_procedures d on p.icd9_code = "
        "d.icd9_code order by 1",
        _procedure_cost,
    ),
    SqlCategory(
        "ehr_icu_stay_hours",
        "mimic_iii",
        "numeric",
        "select icustay_id from icustays where outtime is not null order by 1",
        _icu_hours,
    ),
    SqlCategory(
        "ehr_distinct_drugs_admission",
        "mimic_iii",
        "integer",
        "select distinct hadm_id from prescriptions order by 1",
        _distinct_drugs,
    ),
    SqlCategory(
        "ehr_abnormal_lab_count",
        "mimic_iii",
        "integer",
        "select distinct l.subject_id, d.label, min(l.valuenum), max(l.valuenum) from labevents l join d_labitems d "
        "on l.itemid = d.itemid group by l.subject_id, d.label order by 1, 2",
        _abnormal_labs,
    ),
    SqlCategory(
        "ehr_first_labs_of_admission",
        "mimic_iii",
        "list",
        "select hadm_id from labevents group by hadm_id having count(*) >= 3 order by 1",
        _first_labs_of_visit,
    ),
    SqlCategory(
        "ehr_eicu_vital_extreme",
        "eicu",
        "numeric",
        "select distinct patientunitstayid from vitalperiodic order by 1",
        _eicu_vital_extreme,
    ),
    SqlCategory(
        "ehr_eicu_diagnosis_patients",
        "eicu",
        "integer",
        "select distinct diagnosisname from diagnosis order by 1",
        _eicu_diag_patients,
    ),
    SqlCategory(
        "ehr_eicu_intake_output_total",
        "eicu",
        "numeric",
        "select distinct patientunitstayid from intakeoutput order by 1",
        _eicu_io_total,
    ),
    SqlCategory(
        "ehr_treqs_count_two_filters",
        "treqs",
        "integer",
        "select distinct d.gender, d.age, x.short_title from demographic d join diagnoses x on d.hadm_id = "
        "x.hadm_id order by 1, 2, 3",
        _treqs_two_filters,
    ),
    SqlCategory(
        "ehr_treqs_avg_age",
        "treqs",
        "numeric",
        "select distinct admission_type, insurance from demographic order by 1, 2",
        _treqs_avg_age,
    ),
    SqlCategory(
        "ehr_treqs_admission_diagnosis",
        "treqs",
        "string",
        "select hadm_id from demographic order by 1",
        _treqs_name_lookup,
    ),
]
