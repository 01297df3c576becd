"""Runs the agent's code under a recognisable file name and, when it fails, reports what the code was holding.

The agent's source is compiled as `<agent_code>`, so every traceback line that points into it says
`File "<agent_code>", line N`, whatever file name the sandbox backend gives its own program. On a KeyError or
AttributeError the wrapper looks at the failing frame and prints, on one marked stderr line, the columns of
the DataFrames (and the keys of the dicts) named on the failing line: the facts an explanation needs, which
are gone once the process exits. The wrapper deletes itself, so a stateful namespace keeps only the agent's names.

The marked line shares stderr with the agent's own output, and the wrapper runs in the agent's process, so
nothing it prints is beyond forgery. Two things keep that harmless: the marker is drawn afresh for every run
(the agent cannot copy it from an earlier output), and `split_hints` reads the line as data of one fixed shape,
bounded in size, that only ever becomes advisory text in the observation. Anything else is ignored.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field

AGENT_FILENAME = "<agent_code>"

# Bounds on what a hint line may carry; the wrapper itself stays well inside them (5 names, 100 / 50 items).
MAX_HINT_LINE = 64 * 1024  # characters; a longer line is not parsed at all (a 10 MB line costs nothing)
MAX_NAMES = 5
MAX_ITEMS = 100
MAX_ITEM_CHARS = 200
_NAME = re.compile(r"[A-Za-z_]\w{0,99}")  # a Python identifier, as the wrapper finds them on the failing line


@dataclass(frozen=True)
class Hints:
    """What the wrapper saw at the failure: variable name -> DataFrame columns / dict keys, as text."""

    dataframes: dict[str, list[str]] = field(default_factory=dict)
    dicts: dict[str, list[str]] = field(default_factory=dict)


def new_marker() -> str:
    """A marker for one run: unpredictable from anything the agent has seen printed before."""
    return f"__medgym_hint_{secrets.token_hex(8)}__ "


_WRAPPER = r"""
def _medgym_run(src, filename, marker):
    globals().pop("_medgym_run", None)  # the agent's code must not see the wrapper
    import json, re, sys

    def facts(exc):
        frame, lineno, tb = None, 0, exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == filename:
                frame, lineno = tb.tb_frame, tb.tb_lineno
            tb = tb.tb_next
        if frame is None:
            return None
        lines = src.splitlines()
        line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
        scope = dict(frame.f_globals)
        scope.update(frame.f_locals)
        named = sorted({n for n in re.findall(r"[A-Za-z_]\w*", line) if len(n) <= 100})  # split_hints' bound
        is_df = lambda v: type(v).__name__ == "DataFrame" and hasattr(v, "columns")
        frames = [n for n in named if is_df(scope.get(n))]
        if not frames:
            frames = [n for n, v in frame.f_locals.items() if not n.startswith("_") and len(n) <= 100 and is_df(v)]
        out = {"dataframes": {n: [str(c)[:200] for c in list(scope[n].columns)[:100]] for n in frames[:5]}}
        if isinstance(exc, KeyError):
            dicts = [n for n in named if isinstance(scope.get(n), dict) and n not in ("globals", "locals")]
            out["dicts"] = {n: [str(k)[:200] for k in list(scope[n])[:50]] for n in dicts[:5]}
        return out

    import linecache

    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)  # tracebacks show the agent's lines
    code = compile(src, filename, "exec")
    try:
        exec(code, globals())
    except (KeyError, AttributeError) as exc:
        try:
            found = facts(exc)
            if found:
                print(marker + json.dumps(found), file=sys.stderr, flush=True)
        except Exception:
            pass
        raise
"""


def wrap(code: str, marker: str) -> str:
    """The program sent to the sandbox for one run_code action; hint lines start with `marker`."""
    args = ", ".join(repr(a) for a in (code, AGENT_FILENAME, marker))
    return f"{_WRAPPER}\ntry:\n    _medgym_run({args})\nfinally:\n    globals().pop('_medgym_run', None)\n"


def split_hints(stderr: str, marker: str) -> tuple[str, Hints]:
    """stderr without the lines marked with this run's marker, and the facts they carried.

    More than one marked line means the agent's code printed some (the wrapper prints at most one), so then
    none is believed. Marked lines are dropped from the shown stderr either way.
    """
    kept: list[str] = []
    marked: list[str] = []
    for line in stderr.splitlines(keepends=True):
        (marked if line.startswith(marker) else kept).append(line)
    hints = read_hints(marked[0][len(marker) :]) if len(marked) == 1 else Hints()
    return "".join(kept), hints


def read_hints(payload: str) -> Hints:
    """The facts in one hint line's JSON, or no facts when it is not exactly the wrapper's shape."""
    if len(payload) > MAX_HINT_LINE:
        return Hints()
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):  # a line cut by the output cap, or not JSON at all
        return Hints()
    if not isinstance(obj, dict) or not set(obj) <= {"dataframes", "dicts"}:
        return Hints()
    dataframes, dicts = _names_to_texts(obj.get("dataframes", {})), _names_to_texts(obj.get("dicts", {}))
    if dataframes is None or dicts is None:
        return Hints()
    return Hints(dataframes=dataframes, dicts=dicts)


def _names_to_texts(value: object) -> dict[str, list[str]] | None:
    """A dict of identifier -> list of short strings, within the bounds; None for anything else."""
    if not isinstance(value, dict) or len(value) > MAX_NAMES:
        return None
    out: dict[str, list[str]] = {}
    for name, items in value.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            return None
        if not isinstance(items, list) or len(items) > MAX_ITEMS:
            return None
        if not all(isinstance(i, str) and len(i) <= MAX_ITEM_CHARS for i in items):
            return None
        out[name] = list(items)
    return out
