"""Map a MedCalc-Bench row's "Relevant Entities" onto this package's formulas, so a release row's ground truth
can be recomputed (the importer's sanity check, and our check that the formulas are MedCalc-Bench's).

`compute_row(calculator_name, entities)` returns the value, or raises `Unsupported` for calculators or entity
values this adapter does not read (e.g. MME, APACHE II, 'not testable' GCS components).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from components.tasks.calculators import formulas as fx
from components.tasks.calculators import units as u


class Unsupported(ValueError):
    pass


def parse_entities(text: str | dict[str, Any]) -> dict[str, Any]:
    """The release stores entities as a Python literal (single quotes, True/False)."""
    return dict(text) if isinstance(text, dict) else ast.literal_eval(text)


def _val(e: dict[str, Any], key: str) -> tuple[float, str]:
    if key not in e:
        raise Unsupported(f"entity {key!r} missing")
    v = e[key]
    return (float(v[0]), str(v[1])) if isinstance(v, list) else (float(v), "")


def _age(e: dict[str, Any]) -> float:
    v, unit = _val(e, "age")
    return v / 12.0 if unit == "months" else v


def _sex(e: dict[str, Any]) -> str:
    return str(e.get("sex", "Male")).lower()


def _weight(e: dict[str, Any]) -> float:
    v, unit = _val(e, "weight")
    return {"kg": v, "lbs": u.lb_to_kg(v) if unit == "lbs" else v, "g": v / 1000.0}[unit]


def _height(e: dict[str, Any]) -> float:
    raw = e["height"]
    if len(raw) == 4:  # [ft, 'ft', in, 'in']
        return u.inches_to_cm(raw[0] * 12 + raw[2])
    v, unit = float(raw[0]), raw[1]
    return {"cm": v, "m": v * 100.0, "in": u.inches_to_cm(v), "ft": v * 30.48}[unit]


_MG_DL: dict[str, Callable[[float], float]] = {
    "creatinine": u.creatinine_umol_l_to_mg_dl,
    "Glucose": u.glucose_mmol_l_to_mg_dl,
    "Blood Urea Nitrogen (BUN)": u.bun_mmol_l_to_mg_dl,
    "Calcium": u.calcium_mmol_l_to_mg_dl,
    "Bilirubin": u.bilirubin_umol_l_to_mg_dl,
    "Total cholesterol": u.cholesterol_mmol_l_to_mg_dl,
    "high-density lipoprotein cholesterol": u.cholesterol_mmol_l_to_mg_dl,
    "Triglycerides": u.triglycerides_mmol_l_to_mg_dl,
}


def _conc(e: dict[str, Any], key: str) -> float:
    """A concentration in mg/dL (or mEq/L for electrolytes, g/dL for albumin)."""
    v, unit = _val(e, key)
    if unit in ("mg/dL", "mEq/L", "g/dL", "µIU/mL", "U/L", ""):
        return v
    if unit == "mmol/L" and key in ("Sodium", "Chloride", "Bicarbonate", "Potassium", "Urine sodium"):
        return v
    if unit == "g/L" and key == "Albumin":
        return v / 10.0
    if key in _MG_DL and unit in ("mmol/L", "µmol/L"):
        return _MG_DL[key](v)
    raise Unsupported(f"{key} in {unit!r}")


def _hr(e: dict[str, Any]) -> float:
    return _val(e, "Heart Rate or Pulse")[0]


def _temp_c(e: dict[str, Any]) -> float:
    v, unit = _val(e, "Temperature")
    return u.fahrenheit_to_celsius(v) if "fahr" in unit else v


def _platelets_10e9(e: dict[str, Any]) -> float:
    v, unit = _val(e, "Platelet count")
    return v / 1e9 if unit == "L" else v / 1000.0  # per L or per µL


def _wbc_per_ul(e: dict[str, Any]) -> float:
    v, unit = _val(e, "White blood cell count")
    return v / 1e6 if unit == "L" else v  # per L, or per µL (= per mm³)


def _b(e: dict[str, Any], *keys: str) -> bool:
    return any(bool(e.get(k, False)) is True and e.get(k) not in ("Not mentinoed",) for k in keys)


def _electrolytes(e: dict[str, Any]) -> dict[str, float]:
    return {"sodium": _conc(e, "Sodium"), "chloride": _conc(e, "Chloride"), "bicarbonate": _conc(e, "Bicarbonate")}


def _date(text: str) -> str:
    m, d, y = text.split("/")
    return f"{y}-{m}-{d}"


ADAPTERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Creatinine Clearance (Cockcroft-Gault Equation)": lambda e: fx.cockcroft_gault(
        _age(e), _weight(e), _height(e), _conc(e, "creatinine"), _sex(e)
    ),
    "CKD-EPI Equations for Glomerular Filtration Rate": lambda e: fx.ckd_epi_2021(
        _age(e), _conc(e, "creatinine"), _sex(e)
    ),
    "MDRD GFR Equation": lambda e: fx.mdrd_gfr(_age(e), _conc(e, "creatinine"), _sex(e), e.get("Race") == "Black"),
    "Mean Arterial Pressure (MAP)": lambda e: fx.mean_arterial_pressure(
        _val(e, "Systolic Blood Pressure")[0], _val(e, "Diastolic Blood Pressure")[0]
    ),
    "Body Mass Index (BMI)": lambda e: fx.body_mass_index(_weight(e), _height(e)),
    "Body Surface Area Calculator": lambda e: fx.body_surface_area(_weight(e), _height(e)),
    "Ideal Body Weight": lambda e: fx.ideal_body_weight(_height(e), _sex(e)),
    "Adjusted Body Weight": lambda e: fx.adjusted_body_weight(_weight(e), _height(e), _sex(e)),
    "Target weight": lambda e: fx.target_weight(_val(e, "Body Mass Index (BMI)")[0], _height(e)),
    "Maintenance Fluids Calculations": lambda e: fx.maintenance_fluids(_weight(e)),
    "Calcium Correction for Hypoalbuminemia": lambda e: fx.corrected_calcium(_conc(e, "Calcium"), _conc(e, "Albumin")),
    "Sodium Correction for Hyperglycemia": lambda e: fx.sodium_correction_hyperglycemia(
        _conc(e, "Sodium"), _conc(e, "Glucose")
    ),
    "Serum Osmolality": lambda e: fx.serum_osmolality(
        _conc(e, "Sodium"), _conc(e, "Blood Urea Nitrogen (BUN)"), _conc(e, "Glucose")
    ),
    "HOMA-IR (Homeostatic Model Assessment for Insulin Resistance)": lambda e: fx.homa_ir(
        _conc(e, "Insulin"), _conc(e, "Glucose")
    ),
    "Free Water Deficit": lambda e: fx.free_water_deficit(_age(e), _sex(e), _weight(e), _conc(e, "Sodium")),
    "Fractional Excretion of Sodium (FENa)": lambda e: fx.fractional_excretion_sodium(
        _conc(e, "Sodium"), _conc(e, "creatinine"), _conc(e, "Urine sodium"), _conc(e, "Urine creatinine")
    ),
    "LDL Calculated": lambda e: fx.ldl_friedewald(
        _conc(e, "Total cholesterol"), _conc(e, "high-density lipoprotein cholesterol"), _conc(e, "Triglycerides")
    ),
    "Fibrosis-4 (FIB-4) Index for Liver Fibrosis": lambda e: fx.fib4(
        _age(e), _conc(e, "Aspartate aminotransferase"), _conc(e, "Alanine aminotransferase"), _platelets_10e9(e)
    ),
    "Anion Gap": lambda e: fx.anion_gap(**_electrolytes(e)),
    "Delta Gap": lambda e: fx.delta_gap(**_electrolytes(e)),
    "Delta Ratio": lambda e: fx.delta_ratio(**_electrolytes(e)),
    "Albumin Corrected Anion Gap": lambda e: fx.albumin_corrected_anion_gap(
        **_electrolytes(e), albumin_g_dl=_conc(e, "Albumin")
    ),
    "Albumin Corrected Delta Gap": lambda e: fx.albumin_corrected_delta_gap(
        **_electrolytes(e), albumin_g_dl=_conc(e, "Albumin")
    ),
    "Albumin Corrected Delta Ratio": lambda e: fx.albumin_corrected_delta_ratio(
        **_electrolytes(e), albumin_g_dl=_conc(e, "Albumin")
    ),
    "QTc Bazett Calculator": lambda e: fx.qtc_bazett(_val(e, "QT interval")[0], _hr(e)),
    "QTc Fridericia Calculator": lambda e: fx.qtc_fridericia(_val(e, "QT interval")[0], _hr(e)),
    "QTc Framingham Calculator": lambda e: fx.qtc_framingham(_val(e, "QT interval")[0], _hr(e)),
    "QTc Hodges Calculator": lambda e: fx.qtc_hodges(_val(e, "QT interval")[0], _hr(e)),
    "QTc Rautaharju Calculator": lambda e: fx.qtc_rautaharju(_val(e, "QT interval")[0], _hr(e)),
    "CHA2DS2-VASc Score for Atrial Fibrillation Stroke Risk": lambda e: fx.cha2ds2_vasc(
        _age(e),
        _sex(e),
        _b(e, "Congestive Heart Faliure"),
        _b(e, "Hypertension history"),
        _b(e, "Stroke", "Transient Ischemic Attacks History", "Thromboembolism history"),
        _b(e, "Vascular disease history"),
        _b(e, "Diabetes history"),
    ),
    "HAS-BLED Score for Major Bleeding Risk": lambda e: fx.has_bled(
        _age(e),
        _b(e, "Hypertension history"),
        _b(e, "Renal disease criteria for the HAS-BLED rule"),
        _b(e, "Liver disease criteria for the HAS-BLED rule"),
        _b(e, "Stroke"),
        _b(e, "Prior major bleeding or predisposition to bleeding"),
        _b(e, "Labile international normalized ratio"),
        _b(e, "Medication usage predisposing to bleeding"),
        int(e.get("Number of Alcoholic Drinks Per Week", 0)),
    ),
    "CURB-65 Score for Pneumonia Severity": lambda e: fx.curb65(
        _age(e),
        _b(e, "Confusion"),
        _conc(e, "Blood Urea Nitrogen (BUN)"),
        _val(e, "respiratory rate")[0],
        _val(e, "Systolic Blood Pressure")[0],
        _val(e, "Diastolic Blood Pressure")[0],
    ),
    "Centor Score (Modified/McIsaac) for Strep Pharyngitis": lambda e: fx.centor_mcisaac(
        _age(e),
        _temp_c(e),
        _b(e, "Exudate or swelling on tonsils"),
        _b(e, "Tender/swollen anterior cervical lymph nodes"),
        bool(e.get("Cough Absent", True)),
    ),
    "FeverPAIN Score for Strep Pharyngitis": lambda e: fx.feverpain(
        _b(e, "Fever in past 24 hours"),
        _b(e, "Purulent tonsils"),
        _b(e, "Symptom onset ≤3 days"),
        _b(e, "Severe tonsil inflammation"),
        _b(e, "Absence of cough or coryza"),
    ),
    "PERC Rule for Pulmonary Embolism": lambda e: fx.perc_rule(
        _age(e),
        _hr(e),
        _val(e, "O₂ saturation percentage")[0],
        _b(e, "Unilateral Leg Swelling"),
        _b(e, "Hemoptysis"),
        _b(e, "Recent surgery or trauma"),
        _b(e, "Previously Documented Pulmonary Embolism", "Previously documented Deep Vein Thrombosis"),
        _b(e, "Hormone use"),
    ),
    "Wells' Criteria for Pulmonary Embolism": lambda e: fx.wells_pe(
        _b(e, "Clinical signs and symptoms of Deep Vein Thrombosis"),
        _b(e, "Pulmonary Embolism is #1 diagnosis OR equally likely"),
        _hr(e),
        _b(e, "Immobilization for at least 3 days", "Surgery in the previous 4 weeks"),
        _b(e, "Previously Documented Pulmonary Embolism", "Previously documented Deep Vein Thrombosis"),
        _b(e, "Hemoptysis"),
        _b(e, "Malignancy with treatment within 6 months or palliative"),
    ),
    "Wells' Criteria for DVT": lambda e: fx.wells_dvt(
        _b(e, "Active cancer"),
        _b(e, "Bedridden recently >3 days or major surgery within 12 weeks", "Major surgery within 12 weeks"),
        _b(e, "Calf swelling >3 centimeters compared to the other leg"),
        _b(e, "Collateral (nonvaricose) superficial veins present"),
        _b(e, "Entire Leg Swollen"),
        _b(e, "Localized tenderness along the deep venous system"),
        _b(e, "Pitting edema, confined to symptomatic leg"),
        _b(e, "Paralysis, paresis, or recent plaster immobilization of the lower extremity"),
        _b(e, "Previously documented Deep Vein Thrombosis"),
        _b(e, "Alternative diagnosis to Deep Vein Thrombosis as likely or more likely"),
    ),
    "Revised Cardiac Risk Index for Pre-Operative Risk": lambda e: fx.revised_cardiac_risk_index(
        _b(e, "Elevated-risk surgery"),
        _b(e, "History of ischemic heart disease"),
        _b(e, "Congestive Heart Failure criteria for the Cardiac Risk Index rule"),
        _b(e, "Cerebrovascular disease history"),  # the release's ground truth reads this key, not "History of ..."
        _b(e, "Pre-operative treatment with insulin"),
        _conc_or_zero(e, "Pre-operative creatinine"),
    ),
    "Child-Pugh Score for Cirrhosis Mortality": lambda e: fx.child_pugh(
        _conc(e, "Bilirubin"),
        _conc(e, "Albumin"),
        float(e["international normalized ratio"]),
        {"absent": 1, "slight": 2, "moderate": 3}[e.get("Ascites", "absent")],
        {"No Encephalopathy": 1, "Grade 0": 1, "Grade 1-2": 2, "Grade 3-4": 3}[
            e.get("Encephalopathy", "No Encephalopathy")
        ],
    ),
    "MELD Na (UNOS/OPTN)": lambda e: fx.meld_na(
        _conc(e, "creatinine"),
        _conc(e, "Bilirubin"),
        float(e["international normalized ratio"]),
        _conc(e, "Sodium"),
        _b(
            e,
            "Dialysis at least twice in the past week",
            "Continuous veno-venous hemodialysis for ≥24 hours in the past week",
        ),
    ),
    "Glasgow-Blatchford Bleeding Score (GBS)": lambda e: fx.glasgow_blatchford(
        _conc(e, "Blood Urea Nitrogen (BUN)"),
        _conc(e, "Hemoglobin"),
        _sex(e),
        _val(e, "Systolic Blood Pressure")[0],
        _hr(e),
        _b(e, "Melena present"),
        _b(e, "Recent syncope"),
        _b(e, "Hepatic disease history"),
        _b(e, "Cardiac failure present"),
    ),
    "SIRS Criteria": lambda e: fx.sirs_criteria(
        _temp_c(e),
        _hr(e),
        _val(e, "respiratory rate")[0] if "respiratory rate" in e else 0.0,
        _val(e, "PaCO₂")[0] if "PaCO₂" in e else 40.0,
        _wbc_per_ul(e),
    ),
    "Glasgow Coma Score (GCS)": lambda e: fx.glasgow_coma_scale(*_gcs(e)),
    "Estimated Due Date": lambda e: fx.estimated_due_date(_date(e["Last menstrual date"]), int(e["cycle length"])),
    "Estimated of Conception": lambda e: fx.estimated_conception_date(_date(e["Last menstrual date"])),
    "Estimated Gestational Age": lambda e: fx.estimated_gestational_age(
        _date(e["Last menstrual date"]), _date(e["Current Date"])
    ),
}


def _conc_or_zero(e: dict[str, Any], key: str) -> float:
    return _conc(e, key) if key in e else 0.0


_GCS = {
    "Best eye response": {
        "eyes open spontaneously": 4,
        "eye opening to verbal command": 3,
        "eye opening to pain": 2,
        "no eye opening": 1,
    },
    "Best verbal response": {
        "oriented": 5,
        "confused": 4,
        "inappropriate words": 3,
        "incomprehensible sounds": 2,
        "no verbal response": 1,
    },
    "Best motor response": {
        "obeys commands": 6,
        "localizes pain": 5,
        "withdrawal from pain": 4,
        "flexion to pain": 3,
        "extension to pain": 2,
        "no motor response": 1,
    },
}


def _gcs(e: dict[str, Any]) -> tuple[int, int, int]:
    out = []
    for key, table in _GCS.items():
        value = e.get(key)
        if value not in table:
            raise Unsupported(f"GCS {key} {value!r}")
        out.append(table[value])
    return out[0], out[1], out[2]


def compute_row(calculator_name: str, entities: str | dict[str, Any]) -> Any:
    if calculator_name not in ADAPTERS:
        raise Unsupported(f"no adapter for {calculator_name!r}")
    try:
        return ADAPTERS[calculator_name](parse_entities(entities))
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        raise Unsupported(f"{calculator_name}: {exc!r}") from None
