"""EHRSQL's query post-processing: pin "now" and make SQLite's date formats mean what the questions mean.

EHRSQL evaluates its MIMIC-III / eICU queries with current_time fixed at 2105-12-31 23:59:00 (the last moment of the
shifted data), '%y' read as the four-digit year and '%j' (day of year) replaced by '%J' (Julian day) so that day
differences work across year ends. TREQS queries carry no time and pass through unchanged.
"""

from __future__ import annotations

import re

CURRENT_TIME = "2105-12-31 23:59:00"
_APOSTROPHE = re.compile(r"(?<=[a-z])'(?=s\b)")
_CURRENT = re.compile(r"\bcurrent_time\b", re.IGNORECASE)


def postprocess(query: str, schema: str) -> str:
    if schema == "treqs":
        # a few TREQS literals carry an unescaped apostrophe ('alzheimer's disease'); double it so the SQL parses
        return _APOSTROPHE.sub("''", query)
    q = _CURRENT.sub(f"'{CURRENT_TIME}'", query)
    return q.replace("'%y", "'%Y").replace("%j'", "%J'")
