"""The catalogue: its size and shape, exam-name matching and disease matching."""

from __future__ import annotations

import pytest

from components.diag.catalogue import ExamKind, code_category, default_catalogue, normalize, normalize_code

CAT = default_catalogue()


def test_at_least_30_diseases_and_80_exams_of_every_kind():
    assert len(CAT.diseases) >= 30 and len(CAT.exams) >= 80
    kinds = {e.kind for e in CAT.exams.values()}
    assert kinds == set(ExamKind)
    labs = [CAT.analytes[e.analytes[0]] for e in CAT.exams.values() if e.kind == ExamKind.LAB]
    assert all(a.ordinal or (a.unit is not None and (a.low is not None or a.high is not None)) for a in labs)
    assert sum(e.kind == ExamKind.IMAGING for e in CAT.exams.values()) >= 10
    assert all(e.normal for e in CAT.exams.values() if e.kind in (ExamKind.IMAGING, ExamKind.MICROBIOLOGY))
    for d in CAT.diseases.values():
        assert normalize_code(d.code) == d.code and d.synonyms and d.key


def test_icd_categories_are_unique_so_a_category_code_names_one_disease():
    categories = [code_category(d.code) for d in CAT.diseases.values()]
    assert len(categories) == len(set(categories))


def test_no_disease_name_reads_as_a_list():
    for d in CAT.diseases.values():
        for alias in (d.name, *d.synonyms):
            assert not any(sep in alias for sep in (";", "/", "|")), alias


@pytest.mark.parametrize(("text", "exam"), [
    ("CBC", "Complete blood count"), ("complete blood count", "Complete blood count"),
    ("Complete Blood Count!", "Complete blood count"), ("cbc w/ diff", "Complete blood count"),
    ("Na", "Sodium"), ("sodium", "Sodium"), ("Serum sodium level", "Sodium"), ("Na+", "Sodium"),
    ("BMP", "Basic metabolic panel"), ("chem-7", "Basic metabolic panel"), ("LFTs", "Hepatic function panel"),
    ("CXR", "Chest X-ray"), ("chest x ray", "Chest X-ray"), ("chest xray", "Chest X-ray"),
    ("CHEST (PA AND LAT)", "Chest X-ray"), ("EKG", "Electrocardiogram"), ("12-lead ECG", "Electrocardiogram"),
    ("trop", "Troponin I"), ("BUN", "Blood urea nitrogen"), ("Urea Nitrogen", "Blood urea nitrogen"),
    ("Asparate Aminotransferase (AST)", "Aspartate aminotransferase"), ("INR(PT)", "INR"),
    ("CT abd/pelvis", "CT abdomen and pelvis"), ("blood cultures", "Blood culture"), ("UA", "Urinalysis"),
    ("lumbar puncture", "Cerebrospinal fluid analysis"), ("C. diff", "Clostridioides difficile toxin"),
])
def test_exam_names_and_synonyms_match_ignoring_case_and_punctuation(text, exam):
    found = CAT.exam(text)
    assert found is not None and found.name == exam


@pytest.mark.parametrize("text", ["blood", "sodium potassium", "CBC, BMP", "", "a scan", "xyz"])
def test_no_substring_or_combined_matches(text):
    assert CAT.exam(text) is None


def test_unknown_names_get_close_suggestions():
    assert CAT.suggest("lipaze")[0] == "Lipase"
    assert "Troponin I" in CAT.suggest("troponine")


def test_components_earn_their_panels_credit():
    assert CAT.exams["Sodium"].credit == "Basic metabolic panel" and CAT.exams["Lipase"].credit == "Lipase"
    assert CAT.exams["Hematocrit"].panel == "Complete blood count"


@pytest.mark.parametrize(("text", "code"), [
    ("Community-acquired pneumonia", "J18.9"), ("pneumonia", "J18.9"), ("PNEUMONIA.", "J18.9"), ("J18.9", "J18.9"),
    ("j189", "J18.9"), ("J18", "J18.9"), ("NSTEMI", "I21.9"), ("I21.4", "I21.9"), ("likely acute pancreatitis", "K85.90"),
    ("DKA", "E10.10"), ("T39.1X2A", "T39.1X2A"),
])
def test_diseases_match_by_name_synonym_or_code(text, code):
    found = CAT.match_disease(text)
    assert found is not None and found.code == code


@pytest.mark.parametrize("text", ["pneumonia, sepsis", "pneumonia or pulmonary embolism", "infection", "Z99.9",
                                  "acute", ""])
def test_lists_generic_words_and_unknown_codes_match_no_disease(text):
    assert CAT.match_disease(text) is None


def test_normalize():
    assert normalize("  X-Ray (Chest)  ") == "x ray chest" and normalize("Crohn's") == "crohns"
