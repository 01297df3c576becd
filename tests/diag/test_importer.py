"""The DiagGym importer on records written in DiagGym's training layout: cases, profiles without the outcome,
matched diagnoses and exams, time order, key exams, split by patient; and malformed input named by file, record and
field."""

from __future__ import annotations

import copy
import json

import pytest

from components.common.io import RecordError
from components.diag.importer import DiagRecordError, ImportOptions, import_diaggym, primary_diagnosis
from components.diag.record import load_cases
from tests.diag.conftest import diaggym_records, write_diaggym


def test_records_become_cases(tmp_path):
    src = write_diaggym(tmp_path / "src" / "train.json")
    report = import_diaggym(src, tmp_path / "out")
    assert (report.records, report.imported, report.malformed) == (3, 3, [])
    assert report.diagnoses_matched == 2 and report.unmatched_labels == {"Angiotensin Converting Enzyme": 1}
    cases = {c.case_id: c for c in load_cases(tmp_path / "out" / "cases.jsonl")}
    assert json.loads((tmp_path / "out" / "import_report.json").read_text())["imported"] == 3

    pna = cases["10000032-DS-22"]
    assert (pna.patient_id, pna.source, pna.sex) == ("10000032", "diaggym", "M")
    assert pna.diagnosis == "Community acquired pneumonia" and pna.icd10 == "J18.9"
    assert pna.metadata["discharge_diagnosis"].startswith("Primary:")
    assert [e.time for e in pna.events] == sorted(e.time for e in pna.events)
    assert [e.exam for e in pna.events] == ["White blood cell count", "Blood urea nitrogen", "Sodium", "Chest X-ray",
                                            "Blood culture", "Procalcitonin"]
    assert [e.label for e in pna.events][:3] == ["White Blood Cells", "Urea Nitrogen", "Sodium"]  # kept as recorded
    assert pna.key_exams == ["Complete blood count", "Basic metabolic panel", "Chest X-ray", "Blood culture",
                             "Procalcitonin"]  # under their credit names, in time order
    assert pna.physical_exam[0].exam_name == "Vital signs" and "crackles at the right base" in pna.profile
    for hidden in ("Discharge Diagnosis", "Brief Hospital Course", "Pertinent Results", "Discharge Medications",
                   "levofloxacin", "DISCHARGE EXAM", "Major Surgical"):
        assert hidden not in pna.profile
    assert "History of Present Illness" in pna.profile and "Chief Complaint" in pna.profile
    assert "pneumonia" not in pna.profile.lower()

    assert cases["10000032-DS-23"].icd10 == "K85.90" and cases["10000032-DS-23"].split == pna.split
    sarc = cases["10000450-DS-5"]
    assert sarc.icd10 is None and sarc.diagnosis == "Sarcoidosis" and sarc.key_exams == ["Angiotensin Converting Enzyme"]
    assert sarc.events[0].exam is None and "bronchoscopy" not in sarc.profile


def test_a_folder_of_files_is_imported_and_a_note_id_only_once(tmp_path):
    records = diaggym_records()
    write_diaggym(tmp_path / "src" / "a.json", {k: records[k] for k in list(records)[:2]})
    write_diaggym(tmp_path / "src" / "b" / "c.json", {k: records[k] for k in list(records)[1:]})
    report = import_diaggym(tmp_path / "src", tmp_path / "out")
    assert report.imported == 3 and len(report.files) == 2
    assert report.malformed == [f"{tmp_path / 'src' / 'b' / 'c.json'}, record '10000032-DS-23': note id already "
                                "imported from an earlier file"]


def _broken(edit) -> dict:
    records = copy.deepcopy(diaggym_records())
    edit(records)
    return records


BROKEN = [
    (lambda r: r["10000032-DS-22"].pop("events"), "10000032-DS-22", "events", "missing"),
    (lambda r: r["10000032-DS-22"]["events"][1].update(source="lab_results"), "10000032-DS-22", "events[1].source",
     "is not one of lab, microbiology, radiology"),
    (lambda r: r["10000032-DS-23"]["events"][0]["data"].pop("label"), "10000032-DS-23", "events[0].data.label",
     "missing"),
    (lambda r: r["10000032-DS-23"]["events"][2]["data"].update(lab_data=None), "10000032-DS-23",
     "events[2].data.lab_data", "missing"),
    (lambda r: r["10000450-DS-5"].update(discharge_diagnosis=""), "10000450-DS-5", "discharge_diagnosis", "empty"),
    (lambda r: r["10000450-DS-5"].update(text=42), "10000450-DS-5", "text", "expected text"),
    (lambda r: r["10000450-DS-5"]["reformat_physical_exam"].append({"exam_name": "Neuro"}), "10000450-DS-5",
     "reformat_physical_exam[1].exam_results", "missing"),
    (lambda r: r.update({"10000999-DS-1": ["not", "a", "record"]}), "10000999-DS-1", None, "expected a JSON object"),
]


@pytest.mark.parametrize(("edit", "record", "field", "problem"), BROKEN)
def test_a_malformed_record_is_named_by_file_record_and_field(tmp_path, edit, record, field, problem):
    src = write_diaggym(tmp_path / "train.json", _broken(edit))
    report = import_diaggym(src, tmp_path / "out")
    (message,) = report.malformed
    where = f"{src}, record '{record}'" + (f", field '{field}'" if field else "")
    assert message.startswith(where + ": ") and problem in message
    assert report.imported == report.records - 1  # the good records are still imported
    with pytest.raises(DiagRecordError) as info:
        import_diaggym(src, tmp_path / "strict", ImportOptions(strict=True))
    assert isinstance(info.value, RecordError) and (info.value.record, info.value.field) == (record, field)


@pytest.mark.parametrize(("content", "problem"), [("{not json", "not valid JSON"),
                                                  ("[1, 2]", "expected a JSON object keyed by note id, got list")])
def test_a_file_that_is_not_a_diaggym_object_is_named(tmp_path, content, problem):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.json").write_text(content)
    write_diaggym(tmp_path / "src" / "good.json")
    report = import_diaggym(tmp_path / "src", tmp_path / "out")
    assert report.imported == 3 and report.malformed[0].startswith(f"{tmp_path / 'src' / 'bad.json'}: {problem}")
    with pytest.raises(DiagRecordError, match=problem):
        import_diaggym(tmp_path / "src", tmp_path / "strict", ImportOptions(strict=True))


def test_missing_source_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        import_diaggym(tmp_path / "nope", tmp_path / "out")


@pytest.mark.parametrize(("text", "want"), [
    ("Primary:\nSepsis\nSecondary:\nUTI", "Sepsis"), ("PRIMARY DIAGNOSIS: Acute pancreatitis", "Acute pancreatitis"),
    ("1. Pulmonary embolism\n2. DVT", "Pulmonary embolism"), ("Primary diagnoses:\n\n- NSTEMI", "NSTEMI"),
    ("Primary:", ""),
])
def test_the_primary_diagnosis_is_the_first_line_that_is_not_a_header(text, want):
    assert primary_diagnosis(text) == want
