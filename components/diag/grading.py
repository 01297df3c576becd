"""Grading a diagnostic episode: is the diagnosis right, and the reward.

A diagnosis is right when the whole answer names the case's disease: a name or synonym (case, punctuation and a
leading hedge such as "likely" ignored), its ICD-10 code (full, or the three-character category where only this
disease has it), a name with its code ("Acute pancreatitis (K85.9)", "K85.9 - Acute pancreatitis": both parts must
agree), or, for an imported case outside the catalogue, the recorded diagnosis text. Nothing is matched by
substring, so a list of candidates ("pneumonia, sepsis or PE") is no diagnosis. A verdict also says whether the
answer was well formed (a right one, or one that is not a list and not overlong): a figure to read, never paid.

Reward = correct * (w_acc - w_turn * turns) + w_f1 * exam F1. Exam F1 compares the exams ordered with the case's
key exams, both counted under their credit names (a lab ordered alone counts as its panel;
components.diag.catalogue.Exam.credit) and each once. Only a right diagnosis earns anything for ending the case,
and the turns it took are taken off that: a wrong diagnosis earns exactly what the same exams and no diagnosis at
all earn, at any turn. A reward that charged every episode its turns, or paid a well-formed wrong answer, paid for
stopping: with accuracy near zero, one round of exams and then any short diagnosis beat working the case up, and
GRPO learned that (2 turns, accuracy 0).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from components.diag.actions import clean_text
from components.diag.catalogue import Catalogue, normalize, normalize_code, strip_hedges
from components.diag.record import Case
from components.envs.episode import RewardParts

_PREFIX = re.compile(r"^(?:final\s+)?diagnosis\s*:\s*", re.IGNORECASE)
_CODE = r"[A-Za-z][0-9][0-9A-Za-z](?:\.[0-9A-Za-z]{1,4}|[0-9A-Za-z]{1,4})?"
_NAME_CODE = re.compile(rf"^(?P<name>.+?)\s*[(\[]\s*(?:ICD-?10(?:-CM)?\s*:?\s*)?(?P<code>{_CODE})\s*[)\]]$", re.IGNORECASE)
_CODE_NAME = re.compile(rf"^(?:ICD-?10(?:-CM)?\s*:?\s*)?(?P<code>{_CODE})(?:\s*[-:–—]\s*|\s+)(?P<name>.+)$", re.IGNORECASE)
_LIST = re.compile(r"[,;/|\n]|\b(?:or|and|vs|versus)\b|^\s*(?:\d+[.)]|[-*•])\s", re.IGNORECASE)


class RewardConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    w_acc: float = Field(default=1.0, ge=0, description="weight of a correct diagnosis")
    w_f1: float = Field(default=0.5, ge=0, description="weight of exam-recommendation F1 against the key exams")
    w_turn: float = Field(default=0.02, ge=0, description="taken off a right diagnosis for each turn it took")
    max_diagnosis_chars: int = Field(default=120, ge=10, description="a longer answer is not well formed")


class DiagnosisVerdict(BaseModel):
    correct: bool
    well_formed: bool
    matched: str | None  # what the answer named: a catalogue code, or "case" for the case's own text
    reason: str  # GRADER ONLY: names the true diagnosis


def clean_diagnosis(answer: str) -> str:
    return clean_text(_PREFIX.sub("", clean_text(answer)))


def looks_like_list(text: str) -> bool:
    return bool(_LIST.search(text))


def grade_diagnosis(answer: str, case: Case, catalogue: Catalogue, config: RewardConfig | None = None
                    ) -> DiagnosisVerdict:
    config = config or RewardConfig()
    text = clean_diagnosis(answer)
    truth = f"{case.diagnosis} ({case.icd10})" if case.icd10 else case.diagnosis
    matched = _match(text, case, catalogue)
    correct = matched is not None
    well_formed = correct or (bool(text) and len(text) <= config.max_diagnosis_chars and not looks_like_list(text))
    why = "matches" if correct else ("is a list of candidates, not one diagnosis" if looks_like_list(text)
                                      else "does not match")
    return DiagnosisVerdict(correct=correct, well_formed=well_formed, matched=matched,
                            reason=f"{text!r} {why} the true diagnosis {truth}")


def _match(text: str, case: Case, catalogue: Catalogue) -> str | None:
    if not text:
        return None
    disease = catalogue.disease(case.icd10)
    own = normalize(case.diagnosis)

    def name_ok(name: str) -> bool:
        norm = normalize(strip_hedges(name))
        return norm == own or (disease is not None and norm in catalogue.disease_aliases(disease))

    def code_ok(code: str) -> bool:
        canon = normalize_code(code)
        if canon is None:
            return False
        if disease is not None:
            return catalogue.disease_by_code(canon) is disease
        return case.icd10 is not None and canon.replace(".", "") == case.icd10.replace(".", "").upper()

    if normalize_code(text) is not None:
        return (case.icd10 or "case") if code_ok(text) else None
    if name_ok(text):
        return case.icd10 or "case"
    for pattern in (_NAME_CODE, _CODE_NAME):
        m = pattern.match(text)
        if m and code_ok(m.group("code")) and name_ok(m.group("name")):
            return case.icd10 or "case"
    return None


def reward(config: RewardConfig, correct: bool, exam_f1: float, turns: int) -> RewardParts:
    parts = {"accuracy": config.w_acc * float(correct), "exam_f1": config.w_f1 * exam_f1,
             "turn_penalty": -config.w_turn * turns * float(correct)}
    return RewardParts(**parts, total=sum(parts.values()))
