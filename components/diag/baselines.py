"""Baseline diagnostic agents: they play DiagEnv through the same text actions a model writes, and see only what
the environment shows (a `DiagView`: the observations and their own replies; components.diag.evaluate).

random   `RandomExamsAgent`: k catalogue exams drawn at random (seeded by its seed and the episode key), a few per
         turn, then one fixed diagnosis: the most common diagnosis of the train split. The floor any agent must beat.
greedy   `GreedyOracleAgent`: a Bayesian posterior over the diseases of the train split, from the chief
         complaint of the presentation and every result seen so far; each turn it orders the exam with the highest
         expected information gain (the expected drop of the posterior's entropy, in nats) about the disease, and
         it gives the most probable disease once that passes a threshold, no exam is worth a minimum gain, its exam
         budget is spent or the next turn is the last.

The greedy agent's `DiseaseModel` is fit on train cases only (it refuses a case of another split) and reads the
statistical world model's fit (components.diag.world.FittedWorld), so it is an oracle for the statistical world
and a strong, honest reference on recorded results. Given the disease, the evidence is:
- the chief complaint: categorical per disease, Laplace smoothed;
- lab values: Gaussian on the analytes' scales (log for skewed labs) with the disease's fitted means and sds and
  the fit's pooled within-disease correlation, each exam's values conditioned on those already known as the
  statistical world draws them (a naive-Bayes product over a panel's correlated analytes would be certain of
  the wrong disease after one panel). Derived values (chloride, osmolality, ...) whose inputs are known, and
  repeats of a known analyte, are left out: they say nothing their inputs do not. A dipstick level is read
  with an sd of at least half a level;
- a culture or imaging report: categorical over report kinds per (disease, exam), a kind being the report's
  impression (its whole text for cultures) with digits and sides blanked, so that a filled template matches
  the reports seen in training; Laplace smoothed, with one "unseen kind" category. A "not recorded" answer is no
  evidence.
The expected gain of a lab or panel is a Monte Carlo average over values drawn from each likely disease (one
fixed set of draws, so the agent is deterministic); that of a report exam is exact, over its report kinds.
Exams already ordered are not ordered again.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from components.diag.actions import ACTION_FORMAT
from components.diag.catalogue import Catalogue, ExamKind, default_catalogue, normalize
from components.diag.record import Case
from components.diag.results import parse_values
from components.diag.world import NOT_RECORDED, OBSERVATION_NOISE, FittedWorld, StatisticalWorldModel, to_scale

RESULT_BLOCK = re.compile(r"\AExam name:\n(?P<exam>[^\n]+)\nExam results:\n(?P<result>.*)\Z", re.DOTALL)
_TURNS = re.compile(r"You have (\d+) turns and may order up to (\d+) exams per turn")
_COMPLAINT = re.compile(r"Chief Complaint:\s*(?P<cc>[^\n]+)", re.IGNORECASE)
_SIDES = re.compile(r"\b(?:left|right|upper|middle|lower|anterior|inferior|lateral|anteroseptal)\b")


def order_text(exams: Sequence[str]) -> str:
    return json.dumps({"type": "order_exams", "exams": list(exams)})


def diagnose_text(diagnosis: str) -> str:
    return json.dumps({"type": "diagnose", "diagnosis": diagnosis})


def exam_results(observation: str) -> list[tuple[str, str]]:
    """The (exam, result) blocks of one observation, as DiagEnv writes them (blocks and notes are separated by a
    blank line, and no result holds one)."""
    out = []
    for block in observation.split("\n\n"):
        m = RESULT_BLOCK.match(block)
        if m:
            out.append((m.group("exam"), m.group("result")))
    return out


def turn_budget(first_observation: str, default: tuple[int, int] = (12, 4)) -> tuple[int, int]:
    """(turns, exams per turn) as the first observation states them."""
    m = _TURNS.search(first_observation)
    return (int(m.group(1)), int(m.group(2))) if m else default


def chief_complaint(first_observation: str) -> str:
    m = _COMPLAINT.search(first_observation.split(ACTION_FORMAT, 1)[0])
    return normalize(m.group("cc")) if m else ""


def report_kind(text: str) -> str:
    """What a report says, without what varies within one template (digits, sides): its impression if it has one."""
    head, sep, impression = text.partition("IMPRESSION:")
    return _SIDES.sub("_", re.sub(r"\d+(?:\.\d+)?", "#", normalize(impression if sep else head)))


def most_common_diagnosis(train: Iterable[Case]) -> str:
    counts = Counter(c.diagnosis for c in _train_only(train))
    if not counts:
        raise ValueError("no train cases")
    return min(counts, key=lambda d: (-counts[d], d))  # ties broken by name, so the choice is reproducible


def _train_only(cases: Iterable[Case]) -> list[Case]:
    cases = list(cases)
    other = sorted({c.split for c in cases} - {"train"})
    if other:
        raise ValueError(f"baselines are fit on the train split only; got cases of split(s) {other}")
    return cases


# ------------------------------------------------------------------------------------------------ random


class RandomExamsAgent:
    """k random catalogue exams, `per_turn` a turn, then `diagnosis`; draws seeded by (seed, episode key)."""

    def __init__(self, diagnosis: str, k: int = 4, per_turn: int = 2, seed: int = 0,
                 catalogue: Catalogue | None = None, name: str = "random"):
        self.name, self.diagnosis, self.k, self.per_turn, self.seed = name, diagnosis, k, per_turn, seed
        self.exams = sorted((catalogue or default_catalogue()).exams)

    @classmethod
    def fit(cls, train: Iterable[Case], **kwargs) -> RandomExamsAgent:
        return cls(most_common_diagnosis(train), **kwargs)

    def act(self, view) -> str:
        turns, _ = turn_budget(view.observations[0])
        picks = random.Random(f"{self.seed}:{view.key}").sample(self.exams, min(self.k, len(self.exams)))
        done = len(view.replies) * self.per_turn
        if done >= len(picks) or len(view.replies) >= turns - 1:
            return diagnose_text(self.diagnosis)
        return order_text(picks[done:done + self.per_turn])


# ------------------------------------------------------------------------------------------------ greedy


class DiseaseModel:
    """The posterior over the train split's diseases (see the module docstring)."""

    def __init__(self, fitted: FittedWorld, train: Iterable[Case], catalogue: Catalogue | None = None,
                 smoothing: float = 1.0):
        cat = self.catalogue = catalogue or default_catalogue()
        train = _train_only(train)
        self.keys = sorted(fitted.diseases)
        index = {k: i for i, k in enumerate(self.keys)}
        by_key: dict[str, Counter] = {k: Counter() for k in self.keys}
        complaints: dict[str, Counter] = {k: Counter() for k in self.keys}
        for c in train:
            if c.disease_key in index:
                by_key[c.disease_key][c.diagnosis] += 1
                complaints[c.disease_key][chief_complaint(c.profile)] += 1
        self.names = [min(by_key[k], key=lambda d: (-by_key[k][d], d)) if by_key[k] else k for k in self.keys]
        counts = np.array([fitted.diseases[k].cases for k in self.keys], dtype=float)
        self.log_prior = np.log(counts / counts.sum())
        vocab = sorted({cc for c in complaints.values() for cc in c})
        totals = np.array([sum(complaints[k].values()) for k in self.keys]) + smoothing * (len(vocab) + 1)
        self._complaint = {cc: np.log((np.array([complaints[k][cc] for k in self.keys]) + smoothing) / totals)
                           for cc in vocab}
        self._complaint_unseen = np.log(smoothing / totals)
        self.variables = {v: i for i, v in enumerate(fitted.variables)}
        self.mean = np.array([fitted.diseases[k].mean for k in self.keys])
        # a Gaussian stands in for a dipstick's discrete level: at least half a level of sd, or one level apart
        # would read as certainty
        floor = np.array([0.5 if cat.analytes[v].ordinal else 0.0 for v in fitted.variables])
        self.sd = np.maximum(np.array([fitted.diseases[k].sd for k in self.keys]), floor)
        self.corr = np.asarray(fitted.correlation)
        # per report exam: its report kinds and log P(kind | disease) (last column: a kind never seen)
        self.report_kinds: dict[str, dict[str, int]] = {}
        self.report_loglik: dict[str, np.ndarray] = {}
        for exam, bag in fitted.overall_texts.items():
            kinds = sorted({report_kind(r) for r in bag})
            col = {kind: j for j, kind in enumerate(kinds)}
            table = np.full((len(self.keys), len(kinds) + 1), smoothing)
            for i, key in enumerate(self.keys):
                for report, n in (fitted.texts.get(key, {}).get(exam) or bag).items():
                    table[i, col[report_kind(report)]] += n
            self.report_kinds[exam] = col
            self.report_loglik[exam] = np.log(table / table.sum(axis=1, keepdims=True))

    @classmethod
    def fit(cls, train: Iterable[Case], world: StatisticalWorldModel | None = None,
            catalogue: Catalogue | None = None) -> DiseaseModel:
        """`world`, if given, must be fit on the same train cases."""
        train = _train_only(train)
        world = world or StatisticalWorldModel.fit(train, catalogue)
        return cls(world.fitted, train, catalogue or world.catalogue)

    def complaint_loglik(self, complaint: str) -> np.ndarray:
        return self._complaint.get(complaint, self._complaint_unseen)

    def report_loglik_of(self, exam: str, report: str) -> np.ndarray:
        table = self.report_loglik.get(exam)
        if table is None:
            return np.zeros(len(self.keys))
        return table[:, self.report_kinds[exam].get(report_kind(report), table.shape[1] - 1)]

    def conditional(self, known: Sequence[int], new: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """New analytes given known ones, standardized within a disease: the gain G (mean = G z_known) and the
        covariance, conditioned as the statistical world samples them (observation noise on the known block)."""
        r_nn = self.corr[np.ix_(new, new)]
        if not known:
            return np.zeros((len(new), 0)), r_nn
        r_nk = self.corr[np.ix_(new, known)]
        gain = np.linalg.solve(self.corr[np.ix_(known, known)] + OBSERVATION_NOISE * np.eye(len(known)), r_nk.T).T
        cov = r_nn - gain @ r_nk.T
        return gain, (cov + cov.T) / 2 + 1e-6 * np.eye(len(new))

    def lab_loglik(self, z_known: np.ndarray, gain: np.ndarray, precision: np.ndarray, new: Sequence[int],
                   x: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """log p(x_new | known values, disease) up to a constant, for the diseases `rows` (all when None);
        x: (..., new) on the analytes' scales, z_known: (diseases, known); the result: (..., diseases)."""
        rows = np.arange(len(self.keys)) if rows is None else rows
        mean, sd = self.mean[np.ix_(rows, new)], self.sd[np.ix_(rows, new)]
        r = (x[..., None, :] - mean) / sd - z_known @ gain.T
        return -0.5 * np.einsum("...a,ab,...b->...", r, precision, r) - np.log(sd).sum(axis=1)




def _entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=axis)


def _normalize_log(logp: np.ndarray, axis: int = -1) -> np.ndarray:
    p = np.exp(logp - logp.max(axis=axis, keepdims=True))
    return p / p.sum(axis=axis, keepdims=True)


@dataclass
class Evidence:
    """What the observations so far say: the log posterior (unnormalized), the exams ordered and the lab values
    known (analyte index -> value on its scale, in the order they came)."""

    logpost: np.ndarray
    ordered: set[str]
    known: dict[int, float]


class GreedyOracleAgent:
    """Orders the most informative exam each turn, then diagnoses the most probable disease."""

    def __init__(self, model: DiseaseModel, threshold: float = 0.95, min_gain: float = 0.02, max_exams: int = 8,
                 per_turn: int = 1, draws: int = 16, seed: int = 0, name: str = "greedy"):
        self.model, self.name = model, name
        self.threshold, self.min_gain, self.max_exams, self.per_turn = threshold, min_gain, max_exams, per_turn
        # one fixed set of standard-normal draws for every expected-gain estimate: deterministic, and exams are
        # compared on the same draws
        self._eps = np.random.default_rng(seed).standard_normal((draws, len(model.variables)))
        self._labs = {name: [model.variables[a] for a in exam.analytes if a in model.variables]
                      for name, exam in model.catalogue.exams.items() if exam.kind in (ExamKind.LAB, ExamKind.PANEL)}
        analytes = model.catalogue.analytes
        self._inputs = {i: {model.variables.get(dep, -1) for dep in analytes[v].inputs}
                        for v, i in model.variables.items() if analytes[v].derive is not None}

    @classmethod
    def fit(cls, train: Iterable[Case], world: StatisticalWorldModel | None = None, **kwargs) -> GreedyOracleAgent:
        return cls(DiseaseModel.fit(train, world), **kwargs)

    def act(self, view) -> str:
        turns, per_turn_cap = turn_budget(view.observations[0])
        ev = self.evidence(view.observations)
        post = _normalize_log(ev.logpost)
        best = int(np.argmax(post))
        last_turn = turns - len(view.replies) <= 1
        if last_turn or post[best] >= self.threshold or len(ev.ordered) >= self.max_exams:
            return diagnose_text(self.model.names[best])
        gains = self.gains(post, ev)
        picks = [e for e, g in sorted(gains.items(), key=lambda kv: (-kv[1], kv[0])) if g >= self.min_gain]
        if not picks:
            return diagnose_text(self.model.names[best])
        return order_text(picks[:min(self.per_turn, per_turn_cap, self.max_exams - len(ev.ordered))])

    def evidence(self, observations: Sequence[str]) -> Evidence:
        m = self.model
        logp = m.log_prior + m.complaint_loglik(chief_complaint(observations[0]))
        ordered: set[str] = set()
        known: dict[int, float] = {}
        for obs in observations[1:]:
            for name, result in exam_results(obs):
                ordered.add(name)
                exam = m.catalogue.exams.get(name)
                if exam is None or result.strip() == NOT_RECORDED.format(exam=name):
                    continue
                if exam.kind not in (ExamKind.LAB, ExamKind.PANEL):
                    logp = logp + m.report_loglik_of(name, result)
                    continue
                values = {m.variables[a]: to_scale(m.catalogue.analytes[a], v)
                          for a, v in parse_values(result, exam, m.catalogue).items()
                          if a in m.variables and m.variables[a] not in known}  # a repeat tells little more
                values = {i: values[i] for i in self._informative(list(values), known)}
                if values:
                    new = list(values)
                    gain, cov = m.conditional(list(known), new)
                    logp = logp + m.lab_loglik(self._z(known), gain, np.linalg.inv(cov), new,
                                               np.array(list(values.values())))
                    known.update(values)
        return Evidence(logp, ordered, known)

    def _informative(self, new: list[int], known: Iterable[int]) -> list[int]:
        """`new` without derived values whose inputs are known or come with them: a derived value is a function of
        its inputs (the statistical world computes it so), and counting it again would double their evidence."""
        have = set(known) | {i for i in new if i not in self._inputs}
        return [i for i in new if not self._inputs.get(i, {-1}) <= have]

    def _z(self, known: dict[int, float]) -> np.ndarray:
        idx = list(known)
        return (np.array(list(known.values())) - self.model.mean[:, idx]) / self.model.sd[:, idx]

    def gains(self, post: np.ndarray, ev: Evidence) -> dict[str, float]:
        """Expected information gain (nats) of each exam not yet ordered."""
        m = self.model
        active = np.flatnonzero(post > 1e-4)
        p = post[active] / post[active].sum()
        h = float(_entropy(p))
        out: dict[str, float] = {}
        for name, table in m.report_loglik.items():
            if name not in ev.ordered:
                pk = p @ np.exp(table[active])  # P(report kind)
                after = _normalize_log(np.log(p)[:, None] + table[active], axis=0)  # disease x report kind
                out[name] = h - float(np.sum(pk * _entropy(after, axis=0)))
        z_known = self._z(ev.known)[active]
        for name, idx in self._labs.items():
            new = self._informative([i for i in idx if i not in ev.known], ev.known)
            if name in ev.ordered or not new:
                continue
            gain, cov = m.conditional(list(ev.known), new)
            mu = z_known @ gain.T  # (disease, new): where each disease puts the new values, given the known ones
            z = mu[:, None, :] + self._eps[:, new] @ np.linalg.cholesky(cov).T  # (disease, draw, new)
            x = m.mean[active][:, new][:, None, :] + m.sd[active][:, new][:, None, :] * z
            loglik = m.lab_loglik(z_known, gain, np.linalg.inv(cov), new, x, active)  # (disease, draw, disease)
            after = _normalize_log(np.log(p) + loglik)
            out[name] = h - float(np.sum(p * _entropy(after).mean(axis=1)))
        return out



BASELINES = ("random", "greedy")


def make_baselines(names: Sequence[str], train: Sequence[Case], world: StatisticalWorldModel | None = None,
                   seed: int = 0) -> list[RandomExamsAgent | GreedyOracleAgent]:
    """The named baselines, fit on `train` (the greedy one reads `world`, which must be fit on `train` too)."""
    unknown = sorted(set(names) - set(BASELINES))
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}; known: {', '.join(BASELINES)}")
    world = world if world is not None or "greedy" not in names else StatisticalWorldModel.fit(train, seed=seed)
    make = {"random": lambda: RandomExamsAgent.fit(train, seed=seed),
            "greedy": lambda: GreedyOracleAgent.fit(train, world, seed=seed)}
    return [make[n]() for n in names]
