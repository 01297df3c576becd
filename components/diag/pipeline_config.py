"""The `diag:` section of a pipeline profile (configs/diag-demo.yaml, diag-smoke.yaml): DiagGym end to end.

cohort → world (the statistical world model's card, and the LM world model trained and carded beside it) →
cold_start (SFT on oracle trajectories) → grpo (multi-turn GRPO from the cold start) → evaluate (baselines, the
untrained model, the cold start and GRPO on held-out patients, same draws) → register (the GRPO agent against the
cold start, the LM world model against the statistical one).

Training and evaluation play in the statistical world model (fast, deterministic by seed); the LM world model is
trained, measured and registered for the users who serve it as the environment (`LMWorldModel.from_checkpoint`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from components.diag.cohort import CohortConfig
from components.diag.env import DiagEnvConfig
from components.rl.grpo import GRPOSettings
from components.training.config import Schedule, SFTSettings


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LMWorldStage(_Strict):
    """The LM world model: SFT on the train split's results, then the card on some held-out patients."""

    enabled: bool = True
    train_cases: int | None = Field(default=None, ge=1, description="the first N train cases (None: all)")
    card_cases: int | None = Field(default=None, ge=1, description="held-out cases the card simulates (each result "
                                   "is one generation; None: all)")
    condition_on_diagnosis: bool = False
    max_new_tokens: int = Field(default=128, gt=0, description="per simulated result")
    sft: SFTSettings = Field(default_factory=lambda: SFTSettings(episodes=[]))


class WorldStage(_Strict):
    seed: int = 0
    min_values: int = Field(default=10, ge=2, description="values an analyte needs on both sides to be scored")
    lm: LMWorldStage = Field(default_factory=LMWorldStage)


class ColdStartStage(_Strict):
    train_cases: int | None = Field(default=None, ge=1, description="oracle episodes of the first N train cases")
    sft: SFTSettings = Field(default_factory=lambda: SFTSettings(episodes=[], schedule=Schedule(batch_size=1,
                                                                                                 grad_accum=4)))


class GRPOStage(_Strict):
    train_cases: int | None = Field(default=None, ge=1, description="the first N train cases (None: all)")
    settings: GRPOSettings = Field(default_factory=GRPOSettings)


class EvaluateStage(_Strict):
    cases: int | None = Field(default=None, ge=1, description="the first N held-out cases (None: all)")
    samples: int = Field(default=2, ge=1, description="episodes per case and agent; sample i sees the same draws "
                         "for every agent")
    baselines: list[str] = Field(default_factory=lambda: ["random", "greedy"])
    untrained: bool = Field(default=True, description="play the base model too")
    temperature: float = Field(default=1.0, ge=0, description="the models' sampling temperature (0: greedy); 1.0 "
                               "plays the policy GRPO trained")
    max_new_tokens: int = Field(default=64, gt=0)
    batch: int = Field(default=64, ge=1, description="episodes played at once by a model")
    single_turn_cases: int = Field(default=50, ge=0, description="cases for the baselines' single-turn evaluation")
    seed: int = 0


class DiagSettings(_Strict):
    base_model: str = "SmolLM2-135M-Instruct"
    dtype: str = Field(default="float32", description="the models' dtype when they play (evaluation)")
    out_dir: Path = Field(default=Path("data/diag"), description="cases.jsonl and its validation")
    models_dir: Path = Field(default=Path("models/diag"), description="world, cold_start, grpo checkpoints")
    cohort: CohortConfig = Field(default_factory=CohortConfig)
    env: DiagEnvConfig = Field(default_factory=DiagEnvConfig)
    world: WorldStage = Field(default_factory=WorldStage)
    cold_start: ColdStartStage = Field(default_factory=ColdStartStage)
    grpo: GRPOStage = Field(default_factory=GRPOStage)
    evaluate: EvaluateStage = Field(default_factory=EvaluateStage)
    agent_registry: str = Field(default="medgym-diag-agent", description="registered name of the GRPO agent")
    register_on: Literal["accuracy", "exam_f1"] = Field(
        default="accuracy", description="the per-case figure the GRPO agent is paired with the cold start (or the "
        "champion) on: the share of its episodes diagnosed right, or their mean exam F1")
    world_registry: str = Field(default="medgym-diag-world", description="registered name of the LM world model")
