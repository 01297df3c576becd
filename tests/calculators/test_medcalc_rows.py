"""Recompute MedCalc-Bench release rows from their "Relevant Entities" with our formulas.

Reads the sample at ../shared/medagentgym-sample/medcalcbench (skipped where absent, e.g. a fresh clone).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.tasks.calculators.medcalc_rows import Unsupported, compute_row, parse_entities

SAMPLE = (
    Path(__file__).resolve().parents[2].parent / "shared" / "medagentgym-sample" / "medcalcbench" / "test_tasks.jsonl"
)


def _rows() -> list[dict]:
    if not SAMPLE.exists():
        pytest.skip(f"MedCalc-Bench sample not found at {SAMPLE} (it lives beside the repository in ../shared)")
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


def _ckd_epi_kappa_bug(row: dict) -> bool:
    """MedCalc-Bench's original code used kappa 0.7 (not 0.9) for men with creatinine <= 0.9 mg/dL."""
    e = parse_entities(row["Relevant Entities"])
    if row["Calculator Name"] != "CKD-EPI Equations for Glomerular Filtration Rate" or e["sex"] != "Male":
        return False
    value, unit = e["creatinine"]
    mg_dl = value if unit == "mg/dL" else value * 113.12 / 10000
    return mg_dl <= 0.92


def test_sample_rows_recomputed_within_their_limits():
    checked = 0
    for row in _rows():
        if _ckd_epi_kappa_bug(row):
            continue
        try:
            value = compute_row(row["Calculator Name"], row["Relevant Entities"])
        except Unsupported:
            continue
        lo, hi = sorted((float(row["Lower Limit"]), float(row["Upper Limit"])))
        assert lo <= value <= hi, (row["Row Number"], row["Calculator Name"], value, lo, hi)
        checked += 1
    assert checked >= 30


def test_unknown_calculator_is_reported():
    with pytest.raises(Unsupported, match="no adapter"):
        compute_row("APACHE II Score", {})
