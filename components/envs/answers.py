"""How a program's printed output reads as an answer (the scripted teacher and the solvability check read it alike)."""

from __future__ import annotations

import json
from typing import Any


def printed_answer(line: str | None) -> Any:
    """The answer a program printed on its last line: JSON when it parses, else the text itself."""
    if line is None:
        return None
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return line
