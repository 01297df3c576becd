"""Verifier scoring speed: the batched scorer against scoring one episode at a time with the model's plain forward
(every position's vocabulary-wide logits, float32: the scorer before batching), on the same episodes, in one run.

    python -m bench.scoring [--episodes DIR ...] [--model DIR] [--limit 64] [--batch-tokens 16384]

Episodes are real rollouts (default: the demo's SFT rollouts on test and train) scored by a real checkpoint (default:
the demo's merged verifier, else the embedded model: speed does not depend on what the weights learned). Each way
scores every episode once; ratios are episodes/s against the one-at-a-time baseline measured in the same run, and
the largest score difference from the baseline is printed beside each (bf16 changes the digits, not the ranking).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import typer
from rich.console import Console
from rich.table import Table

from components.common.paths import PROJECT_ROOT
from components.envs.episode import Episode
from components.policies.models import SMOLLM2, resolve_model
from components.policies.tokens import episode_token_ids
from components.rollout.store import EpisodeStore
from components.training.verifier import VerifierScorer

DEFAULT_EPISODES = [PROJECT_ROOT / "data" / "rollouts" / "demo" / n for n in ("sft_test", "sft_train")]
DEFAULT_MODEL = PROJECT_ROOT / "models" / "demo" / "verifier" / "merged"


def _episodes(dirs: list[Path], limit: int) -> list[Episode]:
    out: list[Episode] = []
    for d in dirs:
        with EpisodeStore(d) as store:
            out += [e for e in store.episodes() if e.outcome is not None]
    if not out:
        raise typer.BadParameter(f"no finished episodes under {', '.join(map(str, dirs))} (run `make demo` first, "
                                 "or pass --episodes)")
    return out[:limit]


def _plain(scorer: VerifierScorer, ids: list[list[int]]) -> list[float]:
    yes, no = scorer.chat.content("YES")[0], scorer.chat.content("NO")[0]
    out = []
    for seq in ids:
        with torch.inference_mode():
            logits = scorer.model(input_ids=torch.tensor([scorer.window(seq)])).logits
        out.append(float(logits[0, -1, [yes, no]].float().softmax(-1)[0]))
    return out


def main(episodes: list[Path] = typer.Option(DEFAULT_EPISODES, "--episodes"),  # noqa: B008
         model: Path = typer.Option(DEFAULT_MODEL, "--model"),  # noqa: B008
         limit: int = typer.Option(64, "--limit"), batch_tokens: int = typer.Option(16_384, "--batch-tokens"),
         max_tokens: int = typer.Option(4096, "--max-tokens")) -> None:
    model_dir = model if model.is_dir() else resolve_model(SMOLLM2)
    eps = _episodes(episodes, limit)
    fp32 = VerifierScorer(model_dir, "generative", max_tokens=max_tokens, dtype="float32", batch_tokens=batch_tokens)
    bf16 = VerifierScorer(model_dir, "generative", max_tokens=max_tokens, dtype="bfloat16", batch_tokens=batch_tokens)
    ids = [episode_token_ids(e, fp32.chat).input_ids for e in eps]
    tokens = sum(len(fp32.window(s)) for s in ids)
    rows = []
    for name, run in (("one at a time, plain forward, float32", lambda: _plain(fp32, ids)),
                      ("batched, last position only, float32", lambda: fp32.score_many(ids)),
                      ("batched, last position only, bf16 body", lambda: bf16.score_many(ids))):
        start = time.perf_counter()
        scores = run()
        rows.append((name, time.perf_counter() - start, scores))
    table = Table(title=f"{len(eps)} episodes, {tokens} tokens, {model_dir.name}, batch budget {batch_tokens} tokens")
    for col in ("way", "s", "episodes/s", "× baseline", "max |Δ score|"):
        table.add_column(col)
    base_s, base_scores = rows[0][1], rows[0][2]
    for name, s, scores in rows:
        diff = max(abs(a - b) for a, b in zip(scores, base_scores, strict=True))
        table.add_row(name, f"{s:.1f}", f"{len(eps) / s:.2f}", f"{base_s / s:.2f}×", f"{diff:.4f}")
    Console().print(table)


if __name__ == "__main__":
    typer.run(main)
