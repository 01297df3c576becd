"""Runs the agent's code under a recognisable file name and, when it fails, reports what the code was holding.

The agent's source is compiled as `<agent_code>`, so every traceback line that points into it says
`File "<agent_code>", line N`, whatever file name the sandbox backend gives its own program. On a KeyError or
AttributeError the wrapper looks at the failing frame and prints, on one marked stderr line, the columns of
the DataFrames (and the keys of the dicts) named on the failing line: the facts an explanation needs, which
are gone once the process exits. The wrapper deletes itself, so a stateful namespace keeps only the agent's names.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

AGENT_FILENAME = "<agent_code>"
HINT_MARKER = "__medgym_hint__ "

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
        named = sorted(set(re.findall(r"[A-Za-z_]\w*", line)))
        is_df = lambda v: type(v).__name__ == "DataFrame" and hasattr(v, "columns")
        frames = [n for n in named if is_df(scope.get(n))]
        if not frames:
            frames = [n for n, v in frame.f_locals.items() if not n.startswith("_") and is_df(v)]
        out = {"dataframes": {n: [str(c) for c in list(scope[n].columns)[:100]] for n in frames[:5]}}
        if isinstance(exc, KeyError):
            dicts = [n for n in named if isinstance(scope.get(n), dict) and n not in ("globals", "locals")]
            out["dicts"] = {n: [str(k) for k in list(scope[n])[:50]] for n in dicts[:5]}
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


def wrap(code: str) -> str:
    """The program sent to the sandbox for one run_code action."""
    args = ", ".join(repr(a) for a in (code, AGENT_FILENAME, HINT_MARKER))
    return f"{_WRAPPER}\ntry:\n    _medgym_run({args})\nfinally:\n    globals().pop('_medgym_run', None)\n"


def split_hints(stderr: str) -> tuple[str, dict[str, Any]]:
    """stderr without the marked lines, and the facts those lines carried."""
    kept: list[str] = []
    hints: dict[str, Any] = {}
    for line in stderr.splitlines(keepends=True):
        if line.startswith(HINT_MARKER):
            # a line cut by the output cap is dropped: the facts are a bonus, the traceback still stands
            with contextlib.suppress(json.JSONDecodeError):
                hints.update(json.loads(line[len(HINT_MARKER) :]))
        else:
            kept.append(line)
    return "".join(kept), hints
