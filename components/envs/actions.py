"""The three things an agent can do, and the parser that turns model text into one of them."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class RunCode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["run_code"] = "run_code"
    code: str = Field(min_length=1)


class InspectData(BaseModel):
    """Show a file's schema; with `column`, its distinct values; with `value`, the near matches among them."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["inspect_data"] = "inspect_data"
    path: str = Field(min_length=1)
    column: str | None = None  # for SQLite "table.column", or a bare column name searched in every table
    value: str | None = None


class SubmitAnswer(BaseModel):
    """The only thing scored. A JSON value, or the program itself for code tasks."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["submit_answer"] = "submit_answer"
    answer: Any = None


Action = Annotated[RunCode | InspectData | SubmitAnswer, Field(discriminator="type")]
_ACTION_ADAPTER: TypeAdapter[RunCode | InspectData | SubmitAnswer] = TypeAdapter(Action)


class ParseError(BaseModel):
    """Model output that is not an action; the environment answers it with the expected format (it costs a turn)."""

    problem: str
    text: str


ACTION_FORMAT = """\
Reply with exactly one action per turn, as a JSON object (a ```json fence around it is fine); only the first
action in a reply is taken:
- Run Python in the sandbox and see its output:
  {"type": "run_code", "code": "<python source>"}
- Show a file's schema; with "column", its distinct values; with "value", the closest matching values:
  {"type": "inspect_data", "path": "<file>", "column": "<optional; table.column for SQLite>", "value": "<optional>"}
- Submit your final answer (a JSON value; for coding tasks, the program as a string). Only this is scored:
  {"type": "submit_answer", "answer": <answer>}
A bare ```python fenced block also works and runs as run_code. Printed output is never scored: submit."""

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_CODE_LANGS = ("python", "py", "python3", "")
_JSON_LANGS = ("json", "")

Found = RunCode | InspectData | SubmitAnswer | ParseError


def parse_action(text: str) -> Found:
    """Read one action from model output: the first action in the text, by position.

    An action is a ```json (or unlabelled) fence holding a JSON object with a "type" key, such an object bare
    in the prose, or a ```python (or unlabelled) fence, run as code. Whichever starts first is the action, so a
    model that shows code and then submits in JSON runs the code (it has not seen the output yet) and is read
    as submitting only if the JSON comes first. `find_actions` lists them all; the environment tells the agent
    when it ignored some.
    """
    found = find_actions(text)
    return found[0] if found else no_action(text)


def no_action(text: str) -> ParseError:
    """The ParseError for a reply in which `find_actions` found nothing."""
    if _FENCE.search(text):
        return ParseError(problem="found a fenced block, but neither a JSON action nor Python code", text=text)
    return ParseError(problem="no JSON action object and no ```python block found", text=text)


def find_actions(text: str) -> list[Found]:
    """Every action in `text`, in order of where it starts; a JSON object with a "type" that is not a valid
    action is there as a ParseError (an attempted action that failed)."""
    found: list[tuple[int, Found]] = []
    outside: list[str] = []  # the text with fenced blocks blanked, same length: braces inside a fence are not prose
    prose_from = 0
    for m in _FENCE.finditer(text):
        outside += [text[prose_from : m.start()], " " * (m.end() - m.start())]
        prose_from = m.end()
        action = _fenced_action(m.group(1).lower(), m.group(2), text)
        if action is not None:
            found.append((m.start(), action))
    outside.append(text[prose_from:])
    for start, obj in _json_objects("".join(outside)):
        found.append((start, _validate(obj, text)))
    return [a for _, a in sorted(found, key=lambda pair: pair[0])]


def _fenced_action(lang: str, body: str, text: str) -> Found | None:
    if lang in _JSON_LANGS:
        objs = _json_objects(body)
        if objs:
            return _validate(objs[0][1], text)
    if lang in _CODE_LANGS and body.strip():
        return RunCode(code=body.strip("\n"))
    return None


_DECODER = json.JSONDecoder()


def _json_objects(text: str) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects in `text` that have a "type" key, with where each starts; prose around them is ignored.

    An object inside one found is part of it, not another action.
    """
    out: list[tuple[int, dict[str, Any]]] = []
    start = text.find("{")
    while start >= 0:
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):  # ValueError: also an integer past the interpreter's digit limit
            obj, end = None, start + 1
        if isinstance(obj, dict) and "type" in obj:
            out.append((start, obj))
        else:
            end = start + 1  # an object without "type" may hold one: look inside it
        start = text.find("{", end)
    return out


def _validate(obj: dict[str, Any], text: str) -> Found:
    try:
        return _ACTION_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "type"
        return ParseError(problem=f"invalid action: field '{where}': {err['msg']}", text=text)


def action_from_dict(obj: dict[str, Any]) -> RunCode | InspectData | SubmitAnswer:
    return _ACTION_ADAPTER.validate_python(obj)
