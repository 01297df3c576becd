"""The two things a diagnostic agent can do, and the parser that reads them from model text.

- order exams: `{"type": "order_exams", "exams": ["CBC", "lipase"]}`, or a line `Order: CBC, lipase` (also
  `Exams:` / `Tests:`, and DiagGym's own "the following investigation(s) should be performed: ...")
- give the final diagnosis: `{"type": "diagnose", "diagnosis": "Acute pancreatitis"}`, or a line
  `Final diagnosis: Acute pancreatitis` (also `Diagnosis:`; DiagGym's "Current diagnosis:" is a working
  diagnosis and is not read as final)

The first action in a reply, by position, is taken (as in the coding environment); `find_diag_actions` lists them
all so the environment can say when it ignored some. Exam names in a line are separated by commas or semicolons.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from components.envs.actions import ParseError


class OrderExams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["order_exams"] = "order_exams"
    exams: list[str] = Field(min_length=1)

    @field_validator("exams", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [v]
        if isinstance(v, list):
            v = [e.strip() for e in v if isinstance(e, str) and e.strip()] + [e for e in v if not isinstance(e, str)]
        return v


class Diagnose(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["diagnose"] = "diagnose"
    diagnosis: str = Field(min_length=1)


DiagAction = Annotated[OrderExams | Diagnose, Field(discriminator="type")]
_ADAPTER: TypeAdapter[OrderExams | Diagnose] = TypeAdapter(DiagAction)
Found = OrderExams | Diagnose | ParseError

ACTION_FORMAT = """\
Reply with exactly one action per turn; only the first action in a reply is taken.
- Order one or more exams (their results come back next turn):
  {"type": "order_exams", "exams": ["<exam name>", "<exam name>"]}
  or a line:  Order: <exam name>, <exam name>
- Give your final diagnosis (one diagnosis, not a list; this ends the case):
  {"type": "diagnose", "diagnosis": "<diagnosis>"}
  or a line:  Final diagnosis: <diagnosis>
Exams are named as a hospital orders them (e.g. complete blood count, basic metabolic panel, lipase, blood culture,
chest X-ray, CT abdomen and pelvis). Each turn costs a little and unnecessary exams lower your score."""

_LEAD = r"^[ \t>*_#-]*"
_ORDER = re.compile(_LEAD + r"(?:order(?:ed)?|exams?|tests?|investigations?|request)[*_]*\s*:\s*(?P<x>.+?)\s*$",
                    re.IGNORECASE | re.MULTILINE)
_DIAGGYM_ORDER = re.compile(r"following investigation(?:\(s\)|s)? should be performed\s*:\s*(?P<x>.+?)\s*$",
                            re.IGNORECASE | re.MULTILINE)
_DIAGNOSIS = re.compile(_LEAD + r"(?:final\s+)?diagnosis[*_]*\s*:\s*(?P<x>.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_DECODER = json.JSONDecoder()


def parse_diag_action(text: str) -> Found:
    found = find_diag_actions(text)
    return found[0] if found else no_diag_action(text)


def no_diag_action(text: str) -> ParseError:
    return ParseError(problem="no action found: neither a JSON action object nor an 'Order:' or "
                              "'Final diagnosis:' line", text=text)


def find_diag_actions(text: str) -> list[Found]:
    found: list[tuple[int, Found]] = []
    for start, obj in _json_objects(text):
        found.append((start, _validate(obj, text)))
    covered = [(s, _json_end(text, s)) for s, _ in found]
    for pattern, make in ((_ORDER, _order), (_DIAGGYM_ORDER, _order), (_DIAGNOSIS, _diagnose)):
        for m in pattern.finditer(text):
            if any(s <= m.start() < e for s, e in covered):
                continue  # a line inside a JSON action is part of it
            action = make(m.group("x"))
            if action is not None:
                found.append((m.start(), action))
    return [a for _, a in sorted(found, key=lambda pair: pair[0])]


def clean_text(text: str) -> str:
    """A value as the model wrote it, without markdown, brackets, quotes and a closing period."""
    text = text.strip().strip("*_`").strip()
    if len(text) >= 2 and text[0] + text[-1] in ("[]", "()", '""', "''"):
        text = text[1:-1].strip()
    return text.rstrip(".").strip().strip("*_`\"'").strip()


def _order(raw: str) -> OrderExams | None:
    names = [clean_text(part) for part in re.split(r"[,;|]", clean_text(raw))]
    names = [n for n in names if n]
    return OrderExams(exams=names) if names else None


def _diagnose(raw: str) -> Diagnose | None:
    text = clean_text(raw)
    return Diagnose(diagnosis=text) if text else None


def _json_objects(text: str) -> list[tuple[int, dict[str, Any]]]:
    out: list[tuple[int, dict[str, Any]]] = []
    start = text.find("{")
    while start >= 0:
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            obj, end = None, start + 1
        if isinstance(obj, dict) and "type" in obj:
            out.append((start, obj))
        else:
            end = start + 1
        start = text.find("{", end)
    return out


def _json_end(text: str, start: int) -> int:
    try:
        return _DECODER.raw_decode(text, start)[1]
    except (json.JSONDecodeError, RecursionError):
        return start + 1


def _validate(obj: dict[str, Any], text: str) -> Found:
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "type"
        return ParseError(problem=f"invalid action: field '{where}': {err['msg']}", text=text)
