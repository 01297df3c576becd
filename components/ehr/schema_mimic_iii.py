"""MIMIC-III tables and columns as EHRSQL's MIMIC-III questions use them (the EHRSQL-preprocessed layout)."""

from __future__ import annotations

TABLES: dict[str, list[tuple[str, str]]] = {
    "patients": [("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("gender", "TEXT"), ("dob", "TEXT"), ("dod", "TEXT")],
    "admissions": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("admittime", "TEXT"), ("dischtime", "TEXT"),
        ("admission_type", "TEXT"), ("admission_location", "TEXT"), ("discharge_location", "TEXT"), ("insurance", "TEXT"),
        ("language", "TEXT"), ("marital_status", "TEXT"), ("ethnicity", "TEXT"), ("age", "INTEGER"),
    ],
    "d_icd_diagnoses": [("row_id", "INTEGER"), ("icd9_code", "TEXT"), ("short_title", "TEXT"), ("long_title", "TEXT")],
    "d_icd_procedures": [("row_id", "INTEGER"), ("icd9_code", "TEXT"), ("short_title", "TEXT"), ("long_title", "TEXT")],
    "d_labitems": [("row_id", "INTEGER"), ("itemid", "INTEGER"), ("label", "TEXT")],
    "d_items": [("row_id", "INTEGER"), ("itemid", "INTEGER"), ("label", "TEXT"), ("linksto", "TEXT")],
    "diagnoses_icd": [("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("icd9_code", "TEXT"), ("charttime", "TEXT")],
    "procedures_icd": [("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("icd9_code", "TEXT"), ("charttime", "TEXT")],
    "labevents": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("itemid", "INTEGER"), ("charttime", "TEXT"),
        ("valuenum", "REAL"), ("valueuom", "TEXT"),
    ],
    "prescriptions": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("startdate", "TEXT"), ("enddate", "TEXT"),
        ("drug", "TEXT"), ("dose_val_rx", "TEXT"), ("dose_unit_rx", "TEXT"), ("route", "TEXT"),
    ],
    "cost": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("event_type", "TEXT"), ("event_id", "INTEGER"),
        ("chargetime", "TEXT"), ("cost", "REAL"),
    ],
    "chartevents": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("icustay_id", "INTEGER"), ("itemid", "INTEGER"),
        ("charttime", "TEXT"), ("valuenum", "REAL"), ("valueuom", "TEXT"),
    ],
    "inputevents_cv": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("icustay_id", "INTEGER"), ("charttime", "TEXT"),
        ("itemid", "INTEGER"), ("amount", "REAL"),
    ],
    "outputevents": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("icustay_id", "INTEGER"), ("charttime", "TEXT"),
        ("itemid", "INTEGER"), ("value", "REAL"),
    ],
    "microbiologyevents": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("charttime", "TEXT"), ("spec_type_desc", "TEXT"),
        ("org_name", "TEXT"),
    ],
    "icustays": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("icustay_id", "INTEGER"), ("first_careunit", "TEXT"),
        ("last_careunit", "TEXT"), ("first_wardid", "INTEGER"), ("last_wardid", "INTEGER"), ("intime", "TEXT"), ("outtime", "TEXT"),
    ],
    "transfers": [
        ("row_id", "INTEGER"), ("subject_id", "INTEGER"), ("hadm_id", "INTEGER"), ("icustay_id", "INTEGER"), ("eventtype", "TEXT"),
        ("careunit", "TEXT"), ("wardid", "INTEGER"), ("intime", "TEXT"), ("outtime", "TEXT"),
    ],
}

INDEXES: list[tuple[str, str]] = [
    ("admissions", "subject_id"), ("admissions", "hadm_id"), ("diagnoses_icd", "hadm_id"), ("procedures_icd", "hadm_id"),
    ("labevents", "hadm_id"), ("labevents", "itemid"), ("prescriptions", "hadm_id"), ("prescriptions", "drug"),
    ("chartevents", "icustay_id"), ("chartevents", "itemid"), ("inputevents_cv", "icustay_id"), ("outputevents", "icustay_id"),
    ("microbiologyevents", "hadm_id"), ("icustays", "hadm_id"), ("transfers", "hadm_id"), ("cost", "hadm_id"), ("cost", "event_id"),
]
