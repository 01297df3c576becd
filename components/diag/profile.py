"""The patient profile as text: the initial inquiry DiagGym shows an agent (demographics, chief complaint, history of
present illness, past medical history, medications, social and family history, allergies, physical exam).

The text comes from the disease's complaints, symptoms and findings (shared with its look-alikes), pertinent
negatives, the patient's comorbidities and vital signs; it never names the diagnosis (the case validation checks
that every name and synonym of the case's disease is absent).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from components.diag.catalogue import Disease
from components.diag.disease_data import Comorbidity
from components.diag.record import Finding

SYSTEMS = ("General", "HEENT", "Neck", "Cardiovascular", "Lungs", "Abdomen", "Rectal", "Extremities", "Skin", "Neuro")
NORMAL_EXAM = {
    "General": "alert, in no acute distress",
    "HEENT": "normocephalic, atraumatic",
    "Neck": "supple",
    "Cardiovascular": "no murmurs, rubs or gallops",
    "Lungs": "clear to auscultation bilaterally",
    "Abdomen": "soft, non-tender, non-distended, normal bowel sounds",
    "Extremities": "warm, no edema",
    "Skin": "no rashes",
    "Neuro": "alert and oriented, no focal deficits",
}
NONSPECIFIC = ("poor sleep", "decreased appetite", "mild fatigue", "a mild headache", "feeling generally unwell")
SOCIAL = {
    "tobacco use": "Smokes one pack of cigarettes per day.",
    "alcohol use disorder": "Drinks six to eight beers daily.",
}
SOCIAL_DEFAULT = ("Never smoker, drinks alcohol socially.", "Former smoker, quit 10 years ago; no alcohol.",
                  "No tobacco, alcohol or drug use.", "Occasional alcohol; never smoker.")
FAMILY = ("Non-contributory.", "Father with coronary artery disease.", "Mother with type 2 diabetes mellitus.",
          "Mother with breast cancer.", "Father with hypertension and prostate cancer.", "No known family history of disease.")
ALLERGIES = ("No known drug allergies.", "No known drug allergies.", "No known drug allergies.", "Penicillin (rash).",
             "Sulfa drugs (hives).", "Codeine (nausea).")


def fill(text: str, slots: Mapping[str, object]) -> str:
    return text.format_map(slots) if "{" in text else text


def _join(items: Sequence[str], word: str = "and") -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {word} {items[-1]}"


def _strip_article(text: str) -> str:
    for article in ("a ", "an "):
        if text.startswith(article):
            return text[len(article):]
    return text


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."


def vital_signs(values: Mapping[str, float]) -> str:
    return (f"T {values['Temperature']:.1f} C, HR {values['Heart rate']:.0f}, BP {values['Systolic blood pressure']:.0f}/"
            f"{values['Diastolic blood pressure']:.0f} mmHg, RR {values['Respiratory rate']:.0f}, SpO2 "
            f"{values['SpO2']:.0f}% on room air")


def physical_exam(rng: random.Random, disease: Disease, slots: Mapping[str, object],
                  vitals: Mapping[str, float]) -> list[Finding]:
    found: dict[str, list[str]] = {}
    for system, text, p in disease.findings:
        if rng.random() < p:
            found.setdefault(system, []).append(fill(text, slots))
    out = [Finding(exam_name="Vital signs", exam_results=vital_signs(vitals))]
    for system in SYSTEMS:
        text = "; ".join(found[system]) if system in found else NORMAL_EXAM.get(system)
        if text:
            out.append(Finding(exam_name=system, exam_results=text[0].upper() + text[1:]))
    return out


def write_profile(rng: random.Random, disease: Disease, age: int, sex: str, comorbidities: Sequence[Comorbidity],
                  history: Sequence[str], slots: Mapping[str, object], exam: Sequence[Finding]) -> str:
    """The initial inquiry for one admission (`history`: past history beyond the comorbidities, e.g. a prior
    admission)."""
    he, noun = ("He", "man") if sex == "M" else ("She", "woman")
    female = sex == "F"
    pmh = [c.name for c in comorbidities if not c.social] + list(history)
    pmh_phrase = f"a history of {_join(pmh[:3])}" if pmh else "no significant past medical history"
    complaint = fill(rng.choice(disease.complaints), slots)
    duration = rng.choice(disease.durations)
    symptoms = []
    for text, p in disease.symptoms:
        if text.startswith("F:"):
            if not female:
                continue
            text = text[2:]
        if rng.random() < p:
            symptoms.append(fill(text, slots))
    if not symptoms:
        symptoms.append(fill(disease.symptoms[0][0].removeprefix("F:"), slots))
    if rng.random() < 0.25:
        symptoms.append(rng.choice(NONSPECIFIC))
    negatives = rng.sample(list(disease.negatives), k=min(len(disease.negatives), rng.randint(2, 3)))
    hpi = (f"{age}-year-old {noun} with {pmh_phrase} who presents with {complaint} (onset {duration} ago). "
           f"{he} reports {_join(symptoms)}. {he} denies {_join(negatives, 'or')}.")
    meds = [m for c in comorbidities for m in c.medications]
    social = " ".join(SOCIAL[c.name] for c in comorbidities if c.social and c.name in SOCIAL) or rng.choice(SOCIAL_DEFAULT)
    cc = _strip_article(complaint)
    cc = cc[0].upper() + cc[1:]
    lines = [
        f"- Patient Information: {age} y/o {sex}",
        f"- Chief Complaint: {cc}",
        f"- History of Present Illness: {hpi}",
        f"- Past Medical History: {_sentence(', '.join(pmh)) if pmh else 'None.'}",
        f"- Medications: {'; '.join(meds) + '.' if meds else 'None.'}",
        f"- Social History: {social}",
        f"- Family History: {rng.choice(FAMILY)}",
        f"- Allergy History: {rng.choice(ALLERGIES)}",
        "- Physical Examination:",
        *(f"  {f.exam_name}: {f.exam_results}" for f in exam),
    ]
    return "\n".join(lines)
