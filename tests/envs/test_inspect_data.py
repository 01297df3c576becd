"""inspect_data runs inside the sandbox and reports schemas, distinct values and near matches."""

from __future__ import annotations

import pytest

from components.envs.actions import InspectData
from components.envs.coding_env import CodingEnv, EnvConfig, make_sandbox_factory
from tests.envs.conftest import DRUGS, PRESCRIPTIONS, make_task, process_backend_unavailable


@pytest.fixture(scope="module")
def inspector(task_root):
    """One episode shared by the module: inspection leaves no state behind, and a sandbox start costs time."""
    if reason := process_backend_unavailable():
        pytest.skip(reason)
    cfg = EnvConfig(max_turns=100, loop_window=100, exec_timeout_s=10.0)
    env = CodingEnv(task_root, make_sandbox_factory(cfg, backend="process"), cfg)
    env.reset(make_task())
    yield env
    env.close()


def inspect(env: CodingEnv, **kw) -> str:
    return env.step(InspectData(**kw)).observation.text


def test_csv_schema(inspector):
    text = inspect(inspector, path="data/patients.csv")
    assert "CSV, 10 rows, 4 columns" in text
    assert "age (int64)" in text and "sodium (float64)" in text
    assert "sex (object)" in text or "sex (str)" in text  # pandas 3 infers a string dtype
    assert "138.0" in text  # head rows


def test_csv_column_values_and_near_match(inspector):
    text = inspect(inspector, path="data/patients.csv", column="SEX", value="f")
    assert "sex: 2 distinct value(s)" in text and "F (6)" in text and "M (4)" in text
    assert "values closest to the one asked for: 'F'" in text


def test_sqlite_schema_lists_tables_columns_and_counts(inspector):
    text = inspect(inspector, path="data/pharmacy.db")
    assert "SQLite database, 2 table(s)" in text
    assert f"prescriptions ({len(PRESCRIPTIONS)} rows): subject_id INTEGER, drug TEXT, dose_val_rx TEXT" in text
    assert "patients (7 rows): subject_id INTEGER, gender TEXT" in text


def test_sqlite_near_matches_find_the_real_spelling(inspector):
    text = inspect(inspector, path="data/pharmacy.db", column="prescriptions.drug", value="Aspirin")
    assert f"prescriptions.drug: {len(DRUGS)} distinct value(s)" in text
    near_line = next(line for line in text.splitlines() if "closest" in line)
    assert "'aspirin ec 325 mg'" in near_line and "'Aspirin 81 mg chewable'" in near_line
    assert "heparin" not in near_line


def test_sqlite_bare_column_name_searches_every_table_and_typos_match(inspector):
    text = inspect(inspector, path="data/pharmacy.db", column="drug", value="metoprolol tartarate")
    assert "prescriptions.drug" in text
    assert "'metoprolol tartrate'" in next(line for line in text.splitlines() if "closest" in line)


def test_fasta_ids_and_lengths(inspector):
    text = inspect(inspector, path="data/seqs.fasta", value="brca1")
    assert "FASTA, 3 record(s), total length 26" in text
    assert "seqA: length 14" in text and "seqB: length 4" in text
    assert "closest record ids: brca1_fragment" in text


def test_missing_file_lists_what_is_there(inspector):
    text = inspect(inspector, path="patients.csv")
    assert "no such file" in text and "data/patients.csv" in text
    assert inspector.episode.turns[-1].error.kind == "InspectDataError"


def test_unknown_column_is_reported(inspector):
    text = inspect(inspector, path="data/pharmacy.db", column="drug_name")
    assert "no column 'drug_name'" in text
