"""Structured feedback for a failed run: what kind of error, where in the agent's code, what it usually means.

`classify` reads an ExecResult into an ErrorInfo (kind, message, line, the failing line with context).
`gather_facts` adds what can be looked up (a table's real columns, a DataFrame's columns, the files present);
`explain` picks the rule for the error and writes the plain-language part; `render` composes the observation.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from components.envs.agent_code import AGENT_FILENAME, Hints
from components.sandbox.result import ExecResult


class ErrorInfo(BaseModel):
    # the exception's printed name (KeyError, sqlite3.OperationalError), or TimeoutError / MemoryError / NonZeroExit
    kind: str
    message: str
    line: int | None = None  # 1-based line in the agent's code
    snippet: str | None = None  # the failing line with two lines of context either side


class ErrorContext(BaseModel):
    """Everything an explainer (rule table or LLM) gets to see."""

    error: ErrorInfo
    code: str
    facts: list[str] = Field(default_factory=list)
    stderr_tail: str = ""


class Rule(BaseModel):
    kinds: tuple[str, ...] = ()  # matched against the full and the unqualified name; empty: any kind
    pattern: str | None = None  # regex searched in the message, case-insensitive
    meaning: str
    check: str


# First match wins, so the message-specific rules come before the general ones for their kind.
RULES: tuple[Rule, ...] = (
    Rule(
        pattern=r"no such column",
        meaning="The SQL names a column that the table does not have.",
        check=(
            "Compare the column name with the table's real columns (listed below when known); inspect_data on "
            "the database shows them. Check table aliases, too."
        ),
    ),
    Rule(
        pattern=r"no such table",
        meaning="The SQL names a table that is not in the database.",
        check=(
            "Use one of the tables listed below (inspect_data on the .db file lists them); names are "
            "case-sensitive in some schemas."
        ),
    ),
    Rule(
        pattern=r"syntax error|incomplete input|unrecognized token",
        kinds=("OperationalError", "DatabaseError"),
        meaning="SQLite could not parse the query.",
        check=(
            "Look at the text near the reported token: quotes around strings ('...'), commas between columns, a"
            " missing FROM, or a Python f-string that left braces in the SQL."
        ),
    ),
    Rule(
        kinds=("OperationalError", "DatabaseError", "ProgrammingError", "IntegrityError"),
        meaning="The database refused the query or could not be opened.",
        check=(
            "Check the database path (relative to the working directory), that the connection is open, and the "
            "SQL itself."
        ),
    ),
    Rule(
        kinds=("KeyError",),
        meaning="A dict key or DataFrame column/index label that does not exist was looked up.",
        check=(
            "Check the exact spelling and case of the key against the available columns/keys listed below; "
            "print df.columns first."
        ),
    ),
    Rule(
        kinds=("IndexError",),
        meaning="A position past the end of a sequence was used, often [0] on an empty result.",
        check="Check that the query or filter returned rows before indexing; print len(...) of the result.",
    ),
    Rule(
        kinds=("NameError", "UnboundLocalError"),
        meaning="A name is used before it was defined.",
        check=(
            "Define or import the name first; in a stateless sandbox each run starts empty, so earlier turns' "
            "variables are gone."
        ),
    ),
    Rule(
        pattern=r"'NoneType' object has no attribute",
        kinds=("AttributeError",),
        meaning="A value you expected to hold an object is None.",
        check=(
            "Find where the variable was assigned: a function without return, a failed lookup or fetchone() on no rows."
        ),
    ),
    Rule(
        kinds=("AttributeError",),
        meaning="The object has no attribute or method of that name.",
        check=(
            "Check the object's type and the spelling; for a DataFrame, columns with spaces or odd names need "
            "df['name'], not df.name."
        ),
    ),
    Rule(
        kinds=("TypeError",),
        meaning=(
            "An operation got a value of the wrong type (e.g. str + int, None where a number is needed, wrong "
            "argument count)."
        ),
        check=(
            "Print type(...) of the values on the failing line; convert with int()/float()/str(), or "
            "pd.to_numeric for columns."
        ),
    ),
    Rule(
        pattern=r"could not convert|invalid literal",
        kinds=("ValueError",),
        meaning="Text that is not a number was converted to a number.",
        check=(
            "Look at the actual values (blank, units, commas, 'NaN'); use pd.to_numeric(..., errors='coerce') "
            "and drop what fails."
        ),
    ),
    Rule(
        kinds=("ValueError",),
        meaning="A function got a value of the right type but an unacceptable content or shape.",
        check="Read the message; check lengths and shapes agree, and that dates/numbers parse.",
    ),
    Rule(
        kinds=("SyntaxError", "IndentationError", "TabError"),
        meaning="The code is not valid Python, so nothing ran.",
        check=(
            "Fix the marked line: unclosed brackets or quotes, a missing colon, mixed indentation, or "
            "prose/markdown pasted into the code."
        ),
    ),
    Rule(
        kinds=("FileNotFoundError", "IsADirectoryError", "NotADirectoryError"),
        meaning="The path does not exist in the sandbox's working directory.",
        check="Use one of the files listed below, with its relative path exactly as shown.",
    ),
    Rule(
        kinds=("PermissionError",),
        meaning="The sandbox does not allow that file operation.",
        check="Read the task files and write only inside the working directory.",
    ),
    Rule(
        kinds=("ZeroDivisionError",),
        meaning="A division by zero: the denominator is 0, often because a count or filter came out empty.",
        check="Check the filter that produces the denominator; print it before dividing.",
    ),
    Rule(
        kinds=("ModuleNotFoundError", "ImportError"),
        meaning="The module is not installed in the sandbox or its name is misspelled.",
        check=(
            "Packages cannot be installed (no network). Use the standard library or the scientific stack "
            "(pandas, numpy, scipy, statsmodels, scikit-learn, biopython), and check the import name."
        ),
    ),
    Rule(
        kinds=("UnicodeDecodeError",),
        meaning="The file is not in the text encoding used to read it.",
        check="Pass encoding='latin-1' (or the right one), or open it in binary mode if it is not text.",
    ),
    Rule(
        kinds=("EmptyDataError", "ParserError"),
        meaning="pandas could not parse the file as a table.",
        check=(
            "Check the separator (sep='\\t' for TSV), the header row, and that the file is really CSV "
            "(inspect_data shows its kind)."
        ),
    ),
    Rule(
        kinds=("JSONDecodeError",),
        meaning="The text is not valid JSON.",
        check="Print the text first; it may be empty, Python repr (single quotes) or have trailing content.",
    ),
    Rule(
        kinds=("RecursionError",),
        meaning="A function called itself too deeply (usually no base case).",
        check="Check the recursion's stopping condition, or rewrite it as a loop.",
    ),
    Rule(
        kinds=("AssertionError",),
        meaning="An assert in the code failed.",
        check="Print the values the assert compares.",
    ),
    Rule(
        kinds=("TimeoutError",),
        meaning="The code ran past the time limit and was stopped; output is incomplete.",
        check=(
            "Look for infinite loops, row-by-row loops over large tables, or a join without a condition; let "
            "SQL aggregate (COUNT, GROUP BY) instead of Python."
        ),
    ),
    Rule(
        kinds=("MemoryError",),
        meaning="The code used more memory than the sandbox allows and was stopped.",
        check="Load only the columns and rows you need (usecols=, WHERE ... in SQL), and avoid cross joins.",
    ),
    Rule(
        kinds=("NonZeroExit",),
        meaning="The program exited with an error status without a Python traceback.",
        check="Check sys.exit()/exit() calls and the stderr output.",
    ),
)

_FALLBACK = Rule(
    meaning="The code raised an exception.", check="Read the message and the failing line; print the values it uses."
)

TRUNCATED_NOTE = (
    "Output was cut at the sandbox's output limit; print less (df.head(), len(...), aggregates) so nothing "
    "you need is lost."
)

# an exception's name is short; a longer "name" is the agent's output, not an exception line
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]{0,199})(?::\s?(.*))?$")
MESSAGE_CHARS = 1500  # an error message longer than this keeps its two ends
# at most 9 digits: the agent's code can print a fake frame, and int() refuses strings of thousands of digits
_AGENT_FRAME = re.compile(r'File "' + re.escape(AGENT_FILENAME) + r'", line (\d{1,9})\b')


def classify(result: ExecResult, code: str, timeout_s: float | None = None) -> ErrorInfo | None:
    """The error behind a failed run, or None when it succeeded."""
    if result.status == "ok":
        return None
    if result.status == "timeout":
        limit = f" of {timeout_s:g} s" if timeout_s else ""
        return ErrorInfo(kind="TimeoutError", message=f"execution exceeded the time limit{limit}")
    if result.status == "oom":
        return ErrorInfo(kind="MemoryError", message="execution exceeded the memory limit")
    section = _last_traceback(result.stderr)
    kind, message = _exception_line(section)
    if kind is None:
        tail = (result.stderr.strip().splitlines() or [""])[-1]
        kind, message = "NonZeroExit", _two_ends(tail) or f"exit code {result.exit_code}"
    frames = _AGENT_FRAME.findall(section) or _AGENT_FRAME.findall(result.stderr)
    line = int(frames[-1]) if frames else None
    return ErrorInfo(kind=kind, message=message, line=line, snippet=snippet(code, line) if line else None)


def _last_traceback(stderr: str) -> str:
    at = stderr.rfind("Traceback (most recent call last):")
    return stderr[at:] if at >= 0 else stderr


def _exception_line(section: str) -> tuple[str | None, str]:
    """The exception's name and message: the first unindented line after the traceback header."""
    lines = section.splitlines()
    first = 1 if lines and lines[0].startswith("Traceback") else 0
    for i, line in enumerate(lines[first:], start=first):
        if not line or line[0].isspace():
            continue
        m = _EXC_LINE.match(line)
        if m and (m.group(2) is not None or m.group(1)[0].isupper()):
            # the message runs to the end (pandas puts the whole SQL before "no such column"); keep both ends
            return m.group(1), _two_ends("\n".join([m.group(2) or "", *lines[i + 1 :]]).strip())
    return None, ""


SNIPPET_LINE_CHARS = 300  # a code line longer than this (a pasted blob) is cut in the snippet


def _two_ends(message: str) -> str:
    if len(message) <= MESSAGE_CHARS:
        return message
    return f"{message[: MESSAGE_CHARS * 2 // 3]} ... {message[-(MESSAGE_CHARS // 3) :]}"


def snippet(code: str, line: int, context: int = 2) -> str | None:
    lines = code.splitlines()
    if not 0 < line <= len(lines):
        return None
    lo, hi = max(1, line - context), min(len(lines), line + context)
    width = len(str(hi))
    return "\n".join(f"{'>' if n == line else ' '} {n:>{width}} | {_clip_line(lines[n - 1])}" for n in range(lo, hi + 1))


def _clip_line(text: str, limit: int = SNIPPET_LINE_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]} ... [{len(text) - limit} more characters]"


def rule_for(error: ErrorInfo) -> Rule:
    short = error.kind.rsplit(".", 1)[-1]
    for rule in RULES:
        if rule.kinds and error.kind not in rule.kinds and short not in rule.kinds:
            continue
        if rule.pattern and not re.search(rule.pattern, error.message, re.IGNORECASE):
            continue
        return rule
    return _FALLBACK


def explain_rule(ctx: ErrorContext) -> str:
    rule = rule_for(ctx.error)
    return f"What it usually means: {rule.meaning}\nWhat to check: {rule.check}"


# ---- facts: what can be looked up about the failure -------------------------------------------------------

InspectFn = Callable[[str], dict[str, Any]]  # path -> inspect_data result (runs in the sandbox)


def gather_facts(
    error: ErrorInfo,
    code: str,
    hints: Hints,
    files: Sequence[str],
    sqlite_files: Sequence[str],
    inspect: InspectFn,
) -> list[str]:
    """Specific, checkable statements to put beside the explanation."""
    facts: list[str] = []
    wanted = _quoted_name(error.message)
    for name, cols in hints.dataframes.items():
        facts.append(f"DataFrame `{name}` has columns: {cols}" + _closest(wanted, cols))
    for name, keys in hints.dicts.items():
        facts.append(f"dict `{name}` has keys: {keys}" + _closest(wanted, keys))
    msg = error.message.lower()
    if "no such column" in msg or "no such table" in msg:
        facts.extend(_sqlite_facts(error.message, code, sqlite_files, inspect))
    if error.kind.rsplit(".", 1)[-1] in ("FileNotFoundError", "IsADirectoryError", "NotADirectoryError"):
        facts.append(
            "Files in the working directory: " + ", ".join(files)
            if files
            else "The working directory holds no task files."
        )
    if error.kind == "KeyError" and not facts:
        facts.append(
            f"The key looked up was {error.message}; print the DataFrame's columns (df.columns) or the "
            f"dict's keys to compare."
        )
    return facts


def _quoted_name(message: str) -> str | None:
    m = re.search(r"no such (?:column|table):\s*([\w.\"]+)", message, re.IGNORECASE)
    if m:
        return m.group(1).strip('"').rsplit(".", 1)[-1]
    m = re.match(r"""^['"](.+?)['"]$""", message.strip())  # KeyError: 'name'
    if m:
        return m.group(1)
    m = re.search(r"has no attribute '([^']+)'", message)
    return m.group(1) if m else None


def _closest(wanted: str | None, names: Sequence[str]) -> str:
    if not wanted:
        return ""
    lower = {n.lower(): n for n in names}
    hits = difflib.get_close_matches(wanted.lower(), list(lower), n=3, cutoff=0.5)
    return f"; closest to '{wanted}': {[lower[h] for h in hits]}" if hits else ""


def _sqlite_facts(message: str, code: str, sqlite_files: Sequence[str], inspect: InspectFn) -> list[str]:
    facts: list[str] = []
    wanted = _quoted_name(message)
    text = f"{code}\n{message}"
    for path in sqlite_files:
        tables = _tables(inspect(path))
        if not tables:
            continue
        if "no such table" in message.lower():
            names = [t["name"] for t in tables]
            facts.append(f"{path} has tables: {names}" + _closest(wanted, names))
            continue
        # the tables the code names; when it names none we know of, all of them (a few)
        used = [t for t in tables if re.search(r"\b" + re.escape(t["name"]) + r"\b", text, re.IGNORECASE)] or tables[:5]
        for t in used:
            cols = t["columns"]
            facts.append(f"Table `{t['name']}` in {path} has columns: {cols}" + _closest(wanted, cols))
    return facts


def _tables(info: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"name": str, "columns": [str]}] from an inspect_data result; [] when it is not the snippet's shape.

    The inspection ran where the agent's code ran, so its result is checked before use rather than trusted.
    """
    raw = info.get("tables")
    if not isinstance(raw, list):
        return []
    out: list[dict[str, Any]] = []
    for t in raw:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not isinstance(t.get("columns"), list):
            return []
        names = [c.get("name") if isinstance(c, dict) else None for c in t["columns"]]
        if not all(isinstance(n, str) for n in names):
            return []
        out.append({"name": t["name"], "columns": names})
    return out


# ---- the observation ---------------------------------------------------------------------------------------


def render(ctx: ErrorContext, explanation: str, truncated: bool, stdout: str) -> str:
    parts = [f"Execution failed: {ctx.error.kind}: {ctx.error.message}".rstrip(": ")]
    if ctx.error.snippet:
        parts.append(f"At line {ctx.error.line} of your code:\n{ctx.error.snippet}")
    parts.append(explanation)
    if ctx.facts:
        parts.append("Found in the sandbox:\n" + "\n".join(f"- {f}" for f in ctx.facts))
    if truncated:
        parts.append(TRUNCATED_NOTE)
    if stdout.strip():
        parts.append("stdout before the error:\n" + stdout.rstrip())
    if ctx.stderr_tail.strip():
        parts.append("Call chain in your code (innermost last):\n" + ctx.stderr_tail.rstrip())
    return "\n\n".join(parts)


def agent_traceback(stderr: str, max_frames: int = 8) -> str:
    """The frames of the last traceback that are in the agent's code, when there is a chain of them.

    Library frames (pandas internals, host paths) and the wrapper's frames are left out; a single agent frame
    adds nothing to the failing-line snippet, so then this is empty.
    """
    frames: list[list[str]] = []
    for line in _last_traceback(stderr).splitlines():
        if line.startswith('  File "'):
            frames.append([line])
        elif frames and line.startswith("    "):
            frames[-1].append(line)
    mine = [f for f in frames if _AGENT_FRAME.search(f[0])]
    if len(mine) < 2:
        return ""
    if len(mine) > max_frames:
        mine = mine[: max_frames // 2] + [["  ..."]] + mine[-(max_frames - max_frames // 2) :]
    return "\n".join(_clip_line(line) for frame in mine for line in frame)
