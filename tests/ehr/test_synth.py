"""The synthetic EHR builder: deterministic bytes, and time lines / values that hang together."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from components.ehr import vocab
from components.ehr.synth import SCHEMAS, build_database


@pytest.mark.parametrize("schema", SCHEMAS)
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path, schema: str) -> None:
    a = build_database(schema, tmp_path / "a.sqlite", seed=7, n_patients=25)
    b = build_database(schema, tmp_path / "b.sqlite", seed=7, n_patients=25)
    c = build_database(schema, tmp_path / "c.sqlite", seed=8, n_patients=25)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert not list(tmp_path.glob("*.tmp"))


def test_unknown_schema_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="omop"):
        build_database("omop", tmp_path / "x.sqlite", seed=1)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def mimic(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    path = build_database("mimic_iii", tmp_path_factory.mktemp("m") / "m.sqlite", seed=3, n_patients=80)
    return sqlite3.connect(path)


def test_mimic_time_lines_are_consistent(mimic: sqlite3.Connection) -> None:
    adm = mimic.execute(
        "select subject_id, admittime, dischtime from admissions order by subject_id, admittime"
    ).fetchall()
    assert all("2100" <= a[1][:4] <= "2105" for a in adm)
    assert any(a[2] is None for a in adm), "some admissions must still be open (current hospital visit)"
    for (s1, _, d1), (s2, a2, _) in zip(adm, adm[1:], strict=False):
        if s1 == s2:
            assert d1 is not None and d1 < a2, "a patient's admissions must not overlap and only the last may be open"
    bad_icu = mimic.execute(
        "select count(*) from icustays i join admissions a on i.hadm_id = a.hadm_id where i.intime < a.admittime "
        "or (a.dischtime is not null and (i.outtime is null or i.outtime > a.dischtime))"
    ).fetchone()[0]
    assert bad_icu == 0
    for table, col in (
        ("labevents", "charttime"),
        ("prescriptions", "startdate"),
        ("diagnoses_icd", "charttime"),
        ("chartevents", "charttime"),
        ("microbiologyevents", "charttime"),
    ):
        outside = mimic.execute(
            f"select count(*) from {table} e join admissions a on e.hadm_id = a.hadm_id where e.{col} < a.admittime "
            f"or (a.dischtime is not null and e.{col} > a.dischtime) or e.{col} > '2105-12-31 23:59:00'"
        ).fetchone()[0]
        assert outside == 0, f"{table} events outside their admission"


def test_mimic_values_codes_and_costs(mimic: sqlite3.Connection) -> None:
    for label, _f, _c, unit, lo, hi in vocab.LABS[:10]:
        row = mimic.execute(
            "select min(valuenum), max(valuenum), min(valueuom) from labevents l join d_labitems d on l.itemid "
            "= d.itemid "
            "where d.label = ?",
            (label,),
        ).fetchone()
        if row[0] is not None:
            assert lo <= row[0] <= row[1] <= hi and row[2] == unit
    codes = mimic.execute("select icd9_code from d_icd_diagnoses").fetchall()
    assert len(codes) == len(set(codes)) and all(c[0].isalnum() for c in codes)
    for event_type, table in (
        ("labevents", "labevents"),
        ("prescriptions", "prescriptions"),
        ("diagnoses_icd", "diagnoses_icd"),
        ("procedures_icd", "procedures_icd"),
    ):
        n_events = mimic.execute(f"select count(*) from {table}").fetchone()[0]
        linked = mimic.execute(
            f"select count(*) from cost c join {table} e on c.event_id = e.row_id and c.hadm_id = e.hadm_id "
            "where c.event_type = ?",
            (event_type,),
        ).fetchone()[0]
        assert n_events > 0 and linked == n_events, f"every {table} row has its cost row"


def test_eicu_and_treqs_shapes(tmp_path: Path) -> None:
    eicu = sqlite3.connect(build_database("eicu", tmp_path / "e.sqlite", seed=2, n_patients=40))
    pids = [r[0] for r in eicu.execute("select uniquepid from patient")]
    assert all(len(p.split("-")) == 2 for p in pids)
    assert eicu.execute("select count(*) from patient where hospitaldischargetime is null").fetchone()[0] > 0
    assert eicu.execute("select count(*) from patient where unitadmittime < hospitaladmittime").fetchone()[0] == 0
    treqs = sqlite3.connect(build_database("treqs", tmp_path / "t.sqlite", seed=2, n_patients=40))
    # TREQS compares numbers written as strings; numeric affinity makes '9' < '45' hold as it should
    young = treqs.execute("select count(*) from demographic where demographic.'age' < '45'").fetchone()[0]
    assert young == treqs.execute("select count(*) from demographic where age < 45").fetchone()[0] > 0
    assert treqs.execute("select count(*) from demographic where admityear - dob_year != age").fetchone()[0] == 0
