"""Every reference query of the public sample runs on the synthetic schemas, and re-grounding gives it answers."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from components.common.io import iter_jsonl
from components.ehr.reground import answers_on_real_db, reground, reground_dataset, run_query
from components.ehr.sqltime import postprocess
from components.ehr.synth import build_database

DATASETS = ("mimic_iii", "eicu", "treqs")


def _rows(sample: Path, dataset: str) -> list[tuple[int, dict]]:
    path = sample / dataset / "train_tasks.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return list(iter_jsonl(path))


@pytest.mark.parametrize("dataset", DATASETS)
def test_sample_queries_run_without_error_on_unseeded_db(sample_release: Path, tmp_path: Path, dataset: str) -> None:
    con = sqlite3.connect(build_database(dataset, tmp_path / "db.sqlite", seed=0, n_patients=30))  # type: ignore[arg-type]
    rows = _rows(sample_release, dataset)
    errors = [
        (row["id"], err) for _, row in rows for _, err in [run_query(con, postprocess(row["query"], dataset))] if err
    ]
    assert not errors


@pytest.mark.parametrize("dataset", DATASETS)
def test_reground_sample_gives_nonempty_answers(sample_release: Path, tmp_path: Path, dataset: str) -> None:
    rows = _rows(sample_release, dataset)
    possible = [(line, r) for line, r in rows if not r.get("is_impossible")]
    results = reground(possible, dataset, tmp_path / "seeded.sqlite", seed=0)
    assert [r.line for r in results] == [line for line, _ in possible]
    assert all(r.error is None for r in results), [r.error for r in results if r.error]
    frac = sum(r.nonempty for r in results) / len(results)
    assert frac >= 0.9, f"{dataset}: only {frac:.2f} non-empty; failing: {[r.id for r in results if not r.nonempty]}"
    # the stored answers are what the SQL returns on the written database
    again = answers_on_real_db(possible, dataset, tmp_path / "seeded.sqlite")
    assert [r.answer for r in again] == [r.answer for r in results]


def test_reground_dataset_layout_and_determinism(sample_release: Path, tmp_path: Path) -> None:
    rows = _rows(sample_release, "treqs")
    rel, res = reground_dataset(rows, "treqs", tmp_path / "a", seed=5)
    rel2, res2 = reground_dataset(rows, "treqs", tmp_path / "b", seed=5)
    assert rel == rel2 == "files/ehr/treqs.sqlite"
    assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    assert json.dumps([r.answer for r in res]) == json.dumps([r.answer for r in res2])
    with pytest.raises(ValueError, match="ehrcon"):
        reground_dataset(rows, "ehrcon", tmp_path / "c", seed=5)


def test_postprocess_pins_now_like_ehrsql() -> None:
    sql = (
        "select strftime('%y',x.t), strftime('%j',current_time) - strftime('%j',x.t) from x "
        "where datetime(x.t) >= datetime(current_time,'-1 year')"
    )
    out = postprocess(sql, "mimic_iii")
    assert "current_time" not in out and out.count("'2105-12-31 23:59:00'") == 2
    assert "'%Y'" in out and "'%J'" in out and "'%j'" not in out
    assert postprocess(
        "select 1 from demographic where demographic.'diagnosis' = 'alzheimer's disease'", "treqs"
    ).endswith("'alzheimer''s disease'")


def test_bad_row_is_named(tmp_path: Path) -> None:
    from components.common.io import RecordError

    with pytest.raises(RecordError, match="line 3.*query"):
        reground([(3, {"id": "x"})], "treqs", tmp_path / "x.sqlite", seed=0)


def test_seeding_keeps_time_lines_consistent(sample_release: Path, tmp_path: Path) -> None:
    rows = _rows(sample_release, "mimic_iii")
    reground(rows, "mimic_iii", tmp_path / "m.sqlite", seed=1)
    con = sqlite3.connect(tmp_path / "m.sqlite")
    adm = con.execute(
        "select subject_id, admittime, dischtime from admissions order by subject_id, admittime"
    ).fetchall()
    overlaps = [(a, b) for a, b in zip(adm, adm[1:], strict=False) if a[0] == b[0] and (a[2] is None or a[2] >= b[1])]
    assert not overlaps
    named = {int(r["value"]["patient_id"]) for _, r in rows if "patient_id" in r.get("value", {})}
    for sid in named:
        stays = [a for a in adm if a[0] == sid]
        assert any(a[2] is None for a in stays) and sum(a[2] is not None for a in stays) >= 2, sid
    outside = con.execute(
        "select count(*) from labevents e join admissions a on e.hadm_id = a.hadm_id where e.charttime < a.admittime "
        "or (a.dischtime is not null and e.charttime > a.dischtime) or e.charttime > '2105-12-31 23:59:00'"
    ).fetchone()[0]
    assert outside == 0
