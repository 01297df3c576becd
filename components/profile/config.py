"""Typed pipeline configuration, loaded from one YAML profile in configs/ (demo, smoke, paper)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from components.common.io import RecordError
from components.common.paths import PROJECT_ROOT
from components.envs.coding_env import EnvConfig
from components.policies.registry import PolicyConfig
from components.profile.diag import DiagSettings
from components.registry.decision import RegistryConfig
from components.rl.engine_weights import engine_config
from components.rollout.jobs import SamplingPlan
from components.rollout.runner import CollectionConfig
from components.sandbox.protocol import Limits
from components.tasks.suite import SuiteSize
from components.tracking.tracker import TrackingConfig
from components.training.config import DPOSettings, SFTSettings, TrainingConfig

CONFIG_DIR = PROJECT_ROOT / "configs"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Strict):
    # where the tasks come from: the generated suite of that size, or the public MedAgentGym release imported
    source: Literal["generate", "medagentgym"] = "generate"
    suite: Literal["demo", "full"] = "demo"
    import_from: Path | None = Field(default=None, description="the MedAgentGym release folder (source medagentgym)")
    seed: int = 0
    out_dir: Path = Path("data/demo")
    suites: dict[str, SuiteSize] = Field(
        default_factory=lambda: {
            # two valid tasks per category: the demo's eight focus categories give each trained model 16 to be chosen on
            "demo": SuiteSize(train_per_category=6, test_per_category=3, valid_per_category=2),
            "full": SuiteSize(train_per_category=1000, test_per_category=200),
        }
    )
    categories: list[str] | None = Field(default=None, description="the categories the generated suite holds (None: "
                                         "every generator's); a profile that plays a few builds and confirms only those")
    confirm_chunk: int = Field(default=200, gt=0, description="tasks whose reference code shares one sandbox run")
    confirm_workers: int = Field(default=2, gt=0)


class SandboxConfig(_Strict):
    backend: Literal["process", "docker", "auto"] = "auto"
    stateful: bool = False
    limits: Limits = Field(default_factory=Limits)


class RolloutProfile(_Strict):
    """One named collection of a profile; the environment and sandbox come from the profile unless overridden.

    A policy that plays a model this profile trains names the training stage, `model: {stage: sft}` among its
    options, rather than its folder: the profile keeps the stage as `plays`, and the plan
    (components/pipeline/plan.py) sets the model to that stage's merged folder and runs the rollout after it. A
    `model` that is a path or a name is a checkpoint from elsewhere, played as it is."""

    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    plays: str | None = Field(default=None, description="the training stage whose merged model the policy plays "
                              "(written `policy.options.model: {stage: <name>}`)")
    plan: SamplingPlan = Field(default_factory=SamplingPlan)
    split: str | None = None
    limit: int | None = Field(default=None, ge=1)
    categories: list[str] | None = Field(default=None, description="only tasks of these categories")
    workers: int = Field(default=2, ge=1)
    max_in_flight: int = Field(default=32, ge=1)
    ray_address: str | None = None
    gpus_per_worker: float = Field(default=0, ge=0, description="GPUs each Ray actor asks for (its vllm engines')")
    env: dict[str, Any] = Field(default_factory=dict, description="overrides of the profile's env section")
    out_dir: Path | None = Field(default=None, description="default: data/rollouts/<profile>/<name>")

    @model_validator(mode="before")
    @classmethod
    def _stage_model(cls, data: Any) -> Any:
        # `model: {stage: X}` leaves the options (whose backend config takes a path) for `plays`, before the
        # policy is validated
        policy = data.get("policy") if isinstance(data, dict) else None
        options = policy.get("options") if isinstance(policy, dict) else None
        model = options.get("model") if isinstance(options, dict) else None
        if not isinstance(model, dict):
            return data
        if set(model) != {"stage"} or not isinstance(model["stage"], str):
            raise ValueError(f"policy.options.model is a checkpoint (a path or a model name) or {{stage: <a training "
                             f"stage of the profile>}}, not {model}")
        if data.get("plays") not in (None, model["stage"]):
            raise ValueError(f"plays {data['plays']!r} and policy.options.model {model} name two stages")
        rest = {k: v for k, v in options.items() if k != "model"}
        return {**data, "policy": {**policy, "options": rest}, "plays": model["stage"]}


class SelfImproveConfig(_Strict):
    """Rounds of rejection sampling: the current model plays the train tasks (`train`), its correct episodes that
    the verifier approves train an SFT step, the same episodes' verifier-ranked pairs a DPO step, and the new model
    plays the held-out tasks (`test`). The policies' `model` option is set per round."""

    rounds: int = Field(default=0, ge=0)
    init: str = Field(default="dpo", description="the training stage whose model the first round starts from")
    train: RolloutProfile = Field(default_factory=RolloutProfile)
    test: RolloutProfile = Field(default_factory=RolloutProfile)
    valid: RolloutProfile | None = Field(default=None, description="each round's model on the valid split "
                                         "(`round<r>_valid`), which makes it a candidate for registration; "
                                         "None: the rounds are reported, never registered")
    # `episodes` here are rollouts mixed in besides the round's own (none by default)
    sft: SFTSettings = Field(default_factory=lambda: SFTSettings(episodes=[], min_verifier_score=0.5))
    dpo: DPOSettings = Field(default_factory=lambda: DPOSettings(episodes=[], verifier_pairs=True))

    @field_validator("sft", "dpo", mode="before")
    @classmethod
    def _own_episodes_only(cls, v: Any) -> Any:
        # a round trains on its own rollout; a profile's rollouts are mixed in only where it names them
        return {"episodes": [], **v} if isinstance(v, dict) else v


class PipelineSettings(_Strict):
    """What `medgym pipeline run` chains, in order. Names are the suite (`suite`), rollouts of `rollouts`,
    training methods (sft, verifier, dpo), `self_improve`, `evaluate` and `register`."""

    stages: list[str] | None = Field(default=None, description="default: suite, every rollout and training "
                                     "stage in dependency order, self_improve, evaluate, register")
    self_improve: SelfImproveConfig = Field(default_factory=SelfImproveConfig)
    baseline: str | None = Field(default=None, description="the rollout every policy is compared with")
    dvc_file: Path | None = Field(default=None, description="the profile's DVC pipeline (None: "
                                  "pipelines/<profile>/dvc.yaml); one file per profile, each with its own lock")
    side_by_side: bool = Field(
        default=False, description="run consecutive collections that play one model on the run's shared vLLM engine "
        "at once (sft_test, sft_valid and sft_train after SFT): each collection's last episodes leave the engine "
        "idle that the next one's first would fill; their stages' wall times then overlap")
    release_engine_for_training: bool = Field(
        default=False, description="stop the run's vLLM engine before each training stage, so that training has its "
        "memory (weights, KV cache); the next collection pays a restart (about a minute on a CPU)")
    gpu: bool | None = Field(
        default=None, description="whether the profile's runs need a GPU node: `medgym serve` puts its deployment in "
        "the medgym-gpu work pool, else in medgym-process; None: decided from training.distributed (several "
        "processes or DeepSpeed: GPUs)")
    state_dir: Path = Field(default=Path(".state/pipeline"), description="each stage's key and status, per profile")
    reports_dir: Path = Field(default=Path("reports"), description="evaluation reports go to <reports_dir>/<profile>")


class PipelineConfig(_Strict):
    profile: str
    data: DataConfig = Field(default_factory=DataConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    # the categories every rollout plays unless it names its own (None: all of the suite)
    focus: list[str] | None = None
    # named collections, played in this order by the pipeline (e.g. the teacher on train, the base model on test)
    rollouts: dict[str, RolloutProfile] = Field(default_factory=dict)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    pipeline: PipelineSettings = Field(default_factory=PipelineSettings)
    registry: RegistryConfig = Field(default_factory=RegistryConfig)
    # DiagGym's stages (components/profile/diag.py): a profile with this section runs them instead
    diag: DiagSettings | None = None
    # the YAML file it was loaded from, so that an error can name it (None: a profile built in code)
    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _focus_in_suite(self) -> PipelineConfig:
        built = self.data.categories
        if built is not None and self.data.source == "generate":
            played = {"focus": self.focus or []} | {f"rollouts.{n}.categories": r.categories or []
                                                    for n, r in self.rollouts.items()}
            for where, cats in played.items():
                missing = [c for c in cats if c not in built]
                if missing:
                    raise ValueError(f"{where} plays {missing}, which data.categories leaves out of the suite")
        return self

    @model_validator(mode="after")
    def _grpo_engines(self) -> PipelineConfig:
        # GRPO's engine options are a plain mapping in the training settings (see GRPOKnobs.vllm): checked here, so
        # that a typo fails when the profile loads, not when the stage starts hours into a run
        grpo = [("training.grpo", self.training.grpo)]
        if self.diag is not None:
            grpo.append(("diag.grpo.settings", self.diag.grpo.settings))
        for where, settings in grpo:
            try:
                engine_config(settings.vllm, "checkpoint")
            except ValidationError as exc:
                err = exc.errors()[0]
                raise ValueError(f"{where}.vllm.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
            except ValueError as exc:
                raise ValueError(f"{where}.vllm: {exc}") from None
        return self

    @property
    def source(self) -> str:
        """The profile as an error names it: its file (relative to the project where it lies inside it), else its name."""
        if self._path is None:
            return f"profile {self.profile}"
        root = CONFIG_DIR.parent
        return str(self._path.relative_to(root)) if self._path.is_relative_to(root) else str(self._path)

    def collection(self, name: str) -> CollectionConfig:
        if name not in self.rollouts:
            known = ", ".join(self.rollouts) or "none"
            raise KeyError(f"profile {self.profile} has no rollout {name!r} (it has: {known})")
        r = self.rollouts[name]
        if r.plays is not None and "model" not in r.policy.options:
            raise ValueError(f"{self.source}: rollouts.{name} plays the {r.plays} stage's model, whose folder the plan "
                             "sets (expand_rollouts, components/pipeline/plan.py): collect it from the plan's profile")
        env = EnvConfig.model_validate({**self.env.model_dump(), **r.env})
        return CollectionConfig(policy=r.policy, plan=r.plan, split=r.split, limit=r.limit,
                                categories=r.categories if r.categories is not None else self.focus, workers=r.workers,
                                max_in_flight=r.max_in_flight, ray_address=r.ray_address,
                                gpus_per_worker=r.gpus_per_worker, sandbox_backend=self.sandbox.backend,
                                limits=self.sandbox.limits, env=env)

    def rollout_dir(self, name: str) -> Path:
        r = self.rollouts[name]
        # beside the suite, not inside it: the suite folder is a DVC output that `dvc repro` rebuilds
        return r.out_dir or self.data.out_dir.parent / "rollouts" / self.profile / name


def as_config(config: str | Path | PipelineConfig) -> PipelineConfig:
    """A flow's `config` argument: a loaded profile (the pipeline passes its own, with the parent run set) or a
    profile name or path."""
    return config if isinstance(config, PipelineConfig) else load_config(config)


def load_config(profile_or_path: str | Path) -> PipelineConfig:
    """Load `configs/<profile>.yaml`, or a YAML file given by path."""
    path = Path(profile_or_path)
    if not path.suffix:
        path = CONFIG_DIR / f"{profile_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"no config {path}; profiles: {', '.join(known)}")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    try:
        cfg = PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise RecordError(path, None, ".".join(str(p) for p in err["loc"]), err["msg"]) from None
    cfg._path = path.resolve()
    return cfg
