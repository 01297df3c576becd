"""What a collection reports: success overall and per dataset, category and domain; turns, tokens, sandbox
timeouts and OOMs, parse failures, model time against environment time, and the teacher's repairs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from components.envs.episode import Episode, Outcome


def summarize(episodes: Iterable[Episode]) -> dict[str, float]:
    eps = list(episodes)
    n = len(eps)
    out: dict[str, float] = {"episodes": n}
    if not n:
        return out
    correct = [e.outcome == Outcome.CORRECT for e in eps]
    out["success"] = sum(correct) / n
    for outcome in Outcome:
        out[f"outcome_{outcome.value}"] = sum(e.outcome == outcome for e in eps)
    groups: dict[str, list[bool]] = defaultdict(list)
    for e, ok in zip(eps, correct, strict=True):
        for kind, value in (("domain", e.domain), ("dataset", e.dataset), ("category", e.category)):
            groups[f"success_{kind}/{value}"].append(ok)
    out.update({k: sum(v) / len(v) for k, v in sorted(groups.items())})
    turns = [t for e in eps for t in e.turns]
    statuses = [t.exec_result.status for t in turns if t.exec_result is not None]
    out.update({
        "turns_mean": len(turns) / n,
        "sandbox_timeouts": statuses.count("timeout"),
        "sandbox_ooms": statuses.count("oom"),
        "parse_failures": sum(t.parse_error is not None for t in turns),
        "completion_tokens": sum(e.completion_tokens for e in eps),
        "prompt_tokens_max": max(e.prompt_tokens for e in eps),
        "model_time_s": sum(e.model_time_s for e in eps),
        "env_time_s": sum(e.env_time_s for e in eps),
    })
    total = out["model_time_s"] + out["env_time_s"]
    out["model_time_share"] = out["model_time_s"] / total if total else 0.0
    injected = [e for e in eps if _mistakes(e)]
    if injected:
        out["teacher_mistakes"] = sum(len(_mistakes(e)) for e in injected)
        out["teacher_repaired"] = sum(len(_mistakes(e)) for e in injected if e.outcome == Outcome.CORRECT)
    return out


def _mistakes(episode: Episode) -> list[str]:
    """The mistakes the scripted teacher injected (Turn.metadata["teacher"]["mistake"])."""
    out = []
    for t in episode.turns:
        teacher = t.metadata.get("teacher")
        if isinstance(teacher, dict) and teacher.get("mistake"):
            out.append(str(teacher["mistake"]))
    return out
