"""How faithful a world model is on held-out patients, and the world-model card comparing several side by side.

For every catalogue exam among a held-out case's recorded events, in recorded order, the world model simulates that
exam for that case after the events before it (the recorded results, as PriorExam pairs: every model sees the same
history, and the recorded oracle reproduces the record exactly). Simulated and recorded results are compared:

- Lab values (read with components.diag.results), per analyte, on the analyte's scale (ln for skewed labs, as the
  generator and the statistical model use; a value reported as 0 is taken as half its last digit): the 1-D
  Wasserstein distance between simulated and recorded values after standardizing both by the recorded values' mean
  and sd (0: the same distribution; 1: about one recorded sd apart), and the variance ratio var(sim) / var(real)
  (1: as spread out; near 0: a model that always says the same thing). Analytes with at least `min_values` values
  on both sides enter the mean and median over analytes.
- Reports (microbiology, imaging): distinct-2 (distinct word bigrams / all bigrams) and the share of distinct
  reports, simulated and recorded: a model that repeats a few stock reports scores low on both.
- Contradictions with the patient's diagnosis, by a deterministic rule read off the catalogue's disease recipes
  (components.diag.disease_data). The same rule is applied to the recorded results, so a model is judged against
  the real rate (mild cases and day-two repeats are sometimes normal in the record too):
  * A disease *demands* an analyte high (low) when its typical patient, the healthy mean plus the disease's shift
    at severity 1 (the analyte's gain times its factor loadings times the disease's factor shifts, plus the direct
    shift, in sd), lies at least `margin` sd beyond the upper (lower) reference limit; a dipstick, when that shift
    passes the first cut by `margin`. A value of a demanded analyte that is not beyond that limit (inside the range,
    or abnormal the other way) contradicts. Derived analytes (chloride, INR, pH, ...) follow their inputs and are
    not checked themselves.
  * A report that the catalogue associates only with other diseases (an imaging template only other diseases have;
    a culture growing an organism only other diseases grow in that exam) contradicts, and so does the exam's normal
    report where the disease shows a finding in at least `positive_demand` of its patients (a CT pulmonary
    angiogram in pulmonary embolism, an MRI in ischemic stroke). Background reports (contaminants, colonisation) and
    incidental sentences belong to any patient and never contradict; a report that matches no template (free text
    of an LM world model) is counted as unmatched, not as a contradiction.
  Cases whose diagnosis is outside the catalogue have no recipe and are not checked.

A rule that reads the generator's recipe favours models of the generator; on imported records it says how far a
model strays from what the catalogue believes about each disease, which is what an agent trained on it would learn.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field
from scipy.stats import wasserstein_distance

from components.common.io import atomic_write
from components.diag.catalogue import Analyte, Catalogue, Disease, Exam, ExamKind, default_catalogue
from components.diag.record import Case
from components.diag.results import parse_values
from components.diag.world import PriorExam, WorldModel, to_scale

MIN_VALUES = 10
MARGIN = 1.0
POSITIVE_DEMAND = 0.9


class AnalyteFidelity(BaseModel):
    analyte: str
    n_real: int
    n_sim: int
    wasserstein: float | None  # None: a side without values
    variance_ratio: float | None  # None: fewer than two values on a side, or recorded values that never vary


class TextDiversity(BaseModel):
    reports: int
    distinct2: float | None  # distinct word bigrams / all bigrams
    unique_share: float | None  # distinct reports / reports


class Contradictions(BaseModel):
    lab_checked: int = 0  # values of analytes the case's disease demands
    lab_contradicting: int = 0
    text_checked: int = 0  # reports of cases with a catalogue disease
    text_contradicting: int = 0
    text_unmatched: int = 0  # reports that match no catalogue template

    @property
    def rate(self) -> float | None:
        return _ratio(self.lab_contradicting + self.text_contradicting, self.lab_checked + self.text_checked)


class FidelityReport(BaseModel):
    model: str
    cases: int
    results: int  # exam results simulated
    min_values: int
    analytes_scored: int  # analytes with at least min_values values on both sides
    wasserstein_mean: float | None
    wasserstein_median: float | None
    variance_ratio_mean: float | None
    variance_ratio_median: float | None
    text_sim: TextDiversity
    text_real: TextDiversity
    contradictions: Contradictions
    real_contradictions: Contradictions  # the same rule on the recorded results
    analytes: list[AnalyteFidelity]
    seconds: float
    # per case whose recorded results hold something the rule checks: simulated results that were checked, read
    # (a report matched a template) and do not contradict its diagnosis, per recorded one checked, capped at 1
    # (what a registration pairs two world models on; a model whose results cannot be read scores 0, not 1)
    case_consistency: dict[str, float] = Field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """The report's numbers, flat (for tracking); undefined ones are left out."""
        c, r = self.contradictions, self.real_contradictions
        out = {
            "cases": self.cases, "results": self.results, "analytes_scored": self.analytes_scored,
            "wasserstein_mean": self.wasserstein_mean, "wasserstein_median": self.wasserstein_median,
            "variance_ratio_mean": self.variance_ratio_mean, "variance_ratio_median": self.variance_ratio_median,
            "distinct2_sim": self.text_sim.distinct2, "distinct2_real": self.text_real.distinct2,
            "unique_share_sim": self.text_sim.unique_share, "unique_share_real": self.text_real.unique_share,
            "contradiction_rate": c.rate, "real_contradiction_rate": r.rate,
            "lab_contradiction_rate": _ratio(c.lab_contradicting, c.lab_checked),
            "text_contradiction_rate": _ratio(c.text_contradicting, c.text_checked),
            "text_unmatched_share": _ratio(c.text_unmatched, c.text_checked), "seconds": self.seconds,
        }
        return {k: float(v) for k, v in out.items() if v is not None}


# ------------------------------------------------------------------------------------------------ evaluation


def evaluate_fidelity(model: WorldModel, cases: Iterable[Case], catalogue: Catalogue | None = None, *, seed: int = 0,
                      min_values: int = MIN_VALUES, margin: float = MARGIN,
                      positive_demand: float = POSITIVE_DEMAND, batch: int = 64) -> FidelityReport:
    """Simulate every recorded catalogue exam of `cases` (held out from the model's fit) and compare (module doc).
    Each request conditions on the recorded exams before it, so all are known up front: a model with
    `simulate_many` (the LM world model) gets them `batch` at a time."""
    cat = catalogue or default_catalogue()
    cases = list(cases)
    requests: list[tuple[Case, str, tuple[PriorExam, ...]]] = []
    for case in cases:
        history: list[PriorExam] = []
        for event in case.events:
            if event.exam and event.exam in cat.exams:
                requests.append((case, cat.exams[event.exam].name, tuple(history)))
            history.append(PriorExam(event.exam or event.label, event.result))
    started = time.perf_counter()
    results = iter(simulate_all(model, requests, seed, batch))
    rules = ContradictionRules(cat, margin=margin, positive_demand=positive_demand)
    values: dict[str, tuple[list[float], list[float]]] = {}  # analyte -> (real, simulated), on its scale
    texts: tuple[list[str], list[str]] = ([], [])
    tallies = (Contradictions(), Contradictions())
    n_cases = n_results = 0
    consistency: dict[str, float] = {}
    for case in cases:
        n_cases += 1
        disease = cat.disease(case.icd10)
        # "bad": contradicting, or a report no template reads (nothing shows it agrees with the diagnosis)
        before = [(t.lab_checked + t.text_checked, t.lab_contradicting + t.text_contradicting + t.text_unmatched)
                  for t in tallies]
        for event in case.events:
            exam = cat.exams.get(event.exam) if event.exam else None
            if exam is not None:
                simulated = next(results)
                n_results += 1
                for side, text in enumerate((event.result, simulated)):
                    if exam.kind in (ExamKind.LAB, ExamKind.PANEL):
                        parsed = parse_values(text, exam, cat)
                        for name, v in parsed.items():
                            values.setdefault(name, ([], []))[side].append(to_scale(cat.analytes[name], v))
                        rules.tally_lab(disease, parsed, tallies[side])
                    else:
                        texts[side].append(text)
                        rules.tally_report(disease, exam, text, tallies[side])
        (real_checked, _), (sim_checked, sim_bad) = [
            (t.lab_checked + t.text_checked - c, t.lab_contradicting + t.text_contradicting + t.text_unmatched - b)
            for t, (c, b) in zip(tallies, before, strict=True)]
        if real_checked:  # results a model writes unreadably are not checked, so they count against it here
            consistency[case.case_id] = min(1.0, (sim_checked - sim_bad) / real_checked)
    analytes = [compare_values(cat.analytes[name], real, sim) for name, (real, sim) in sorted(values.items())]
    scored = [a for a in analytes if min(a.n_real, a.n_sim) >= min_values]
    dist = [a.wasserstein for a in scored if a.wasserstein is not None]
    ratio = [a.variance_ratio for a in scored if a.variance_ratio is not None]
    return FidelityReport(
        model=model.name, cases=n_cases, results=n_results, min_values=min_values, analytes_scored=len(scored),
        wasserstein_mean=_mean(dist), wasserstein_median=_median(dist), variance_ratio_mean=_mean(ratio),
        variance_ratio_median=_median(ratio), text_sim=diversity(texts[1]), text_real=diversity(texts[0]),
        contradictions=tallies[1], real_contradictions=tallies[0], analytes=analytes,
        seconds=round(time.perf_counter() - started, 3), case_consistency=consistency)




def simulate_all(model: WorldModel, requests: Sequence[tuple[Case, str, tuple[PriorExam, ...]]], seed: int,
                 batch: int = 64) -> list[str]:
    """Each (case, exam, history) simulated: one call each, or `batch` per call where the model has simulate_many."""
    many = getattr(model, "simulate_many", None)
    if many is None:
        return [model.simulate(case, exam, history, seed=seed) for case, exam, history in requests]
    from components.diag.lm_world import SimulationRequest

    out: list[str] = []
    for i in range(0, len(requests), batch):
        out += many([SimulationRequest(case, exam, history, seed) for case, exam, history in requests[i:i + batch]])
    return out


def compare_values(analyte: Analyte, real: Sequence[float], sim: Sequence[float]) -> AnalyteFidelity:
    """Wasserstein distance and variance ratio of simulated against recorded values (both on the analyte's scale)."""
    r, s = np.asarray(real, dtype=float), np.asarray(sim, dtype=float)
    sd = float(r.std(ddof=1)) if len(r) > 1 else 0.0
    # recorded values that never vary (a dipstick always negative) are measured in the catalogue's healthy sd
    unit = sd if sd > 0 else analyte.sd
    dist = None
    if len(r) and len(s):
        mu = float(r.mean())
        dist = float(wasserstein_distance((r - mu) / unit, (s - mu) / unit))
    ratio = float(s.var(ddof=1) / r.var(ddof=1)) if sd > 0 and len(s) > 1 else None
    return AnalyteFidelity(analyte=analyte.name, n_real=len(r), n_sim=len(s), wasserstein=dist, variance_ratio=ratio)


def diversity(reports: Sequence[str]) -> TextDiversity:
    bigrams: list[tuple[str, str]] = []
    for report in reports:
        words = re.findall(r"[a-z0-9]+", report.lower())
        bigrams.extend(zip(words, words[1:], strict=False))
    return TextDiversity(reports=len(reports), distinct2=_ratio(len(set(bigrams)), len(bigrams)),
                         unique_share=_ratio(len(set(reports)), len(reports)))


# ------------------------------------------------------------------------------------------------ contradictions


def demanded_directions(catalogue: Catalogue, disease: Disease, margin: float = MARGIN) -> dict[str, int]:
    """The analytes `disease` pushes past a reference limit in its typical patient: +1 high, -1 low (module doc)."""
    out: dict[str, int] = {}
    for a in catalogue.analytes.values():
        if a.derive is not None:
            continue
        z = a.gain * sum(w * disease.factors.get(f, 0.0) for f, w in a.loadings.items()) + disease.analytes.get(a.name, 0.0)
        if a.ordinal:
            if z >= a.cuts[0] + margin:
                out[a.name] = 1
            continue
        typical = a.mean + a.sd * z
        if a.high is not None and typical >= _limit(a, a.high) + margin * a.sd:
            out[a.name] = 1
        elif a.low is not None and typical <= _limit(a, a.low) - margin * a.sd:
            out[a.name] = -1
    return out


def _limit(analyte: Analyte, value: float) -> float:
    return math.log(value) if analyte.log and value > 0 else (-math.inf if analyte.log else value)


@dataclass(frozen=True)
class _Templates:
    """One text exam's reports as the catalogue knows them."""

    normal: re.Pattern[str]
    background: frozenset[str]
    findings: tuple[tuple[re.Pattern[str], frozenset[str]], ...]  # imaging template -> diseases that show it
    positive: re.Pattern[str] | None  # microbiology
    organisms: dict[str, frozenset[str]]  # organism -> diseases that grow it in this exam
    growers: frozenset[str]  # diseases that grow anything in this exam (a positive without an organism named)


class ContradictionRules:
    """The contradiction rule of the module docstring, built once per evaluation from a catalogue."""

    def __init__(self, catalogue: Catalogue, *, margin: float = MARGIN, positive_demand: float = POSITIVE_DEMAND):
        self.catalogue = catalogue
        self.positive_demand = positive_demand
        self.demands = {code: demanded_directions(catalogue, d, margin) for code, d in catalogue.diseases.items()}
        self._templates: dict[str, _Templates] = {}

    def lab_contradicts(self, disease: Disease, analyte: str, value: float) -> bool | None:
        """None: the disease demands nothing of this analyte."""
        direction = self.demands.get(disease.code, {}).get(analyte)
        if direction is None:
            return None
        a = self.catalogue.analytes[analyte]
        if a.ordinal:
            return value < 1
        return not (value > a.high if direction > 0 else value < a.low)

    def report_contradicts(self, disease: Disease, exam: Exam, text: str) -> bool | None:
        """None: the report matches no catalogue template."""
        kind, codes = self.classify(exam, text)
        if kind == "unmatched":
            return None
        if kind == "finding":
            return disease.code not in codes
        spec = disease.imaging.get(exam.name) or disease.micro.get(exam.name)
        return kind == "normal" and spec is not None and spec[0] >= self.positive_demand

    def classify(self, exam: Exam, text: str) -> tuple[str, frozenset[str]]:
        """("normal" | "background" | "finding" | "unmatched", the diseases a finding belongs to)."""
        t = self._templates_of(exam)
        clean = _clean(exam, text)
        if clean in t.background:
            return "background", frozenset()
        if t.normal.fullmatch(clean):
            return "normal", frozenset()
        codes = frozenset().union(*(c for pattern, c in t.findings if pattern.fullmatch(clean)))
        if not codes and t.positive is not None and (m := t.positive.fullmatch(clean)):
            organism = m.groupdict().get("organism")
            codes = t.organisms.get(organism, frozenset()) if organism is not None else t.growers
        return ("finding", codes) if codes else ("unmatched", frozenset())

    def tally_lab(self, disease: Disease | None, values: dict[str, float], into: Contradictions) -> None:
        if disease is None:
            return
        for name, value in values.items():
            verdict = self.lab_contradicts(disease, name, value)
            if verdict is not None:
                into.lab_checked += 1
                into.lab_contradicting += verdict

    def tally_report(self, disease: Disease | None, exam: Exam, text: str, into: Contradictions) -> None:
        if disease is None:
            return
        verdict = self.report_contradicts(disease, exam, text)
        into.text_checked += 1
        into.text_unmatched += verdict is None
        into.text_contradicting += bool(verdict)

    def _templates_of(self, exam: Exam) -> _Templates:
        if exam.name not in self._templates:
            findings: dict[str, set[str]] = {}
            organisms: dict[str, set[str]] = {}
            growers: set[str] = set()
            for d in self.catalogue.diseases.values():
                for template in d.imaging.get(exam.name, (0.0, ()))[1]:
                    findings.setdefault(template, set()).add(d.code)
                if exam.name in d.micro:
                    growers.add(d.code)
                    for organism in d.micro[exam.name][1]:
                        organisms.setdefault(organism, set()).add(d.code)
            self._templates[exam.name] = _Templates(
                normal=_pattern(exam.normal), background=frozenset(_clean(exam, r) for _, r in exam.background),
                findings=tuple((_pattern(t), frozenset(c)) for t, c in findings.items()),
                positive=_pattern(exam.positive) if exam.positive else None,
                organisms={o: frozenset(c) for o, c in organisms.items()}, growers=frozenset(growers))
        return self._templates[exam.name]


def _clean(exam: Exam, text: str) -> str:
    """The report without the exam's incidental sentences (any patient's), whitespace collapsed."""
    for _, sentence in exam.incidental:
        text = text.replace(" " + sentence, "")
    return " ".join(text.split())


def _pattern(template: str) -> re.Pattern[str]:
    """A report template as a regex: each {slot} matches any text; {organism} is captured."""
    parts = re.split(r"\{(\w+)\}", " ".join(template.split()))
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(re.escape(part))
        elif part == "organism" and "(?P<organism>" not in "".join(out):
            out.append("(?P<organism>.+?)")
        else:
            out.append(".+?")
    return re.compile("".join(out), re.DOTALL)


# ------------------------------------------------------------------------------------------------ the card


_ROWS: tuple[tuple[str, str, str | None], ...] = (  # (label, metric, the recorded results' metric)
    ("cases", "cases", None),
    ("results simulated", "results", None),
    ("analytes scored", "analytes_scored", None),
    ("Wasserstein, mean (0 best)", "wasserstein_mean", None),
    ("Wasserstein, median", "wasserstein_median", None),
    ("variance ratio, mean (1 best)", "variance_ratio_mean", None),
    ("variance ratio, median", "variance_ratio_median", None),
    ("reports: distinct-2", "distinct2_sim", "distinct2_real"),
    ("reports: unique share", "unique_share_sim", "unique_share_real"),
    ("contradiction rate", "contradiction_rate", "real_contradiction_rate"),
    ("  labs", "lab_contradiction_rate", None),
    ("  reports", "text_contradiction_rate", None),
    ("reports matching no template", "text_unmatched_share", None),
    ("seconds", "seconds", None),
)
_COUNTS = {"cases", "results", "analytes_scored"}


def card(reports: Sequence[FidelityReport]) -> str:
    """The world-model card: one column per model (all evaluated on the same cases) and the recorded results' own
    figures ("real data") where a metric has them; then each analyte's Wasserstein distance / variance ratio."""
    if not reports:
        raise ValueError("no fidelity reports to put on a card")
    metrics = [r.metrics() for r in reports]
    names = [r.model for r in reports]
    lines = [f"# World-model card\n\n{reports[0].cases} held-out cases, {reports[0].results} recorded results; "
             f"analytes with at least {reports[0].min_values} values on both sides are scored.\n",
             _row(["metric", *names, "real data"]), _row(["---"] * (len(names) + 2))]
    for label, key, real_key in _ROWS:
        real = metrics[0].get(real_key) if real_key else None
        digits = 0 if key in _COUNTS else 3
        lines.append(_row([label, *(_fmt(m.get(key), digits) for m in metrics), _fmt(real, digits)]))
    lines += ["", "## Per analyte: Wasserstein / variance ratio", "", _row(["analyte", "n", *names]),
              _row(["---"] * (len(names) + 2))]
    by_model = [{a.analyte: a for a in r.analytes} for r in reports]
    for a in reports[0].analytes:
        if a.n_real >= reports[0].min_values:
            cells = [f"{_fmt(m[a.analyte].wasserstein)} / {_fmt(m[a.analyte].variance_ratio)}" if a.analyte in m
                     else "-" for m in by_model]
            lines.append(_row([a.analyte, str(a.n_real), *cells]))
    return "\n".join(lines) + "\n"


def write_card(reports: Sequence[FidelityReport], out_dir: Path | str) -> tuple[Path, Path]:
    """card.md and card.json (every report in full) under `out_dir`, each written atomically."""
    out = Path(out_dir)
    md, js = out / "card.md", out / "card.json"
    text = card(reports)
    with atomic_write(js) as fh:
        fh.write(json.dumps({"models": [r.model_dump(mode="json") for r in reports]}, indent=2))
    with atomic_write(md) as fh:
        fh.write(text)
    return md, js


def load_card(path: Path | str) -> list[FidelityReport]:
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    return [FidelityReport.model_validate(r) for r in raw["models"]]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None
