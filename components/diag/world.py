"""World models: what an exam shows for a patient, given the exams so far.

`WorldModel` is one method, `simulate(case, exam, history, seed=...) -> str`: the result text of a catalogue exam
for this case, after the exams already done in this episode (`history`, as (exam, result text) pairs, oldest first).
The environment calls it once per ordered exam. Implementations:

- `StatisticalWorldModel`: fit on a train cohort, it samples from disease-conditioned distributions: per disease
  and analyte a mean and sd (on the analyte's scale: log for skewed labs; shrunk toward all patients where a disease
  has few), one pooled within-disease correlation matrix of all analytes, and for text exams (cultures, imaging)
  the bag of reports seen for that disease and exam. A lab is drawn conditioned on the values already in the history
  (Gaussian conditioning, so a high creatinine seen makes a high BUN likely); derived values are recomputed from
  their inputs where those are known. Deterministic given its seed, the call's seed, the case, the exam and the
  history's exam names. The fast baseline and the default for tests.
- `RecordedWorldModel`: the case's own recorded result where there is one (the oracle); a component ordered alone
  is cut from its recorded panel, a panel is assembled from recorded components; otherwise a fallback model or a
  fixed "not recorded" text.
- `LMWorldModel` (components.diag.lm_world): a causal LM prompted as DiagGym serializes profile and exams
  (`exam_block`, shared with the environment's observations), served by a token policy.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field

from components.common.io import atomic_write
from components.diag.catalogue import Analyte, Catalogue, Exam, ExamKind, default_catalogue
from components.diag.profile import fill
from components.diag.record import Case
from components.diag.results import component_line, format_lab, parse_values, rounded

NOT_RECORDED = "No result is recorded for {exam}."
OBSERVATION_NOISE = 0.15  # added to the observed block of the correlation: a repeat is near, not equal to, the last
MIN_PAIRS = 10  # analyte pairs seen together fewer times than this are taken as uncorrelated


@dataclass(frozen=True)
class PriorExam:
    exam: str
    result: str


@runtime_checkable
class WorldModel(Protocol):
    name: str

    def simulate(self, case: Case, exam: str, history: Sequence[PriorExam], *, seed: int = 0) -> str: ...


def exam_block(exam: str, result: str) -> str:
    """One exam and its result as DiagGym writes them: the environment's observation and the LM world model's
    prompt (which ends with the named exam's block, result empty) render it through this one function."""
    return f"Exam name:\n{exam}\nExam results:\n{result}"


def draw_seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


# ------------------------------------------------------------------------------------------------ statistical


class DiseaseStats(BaseModel):
    cases: int
    mean: list[float]  # per variable, on its scale, shrunk toward all patients
    sd: list[float]
    n: list[int]  # values seen per variable


class FittedWorld(BaseModel):
    """What `StatisticalWorldModel.fit` learned; JSON-serializable (the pipeline stores it beside the cohort)."""

    variables: list[str]
    cases: int
    overall: DiseaseStats
    diseases: dict[str, DiseaseStats]
    correlation: list[list[float]]
    low: list[float]  # the range seen per variable (its scale), padded: samples are clipped to it
    high: list[float]
    texts: dict[str, dict[str, dict[str, int]]] = Field(default_factory=dict)  # disease -> exam -> report -> count
    overall_texts: dict[str, dict[str, int]] = Field(default_factory=dict)


def to_scale(analyte: Analyte, value: float) -> float:
    """The analyte's scale. A skewed lab reported as 0 (urine WBC 0 /hpf) was below half its last digit: read as
    ln(1e-6) it would sit many sds from anything and inflate every spread fitted on it."""
    if not analyte.log:
        return value
    return math.log(max(value, 0.5 * 10.0 ** -analyte.decimals))


def from_scale(analyte: Analyte, x: float) -> float:
    return math.exp(x) if analyte.log else x


def first_values(case: Case, catalogue: Catalogue) -> dict[str, float]:
    """The admission's first value of each analyte the case's events report."""
    out: dict[str, float] = {}
    for event in case.events:
        exam = catalogue.exams.get(event.exam) if event.exam else None
        if exam is None or exam.kind not in (ExamKind.LAB, ExamKind.PANEL):
            continue
        for name, value in parse_values(event.result, exam, catalogue).items():
            out.setdefault(name, value)
    return out


class StatisticalWorldModel:
    name = "statistical"

    def __init__(self, fitted: FittedWorld, catalogue: Catalogue | None = None, seed: int = 0):
        self.fitted = fitted
        self.catalogue = catalogue or default_catalogue()
        self.seed = seed
        self._index = {v: i for i, v in enumerate(fitted.variables)}
        self._corr = np.asarray(fitted.correlation, dtype=float)
        self._stats = {k: (np.asarray(s.mean), np.asarray(s.sd)) for k, s in fitted.diseases.items()}
        self._overall = (np.asarray(fitted.overall.mean), np.asarray(fitted.overall.sd))
        self._parsed: dict[tuple[str, str], dict[str, float]] = {}
        self._bags: dict[tuple[str, str], tuple[list[str], np.ndarray]] = {}

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, cases: Iterable[Case], catalogue: Catalogue | None = None, *, seed: int = 0,
            prior_weight: float = 1.0, shrinkage: float = 0.2) -> StatisticalWorldModel:
        """Fit on `cases` (a train split). `prior_weight`: how many patients' worth of the all-patient distribution
        a disease's mean and variance are shrunk toward; `shrinkage`: toward the identity, of the correlation."""
        cat = catalogue or default_catalogue()
        cases = list(cases)
        if not cases:
            raise ValueError("no cases to fit the world model on")
        analytes = list(cat.analytes.values())
        variables = [a.name for a in analytes]
        x = np.full((len(cases), len(variables)), np.nan)
        texts: dict[str, dict[str, Counter]] = {}
        for i, case in enumerate(cases):
            for name, value in first_values(case, cat).items():
                x[i, variables.index(name)] = to_scale(cat.analytes[name], value)
            seen: set[str] = set()
            for event in case.events:
                exam = cat.exams.get(event.exam) if event.exam else None
                if exam is None or exam.kind in (ExamKind.LAB, ExamKind.PANEL) or exam.name in seen:
                    continue
                seen.add(exam.name)
                texts.setdefault(case.disease_key, {}).setdefault(exam.name, Counter())[event.result] += 1
        present = ~np.isnan(x)
        n_all = present.sum(axis=0)
        fallback_mean = np.array([0.0 if a.ordinal else a.mean for a in analytes])
        fallback_sd = np.array([0.5 if a.ordinal else a.sd for a in analytes])
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_all = np.where(n_all > 0, np.nansum(x, axis=0) / np.maximum(n_all, 1), fallback_mean)
            var_all = np.where(n_all > 1, np.nansum((x - mean_all) ** 2, axis=0) / np.maximum(n_all - 1, 1),
                               fallback_sd**2)
        floor = np.maximum(0.05 * fallback_sd, 1e-3) ** 2
        var_all = np.maximum(var_all, floor)
        overall = DiseaseStats(cases=len(cases), mean=mean_all.tolist(), sd=np.sqrt(var_all).tolist(),
                               n=n_all.astype(int).tolist())
        keys = sorted({c.disease_key for c in cases})
        rows_of = {k: [i for i, c in enumerate(cases) if c.disease_key == k] for k in keys}
        diseases: dict[str, DiseaseStats] = {}
        residual = np.zeros_like(x)
        for key, rows in rows_of.items():
            sub = x[rows]
            n = (~np.isnan(sub)).sum(axis=0)
            with np.errstate(invalid="ignore"):
                m = np.where(n > 0, np.nansum(sub, axis=0) / np.maximum(n, 1), mean_all)
                v = np.where(n > 1, np.nansum((sub - m) ** 2, axis=0) / np.maximum(n - 1, 1), var_all)
            k = prior_weight
            mean = (n * m + k * mean_all) / (n + k)
            var = np.maximum(((np.maximum(n - 1, 0)) * v + k * var_all) / (np.maximum(n - 1, 0) + k), floor)
            diseases[key] = DiseaseStats(cases=len(rows), mean=mean.tolist(), sd=np.sqrt(var).tolist(),
                                         n=n.astype(int).tolist())
            residual[rows] = (sub - mean) / np.sqrt(var)
        corr = _pooled_correlation(np.where(present, residual, 0.0), present.astype(float), shrinkage)
        xmin = np.where(present, x, np.inf).min(axis=0)
        xmax = np.where(present, x, -np.inf).max(axis=0)
        margin = 0.1 * np.where(n_all > 0, xmax - xmin, 0.0) + 2 * fallback_sd
        low = np.where(n_all > 0, xmin - margin, -1e9)
        high = np.where(n_all > 0, xmax + margin, 1e9)
        fitted = FittedWorld(
            variables=variables, cases=len(cases), overall=overall, diseases=diseases, correlation=corr.tolist(),
            low=low.tolist(), high=high.tolist(),
            texts={d: {e: dict(c) for e, c in by_exam.items()} for d, by_exam in texts.items()},
            overall_texts=_merge_texts(texts))
        return cls(fitted, cat, seed)

    # ------------------------------------------------------------------ simulating
    def simulate(self, case: Case, exam: str, history: Sequence[PriorExam], *, seed: int = 0) -> str:
        ex = self.catalogue.exams.get(exam) or self.catalogue.exam(exam)
        if ex is None:
            return NOT_RECORDED.format(exam=exam)
        rng = np.random.default_rng(draw_seed(self.seed, seed, case.case_id, ex.name, [p.exam for p in history]))
        if ex.kind in (ExamKind.LAB, ExamKind.PANEL):
            return format_lab(ex, self._sample(case, ex, history, rng), self.catalogue)
        reports, p = self._reports(case.disease_key, ex.name)
        if not reports:
            return fill(ex.normal, _default_slots(case))
        return reports[int(rng.choice(len(reports), p=p))]

    def sample_values(self, case: Case, exam: str, history: Sequence[PriorExam] = (), *, seed: int = 0
                      ) -> dict[str, float]:
        """The analyte values `simulate` would report for a lab or panel (for fidelity checks)."""
        ex = self.catalogue.exams[exam]
        rng = np.random.default_rng(draw_seed(self.seed, seed, case.case_id, ex.name, [p.exam for p in history]))
        return self._sample(case, ex, history, rng)

    def _sample(self, case: Case, exam: Exam, history: Sequence[PriorExam], rng: np.random.Generator
                ) -> dict[str, float]:
        cat = self.catalogue
        mean, sd = self._stats.get(case.disease_key, self._overall)
        observed: dict[str, float] = {}
        for prior in history:
            observed.update(self._values_in(prior.exam, prior.result))
        a_idx = [self._index[a] for a in exam.analytes]
        o_idx = [self._index[name] for name in observed if name in self._index]
        z_obs = np.array([(to_scale(cat.analytes[self.fitted.variables[i]], observed[self.fitted.variables[i]])
                           - mean[i]) / sd[i] for i in o_idx])
        r_aa = self._corr[np.ix_(a_idx, a_idx)]
        if o_idx:
            r_ao = self._corr[np.ix_(a_idx, o_idx)]
            r_oo = self._corr[np.ix_(o_idx, o_idx)] + OBSERVATION_NOISE * np.eye(len(o_idx))
            gain = np.linalg.solve(r_oo, r_ao.T).T
            mu = gain @ z_obs
            cov = r_aa - gain @ r_ao.T
        else:
            mu, cov = np.zeros(len(a_idx)), r_aa
        cov = (cov + cov.T) / 2 + 1e-6 * np.eye(len(a_idx))
        vals, vecs = np.linalg.eigh(cov)
        z = mu + vecs @ (np.sqrt(np.clip(vals, 0, None)) * rng.standard_normal(len(a_idx)))
        out: dict[str, float] = {}
        for k, i in enumerate(a_idx):
            analyte = cat.analytes[self.fitted.variables[i]]
            x = float(np.clip(mean[i] + sd[i] * z[k], self.fitted.low[i], self.fitted.high[i]))
            out[analyte.name] = rounded(analyte, from_scale(analyte, x))
        known = {**observed, **out}
        for name in exam.analytes:
            analyte = cat.analytes[name]
            if analyte.derive is not None and all(dep in known for dep in analyte.inputs):
                out[name] = known[name] = rounded(analyte, analyte.derive(known))
        return out

    def _reports(self, disease: str, exam: str) -> tuple[list[str], np.ndarray]:
        """The reports seen for this disease and exam (else for any disease) and their probabilities."""
        key = (disease, exam)
        if key not in self._bags:
            bag = self.fitted.texts.get(disease, {}).get(exam) or self.fitted.overall_texts.get(exam) or {}
            reports = sorted(bag)
            weights = np.array([bag[r] for r in reports], dtype=float)
            self._bags[key] = (reports, weights / weights.sum() if reports else weights)
        return self._bags[key]

    def _values_in(self, exam: str, result: str) -> dict[str, float]:
        """The lab values a prior result states (cached: an episode's history is re-read on every call)."""
        key = (exam, result)
        if key not in self._parsed:
            prior_exam = self.catalogue.exams.get(exam) or self.catalogue.exam(exam)
            lab = prior_exam is not None and prior_exam.kind in (ExamKind.LAB, ExamKind.PANEL)
            if len(self._parsed) > 100_000:
                self._parsed.clear()
            self._parsed[key] = parse_values(result, prior_exam, self.catalogue) if lab else {}
        return self._parsed[key]

    # ------------------------------------------------------------------ storage
    def save(self, path: Path | str) -> Path:
        with atomic_write(path) as fh:
            fh.write(json.dumps({"seed": self.seed, "fitted": self.fitted.model_dump(mode="json")}))
        return Path(path)

    @classmethod
    def load(cls, path: Path | str, catalogue: Catalogue | None = None) -> StatisticalWorldModel:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(FittedWorld.model_validate(raw["fitted"]), catalogue, seed=int(raw.get("seed", 0)))


def _pooled_correlation(z: np.ndarray, mask: np.ndarray, shrinkage: float) -> np.ndarray:
    """Pairwise-complete correlation of within-disease residuals, shrunk toward the identity and made positive
    definite."""
    v = z.shape[1]
    if z.shape[0] == 0:
        return np.eye(v)
    cross = z.T @ z
    sq = (z**2).T @ mask  # [i, j]: sum of z_i^2 over cases where j is present too
    pairs = mask.T @ mask
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = cross / np.sqrt(sq * sq.T)
    corr = np.where((pairs >= MIN_PAIRS) & np.isfinite(corr), np.clip(corr, -1, 1), 0.0)
    np.fill_diagonal(corr, 1.0)
    corr = (1 - shrinkage) * corr + shrinkage * np.eye(v)
    vals, vecs = np.linalg.eigh((corr + corr.T) / 2)
    corr = vecs @ np.diag(np.clip(vals, 1e-3, None)) @ vecs.T
    d = np.sqrt(np.diag(corr))
    return corr / np.outer(d, d)


def _merge_texts(texts: Mapping[str, Mapping[str, Counter]]) -> dict[str, dict[str, int]]:
    out: dict[str, Counter] = {}
    for by_exam in texts.values():
        for exam, counter in by_exam.items():
            out.setdefault(exam, Counter()).update(counter)
    return {e: dict(c) for e, c in out.items()}


def _default_slots(case: Case) -> dict[str, object]:
    """Slots for a normal report template when no report was ever seen: the heart rate from the case's vitals."""
    hr = 80
    for f in case.physical_exam:
        m = re.search(r"\bHR\s*(\d+)", f.exam_results) if f.exam_name.lower() == "vital signs" else None
        if m:
            hr = int(m.group(1))
    rhythm = "Sinus tachycardia" if hr > 100 else "Sinus bradycardia" if hr < 60 else "Sinus rhythm"
    return {"side": "right", "Side": "Right", "other": "left", "Other": "Left", "lobe": "lower", "size": "2.0",
            "hr": hr, "rhythm": rhythm, "ef": 35, "wall": "anterior"}


# ------------------------------------------------------------------------------------------------ recorded


class RecordedWorldModel:
    """The case's own results (an oracle world): the k-th order of an exam gets its k-th recording (the last one
    after that)."""

    name = "recorded"

    def __init__(self, catalogue: Catalogue | None = None, fallback: WorldModel | None = None):
        self.catalogue = catalogue or default_catalogue()
        self.fallback = fallback

    def simulate(self, case: Case, exam: str, history: Sequence[PriorExam], *, seed: int = 0) -> str:
        ex = self.catalogue.exams.get(exam) or self.catalogue.exam(exam)
        name = ex.name if ex is not None else exam
        times = sum(1 for p in history if p.exam == name)
        records = [e.result for e in case.events if (e.exam or e.label) == name]
        if records:
            return records[min(times, len(records) - 1)]
        if ex is not None and ex.panel is not None:
            for event in case.events:
                if event.exam == ex.panel:
                    line = component_line(event.result, ex.name, self.catalogue)
                    if line is not None:
                        return line
        if ex is not None and ex.kind == ExamKind.PANEL:
            parts = {}
            for event in case.events:
                if event.exam in ex.analytes and event.exam not in parts:
                    parts[event.exam] = event.result.strip()
            if parts:
                return "\n".join(f"{a}: {parts[a]}" for a in ex.analytes if a in parts)
        if self.fallback is not None:
            return self.fallback.simulate(case, name, history, seed=seed)
        return NOT_RECORDED.format(exam=name)
