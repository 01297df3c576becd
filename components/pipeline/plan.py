"""The pipeline's plan: which stages a profile runs, in what order, what each one reads, and what it writes.

A stage is one of: `suite` (build or import the tasks), a rollout of the profile (`teacher`, `base`, `sft_test`,
...), a training stage (`sft`, `verifier`, `dpo`, and per self-improvement round `round<r>-sft`, `round<r>-dpo`),
`evaluate` (the leaderboard of every held-out rollout, the valid ones in a board of their own) and `register` (the
chosen model into the registry).
What a stage needs is read off the profile: a rollout needs the training stage whose merged model its policy
plays, a training stage the rollouts of its `episodes`, the stage it starts from and, when it ranks by the
verifier, the verifier. The model registered is chosen on the valid split where the profile plays its trained
policies there (`Plan.on_valid`: the register stage reads those rollouts and every candidate's test rollout, and
components.registry.selection picks), else it is the last policy trained (`Plan.final`). Self-improvement rounds
become ordinary stages here, so everything downstream (keys, caching, tracking, the dry run) treats them like any
other. A training stage reads only rollouts of the train split (`refuse_held_out_episodes`): a profile that would
train on valid or test tasks has no plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from components.pipeline.paths import dataset_dir, merged_dir, run_dir
from components.profile.config import PipelineConfig, RolloutProfile
from components.training.config import DPOSettings, SFTSettings, VerifierSettings
from components.training.stage import KINDS
from components.training.trainers import Method

Kind = Literal["suite", "rollout", "train", "evaluate", "register",
               "diag_cohort", "diag_world", "diag_cold_start", "diag_grpo", "diag_evaluate", "diag_register"]
SUITE, EVALUATE, REGISTER, SELF_IMPROVE = "suite", "evaluate", "register", "self_improve"
TRAIN_ORDER: tuple[Method, ...] = ("sft", "verifier", "dpo")


class PlanError(ValueError):
    """A profile whose stages cannot be chained; the message names the stage and what it lacks."""


@dataclass(frozen=True)
class Stage:
    name: str
    kind: Kind
    needs: tuple[str, ...] = ()
    method: Method | None = None  # training stages
    settings: SFTSettings | DPOSettings | VerifierSettings | None = None  # training stages, as they will train
    round: int = 0  # self-improvement round (0: the first pass)
    outputs: tuple[Path, ...] = ()  # what a changed key clears before the stage reruns


@dataclass(frozen=True)
class Policy:
    """A trained policy (a training stage other than the verifier) and the rollouts that play its merged model."""

    stage: Stage
    test: str | None  # the first test rollout that plays it
    valid: str | None  # the first valid rollout that plays it


@dataclass
class Plan:
    """The expanded profile (rounds' rollouts added) and its stages in run order."""

    cfg: PipelineConfig
    stages: list[Stage] = field(default_factory=list)

    def __getitem__(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r} in the plan of profile {self.cfg.profile} "
                       f"(it has: {', '.join(s.name for s in self.stages)})")

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def training_config(self, stage: Stage) -> PipelineConfig:
        """The profile as `run_stage` reads it for this stage: its method's settings replaced by the stage's."""
        assert stage.kind == "train" and stage.method is not None
        training = self.cfg.training.model_copy(update={stage.method: stage.settings})
        return self.cfg.model_copy(update={"training": training})

    def test_rollouts(self) -> list[str]:
        return self._rollouts_of("test")

    def valid_rollouts(self) -> list[str]:
        return self._rollouts_of("valid")

    def _rollouts_of(self, split: str) -> list[str]:
        return [s.name for s in self.stages if s.kind == "rollout" and self.cfg.rollouts[s.name].split == split]

    def evaluated(self) -> list[str]:
        """The test rollouts the leaderboard ranks (the evaluate stage's needs, less the valid rollouts, which have a
        board of their own, and the verifier that scores them)."""
        return [n for n in self[EVALUATE].needs if n in self.cfg.rollouts and self.cfg.rollouts[n].split != "valid"]

    def policies(self) -> list[Policy]:
        """Every trained policy in training order, with the test and valid rollouts that play it."""
        def playing(model: str, names: list[str]) -> str | None:
            return next((n for n in names if str(self.cfg.rollouts[n].policy.options.get("model", "")) == model), None)

        tests, valids = self.test_rollouts(), self.valid_rollouts()
        out = []
        for stage in self.stages:
            if stage.kind == "train" and stage.method != "verifier":
                model = str(merged_dir(self.cfg, stage.method, stage.name))  # type: ignore[arg-type]
                out.append(Policy(stage, playing(model, tests), playing(model, valids)))
        return out

    def on_valid(self) -> list[Policy]:
        """The candidates for registration: the trained policies a valid rollout plays (empty: no choice on valid)."""
        return [p for p in self.policies() if p.valid is not None]

    def test_reads(self) -> int:
        """How many of the profile's trained policies the leaderboard reads on test in a run: each is a look at the
        test split, whichever of them is registered."""
        evaluated = set(self.evaluated()) if EVALUATE in self.names else set()
        return sum(p.test in evaluated for p in self.policies())

    def baseline(self) -> str | None:
        """The held-out rollout others are compared with: the profile's choice, else the first one whose policy
        is no model trained here (the base model)."""
        if self.cfg.pipeline.baseline:
            return self.cfg.pipeline.baseline
        trained = {str(merged_dir(self.cfg, s.method, s.name)) for s in self.stages if s.kind == "train"}  # type: ignore[arg-type]
        for name in self.test_rollouts():
            if str(self.cfg.rollouts[name].policy.options.get("model", "")) not in trained:
                return name
        return None

    def final(self) -> tuple[Stage, str] | None:
        """The last policy trained and the test rollout that plays it: what is registered where no valid rollout
        plays a trained policy (see `on_valid`)."""
        last = next(reversed(self.policies()), None)
        return None if last is None or last.test is None else (last.stage, last.test)


def _stage_name(method: Method, round_: int) -> str:
    return method if round_ == 0 else f"round{round_}-{method}"


def training_reader(method: Method, stage: str | None = None) -> str:
    """A training stage as its profile section is spelled: `training.dpo`, or a round's
    `pipeline.self_improve.dpo (round1-dpo)`."""
    return f"training.{method}" if stage in (None, method) else f"pipeline.self_improve.{method} ({stage})"


def refuse_held_out_episodes(cfg: PipelineConfig, reader: str, episodes: Iterable[str]) -> None:
    """Raise `PlanError` unless every rollout `reader` trains on plays the train split only. A rollout without a
    `split` plays every split, so one missing line would put the test tasks into SFT, DPO or the verifier; a
    rollout the profile lacks is left to the plan's own message (what nothing makes)."""
    for name in episodes:
        rollout = cfg.rollouts.get(name)
        if rollout is None or rollout.split == "train":
            continue
        plays = "every split (it sets no split)" if rollout.split is None else f"split {rollout.split!r}"
        raise PlanError(f"{cfg.source}: {reader} reads rollouts.{name}, which plays {plays}: training reads train "
                        f"episodes only (set rollouts.{name}.split: train)")


def check_training_episodes(cfg: PipelineConfig, method: Method, stage: str | None = None) -> None:
    """`refuse_held_out_episodes` for a stage trained with `cfg`'s own settings of `method` (`medgym train`)."""
    refuse_held_out_episodes(cfg, training_reader(method, stage), getattr(cfg.training, method).episodes)


def expand_rounds(cfg: PipelineConfig) -> tuple[PipelineConfig, list[tuple[str, Method, object, int]]]:
    """Self-improvement rounds as rollouts and training stages: round r plays the train split with the previous
    round's model (`round<r>_train`), trains `round<r>-sft` on its verifier-approved successes and `round<r>-dpo`
    on its verifier-ranked pairs, and plays the held-out split with the result (`round<r>_test`) and, where the
    profile says how, the valid split (`round<r>_valid`: the round's model is then a candidate for registration)."""
    si = cfg.pipeline.self_improve
    trains: list[tuple[str, Method, object, int]] = [
        (m, m, getattr(cfg.training, m), 0) for m in TRAIN_ORDER]
    if si.rounds == 0:
        return cfg, trains
    if si.init not in KINDS:
        raise PlanError(f"pipeline.self_improve.init must be a training stage ({', '.join(KINDS)}), not {si.init!r}")
    if si.train.split not in (None, "train"):
        raise PlanError(f"{cfg.source}: pipeline.self_improve.train plays split {si.train.split!r}, and each round's "
                        "sft and dpo train on it: training reads train episodes only (set "
                        "pipeline.self_improve.train.split: train, or leave it out)")
    rollouts = dict(cfg.rollouts)
    prev = merged_dir(cfg, si.init)  # type: ignore[arg-type]
    for r in range(1, si.rounds + 1):
        train_name, test_name, valid_name = f"round{r}_train", f"round{r}_test", f"round{r}_valid"
        for name in (train_name, test_name, valid_name):
            if name in cfg.rollouts:
                raise PlanError(f"rollout {name!r} is made by pipeline.self_improve; rename the profile's own")
        rollouts[train_name] = _playing(si.train, prev, "train")
        sft = si.sft.model_copy(update={"episodes": [*si.sft.episodes, train_name], "init": str(prev)})
        sft_dir = merged_dir(cfg, "sft", _stage_name("sft", r))
        dpo = si.dpo.model_copy(update={"episodes": [*si.dpo.episodes, train_name], "init": str(sft_dir)})
        prev = merged_dir(cfg, "dpo", _stage_name("dpo", r))
        rollouts[test_name] = _playing(si.test, prev, "test")
        if si.valid is not None:
            rollouts[valid_name] = _playing(si.valid, prev, "valid")
        trains += [(_stage_name("sft", r), "sft", sft, r), (_stage_name("dpo", r), "dpo", dpo, r)]
    return cfg.model_copy(update={"rollouts": rollouts}), trains


def _playing(template: RolloutProfile, model: Path, split: str) -> RolloutProfile:
    policy = template.policy.model_copy(update={"options": {**template.policy.options, "model": str(model)}})
    return template.model_copy(update={"policy": policy, "split": template.split or split})


def build_plan(cfg: PipelineConfig) -> Plan:
    """Every stage the profile configures, in `pipeline.stages` order or, by default, in dependency order
    (declaration order where the dependencies allow). A profile with a `diag` section runs DiagGym's stages."""
    if cfg.diag is not None:
        return build_diag_plan(cfg)
    cfg, trains = expand_rounds(cfg)
    made_by = {str(merged_dir(cfg, method, name)): name for name, method, _, _ in trains}  # model folder -> stage
    candidates: dict[str, Stage] = {SUITE: Stage(SUITE, "suite", outputs=(cfg.data.out_dir,))}
    for name, r in cfg.rollouts.items():
        model = str(r.policy.options.get("model", ""))
        needs = (SUITE,) + ((made_by[model],) if model in made_by else ())
        rnd = int(name[len("round"):].split("_")[0]) if name.startswith("round") and name[5:6].isdigit() else 0
        candidates[name] = Stage(name, "rollout", needs, round=rnd, outputs=(cfg.rollout_dir(name),))
    for name, method, settings, r in trains:
        if r == 0 and method not in cfg.training.model_fields_set:
            continue  # a method is trained when the profile configures it
        refuse_held_out_episodes(cfg, training_reader(method, name), settings.episodes)  # type: ignore[attr-defined]
        needs = [*settings.episodes]  # type: ignore[attr-defined]
        init = settings.init  # type: ignore[attr-defined]
        if init in KINDS:
            needs.append(init)
        elif init in made_by:
            needs.append(made_by[init])
        if (method == "dpo" and settings.verifier_pairs) or (  # type: ignore[attr-defined]
                method == "sft" and settings.min_verifier_score is not None):  # type: ignore[attr-defined]
            needs.append("verifier")
        candidates[name] = Stage(name, "train", tuple(dict.fromkeys(needs)), method=method,  # type: ignore[arg-type]
                                 settings=settings, round=r,  # type: ignore[arg-type]
                                 outputs=(dataset_dir(cfg, method, name), run_dir(cfg, method, name)))
    order = _order(cfg, candidates)
    plan = Plan(cfg, [])
    for name in order:
        plan.stages.append(candidates[name])
    tests = plan.test_rollouts()
    explicit = cfg.pipeline.stages
    if (explicit is None and tests) or EVALUATE in (explicit or ()):
        # the verifier, where one is trained, ranks each rollout's episodes (best@k) and is scored (AUC) there
        scorer = ("verifier",) if "verifier" in order else ()
        plan.stages.append(Stage(EVALUATE, "evaluate", (*tests, *plan.valid_rollouts(), *scorer),
                                 outputs=(cfg.pipeline.reports_dir / cfg.profile / "leaderboard",)))
    needs = _register_needs(plan)
    if (explicit is None and needs is not None) or REGISTER in (explicit or ()):
        if needs is None:
            raise PlanError(f"profile {cfg.profile}: `register` needs a trained policy and a held-out rollout that "
                            "plays its merged model")
        plan.stages.append(Stage(REGISTER, "register", (EVALUATE, *needs)))
    _check_order(plan)
    return plan


def _register_needs(plan: Plan) -> tuple[str, ...] | None:
    """What the register stage reads besides the leaderboard: every candidate on valid, its valid and its test
    rollout (which one is registered is known only once the valid rollouts are played); without candidates, the last
    policy trained and its test rollout. None: nothing to register."""
    candidates = plan.on_valid()
    if not candidates:
        final = plan.final()
        return None if final is None else (final[0].name, final[1])
    untested = [p for p in candidates if p.test is None]
    if untested:
        p = untested[0]
        raise PlanError(f"{plan.cfg.source}: rollouts.{p.valid} plays {p.stage.name}'s model on valid, and no test "
                        f"rollout plays it: a model chosen on valid is registered on its test figure (add a rollout "
                        f"of {merged_dir(plan.cfg, p.stage.method, p.stage.name)} with split: test)")  # type: ignore[arg-type]
    return tuple(dict.fromkeys(n for p in candidates for n in (p.stage.name, p.valid, p.test)))  # type: ignore[misc]


def _order(cfg: PipelineConfig, candidates: dict[str, Stage]) -> list[str]:
    explicit = cfg.pipeline.stages
    if explicit is not None:
        names: list[str] = []
        for name in explicit:
            if name == SELF_IMPROVE:
                rounds = {n: s for n, s in candidates.items() if s.round > 0}
                names += _topological(cfg, rounds, done=set(names))
            elif name in (EVALUATE, REGISTER):
                continue  # placed after the rest
            elif name not in candidates:
                raise PlanError(f"pipeline.stages names {name!r}, which profile {cfg.profile} does not configure "
                                f"(it has: {', '.join([*candidates, SELF_IMPROVE, EVALUATE, REGISTER])})")
            else:
                names.append(name)
        return names
    return _topological(cfg, candidates)


def _topological(cfg: PipelineConfig, candidates: dict[str, Stage], done: set[str] | None = None) -> list[str]:
    """Declaration order where the dependencies allow; `done` are stages placed before these."""
    placed: list[str] = []
    pending = list(candidates)
    while pending:
        for name in pending:
            if all(n in placed or n in (done or set()) for n in candidates[name].needs):
                placed.append(name)
                pending.remove(name)
                break
        else:
            missing = {n: [d for d in candidates[n].needs if d not in candidates and d not in (done or set())]
                       for n in pending}
            missing = {n: m for n, m in missing.items() if m}
            if not missing:
                raise PlanError(f"profile {cfg.profile}: stages {', '.join(pending)} need each other (a cycle)")
            raise PlanError(f"profile {cfg.profile}: these stages need what nothing makes (and so do the "
                            f"stages after them): " + "; ".join(f"{n} needs {', '.join(m)}" for n, m in missing.items()))
    return placed


def _check_order(plan: Plan) -> None:
    seen: set[str] = set()
    for stage in plan.stages:
        late = [n for n in stage.needs if n not in seen]
        if late:
            where = "comes later" if all(n in plan.names for n in late) else "is not in the plan"
            raise PlanError(f"profile {plan.cfg.profile}: stage {stage.name!r} needs {', '.join(late)}, which "
                            f"{where} (pipeline.stages: {', '.join(plan.names)})")
        seen.add(stage.name)


# ---------------------------------------------------------------------- DiagGym
def diag_paths(cfg: PipelineConfig) -> dict[str, Path]:
    """Where each DiagGym stage writes: data, checkpoints (with their runs) and reports."""
    d = cfg.diag
    assert d is not None
    reports = cfg.pipeline.reports_dir / cfg.profile
    return {"cohort": d.out_dir, "world": d.models_dir / "world", "card": reports / "world",
            "cold_start": d.models_dir / "cold_start", "grpo": d.models_dir / "grpo",
            "evaluate": reports / "evaluation"}


def build_diag_plan(cfg: PipelineConfig) -> Plan:
    """cohort → world → cold_start → grpo → evaluate → register (components/profile/diag.py)."""
    if cfg.rollouts or cfg.training.model_fields_set or cfg.pipeline.self_improve.rounds:
        raise PlanError(f"profile {cfg.profile}: a `diag` profile runs DiagGym's stages only; move its rollouts, "
                        "training and self_improve sections to a profile of their own")
    p = diag_paths(cfg)
    stages = [Stage("cohort", "diag_cohort", outputs=(p["cohort"],)),
              Stage("world", "diag_world", ("cohort",), outputs=(p["world"], p["card"])),
              # every later stage plays in the statistical world the world stage saved: a refit reruns them
              Stage("cold_start", "diag_cold_start", ("cohort", "world"), outputs=(p["cold_start"],)),
              Stage("grpo", "diag_grpo", ("cohort", "world", "cold_start"), outputs=(p["grpo"],)),
              Stage("evaluate", "diag_evaluate", ("cohort", "world", "cold_start", "grpo"), outputs=(p["evaluate"],)),
              Stage("register", "diag_register", ("world", "evaluate", "grpo"))]
    if cfg.pipeline.stages is not None:
        unknown = [n for n in cfg.pipeline.stages if n not in {s.name for s in stages}]
        if unknown:
            raise PlanError(f"pipeline.stages names {', '.join(unknown)}, not DiagGym stages "
                            f"({', '.join(s.name for s in stages)})")
        stages = [s for s in stages if s.name in cfg.pipeline.stages]
    plan = Plan(cfg, stages)
    _check_order(plan)
    return plan
