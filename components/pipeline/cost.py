"""The cost model of a plan: estimated GPU-hours and wall time per stage on the profile's GPUs, before a node is booked.

Every rate and workload figure is an assumption stated once, with its source, in cost_rates.yaml beside this module
(`Assumptions`); the sizes are the profile's own: tasks per split (the suite's tasks.jsonl when it exists, else the
generated suite's sizes, else the published size of the data source), k, max turns and new tokens per turn of each
rollout, and the epochs and max_length of each training stage. A size that none of these gives is an error naming
the rollout and split.

What a stage costs:
- a rollout: its episodes' generated tokens at the decode rate and their new prompt tokens at the prefill rate (prefix
  caching: each turn prefills only what the last one added), on the GPUs its engines hold; the sandbox steps at the
  workers' rate run beside it, so the stage takes the longer of the two, plus one engine start;
- a training stage: its examples' tokens times epochs at the training rate over the profile's processes (DPO: two
  sequences per pair and the reference's forward; a stage that ranks or filters by the verifier also scores every
  episode it reads), plus a fixed overhead for the launch and the merged checkpoint;
- evaluate: the verifier's scores of every held-out episode, where the plan trains a verifier;
- the suite and the registration: no GPU time.
GPU-hours count the GPUs a stage keeps busy (a rollout on one engine keeps one GPU busy while the others wait), so
the total's GPU-hours are below its wall time times the node's GPUs wherever GPUs idle.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from components.pipeline.plan import EVALUATE, Plan, Stage
from components.training.config import DPOSettings, SFTSettings, VerifierSettings

RATES_FILE = Path(__file__).with_name("cost_rates.yaml")


class CostError(ValueError):
    """A plan the cost model cannot size; the message names the rollout, split or figure it lacks."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Assumption(_Strict):
    value: float = Field(gt=0)
    unit: str
    source: str = Field(min_length=1, description="the bench/ script that measured it, or the published figure")


class Rates(_Strict):
    generate_tokens_per_s_per_gpu: Assumption
    prefill_tokens_per_s_per_gpu: Assumption
    train_tokens_per_s_per_gpu: Assumption
    score_tokens_per_s_per_gpu: Assumption
    dpo_reference_factor: Assumption
    sandbox_steps_per_s_per_worker: Assumption
    engine_start_s: Assumption
    train_stage_overhead_s: Assumption


class Workload(_Strict):
    turns_fraction: Assumption
    new_tokens_fraction: Assumption
    prompt_tokens: Assumption
    observation_tokens_per_turn: Assumption
    success_fraction: Assumption
    pair_fraction: Assumption
    verifier_examples_fraction: Assumption


class Assumptions(_Strict):
    rates: Rates
    workload: Workload
    datasets: dict[str, dict[str, Assumption]] = Field(default_factory=dict, description="tasks per split of a "
                                                       "data source, used until its tasks.jsonl exists")


def load_assumptions(path: Path = RATES_FILE) -> Assumptions:
    from components.common.io import RecordError

    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        return Assumptions.model_validate(raw)
    except ValueError as exc:
        err = exc.errors()[0]  # type: ignore[attr-defined]
        raise RecordError(path, None, ".".join(str(p) for p in err["loc"]), err["msg"]) from None


class StageCost(_Strict):
    stage: str
    gpu_hours: float
    wall_hours: float
    gpus: int = Field(description="GPUs the stage keeps busy")
    note: str = ""


class Estimate(_Strict):
    profile: str
    gpus: int
    stages: list[StageCost]

    @property
    def gpu_hours(self) -> float:
        return sum(s.gpu_hours for s in self.stages)

    @property
    def wall_hours(self) -> float:
        return sum(s.wall_hours for s in self.stages)

    def line(self) -> str:
        return f"estimated: {self.gpu_hours:,.0f} GPU-hours, {self.wall_hours:.1f} h wall on {self.gpus} GPUs"


class _Episodes(_Strict):
    count: float
    turns: float
    new_tokens: float  # per turn
    tokens: float  # one episode as a training row (capped by the stage's max_length where it trains)


def suite_counts(plan: Plan, root: Path) -> Counter[tuple[str, str]] | None:
    """The suite's tasks per (split, category) where its tasks.jsonl exists (None: not built yet)."""
    path = root / plan.cfg.data.out_dir / "tasks.jsonl"
    if not path.is_file():
        return None
    from components.tasks.record import load_tasks

    return Counter((t.split, t.category) for t in load_tasks(path))


def estimate(plan: Plan, tasks: Counter[tuple[str, str]] | None, assumptions: Assumptions | None = None) -> Estimate:
    """`tasks`: `suite_counts` of the plan."""
    a = assumptions or load_assumptions()
    if plan.cfg.diag is not None:
        raise CostError(f"{plan.cfg.source}: the cost model sizes the coding pipeline's stages; DiagGym's are not "
                        "modelled yet")
    gpus = plan.cfg.training.distributed.processes
    episodes = {s.name: _rollout_episodes(plan, s.name, tasks, a) for s in plan.stages if s.kind == "rollout"}
    has_verifier = any(s.kind == "train" and s.method == "verifier" for s in plan.stages)
    out = []
    for stage in plan.stages:
        if stage.kind == "rollout":
            out.append(_rollout_cost(plan, stage, episodes[stage.name], a, gpus))
        elif stage.kind == "train":
            out.append(_train_cost(plan, stage, episodes, a, gpus))
        elif stage.name == EVALUATE and has_verifier:
            scored = sum(episodes[n].count * episodes[n].tokens for n in stage.needs if n in episodes)
            out.append(_spread(stage.name, scored / a.rates.score_tokens_per_s_per_gpu.value, gpus, 0.0,
                               "verifier scores of the held-out episodes"))
        else:
            out.append(StageCost(stage=stage.name, gpu_hours=0.0, wall_hours=0.0, gpus=0, note="no GPU"))
    return Estimate(profile=plan.cfg.profile, gpus=gpus, stages=out)


def _tasks(plan: Plan, name: str, counts: Counter[tuple[str, str]] | None, a: Assumptions) -> int:
    c = plan.cfg.collection(name)
    data = plan.cfg.data
    if counts is not None:
        n = sum(v for (split, cat), v in counts.items()
                if (c.split is None or split == c.split) and (c.categories is None or cat in c.categories))
    elif data.source == "generate":
        size = data.suites[data.suite]
        per_split = {"train": size.train_per_category, "test": size.test_per_category,
                     "valid": size.valid_per_category}
        if c.split is not None and c.split not in per_split:
            raise CostError(f"{plan.cfg.source}: rollouts.{name} plays split {c.split!r}, which the generated suite "
                            f"does not make ({', '.join(per_split)})")
        from components.tasks.generators import generators_for

        categories = len(c.categories) if c.categories is not None else len(generators_for(data.categories))
        n = categories * (per_split[c.split] if c.split is not None else sum(per_split.values()))
    else:
        known = a.datasets.get(data.source, {})
        splits = [c.split] if c.split is not None else list(known)
        missing = [s for s in splits if s not in known]
        if missing or not splits:
            raise CostError(f"{plan.cfg.source}: rollouts.{name} plays split {', '.join(missing) or 'any'} of data "
                            f"source {data.source!r}, whose task count the cost model lacks: build "
                            f"{data.out_dir}/tasks.jsonl first, or add datasets.{data.source}."
                            f"{(missing or ['<split>'])[0]} to {RATES_FILE.name}")
        n = int(sum(known[s].value for s in splits))
        if c.categories is not None:
            raise CostError(f"{plan.cfg.source}: rollouts.{name} plays only some categories of {data.source!r}, "
                            f"whose counts per category are known once {data.out_dir}/tasks.jsonl is built")
    return min(n, c.limit) if c.limit is not None else n


def _rollout_episodes(plan: Plan, name: str, counts: Counter[tuple[str, str]] | None, a: Assumptions) -> _Episodes:
    c = plan.cfg.collection(name)
    w = a.workload
    turns = max(1.0, c.env.max_turns * w.turns_fraction.value)
    new = c.plan.max_new_tokens * w.new_tokens_fraction.value
    tokens = w.prompt_tokens.value + turns * (new + w.observation_tokens_per_turn.value)
    return _Episodes(count=_tasks(plan, name, counts, a) * c.plan.k, turns=turns, new_tokens=new, tokens=tokens)


def _engine_gpus(plan: Plan, name: str, gpus: int) -> int:
    options = plan.cfg.collection(name).policy.options
    # engines x tensor-parallel group: the GPUs a collection's generation holds
    engines = int(options.get("engines") or 1)
    return max(1, min(gpus, engines * int(options.get("tensor_parallel_size") or 1)))


def _rollout_cost(plan: Plan, stage: Stage, e: _Episodes, a: Assumptions, gpus: int) -> StageCost:
    r, w = a.rates, a.workload
    c = plan.cfg.collection(stage.name)
    held = _engine_gpus(plan, stage.name, gpus)
    prefill = e.count * (w.prompt_tokens.value + e.turns * w.observation_tokens_per_turn.value)
    gpu_s = e.count * e.turns * e.new_tokens / r.generate_tokens_per_s_per_gpu.value \
        + prefill / r.prefill_tokens_per_s_per_gpu.value
    sandbox_s = e.count * e.turns / (r.sandbox_steps_per_s_per_worker.value * c.workers)
    wall_s = max(gpu_s / held, sandbox_s) + r.engine_start_s.value
    note = f"{e.count:,.0f} episodes on {held} GPU" + ("s" if held > 1 else "")
    if sandbox_s > gpu_s / held:
        note += "; the sandboxes are slower than generation"
    return StageCost(stage=stage.name, gpu_hours=(gpu_s + r.engine_start_s.value * held) / 3600,
                     wall_hours=wall_s / 3600, gpus=held, note=note)


def _train_cost(plan: Plan, stage: Stage, episodes: dict[str, _Episodes], a: Assumptions, gpus: int) -> StageCost:
    r, w = a.rates, a.workload
    s = stage.settings
    assert s is not None
    read = [episodes[n] for n in s.episodes if n in episodes]
    length = s.schedule.max_length

    def rows(fraction: float) -> float:
        return sum(e.count * fraction * min(e.tokens, length) for e in read)

    scored = 0.0
    if isinstance(s, DPOSettings):
        tasks = sum(e.count for e in read) / max(1, _k(plan, s.episodes))
        tokens = tasks * w.pair_fraction.value * 2 * length_of(read, length) * r.dpo_reference_factor.value
        if s.verifier_pairs:
            scored = rows(1.0)
    elif isinstance(s, VerifierSettings):
        tokens = rows(w.verifier_examples_fraction.value)
    elif isinstance(s, SFTSettings):
        tokens = rows(w.success_fraction.value)
        if s.min_verifier_score is not None:
            scored = rows(w.success_fraction.value)
    else:  # pragma: no cover - every training method is one of the three
        raise CostError(f"no cost model for training stage {stage.name}")
    steps = s.schedule.max_steps
    if steps > 0:  # a step budget caps the epochs
        per_step = s.schedule.batch_size * s.schedule.grad_accum * gpus * length
        tokens = min(tokens * s.schedule.epochs, steps * per_step)
    else:
        tokens *= s.schedule.epochs
    gpu_s = tokens / r.train_tokens_per_s_per_gpu.value + scored / r.score_tokens_per_s_per_gpu.value
    note = f"{tokens / 1e6:,.0f}M trained tokens" + (f", {scored / 1e6:,.0f}M scored" if scored else "")
    return _spread(stage.name, gpu_s, gpus, r.train_stage_overhead_s.value, note)


def _k(plan: Plan, names: list[str]) -> int:
    ks = [plan.cfg.rollouts[n].plan.k for n in names if n in plan.cfg.rollouts]
    return max(ks, default=1)


def length_of(read: list[_Episodes], cap: int) -> float:
    """The mean length of an episode as a training row, over the episodes a stage reads."""
    total = sum(e.count for e in read)
    return sum(e.count * min(e.tokens, cap) for e in read) / total if total else 0.0


def _spread(name: str, gpu_s: float, gpus: int, overhead_s: float, note: str) -> StageCost:
    return StageCost(stage=name, gpu_hours=(gpu_s + overhead_s * gpus) / 3600,
                     wall_hours=(gpu_s / gpus + overhead_s) / 3600, gpus=gpus, note=note)
