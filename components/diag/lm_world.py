"""The LM world model: a causal LM that writes the result of a named exam, given the patient profile and the exams
so far, serialized as DiagGym does; its training rows, its training, and simulation through a policy.

A prompt is SEPARATOR-joined pieces: the profile (with a "Final diagnosis: ..." line when `condition_on_diagnosis`
is on), each exam so far as `exam_block(name, result)` oldest first, and the named exam's block with its result
left empty. The completion is the result and the tokenizer's eos, the end marker the token backends already stop
at. Each piece and the completion are tokenized on their own and the ids concatenated: the prompt/completion
boundary is exact, and simulation prompts the model with the very ids it was trained on. A prompt too long drops
its oldest exams first; the named exam and its result are never cut, and an example that still does not fit is
dropped and counted.

Training is the platform's SFT (`components.training.trainers.train`, TRL, LoRA or full) on rows whose loss mask
covers the completion only; a LoRA adapter is merged into a plain checkpoint, beside which `lm_world.json` records
the serialization switches so that `LMWorldModel.from_checkpoint` prompts the model as it was trained.

Simulation goes through a token `Policy` (hf, vllm): a plain completion over ids, no chat template. Text backends
(the openai chat-completions policy) are refused: the server would wrap the prompt in its chat template.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from components.common.io import atomic_write
from components.diag.catalogue import Catalogue, default_catalogue
from components.diag.record import Case
from components.diag.world import PriorExam, draw_seed, exam_block
from components.envs.episode import Sampling
from components.policies.protocol import GenerationRequest, Policy

if TYPE_CHECKING:  # training imports torch and TRL: only when a model is trained
    from components.training.config import DistributedSettings, SFTSettings
    from components.training.trainers import TrainResult

SEPARATOR = "\n<SEP>\n"  # between DiagGym's events
DIAGNOSIS_LINE = "Final diagnosis: {}"
WORLD_FILE = "lm_world.json"  # beside a trained checkpoint: how its prompts are serialized
DOMAIN = "diagnosis"


class LMWorldConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    condition_on_diagnosis: bool = Field(default=False, description="the prompt names the case's final diagnosis")
    max_length: int = Field(default=2048, gt=0, description="prompt + new tokens at simulation (capped by the "
                            "policy's context); the prompt drops its oldest exams to fit")
    max_new_tokens: int = Field(default=256, gt=0)
    temperature: float = Field(default=0.0, ge=0, description="0: greedy")
    top_p: float = Field(default=1.0, gt=0, le=1)
    seed: int = 0


# ------------------------------------------------------------------------------------------------ serialization


def header_text(case: Case, condition_on_diagnosis: bool = False) -> str:
    text = case.profile.strip()
    if condition_on_diagnosis:
        text += "\n" + DIAGNOSIS_LINE.format(case.diagnosis)
    return text + SEPARATOR


def prompt_text(case: Case, exam: str, history: Sequence[PriorExam], condition_on_diagnosis: bool = False) -> str:
    """The whole prompt as text (what `prompt_ids` tokenizes piece by piece, before any truncation)."""
    return (header_text(case, condition_on_diagnosis) + "".join(exam_block(p.exam, p.result) + SEPARATOR
                                                                 for p in history) + exam_block(exam, ""))


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def fit_prompt(header: list[int], blocks: Sequence[list[int]], query: list[int], budget: int
               ) -> tuple[list[int], int] | None:
    """`header`, the newest `blocks` that fit, then `query`, in at most `budget` ids; and how many of the oldest
    blocks were left out. None when even no block leaves room."""
    room = budget - len(header) - len(query)
    if room < 0:
        return None
    start = len(blocks)
    while start > 0 and len(blocks[start - 1]) <= room:
        start -= 1
        room -= len(blocks[start])
    return header + [t for b in blocks[start:] for t in b] + query, start


def prompt_ids(tokenizer: Any, case: Case, exam: str, history: Sequence[PriorExam], budget: int,
               condition_on_diagnosis: bool = False) -> tuple[list[int], int] | None:
    """The prompt's ids within `budget` and the prior exams left out (oldest first); None if it cannot fit."""
    blocks = [_ids(tokenizer, exam_block(p.exam, p.result) + SEPARATOR) for p in history]
    return fit_prompt(_ids(tokenizer, header_text(case, condition_on_diagnosis)), blocks,
                      _ids(tokenizer, exam_block(exam, "")), budget)


def completion_ids(tokenizer: Any, result: str) -> list[int]:
    return _ids(tokenizer, result) + [tokenizer.eos_token_id]


# ------------------------------------------------------------------------------------------------ training data


@dataclass
class WorldRows:
    """SFT rows (the platform's schema: episode_id, task_id, domain, input_ids, loss_mask) and what was left out."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    examples: int = 0  # recorded results seen
    dropped: int = 0  # results whose example did not fit max_length even without prior exams
    truncated: int = 0  # examples that fit only after leaving out their oldest exams
    exams_left_out: int = 0

    def stats(self) -> dict[str, int]:
        return {"examples": self.examples, "rows": len(self.rows), "dropped": self.dropped,
                "truncated": self.truncated, "exams_left_out": self.exams_left_out,
                "tokens": sum(len(r["input_ids"]) for r in self.rows),
                "loss_tokens": sum(sum(r["loss_mask"]) for r in self.rows)}


def case_events(case: Case) -> list[PriorExam]:
    """The case's recorded exams in time order, named as the world models are asked for them (the catalogue exam,
    else the record's label)."""
    return [PriorExam(e.exam or e.label, e.result) for e in sorted(case.events, key=lambda e: e.time)]


def world_rows(cases: Iterable[Case], tokenizer: Any, *, max_length: int, condition_on_diagnosis: bool = False
               ) -> WorldRows:
    """One row per recorded exam result: the prompt of its case's earlier exams, then the result (the loss's
    only tokens)."""
    out = WorldRows()
    for case in cases:
        events = case_events(case)
        header = _ids(tokenizer, header_text(case, condition_on_diagnosis))
        blocks = [_ids(tokenizer, exam_block(p.exam, p.result) + SEPARATOR) for p in events]
        for k, event in enumerate(events):
            out.examples += 1
            completion = completion_ids(tokenizer, event.result)
            fitted = fit_prompt(header, blocks[:k], _ids(tokenizer, exam_block(event.exam, "")),
                                max_length - len(completion))
            if fitted is None:
                out.dropped += 1
                continue
            prompt, left_out = fitted
            out.truncated += left_out > 0
            out.exams_left_out += left_out
            out.rows.append({"episode_id": f"{case.case_id}/{k}", "task_id": case.case_id, "domain": DOMAIN,
                             "input_ids": prompt + completion,
                             "loss_mask": [0] * len(prompt) + [1] * len(completion)})
    return out


# ------------------------------------------------------------------------------------------------ training


@dataclass
class WorldTraining:
    model_dir: Path  # a plain checkpoint (LoRA merged) the hf and vllm policies load
    result: TrainResult
    data: dict[str, int]


def train_world_model(cases: Iterable[Case], base_model: str, out_dir: Path | str,
                      settings: SFTSettings | None = None, *,
                      condition_on_diagnosis: bool = False, callbacks: list[Any] | None = None,
                      distributed: DistributedSettings | None = None) -> WorldTraining:
    """SFT of `base_model` on `cases`' results (the schedule's max_length bounds each example), in `<out_dir>/run`
    (resumed from its checkpoints); a LoRA adapter is merged into `<out_dir>/merged`. `distributed` launches it as
    the pipeline's training stages are (in this process by default)."""
    from components.training.config import SFTSettings
    from components.training.data import EmptyDatasetError
    from components.training.models import is_adapter, load_tokenizer, merge_and_save
    from components.training.stage import launch_rows
    from components.training.trainers import MERGED, TrainJob

    settings = settings or SFTSettings()
    out_dir = Path(out_dir)
    data = world_rows(cases, load_tokenizer(base_model), max_length=settings.schedule.max_length,
                      condition_on_diagnosis=condition_on_diagnosis)
    if not data.rows:
        raise EmptyDatasetError(f"no exam result fits in {settings.schedule.max_length} tokens "
                                f"({data.examples} recorded, {data.dropped} too long)")
    # the rows go to train() directly: dataset_dir is only read when no rows are given
    job = TrainJob(method="sft", base_model=base_model, dataset_dir=out_dir / "run", out_dir=out_dir / "run",
                   sft=settings)
    result = launch_rows(job, data.rows, distributed, log_to=out_dir / "run.launch.log", callbacks=callbacks)
    model_dir = result.final_dir
    if is_adapter(model_dir):
        model_dir = merge_and_save(model_dir, out_dir / MERGED)
    with atomic_write(model_dir / WORLD_FILE) as fh:
        json.dump({"condition_on_diagnosis": condition_on_diagnosis, "separator": SEPARATOR,
                   "max_length": settings.schedule.max_length, "base_model": base_model, "data": data.stats()},
                  fh, indent=1)
    return WorldTraining(model_dir=model_dir, result=result, data=data.stats())


def result_loss(model_dir: Path | str, rows: Sequence[dict[str, Any]]) -> float:
    """Mean negative log-likelihood per loss-masked token (the results and their end marker) of a checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.inference_mode():
        for row in rows:
            ids = torch.tensor([row["input_ids"]])
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
            picked = logprobs.gather(1, ids[0, 1:, None])[:, 0]
            mask = torch.tensor(row["loss_mask"][1:], dtype=torch.bool)
            total -= float(picked[mask].sum())
            count += int(mask.sum())
    return total / max(count, 1)


# ------------------------------------------------------------------------------------------------ simulation


@dataclass(frozen=True)
class SimulationRequest:
    case: Case
    exam: str
    history: Sequence[PriorExam] = ()
    seed: int = 0


def result_text(generated: str) -> str:
    """The result a generation holds: up to a separator or a next exam block, if the model wrote on."""
    for stop in (SEPARATOR.strip(), "Exam name:"):
        generated = generated.split(stop, 1)[0]
    return generated.strip()


class LMWorldModel:
    """A WorldModel whose results a causal LM writes, through a token policy; `simulate_many` sends many requests
    as one batch."""

    name = "lm"

    def __init__(self, policy: Policy, tokenizer: Any, config: LMWorldConfig | None = None,
                 catalogue: Catalogue | None = None, *, owns_policy: bool = False):
        if not policy.uses_tokens:
            raise ValueError(f"the LM world model is a plain completion over token ids; the {policy.backend} policy "
                             "takes chat messages (its server applies a chat template): use hf or vllm")
        self.policy, self.tokenizer = policy, tokenizer
        self.config = config or LMWorldConfig()
        self.catalogue = catalogue or default_catalogue()
        self.owns_policy = owns_policy
        context = min(self.config.max_length, policy.max_context or self.config.max_length)
        self.prompt_budget = context - self.config.max_new_tokens

    @classmethod
    def from_checkpoint(cls, model_dir: Path | str, *, backend: str = "hf", options: dict[str, Any] | None = None,
                        catalogue: Catalogue | None = None, **settings: Any) -> LMWorldModel:
        """A policy of `backend` serving `model_dir` (`options`: the backend's, beside the model), owned by the world
        model. `condition_on_diagnosis` defaults to what the checkpoint was trained with; `settings` set any
        LMWorldConfig field."""
        from components.policies.registry import PolicyConfig, build_policy
        from components.training.models import load_tokenizer

        saved = Path(model_dir) / WORLD_FILE
        trained = json.loads(saved.read_text(encoding="utf-8")) if saved.is_file() else {}
        config = LMWorldConfig(**{"condition_on_diagnosis": bool(trained.get("condition_on_diagnosis", False)),
                                  **settings})
        policy = build_policy(PolicyConfig(backend=backend, options={"model": str(model_dir), **(options or {})}))
        return cls(policy, load_tokenizer(model_dir), config, catalogue, owns_policy=True)

    def simulate(self, case: Case, exam: str, history: Sequence[PriorExam], *, seed: int = 0) -> str:
        return self.simulate_many([SimulationRequest(case, exam, tuple(history), seed)])[0]

    def simulate_many(self, requests: Sequence[SimulationRequest]) -> list[str]:
        batch = [self.request(i, r) for i, r in enumerate(requests)]
        generations = self.policy.generate(batch) if batch else []
        release = getattr(self.policy, "release", None)  # hf keeps each key's keys/values for a next turn: none comes
        if release is not None:
            for r in batch:
                release(r.key)
        return [result_text(g.text) for g in generations]

    def request(self, index: int, r: SimulationRequest) -> GenerationRequest:
        cfg = self.config
        exam = self.catalogue.exams.get(r.exam) or self.catalogue.exam(r.exam)
        name = exam.name if exam is not None else r.exam
        fitted = prompt_ids(self.tokenizer, r.case, name, r.history, self.prompt_budget, cfg.condition_on_diagnosis)
        if fitted is None:  # not even the profile fits: sent whole, the policy answers it as over the context
            fitted = prompt_ids(self.tokenizer, r.case, name, (), 1 << 30, cfg.condition_on_diagnosis)
            assert fitted is not None
        # a draw depends on the case, the exam and the exams before it, never on the batch it travels in
        seed = draw_seed(cfg.seed, r.seed, r.case.case_id, name, [p.exam for p in r.history]) % 2**31
        sampling = Sampling(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                            seed=seed)
        return GenerationRequest(key=f"lm-world/{index}/{r.case.case_id}/{name}/{len(r.history)}", messages=[],
                                 sampling=sampling, prompt_token_ids=fitted[0])

    def close(self) -> None:
        if self.owns_policy:
            self.policy.close()
