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
Reply with exactly one action per turn, as a JSON object (a ```json fence around it is fine):
- Run Python in the sandbox and see its output:
  {"type": "run_code", "code": "<python source>"}
- Show a file's schema; with "column", its distinct values; with "value", the closest matching values:
  {"type": "inspect_data", "path": "<file>", "column": "<optional; table.column for SQLite>", "value": "<optional>"}
- Submit your final answer (a JSON value; for coding tasks, the program as a string). Only this is scored:
  {"type": "submit_answer", "answer": <answer>}
A bare ```python fenced block also works and runs as run_code. Printed output is never scored: submit."""

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def parse_action(text: str) -> RunCode | InspectData | SubmitAnswer | ParseError:
    """Read one action from model output.

    Accepted, in this order: a ```json fence holding an action object; a bare JSON object (the outermost
    braces in the text); a ```python (or unlabelled) fence, run as code. The first fence that parses wins, so a
    model that shows code and then submits in JSON is read as submitting only if the JSON comes first.
    """
    fences = _FENCE.findall(text)
    for lang, body in fences:
        if lang.lower() in ("json", ""):
            obj = _load_json_object(body)
            if obj is not None:
                return _validate(obj, text)
    # a JSON object outside any fence; braces inside a ```python block are code, not an action
    obj = _load_json_object(_FENCE.sub("", text))
    if obj is not None:
        return _validate(obj, text)
    for lang, body in fences:
        if lang.lower() in ("python", "py", "python3", "") and body.strip():
            return RunCode(code=body.strip("\n"))
    if fences:
        return ParseError(problem="found a fenced block, but neither a JSON action nor Python code", text=text)
    return ParseError(problem="no JSON action object and no ```python block found", text=text)


_DECODER = json.JSONDecoder()


def _load_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` that has a "type" key; prose around it is ignored."""
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "type" in obj:
            return obj
        start = text.find("{", start + 1)
    return None


def _validate(obj: dict[str, Any], text: str) -> RunCode | InspectData | SubmitAnswer | ParseError:
    try:
        return _ACTION_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "type"
        return ParseError(problem=f"invalid action: field '{where}': {err['msg']}", text=text)


def action_from_dict(obj: dict[str, Any]) -> RunCode | InspectData | SubmitAnswer:
    return _ACTION_ADAPTER.validate_python(obj)
