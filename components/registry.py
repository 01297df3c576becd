"""The MLflow Model Registry: register a trained model with its provenance, and promote it only on evidence.

A new version is compared, task by task, with the version under the `champion` alias (or, while there is none,
with a baseline evaluation such as the base model's): it takes `champion` only when the lower bound of the 95%
bootstrap interval of (candidate − reference) success over the shared tasks is above `margin`. Otherwise it
takes `challenger`. Either way the decision, its interval and the tasks it rests on are written to the version
(tags, description) and returned.

Per-task evaluation, so that the next candidate can be paired with the champion: each registration opens one
MLflow run (`register-<name>`) and stores the candidate's success per task there as the JSON artifact
`evaluation/task_success.json` ({task_id: success in [0, 1]}). The version's tag `medgym.eval.task_success`
holds its `runs:/<run_id>/evaluation/task_success.json` URI, which the next registration reads back. The
evidence lives in the tracking store beside the model, not in a rollout folder that may be moved or pruned;
`medgym.eval.reference` keeps where the episodes came from (a rollout folder, a report) for people to follow.
`medgym.eval.metric` names what the per-task figures measure (`success` unless said otherwise, e.g. a diagnostic
agent's exam F1): a candidate is only ever paired with an evaluation on the same metric.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from components.config import RegistryConfig, TrackingConfig
from components.envs.episode import Episode
from components.tracking.tracker import mlflow_key

TASK_SUCCESS_DIR = "evaluation"
TASK_SUCCESS_FILE = "task_success.json"
TASK_SUCCESS_TAG = "medgym.eval.task_success"
METRIC_TAG = "medgym.eval.metric"
DEFAULT_METRIC = "success"  # what versions registered before the metric was named were evaluated on
TAG_VALUE_MAX = 5000  # the registry's limit on a model version tag's value


class Evaluation(BaseModel):
    """A model's held-out evaluation, task by task: what a promotion is decided on."""

    model_config = ConfigDict(extra="forbid")

    task_success: dict[str, float] = Field(description="task id -> its score on `metric`, in [0, 1]: by default the "
                                                       "share of its finished episodes that are correct")
    metric: str = Field(default=DEFAULT_METRIC, min_length=1,
                        description="what `task_success` measures per task; only evaluations on the same metric are "
                                    "compared")
    reference: str | None = Field(default=None, description="where the episodes are: a rollout folder, a report")
    scores: dict[str, float] = Field(default_factory=dict, description="summary figures to tag, e.g. pass@1")

    @field_validator("task_success")
    @classmethod
    def _in_unit_interval(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("an evaluation needs at least one task")
        bad = {t: s for t, s in v.items() if not 0.0 <= s <= 1.0}
        if bad:
            raise ValueError(f"success must lie in [0, 1]; {len(bad)} task(s) do not, e.g. {next(iter(bad.items()))}")
        return v

    @classmethod
    def from_episodes(cls, episodes: Sequence[Episode], reference: str | None = None,
                      scores: Mapping[str, float] | None = None) -> Evaluation:
        from components.evaluation.report import task_success

        return cls(task_success=task_success(episodes), reference=reference, scores=dict(scores or {}))

    @property
    def success(self) -> float:
        return sum(self.task_success.values()) / len(self.task_success)


class Comparison(BaseModel):
    """candidate − reference success over the tasks both evaluated, with its 95% paired bootstrap interval."""

    against: Literal["champion", "baseline"]
    against_version: str | None = None  # the champion's version; None for a baseline
    against_reference: str | None = None  # where the reference's episodes are
    difference: float
    low: float
    high: float
    margin: float
    tasks: list[str]  # the shared task ids the interval is over
    candidate_only: int
    reference_only: int

    @property
    def supported(self) -> bool:
        return self.low > self.margin


class Decision(BaseModel):
    """What the registry did with one candidate, and why."""

    name: str
    version: str
    model_uri: str  # models:/<name>/<version>
    source: str  # the model URI the version was registered from
    run_id: str  # the registration run: task_success.json and decision.json
    alias: str
    promoted: bool
    previous_champion: str | None
    comparison: Comparison | None  # None when there was nothing to compare with
    reason: str
    task_success_uri: str


# ------------------------------------------------------------------------------------------------ the rule


def compare_to(candidate: Evaluation, reference: Evaluation, against: Literal["champion", "baseline"],
               config: RegistryConfig, version: str | None = None) -> Comparison:
    """The paired comparison behind a promotion; raises ValueError when the two share no task."""
    from components.evaluation.metrics import paired_difference

    a, b = candidate.task_success, reference.task_success
    diff = paired_difference(a, b, n_boot=config.n_boot, seed=config.seed)  # candidate − reference
    return Comparison(against=against, against_version=version, against_reference=reference.reference,
                      difference=diff.value, low=diff.low, high=diff.high, margin=config.margin,
                      tasks=sorted(set(a) & set(b), key=str), candidate_only=len(set(a) - set(b)),
                      reference_only=len(set(b) - set(a)))


def explain(c: Comparison, metric: str = DEFAULT_METRIC) -> str:
    who = f"champion v{c.against_version}" if c.against == "champion" else "the baseline"
    verdict = (f"lower bound {c.low:+.4f} > margin {c.margin:+.4f}: promoted" if c.supported
               else f"lower bound {c.low:+.4f} <= margin {c.margin:+.4f}: not supported")
    return (f"candidate − {who} {metric} {c.difference:+.4f}, 95% CI [{c.low:+.4f}, {c.high:+.4f}] over "
            f"{len(c.tasks)} shared tasks ({c.candidate_only} candidate-only, {c.reference_only} "
            f"{c.against}-only): {verdict}")


# ---------------------------------------------------------------------------------------------- the store


def git_commit(root: Path) -> tuple[str, bool]:
    """HEAD and whether the working tree has uncommitted changes; ("unknown", False) outside a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout

    try:
        return git("rev-parse", "HEAD").strip(), bool(git("status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "error_code", None) == "RESOURCE_DOES_NOT_EXIST"


def current_champion(client: Any, config: RegistryConfig) -> Any | None:
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(config.name)
    except MlflowException as exc:
        if _not_found(exc):  # no such model yet
            return None
        raise
    # read off the model's aliases: asking for an alias no version holds is an INVALID_PARAMETER_VALUE error in
    # the sqlite store, not a not-found one, and a first registration may well have stayed a challenger
    version = (model.aliases or {}).get(config.champion_alias)
    return client.get_model_version(config.name, version) if version is not None else None


def read_task_success(version: Any, tracking_uri: str) -> Evaluation | None:
    """The evaluation a registered version was promoted or kept on; None for a version registered elsewhere."""
    import mlflow.artifacts

    uri = version.tags.get(TASK_SUCCESS_TAG)
    if not uri:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp, tracking_uri=tracking_uri)
        task_success = json.loads(Path(path).read_text(encoding="utf-8"))
    return Evaluation(task_success=task_success, reference=version.tags.get("medgym.eval.reference"),
                      metric=version.tags.get(METRIC_TAG, DEFAULT_METRIC))


def _decide(candidate: Evaluation, champion: Any | None, champion_eval: Evaluation | None,
            baseline: Evaluation | None, config: RegistryConfig) -> tuple[Comparison | None, str]:
    if champion is not None:
        if champion_eval is None:
            return None, (f"champion v{champion.version} has no per-task evaluation ({TASK_SUCCESS_TAG}): "
                          "nothing to pair with, so no promotion")
        reference, against, version = champion_eval, "champion", str(champion.version)
    elif baseline is not None:
        reference, against, version = baseline, "baseline", None
    else:
        return None, "no champion and no baseline evaluation: nothing supports a promotion"
    if reference.metric != candidate.metric:  # a per-task accuracy paired with a per-task F1 would mean nothing
        who = f"champion v{version}" if version else "the baseline"
        return None, (f"the candidate was evaluated on {candidate.metric}, {who} on {reference.metric}: not "
                      "comparable, so no promotion")
    try:
        comparison = compare_to(candidate, reference, against, config, version)  # type: ignore[arg-type]
    except ValueError:
        return None, (f"the candidate shares no task with the {against}'s evaluation ({len(candidate.task_success)} "
                      f"vs {len(reference.task_success)} tasks): evaluate both on the same split, limit and seed")
    return comparison, explain(comparison, candidate.metric)


def _tags(candidate: Evaluation, data_versions: Mapping[str, str], commit: str, dirty: bool,
          comparison: Comparison | None, alias: str, reason: str, task_success_uri: str) -> dict[str, str]:
    tags = {f"medgym.data.{k}": v for k, v in data_versions.items()}
    tags |= {"medgym.git.commit": commit, "medgym.git.dirty": str(dirty).lower(),
             "medgym.eval.success": f"{candidate.success:.6f}", METRIC_TAG: candidate.metric,
             "medgym.eval.tasks": str(len(candidate.task_success)),
             TASK_SUCCESS_TAG: task_success_uri, "medgym.decision": alias, "medgym.decision.reason": reason}
    tags |= {f"medgym.eval.{k}": f"{v:.6g}" for k, v in candidate.scores.items()}
    if candidate.reference:
        tags["medgym.eval.reference"] = candidate.reference
    if comparison is not None:
        tags |= {"medgym.decision.against": comparison.against
                 + (f" v{comparison.against_version}" if comparison.against_version else ""),
                 "medgym.decision.difference": f"{comparison.difference:.6f}",
                 "medgym.decision.low": f"{comparison.low:.6f}", "medgym.decision.high": f"{comparison.high:.6f}",
                 "medgym.decision.margin": f"{comparison.margin:g}",
                 "medgym.decision.shared_tasks": str(len(comparison.tasks))}
    return {mlflow_key(k): v[:TAG_VALUE_MAX] for k, v in tags.items()}



def register(config: RegistryConfig, tracking: TrackingConfig, candidate: Evaluation, *,
             model_uri: str | None = None, model_dir: Path | None = None, baseline: Evaluation | None = None,
             data_versions: Mapping[str, str] | None = None, commit: str | None = None,
             project_root: Path | None = None) -> Decision:
    """Register one model (an MLflow model URI, or a checkpoint folder logged here) and promote it or not.

    `candidate` is its held-out evaluation; `baseline` (e.g. the base model's on the same tasks) is what it must
    beat while no version is champion. `data_versions` become `medgym.data.<key>` tags (DVC or dataset
    digests); `commit` defaults to the git HEAD of `project_root` (or of this checkout)."""
    from mlflow.tracking import MlflowClient

    import mlflow
    from components.tracking.training import training_run

    if (model_uri is None) == (model_dir is None):
        raise ValueError("register takes exactly one of model_uri (a logged model) and model_dir (a checkpoint)")
    if model_dir is not None and not (Path(model_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} holds no checkpoint (no config.json)")
    if commit is None:
        from components.policies.models import PROJECT_ROOT

        commit, dirty = git_commit(project_root or PROJECT_ROOT)
    else:
        dirty = False
    with training_run(tracking, f"register-{config.name}", project_root, system_metrics=False) as run:
        client = MlflowClient(tracking_uri=run.tracking_uri)
        champion = current_champion(client, config)
        champion_eval = read_task_success(champion, run.tracking_uri) if champion is not None else None
        comparison, reason = _decide(candidate, champion, champion_eval, baseline, config)
        promoted = comparison is not None and comparison.supported
        alias = config.champion_alias if promoted else config.challenger_alias

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / TASK_SUCCESS_FILE
            path.write_text(json.dumps(candidate.task_success, indent=1, sort_keys=True), encoding="utf-8")
            run.log_artifact(path, TASK_SUCCESS_DIR)
        task_success_uri = f"runs:/{run.run_id}/{TASK_SUCCESS_DIR}/{TASK_SUCCESS_FILE}"
        source = model_uri or run.log_model(Path(model_dir))  # type: ignore[arg-type]

        tags = _tags(candidate, data_versions or {}, commit, dirty, comparison, alias, reason, task_success_uri)
        version = mlflow.register_model(source, config.name, tags=tags)
        client.update_model_version(config.name, version.version, description=reason)
        client.set_registered_model_alias(config.name, alias, version.version)

        decision = Decision(name=config.name, version=str(version.version),
                            model_uri=f"models:/{config.name}/{version.version}", source=source, run_id=run.run_id,
                            alias=alias, promoted=promoted,
                            previous_champion=str(champion.version) if champion is not None else None,
                            comparison=comparison, reason=reason, task_success_uri=task_success_uri)
        run.set_tags({"medgym.stage": "register", "medgym.registry.model": config.name,
                      "medgym.registry.version": decision.version, "medgym.decision": alias})
        run.log_metrics({"candidate_success": candidate.success,
                         **({"difference": comparison.difference, "difference_low": comparison.low,
                             "difference_high": comparison.high} if comparison else {})})
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "decision.json"
            path.write_text(decision.model_dump_json(indent=1), encoding="utf-8")
            run.log_artifact(path, TASK_SUCCESS_DIR)
    return decision
