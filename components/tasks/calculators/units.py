"""Unit conversions into the units the formulas take (mg/dL, kg, cm, °C, 10^9/L, cells/µL).

Each converter is a pure one-liner whose source is copied into a task's reference code, so that the
conversion the note demands is visible in the program that reproduces the answer. Molar masses follow
MedCalc-Bench's converter (creatinine 113.12, glucose 180.16, urea nitrogen 28.02, calcium 40.08,
bilirubin 584.66 g/mol).
"""

from __future__ import annotations


def lb_to_kg(lb: float) -> float:
    return lb * 0.453592


def inches_to_cm(inches: float) -> float:
    return inches * 2.54


def m_to_cm(m: float) -> float:
    return m * 100.0


def fahrenheit_to_celsius(f: float) -> float:
    return (f - 32.0) * 5.0 / 9.0


def creatinine_umol_l_to_mg_dl(umol_l: float) -> float:
    return umol_l * 113.12 / 10000.0


def creatinine_mmol_l_to_mg_dl(mmol_l: float) -> float:
    return mmol_l * 113.12 / 10.0


def glucose_mmol_l_to_mg_dl(mmol_l: float) -> float:
    return mmol_l * 180.16 / 10.0


def bun_mmol_l_to_mg_dl(mmol_l: float) -> float:
    return mmol_l * 28.02 / 10.0


def calcium_mmol_l_to_mg_dl(mmol_l: float) -> float:
    return mmol_l * 40.08 / 10.0


def bilirubin_umol_l_to_mg_dl(umol_l: float) -> float:
    return umol_l * 584.66 / 10000.0


def albumin_g_l_to_g_dl(g_l: float) -> float:
    return g_l / 10.0


def hemoglobin_g_l_to_g_dl(g_l: float) -> float:
    return g_l / 10.0


def per_ul_to_10e9_per_l(per_ul: float) -> float:
    return per_ul / 1000.0


def per_10e9_l_to_per_ul(per_10e9_l: float) -> float:
    return per_10e9_l * 1000.0


def cholesterol_mmol_l_to_mg_dl(mmol_l: float) -> float:
    return mmol_l * 386.65 / 10.0


def triglycerides_mmol_l_to_mg_dl(mmol_l: float) -> float:
    return mmol_l * 885.7 / 10.0


def insulin_pmol_l_to_uiu_ml(pmol_l: float) -> float:
    return pmol_l / 6.0


def kpa_to_mmhg(kpa: float) -> float:
    return kpa * 7.50062
