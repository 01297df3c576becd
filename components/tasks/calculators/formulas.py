"""The calculators, one pure function each, as MedCalc-Bench defines them (its `calculator_implementations`).

Inputs are in the units named by the parameter (mg/dL, kg, cm, °C, bpm, msec); `units.py` converts into
them. A function may call another function of this module and `math`/`datetime` only: a task's reference
code is the source of the function and of what it calls, so there is one source of truth.
Booleans are findings present (True) or absent/not mentioned (False), as in MedCalc-Bench.
"""

from __future__ import annotations

import datetime
import math

# ---------------------------------------------------------------- anthropometry


def body_mass_index(weight_kg: float, height_cm: float) -> float:
    height_m = height_cm / 100.0
    return weight_kg / (height_m * height_m)


def body_surface_area(weight_kg: float, height_cm: float) -> float:
    """Mosteller."""
    return math.sqrt(weight_kg * height_cm / 3600.0)


def ideal_body_weight(height_cm: float, sex: str) -> float:
    """Devine: 50 kg (men) or 45.5 kg (women) + 2.3 kg per inch over 60 inches."""
    height_in = height_cm / 2.54
    base = 50.0 if sex == "male" else 45.5
    return base + 2.3 * (height_in - 60.0)


def adjusted_body_weight(weight_kg: float, height_cm: float, sex: str) -> float:
    ibw = ideal_body_weight(height_cm, sex)
    return ibw + 0.4 * (weight_kg - ibw)


def target_weight(target_bmi: float, height_cm: float) -> float:
    height_m = height_cm / 100.0
    return target_bmi * height_m * height_m


def maintenance_fluids(weight_kg: float) -> float:
    """Holliday-Segar 4-2-1 rule, mL/hr."""
    if weight_kg < 10:
        return 4.0 * weight_kg
    if weight_kg <= 20:
        return 40.0 + 2.0 * (weight_kg - 10.0)
    return 60.0 + (weight_kg - 20.0)


# ---------------------------------------------------------------- renal


def cockcroft_gault(age: float, weight_kg: float, height_cm: float, creatinine_mg_dl: float, sex: str) -> float:
    """CrCl in mL/min with MedCalc-Bench's weight rule: BMI < 18.5 actual weight; 18.5-24.9 the lesser of
    ideal and actual weight; above 24.9 the adjusted body weight."""
    bmi = body_mass_index(weight_kg, height_cm)
    if bmi < 18.5:
        weight = weight_kg
    elif bmi <= 24.9:
        weight = min(ideal_body_weight(height_cm, sex), weight_kg)
    else:
        weight = adjusted_body_weight(weight_kg, height_cm, sex)
    sex_coefficient = 1.0 if sex == "male" else 0.85
    return (140.0 - age) * weight * sex_coefficient / (72.0 * creatinine_mg_dl)


def ckd_epi_2021(age: float, creatinine_mg_dl: float, sex: str) -> float:
    """Race-free 2021 CKD-EPI creatinine equation, mL/min/1.73 m²."""
    if sex == "female":
        kappa, alpha, sex_coefficient = 0.7, -0.241, 1.012
    else:
        kappa, alpha, sex_coefficient = 0.9, -0.302, 1.0
    ratio = creatinine_mg_dl / kappa
    return 142.0 * min(ratio, 1.0) ** alpha * max(ratio, 1.0) ** -1.2 * 0.9938**age * sex_coefficient


def mdrd_gfr(age: float, creatinine_mg_dl: float, sex: str, black: bool) -> float:
    """IDMS-traceable 4-variable MDRD, mL/min/1.73 m²."""
    gfr = 175.0 * creatinine_mg_dl**-1.154 * age**-0.203
    if sex == "female":
        gfr *= 0.742
    if black:
        gfr *= 1.212
    return gfr


def fractional_excretion_sodium(
    sodium_meq_l: float, creatinine_mg_dl: float, urine_sodium_meq_l: float, urine_creatinine_mg_dl: float
) -> float:
    """FENa in percent."""
    return creatinine_mg_dl * urine_sodium_meq_l / (sodium_meq_l * urine_creatinine_mg_dl) * 100.0


def free_water_deficit(age: float, sex: str, weight_kg: float, sodium_meq_l: float) -> float:
    """Litres; total body water fraction by age and sex, target sodium 140."""
    if age < 18:
        tbw = 0.6
    elif age < 65:
        tbw = 0.6 if sex == "male" else 0.5
    else:
        tbw = 0.5 if sex == "male" else 0.45
    return tbw * weight_kg * (sodium_meq_l / 140.0 - 1.0)


# ---------------------------------------------------------------- electrolytes and chemistry


def anion_gap(sodium: float, chloride: float, bicarbonate: float) -> float:
    return sodium - (chloride + bicarbonate)


def delta_gap(sodium: float, chloride: float, bicarbonate: float) -> float:
    return anion_gap(sodium, chloride, bicarbonate) - 12.0


def delta_ratio(sodium: float, chloride: float, bicarbonate: float) -> float:
    return delta_gap(sodium, chloride, bicarbonate) / (24.0 - bicarbonate)


def albumin_corrected_anion_gap(sodium: float, chloride: float, bicarbonate: float, albumin_g_dl: float) -> float:
    return anion_gap(sodium, chloride, bicarbonate) + 2.5 * (4.0 - albumin_g_dl)


def albumin_corrected_delta_gap(sodium: float, chloride: float, bicarbonate: float, albumin_g_dl: float) -> float:
    return albumin_corrected_anion_gap(sodium, chloride, bicarbonate, albumin_g_dl) - 12.0


def albumin_corrected_delta_ratio(sodium: float, chloride: float, bicarbonate: float, albumin_g_dl: float) -> float:
    return albumin_corrected_delta_gap(sodium, chloride, bicarbonate, albumin_g_dl) / (24.0 - bicarbonate)


def serum_osmolality(sodium_meq_l: float, bun_mg_dl: float, glucose_mg_dl: float) -> float:
    return 2.0 * sodium_meq_l + bun_mg_dl / 2.8 + glucose_mg_dl / 18.0


def sodium_correction_hyperglycemia(sodium_meq_l: float, glucose_mg_dl: float) -> float:
    """Katz correction, 1.6 mEq/L per 100 mg/dL of glucose above 100."""
    return sodium_meq_l + 0.024 * (glucose_mg_dl - 100.0)


def corrected_calcium(calcium_mg_dl: float, albumin_g_dl: float) -> float:
    """Normal albumin taken as 4 g/dL."""
    return 0.8 * (4.0 - albumin_g_dl) + calcium_mg_dl


def ldl_friedewald(total_cholesterol_mg_dl: float, hdl_mg_dl: float, triglycerides_mg_dl: float) -> float:
    return total_cholesterol_mg_dl - hdl_mg_dl - triglycerides_mg_dl / 5.0


def homa_ir(insulin_uiu_ml: float, glucose_mg_dl: float) -> float:
    return insulin_uiu_ml * glucose_mg_dl / 405.0


def fib4(age: float, ast_u_l: float, alt_u_l: float, platelets_10e9_l: float) -> float:
    return age * ast_u_l / (platelets_10e9_l * math.sqrt(alt_u_l))


# ---------------------------------------------------------------- cardiology


def mean_arterial_pressure(systolic: float, diastolic: float) -> float:
    return 2.0 * diastolic / 3.0 + systolic / 3.0


def qtc_bazett(qt_msec: float, heart_rate: float) -> float:
    rr_sec = 60.0 / heart_rate
    return qt_msec / math.sqrt(rr_sec)


def qtc_fridericia(qt_msec: float, heart_rate: float) -> float:
    rr_sec = 60.0 / heart_rate
    return qt_msec / rr_sec ** (1.0 / 3.0)


def qtc_framingham(qt_msec: float, heart_rate: float) -> float:
    rr_sec = 60.0 / heart_rate
    return qt_msec + 154.0 * (1.0 - rr_sec)


def qtc_hodges(qt_msec: float, heart_rate: float) -> float:
    rr_sec = 60.0 / heart_rate
    return qt_msec + 1.75 * (60.0 / rr_sec - 60.0)


def qtc_rautaharju(qt_msec: float, heart_rate: float) -> float:
    return qt_msec * (120.0 + heart_rate) / 180.0


def cha2ds2_vasc(
    age: float,
    sex: str,
    chf: bool,
    hypertension: bool,
    stroke_tia_thromboembolism: bool,
    vascular_disease: bool,
    diabetes: bool,
) -> int:
    score = 2 if age >= 75 else 1 if age >= 65 else 0
    score += 1 if sex == "female" else 0
    score += int(chf) + int(hypertension) + int(vascular_disease) + int(diabetes)
    score += 2 if stroke_tia_thromboembolism else 0
    return score


def has_bled(
    age: float,
    uncontrolled_hypertension: bool,
    renal_disease: bool,
    liver_disease: bool,
    stroke: bool,
    prior_bleeding: bool,
    labile_inr: bool,
    bleeding_medication: bool,
    alcohol_drinks_per_week: int,
) -> int:
    score = int(age > 65) + int(alcohol_drinks_per_week >= 8)
    score += int(uncontrolled_hypertension) + int(renal_disease) + int(liver_disease) + int(stroke)
    score += int(prior_bleeding) + int(labile_inr) + int(bleeding_medication)
    return score


def heart_score(
    history: int,
    ecg: int,
    age: float,
    risk_factor_count: int,
    atherosclerotic_disease: bool,
    troponin_ratio_to_uln: float,
) -> int:
    """history and ecg are already graded 0-2; troponin is given as a multiple of the upper reference limit."""
    age_points = 2 if age >= 65 else 1 if age >= 45 else 0
    if risk_factor_count >= 3 or atherosclerotic_disease:
        risk_points = 2
    elif risk_factor_count >= 1:
        risk_points = 1
    else:
        risk_points = 0
    if troponin_ratio_to_uln <= 1.0:
        troponin_points = 0
    elif troponin_ratio_to_uln <= 3.0:
        troponin_points = 1
    else:
        troponin_points = 2
    return history + ecg + age_points + risk_points + troponin_points


def revised_cardiac_risk_index(
    elevated_risk_surgery: bool,
    ischemic_heart_disease: bool,
    congestive_heart_failure: bool,
    cerebrovascular_disease: bool,
    insulin_treatment: bool,
    creatinine_mg_dl: float,
) -> int:
    score = int(elevated_risk_surgery) + int(ischemic_heart_disease) + int(congestive_heart_failure)
    score += int(cerebrovascular_disease) + int(insulin_treatment) + int(creatinine_mg_dl > 2.0)
    return score


# ---------------------------------------------------------------- thrombosis


def wells_pe(
    clinical_dvt_signs: bool,
    pe_most_likely: bool,
    heart_rate: float,
    immobilization_or_recent_surgery: bool,
    previous_pe_or_dvt: bool,
    hemoptysis: bool,
    malignancy: bool,
) -> float:
    score = 3.0 * clinical_dvt_signs + 3.0 * pe_most_likely
    score += 1.5 if heart_rate > 100 else 0.0
    score += 1.5 * immobilization_or_recent_surgery + 1.5 * previous_pe_or_dvt
    score += 1.0 * hemoptysis + 1.0 * malignancy
    return score


def wells_dvt(
    active_cancer: bool,
    bedridden_or_major_surgery: bool,
    calf_swelling: bool,
    collateral_veins: bool,
    entire_leg_swollen: bool,
    localized_tenderness: bool,
    pitting_edema: bool,
    paralysis_or_cast: bool,
    previous_dvt: bool,
    alternative_diagnosis_likely: bool,
) -> int:
    score = int(active_cancer) + int(bedridden_or_major_surgery) + int(calf_swelling) + int(collateral_veins)
    score += int(entire_leg_swollen) + int(localized_tenderness) + int(pitting_edema) + int(paralysis_or_cast)
    score += int(previous_dvt)
    score -= 2 if alternative_diagnosis_likely else 0
    return score


def perc_rule(
    age: float,
    heart_rate: float,
    oxygen_saturation: float,
    unilateral_leg_swelling: bool,
    hemoptysis: bool,
    recent_surgery_or_trauma: bool,
    prior_pe_or_dvt: bool,
    hormone_use: bool,
) -> int:
    count = int(age >= 50) + int(heart_rate >= 100) + int(oxygen_saturation < 95)
    count += int(unilateral_leg_swelling) + int(hemoptysis) + int(recent_surgery_or_trauma)
    count += int(prior_pe_or_dvt) + int(hormone_use)
    return count


# ---------------------------------------------------------------- infection, critical care


def curb65(
    age: float, confusion: bool, bun_mg_dl: float, respiratory_rate: float, systolic: float, diastolic: float
) -> int:
    score = int(confusion) + int(bun_mg_dl > 19) + int(respiratory_rate >= 30)
    score += int(systolic < 90 or diastolic <= 60) + int(age >= 65)
    return score


def centor_mcisaac(
    age: float, temperature_c: float, tonsillar_exudate: bool, tender_nodes: bool, cough_absent: bool
) -> int:
    score = 1 if 3 <= age <= 14 else -1 if age >= 45 else 0
    score += int(temperature_c > 38.0) + int(tonsillar_exudate) + int(tender_nodes) + int(cough_absent)
    return score


def feverpain(
    fever_past_24h: bool,
    purulent_tonsils: bool,
    attend_within_3_days: bool,
    severe_tonsil_inflammation: bool,
    no_cough_or_coryza: bool,
) -> int:
    return (
        int(fever_past_24h)
        + int(purulent_tonsils)
        + int(attend_within_3_days)
        + int(severe_tonsil_inflammation)
        + int(no_cough_or_coryza)
    )


def sirs_criteria(
    temperature_c: float, heart_rate: float, respiratory_rate: float, paco2_mmhg: float, wbc_per_ul: float
) -> int:
    count = int(temperature_c > 38.0 or temperature_c < 36.0) + int(heart_rate > 90)
    count += int(respiratory_rate > 20 or paco2_mmhg < 32.0)
    count += int(wbc_per_ul > 12000 or wbc_per_ul < 4000)
    return count


def glasgow_coma_scale(eye: int, verbal: int, motor: int) -> int:
    """Each component already graded (eye 1-4, verbal 1-5, motor 1-6)."""
    if not (1 <= eye <= 4 and 1 <= verbal <= 5 and 1 <= motor <= 6):
        raise ValueError(f"GCS components out of range: E{eye} V{verbal} M{motor}")
    return eye + verbal + motor


# ---------------------------------------------------------------- hepatology, GI bleeding


def child_pugh(bilirubin_mg_dl: float, albumin_g_dl: float, inr: float, ascites: int, encephalopathy: int) -> int:
    """ascites: 1 absent, 2 slight, 3 moderate; encephalopathy: 1 none, 2 grade 1-2, 3 grade 3-4."""
    score = 1 if bilirubin_mg_dl < 2 else 2 if bilirubin_mg_dl <= 3 else 3
    score += 1 if albumin_g_dl > 3.5 else 2 if albumin_g_dl >= 2.8 else 3
    score += 1 if inr < 1.7 else 2 if inr <= 2.3 else 3
    return score + ascites + encephalopathy


def meld_na(
    creatinine_mg_dl: float, bilirubin_mg_dl: float, inr: float, sodium_meq_l: float, dialysis_recent: bool
) -> int:
    """UNOS/OPTN MELD(i) rounded to a tenth, x10, then the sodium term when MELD > 11; capped at 40."""
    creatinine = 4.0 if dialysis_recent else min(max(creatinine_mg_dl, 1.0), 4.0)
    bilirubin = max(bilirubin_mg_dl, 1.0)
    inr = max(inr, 1.0)
    sodium = min(max(sodium_meq_l, 125.0), 137.0)
    meld_i = 0.957 * math.log(creatinine) + 0.378 * math.log(bilirubin) + 1.120 * math.log(inr) + 0.643
    meld = round(round(meld_i, 1) * 10)
    if meld > 11:
        meld = round(meld + 1.32 * (137 - sodium) - 0.033 * meld * (137 - sodium))
    return min(meld, 40)


def glasgow_blatchford(
    bun_mg_dl: float,
    hemoglobin_g_dl: float,
    sex: str,
    systolic: float,
    heart_rate: float,
    melena: bool,
    syncope: bool,
    hepatic_disease: bool,
    cardiac_failure: bool,
) -> int:
    if bun_mg_dl < 18.2:
        score = 0
    elif bun_mg_dl < 22.4:
        score = 2
    elif bun_mg_dl < 28:
        score = 3
    elif bun_mg_dl <= 70:
        score = 4
    else:
        score = 6
    if sex == "male":
        score += 0 if hemoglobin_g_dl >= 13 else 1 if hemoglobin_g_dl >= 12 else 3 if hemoglobin_g_dl >= 10 else 6
    else:
        score += 0 if hemoglobin_g_dl >= 12 else 1 if hemoglobin_g_dl >= 10 else 6
    score += 0 if systolic >= 110 else 1 if systolic >= 100 else 2 if systolic >= 90 else 3
    score += int(heart_rate >= 100) + int(melena)
    score += 2 * int(syncope) + 2 * int(hepatic_disease) + 2 * int(cardiac_failure)
    return score


# ---------------------------------------------------------------- obstetrics: ISO dates in, MM/DD/YYYY out


def estimated_due_date(last_menstrual_period: str, cycle_length_days: int) -> str:
    """Naegele's rule: LMP + 280 days, shifted by the cycle length's difference from 28 days."""
    lmp = datetime.date.fromisoformat(last_menstrual_period)
    due = lmp + datetime.timedelta(days=280 + (cycle_length_days - 28))
    return due.strftime("%m/%d/%Y")


def estimated_conception_date(last_menstrual_period: str) -> str:
    """MedCalc-Bench: two weeks after the LMP, whatever the cycle length."""
    lmp = datetime.date.fromisoformat(last_menstrual_period)
    return (lmp + datetime.timedelta(days=14)).strftime("%m/%d/%Y")


def estimated_gestational_age(last_menstrual_period: str, current_date: str) -> str:
    lmp = datetime.date.fromisoformat(last_menstrual_period)
    today = datetime.date.fromisoformat(current_date)
    days = abs((today - lmp).days)
    return f"({days // 7} weeks, {days % 7} days)"
