"""The calculators MedGym generates: for each, its formula, its MedCalc-Bench name and question, and how to
sample a patient for it (the ranges straddle each scoring threshold so every point value occurs)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from components.tasks.calculators import formulas as fx
from components.tasks.calculators.notes import CaseBuilder, Fact, near, random_date, render_date
from components.tasks.calculators.vocabulary import F

CURRENT = " Use the values from the current presentation; values from earlier encounters are for reference only."


@dataclass(frozen=True)
class Calculator:
    slug: str  # the task category is f"calc_{slug}"
    name: str  # MedCalc-Bench's "Calculator Name"
    medcalc_id: int  # MedCalc-Bench's "Calculator ID"
    question: str
    formula: Callable[..., Any]
    build: Callable[[CaseBuilder], None]
    kind: str  # numeric | integer | string
    complaints: tuple[str, ...] = ()
    # numeric answers: the decimal places the question asks for (the answer is rounded to them, and the
    # checker's window follows from them; see `generators.calculators.answer_spec`)
    decimals: int = 3
    # scores: the values a task's answer is drawn from uniformly, so that no score is common enough
    # for a constant answer to earn much (patients are redrawn until the score hits the drawn value)
    values: tuple[float, ...] = ()

    @property
    def category(self) -> str:
        return f"calc_{self.slug}"

    @property
    def precision(self) -> str:
        """The sentence asking for the answer's precision; MedCalc-Bench's questions do not say."""
        if self.kind != "numeric":
            return ""
        if self.decimals == 0:
            return " Round your answer to the nearest whole number."
        return f" Round your answer to {self.decimals} decimal place{'s' if self.decimals > 1 else ''}."


# ------------------------------------------------------------------ builders: anthropometry


def _weight_height(
    b: CaseBuilder, bmi_range: tuple[float, float] = (16.0, 40.0), weight_arg: str | None = "weight_kg"
) -> None:
    """Height first, then a weight that gives a BMI across under-, normal and overweight."""
    h = b.quantity("height_cm", "height", 150, 195)
    lo, hi = bmi_range[0] * (h / 100) ** 2, bmi_range[1] * (h / 100) ** 2
    # Cockcroft-Gault picks its weight by BMI class; keep clear of the 18.5 and 24.9/25 borders
    b.quantity(weight_arg, "weight", lo, hi, reject=lambda w: near(18.5, 24.95, rel=0.012)(w / (h / 100) ** 2))


def build_cockcroft_gault(b: CaseBuilder) -> None:
    b.demographics((20, 90))
    _weight_height(b)
    b.quantity("creatinine_mg_dl", "creatinine", 0.5, 4.0, log=True)
    b.distractors()


def build_ckd_epi(b: CaseBuilder) -> None:
    b.demographics((18, 90))
    b.quantity("creatinine_mg_dl", "creatinine", 0.4, 5.0, log=True)
    b.distractors()


def build_mdrd(b: CaseBuilder) -> None:
    b.demographics((18, 90))
    b.quantity("creatinine_mg_dl", "creatinine", 0.5, 5.0, log=True)
    black = b.rng.random() < 0.3
    race = "Black" if black else b.rng.choice(("White", "Asian", "Hispanic"))
    b.literal("black", black, Fact("history", f"The patient self-identifies as {race}"), entity="race")
    b.distractors()


def build_bmi(b: CaseBuilder) -> None:
    b.demographics((18, 85), arg_age=None, arg_sex=None)
    _weight_height(b, (15.0, 45.0))
    b.distractors()


def build_bsa(b: CaseBuilder) -> None:
    build_bmi(b)


def build_ibw(b: CaseBuilder) -> None:
    b.demographics((18, 85), arg_age=None)
    _weight_height(b, (18.0, 38.0), weight_arg=None)
    b.distractors()


def build_abw(b: CaseBuilder) -> None:
    b.demographics((18, 85), arg_age=None)
    _weight_height(b, (22.0, 45.0))
    b.distractors()


def build_target_weight(b: CaseBuilder) -> None:
    b.demographics((18, 80), arg_age=None, arg_sex=None)
    _weight_height(b, (26.0, 40.0), weight_arg=None)
    b.quantity("target_bmi", "target_bmi", 20.0, 26.0)
    b.distractors()


def build_maintenance_fluids(b: CaseBuilder) -> None:
    b.demographics((1, 16), arg_age=None, arg_sex=None)
    typical = 2.0 * b.case.age + 8.0  # a rough weight-for-age, so toddlers do not weigh 60 kg
    b.quantity("weight_kg", "weight", 0.75 * typical, 1.3 * typical)
    b.distractors()


# ------------------------------------------------------------------ builders: chemistry


def _electrolytes(b: CaseBuilder, albumin: bool) -> None:
    """Sodium, bicarbonate and an anion gap drawn together so chloride comes out physiological."""
    rng = b.rng
    for _ in range(100):
        na = rng.randint(125, 150)
        # keep bicarbonate away from 24 so the delta ratios stay finite
        hco3 = rng.choice((rng.uniform(5, 21.5), rng.uniform(26.5, 34)))
        cl = na - hco3 - rng.uniform(3, 32)
        if 85 <= cl <= 120:
            break
    b.quantity("sodium", "sodium", 0, 0, value=na)
    b.quantity("chloride", "chloride", 0, 0, value=cl)
    b.quantity("bicarbonate", "bicarbonate", 0, 0, value=hco3)
    if albumin:
        b.quantity("albumin_g_dl", "albumin", 1.5, 5.0)


def _electrolyte_builder(albumin: bool) -> Callable[[CaseBuilder], None]:
    def build(b: CaseBuilder) -> None:
        b.demographics((18, 90), arg_age=None, arg_sex=None)
        _electrolytes(b, albumin)
        b.distractors()

    return build


def build_serum_osm(b: CaseBuilder) -> None:
    b.demographics((18, 90), arg_age=None, arg_sex=None)
    b.quantity("sodium_meq_l", "sodium", 120, 160)
    b.quantity("bun_mg_dl", "bun", 5, 90)
    b.quantity("glucose_mg_dl", "glucose", 60, 900)
    b.distractors()


def build_sodium_correction(b: CaseBuilder) -> None:
    b.demographics((18, 90), arg_age=None, arg_sex=None)
    b.quantity("sodium_meq_l", "sodium", 120, 145)
    b.quantity("glucose_mg_dl", "glucose", 150, 1000)
    b.distractors()


def build_calcium(b: CaseBuilder) -> None:
    b.demographics((18, 90), arg_age=None, arg_sex=None)
    b.quantity("calcium_mg_dl", "calcium", 6.5, 11.5)
    b.quantity("albumin_g_dl", "albumin", 1.5, 4.8)
    b.distractors()


def build_ldl(b: CaseBuilder) -> None:
    b.demographics((25, 85), arg_age=None, arg_sex=None)
    b.quantity("total_cholesterol_mg_dl", "total_cholesterol", 150, 320)
    b.quantity("hdl_mg_dl", "hdl", 25, 85)
    b.quantity("triglycerides_mg_dl", "triglycerides", 50, 390)
    b.distractors()


def build_homa(b: CaseBuilder) -> None:
    b.demographics((18, 80), arg_age=None, arg_sex=None)
    b.quantity("insulin_uiu_ml", "insulin", 2.0, 45.0)
    b.quantity("glucose_mg_dl", "glucose", 70, 250)
    b.distractors()


def build_fena(b: CaseBuilder) -> None:
    b.demographics((18, 90), arg_age=None, arg_sex=None)
    b.quantity("sodium_meq_l", "sodium", 125, 150)
    b.quantity("creatinine_mg_dl", "creatinine", 0.6, 6.0, log=True)
    b.quantity("urine_sodium_meq_l", "urine_sodium", 5, 120)
    b.quantity("urine_creatinine_mg_dl", "urine_creatinine", 20, 250)
    b.distractors()


def build_free_water(b: CaseBuilder) -> None:
    b.demographics((8, 90))
    b.quantity("weight_kg", "weight", 25, 110)
    b.quantity("sodium_meq_l", "sodium", 142, 170)
    b.distractors()


def build_fib4(b: CaseBuilder) -> None:
    b.demographics((20, 85), arg_sex=None)
    b.quantity("ast_u_l", "ast", 12, 400, log=True)
    b.quantity("alt_u_l", "alt", 8, 400, log=True)
    b.quantity("platelets_10e9_l", "platelets", 40, 420)
    b.distractors()


# ------------------------------------------------------------------ builders: cardiology


def build_map(b: CaseBuilder) -> None:
    b.demographics((18, 90), arg_age=None, arg_sex=None)
    b.blood_pressure("systolic", "diastolic", (80, 200), (40, 120))
    b.quantity(None, "heart_rate", 50, 120)
    b.distractors()


def _qtc_builder(b: CaseBuilder) -> None:
    b.demographics((18, 90), arg_age=None, arg_sex=None)
    hr = b.quantity("heart_rate", "heart_rate", 45, 150)
    # QT shortens as the rate rises; draw a true QTc and derive a plausible measured QT from it
    qt = b.rng.uniform(370, 500) * (60.0 / hr) ** 0.5 * b.rng.uniform(0.95, 1.05)
    b.quantity("qt_msec", "qt", 0, 0, value=qt)
    b.distractors(exclude=("heart_rate",))


CHF = F(
    "chf",
    ("a history of congestive heart failure", "known heart failure with reduced ejection fraction"),
    ("no history of heart failure",),
)
HTN = F(
    "hypertension",
    ("a history of hypertension treated with amlodipine", "long-standing hypertension"),
    ("no history of hypertension",),
)
DM = F(
    "diabetes", ("type 2 diabetes mellitus on metformin", "a history of diabetes mellitus"), ("no history of diabetes",)
)
STROKE_TIA = F(
    "stroke_tia_thromboembolism",
    ("a prior ischemic stroke", "a transient ischemic attack two years ago", "a previous systemic arterial embolism"),
    ("no prior stroke or TIA",),
)
VASCULAR = F(
    "vascular_disease",
    (
        "a prior myocardial infarction",
        "peripheral artery disease with claudication",
        "complex aortic plaque on imaging",
    ),
    ("no known vascular disease",),
)


def build_cha2ds2_vasc(b: CaseBuilder) -> None:
    b.demographics((40, 92))
    b.case.facts.append(Fact("history", "Atrial fibrillation was noted on telemetry"))
    for arg, f in (
        ("chf", CHF),
        ("hypertension", HTN),
        ("stroke_tia_thromboembolism", STROKE_TIA),
        ("vascular_disease", VASCULAR),
        ("diabetes", DM),
    ):
        b.finding(arg, f, 0.4)
    b.distractors()


def build_has_bled(b: CaseBuilder) -> None:
    b.demographics((45, 92), arg_sex=None)
    while b.case.age == 65:  # "elderly" reads as > 65 (MedCalc-Bench) or >= 65 elsewhere
        b.demographics((45, 92), arg_sex=None)
    items = (
        (
            "uncontrolled_hypertension",
            F(
                "uncontrolled_hypertension",
                ("poorly controlled hypertension with systolic readings above 160 mmHg",),
                ("no hypertension",),
            ),
        ),
        (
            "renal_disease",
            F(
                "renal_disease",
                ("end-stage renal disease on hemodialysis", "a kidney transplant"),
                ("no renal disease",),
            ),
        ),
        ("liver_disease", F("liver_disease", ("cirrhosis",), ("no liver disease",))),
        ("stroke", F("stroke", ("a prior stroke",), ("no history of stroke",))),
        ("prior_bleeding", F("prior_bleeding", ("a prior major gastrointestinal bleed",), ("no previous bleeding",))),
        (
            "labile_inr",
            F("labile_inr", ("labile INRs with time in therapeutic range below 60%",), ("stable INRs on warfarin",)),
        ),
        (
            "bleeding_medication",
            F("bleeding_medication", ("daily aspirin use", "regular ibuprofen use"), ("no antiplatelet or NSAID use",)),
        ),
    )
    for arg, f in items:
        b.finding(arg, f, 0.35)
    drinks = b.rng.choice((0, 0, 2, 4, 6, 8, 10, 12, 15))
    b.literal(
        "alcohol_drinks_per_week",
        drinks,
        Fact(
            "history",
            f"The patient drinks {drinks} alcoholic drinks per week"
            if drinks
            else "The patient does not drink alcohol",
        ),
        entity="alcohol_drinks_per_week",
        worded=drinks == 0,
    )
    # HAS-BLED's renal and liver items are partly defined by creatinine, bilirubin and transaminases
    b.distractors(exclude=("creatinine", "bilirubin", "ast", "alt", "alkaline_phosphatase"))


def build_heart(b: CaseBuilder) -> None:
    b.demographics((30, 88), arg_sex=None)
    b.graded(
        "history",
        "history",
        [
            (0, ("The chest pain history is slightly suspicious for ACS (nonspecific, positional pain)",)),
            (1, ("The chest pain history is moderately suspicious for ACS",)),
            (2, ("The chest pain history is highly suspicious for ACS (pressure radiating to the arm on exertion)",)),
        ],
        section="history",
    )
    b.graded(
        "ecg",
        "ecg",
        [
            (0, ("a normal tracing",)),
            (1, ("nonspecific repolarization disturbance", "left bundle branch block")),
            (2, ("significant ST depression",)),
        ],
        section="ecg",
    )
    factors = [
        ("hypertension", "hypertension"),
        ("hypercholesterolemia", "hypercholesterolemia"),
        ("diabetes", "diabetes mellitus"),
        ("obesity", "obesity (BMI above 30)"),
        ("smoking", "current smoking"),
        ("family_history", "a brother with a myocardial infarction at age 50"),
    ]
    present = [name for key, name in factors if b.rng.random() < 0.3]
    count = len(present)
    b.literal(
        "risk_factor_count",
        count,
        Fact(
            "history",
            "Cardiac risk factors: " + ", ".join(present) if present else "The patient has no cardiac risk factors",
        ),
        entity="risk_factor_count",
        worded=True,
    )
    b.finding(
        "atherosclerotic_disease",
        F(
            "atherosclerotic_disease",
            ("prior coronary stenting", "known peripheral arterial disease"),
            ("no known atherosclerotic disease",),
        ),
        0.2,
    )
    uln = b.rng.choice((0.04, 0.014, 0.03))
    ratio = b.rng.choice((b.rng.uniform(0.2, 1.0), b.rng.uniform(1.05, 3.0), b.rng.uniform(3.05, 12.0)))
    trop = round(uln * ratio, 3)
    while min(abs(trop / uln - 1.0), abs(trop / uln - 3.0)) < 0.03:  # keep clear of the cut-offs
        trop = round(trop + 0.002, 3)
    b.literal(
        "troponin_ratio_to_uln",
        trop / uln,
        Fact("labs", f"initial troponin I {trop:.3f} ng/mL (upper reference limit {uln:.3f} ng/mL)"),
        entity="troponin",
        shown=f"{trop:.3f} ng/mL",
    )
    b.case.exprs["troponin_ratio_to_uln"] = f"{trop!r} / {uln!r}"
    b.distractors(exclude=("glucose", "hba1c"))  # a high glucose would read as a diabetes risk factor


def build_rcri(b: CaseBuilder) -> None:
    b.demographics((40, 90), arg_age=None, arg_sex=None)
    items = (
        (
            "elevated_risk_surgery",
            F(
                "elevated_risk_surgery",
                (
                    "The patient is scheduled for an open abdominal aortic aneurysm repair",
                    "The planned procedure is an intraperitoneal colectomy",
                ),
                ("The planned procedure is a knee arthroscopy",),
                may_omit=False,
            ),
        ),
        (
            "ischemic_heart_disease",
            F(
                "ischemic_heart_disease",
                ("a history of myocardial infarction", "stable angina"),
                ("no ischemic heart disease",),
            ),
        ),
        (
            "congestive_heart_failure",
            F("congestive_heart_failure", ("heart failure with prior pulmonary edema",), ("no heart failure",)),
        ),
        (
            "cerebrovascular_disease",
            F("cerebrovascular_disease", ("a prior stroke", "a previous TIA"), ("no cerebrovascular disease",)),
        ),
        (
            "insulin_treatment",
            F("insulin_treatment", ("diabetes treated with insulin glargine",), ("no insulin therapy",)),
        ),
    )
    for arg, f in items:
        b.finding(arg, f, 0.35)
    b.quantity("creatinine_mg_dl", "creatinine", 0.6, 3.5)
    b.distractors()


# ------------------------------------------------------------------ builders: thrombosis


def build_wells_pe(b: CaseBuilder) -> None:
    b.demographics((20, 90), arg_age=None, arg_sex=None)
    b.finding(
        "clinical_dvt_signs",
        F(
            "clinical_dvt_signs",
            ("The left calf is swollen and tender along the deep veins",),
            ("There are no clinical signs of DVT",),
            section="exam",
        ),
        0.3,
    )
    b.finding(
        "pe_most_likely",
        F(
            "pe_most_likely",
            ("Pulmonary embolism is considered the most likely diagnosis",),
            ("An alternative diagnosis is considered more likely than PE",),
            may_omit=False,
        ),
        0.4,
    )
    b.quantity("heart_rate", "heart_rate", 60, 135)
    b.finding(
        "immobilization_or_recent_surgery",
        F(
            "immobilization_or_recent_surgery",
            ("a hip replacement 2 weeks ago", "bed rest for the past 5 days"),
            ("no recent surgery or immobilization",),
        ),
        0.3,
    )
    b.finding(
        "previous_pe_or_dvt",
        F(
            "previous_pe_or_dvt",
            ("a previous DVT", "a previous pulmonary embolism"),
            ("no prior venous thromboembolism",),
        ),
        0.25,
    )
    b.finding("hemoptysis", F("hemoptysis", ("hemoptysis",), ("no hemoptysis",)), 0.2)
    b.finding("malignancy", F("malignancy", ("lung cancer currently on chemotherapy",), ("no active malignancy",)), 0.2)
    b.distractors(exclude=("heart_rate",))


def build_wells_dvt(b: CaseBuilder) -> None:
    b.demographics((20, 90), arg_age=None, arg_sex=None)
    ex = "exam"
    items = (
        (
            "active_cancer",
            F("active_cancer", ("active colon cancer treated within the last 6 months",), ("no active cancer",)),
            0.25,
        ),
        (
            "bedridden_or_major_surgery",
            F(
                "bedridden_or_major_surgery",
                ("major abdominal surgery 4 weeks ago", "being bedridden for 5 days"),
                ("no recent surgery or bed rest",),
            ),
            0.3,
        ),
        (
            "calf_swelling",
            F(
                "calf_swelling",
                ("The right calf is 4 cm larger than the left",),
                ("Calf circumferences are symmetric",),
                ex,
            ),
            0.4,
        ),
        (
            "collateral_veins",
            F(
                "collateral_veins",
                ("Collateral nonvaricose superficial veins are visible",),
                ("No collateral veins",),
                ex,
            ),
            0.25,
        ),
        (
            "entire_leg_swollen",
            F("entire_leg_swollen", ("The entire right leg is swollen",), ("The leg is not diffusely swollen",), ex),
            0.3,
        ),
        (
            "localized_tenderness",
            F("localized_tenderness", ("Tenderness along the deep venous system",), ("No deep venous tenderness",), ex),
            0.4,
        ),
        (
            "pitting_edema",
            F("pitting_edema", ("Pitting edema confined to the symptomatic leg",), ("No pitting edema",), ex),
            0.35,
        ),
        (
            "paralysis_or_cast",
            F("paralysis_or_cast", ("a recent plaster cast of the lower leg",), ("no paresis or casting",)),
            0.15,
        ),
        ("previous_dvt", F("previous_dvt", ("a previously documented DVT",), ("no prior DVT",)), 0.2),
        (
            "alternative_diagnosis_likely",
            F(
                "alternative_diagnosis_likely",
                ("A Baker's cyst is considered at least as likely as DVT",),
                ("No alternative diagnosis is as likely as DVT",),
                may_omit=False,
            ),
            0.35,
        ),
    )
    for arg, f, p in items:
        b.finding(arg, f, p)
    b.distractors()


def build_perc(b: CaseBuilder) -> None:
    b.demographics((18, 85), arg_sex=None)
    b.quantity("heart_rate", "heart_rate", 60, 130)
    b.quantity("oxygen_saturation", "oxygen_saturation", 88, 100)
    for arg, f, p in (
        (
            "unilateral_leg_swelling",
            F("unilateral_leg_swelling", ("Unilateral left leg swelling",), ("No leg swelling",), "exam"),
            0.25,
        ),
        ("hemoptysis", F("hemoptysis", ("hemoptysis",), ("no hemoptysis",)), 0.2),
        (
            "recent_surgery_or_trauma",
            F(
                "recent_surgery_or_trauma",
                ("knee surgery under general anesthesia 3 weeks ago",),
                ("no recent surgery or trauma",),
            ),
            0.25,
        ),
        ("prior_pe_or_dvt", F("prior_pe_or_dvt", ("a prior DVT",), ("no previous PE or DVT",)), 0.2),
        (
            "hormone_use",
            F("hormone_use", ("use of oral contraceptives", "estrogen hormone replacement"), ("no hormone use",)),
            0.2,
        ),
    ):
        b.finding(arg, f, p)
    b.distractors(exclude=("heart_rate",))


# ------------------------------------------------------------------ builders: infection and critical care


def build_curb65(b: CaseBuilder) -> None:
    b.demographics((30, 95), arg_sex=None)
    b.finding(
        "confusion",
        F(
            "confusion",
            ("The patient is newly confused and disoriented to time",),
            ("The patient is alert and oriented",),
            "exam",
            may_omit=False,
        ),
        0.3,
    )
    b.quantity("bun_mg_dl", "bun", 8, 45, units_allowed=(0,), reject=near(19.0, rel=0.001))
    b.quantity("respiratory_rate", "respiratory_rate", 14, 40)
    b.blood_pressure("systolic", "diastolic", (75, 160), (40, 95))
    b.distractors(exclude=("bun",))


def build_centor(b: CaseBuilder) -> None:
    b.demographics((3, 70), arg_sex=None)
    b.quantity("temperature_c", "temperature", 36.5, 39.8, reject=near(38.0, rel=0.002))
    b.finding(
        "tonsillar_exudate",
        F("tonsillar_exudate", ("Tonsils are swollen with exudate",), ("Tonsils without exudate or swelling",), "exam"),
        0.5,
    )
    b.finding(
        "tender_nodes",
        F("tender_nodes", ("Tender anterior cervical lymphadenopathy",), ("No cervical lymphadenopathy",), "exam"),
        0.5,
    )
    b.finding(
        "cough_absent", F("cough_absent", ("no cough", "denies cough"), ("a productive cough",), may_omit=False), 0.5
    )
    b.distractors()


def build_feverpain(b: CaseBuilder) -> None:
    b.demographics((5, 70), arg_age=None, arg_sex=None)
    for arg, f, p in (
        (
            "fever_past_24h",
            F("fever_past_24h", ("a fever in the past 24 hours",), ("no fever in the past day",), may_omit=False),
            0.5,
        ),
        (
            "purulent_tonsils",
            F("purulent_tonsils", ("Purulent tonsillar exudate",), ("No purulence on the tonsils",), "exam"),
            0.5,
        ),
        (
            "attend_within_3_days",
            F(
                "attend_within_3_days",
                ("symptoms that began 2 days ago",),
                ("symptoms that began 6 days ago",),
                may_omit=False,
            ),
            0.5,
        ),
        (
            "severe_tonsil_inflammation",
            F("severe_tonsil_inflammation", ("Severely inflamed tonsils",), ("Mild tonsillar erythema only",), "exam"),
            0.4,
        ),
        (
            "no_cough_or_coryza",
            F("no_cough_or_coryza", ("no cough or coryza",), ("a cough and runny nose",), may_omit=False),
            0.5,
        ),
    ):
        b.finding(arg, f, p)
    b.distractors()


def build_sirs(b: CaseBuilder) -> None:
    b.demographics((18, 90), arg_age=None, arg_sex=None)
    b.quantity("temperature_c", "temperature", 34.8, 40.0, reject=near(36.0, 38.0, rel=0.002))
    b.quantity("heart_rate", "heart_rate", 60, 130)
    b.quantity("respiratory_rate", "respiratory_rate", 12, 32)
    b.quantity("paco2_mmhg", "paco2", 25, 48, reject=near(32.0, rel=0.01))
    b.quantity("wbc_per_ul", "wbc", 1500, 22000)
    b.distractors(exclude=("heart_rate",))


GCS_EYE = [
    (4, ("Eyes open spontaneously",)),
    (3, ("Eyes open to verbal command",)),
    (2, ("Eyes open only to painful stimulus",)),
    (1, ("No eye opening even to pain",)),
]
GCS_VERBAL = [
    (5, ("Oriented conversation",)),
    (4, ("Confused conversation",)),
    (3, ("Inappropriate words",)),
    (2, ("Incomprehensible sounds only",)),
    (1, ("No verbal response",)),
]
GCS_MOTOR = [
    (6, ("Obeys commands",)),
    (5, ("Localizes to painful stimulus",)),
    (4, ("Withdraws from pain",)),
    (3, ("Abnormal flexion (decorticate posturing) to pain",)),
    (2, ("Extension (decerebrate posturing) to pain",)),
    (1, ("No motor response to pain",)),
]


def build_gcs(b: CaseBuilder) -> None:
    b.demographics((18, 90), arg_age=None, arg_sex=None)
    b.graded("eye", "best_eye_response", GCS_EYE)
    b.graded("verbal", "best_verbal_response", GCS_VERBAL)
    b.graded("motor", "best_motor_response", GCS_MOTOR)
    b.blood_pressure(None, None, (90, 170), (50, 100))
    b.distractors()


# ------------------------------------------------------------------ builders: hepatology and GI bleeding


def build_child_pugh(b: CaseBuilder) -> None:
    b.demographics((30, 85), arg_age=None, arg_sex=None)
    b.quantity("bilirubin_mg_dl", "bilirubin", 0.4, 6.0, reject=near(2.0, 3.0, rel=0.02))
    b.quantity("albumin_g_dl", "albumin", 1.8, 4.6, reject=near(2.8, 3.5, rel=0.01))
    b.quantity("inr", "inr", 0.9, 3.2, reject=near(1.7, 2.3, rel=0.005))
    b.graded("ascites", "ascites", [(1, ("No ascites",)), (2, ("Slight ascites",)), (3, ("Moderate ascites",))])
    b.graded(
        "encephalopathy",
        "encephalopathy",
        [
            (1, ("No encephalopathy",)),
            (2, ("Grade 1-2 hepatic encephalopathy",)),
            (3, ("Grade 3-4 hepatic encephalopathy",)),
        ],
    )
    b.distractors()


def build_meld_na(b: CaseBuilder) -> None:
    b.demographics((25, 80), arg_age=None, arg_sex=None)
    b.quantity("creatinine_mg_dl", "creatinine", 0.5, 5.0, log=True)
    b.quantity("bilirubin_mg_dl", "bilirubin", 0.4, 15.0, log=True)
    b.quantity("inr", "inr", 0.9, 3.5, log=True)
    b.quantity("sodium_meq_l", "sodium", 120, 142)
    b.finding(
        "dialysis_recent",
        F("dialysis_recent", ("hemodialysis twice in the past week",), ("no dialysis in the past week",)),
        0.1,
    )
    b.distractors()


def build_gbs(b: CaseBuilder) -> None:
    b.demographics((20, 90), arg_age=None)
    b.quantity("bun_mg_dl", "bun", 10, 80, reject=near(18.2, 22.4, 28.0, 70.0))
    b.quantity("hemoglobin_g_dl", "hemoglobin", 6.0, 15.5, reject=near(10.0, 12.0, 13.0, rel=0.006))
    b.blood_pressure("systolic", None, (80, 140), (45, 90))
    b.quantity("heart_rate", "heart_rate", 60, 130)
    for arg, f, p in (
        ("melena", F("melena", ("melena",), ("no melena",)), 0.5),
        ("syncope", F("syncope", ("a syncopal episode at home",), ("no syncope",)), 0.25),
        ("hepatic_disease", F("hepatic_disease", ("known alcoholic cirrhosis",), ("no liver disease",)), 0.25),
        ("cardiac_failure", F("cardiac_failure", ("congestive heart failure",), ("no heart failure",)), 0.25),
    ):
        b.finding(arg, f, p)
    b.distractors(exclude=("bun", "hemoglobin", "heart_rate"))


# ------------------------------------------------------------------ builders: obstetrics


def _lmp(b: CaseBuilder) -> datetime.date:
    lmp = random_date(b.rng)
    style = b.rng.randrange(3)
    text = render_date(lmp, style)
    b.literal(
        "last_menstrual_period",
        lmp.isoformat(),
        Fact("history", f"The last menstrual period began on {text}"),
        entity="last_menstrual_date",
        shown=text,
    )
    return lmp


def build_due_date(b: CaseBuilder) -> None:
    b.demographics((18, 44), sex="female", arg_age=None, arg_sex=None)
    _lmp(b)
    cycle = b.rng.randint(21, 35)
    b.literal(
        "cycle_length_days",
        cycle,
        Fact("history", f"Menstrual cycles are regular, every {cycle} days"),
        entity="cycle_length",
        shown=f"{cycle} days",
    )
    b.distractors()


def build_conception(b: CaseBuilder) -> None:
    b.demographics((18, 44), sex="female", arg_age=None, arg_sex=None)
    _lmp(b)
    cycle = b.rng.randint(21, 35)
    b.case.facts.append(Fact("history", f"Menstrual cycles are regular, every {cycle} days"))
    b.case.entities["cycle_length"] = cycle
    b.distractors()


def build_gestational_age(b: CaseBuilder) -> None:
    b.demographics((18, 44), sex="female", arg_age=None, arg_sex=None)
    lmp = _lmp(b)
    today = lmp + datetime.timedelta(days=b.rng.randint(20, 290))
    text = render_date(today, b.rng.randrange(3))
    b.literal(
        "current_date", today.isoformat(), Fact("history", f"Today's date is {text}"), entity="current_date", shown=text
    )
    b.distractors()


# ------------------------------------------------------------------ the list

Q_CG = (
    "What is the patient's Creatinine Clearance using the Cockroft-Gault Equation in terms of mL/min? You should "
    "use the patient's adjusted body weight in kg instead of the patient's actual body weight if the patient is "
    "overweight or obese based on their BMI. If the patient's BMI's normal, set their adjusted body weight to the "
    "minimum of the ideal body and actual weight. If the patient is underweight, please set their adjusted body "
    "weight to their actual body weight."
)
Q_DATE = (
    " Your response should be in the format of M/D/Y (ie 08/31/2023, 07/03/2000) with just the date and no other text."
)
ACID = ("metabolic acidosis workup", "vomiting and confusion", "diabetic ketoacidosis follow-up")

CALCULATORS: tuple[Calculator, ...] = (
    Calculator(
        "cockcroft_gault",
        "Creatinine Clearance (Cockcroft-Gault Equation)",
        2,
        Q_CG,
        fx.cockcroft_gault,
        build_cockcroft_gault,
        "numeric",
        decimals=1,
    ),
    Calculator(
        "ckd_epi_2021",
        "CKD-EPI Equations for Glomerular Filtration Rate",
        3,
        "Using the 2021 CKD-EPI Creatinine equation, what is the patient's Glomerular Filtration Rate (GFR) in "
        "terms of mL/min/1.73 m²?",
        fx.ckd_epi_2021,
        build_ckd_epi,
        "numeric",
        decimals=1,
    ),
    Calculator(
        "cha2ds2_vasc",
        "CHA2DS2-VASc Score for Atrial Fibrillation Stroke Risk",
        4,
        "What is the patient's CHA2DS2-VASc Score?",
        fx.cha2ds2_vasc,
        build_cha2ds2_vasc,
        "integer",
        ("palpitations", "an irregular heartbeat"),
        values=tuple(range(0, 10)),
    ),
    Calculator(
        "mean_arterial_pressure",
        "Mean Arterial Pressure (MAP)",
        5,
        "What is patient's mean arterial pressure in mm Hg?",
        fx.mean_arterial_pressure,
        build_map,
        "numeric",
        decimals=1,
    ),
    Calculator(
        "bmi",
        "Body Mass Index (BMI)",
        6,
        "What is the patient's body mass index (BMI)? Your answer should be in terms of kg/m².",
        fx.body_mass_index,
        build_bmi,
        "numeric",
        decimals=1,
    ),
    Calculator(
        "corrected_calcium",
        "Calcium Correction for Hypoalbuminemia",
        7,
        "Using the Calcium Correction for Hypoalbuminemia formula, what is the patient's corrected calcium in "
        "mg/dL? You may set your normal albumin concentration to be 4 g/dL.",
        fx.corrected_calcium,
        build_calcium,
        "numeric",
        decimals=2,
    ),
    Calculator(
        "wells_pe",
        "Wells' Criteria for Pulmonary Embolism",
        8,
        "What is the patient's score of Wells' criteria for Pulmonary Embolism?",
        fx.wells_pe,
        build_wells_pe,
        "numeric",
        ("pleuritic chest pain and dyspnea", "sudden shortness of breath"),
        decimals=1,
        values=(0, 1, 1.5, 2.5, 3, 4, 4.5, 5.5, 6, 7, 7.5, 8.5, 9, 10),
    ),
    Calculator(
        "mdrd_gfr",
        "MDRD GFR Equation",
        9,
        "Using the MDRD GFR equation, what is the patient's Glomerular "
        "Filtration Rate (GFR) in terms of mL/min/1.73 m²?",
        fx.mdrd_gfr,
        build_mdrd,
        "numeric",
        decimals=1,
    ),
    Calculator(
        "ideal_body_weight",
        "Ideal Body Weight",
        10,
        "Using the Ideal Body Weight Formula, what is the patient's ideal body weight in terms of kg?",
        fx.ideal_body_weight,
        build_ibw,
        "numeric",
        decimals=1,
    ),
    Calculator(
        "qtc_bazett",
        "QTc Bazett Calculator",
        11,
        "Using the Bazett Formula for corrected QT interval, what is the patient's corrected QT interval in msec?",
        fx.qtc_bazett,
        _qtc_builder,
        "numeric",
        ("palpitations", "a syncopal episode"),
        decimals=0,
    ),
    Calculator(
        "due_date",
        "Estimated Due Date",
        13,
        "Using Naegele's Rule for estimated due date based on the last "
        "menstrual period and cycle length, what is the patient's estimated due date?" + Q_DATE,
        fx.estimated_due_date,
        build_due_date,
        "string",
        ("a first prenatal visit", "a positive pregnancy test"),
    ),
    Calculator(
        "child_pugh",
        "Child-Pugh Score for Cirrhosis Mortality",
        15,
        "What is the patient's Child-Pugh Score?",
        fx.child_pugh,
        build_child_pugh,
        "integer",
        ("abdominal distension", "cirrhosis follow-up"),
        values=tuple(range(5, 16)),
    ),
    Calculator(
        "wells_dvt",
        "Wells' Criteria for DVT",
        16,
        "What is the patient's Wells' criteria score for Deep Vein Thrombosis?",
        fx.wells_dvt,
        build_wells_dvt,
        "integer",
        ("leg swelling", "calf pain"),
        values=tuple(range(-2, 8)),
    ),
    Calculator(
        "rcri",
        "Revised Cardiac Risk Index for Pre-Operative Risk",
        17,
        "What is the patient's Cardiac Risk Index based on the revised Cardiac Risk Index for pre-operative risk rule?",
        fx.revised_cardiac_risk_index,
        build_rcri,
        "integer",
        ("a pre-operative assessment",),
        values=tuple(range(0, 7)),
    ),
    Calculator(
        "heart_score",
        "HEART Score for Major Cardiac Events",
        18,
        "What is the patient's HEART score?",
        fx.heart_score,
        build_heart,
        "integer",
        ("chest pain",),
        values=tuple(range(0, 11)),
    ),
    Calculator(
        "fib4",
        "Fibrosis-4 (FIB-4) Index for Liver Fibrosis",
        19,
        "What is the patient's Fibrosis-4 (FIB-4) index?",
        fx.fib4,
        build_fib4,
        "numeric",
        ("abnormal liver tests",),
        decimals=2,
    ),
    Calculator(
        "centor",
        "Centor Score (Modified/McIsaac) for Strep Pharyngitis",
        20,
        "What is the patient's Centor Score?",
        fx.centor_mcisaac,
        build_centor,
        "integer",
        ("a sore throat",),
        values=tuple(range(-1, 6)),
    ),
    Calculator(
        "gcs",
        "Glasgow Coma Score (GCS)",
        21,
        "What is the patient's Glasgow Coma Score?",
        fx.glasgow_coma_scale,
        build_gcs,
        "integer",
        ("a head injury", "decreased responsiveness"),
        values=tuple(range(3, 16)),
    ),
    Calculator(
        "maintenance_fluids",
        "Maintenance Fluids Calculations",
        22,
        "Based on the patient's weight, what is the patient's maintenance fluid in mL/hr?",
        fx.maintenance_fluids,
        build_maintenance_fluids,
        "numeric",
        ("poor oral intake", "gastroenteritis"),
        decimals=1,
    ),
    Calculator(
        "meld_na",
        "MELD Na (UNOS/OPTN)",
        23,
        "What is the patient's MELD Na score?",
        fx.meld_na,
        build_meld_na,
        "integer",
        ("cirrhosis follow-up", "jaundice"),
    ),
    Calculator(
        "has_bled",
        "HAS-BLED Score for Major Bleeding Risk",
        25,
        "What is the patient's HAS-BLED score?",
        fx.has_bled,
        build_has_bled,
        "integer",
        ("anticoagulation review for atrial fibrillation",),
        values=tuple(range(0, 9)),
    ),
    Calculator(
        "sodium_correction",
        "Sodium Correction for Hyperglycemia",
        26,
        "What is the patient's corrected sodium concentration in terms of mEq/L?",
        fx.sodium_correction_hyperglycemia,
        build_sodium_correction,
        "numeric",
        ("polyuria and polydipsia",),
        decimals=1,
    ),
    Calculator(
        "glasgow_blatchford",
        "Glasgow-Blatchford Bleeding Score (GBS)",
        27,
        "What is the patient's Glasgow-Blatchford Bleeding score?",
        fx.glasgow_blatchford,
        build_gbs,
        "integer",
        ("hematemesis", "black stools"),
    ),
    Calculator(
        "serum_osmolality",
        "Serum Osmolality",
        30,
        "What is the patient's serum osmolality in terms of mOsm/kg?",
        fx.serum_osmolality,
        build_serum_osm,
        "numeric",
        decimals=1,
    ),
    Calculator(
        "homa_ir",
        "HOMA-IR (Homeostatic Model Assessment for Insulin Resistance)",
        31,
        "What is the patient's HOMA-IR score?",
        fx.homa_ir,
        build_homa,
        "numeric",
        ("a diabetes screening visit",),
        decimals=2,
    ),
    Calculator(
        "feverpain",
        "FeverPAIN Score for Strep Pharyngitis",
        33,
        "What is the patient's FeverPAIN score?",
        fx.feverpain,
        build_feverpain,
        "integer",
        ("a sore throat",),
        values=tuple(range(0, 6)),
    ),
    Calculator(
        "free_water_deficit",
        "Free Water Deficit",
        38,
        "What is the patient's free water deficit in terms of "
        "liters? You may take the ideal sodium concentration to be 140 mEq/L.",
        fx.free_water_deficit,
        build_free_water,
        "numeric",
        ("confusion and poor oral intake",),
        decimals=2,
    ),
    Calculator(
        "anion_gap",
        "Anion Gap",
        39,
        "What is the patient's anion gap in terms of mEq/L?",
        fx.anion_gap,
        _electrolyte_builder(False),
        "numeric",
        ACID,
        decimals=1,
    ),
    Calculator(
        "fena",
        "Fractional Excretion of Sodium (FENa)",
        40,
        "What is the patient's Fractional Excretion of Sodium (FENa)? Please return your answer as a percentage value.",
        fx.fractional_excretion_sodium,
        build_fena,
        "numeric",
        ("decreased urine output",),
        decimals=2,
    ),
    Calculator(
        "ldl",
        "LDL Calculated",
        44,
        "What is the patient's LDL cholesterol concentration? Please output your answer in terms of mg/dL.",
        fx.ldl_friedewald,
        build_ldl,
        "numeric",
        ("a lipid screening visit",),
        decimals=1,
    ),
    Calculator(
        "curb65",
        "CURB-65 Score for Pneumonia Severity",
        45,
        "What is the patient's CURB-65 score?",
        fx.curb65,
        build_curb65,
        "integer",
        ("productive cough and fever",),
        values=tuple(range(0, 6)),
    ),
    Calculator(
        "perc",
        "PERC Rule for Pulmonary Embolism",
        48,
        "What are the number of criteria met for the PERC Rule for Pulmonary Embolism (PE)?",
        fx.perc_rule,
        build_perc,
        "integer",
        ("pleuritic chest pain",),
        values=tuple(range(0, 8)),
    ),
    Calculator(
        "sirs",
        "SIRS Criteria",
        51,
        "What is the number of SIRS criteria met by the patient?",
        fx.sirs_criteria,
        build_sirs,
        "integer",
        ("fever and rigors",),
        values=tuple(range(0, 5)),
    ),
    Calculator(
        "qtc_fridericia",
        "QTc Fridericia Calculator",
        56,
        "Using the Fridericia Formula for corrected QT "
        "interval, what is the patient's corrected QT interval in terms of msec?",
        fx.qtc_fridericia,
        _qtc_builder,
        "numeric",
        ("palpitations",),
        decimals=0,
    ),
    Calculator(
        "qtc_framingham",
        "QTc Framingham Calculator",
        57,
        "Using the Framingham Formula for corrected QT "
        "interval, what is the patient's corrected QT interval in terms of msec?",
        fx.qtc_framingham,
        _qtc_builder,
        "numeric",
        ("palpitations",),
        decimals=0,
    ),
    Calculator(
        "qtc_hodges",
        "QTc Hodges Calculator",
        58,
        "Using the Hodges Formula for corrected QT interval, what is "
        "the patient's corrected QT interval in terms of msec?",
        fx.qtc_hodges,
        _qtc_builder,
        "numeric",
        ("palpitations",),
        decimals=0,
    ),
    Calculator(
        "qtc_rautaharju",
        "QTc Rautaharju Calculator",
        59,
        "Using the Rautaharju Formula for corrected QT "
        "interval, what is the patient's corrected QT interval in terms of msec?",
        fx.qtc_rautaharju,
        _qtc_builder,
        "numeric",
        ("palpitations",),
        decimals=0,
    ),
    Calculator(
        "bsa",
        "Body Surface Area Calculator",
        60,
        "What is the patient's body surface area? Please output your answer in terms of m².",
        fx.body_surface_area,
        build_bsa,
        "numeric",
        ("chemotherapy planning",),
        decimals=2,
    ),
    Calculator(
        "target_weight",
        "Target weight",
        61,
        "Based on the patient's height and target BMI, what is the patient's target weight in kg?",
        fx.target_weight,
        build_target_weight,
        "numeric",
        ("weight management",),
        decimals=1,
    ),
    Calculator(
        "adjusted_body_weight",
        "Adjusted Body Weight",
        62,
        "Using the adjusted body weight formula, what is the patient's adjusted body weight in terms of kg?",
        fx.adjusted_body_weight,
        build_abw,
        "numeric",
        decimals=1,
    ),
    Calculator(
        "delta_gap",
        "Delta Gap",
        63,
        "What is the patient's delta gap in mEq/L?",
        fx.delta_gap,
        _electrolyte_builder(False),
        "numeric",
        ACID,
        decimals=1,
    ),
    Calculator(
        "delta_ratio",
        "Delta Ratio",
        64,
        "What is the patient's delta ratio?",
        fx.delta_ratio,
        _electrolyte_builder(False),
        "numeric",
        ACID,
        decimals=2,
    ),
    Calculator(
        "albumin_corrected_anion_gap",
        "Albumin Corrected Anion Gap",
        65,
        "What is the patient's albumin corrected anion gap in mEq/L?",
        fx.albumin_corrected_anion_gap,
        _electrolyte_builder(True),
        "numeric",
        ACID,
        decimals=1,
    ),
    Calculator(
        "albumin_corrected_delta_gap",
        "Albumin Corrected Delta Gap",
        66,
        "What is the patient's albumin corrected delta gap in mEq/L?",
        fx.albumin_corrected_delta_gap,
        _electrolyte_builder(True),
        "numeric",
        ACID,
        decimals=1,
    ),
    Calculator(
        "albumin_corrected_delta_ratio",
        "Albumin Corrected Delta Ratio",
        67,
        "What is the patient's albumin corrected delta ratio?",
        fx.albumin_corrected_delta_ratio,
        _electrolyte_builder(True),
        "numeric",
        ACID,
        decimals=2,
    ),
    Calculator(
        "conception_date",
        "Estimated of Conception",
        68,
        "Based on the patient's last menstrual period, what is the patient's estimated date of conception?" + Q_DATE,
        fx.estimated_conception_date,
        build_conception,
        "string",
        ("a first prenatal visit",),
    ),
    Calculator(
        "gestational_age",
        "Estimated Gestational Age",
        69,
        "Based on the patient's last menstrual period, "
        "what is the patient's estimated gestational age? Your answer should be a tuple, specifying the number "
        "of weeks and days (i.e. (4 weeks, 3 days), (0 weeks, 6 days)).",
        fx.estimated_gestational_age,
        build_gestational_age,
        "string",
        ("a prenatal visit",),
    ),
)

BY_CATEGORY: dict[str, Calculator] = {c.category: c for c in CALCULATORS}
BY_MEDCALC_NAME: dict[str, Calculator] = {c.name: c for c in CALCULATORS}
