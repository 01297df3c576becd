"""The pipeline's plan: which stages a profile runs, in what order, what each one reads, and what it writes.

A stage is one of: `suite` (build or import the tasks), a rollout of the profile (`teacher`, `base`, `sft_test`,
...), a training stage (`sft`, `verifier`, `dpo`, and per self-improvement round `round<r>-sft`, `round<r>-dpo`;
`grpo`, which plays its own episodes on the train tasks instead of reading a rollout's),
`evaluate` (the leaderboard of every held-out rollout, the valid ones in a board of their own) and `register` (the
chosen model into the registry).
Each kind of stage is one object (components/pipeline/kinds/) that builds its stages from the profile; this module
chains them. What a stage needs is read off the profile: a rollout needs the training stage whose merged model its
policy plays (`model: {stage: sft}`), a training stage the rollouts of its `episodes`, the stage it starts from and,
when it ranks by the verifier, the verifier. The model registered is chosen on the valid split where the profile
plays its trained policies there (`Plan.on_valid`: the register stage reads those rollouts and every candidate's
test rollout, and components.registry.selection picks), else it is the last policy trained (`Plan.final`).
Self-improvement rounds become ordinary stages here, so everything downstream (keys, caching, tracking, the dry run)
treats them like any other. A training stage reads only rollouts of the train split (`refuse_held_out_episodes`): a
profile that would train on valid or test tasks has no plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from components.pipeline.kinds import family, kind_of
from components.pipeline.paths import merged_dir
from components.profile.config import PipelineConfig, RolloutProfile
from components.training.config import CodingGRPOSettings, DPOSettings, SFTSettings, VerifierSettings
from components.training.stage import KINDS
from components.training.trainers import Method

SUITE, EVALUATE, REGISTER, SELF_IMPROVE, GRPO = "suite", "evaluate", "register", "self_improve", "grpo"
TRAIN_ORDER: tuple[Method, ...] = ("sft", "verifier", "dpo")


class PlanError(ValueError):
    """A profile whose stages cannot be chained; the message names the stage and what it lacks."""


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str  # a registered StageKind's name (components/pipeline/kinds/)
    needs: tuple[str, ...] = ()
    method: Method | None = None  # training stages (the grpo stage's is "grpo")
    settings: SFTSettings | DPOSettings | VerifierSettings | CodingGRPOSettings | None = None  # as they will train
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
        def playing(stage: str, names: list[str]) -> str | None:
            return next((n for n in names if self.cfg.rollouts[n].plays == stage), None)

        tests, valids = self.test_rollouts(), self.valid_rollouts()
        return [Policy(s, playing(s.name, tests), playing(s.name, valids))
                for s in self.stages if (s.kind == "train" and s.method != "verifier") or s.kind == GRPO]

    def on_valid(self) -> list[Policy]:
        """The candidates for registration: the trained policies a valid rollout plays (empty: no choice on valid)."""
        return [p for p in self.policies() if p.valid is not None]

    def parents(self, rollouts: Iterable[str]) -> dict[str, str]:
        """Each of `rollouts` that plays a trained model -> the one of `rollouts` on the same split that plays the
        nearest model its training started from (GRPO's -> the SFT model's; a round's DPO model's -> the model the
        round started from, its own SFT step being played by none): the leaderboard pairs them, which is what those
        stages added. A model trained from the base model is compared with the baseline."""
        names = list(rollouts)
        stages = {s.name: s for s in self.stages if s.method is not None}  # the trained ones
        folders = {str(merged_dir(self.cfg, s.method, s.name)): name for name, s in stages.items()}  # type: ignore[arg-type]
        playing: dict[tuple[str, str | None], str] = {}  # (a trained stage, a split) -> the first of `names` playing it
        for n in names:
            if (plays := self.cfg.rollouts[n].plays) is not None:
                playing.setdefault((plays, self.cfg.rollouts[n].split), n)

        def init_of(stage: str) -> str | None:
            init = str(getattr(stages[stage].settings, "init", ""))
            return init if init in stages else folders.get(init)

        out = {}
        for n in names:
            split, seen = self.cfg.rollouts[n].split, set()
            stage = self.cfg.rollouts[n].plays
            parent = init_of(stage) if stage in stages else None
            while parent is not None and (parent, split) not in playing and parent not in seen:
                seen.add(parent)
                parent = init_of(parent)
            if parent is not None and (parent, split) in playing:
                out[n] = playing[(parent, split)]
        return out

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
        return next((n for n in self.test_rollouts() if self.cfg.rollouts[n].plays is None), None)

    def waves(self, names: Iterable[str]) -> list[list[Stage]]:
        """The stages named, in run order, cut into waves: each wave runs at once and the next starts when it has
        ended. With `pipeline.side_by_side`, consecutive stages that play one model on the run's shared engine and
        need none of each other share a wave (on a CPU a collection's last episodes leave the engine mostly
        idle, and the next collection's first ones would fill it); every other stage is a wave of its own."""
        wanted, out, engine = set(names), [], None
        for stage in self.stages:
            if stage.name not in wanted:
                continue
            key = kind_of(stage.kind).shared_engine(self, stage) if self.cfg.pipeline.side_by_side else None
            if key is not None and out and key == engine and not set(stage.needs) & {s.name for s in out[-1]}:
                out[-1].append(stage)
            else:
                out.append([stage])
                engine = key
        return out

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


Training = tuple[str, Method, SFTSettings | DPOSettings | VerifierSettings, int]  # stage, method, settings, round


def trainings(cfg: PipelineConfig) -> list[Training]:
    """Every training stage the profile could have: each method with the profile's settings (trained where the profile
    configures it), and per self-improvement round `round<r>-sft`, which starts from the previous round's model (the
    first from `self_improve.init`'s) and adds the round's train rollout to its episodes, and `round<r>-dpo`, which
    starts from it."""
    si = cfg.pipeline.self_improve
    out: list[Training] = [(m, m, getattr(cfg.training, m), 0) for m in TRAIN_ORDER]
    if si.rounds == 0:
        return out
    if si.init not in KINDS:
        raise PlanError(f"pipeline.self_improve.init must be a training stage ({', '.join(KINDS)}), not {si.init!r}")
    prev = merged_dir(cfg, si.init)  # type: ignore[arg-type]
    for r in range(1, si.rounds + 1):
        train = f"round{r}_train"
        sft = si.sft.model_copy(update={"episodes": [*si.sft.episodes, train], "init": str(prev)})
        sft_dir = merged_dir(cfg, "sft", _stage_name("sft", r))
        dpo = si.dpo.model_copy(update={"episodes": [*si.dpo.episodes, train], "init": str(sft_dir)})
        prev = merged_dir(cfg, "dpo", _stage_name("dpo", r))
        out += [(_stage_name("sft", r), "sft", sft, r), (_stage_name("dpo", r), "dpo", dpo, r)]
    return out


def trained(cfg: PipelineConfig) -> dict[str, Method]:
    """The training stages the profile runs, by name, with their methods (online GRPO's is a method of its own)."""
    methods = {name: method for name, method, _, r in trainings(cfg) if r or method in cfg.training.model_fields_set}
    if GRPO in cfg.training.model_fields_set:
        methods[GRPO] = GRPO  # type: ignore[assignment]
    return methods


def expand_rollouts(cfg: PipelineConfig) -> PipelineConfig:
    """The profile's rollouts as the plan plays them: self-improvement rounds' added, and each rollout that plays a
    training stage's model (`plays`) given that stage's merged folder. Round r plays the train split with the
    previous round's model (`round<r>_train`), and the held-out split with its `round<r>-dpo` (`round<r>_test`)
    and, where the profile says how, the valid split (`round<r>_valid`: the round's model is then a candidate for
    registration)."""
    methods = trained(cfg)
    folders = {str(merged_dir(cfg, method, name)): name for name, method, _, _ in trainings(cfg)}
    rollouts: dict[str, RolloutProfile] = {}
    for name, r in cfg.rollouts.items():
        model = str(r.policy.options.get("model", ""))
        if r.plays is None and model in folders:
            raise PlanError(f"{cfg.source}: rollouts.{name} plays {model}, the {folders[model]} stage's model: write "
                            f"`model: {{stage: {folders[model]}}}`, so that the plan runs it after that stage")
        if r.plays is not None and r.plays not in methods:
            raise PlanError(f"{cfg.source}: rollouts.{name} plays the model of stage {r.plays!r}, which profile "
                            f"{cfg.profile} does not train (it trains: {', '.join(methods) or 'nothing'})")
        rollouts[name] = r if r.plays is None else _playing(r, cfg, r.plays, methods[r.plays], r.split)
    si = cfg.pipeline.self_improve
    if si.rounds and si.train.split not in (None, "train"):
        raise PlanError(f"{cfg.source}: pipeline.self_improve.train plays split {si.train.split!r}, and each round's "
                        "sft and dpo train on it: training reads train episodes only (set "
                        "pipeline.self_improve.train.split: train, or leave it out)")
    prev: tuple[str, Method] = (si.init, si.init)  # type: ignore[assignment]
    for r in range(1, si.rounds + 1):
        train_name, test_name, valid_name = f"round{r}_train", f"round{r}_test", f"round{r}_valid"
        for name in (train_name, test_name, valid_name):
            if name in cfg.rollouts:
                raise PlanError(f"rollout {name!r} is made by pipeline.self_improve; rename the profile's own")
        rollouts[train_name] = _playing(si.train, cfg, *prev, "train")
        prev = (_stage_name("dpo", r), "dpo")
        rollouts[test_name] = _playing(si.test, cfg, *prev, "test")
        if si.valid is not None:
            rollouts[valid_name] = _playing(si.valid, cfg, *prev, "valid")
    return cfg.model_copy(update={"rollouts": rollouts})


def _playing(template: RolloutProfile, cfg: PipelineConfig, stage: str, method: Method,
             split: str | None) -> RolloutProfile:
    options = {**template.policy.options, "model": str(merged_dir(cfg, method, stage))}
    policy = template.policy.model_copy(update={"options": options})
    return template.model_copy(update={"policy": policy, "plays": stage, "split": template.split or split})


def build_plan(cfg: PipelineConfig) -> Plan:
    """Every stage the profile configures, in `pipeline.stages` order or, by default, in dependency order
    (declaration order where the dependencies allow): each kind of the profile's family (components/pipeline/kinds/)
    adds its stages. A profile with a `diag` section runs DiagGym's stages."""
    if cfg.diag is not None:
        return build_diag_plan(cfg)
    plan = Plan(expand_rollouts(cfg))
    kinds = family("coding")
    candidates: dict[str, Stage] = {}
    for kind in kinds:
        if not kind.last:
            _add(plan, candidates, kind.stages(plan))
    plan.stages = [candidates[n] for n in _order(plan.cfg, candidates, [k.name for k in kinds if k.last])]
    for kind in kinds:
        if kind.last:
            plan.stages += kind.stages(plan)
    _check_order(plan)
    return plan


def _add(plan: Plan, candidates: dict[str, Stage], stages: list[Stage]) -> None:
    for stage in stages:
        if stage.name in candidates:
            raise PlanError(f"profile {plan.cfg.profile}: two stages named {stage.name!r} "
                            f"(a {candidates[stage.name].kind} and a {stage.kind}); rename one")
        candidates[stage.name] = stage


def _order(cfg: PipelineConfig, candidates: dict[str, Stage], later: list[str]) -> list[str]:
    """`later`: the stages of the `last` kinds, placed after these."""
    explicit = cfg.pipeline.stages
    if explicit is not None:
        names: list[str] = []
        for name in explicit:
            if name == SELF_IMPROVE:
                rounds = {n: s for n, s in candidates.items() if s.round > 0}
                names += _topological(cfg, rounds, done=set(names))
            elif name in later:
                continue  # placed after the rest
            elif name not in candidates:
                raise PlanError(f"pipeline.stages names {name!r}, which profile {cfg.profile} does not configure "
                                f"(it has: {', '.join([*candidates, SELF_IMPROVE, *later])})")
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
def build_diag_plan(cfg: PipelineConfig) -> Plan:
    """cohort → world → cold_start → grpo → evaluate → register (components/profile/diag.py), the diag family's
    kinds in rank order; `pipeline.stages` keeps those it names."""
    if cfg.rollouts or cfg.training.model_fields_set or cfg.pipeline.self_improve.rounds:
        raise PlanError(f"profile {cfg.profile}: a `diag` profile runs DiagGym's stages only; move its rollouts, "
                        "training and self_improve sections to a profile of their own")
    plan = Plan(cfg)
    for kind in family("diag"):
        plan.stages += kind.stages(plan)
    if cfg.pipeline.stages is not None:
        unknown = [n for n in cfg.pipeline.stages if n not in plan.names]
        if unknown:
            raise PlanError(f"pipeline.stages names {', '.join(unknown)}, not DiagGym stages "
                            f"({', '.join(plan.names)})")
        plan.stages = [s for s in plan.stages if s.name in cfg.pipeline.stages]
    _check_order(plan)
    return plan
