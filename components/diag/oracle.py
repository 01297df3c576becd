"""The DiagGym oracle as a policy: what a clinician who knows the case would reply, turn by turn.

The replies order the case's key exams (as many per turn as the environment allows, catalogue exams only) and then
give the true diagnosis, in the line format the environment parses (`Order: a, b` / `Final diagnosis: X`; see
components.diag.actions.ACTION_FORMAT). They are read from the Case record, which the rollout engine hands a
scripted policy as `GenerationRequest.task` (as the coding teacher gets its Task): that is for building training
data and for tests only, never for an agent under evaluation, which sees the chat alone.
"""

from __future__ import annotations

import json

from components.diag.catalogue import Catalogue, default_catalogue
from components.diag.env import DiagEnvConfig
from components.diag.record import Case
from components.policies.protocol import Generation, GenerationRequest

_SEPARATORS = ",;|"  # the line format splits exam names on these


def oracle_replies(case: Case, config: DiagEnvConfig, catalogue: Catalogue | None = None) -> list[str]:
    """The clinician's replies for `case`: its key exams in the fewest turns, then its diagnosis."""
    cat = catalogue or default_catalogue()
    exams = [e for e in case.key_exams if cat.exam(e) is not None]  # an imported label outside it orders nothing
    per_turn = config.max_exams_per_turn
    orders = [exams[i: i + per_turn] for i in range(0, len(exams), per_turn)]
    orders = orders[: config.max_turns - 1]  # the last turn is the diagnosis's
    replies = [_order_line(o) for o in orders]
    return [*replies, f"Final diagnosis: {case.diagnosis.strip()}"]


def _order_line(exams: list[str]) -> str:
    if any(s in e for e in exams for s in _SEPARATORS):
        return json.dumps({"type": "order_exams", "exams": exams})
    return "Order: " + ", ".join(exams)


class OraclePolicy:
    """A scripted policy (`backend` scripted, model `oracle`): reply t of a request is `oracle_replies(case)[t]`, t
    being the replies the chat already holds. `config` must be the environment's (its exam cap and turn limit)."""

    backend = "scripted"
    model_id = "oracle"
    uses_tokens = False
    max_context = None

    def __init__(self, config: DiagEnvConfig | None = None, catalogue: Catalogue | None = None):
        self.config = config or DiagEnvConfig()
        self.catalogue = catalogue or default_catalogue()

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out = []
        for r in requests:
            if not isinstance(r.task, Case):
                raise TypeError(f"the DiagGym oracle plays Cases; request {r.key} carries {type(r.task).__name__}")
            replies = oracle_replies(r.task, self.config, self.catalogue)
            done = sum(m["role"] == "assistant" for m in r.messages)
            out.append(Generation(text=replies[min(done, len(replies) - 1)]))
        return out

    def close(self) -> None:
        """Nothing to release."""
