"""Fixtures for DiagGym: a generated cohort, its splits, a statistical world model fit on its train split, and
DiagGym-format records (no real data exists here: they are written in DiagGym's training layout)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from components.diag.cohort import CohortConfig, build_cohort
from components.diag.record import Case
from components.diag.world import StatisticalWorldModel

COHORT = CohortConfig(patients=900, seed=7)


@pytest.fixture(scope="session")
def cohort() -> list[Case]:
    return build_cohort(COHORT)


@pytest.fixture(scope="session")
def train(cohort) -> list[Case]:
    return [c for c in cohort if c.split == "train"]


@pytest.fixture(scope="session")
def test_cases(cohort) -> list[Case]:
    return [c for c in cohort if c.split == "test"]


@pytest.fixture(scope="session")
def world(train) -> StatisticalWorldModel:
    return StatisticalWorldModel.fit(train, seed=0)


NOTE = """Name:  ___                  Unit No:   ___

Admission Date:  ___              Discharge Date:   ___

Date of Birth:  ___             Sex:   {sex}

Service: MEDICINE

Allergies:
No Known Allergies / Adverse Drug Reactions

Chief Complaint:
{cc}

Major Surgical or Invasive Procedure:
{procedure}

History of Present Illness:
{hpi}

Past Medical History:
{pmh}

Social History:
___
Family History:
non-contributory

Physical Exam:
ADMISSION EXAM: see below
DISCHARGE EXAM: afebrile

Pertinent Results:
___ 07:30AM BLOOD WBC-14.2

Brief Hospital Course:
# {course}: treated and improved.

Discharge Medications:
1. levofloxacin 750 mg daily

Discharge Disposition:
Home

Discharge Diagnosis:
{dx}

Discharge Condition:
Stable.
"""

LAB = "Value: {v}; Numeric Value: {v}; Units: {u}; Reference Range: {r}"


def lab(v: float, unit: str, ref: str, flag: bool = False) -> str:
    return LAB.format(v=v, u=unit, r=ref) + ("; Flag: abnormal" if flag else "")


def event(time: str, source: str, label: str, data: str) -> dict[str, Any]:
    return {"time": time, "source": source, "data": {"label": label, "lab_data": data}}


def diaggym_records() -> dict[str, Any]:
    """Three admissions of two patients in DiagGym's layout: a pneumonia and a pancreatitis of patient 10000032
    (times out of order, MIMIC labels), and a diagnosis outside the catalogue with a label outside it."""
    exam = [{"exam_name": "Vital signs", "exam_results": "T 38.5, HR 104, BP 122/70, RR 22, 91% RA"},
            {"exam_name": "Lungs", "exam_results": "crackles at the right base"}]
    return {
        "10000032-DS-22": {
            "text": NOTE.format(sex="M", cc="cough, fever", procedure="None", hpi="___ with 3 days of productive cough "
                                "and fever.", pmh="COPD, HTN", course="Community acquired pneumonia",
                                dx="Community acquired pneumonia"),
            "discharge_diagnosis": "Primary:\nCommunity acquired pneumonia\n\nSecondary:\nCOPD",
            "reformat_physical_exam": exam,
            "events": [
                event("2180-05-06 23:10:00", "radiology", "CHEST (PA AND LAT)",
                      "Right lower lobe consolidation.\nIMPRESSION: Right lower lobe pneumonia."),
                event("2180-05-06 22:15:00", "lab", "White Blood Cells", lab(14.2, "K/uL", "4.0 - 11.0", True)),
                event("2180-05-06 22:15:00", "lab", "Urea Nitrogen", lab(24.0, "mg/dL", "6.0 - 20.0", True)),
                event("2180-05-06 22:15:00", "lab", "Sodium", lab(133.0, "mEq/L", "135.0 - 145.0", True)),
                event("2180-05-07 01:00:00", "microbiology", "BLOOD CULTURE", "NO GROWTH."),
                event("2180-05-07 02:00:00", "lab", "Procalcitonin", lab(2.3, "ng/mL", "0.0 - 0.1", True)),
            ],
        },
        "10000032-DS-23": {
            "text": NOTE.format(sex="M", cc="epigastric pain", procedure="None", hpi="___ with epigastric pain "
                                "radiating to the back.", pmh="COPD", course="Acute pancreatitis", dx="Pancreatitis"),
            "discharge_diagnosis": "Acute pancreatitis",
            "reformat_physical_exam": [{"exam_name": "Abdomen", "exam_results": "epigastric tenderness"}],
            "events": [
                event("2181-02-01 10:00:00", "lab", "Lipase", lab(1450.0, "IU/L", "0.0 - 60.0", True)),
                event("2181-02-01 10:05:00", "lab", "Alanine Aminotransferase (ALT)", lab(88.0, "IU/L", "0.0 - 40.0", True)),
                event("2181-02-01 12:00:00", "radiology", "CT ABD & PELVIS WITH CONTRAST",
                      "Peripancreatic stranding.\nIMPRESSION: Acute interstitial pancreatitis."),
            ],
        },
        "10000450-DS-5": {
            "text": NOTE.format(sex="F", cc="dyspnea", procedure="bronchoscopy with biopsy", hpi="___ with months of "
                                "dry cough.", pmh="none", course="Sarcoidosis", dx="Sarcoidosis"),
            "discharge_diagnosis": "Sarcoidosis",
            "reformat_physical_exam": [{"exam_name": "General", "exam_results": "NAD"}],
            "events": [event("2150-01-01 08:00:00", "lab", "Angiotensin Converting Enzyme", lab(95.0, "U/L", "8 - 52", True))],
        },
    }


def write_diaggym(path: Path, records: dict[str, Any] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(diaggym_records() if records is None else records), encoding="utf-8")
    return path


def oracle_episode(env, case, sample_index: int = 0):
    """The scripted clinician: the key exams (as many per turn as allowed), then the right diagnosis."""
    env.reset(case, sample_index)
    per_turn = env.config.max_exams_per_turn
    for i in range(0, len(case.key_exams), per_turn):
        env.step(json.dumps({"type": "order_exams", "exams": case.key_exams[i:i + per_turn]}))
    env.step(f"Final diagnosis: {case.diagnosis}")
    return env.episode
