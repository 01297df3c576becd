"""The catalogue: diseases (ICD-10 codes and synonyms) and exams (labs with units and reference ranges, panels,
microbiology, imaging with report templates), and the matching of what an agent or a record calls them.

Exam names match case-, punctuation- and spacing-insensitively against each exam's name and synonyms ("CBC",
"complete blood count", "Na", "sodium", "x-ray" / "xray"); failing that, after dropping filler words ("serum",
"level", "test") where the result is unambiguous. Nothing is matched by substring: "blood" is not an exam.

Disease matching is exact on one whole name: a name or synonym of one disease (normalized), or an ICD-10 code
whose full code or three-character category belongs to exactly one disease. A string naming several diseases
matches none (the grader treats a diagnosis as one diagnosis; see components.diag.grading).

The content lives in exam_data and disease_data; `default_catalogue()` builds and checks it once.
"""

from __future__ import annotations

import difflib
import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

Source = Literal["lab", "microbiology", "radiology"]


class ExamKind(StrEnum):
    LAB = "lab"  # one analyte
    PANEL = "panel"  # several analytes reported together (CBC, BMP, ...)
    MICROBIOLOGY = "microbiology"
    IMAGING = "imaging"  # radiology and other reported procedures (ECG, echo, EEG, endoscopy)


@dataclass(frozen=True)
class Analyte:
    """A lab value. Healthy values are `mean` ± `sd` on the analyte's scale (ln of the value when `log`); a patient's
    value is that plus, in standard deviations, the loadings times the patient's latent factors, a disease's direct
    shift and noise (components.diag.cohort)."""

    name: str
    unit: str
    low: float | None  # reference range; None: open on that side
    high: float | None
    mean: float
    sd: float
    log: bool = False
    decimals: int = 1
    loadings: Mapping[str, float] = field(default_factory=dict)
    gain: float = 1.0  # how far the disease part of the factors moves it (noise moves it by the loadings alone)
    idio: float = 0.6  # the analyte's own noise, in sd (derived analytes: relative measurement noise)
    female: float = 0.0  # shift for women, in sd
    levels: tuple[str, ...] = ()  # ordinal analytes (urine dipstick): the levels, lowest first; value = index
    cuts: tuple[float, ...] = ()  # ordinal analytes: the z thresholds between levels
    bounds: tuple[float, float] | None = None  # what a value can physically be
    inputs: tuple[str, ...] = ()  # derived analytes: the analytes `derive` reads
    derive: Callable[[Mapping[str, float]], float] | None = None

    @property
    def ordinal(self) -> bool:
        return bool(self.levels)

    def abnormal(self, value: float) -> bool:
        if self.ordinal:
            return value >= 1
        return (self.low is not None and value < self.low) or (self.high is not None and value > self.high)

    def reference(self) -> str:
        if self.ordinal:
            return self.levels[0]
        if self.low is not None and self.high is not None:
            return f"{self.low:g} - {self.high:g}"
        return f"< {self.high:g}" if self.high is not None else f"> {self.low:g}"


@dataclass(frozen=True)
class Exam:
    name: str
    kind: ExamKind
    synonyms: tuple[str, ...] = ()
    analytes: tuple[str, ...] = ()  # lab: (its analyte,); panel: its components
    panel: str | None = None  # a lab reported within a panel: ordering it alone earns the panel's credit
    normal: str = ""  # microbiology / imaging: the report when nothing is found
    positive: str = ""  # microbiology: a positive report ({organism}, {gram}, {sets})
    background: tuple[tuple[float, str], ...] = ()  # microbiology: (probability, report) in any patient
    incidental: tuple[tuple[float, str], ...] = ()  # imaging: (probability, sentence) in any patient

    @property
    def source(self) -> Source:
        """DiagGym's event source: labs and panels are `lab`, imaging and procedures `radiology`."""
        if self.kind in (ExamKind.LAB, ExamKind.PANEL):
            return "lab"
        return "microbiology" if self.kind == ExamKind.MICROBIOLOGY else "radiology"

    @property
    def credit(self) -> str:
        """The name exam F1 counts this exam under: its panel's for a lab reported within a panel."""
        return self.panel or self.name


@dataclass(frozen=True)
class Disease:
    """A diagnosis and how it shows: the generator's recipe (components.diag.cohort) and the grader's names."""

    code: str  # ICD-10-CM
    name: str
    synonyms: tuple[str, ...]
    presentation: str  # diseases that present alike share one (chest_pain, abdominal_pain, ...)
    prevalence: float  # relative weight in a cohort
    age: tuple[float, float]  # mean, sd
    male: float  # share of men
    complaints: tuple[str, ...]  # chief complaints, one drawn
    symptoms: tuple[tuple[str, float], ...]  # (symptom, probability); "F:" before a symptom: women only
    negatives: tuple[str, ...]  # pertinent negatives: symptoms of look-alikes this disease lacks
    findings: tuple[tuple[str, str, float], ...]  # physical exam: (system, finding, probability)
    key: tuple[str, ...]  # the exams a clinician orders first
    key_optional: tuple[str, ...] = ()  # each joins a patient's key exams with probability one half
    workup: tuple[str, ...] = ()  # exams often recorded later in the stay
    history: tuple[tuple[str, float], ...] = ()  # extra past history: (text, probability)
    risks: Mapping[str, float] = field(default_factory=dict)  # comorbidity -> probability in this disease
    excludes: tuple[str, ...] = ()  # comorbidities that would name this disease in the history: never drawn
    factors: Mapping[str, float] = field(default_factory=dict)  # latent factor shifts (sd, times severity)
    analytes: Mapping[str, float] = field(default_factory=dict)  # direct analyte shifts (sd, times severity)
    micro: Mapping[str, tuple[float, Mapping[str, float]]] = field(default_factory=dict)  # exam -> (p, organisms)
    imaging: Mapping[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict)  # exam -> (p, reports)
    durations: tuple[str, ...] = ("1 day", "2 days", "3 days")


# ------------------------------------------------------------------------------------------------ matching

_FILLER = {"serum", "plasma", "level", "levels", "test", "testing", "value", "values", "measurement", "the", "stat",
           "a", "an", "please", "order", "check"}
_HEDGES = ("most likely", "likely", "probable", "probably", "possible", "suspected", "presumed", "presumptive")
ICD10 = re.compile(r"^[A-Z][0-9][0-9A-Z](?:\.?[0-9A-Z]{1,4})?$")


def normalize(text: str) -> str:
    """Lower case, accents and punctuation dropped, one space between words ("Na+" -> "na", "X-ray" -> "x ray")."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = text.lower().replace("&", " and ").replace("'", "")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text).split())


def compact(text: str) -> str:
    """normalize, filler words dropped, spaces removed: the fallback key ("serum sodium level" -> "sodium")."""
    words = [w for w in normalize(text).split() if w not in _FILLER]
    return "".join(words)


def normalize_code(text: str) -> str | None:
    """An ICD-10 code in canonical form (upper case, dot after the category), or None if `text` is not one."""
    raw = text.strip().upper().replace(" ", "")
    if not ICD10.match(raw):
        return None
    raw = raw.replace(".", "")
    return raw if len(raw) == 3 else f"{raw[:3]}.{raw[3:]}"


def code_category(code: str) -> str:
    return code.replace(".", "")[:3].upper()


class CatalogueError(ValueError):
    """The catalogue's content contradicts itself (a name used twice, an exam that does not exist, ...)."""


class Catalogue:
    def __init__(self, analytes: Iterable[Analyte], exams: Iterable[Exam], diseases: Iterable[Disease],
                 vitals: Iterable[Analyte] = ()):
        self.analytes: dict[str, Analyte] = {a.name: a for a in analytes}
        self.vitals: dict[str, Analyte] = {a.name: a for a in vitals}
        self.exams: dict[str, Exam] = {}
        for e in exams:
            if e.name in self.exams:
                raise CatalogueError(f"exam {e.name!r} defined twice")
            self.exams[e.name] = e
        self.diseases: dict[str, Disease] = {}
        for d in diseases:
            if d.code in self.diseases:
                raise CatalogueError(f"disease code {d.code} defined twice")
            self.diseases[d.code] = d
        self._exact: dict[str, str] = {}
        compact_keys: dict[str, set[str]] = {}
        for e in self.exams.values():
            for alias in (e.name, *e.synonyms):
                key = normalize(alias)
                if self._exact.get(key, e.name) != e.name:
                    raise CatalogueError(f"exam alias {alias!r} names both {self._exact[key]!r} and {e.name!r}")
                self._exact[key] = e.name
                compact_keys.setdefault(compact(alias), set()).add(e.name)
        self._compact = {k: next(iter(v)) for k, v in compact_keys.items() if len(v) == 1 and k}
        self._disease_names: dict[str, str] = {}
        self._categories: dict[str, list[str]] = {}
        for d in self.diseases.values():
            if normalize_code(d.code) != d.code:
                raise CatalogueError(f"{d.code!r} is not a canonical ICD-10 code")
            self._categories.setdefault(code_category(d.code), []).append(d.code)
            for alias in (d.name, *d.synonyms):
                key = normalize(alias)
                if self._disease_names.get(key, d.code) != d.code:
                    raise CatalogueError(f"disease alias {alias!r} names both {self._disease_names[key]} and {d.code}")
                self._disease_names[key] = d.code
        self._check()

    # ------------------------------------------------------------------ exams
    def exam(self, text: str) -> Exam | None:
        """The exam `text` names, or None."""
        name = self._exact.get(normalize(text)) or self._compact.get(compact(text))
        return self.exams[name] if name else None

    def suggest(self, text: str, n: int = 3) -> list[str]:
        """Exam names close to an unknown `text`, for the agent's observation."""
        keys = list(self._exact)
        out: list[str] = []
        for key in difflib.get_close_matches(normalize(text), keys, n=n * 3, cutoff=0.6):
            name = self._exact[key]
            if name not in out:
                out.append(name)
        return out[:n]

    def panel_of(self, analyte: str) -> Exam | None:
        """The panel an analyte is reported in, if any."""
        lab = self.exams.get(analyte)
        return self.exams[lab.panel] if lab is not None and lab.panel else None

    def analyte(self, name: str) -> Analyte | None:
        return self.analytes.get(name)

    # ------------------------------------------------------------------ diseases
    def disease(self, code: str | None) -> Disease | None:
        return self.diseases.get(code) if code else None

    def disease_aliases(self, disease: Disease) -> set[str]:
        """Every normalized name the disease answers to."""
        return {normalize(a) for a in (disease.name, *disease.synonyms)}

    def match_disease(self, text: str) -> Disease | None:
        """The one disease `text` names whole: a name, a synonym or an ICD-10 code (see the module docstring)."""
        code = normalize_code(text)
        if code is not None:
            return self.disease_by_code(code)
        found = self._disease_names.get(normalize(strip_hedges(text)))
        return self.diseases[found] if found else None

    def disease_by_code(self, code: str) -> Disease | None:
        """The disease with this full code, else the only disease of its three-character category."""
        code = normalize_code(code) or code
        if code in self.diseases:
            return self.diseases[code]
        same = self._categories.get(code_category(code), [])
        return self.diseases[same[0]] if len(same) == 1 else None

    # ------------------------------------------------------------------ checks
    def _check(self) -> None:
        for e in self.exams.values():
            for a in e.analytes:
                if a not in self.analytes:
                    raise CatalogueError(f"exam {e.name!r}: unknown analyte {a!r}")
            if e.kind == ExamKind.LAB and len(e.analytes) != 1:
                raise CatalogueError(f"lab {e.name!r} must have exactly one analyte")
            if e.panel is not None and (e.panel not in self.exams or self.exams[e.panel].kind != ExamKind.PANEL):
                raise CatalogueError(f"exam {e.name!r}: {e.panel!r} is not a panel")
            if e.kind in (ExamKind.MICROBIOLOGY, ExamKind.IMAGING) and not e.normal:
                raise CatalogueError(f"exam {e.name!r} needs a normal report")
        for a in list(self.analytes.values()) + list(self.vitals.values()):
            for dep in a.inputs:
                if dep not in self.analytes and dep not in self.vitals:
                    raise CatalogueError(f"analyte {a.name!r} derives from unknown {dep!r}")
            if a.ordinal and len(a.cuts) != len(a.levels) - 1:
                raise CatalogueError(f"ordinal analyte {a.name!r}: {len(a.levels)} levels need {len(a.levels) - 1} cuts")
        for d in self.diseases.values():
            for name in (*d.key, *d.key_optional, *d.workup, *d.micro, *d.imaging):
                if name not in self.exams:
                    raise CatalogueError(f"disease {d.code}: unknown exam {name!r}")
            for name in d.analytes:
                if name not in self.analytes and name not in self.vitals:
                    raise CatalogueError(f"disease {d.code}: unknown analyte {name!r}")
            for name in d.micro:
                if self.exams[name].kind != ExamKind.MICROBIOLOGY:
                    raise CatalogueError(f"disease {d.code}: {name!r} is not a microbiology exam")
            for name in d.imaging:
                if self.exams[name].kind != ExamKind.IMAGING:
                    raise CatalogueError(f"disease {d.code}: {name!r} is not an imaging exam")


def strip_hedges(text: str) -> str:
    """'Likely acute pancreatitis' -> 'acute pancreatitis': a hedged diagnosis is still one diagnosis."""
    norm = text.strip()
    lowered = norm.lower()
    for hedge in _HEDGES:
        if lowered.startswith(hedge + " "):
            return norm[len(hedge) + 1:].strip()
    return norm


@functools.cache
def default_catalogue() -> Catalogue:
    """The built-in catalogue (exam_data, disease_data), built and checked once."""
    from components.diag.disease_data import DISEASES
    from components.diag.exam_data import ANALYTES, EXAMS, VITALS

    return Catalogue(ANALYTES, EXAMS, DISEASES, VITALS)
