"""The catalogue's exams: 76 lab analytes (units, reference ranges, how each moves with the latent factors), 10
panels, 11 microbiology exams and 15 imaging studies and procedures with their normal reports; and the vital signs
the physical exam reports (drawn the same way, not orderable).

Latent factors (components.diag.cohort draws one value of each per patient, shifted by the disease times its
severity): inflammation, renal, hepatocellular, cholestasis, liver_synthetic, anemia, bleeding, acidosis, ketosis,
hypoperfusion, hypoxia, hypercapnia, myocardial, cardiac_stretch, hyperglycemia, dehydration, hyponatremia,
thyroid (up: hyperthyroid), iron_deficiency, b12_deficiency, urinary_infection, csf_inflammation, thrombosis,
pancreatic. Related labs load on the same factor, so they move together (Hgb and Hct, ALT and AST, BUN and
creatinine, lipase and amylase); derived values are computed (anion gap, osmolality, INR, pH, saturation).

Synonyms include MIMIC-IV's own labels ("Urea Nitrogen", "Asparate Aminotransferase (AST)", "INR(PT)") so that
imported DiagGym records map onto the catalogue.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from components.diag.catalogue import Analyte, Exam, ExamKind

DIPSTICK = ("Negative", "Trace", "1+", "2+", "3+")
DIPSTICK_CUTS = (1.6, 2.2, 2.8, 3.4)


def _lab(name: str, unit: str, low: float | None, high: float | None, *, typical: tuple[float, float] | None = None,
         log: bool = False, dec: int = 1, load: Mapping[str, float] | None = None, gain: float = 1.0,
         idio: float = 0.6, female: float = 0.0, bounds: tuple[float, float] | None = None) -> Analyte:
    lo, hi = typical or (low, high)
    if log:
        mean, sd = (math.log(lo) + math.log(hi)) / 2, (math.log(hi) - math.log(lo)) / 4
    else:
        mean, sd = (lo + hi) / 2, (hi - lo) / 4
    return Analyte(name, unit, low, high, mean, sd, log=log, decimals=dec, loadings=dict(load or {}), gain=gain,
                   idio=idio, female=female, bounds=bounds or ((0.0, 1e6) if not log else (0.0, 1e7)))


def _ordinal(name: str, load: Mapping[str, float], levels: tuple[str, ...] = DIPSTICK,
             cuts: tuple[float, ...] = DIPSTICK_CUTS) -> Analyte:
    return Analyte(name, "", None, None, 0.0, 1.0, decimals=0, loadings=dict(load), levels=levels, cuts=cuts,
                   bounds=(0, len(levels) - 1))


def _derived(name: str, unit: str, low: float | None, high: float | None, inputs: tuple[str, ...], fn, *,
             dec: int = 1, noise: float = 0.0, typical: tuple[float, float] | None = None,
             bounds: tuple[float, float] | None = None) -> Analyte:
    """A value computed from others; `noise` is its relative measurement noise (sd of a log factor)."""
    lo, hi = typical or (low, high)
    return Analyte(name, unit, low, high, (lo + hi) / 2, (hi - lo) / 4, decimals=dec, idio=noise, inputs=inputs,
                   derive=fn, bounds=bounds or (0.0, 1e6))


def _saturation(v: Mapping[str, float]) -> float:
    po2 = max(v["pO2"], 1.0)
    return 100.0 * po2**2.7 / (po2**2.7 + 26.8**2.7)


ANALYTES: tuple[Analyte, ...] = (
    # ---- complete blood count
    _lab("White blood cell count", "K/uL", 4.0, 11.0, typical=(4.5, 10.5), log=True, load={"inflammation": 1.0}),
    _lab("Neutrophils", "%", 40.0, 75.0, typical=(45, 72), load={"inflammation": 0.8}, bounds=(5, 98)),
    _lab("Hemoglobin", "g/dL", 12.0, 17.5, typical=(12.5, 16.5), load={"anemia": -1.0, "bleeding": -0.9,
         "dehydration": 0.3}, female=-0.8, idio=0.4, bounds=(3, 25)),
    _derived("Hematocrit", "%", 36.0, 52.0, ("Hemoglobin",), lambda v: 3.0 * v["Hemoglobin"], noise=0.02,
             bounds=(9, 75)),
    _lab("Platelet count", "K/uL", 150, 400, dec=0, load={"liver_synthetic": -0.8, "inflammation": 0.2},
         bounds=(2, 1500)),
    _lab("Mean corpuscular volume", "fL", 80.0, 100.0, typical=(82, 98), load={"iron_deficiency": -0.9,
         "b12_deficiency": 1.0}, bounds=(50, 140)),
    _lab("Red cell distribution width", "%", 11.5, 14.5, load={"iron_deficiency": 0.8, "b12_deficiency": 0.6},
         bounds=(9, 30)),
    # ---- basic metabolic panel
    _lab("Sodium", "mmol/L", 135, 145, typical=(136, 144), dec=0, load={"hyponatremia": -1.2, "dehydration": 0.4,
         "hyperglycemia": -0.3}, bounds=(100, 180)),
    _lab("Potassium", "mmol/L", 3.5, 5.1, typical=(3.6, 5.0), load={"renal": 0.6, "acidosis": 0.3, "ketosis": 0.3},
         bounds=(1.5, 9.5)),
    _lab("Bicarbonate", "mmol/L", 22, 29, dec=0, load={"acidosis": -1.0, "ketosis": -0.9, "renal": -0.3,
         "hypercapnia": 0.5}, bounds=(3, 50)),
    _lab("Anion gap", "mmol/L", 8, 16, typical=(8, 15), dec=0, load={"acidosis": 0.6, "ketosis": 1.0,
         "hypoperfusion": 0.5}, idio=0.5, bounds=(2, 45)),
    _derived("Chloride", "mmol/L", 98, 107, ("Sodium", "Bicarbonate", "Anion gap"),
             lambda v: v["Sodium"] - v["Bicarbonate"] - v["Anion gap"], dec=0, bounds=(40, 150)),
    _lab("Blood urea nitrogen", "mg/dL", 7, 20, typical=(8, 20), log=True, dec=0, load={"renal": 1.0,
         "dehydration": 0.6, "bleeding": 0.5}),
    _lab("Creatinine", "mg/dL", 0.6, 1.2, typical=(0.65, 1.15), log=True, dec=2, load={"renal": 1.0,
         "dehydration": 0.3}, female=-0.6, idio=0.4),
    _lab("Glucose", "mg/dL", 70, 99, typical=(78, 125), log=True, dec=0, load={"hyperglycemia": 1.0}),
    _lab("Calcium", "mg/dL", 8.5, 10.5, typical=(8.6, 10.2), load={"liver_synthetic": -0.3}, bounds=(5, 16)),
    # ---- hepatic function panel
    _lab("Alanine aminotransferase", "U/L", 7, 56, typical=(10, 45), log=True, dec=0, load={"hepatocellular": 1.0}),
    _lab("Aspartate aminotransferase", "U/L", 10, 40, typical=(12, 38), log=True, dec=0,
         load={"hepatocellular": 0.9, "myocardial": 0.3}),
    _lab("Alkaline phosphatase", "U/L", 44, 147, typical=(45, 130), log=True, dec=0, load={"cholestasis": 1.0}),
    _lab("Total bilirubin", "mg/dL", 0.1, 1.2, typical=(0.25, 1.1), log=True, load={"cholestasis": 0.9,
         "liver_synthetic": 0.5}),
    _lab("Direct bilirubin", "mg/dL", 0.0, 0.3, typical=(0.05, 0.3), log=True, load={"cholestasis": 1.0,
         "liver_synthetic": 0.3}),
    _lab("Albumin", "g/dL", 3.5, 5.0, typical=(3.6, 4.9), load={"liver_synthetic": -0.8, "inflammation": -0.3},
         bounds=(0.8, 6.5)),
    # ---- coagulation panel
    _lab("Prothrombin time", "s", 11.0, 13.5, typical=(11.2, 13.4), log=True, load={"liver_synthetic": 1.0}),
    _derived("INR", "", 0.8, 1.2, ("Prothrombin time",), lambda v: (v["Prothrombin time"] / 12.3) ** 1.3, noise=0.02,
             bounds=(0.5, 15)),
    _lab("Partial thromboplastin time", "s", 25.0, 35.0, load={"liver_synthetic": 0.4}, bounds=(15, 200)),
    # ---- cardiac
    _lab("Troponin I", "ng/mL", None, 0.04, typical=(0.003, 0.03), log=True, dec=2, load={"myocardial": 1.0,
         "renal": 0.2}),
    _lab("Creatine kinase-MB", "ng/mL", 0.0, 5.0, typical=(0.6, 4.5), log=True, load={"myocardial": 0.9}),
    _lab("Creatine kinase", "U/L", 30, 200, typical=(40, 190), log=True, dec=0, load={"myocardial": 0.5}),
    _lab("B-type natriuretic peptide", "pg/mL", None, 100, typical=(12, 90), log=True, dec=0,
         load={"cardiac_stretch": 1.0, "renal": 0.3}),
    # ---- inflammation and perfusion
    _lab("C-reactive protein", "mg/L", None, 10.0, typical=(0.6, 8.0), log=True, load={"inflammation": 1.0}),
    _lab("Erythrocyte sedimentation rate", "mm/h", 0, 20, typical=(3, 20), log=True, dec=0,
         load={"inflammation": 0.7, "anemia": 0.3}),
    _lab("Procalcitonin", "ng/mL", None, 0.1, typical=(0.02, 0.08), log=True, dec=2, load={"inflammation": 0.6}),
    _lab("Lactate", "mmol/L", 0.5, 2.0, typical=(0.7, 1.8), log=True, load={"hypoperfusion": 1.0, "acidosis": 0.3}),
    # ---- pancreas
    _lab("Lipase", "U/L", 10, 60, typical=(12, 55), log=True, dec=0, load={"pancreatic": 1.0}),
    _lab("Amylase", "U/L", 30, 110, typical=(32, 100), log=True, dec=0, load={"pancreatic": 0.8}),
    # ---- arterial blood gas
    _lab("pCO2", "mmHg", 35, 45, dec=0, load={"hypercapnia": 1.0, "acidosis": -0.5, "ketosis": -0.6,
         "hypoxia": -0.2}, idio=0.5, bounds=(10, 130)),
    _lab("pO2", "mmHg", 80, 100, typical=(78, 102), dec=0, load={"hypoxia": -1.0}, bounds=(25, 500)),
    _derived("pH", "", 7.35, 7.45, ("Bicarbonate", "pCO2"),
             lambda v: 6.1 + math.log10(max(v["Bicarbonate"], 1.0) / (0.03 * max(v["pCO2"], 5.0))), dec=2,
             noise=0.001, bounds=(6.7, 7.8)),
    _derived("Oxygen saturation", "%", 95, 100, ("pO2",), _saturation, dec=0, noise=0.005, bounds=(40, 100)),
    # ---- thyroid
    _lab("Thyroid stimulating hormone", "mIU/L", 0.4, 4.0, typical=(0.5, 3.8), log=True, dec=2,
         load={"thyroid": -1.5}, idio=0.4),
    _lab("Free thyroxine", "ng/dL", 0.8, 1.8, typical=(0.85, 1.7), log=True, dec=2, load={"thyroid": 1.0}, idio=0.4),
    # ---- iron studies
    _lab("Iron", "ug/dL", 60, 170, typical=(60, 160), log=True, dec=0, load={"iron_deficiency": -1.0,
         "inflammation": -0.4}),
    _lab("Ferritin", "ng/mL", 30, 400, typical=(35, 300), log=True, dec=0, load={"iron_deficiency": -1.2,
         "inflammation": 0.6, "hepatocellular": 0.3}, female=-0.5),
    _lab("Total iron binding capacity", "ug/dL", 250, 450, dec=0, load={"iron_deficiency": 0.9,
         "liver_synthetic": -0.3, "inflammation": -0.3}, bounds=(80, 800)),
    # ---- other chemistry
    _lab("Vitamin B12", "pg/mL", 200, 900, typical=(250, 850), log=True, dec=0, load={"b12_deficiency": -1.3}),
    _lab("Folate", "ng/mL", 3.0, None, typical=(5.0, 20.0), log=True),
    _lab("Reticulocyte count", "%", 0.5, 2.5, typical=(0.6, 2.2), log=True, load={"iron_deficiency": -0.3,
         "b12_deficiency": -0.4, "bleeding": 0.6}),
    _lab("Magnesium", "mg/dL", 1.7, 2.2, typical=(1.7, 2.3), load={"renal": 0.3}, bounds=(0.5, 6)),
    _lab("Phosphate", "mg/dL", 2.5, 4.5, load={"renal": 0.7}, bounds=(0.5, 15)),
    _derived("Serum osmolality", "mOsm/kg", 275, 295, ("Sodium", "Glucose", "Blood urea nitrogen"),
             lambda v: 2 * v["Sodium"] + v["Glucose"] / 18 + v["Blood urea nitrogen"] / 2.8, dec=0, noise=0.006,
             bounds=(200, 450)),
    _lab("Urine sodium", "mmol/L", 20, 200, typical=(30, 180), log=True, dec=0, load={"dehydration": -1.0,
         "hyponatremia": 0.5, "renal": 0.4}),
    _lab("Urine osmolality", "mOsm/kg", 300, 900, typical=(250, 900), log=True, dec=0, load={"dehydration": 0.8,
         "hyponatremia": 0.6}),
    _lab("Beta-hydroxybutyrate", "mmol/L", None, 0.4, typical=(0.05, 0.3), log=True, load={"ketosis": 1.0}),
    _lab("Uric acid", "mg/dL", 3.5, 7.2, load={"renal": 0.4}, bounds=(0.5, 20)),
    _lab("Acetaminophen level", "ug/mL", None, 30, typical=(0.5, 2.0), log=True, idio=0.5),
    _lab("D-dimer", "ug/mL FEU", None, 0.5, typical=(0.12, 0.45), log=True, dec=2, load={"thrombosis": 1.0,
         "inflammation": 0.3}),
    _lab("Hemoglobin A1c", "%", 4.0, 5.6, typical=(4.5, 5.9), bounds=(3.5, 16)),
    _lab("Ammonia", "umol/L", 11, 35, typical=(12, 33), log=True, dec=0, load={"liver_synthetic": 0.8}),
    _lab("Lactate dehydrogenase", "U/L", 140, 280, typical=(140, 260), log=True, dec=0,
         load={"hepatocellular": 0.4, "inflammation": 0.3, "myocardial": 0.3}),
    # ---- lipid panel
    _lab("Total cholesterol", "mg/dL", None, 200, typical=(140, 240), dec=0, bounds=(60, 500)),
    _lab("Triglycerides", "mg/dL", None, 150, typical=(60, 190), log=True, dec=0, load={"hyperglycemia": 0.3}),
    _lab("HDL cholesterol", "mg/dL", 40, None, typical=(35, 75), dec=0, female=0.6, bounds=(10, 120)),
    _derived("LDL cholesterol", "mg/dL", None, 100, ("Total cholesterol", "HDL cholesterol", "Triglycerides"),
             lambda v: max(v["Total cholesterol"] - v["HDL cholesterol"] - v["Triglycerides"] / 5, 10.0), dec=0,
             typical=(60, 160), bounds=(10, 400)),
    # ---- urinalysis
    _lab("Urine specific gravity", "", 1.005, 1.030, typical=(1.008, 1.025), dec=3, load={"dehydration": 1.0,
         "hyperglycemia": 0.3}, bounds=(1.000, 1.045)),
    _lab("Urine pH", "", 4.5, 8.0, typical=(5.0, 7.5), load={"ketosis": -0.5}, bounds=(4.5, 9.0)),
    _ordinal("Urine leukocyte esterase", {"urinary_infection": 1.0}),
    _ordinal("Urine nitrite", {"urinary_infection": 0.8}, levels=("Negative", "Positive"), cuts=(2.2,)),
    _lab("Urine white blood cells", "/hpf", 0, 5, typical=(0.4, 4.0), log=True, dec=0, load={"urinary_infection": 1.0}),
    _lab("Urine red blood cells", "/hpf", 0, 2, typical=(0.3, 2.5), log=True, dec=0, load={"urinary_infection": 0.4,
         "renal": 0.2}),
    _ordinal("Urine protein", {"renal": 0.7}),
    _ordinal("Urine glucose", {"hyperglycemia": 1.0}, cuts=(2.0, 2.4, 2.8, 3.2)),
    _ordinal("Urine ketones", {"ketosis": 1.0}, cuts=(1.7, 2.2, 2.7, 3.2)),
    _ordinal("Urine bacteria", {"urinary_infection": 1.0}, levels=("None", "Few", "Moderate", "Many"),
             cuts=(1.4, 2.2, 3.0)),
    # ---- cerebrospinal fluid
    _lab("CSF white blood cells", "cells/uL", 0, 5, typical=(0.5, 4.0), log=True, dec=0,
         load={"csf_inflammation": 1.0}, idio=0.4),
    _lab("CSF protein", "mg/dL", 15, 45, typical=(18, 45), log=True, dec=0, load={"csf_inflammation": 0.8}),
    _lab("CSF glucose", "mg/dL", 40, 70, typical=(45, 75), dec=0, load={"csf_inflammation": -0.9,
         "hyperglycemia": 0.4}, bounds=(1, 400)),
)

# how far a disease's factor shifts move each value, in its own sd: a narrow healthy range (creatinine, glucose on
# a log scale) needs a large gain for the values disease produces (3 mg/dL in renal failure, 500 mg/dL in DKA)
_GAINS: dict[str, float] = {
    "White blood cell count": 1.1, "Neutrophils": 1.4, "Hemoglobin": 1.6, "Platelet count": 1.3,
    "Mean corpuscular volume": 1.4, "Red cell distribution width": 2.0, "Sodium": 1.7, "Potassium": 1.8,
    "Bicarbonate": 2.4, "Anion gap": 2.0, "Blood urea nitrogen": 1.6, "Creatinine": 2.2, "Glucose": 2.8,
    "Alanine aminotransferase": 1.6, "Aspartate aminotransferase": 1.6, "Alkaline phosphatase": 1.2,
    "Total bilirubin": 1.5, "Direct bilirubin": 1.5, "Albumin": 2.0, "Prothrombin time": 3.5,
    "Partial thromboplastin time": 1.5, "Troponin I": 2.0, "Creatine kinase-MB": 1.5, "Creatine kinase": 2.4,
    "B-type natriuretic peptide": 1.6, "C-reactive protein": 2.0, "Erythrocyte sedimentation rate": 1.3,
    "Lactate": 1.7, "Lipase": 1.9, "Amylase": 1.9, "pCO2": 2.0, "pO2": 1.7, "Thyroid stimulating hormone": 1.6,
    "Free thyroxine": 1.7, "Iron": 1.4, "Ferritin": 1.2, "Total iron binding capacity": 0.75,
    "Urine white blood cells": 2.2, "Urine red blood cells": 1.5, "CSF white blood cells": 2.5, "CSF protein": 2.1,
    "CSF glucose": 1.2, "Beta-hydroxybutyrate": 2.0, "D-dimer": 1.7, "Ammonia": 1.5, "Urine osmolality": 0.8,
    "Temperature": 2.3, "Systolic blood pressure": 1.1, "Diastolic blood pressure": 1.1, "Respiratory rate": 2.2,
}


def _with_gains(analytes: tuple[Analyte, ...]) -> tuple[Analyte, ...]:
    return tuple(dataclasses.replace(a, gain=_GAINS[a.name]) if a.name in _GAINS else a for a in analytes)


ANALYTES = _with_gains(ANALYTES)

VITALS: tuple[Analyte, ...] = (
    _lab("Temperature", "C", 36.1, 37.2, typical=(36.2, 37.3), load={"inflammation": 1.0, "thyroid": 0.2},
         idio=0.5, bounds=(33, 42)),
    _lab("Heart rate", "bpm", 60, 100, typical=(62, 96), dec=0, load={"inflammation": 0.6, "hypoperfusion": 0.8,
         "hypoxia": 0.4, "thyroid": 0.8, "bleeding": 0.5}, bounds=(30, 220)),
    _lab("Systolic blood pressure", "mmHg", 100, 140, typical=(108, 148), dec=0, load={"hypoperfusion": -1.2,
         "bleeding": -0.6}, bounds=(50, 240)),
    _lab("Diastolic blood pressure", "mmHg", 60, 90, typical=(62, 90), dec=0, load={"hypoperfusion": -1.0,
         "bleeding": -0.4}, bounds=(25, 140)),
    _lab("Respiratory rate", "/min", 12, 20, typical=(12, 19), dec=0, load={"hypoxia": 0.9, "acidosis": 0.5,
         "ketosis": 0.6, "hypercapnia": 0.3}, bounds=(6, 50)),
    _derived("SpO2", "%", 95, 100, ("pO2",), _saturation, dec=0, noise=0.006, bounds=(50, 100)),
)
VITALS = _with_gains(VITALS)

_LAB_SYNONYMS: dict[str, tuple[str, ...]] = {
    "White blood cell count": ("WBC", "white count", "leukocyte count", "white blood cells", "leukocytes",
                               "white cell count", "WBC count"),
    "Neutrophils": ("neutrophil percentage", "neutrophil %", "neutrophil count", "polys", "neuts"),
    "Hemoglobin": ("Hgb", "Hb", "haemoglobin"),
    "Hematocrit": ("Hct", "packed cell volume", "PCV", "haematocrit"),
    "Platelet count": ("platelets", "PLT", "platelet", "thrombocytes", "plt count"),
    "Mean corpuscular volume": ("MCV",),
    "Red cell distribution width": ("RDW", "RDW-CV"),
    "Sodium": ("Na", "Na+", "serum sodium"),
    "Potassium": ("K", "K+", "serum potassium"),
    "Chloride": ("Cl", "Cl-"),
    "Bicarbonate": ("HCO3", "bicarb", "total CO2", "CO2", "serum bicarbonate", "tCO2"),
    "Anion gap": ("AG",),
    "Blood urea nitrogen": ("BUN", "urea nitrogen", "urea", "serum urea"),
    "Creatinine": ("Cr", "creat", "serum creatinine"),
    "Glucose": ("blood glucose", "blood sugar", "BG", "glu", "random glucose", "fingerstick glucose"),
    "Calcium": ("Ca", "total calcium", "calcium, total", "serum calcium"),
    "Alanine aminotransferase": ("ALT", "SGPT", "alanine transaminase", "alanine aminotransferase (ALT)"),
    "Aspartate aminotransferase": ("AST", "SGOT", "aspartate transaminase", "asparate aminotransferase (AST)"),
    "Alkaline phosphatase": ("ALP", "alk phos", "alkphos"),
    "Total bilirubin": ("bilirubin", "T bili", "tbili", "bilirubin, total"),
    "Direct bilirubin": ("conjugated bilirubin", "D bili", "dbili", "bilirubin, direct"),
    "Albumin": ("alb",),
    "Prothrombin time": ("PT", "pro time", "protime"),
    "INR": ("international normalized ratio", "INR(PT)", "PT/INR"),
    "Partial thromboplastin time": ("PTT", "aPTT", "activated partial thromboplastin time"),
    "Troponin I": ("troponin", "trop", "TnI", "cTnI", "troponin T", "TnT", "cardiac troponin",
                   "high sensitivity troponin", "hs troponin", "hs-cTn", "trop I"),
    "Creatine kinase-MB": ("CK-MB", "CKMB", "creatine kinase, MB isoenzyme", "CK MB isoenzyme"),
    "Creatine kinase": ("CK", "CPK", "total CK", "creatine phosphokinase", "creatine kinase (CK)"),
    "B-type natriuretic peptide": ("BNP", "brain natriuretic peptide", "NT-proBNP", "NTproBNP", "pro-BNP",
                                   "natriuretic peptide"),
    "C-reactive protein": ("CRP", "hs-CRP", "high sensitivity CRP"),
    "Erythrocyte sedimentation rate": ("ESR", "sed rate", "sedimentation rate"),
    "Procalcitonin": ("PCT", "procal"),
    "Lactate": ("lactic acid", "blood lactate", "lactate, venous", "lactate, arterial"),
    "Lipase": (),
    "Amylase": (),
    "pCO2": ("PaCO2", "partial pressure of carbon dioxide", "arterial pCO2", "carbon dioxide partial pressure"),
    "pO2": ("PaO2", "partial pressure of oxygen", "arterial pO2", "oxygen partial pressure"),
    "pH": ("arterial pH", "blood pH"),
    "Oxygen saturation": ("SaO2", "arterial oxygen saturation", "O2 sat", "oxygen saturation, arterial"),
    "Thyroid stimulating hormone": ("TSH", "thyrotropin"),
    "Free thyroxine": ("free T4", "FT4", "T4 free", "thyroxine (T4), free", "free thyroxine (T4)"),
    "Iron": ("serum iron", "Fe", "iron level"),
    "Ferritin": (),
    "Total iron binding capacity": ("TIBC", "iron binding capacity"),
    "Vitamin B12": ("B12", "cobalamin", "cyanocobalamin", "vitamin B-12"),
    "Folate": ("folic acid", "serum folate"),
    "Reticulocyte count": ("retic", "reticulocytes", "retic count", "reticulocyte count, automated"),
    "Magnesium": ("Mg", "Mg2+"),
    "Phosphate": ("phosphorus", "phos", "PO4", "inorganic phosphate"),
    "Serum osmolality": ("osmolality", "serum osm", "plasma osmolality", "osmolality, measured", "measured osmolality"),
    "Urine sodium": ("urine Na", "UNa", "spot urine sodium", "sodium, urine", "urinary sodium"),
    "Urine osmolality": ("urine osm", "Uosm", "osmolality, urine", "urinary osmolality"),
    "Beta-hydroxybutyrate": ("BHB", "beta hydroxybutyrate", "serum ketones", "blood ketones", "ketones",
                             "beta-hydroxybutyric acid", "3-hydroxybutyrate", "beta hydroxybutyric acid"),
    "Uric acid": ("urate", "serum uric acid"),
    "Acetaminophen level": ("acetaminophen", "paracetamol level", "paracetamol", "APAP level", "tylenol level",
                            "acetaminophen concentration", "APAP"),
    "D-dimer": ("d dimer", "ddimer", "fibrin D-dimer"),
    "Hemoglobin A1c": ("HbA1c", "A1c", "glycated hemoglobin", "glycosylated hemoglobin", "% hemoglobin A1c",
                       "haemoglobin A1c"),
    "Ammonia": ("NH3", "serum ammonia", "blood ammonia"),
    "Lactate dehydrogenase": ("LDH", "LD", "lactate dehydrogenase (LD)"),
    "Total cholesterol": ("cholesterol", "TC", "cholesterol, total"),
    "Triglycerides": ("TG", "trigs", "triglyceride"),
    "HDL cholesterol": ("HDL", "cholesterol, HDL", "high density lipoprotein"),
    "LDL cholesterol": ("LDL", "cholesterol, LDL, calculated", "low density lipoprotein", "LDL calculated"),
    "Urine specific gravity": ("specific gravity", "SG", "USG"),
    "Urine pH": (),
    "Urine leukocyte esterase": ("leukocyte esterase", "LE", "urine leukocytes"),
    "Urine nitrite": ("nitrite", "nitrites", "urine nitrites"),
    "Urine white blood cells": ("urine WBC", "UWBC", "WBC, urine", "urine white cells"),
    "Urine red blood cells": ("urine RBC", "URBC", "RBC, urine", "urine red cells"),
    "Urine protein": ("protein, urine", "urine dipstick protein"),
    "Urine glucose": ("glucose, urine",),
    "Urine ketones": ("ketones, urine", "urine ketone"),
    "Urine bacteria": ("bacteria, urine",),
    "CSF white blood cells": ("CSF WBC", "CSF white cells", "WBC, CSF"),
    "CSF protein": ("protein, CSF", "total protein, CSF"),
    "CSF glucose": ("glucose, CSF",),
}

_PANELS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("Complete blood count", ("White blood cell count", "Neutrophils", "Hemoglobin", "Hematocrit", "Platelet count",
                              "Mean corpuscular volume", "Red cell distribution width"),
     ("CBC", "full blood count", "FBC", "hemogram", "CBC with differential", "complete blood count with differential",
      "blood count", "CBC w/ diff")),
    ("Basic metabolic panel", ("Sodium", "Potassium", "Chloride", "Bicarbonate", "Anion gap", "Blood urea nitrogen",
                               "Creatinine", "Glucose", "Calcium"),
     ("BMP", "chem 7", "chem7", "chem-7", "basic metabolic profile", "electrolytes", "lytes", "basic chemistry",
      "serum electrolytes", "renal function panel", "U&E", "urea and electrolytes", "chemistry panel")),
    ("Hepatic function panel", ("Alanine aminotransferase", "Aspartate aminotransferase", "Alkaline phosphatase",
                                "Total bilirubin", "Direct bilirubin", "Albumin"),
     ("LFT", "LFTs", "liver function tests", "liver function test", "liver panel", "hepatic panel",
      "liver function panel", "liver enzymes")),
    ("Coagulation panel", ("Prothrombin time", "INR", "Partial thromboplastin time"),
     ("coags", "coagulation studies", "coagulation profile", "coagulation tests", "PT/PTT/INR", "PT PTT INR",
      "clotting screen", "coagulation screen")),
    ("Arterial blood gas", ("pH", "pCO2", "pO2", "Oxygen saturation"),
     ("ABG", "ABGs", "blood gas", "arterial gas", "arterial blood gases", "blood gas analysis", "VBG",
      "venous blood gas")),
    ("Thyroid function tests", ("Thyroid stimulating hormone", "Free thyroxine"),
     ("TFTs", "TFT", "thyroid panel", "thyroid studies", "thyroid function", "thyroid function panel")),
    ("Iron studies", ("Iron", "Ferritin", "Total iron binding capacity"),
     ("iron panel", "iron profile", "iron indices", "iron studies panel")),
    ("Lipid panel", ("Total cholesterol", "Triglycerides", "HDL cholesterol", "LDL cholesterol"),
     ("lipid profile", "lipids", "cholesterol panel", "fasting lipid panel", "lipid screen")),
    ("Urinalysis", ("Urine specific gravity", "Urine pH", "Urine leukocyte esterase", "Urine nitrite",
                    "Urine white blood cells", "Urine red blood cells", "Urine protein", "Urine glucose",
                    "Urine ketones", "Urine bacteria"),
     ("UA", "urine analysis", "urine dipstick", "U/A", "urine microscopy", "urinalysis with microscopy",
      "urine test", "dipstick urinalysis")),
    ("Cerebrospinal fluid analysis", ("CSF white blood cells", "CSF protein", "CSF glucose"),
     ("CSF analysis", "lumbar puncture", "LP", "spinal tap", "CSF studies", "CSF cell count",
      "cerebrospinal fluid studies", "CSF")),
)

_MICRO: tuple[Exam, ...] = (
    Exam("Blood culture", ExamKind.MICROBIOLOGY,
         ("blood cultures", "BCx", "blood culture x2", "hemoculture", "blood culture, routine", "blood cx"),
         normal="No growth at 5 days.",
         positive="POSITIVE. {organism} isolated in {sets} of 2 sets. Gram stain: {gram}.",
         background=((0.02, "POSITIVE. Coagulase-negative staphylococci isolated in 1 of 2 sets, likely a contaminant. "
                            "Gram stain: Gram-positive cocci in clusters."),)),
    Exam("Urine culture", ExamKind.MICROBIOLOGY, ("UCx", "urine cx", "urine culture and sensitivity"),
         normal="No growth.", positive="> 100,000 CFU/mL {organism}.",
         background=((0.06, "Mixed flora (3 or more organisms) consistent with skin or genital contamination."),
                     (0.03, "> 100,000 CFU/mL Escherichia coli."))),
    Exam("Sputum culture", ExamKind.MICROBIOLOGY,
         ("sputum cx", "sputum gram stain and culture", "respiratory culture", "sputum gram stain"),
         normal="Gram stain: few PMNs, no organisms seen. Culture: normal oropharyngeal flora.",
         positive="Gram stain: many PMNs, {gram}. Culture: moderate growth of {organism}."),
    Exam("CSF culture", ExamKind.MICROBIOLOGY,
         ("CSF gram stain and culture", "cerebrospinal fluid culture", "CSF gram stain", "CSF cx"),
         normal="Gram stain: no organisms seen. Culture: no growth at 72 hours.",
         positive="Gram stain: {gram}. Culture: {organism} isolated."),
    Exam("Clostridioides difficile toxin", ExamKind.MICROBIOLOGY,
         ("C diff", "C. difficile PCR", "C diff toxin", "stool C difficile", "Clostridium difficile toxin",
          "C. difficile toxin", "C diff PCR", "CDI test", "C. diff"),
         normal="Negative for toxigenic Clostridioides difficile.",
         positive="POSITIVE for toxigenic Clostridioides difficile (toxin B gene detected).",
         background=((0.01, "POSITIVE for toxigenic Clostridioides difficile (toxin B gene detected)."),)),
    Exam("Influenza PCR", ExamKind.MICROBIOLOGY,
         ("flu swab", "influenza A/B PCR", "flu test", "rapid influenza test", "influenza antigen", "flu PCR",
          "influenza A/B by PCR", "influenza test"),
         normal="Influenza A: not detected. Influenza B: not detected.", positive="{organism}"),
    Exam("SARS-CoV-2 PCR", ExamKind.MICROBIOLOGY,
         ("COVID test", "COVID-19 PCR", "coronavirus PCR", "COVID swab", "SARS-CoV-2", "COVID PCR",
          "SARS CoV 2 RNA"),
         normal="SARS-CoV-2 RNA: not detected.", positive="SARS-CoV-2 RNA: DETECTED."),
    Exam("MRSA nasal swab", ExamKind.MICROBIOLOGY, ("MRSA screen", "MRSA PCR", "MRSA swab", "nasal MRSA screen"),
         normal="MRSA: not detected.", positive="MRSA: DETECTED.", background=((0.07, "MRSA: DETECTED."),)),
    Exam("Stool culture", ExamKind.MICROBIOLOGY, ("stool cx", "enteric pathogens", "stool pathogens"),
         normal="No Salmonella, Shigella, Campylobacter or Shiga toxin-producing E. coli isolated.",
         positive="{organism} isolated."),
    Exam("Wound culture", ExamKind.MICROBIOLOGY, ("wound cx", "skin culture", "tissue culture", "abscess culture"),
         normal="Gram stain: no organisms seen. Culture: no growth.",
         positive="Gram stain: {gram}. Culture: {organism}."),
    Exam("Streptococcus pneumoniae urinary antigen", ExamKind.MICROBIOLOGY,
         ("pneumococcal urinary antigen", "strep pneumo antigen", "urine pneumococcal antigen",
          "pneumococcal antigen", "S. pneumoniae antigen"),
         normal="Negative.", positive="POSITIVE."),
)

_IMAGING: tuple[Exam, ...] = (
    Exam("Chest X-ray", ExamKind.IMAGING,
         ("CXR", "chest radiograph", "chest film", "chest xray", "chest (PA and lat)", "chest (portable AP)",
          "portable chest x-ray", "chest x ray PA and lateral", "chest radiography", "x-ray chest"),
         normal="PA and lateral views of the chest. The lungs are clear without focal consolidation, effusion or "
                "pneumothorax. The cardiomediastinal silhouette is within normal limits.\nIMPRESSION: No acute "
                "cardiopulmonary process.",
         incidental=((0.12, "Mild degenerative changes of the thoracic spine."),
                     (0.05, "Calcification of the aortic knob."))),
    Exam("CT chest", ExamKind.IMAGING, ("chest CT", "CT thorax", "CT of the chest", "computed tomography of the chest",
                                        "CT chest with contrast", "CT chest without contrast"),
         normal="No consolidation, mass or pleural effusion. No mediastinal or hilar lymphadenopathy. Airways patent."
                "\nIMPRESSION: No acute intrathoracic abnormality.",
         incidental=((0.10, "Few scattered 2-3 mm pulmonary nodules, likely benign."),
                     (0.08, "Mild coronary artery calcification."))),
    Exam("CT pulmonary angiography", ExamKind.IMAGING,
         ("CTPA", "CT angiogram chest", "PE protocol CT", "CT PE study", "CTA chest", "CT pulmonary angiogram",
          "CTA chest PE protocol"),
         normal="Adequate opacification of the pulmonary arteries. No filling defect to the subsegmental level. "
                "No right heart strain. Lungs clear.\nIMPRESSION: No pulmonary embolism.",
         incidental=((0.08, "Mild dependent atelectasis."),)),
    Exam("CT angiography of the aorta", ExamKind.IMAGING,
         ("CTA aorta", "CT aortogram", "aortic CTA", "dissection protocol CT", "CT angiogram aorta",
          "CTA chest abdomen pelvis"),
         normal="The thoracic and abdominal aorta are normal in caliber without intimal flap, intramural hematoma or "
                "aneurysm.\nIMPRESSION: No acute aortic syndrome.",
         incidental=((0.15, "Mild atherosclerotic calcification of the abdominal aorta."),)),
    Exam("CT abdomen and pelvis", ExamKind.IMAGING,
         ("CT abdomen", "CT A/P", "abdominal CT", "CT abd/pelvis", "CT of the abdomen and pelvis", "CT abd pelvis",
          "CT abdomen pelvis with contrast", "CTAP", "abdomen CT", "CT abd & pelvis with contrast",
          "CT abd & pelvis w/o contrast"),
         normal="The liver, gallbladder, pancreas, spleen, adrenal glands and kidneys are unremarkable. The appendix is "
                "normal. No bowel obstruction, free fluid or free air.\nIMPRESSION: No acute abdominal or pelvic "
                "process.",
         incidental=((0.10, "Simple cyst in the left kidney."), (0.08, "Scattered colonic diverticula without "
                     "inflammation."), (0.05, "Small hiatal hernia."))),
    Exam("Abdominal X-ray", ExamKind.IMAGING,
         ("KUB", "abdominal radiograph", "AXR", "plain film abdomen", "abdominal series", "x-ray abdomen",
          "abdominal plain film", "obstruction series"),
         normal="Nonobstructive bowel gas pattern. No free intraperitoneal air. No abnormal calcifications."
                "\nIMPRESSION: Unremarkable abdominal radiograph."),
    Exam("Right upper quadrant ultrasound", ExamKind.IMAGING,
         ("RUQ ultrasound", "RUQ US", "gallbladder ultrasound", "hepatobiliary ultrasound", "abdominal ultrasound",
          "liver ultrasound", "ultrasound abdomen", "US abdomen", "RUQ sonogram"),
         normal="The liver is normal in echotexture without focal lesion. The gallbladder is normal without stones or "
                "wall thickening. The common bile duct measures 4 mm.\nIMPRESSION: Normal right upper quadrant "
                "ultrasound.",
         incidental=((0.06, "Incidental small hepatic hemangioma."),)),
    Exam("Renal ultrasound", ExamKind.IMAGING,
         ("kidney ultrasound", "renal US", "ultrasound kidneys", "renal sonogram", "renal and bladder ultrasound",
          "US kidneys"),
         normal="Both kidneys are normal in size and echogenicity without hydronephrosis, stones or masses. The bladder "
                "is unremarkable.\nIMPRESSION: Normal renal ultrasound.",
         incidental=((0.10, "Simple cortical cyst in the right kidney."),)),
    Exam("CT head", ExamKind.IMAGING,
         ("head CT", "CT brain", "noncontrast head CT", "CT head without contrast", "NCHCT", "CT of the head",
          "non-contrast CT head"),
         normal="No intracranial hemorrhage, mass effect or midline shift. Gray-white differentiation is preserved. "
                "Ventricles normal in size.\nIMPRESSION: No acute intracranial abnormality.",
         incidental=((0.25, "Mild periventricular white matter hypodensities, likely chronic small vessel disease."),)),
    Exam("MRI brain", ExamKind.IMAGING, ("brain MRI", "MRI head", "MR brain", "diffusion-weighted MRI",
                                         "MRI brain with and without contrast", "DWI MRI"),
         normal="No restricted diffusion. No intracranial hemorrhage or mass. Normal flow voids.\nIMPRESSION: No acute "
                "intracranial abnormality.",
         incidental=((0.3, "Scattered T2 hyperintensities consistent with chronic small vessel ischemic disease."),)),
    Exam("Echocardiogram", ExamKind.IMAGING,
         ("echo", "transthoracic echocardiogram", "TTE", "cardiac ultrasound", "echocardiography", "2D echo"),
         normal="Normal left ventricular size and systolic function, ejection fraction 60%. No regional wall motion "
                "abnormality. Normal valves. No pericardial effusion.\nIMPRESSION: Normal study.",
         incidental=((0.15, "Mild mitral regurgitation."), (0.10, "Grade I diastolic dysfunction."))),
    Exam("Electrocardiogram", ExamKind.IMAGING, ("ECG", "EKG", "12-lead ECG", "12 lead EKG", "electrocardiography",
                                                 "12-lead electrocardiogram"),
         normal="{rhythm} at {hr} bpm. Normal axis. PR, QRS and QT intervals within normal limits. No acute ST-T "
                "wave changes.",
         incidental=((0.08, "Left ventricular hypertrophy by voltage criteria."),)),
    Exam("Lower extremity venous duplex", ExamKind.IMAGING,
         ("leg doppler", "venous doppler", "DVT ultrasound", "lower extremity doppler", "venous duplex ultrasound",
          "lower extremity ultrasound", "duplex ultrasound legs", "compression ultrasound"),
         normal="The common femoral, femoral and popliteal veins are fully compressible with normal flow and "
                "augmentation bilaterally.\nIMPRESSION: No deep venous thrombosis."),
    Exam("Electroencephalogram", ExamKind.IMAGING, ("EEG", "electroencephalography", "routine EEG"),
         normal="Posterior dominant rhythm of 10 Hz. No focal slowing or epileptiform discharges.\nIMPRESSION: Normal "
                "awake and drowsy EEG."),
    Exam("Upper endoscopy", ExamKind.IMAGING, ("EGD", "esophagogastroduodenoscopy", "upper GI endoscopy",
                                               "upper endoscopy (EGD)", "gastroscopy"),
         normal="Normal esophagus, stomach and duodenum. No source of bleeding identified.\nIMPRESSION: Normal upper "
                "endoscopy.",
         incidental=((0.15, "Mild erythema of the gastric antrum."),)),
)


def _exams() -> tuple[Exam, ...]:
    member = {a: panel for panel, comps, _ in _PANELS for a in comps}
    labs = tuple(Exam(a.name, ExamKind.LAB, _LAB_SYNONYMS.get(a.name, ()), (a.name,), panel=member.get(a.name))
                 for a in ANALYTES)
    panels = tuple(Exam(name, ExamKind.PANEL, syn, comps) for name, comps, syn in _PANELS)
    return labs + panels + _MICRO + _IMAGING


EXAMS: tuple[Exam, ...] = _exams()

ORGANISM_GRAM: dict[str, str] = {
    "Streptococcus pneumoniae": "Gram-positive cocci in pairs",
    "Staphylococcus aureus": "Gram-positive cocci in clusters",
    "Methicillin-resistant Staphylococcus aureus": "Gram-positive cocci in clusters",
    "Coagulase-negative staphylococci": "Gram-positive cocci in clusters",
    "Streptococcus pyogenes": "Gram-positive cocci in chains",
    "Enterococcus faecalis": "Gram-positive cocci in pairs and chains",
    "Haemophilus influenzae": "Gram-negative coccobacilli",
    "Moraxella catarrhalis": "Gram-negative diplococci",
    "Neisseria meningitidis": "Gram-negative diplococci",
    "Listeria monocytogenes": "Gram-positive rods",
    "Escherichia coli": "Gram-negative rods",
    "Klebsiella pneumoniae": "Gram-negative rods",
    "Proteus mirabilis": "Gram-negative rods",
    "Pseudomonas aeruginosa": "Gram-negative rods",
    "Campylobacter jejuni": "Gram-negative curved rods",
}
