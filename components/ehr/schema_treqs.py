"""TREQS (MIMICSQL) tables.

Numeric columns carry numeric affinity so TREQS's quoted literals ('45') compare as numbers.
"""

from __future__ import annotations

TABLES: dict[str, list[tuple[str, str]]] = {
    "demographic": [
        ("subject_id", "INTEGER"),
        ("hadm_id", "INTEGER"),
        ("name", "TEXT"),
        ("marital_status", "TEXT"),
        ("age", "INTEGER"),
        ("dob", "TEXT"),
        ("gender", "TEXT"),
        ("language", "TEXT"),
        ("religion", "TEXT"),
        ("admission_type", "TEXT"),
        ("days_stay", "INTEGER"),
        ("insurance", "TEXT"),
        ("ethnicity", "TEXT"),
        ("expire_flag", "INTEGER"),
        ("admission_location", "TEXT"),
        ("discharge_location", "TEXT"),
        ("diagnosis", "TEXT"),
        ("dod", "TEXT"),
        ("dob_year", "INTEGER"),
        ("dod_year", "REAL"),
        ("admittime", "TEXT"),
        ("dischtime", "TEXT"),
        ("admityear", "INTEGER"),
    ],
    "diagnoses": [
        ("subject_id", "INTEGER"),
        ("hadm_id", "INTEGER"),
        ("icd9_code", "TEXT"),
        ("short_title", "TEXT"),
        ("long_title", "TEXT"),
    ],
    "procedures": [
        ("subject_id", "INTEGER"),
        ("hadm_id", "INTEGER"),
        ("icd9_code", "TEXT"),
        ("short_title", "TEXT"),
        ("long_title", "TEXT"),
    ],
    "prescriptions": [
        ("subject_id", "INTEGER"),
        ("hadm_id", "INTEGER"),
        ("icustay_id", "INTEGER"),
        ("drug_type", "TEXT"),
        ("drug", "TEXT"),
        ("formulary_drug_cd", "TEXT"),
        ("route", "TEXT"),
        ("drug_dose", "TEXT"),
    ],
    "lab": [
        ("subject_id", "INTEGER"),
        ("hadm_id", "INTEGER"),
        ("itemid", "INTEGER"),
        ("charttime", "TEXT"),
        ("flag", "TEXT"),
        ("value_unit", "TEXT"),
        ("label", "TEXT"),
        ("fluid", "TEXT"),
        ("category", "TEXT"),
    ],
}

INDEXES: list[tuple[str, str]] = [
    ("demographic", "hadm_id"),
    ("demographic", "subject_id"),
    ("diagnoses", "hadm_id"),
    ("procedures", "hadm_id"),
    ("prescriptions", "hadm_id"),
    ("lab", "hadm_id"),
]
