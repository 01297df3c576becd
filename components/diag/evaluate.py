"""Evaluating diagnostic agents, as DiagGym does: end to end in the environment, and one turn at a time on
recorded cases.

An agent (`DiagAgent`) is one method, `act(view) -> reply text`: the view holds the observations the environment
has shown in this episode (the first is the presentation) and the agent's own earlier replies, nothing else; the
reply is parsed by the environment exactly as a model's text is. The baselines (components.diag.baselines)
implement it directly; `PolicyAgent` adapts a platform `Policy` (components.policies.protocol) for single turn.

End to end (`run_agent`, `summarize_agent`): the rollout engine (components.rollout.play) plays the agent, as a
Policy (`AgentPolicy`; a platform Policy plays as itself, on exact-token contexts), and with `out_dir` its episodes
land in an EpisodeStore there (validated shards; a rerun plays only what is missing). Each held-out case is played
`samples` times (sample i sees the environment's draws for sample i, and the agent's seed is the episode key), and
the Episodes give average turns,
exam precision, recall, F1 (`f1_mean` and `f1_of_means`, components.diag.metrics) and diagnosis accuracy, each with
a 95% percentile bootstrap interval over cases (a case's samples stay together). `compare` gives a minus b on the
cases and samples both played: `paired_difference` for the per-case metrics in [0, 1], a case bootstrap of the
difference for average turns and `f1_of_means` (which is not a mean over cases).

Single turn (`single_turn`): a case's recorded exam events (those in the catalogue, in time order, one order per
turn) are replayed through a DiagEnv on the case's own results (RecordedWorldModel), which gives the observations
an environment would have produced and the order texts as replies. At each step t the agent sees the prefix up to
event t and its order is a hit when it includes event t's exam (under credit names, as exam F1 counts them; only
the exams one turn may hold). Given the whole prefix it should diagnose: right or wrong as the grader says. The
replay env allows one turn more than the case has events, so the last observation asks for the final diagnosis.
Next-exam hits are pooled over steps, with a bootstrap interval over cases; diagnosis accuracy has a Wilson
interval (one trial per case).

No "key exams, then the truth" upper reference is reported: it scores 1 on accuracy, precision and recall by
construction, and it would have to read the truth that the environment keeps grader-only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field

from components.common.io import atomic_write
from components.diag.actions import Diagnose, OrderExams, parse_diag_action
from components.diag.catalogue import Catalogue, default_catalogue
from components.diag.env import DIAG_SYSTEM_PROMPT, DiagEnv, DiagEnvConfig
from components.diag.grading import grade_diagnosis
from components.diag.metrics import CaseOutcome, DiagSummary, outcome_of, summarize
from components.diag.record import Case
from components.diag.world import RecordedWorldModel, WorldModel
from components.envs.episode import Episode, Sampling
from components.evaluation.metrics import Estimate, bootstrap_interval, paired_difference, wilson_interval
from components.policies.protocol import Generation, GenerationRequest, Policy
from components.policies.tokens import ChatTokens
from components.rollout.jobs import SamplingPlan, plan_jobs
from components.rollout.play import play_jobs
from components.rollout.store import EpisodeStore

METRICS = ("accuracy", "avg_turns", "precision", "recall", "f1_mean", "f1_of_means")
PER_CASE = {"accuracy": lambda o: float(o.correct), "precision": lambda o: o.exams.precision,
            "recall": lambda o: o.exams.recall, "f1_mean": lambda o: o.exams.f1}


@dataclass(frozen=True)
class DiagView:
    """What an agent is shown: never the case, its diagnosis or its key exams."""

    key: str  # the episode id ("<case id>#<sample>"): seeds an agent's draws
    observations: tuple[str, ...]  # the presentation, then what each reply got back
    replies: tuple[str, ...]  # the agent's own replies, one fewer than observations


@runtime_checkable
class DiagAgent(Protocol):
    name: str

    def act(self, view: DiagView) -> str: ...


@dataclass
class PolicyAgent:
    """A platform Policy as a DiagAgent: the view as chat messages (system prompt, observations as user turns,
    replies as assistant turns), one generation. Token backends need `chat` (components.policies.tokens.ChatTokens);
    their context is rebuilt from text each turn, which is what evaluation needs (training rollouts keep exact ids
    through the rollout scheduler instead)."""

    policy: Policy
    sampling: Sampling = field(default_factory=Sampling)
    chat: ChatTokens | None = None
    system_prompt: str = DIAG_SYSTEM_PROMPT
    name: str = ""
    _memory: dict[str, dict] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or self.policy.model_id
        if self.policy.uses_tokens and self.chat is None:
            raise ValueError(f"the {self.policy.backend} backend takes token ids: pass chat=ChatTokens(tokenizer)")

    def messages(self, view: DiagView) -> list[dict[str, str]]:
        out = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": view.observations[0]}]
        for reply, obs in zip(view.replies, view.observations[1:], strict=True):
            out += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
        return out

    def act(self, view: DiagView) -> str:
        messages = self.messages(view)
        ids = self.chat.start(messages) if self.chat is not None else None
        request = GenerationRequest(key=view.key, messages=messages, sampling=self.sampling, prompt_token_ids=ids,
                                    memory=self._memory.setdefault(view.key, {}))
        return self.policy.generate([request])[0].text

    def release(self, key: str) -> None:
        self._memory.pop(key, None)
        release = getattr(self.policy, "release", None)
        if release is not None:
            release(key)


# ------------------------------------------------------------------------------------------------ end to end


@dataclass
class AgentPolicy:
    """A DiagAgent as a platform Policy, so that the rollout engine plays it: each request's chat is read back into
    the agent's view (the observations are the user turns, its replies the assistant turns; the system prompt, which
    every agent knows, is left out)."""

    agent: DiagAgent
    backend: str = "agent"
    uses_tokens: bool = False
    max_context: int | None = None

    @property
    def model_id(self) -> str:
        return self.agent.name

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return [Generation(text=self.agent.act(view_of(r))) for r in requests]

    def release(self, key: str) -> None:
        release = getattr(self.agent, "release", None)
        if release is not None:
            release(key)

    def close(self) -> None:
        """The agent belongs to the caller."""


def view_of(request: GenerationRequest) -> DiagView:
    chat = [m for m in request.messages if m["role"] != "system"]
    return DiagView(key=request.key, observations=tuple(m["content"] for m in chat if m["role"] == "user"),
                    replies=tuple(m["content"] for m in chat if m["role"] == "assistant"))


def run_agent(agent: DiagAgent | Policy, cases: Sequence[Case], world: WorldModel, config: DiagEnvConfig | None = None,
              samples: int = 1, catalogue: Catalogue | None = None, *, out_dir: Path | str | None = None,
              sampling: Sampling | None = None, seed: int = 0, max_in_flight: int = 32) -> list[Episode]:
    """`samples` episodes of each case, in (case, sample) order, played by the rollout engine. A platform Policy
    samples with `sampling` (sample i of a case seeded from `seed`, the case and i); with `out_dir` the episodes
    are stored there and a rerun resumes."""
    policy = agent if isinstance(agent, Policy) else AgentPolicy(agent)
    s = sampling or Sampling()
    plan = SamplingPlan(k=samples, first_temperature=s.temperature, temperature=s.temperature, top_p=s.top_p,
                        max_new_tokens=s.max_new_tokens, seed=seed)
    return play_jobs(policy, lambda: DiagEnv(world, config, catalogue), plan_jobs(cases, plan), out_dir,
                     max_in_flight=max_in_flight).episodes


def agent_episodes_dir(out_dir: Path | str, agent: str) -> Path:
    """Where an evaluation keeps an agent's episodes: an EpisodeStore folder (a model id may hold a "/")."""
    return Path(out_dir) / "episodes" / re.sub(r"[^A-Za-z0-9_.-]", "_", agent)


class Interval(BaseModel):
    value: float
    low: float
    high: float
    n: int  # cases behind it

    @classmethod
    def of(cls, est: Estimate) -> Interval:
        return cls(value=est.value, low=est.low, high=est.high, n=est.n)

    def show(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


class AgentSummary(BaseModel):
    agent: str
    cases: int
    episodes: int
    outcomes: dict[str, int]  # correct, wrong_answer, no_answer, stuck_loop, context_limit
    metrics: dict[str, Interval]  # METRICS, each with its bootstrap interval over cases


def _by_case(episodes: Iterable[Episode]) -> dict[str, dict[int, CaseOutcome]]:
    """case id -> sample index -> outcome."""
    out: dict[str, dict[int, CaseOutcome]] = {}
    for e in episodes:
        if e.sample_index in out.setdefault(e.task_id, {}):
            raise ValueError(f"episode {e.episode_id} appears twice")
        out[e.task_id][e.sample_index] = outcome_of(e)
    return out


def _summary(groups: Iterable[Mapping[int, CaseOutcome]]) -> DiagSummary:
    return summarize([o for g in groups for o in g.values()])


def summarize_agent(name: str, episodes: Sequence[Episode], n_boot: int = 2000, seed: int = 0) -> AgentSummary:
    groups = list(_by_case(episodes).values())
    if not groups:
        raise ValueError(f"agent {name}: no episodes to summarize")
    metrics = {m: Interval.of(bootstrap_interval(lambda g, m=m: getattr(_summary(g), m), groups, n_boot, seed))
               for m in METRICS}
    outcomes: dict[str, int] = {}
    for e in episodes:
        outcomes[str(e.outcome)] = outcomes.get(str(e.outcome), 0) + 1
    return AgentSummary(agent=name, cases=len(groups), episodes=len(episodes), outcomes=outcomes, metrics=metrics)


class PairedComparison(BaseModel):
    a: str
    b: str
    cases: int  # cases both played, with the same samples
    differences: dict[str, Interval]  # a - b, per metric


def compare(a_name: str, a: Sequence[Episode], b_name: str, b: Sequence[Episode], n_boot: int = 2000,
            seed: int = 0) -> PairedComparison:
    """a minus b on the cases both played with the same samples (so with the same environment draws)."""
    ga, gb = _by_case(a), _by_case(b)
    shared = sorted(c for c in set(ga) & set(gb) if set(ga[c]) == set(gb[c]))
    if not shared:
        raise ValueError(f"compare {a_name} and {b_name}: no case played by both with the same samples")
    diffs: dict[str, Interval] = {}
    for m, per in PER_CASE.items():
        ma = {c: float(np.mean([per(o) for o in ga[c].values()])) for c in shared}
        mb = {c: float(np.mean([per(o) for o in gb[c].values()])) for c in shared}
        diffs[m] = Interval.of(paired_difference(ma, mb, n_boot, seed))
    pairs = [(ga[c], gb[c]) for c in shared]
    for m in ("avg_turns", "f1_of_means"):
        def stat(ps, m=m) -> float:
            return getattr(_summary(p[0] for p in ps), m) - getattr(_summary(p[1] for p in ps), m)
        diffs[m] = Interval.of(bootstrap_interval(stat, pairs, n_boot, seed))
    return PairedComparison(a=a_name, b=b_name, cases=len(shared), differences={m: diffs[m] for m in METRICS})


# ------------------------------------------------------------------------------------------------ single turn


@dataclass(frozen=True)
class OraclePrefix:
    """A case's recorded exams replayed through the environment: what each step of single-turn evaluation shows."""

    key: str
    observations: tuple[str, ...]  # the presentation, then the result of each recorded exam
    replies: tuple[str, ...]  # the order of each recorded exam, as a model would write it
    exams: tuple[str, ...]  # the recorded exams (catalogue names), in time order


def oracle_prefix(case: Case, catalogue: Catalogue | None = None, config: DiagEnvConfig | None = None
                  ) -> OraclePrefix:
    cat = catalogue or default_catalogue()
    exams = tuple(e.exam for e in case.events if e.exam is not None and e.exam in cat.exams)
    cfg = (config or DiagEnvConfig()).model_copy(update={"max_turns": len(exams) + 1})
    env = DiagEnv(RecordedWorldModel(cat), cfg, cat)
    obs, replies = [env.reset(case).text], []
    for exam in exams:
        replies.append(OrderExams(exams=[exam]).model_dump_json())
        obs.append(env.step(replies[-1]).observation.text)
    return OraclePrefix(key=env.episode.episode_id, observations=tuple(obs), replies=tuple(replies), exams=exams)


class SingleTurnSummary(BaseModel):
    agent: str
    cases: int
    steps: int  # next-exam predictions made
    next_exam_hit: Interval | None  # None: no case has a recorded exam
    diagnosis_accuracy: Interval


def single_turn(agent: DiagAgent, cases: Sequence[Case], catalogue: Catalogue | None = None,
                config: DiagEnvConfig | None = None, n_boot: int = 2000, seed: int = 0) -> SingleTurnSummary:
    cat = catalogue or default_catalogue()
    cfg = config or DiagEnvConfig()
    hits: list[list[bool]] = []
    correct = 0
    for case in cases:
        prefix = oracle_prefix(case, cat, cfg)
        case_hits = []
        for t, target in enumerate(prefix.exams):
            view = DiagView(prefix.key, prefix.observations[:t + 1], prefix.replies[:t])
            action = parse_diag_action(agent.act(view))
            names = action.exams[:cfg.max_exams_per_turn] if isinstance(action, OrderExams) else []
            credits = {ex.credit for ex in map(cat.exam, names) if ex is not None}
            case_hits.append(cat.exams[target].credit in credits)
        if case_hits:
            hits.append(case_hits)
        action = parse_diag_action(agent.act(DiagView(prefix.key, prefix.observations, prefix.replies)))
        correct += isinstance(action, Diagnose) and grade_diagnosis(action.diagnosis, case, cat, cfg.reward).correct
    ratio = (Interval.of(bootstrap_interval(lambda g: sum(map(sum, g)) / sum(map(len, g)), hits, n_boot, seed))
             if hits else None)
    return SingleTurnSummary(agent=agent.name, cases=len(cases), steps=sum(map(len, hits)), next_exam_hit=ratio,
                             diagnosis_accuracy=Interval.of(wilson_interval(correct, len(cases))))


# ------------------------------------------------------------------------------------------------ the report


class DiagReport(BaseModel):
    cases_file: str | None = None
    split: str
    cases: int
    world: str  # the environment's world model
    samples: int  # episodes per case
    seed: int  # the bootstrap's seed (the environment's is in env_config)
    env_config: dict = Field(default_factory=dict)
    agents: list[AgentSummary]
    comparisons: list[PairedComparison] = Field(default_factory=list)  # each later agent minus the first
    single_turn: list[SingleTurnSummary] = Field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """Flat `agent.metric` values (`a-b.metric` for a comparison), for tracking."""
        out = {f"{a.agent}.{m}": i.value for a in self.agents for m, i in a.metrics.items()}
        out |= {f"{c.a}-{c.b}.{m}": i.value for c in self.comparisons for m, i in c.differences.items()}
        for s in self.single_turn:
            out[f"{s.agent}.single_turn_accuracy"] = s.diagnosis_accuracy.value
            if s.next_exam_hit is not None:
                out[f"{s.agent}.next_exam_hit"] = s.next_exam_hit.value
        return out

    def to_markdown(self) -> str:
        def show(estimates: Mapping[str, Interval]) -> list[str]:
            return [estimates[m].show(2 if m == "avg_turns" else 3) for m in METRICS]

        columns = ["accuracy", "avg turns", "exam precision", "exam recall", "F1 (mean)", "F1 (of means)"]
        lines = [f"# Diagnostic evaluation: {self.cases} {self.split} cases"
                 + (f" of `{self.cases_file}`" if self.cases_file else ""), "",
                 f"World model: {self.world}; {self.samples} episode(s) per case; 95% bootstrap intervals over cases "
                 f"(seed {self.seed}).", "", "## End to end", "",
                 *_table(["agent", *columns], [[a.agent, *show(a.metrics)] for a in self.agents])]
        if self.comparisons:
            lines += ["", "## Paired differences (same cases and draws)", "",
                      *_table(["a - b", "cases", *columns],
                              [[f"{c.a} - {c.b}", str(c.cases), *show(c.differences)] for c in self.comparisons])]
        if self.single_turn:
            lines += ["", "## Single turn (recorded exam prefixes)", "",
                      *_table(["agent", "cases", "steps", "next-exam hit ratio", "diagnosis accuracy (Wilson)"],
                              [[s.agent, str(s.cases), str(s.steps),
                                s.next_exam_hit.show() if s.next_exam_hit is not None else "n/a",
                                s.diagnosis_accuracy.show()] for s in self.single_turn])]
        return "\n".join(lines) + "\n"

    def write(self, out_dir: Path | str) -> tuple[Path, Path]:
        out = Path(out_dir)
        with atomic_write(out / "report.json") as fh:
            fh.write(self.model_dump_json(indent=2))
        with atomic_write(out / "report.md") as fh:
            fh.write(self.to_markdown())
        return out / "report.json", out / "report.md"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def evaluate_agents(agents: Sequence[DiagAgent], cases: Sequence[Case], world: WorldModel,
                    config: DiagEnvConfig | None = None, *, samples: int = 1, single_turn_cases: int | None = None,
                    n_boot: int = 2000, seed: int = 0, catalogue: Catalogue | None = None,
                    cases_file: str | None = None, split: str = "test", out_dir: Path | str | None = None,
                    progress: Callable[[str], None] | None = None) -> tuple[DiagReport, dict[str, list[Episode]]]:
    """Every agent end to end on the same cases and draws, each later agent compared with the first, and single
    turn on the first `single_turn_cases` cases (all when None, none when 0). With `out_dir` each agent's episodes
    are stored under it as they finish (`agent_episodes_dir`), and a rerun resumes."""
    if not agents or len({a.name for a in agents}) != len(agents):
        raise ValueError("evaluate_agents needs one or more agents with distinct names")
    cfg = config or DiagEnvConfig()
    episodes: dict[str, list[Episode]] = {}
    for agent in agents:
        if progress:
            progress(f"{agent.name}: {len(cases)} cases x {samples}")
        store = agent_episodes_dir(out_dir, agent.name) if out_dir is not None else None
        episodes[agent.name] = run_agent(agent, cases, world, cfg, samples, catalogue, out_dir=store)
    st_cases = list(cases if single_turn_cases is None else cases[:single_turn_cases])
    singles = [single_turn(a, st_cases, catalogue, cfg, n_boot, seed) for a in agents] if st_cases else []
    report = build_report(episodes, len(cases), world, cfg, samples=samples, singles=singles, n_boot=n_boot,
                          seed=seed, cases_file=cases_file, split=split)
    return report, episodes


def build_report(episodes: Mapping[str, Sequence[Episode]], cases: int, world: WorldModel, config: DiagEnvConfig,
                 *, samples: int, comparisons: Sequence[tuple[str, str]] | None = None,
                 singles: Sequence[SingleTurnSummary] = (), n_boot: int = 2000, seed: int = 0,
                 cases_file: str | None = None, split: str = "test") -> DiagReport:
    """The report of agents already played on the same cases and draws (`episodes`: agent name -> episodes);
    `comparisons` are (a, b) pairs reported as a - b, by default each later agent against the first."""
    names = list(episodes)
    pairs = comparisons if comparisons is not None else [(n, names[0]) for n in names[1:]]
    return DiagReport(cases_file=cases_file, split=split, cases=cases,
                      world=getattr(world, "name", type(world).__name__), samples=samples, seed=seed,
                      env_config=config.model_dump(mode="json"),
                      agents=[summarize_agent(n, episodes[n], n_boot, seed) for n in names],
                      comparisons=[compare(a, episodes[a], b, episodes[b], n_boot, seed) for a, b in pairs],
                      single_turn=list(singles))


def write_evaluation(report: DiagReport, episodes: Mapping[str, list[Episode]], out_dir: Path | str) -> list[Path]:
    """report.json and report.md under `out_dir`, each written atomically, and each agent's episodes in its
    EpisodeStore folder there (`agent_episodes_dir`; those already played into it are not written again)."""
    out = Path(out_dir)
    paths = list(report.write(out))
    for name, eps in episodes.items():
        folder = agent_episodes_dir(out, name)
        with EpisodeStore(folder) as store:
            done = store.done_keys()
            store.commit([e for e in eps if (e.task_id, e.sample_index) not in done])
        paths.append(folder)
    return paths
