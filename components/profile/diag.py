"""The `diag:` section of a pipeline profile (configs/diag-demo.yaml, diag-smoke.yaml): DiagGym end to end.

cohort (train, valid and test, split by patient) → world (the statistical world model fitted on train and saved,
its card, and the LM world model trained and carded beside it) → cold_start (SFT on oracle trajectories) → grpo
(multi-turn GRPO from the cold start) → evaluate (baselines, the untrained model, the cold start and GRPO on the
valid patients, same draws: the figures every choice is read off; then the cold start and GRPO on the test
patients, for the registration) → register (the GRPO agent against the cold start on test, the LM world model
against the statistical one).

Training and evaluation play in the one statistical world the world stage saved (fast, deterministic by
`world.seed`: every later stage loads that file and records its content hash); the LM world model is trained,
measured and registered for the users who serve it as the environment (`LMWorldModel.from_checkpoint`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from components.diag.cohort import CohortConfig
from components.diag.env import DiagEnvConfig
from components.policies.registry import PolicyConfig
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
    seed: int = Field(default=0, description="the world's seed: saved with the fitted world, it seeds every draw "
                      "of every later stage")
    min_values: int = Field(default=10, ge=2, description="values an analyte needs on both sides to be scored")
    lm: LMWorldStage = Field(default_factory=LMWorldStage)


class ColdStartStage(_Strict):
    train_cases: int | None = Field(default=None, ge=1, description="oracle episodes of the first N train cases "
                                    "(None: all)")
    episodes_per_case: int = Field(default=1, ge=1, description="oracle episodes of each case, each on its own "
                                   "draws of the world (the same exams, other results)")
    sft: SFTSettings = Field(default_factory=lambda: SFTSettings(episodes=[], schedule=Schedule(batch_size=1,
                                                                                                 grad_accum=4)))


class GRPOStage(_Strict):
    train_cases: int | None = Field(default=None, ge=1, description="the first N train cases (None: all)")
    settings: GRPOSettings = Field(default_factory=GRPOSettings)


class EvaluateStage(_Strict):
    cases: int | None = Field(default=None, ge=1, description="the first N valid cases, and the first N test cases "
                              "(None: all)")
    samples: int = Field(default=2, ge=1, description="episodes per case and agent; sample i sees the same draws "
                         "for every agent")
    baselines: list[str] = Field(default_factory=lambda: ["random", "greedy"])
    untrained: bool = Field(default=True, description="play the base model too")
    temperature: float = Field(default=1.0, ge=0, description="the models' sampling temperature (0: greedy); 1.0 "
                               "plays the policy GRPO trained")
    max_new_tokens: int = Field(default=64, gt=0)
    batch: int = Field(default=64, ge=1, description="episodes played at once by a model")
    single_turn_cases: int = Field(default=50, ge=0, description="valid cases for the baselines' single-turn "
                                   "evaluation")
    seed: int = Field(default=0, description="seeds the agents' sampling and the bootstrap; the world's draws are "
                      "world.seed's")
    policy: Literal["hf", "vllm"] = Field(default="hf", description="the backend the models play on: hf in this "
                                          "process, or vllm (a server of its own per model)")
    policy_options: dict[str, Any] = Field(default_factory=dict, description="the backend's own settings (e.g. "
                                           "vllm's enforce_eager, cpu_kvcache_space_gib); the model is each "
                                           "checkpoint's")

    @model_validator(mode="after")
    def _options_fit_the_backend(self) -> EvaluateStage:
        for own in ("model", "base_url"):
            if own in self.policy_options:
                raise ValueError(f"diag.evaluate.policy_options.{own}: the evaluation plays each checkpoint (untrained, "
                                 "cold start, GRPO) on a policy of its own; a fixed model or server would play one "
                                 "model under every name")
        try:
            PolicyConfig(backend=self.policy, options=self.policy_options)
        except ValueError as exc:
            first = exc.errors()[0] if hasattr(exc, "errors") else {}
            where = ".".join(str(p) for p in first.get("loc", ()) if p != "options")
            raise ValueError(f"diag.evaluate.policy_options{'.' + where if where else ''}: "
                             f"{first.get('msg', exc)} (backend {self.policy})") from None
        return self


class DiagSettings(_Strict):
    base_model: str = "SmolLM2-135M-Instruct"
    dtype: str = Field(default="float32", description="the models' dtype when they play (evaluation)")
    out_dir: Path = Field(default=Path("data/diag"), description="cases.jsonl and its validation")
    models_dir: Path = Field(default=Path("models/diag"), description="world, cold_start, grpo checkpoints")
    cohort: CohortConfig = Field(default_factory=lambda: CohortConfig(valid_fraction=0.2))
    env: DiagEnvConfig = Field(default_factory=DiagEnvConfig)
    world: WorldStage = Field(default_factory=WorldStage)
    cold_start: ColdStartStage = Field(default_factory=ColdStartStage)
    grpo: GRPOStage = Field(default_factory=GRPOStage)
    evaluate: EvaluateStage = Field(default_factory=EvaluateStage)
    agent_registry: str = Field(default="medgym-diag-agent", description="registered name of the GRPO agent")
    register_on: Literal["accuracy", "exam_f1"] = Field(
        default="accuracy", description="the per-case figure the GRPO agent is paired with the cold start (or the "
        "champion) on, over the test cases: the share of its episodes diagnosed right, or their mean exam F1 (chosen "
        "from the evaluation's valid report, never from test)")
    world_registry: str = Field(default="medgym-diag-world", description="registered name of the LM world model")

    @model_validator(mode="after")
    def _one_world_and_a_valid_split(self) -> DiagSettings:
        if "world_seed" in self.env.model_fields_set and self.env.world_seed != self.world.seed:
            raise ValueError(f"diag.env.world_seed {self.env.world_seed} differs from diag.world.seed "
                             f"{self.world.seed}: the world stage fits and seeds the one world every later stage "
                             "loads; drop diag.env.world_seed")
        if self.cohort.valid_fraction <= 0:
            raise ValueError("diag.cohort.valid_fraction is 0: the pipeline reads the GRPO steps and what to "
                             "register on off a valid split and the test split only for what is registered; give "
                             "valid a share of the patients (e.g. 0.2)")
        return self
