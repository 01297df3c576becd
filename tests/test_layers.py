"""Layers run one way: nothing below the composition layer (components/pipeline, the profile's schema) imports the
profile. An engine is handed the settings it reads (components/training/stage.py's TrainingProfile, say)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPOSITION = {"pipeline", "config.py"}  # components/pipeline/ and the profile's schema itself


def _imports_the_profile(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "components.config":
            found += [f"{path.relative_to(ROOT)}:{node.lineno}" for a in node.names if a.name == "PipelineConfig"]
    return found


def test_no_module_below_the_composition_layer_imports_the_profile():
    below = [p for p in (ROOT / "components").rglob("*.py")
             if p.relative_to(ROOT / "components").parts[0] not in COMPOSITION]
    assert len(below) > 100  # the walk reached the engines
    assert [hit for p in below for hit in _imports_the_profile(p)] == []
