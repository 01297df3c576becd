"""The diag stages behind the flows (build, import: validated and tracked in MLflow; a failing validation stops
them) and the `medgym diag` commands' wiring. The stage test is slow here (MLflow's store, Great Expectations)."""

from __future__ import annotations

import contextlib
import json

import pytest
from typer.testing import CliRunner

from components.diag.record import load_cases
from components.profile.config import PipelineConfig
from tests.diag.conftest import write_diaggym


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_build_and_import_stages_write_validate_and_track(tmp_path):
    from mlflow.tracking import MlflowClient

    from components.diag.cohort import CohortConfig, build_cohort
    from components.diag.importer import ImportOptions
    from components.diag.record import save_cases
    from flows.diag import CaseValidationError, build_cohort_stage, import_stage, validate_or_raise

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = PipelineConfig.model_validate({"profile": "diag-test", "tracking": {
        "mlflow_uri": uri, "artifact_location": str(tmp_path / "artifacts"), "experiment": "diag-test"}})
    built = build_cohort_stage(cfg, tmp_path / "cohort", CohortConfig(seed=3, patients=40))
    cases = load_cases(tmp_path / "cohort" / "cases.jsonl")
    assert built["cases"] == len(cases) and sum(built["splits"].values()) == len(cases)
    assert json.loads((tmp_path / "cohort" / "validation.json").read_text())["success"]

    report = import_stage(cfg, write_diaggym(tmp_path / "src" / "train.json"), tmp_path / "imported", ImportOptions())
    assert report.imported == 3 and (tmp_path / "imported" / "validation.json").is_file()

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("diag-test").experiment_id])
    by_stage = {r.data.tags["medgym.stage"]: r for r in runs}
    assert set(by_stage) == {"diag.build", "diag.import"}
    assert by_stage["diag.build"].data.metrics["cases"] == len(cases)
    assert by_stage["diag.build"].data.params["seed"] == "3"
    assert by_stage["diag.import"].data.metrics["imported"] == 3

    bad = build_cohort(CohortConfig(patients=5, seed=0))
    bad[1] = bad[1].model_copy(update={"case_id": bad[0].case_id})
    save_cases(tmp_path / "bad" / "cases.jsonl", bad)
    with pytest.raises(CaseValidationError, match="expect_column_values_to_be_unique"):
        validate_or_raise(tmp_path / "bad" / "cases.jsonl")
    assert not json.loads((tmp_path / "bad" / "validation.json").read_text())["success"]


def test_the_diag_commands_pass_their_options_to_the_flows(monkeypatch, tmp_path):
    import flows.diag
    import flows.runtime
    from components.diag.importer import ImportReport
    from flows.cli_diag import app

    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(flows.runtime, "prefect_api", contextlib.nullcontext)
    monkeypatch.setattr(flows.diag, "build_cohort_flow", lambda **kw: calls.append(("build", kw)) or {"cases": 1})
    report = ImportReport(files=[], records=2, imported=1, malformed=["f.json, record 'x', field 'events': missing"],
                          diagnoses_matched=1, events=3, events_matched=2, unmatched_labels={}, splits={"train": 1})
    monkeypatch.setattr(flows.diag, "import_flow", lambda **kw: calls.append(("import", kw)) or report)
    runner = CliRunner()
    res = runner.invoke(app, ["build", "--out", str(tmp_path / "c"), "--seed", "4", "--patients", "25"])
    assert res.exit_code == 0, res.output
    assert calls[-1] == ("build", {"out_dir": tmp_path / "c", "seed": 4, "patients": 25, "test_fraction": 0.2,
                                   "profile": "demo"})
    res = runner.invoke(app, ["import", str(tmp_path / "src"), "--out", str(tmp_path / "o"), "--strict"])
    assert res.exit_code == 0, res.output
    assert calls[-1] == ("import", {"src": tmp_path / "src", "out_dir": tmp_path / "o", "seed": 0, "test_fraction": 0.2,
                                    "strict": True, "profile": "demo"})
    assert "field 'events': missing" in res.output
    assert runner.invoke(app, ["build"]).exit_code != 0  # --out is required

