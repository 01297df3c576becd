"""A run folder belongs to the inputs of the run that started it: a run on other data or another starting model
is refused before it resumes those checkpoints (SFT/DPO/verifier stages and the coding GRPO stage share this)."""

from __future__ import annotations

import json

import pytest

from components.training.stage import RUN_MARKER, RunConflictError, claim_run_dir


def test_a_run_folder_is_claimed_once_and_refused_to_other_inputs(tmp_path):
    out = tmp_path / "run"
    first = {"dataset": "a" * 64, "init": "base"}
    claim_run_dir(out, first, "pass --fresh to start over")
    assert json.loads((out / RUN_MARKER).read_text()) == first
    claim_run_dir(out, dict(first), "pass --fresh to start over")  # the same inputs resume
    with pytest.raises(RunConflictError, match=r"dataset aaaaaaaaaaaa…, init base\); this one is dataset "
                                               r"bbbbbbbbbbbb…, init base: pass --fresh to start over"):
        claim_run_dir(out, {"dataset": "b" * 64, "init": "base"}, "pass --fresh to start over")
    with pytest.raises(RunConflictError, match="init sft"):
        claim_run_dir(out, {"dataset": "a" * 64, "init": "sft"}, "pass --fresh to start over")
    assert json.loads((out / RUN_MARKER).read_text()) == first  # a refused run leaves the claim as it was
