"""What a note can say: measured quantities with their units and names, and yes/no findings with their phrasings.

A `Quantity` lists its units; the first is the unit the formulas take, the others name the converter in
`units.py` that takes them there. `Finding` phrasings are full clauses, so the note never needs pronouns.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.tasks.calculators import units


@dataclass(frozen=True)
class Unit:
    symbol: str
    decimals: int
    converter: str | None = None  # name of a function in units.py; None: already the formulas' unit
    ft_in: bool = False  # heights in inches shown as "5 ft 7 in"

    def to_canonical(self, shown: float) -> float:
        return shown if self.converter is None else getattr(units, self.converter)(shown)

    def from_canonical(self, value: float) -> float:
        if self.converter is None:
            return value
        if self.converter == "fahrenheit_to_celsius":
            return value * 9.0 / 5.0 + 32.0
        return value / getattr(units, self.converter)(1.0)  # the others are linear through zero

    def render(self, shown: float) -> str:
        if self.ft_in:
            inches = int(shown)
            return f"{inches // 12} ft {inches % 12} in"
        number = f"{shown:.{max(self.decimals, 0)}f}"
        if not self.symbol:
            return number
        return f"{number}{self.symbol}" if self.symbol in ("%", "°C", "°F") else f"{number} {self.symbol}"


@dataclass(frozen=True)
class Quantity:
    key: str
    names: tuple[str, ...]
    section: str  # vitals | anthropometry | labs | ecg
    units: tuple[Unit, ...]
    typical: tuple[float, float]  # plausible range in the first unit, for distractor values


@dataclass(frozen=True)
class Finding:
    key: str
    present: tuple[str, ...]
    absent: tuple[str, ...]
    section: str = "history"
    may_omit: bool = True  # absent findings may go unmentioned (MedCalc-Bench reads silence as absent)


def _u(symbol: str, decimals: int, converter: str | None = None, ft_in: bool = False) -> Unit:
    return Unit(symbol, decimals, converter, ft_in)


Q: dict[str, Quantity] = {
    q.key: q
    for q in (
        Quantity(
            "weight", ("weight", "body weight"), "anthropometry", (_u("kg", 1), _u("lb", 0, "lb_to_kg")), (45, 120)
        ),
        Quantity(
            "height",
            ("height",),
            "anthropometry",
            (_u("cm", 0), _u("m", 2, "m_to_cm"), _u("in", 0, "inches_to_cm"), _u("", 0, "inches_to_cm", ft_in=True)),
            (150, 195),
        ),
        Quantity("heart_rate", ("heart rate", "pulse"), "vitals", (_u("bpm", 0),), (55, 120)),
        Quantity("respiratory_rate", ("respiratory rate",), "vitals", (_u("breaths/min", 0),), (12, 30)),
        Quantity(
            "temperature", ("temperature",), "vitals", (_u("°C", 1), _u("°F", 1, "fahrenheit_to_celsius")), (36.0, 39.5)
        ),
        Quantity(
            "oxygen_saturation",
            ("oxygen saturation on room air", "SpO2 on room air"),
            "vitals",
            (_u("%", 0),),
            (88, 100),
        ),
        Quantity(
            "creatinine",
            ("creatinine", "serum creatinine"),
            "labs",
            (_u("mg/dL", 2), _u("µmol/L", 0, "creatinine_umol_l_to_mg_dl")),
            (0.6, 3.0),
        ),
        Quantity("sodium", ("sodium", "serum sodium"), "labs", (_u("mEq/L", 0), _u("mmol/L", 0)), (128, 148)),
        Quantity("chloride", ("chloride",), "labs", (_u("mEq/L", 0), _u("mmol/L", 0)), (92, 112)),
        Quantity("bicarbonate", ("bicarbonate", "HCO3-"), "labs", (_u("mEq/L", 0), _u("mmol/L", 0)), (14, 30)),
        Quantity("potassium", ("potassium",), "labs", (_u("mEq/L", 1),), (3.2, 5.4)),
        Quantity(
            "albumin",
            ("albumin", "serum albumin"),
            "labs",
            (_u("g/dL", 1), _u("g/L", 0, "albumin_g_l_to_g_dl")),
            (2.2, 4.8),
        ),
        Quantity(
            "calcium",
            ("calcium", "total calcium"),
            "labs",
            (_u("mg/dL", 1), _u("mmol/L", 2, "calcium_mmol_l_to_mg_dl")),
            (7.5, 10.5),
        ),
        Quantity(
            "glucose",
            ("glucose", "serum glucose"),
            "labs",
            (_u("mg/dL", 0), _u("mmol/L", 1, "glucose_mmol_l_to_mg_dl")),
            (70, 250),
        ),
        Quantity(
            "bun",
            ("blood urea nitrogen (BUN)", "BUN"),
            "labs",
            (_u("mg/dL", 0), _u("mmol/L", 1, "bun_mmol_l_to_mg_dl")),
            (8, 40),
        ),
        Quantity(
            "bilirubin",
            ("total bilirubin", "bilirubin"),
            "labs",
            (_u("mg/dL", 1), _u("µmol/L", 0, "bilirubin_umol_l_to_mg_dl")),
            (0.3, 4.0),
        ),
        Quantity("inr", ("INR", "international normalized ratio"), "labs", (_u("", 2),), (0.9, 2.5)),
        Quantity("ast", ("AST", "aspartate aminotransferase"), "labs", (_u("U/L", 0),), (15, 200)),
        Quantity("alt", ("ALT", "alanine aminotransferase"), "labs", (_u("U/L", 0),), (10, 200)),
        Quantity(
            "platelets",
            ("platelet count", "platelets"),
            "labs",
            (_u("x10^9/L", 0), _u("/µL", -3, "per_ul_to_10e9_per_l")),
            (90, 400),
        ),
        Quantity(
            "wbc",
            ("white blood cell count", "WBC"),
            "labs",
            (_u("/µL", -2), _u("x10^9/L", 1, "per_10e9_l_to_per_ul")),
            (3500, 16000),
        ),
        Quantity(
            "hemoglobin", ("hemoglobin", "Hb"), "labs", (_u("g/dL", 1), _u("g/L", 0, "hemoglobin_g_l_to_g_dl")), (8, 16)
        ),
        Quantity(
            "total_cholesterol",
            ("total cholesterol",),
            "labs",
            (_u("mg/dL", 0), _u("mmol/L", 2, "cholesterol_mmol_l_to_mg_dl")),
            (140, 300),
        ),
        Quantity(
            "hdl",
            ("HDL cholesterol", "HDL"),
            "labs",
            (_u("mg/dL", 0), _u("mmol/L", 2, "cholesterol_mmol_l_to_mg_dl")),
            (30, 80),
        ),
        Quantity(
            "triglycerides",
            ("triglycerides",),
            "labs",
            (_u("mg/dL", 0), _u("mmol/L", 2, "triglycerides_mmol_l_to_mg_dl")),
            (60, 350),
        ),
        Quantity(
            "insulin",
            ("fasting insulin",),
            "labs",
            (_u("µIU/mL", 1), _u("pmol/L", 0, "insulin_pmol_l_to_uiu_ml")),
            (3, 40),
        ),
        Quantity("urine_sodium", ("urine sodium",), "labs", (_u("mEq/L", 0), _u("mmol/L", 0)), (10, 80)),
        Quantity(
            "urine_creatinine",
            ("urine creatinine",),
            "labs",
            (_u("mg/dL", 0), _u("mmol/L", 1, "creatinine_mmol_l_to_mg_dl")),
            (30, 200),
        ),
        Quantity("paco2", ("PaCO2",), "labs", (_u("mmHg", 0), _u("kPa", 1, "kpa_to_mmhg")), (28, 50)),
        Quantity("qt", ("QT interval",), "ecg", (_u("msec", 0),), (340, 480)),
        Quantity("target_bmi", ("target BMI",), "plan", (_u("kg/m²", 1),), (20, 27)),
        # distractors only
        Quantity("lactate", ("lactate",), "labs", (_u("mmol/L", 1),), (0.8, 4.0)),
        Quantity("magnesium", ("magnesium",), "labs", (_u("mg/dL", 1),), (1.6, 2.6)),
        Quantity("phosphate", ("phosphate",), "labs", (_u("mg/dL", 1),), (2.5, 4.8)),
        Quantity("alkaline_phosphatase", ("alkaline phosphatase",), "labs", (_u("U/L", 0),), (40, 180)),
        Quantity("tsh", ("TSH",), "labs", (_u("mIU/L", 2),), (0.5, 4.5)),
        Quantity("crp", ("C-reactive protein",), "labs", (_u("mg/L", 0),), (1, 120)),
        Quantity("ldh", ("LDH",), "labs", (_u("U/L", 0),), (120, 400)),
        Quantity("hba1c", ("HbA1c",), "labs", (_u("%", 1),), (4.8, 6.2)),
        Quantity("lipase", ("lipase",), "labs", (_u("U/L", 0),), (10, 60)),
    )
}

# quantities a note may mention as noise; the registry drops any that a calculator reads
DISTRACTOR_LABS: tuple[str, ...] = (
    "potassium",
    "lactate",
    "magnesium",
    "phosphate",
    "alkaline_phosphatase",
    "tsh",
    "crp",
    "ldh",
    "lipase",
    "hemoglobin",
    "platelets",
    "wbc",
    "calcium",
    "albumin",
    "glucose",
    "bun",
    "creatinine",
    "sodium",
    "chloride",
    "bicarbonate",
    "ast",
    "alt",
    "bilirubin",
)


def F(
    key: str, present: tuple[str, ...], absent: tuple[str, ...], section: str = "history", may_omit: bool = True
) -> Finding:
    return Finding(key, present, absent, section, may_omit)


NEUTRAL_FACTS: tuple[str, ...] = (
    "The patient works as an accountant and lives with a partner.",
    "Medications include omeprazole 20 mg daily and loratadine as needed.",
    "There is a family history of colon cancer in a grandparent.",
    "The patient had an appendectomy in childhood.",
    "Vaccinations are up to date.",
    "Allergies: penicillin (rash).",
    "The patient is a retired postal worker.",
    "Chest radiograph showed no acute cardiopulmonary process.",
    "The patient takes vitamin D supplements.",
    "There is a remote history of a fractured wrist from a fall.",
    "The patient reports seasonal allergic rhinitis.",
    "Abdominal ultrasound was unremarkable.",
)

COMPLAINTS: tuple[str, ...] = (
    "fatigue",
    "shortness of breath",
    "abdominal pain",
    "dizziness",
    "a routine follow-up",
    "generalized weakness",
    "nausea and vomiting",
    "chest discomfort",
    "a fever",
    "leg pain",
)
