"""eICU tables and columns as EHRSQL's eICU questions use them."""

from __future__ import annotations

TABLES: dict[str, list[tuple[str, str]]] = {
    "patient": [
        ("uniquepid", "TEXT"), ("patienthealthsystemstayid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("gender", "TEXT"),
        ("age", "TEXT"), ("ethnicity", "TEXT"), ("hospitalid", "INTEGER"), ("wardid", "INTEGER"), ("admissionheight", "REAL"),
        ("admissionweight", "REAL"), ("dischargeweight", "REAL"), ("hospitaladmittime", "TEXT"), ("hospitaladmitsource", "TEXT"),
        ("unitadmittime", "TEXT"), ("unitdischargetime", "TEXT"), ("hospitaldischargetime", "TEXT"), ("hospitaldischargestatus", "TEXT"),
    ],
    "diagnosis": [("diagnosisid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("diagnosisname", "TEXT"), ("diagnosistime", "TEXT"), ("icd9code", "TEXT")],
    "treatment": [("treatmentid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("treatmentname", "TEXT"), ("treatmenttime", "TEXT")],
    "lab": [("labid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("labname", "TEXT"), ("labresult", "REAL"), ("labresulttime", "TEXT")],
    "medication": [
        ("medicationid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("drugname", "TEXT"), ("dosage", "TEXT"), ("routeadmin", "TEXT"),
        ("drugstarttime", "TEXT"), ("drugstoptime", "TEXT"),
    ],
    "cost": [
        ("costid", "INTEGER"), ("uniquepid", "TEXT"), ("patienthealthsystemstayid", "INTEGER"), ("eventtype", "TEXT"), ("eventid", "INTEGER"),
        ("chargetime", "TEXT"), ("cost", "REAL"),
    ],
    "allergy": [("allergyid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("drugname", "TEXT"), ("allergyname", "TEXT"), ("allergytime", "TEXT")],
    "intakeoutput": [
        ("intakeoutputid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("cellpath", "TEXT"), ("celllabel", "TEXT"),
        ("cellvaluenumeric", "REAL"), ("intakeoutputtime", "TEXT"),
    ],
    "microlab": [("microlabid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("culturesite", "TEXT"), ("organism", "TEXT"), ("culturetakentime", "TEXT")],
    "vitalperiodic": [
        ("vitalperiodicid", "INTEGER"), ("patientunitstayid", "INTEGER"), ("temperature", "REAL"), ("sao2", "REAL"), ("heartrate", "REAL"),
        ("respiration", "REAL"), ("systemicsystolic", "REAL"), ("systemicdiastolic", "REAL"), ("systemicmean", "REAL"), ("observationtime", "TEXT"),
    ],
}

INDEXES: list[tuple[str, str]] = [
    ("patient", "uniquepid"), ("patient", "patienthealthsystemstayid"), ("patient", "patientunitstayid"),
    ("diagnosis", "patientunitstayid"), ("treatment", "patientunitstayid"), ("lab", "patientunitstayid"), ("lab", "labname"),
    ("medication", "patientunitstayid"), ("medication", "drugname"), ("intakeoutput", "patientunitstayid"),
    ("microlab", "patientunitstayid"), ("vitalperiodic", "patientunitstayid"), ("cost", "patienthealthsystemstayid"), ("cost", "eventid"),
]
