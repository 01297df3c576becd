"""The MLflow side of the Model Registry: register a trained model with its provenance and its evaluation, and
promote it only on the paired test (components.registry.decision).

A new version is compared, task by task, with the version under the `champion` alias (or, while there is none,
with a baseline evaluation such as the base model's). It takes `champion` only when the paired test supports it;
otherwise `challenger`. Either way the decision, the test and the tasks it rests on are written to the version
(tags, description) and to the registration run's `evaluation/decision.json`, and returned.

Each registration opens one MLflow run (`register-<name>`) and stores the candidate's evaluation there, so that
the next candidate can be paired with it: `evaluation/task_success.json` ({task_id: score in [0, 1]}),
`evaluation/task_hashes.json` ({task_id: content hash}) and `evaluation/conditions.json`, each named by a tag of
the version (`medgym.eval.task_success`, `.task_hashes`, `.conditions`: a runs:/ URI). The evidence lives in the
tracking store beside the model, not in a rollout folder that may be moved or pruned; `medgym.eval.reference`
keeps where the episodes came from, and `medgym.eval.metric` what the per-task figures measure.

Looks: a version that was tested records the reference (`medgym.decision.against`: `champion v2`, `baseline`), the
digest of the paired tasks and their content (`medgym.decision.tasks_digest`) and its look number. The next
candidate counts the versions tested against the same reference on any of its paired tasks (same id, same content
hash) and is tested at the alpha its look is spent to.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from components.registry.content import tasks_digest
from components.registry.decision import Comparison, RegistryConfig, Role, decide
from components.registry.evaluation import DEFAULT_METRIC, Evaluation
from components.registry.selection import Selection
from components.tracking.source import git_commit  # a checkout's HEAD, or the image's build file
from components.tracking.tracker import TrackingConfig, mlflow_key

TASK_SUCCESS_DIR = "evaluation"
TASK_SUCCESS_FILE = "task_success.json"
TASK_SUCCESS_TAG = "medgym.eval.task_success"
METRIC_TAG = "medgym.eval.metric"
# the parts of an evaluation stored beside task_success.json: the version's tag names each one's runs:/ URI
RECORDED = {"task_hashes": ("medgym.eval.task_hashes", "task_hashes.json"),
            "conditions": ("medgym.eval.conditions", "conditions.json")}
AGAINST_TAG, DIGEST_TAG, LOOK_TAG = "medgym.decision.against", "medgym.decision.tasks_digest", "medgym.decision.look"
TAG_VALUE_MAX = 5000  # the registry's limit on a model version tag's value


class Decision(BaseModel):
    """What the registry did with one candidate, and why."""

    name: str
    version: str
    model_uri: str  # models:/<name>/<version>
    source: str  # the model URI the version was registered from
    run_id: str  # the registration run: the evaluation's files and decision.json
    alias: str
    promoted: bool
    previous_champion: str | None
    comparison: Comparison | None  # None when there was nothing to compare with
    reason: str
    task_success_uri: str
    selection: Selection | None = None  # how a pipeline chose this model among its trained ones; None: not recorded


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


def registered_version(client: Any, uri: str) -> Any:
    """The version `models:/<name>/<version>` or `models:/<name>@<alias>` names; LookupError when there is none."""
    from mlflow.exceptions import MlflowException

    body = uri.removeprefix("models:/")
    name, sep, alias = body.partition("@")
    if not sep:
        name, _, alias = body.rpartition("/")
    if body == uri or not name or not alias:
        raise LookupError(f"{uri}: not a registered version (models:/<name>/<version> or models:/<name>@<alias>)")
    try:
        return client.get_model_version_by_alias(name, alias) if sep else client.get_model_version(name, alias)
    except MlflowException as exc:
        raise LookupError(f"{uri}: no such registered version ({exc.message.splitlines()[0]})") from None


def _read_json(uri: str, tracking_uri: str) -> Any:
    import mlflow.artifacts

    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp, tracking_uri=tracking_uri)
        return json.loads(Path(path).read_text(encoding="utf-8"))


def read_evaluation(version: Any, tracking_uri: str) -> Evaluation | None:
    """The evaluation a registered version was promoted or kept on; None for a version registered elsewhere.
    Versions registered before task hashes and conditions were recorded read back without them."""
    uri = version.tags.get(TASK_SUCCESS_TAG)
    if not uri:
        return None
    recorded = {field: _read_json(version.tags[tag], tracking_uri)
                for field, (tag, _) in RECORDED.items() if version.tags.get(tag)}
    return Evaluation(task_success=_read_json(uri, tracking_uri), reference=version.tags.get("medgym.eval.reference"),
                      metric=version.tags.get(METRIC_TAG, DEFAULT_METRIC), **recorded)


def prior_looks(client: Any, name: str, against: str, paired: Mapping[str, str], tracking_uri: str) -> int:
    """How many versions of `name` were tested against `against` (tag form: `champion v2`, `baseline`) on any of
    the `paired` tasks (task id -> content hash).

    Overlap, not the same set: a candidate scored on one task fewer (an unfinished episode) or on a few more looks at
    the same evidence again. A version that records no task hashes is counted."""
    digest = tasks_digest(paired, paired)
    looks = 0
    for v in client.search_model_versions(f"name = '{name}'"):
        if v.tags.get(AGAINST_TAG) != against:
            continue
        uri = v.tags.get(RECORDED["task_hashes"][0])
        if v.tags.get(DIGEST_TAG) == digest or not uri:  # the same set, or unknown tasks: counted without reading
            looks += 1
            continue
        hashes = _read_json(uri, tracking_uri)
        looks += any(hashes.get(t) == h for t, h in paired.items())
    return looks


def _against_tag(against: Role, version: str | None) -> str:
    return f"champion v{version}" if against == "champion" else against


def _decide(client: Any, tracking_uri: str, candidate: Evaluation, champion: Any | None,
            champion_eval: Evaluation | None, baseline: Evaluation | None, config: RegistryConfig
            ) -> tuple[Comparison | None, str]:
    against: Role
    if champion is not None:
        if champion_eval is None:
            return None, (f"champion v{champion.version} has no per-task evaluation ({TASK_SUCCESS_TAG}): "
                          "nothing to pair with, so no promotion")
        reference, against, version = champion_eval, "champion", str(champion.version)
    elif baseline is not None:
        reference, against, version = baseline, "baseline", None
    else:
        return None, "no champion and no baseline evaluation: nothing supports a promotion"
    tag = _against_tag(against, version)
    return decide(candidate, reference, against, config, version=version,
                  prior_looks=lambda paired: prior_looks(client, config.name, tag, paired, tracking_uri))


def _tags(candidate: Evaluation, data_versions: Mapping[str, str], commit: str, dirty: bool,
          comparison: Comparison | None, alias: str, reason: str, uris: Mapping[str, str]) -> dict[str, str]:
    tags = {f"medgym.data.{k}": v for k, v in data_versions.items()}
    tags |= {"medgym.git.commit": commit, "medgym.git.dirty": str(dirty).lower(),
             "medgym.eval.success": f"{candidate.success:.6f}", METRIC_TAG: candidate.metric,
             "medgym.eval.tasks": str(len(candidate.task_success)), **uris,
             "medgym.decision": alias, "medgym.decision.reason": reason}
    tags |= {f"medgym.eval.{k}": f"{v:.6g}" for k, v in candidate.scores.items()}
    if candidate.reference:
        tags["medgym.eval.reference"] = candidate.reference
    if comparison is not None:
        t = comparison.test
        tags |= {AGAINST_TAG: _against_tag(comparison.against, comparison.against_version),
                 DIGEST_TAG: comparison.tasks_digest, LOOK_TAG: str(t.look), "medgym.decision.test": t.test,
                 "medgym.decision.alpha": f"{t.nominal_alpha:g}", "medgym.decision.alpha_spent": f"{t.alpha:.6g}",
                 "medgym.decision.p_value": f"{t.p_value:.6g}", "medgym.decision.wins": str(t.wins),
                 "medgym.decision.losses": str(t.losses), "medgym.decision.ties": str(t.ties),
                 "medgym.decision.difference": f"{t.difference:.6f}", "medgym.decision.low": f"{t.low:.6f}",
                 "medgym.decision.high": f"{t.high:.6f}", "medgym.decision.margin": f"{t.margin:g}",
                 "medgym.decision.min_discordant": str(t.min_discordant),
                 "medgym.decision.shared_tasks": str(t.n_tasks)}
    return {mlflow_key(k): v[:TAG_VALUE_MAX] for k, v in tags.items()}


def _selection_tags(selection: Selection) -> dict[str, str]:
    tags = {"medgym.selection.on": selection.on or "none", "medgym.selection.chosen": selection.chosen,
            "medgym.selection.test_reads": str(selection.test_reads), "medgym.selection.reason": selection.reason}
    if selection.candidates:
        tags["medgym.selection.candidates"] = "; ".join(f"{c.stage}={c.valid.cell()}" for c in selection.candidates)
    return {k: v[:TAG_VALUE_MAX] for k, v in tags.items()}


def _log_json(run: Any, body: Any, name: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")
        run.log_artifact(path, TASK_SUCCESS_DIR)
    return f"runs:/{run.run_id}/{TASK_SUCCESS_DIR}/{name}"


def register(config: RegistryConfig, tracking: TrackingConfig, candidate: Evaluation, *,
             model_uri: str | None = None, model_dir: Path | None = None, baseline: Evaluation | None = None,
             data_versions: Mapping[str, str] | None = None, commit: str | None = None,
             project_root: Path | None = None, selection: Selection | None = None) -> Decision:
    """Register one model (an MLflow model URI, or a checkpoint folder logged here) and promote it or not.

    `candidate` is its held-out evaluation, with its tasks' content hashes and its conditions (the next candidate
    is paired with it on them); `baseline` (e.g. the base model's on the same tasks) is what it must beat while no
    version is champion. `data_versions` become `medgym.data.<key>` tags (DVC or dataset digests); `commit`
    defaults to the git HEAD of `project_root` (or of this checkout). `selection` (components.registry.selection),
    how a pipeline chose this model, goes into the tags, the description and decision.json."""
    from mlflow.tracking import MlflowClient

    import mlflow
    from components.tracking.training import training_run

    if (model_uri is None) == (model_dir is None):
        raise ValueError("register takes exactly one of model_uri (a logged model) and model_dir (a checkpoint)")
    if model_dir is not None and not (Path(model_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} holds no checkpoint (no config.json)")
    unrecorded = [field for field in RECORDED if getattr(candidate, field) is None]
    if unrecorded:
        raise ValueError(f"register: the candidate's evaluation has no {' and no '.join(unrecorded)}; without them "
                         "no later candidate could be paired with it")
    if commit is None:
        from components.common.paths import PROJECT_ROOT

        commit, dirty = git_commit(project_root or PROJECT_ROOT)
    else:
        dirty = False
    with training_run(tracking, f"register-{config.name}", project_root, system_metrics=False) as run:
        client = MlflowClient(tracking_uri=run.tracking_uri)
        champion = current_champion(client, config)
        champion_eval = read_evaluation(champion, run.tracking_uri) if champion is not None else None
        comparison, reason = _decide(client, run.tracking_uri, candidate, champion, champion_eval, baseline, config)
        promoted = comparison is not None and comparison.supported
        alias = config.champion_alias if promoted else config.challenger_alias

        task_success_uri = _log_json(run, candidate.task_success, TASK_SUCCESS_FILE)
        uris = {TASK_SUCCESS_TAG: task_success_uri}
        uris |= {tag: _log_json(run, getattr(candidate, field), name) for field, (tag, name) in RECORDED.items()}
        source = model_uri or run.log_model(Path(model_dir))  # type: ignore[arg-type]

        tags = _tags(candidate, data_versions or {}, commit, dirty, comparison, alias, reason, uris)
        tags |= _selection_tags(selection) if selection is not None else {}
        version = mlflow.register_model(source, config.name, tags=tags)
        description = reason if selection is None else f"{selection.reason}\n\n{reason}"
        client.update_model_version(config.name, version.version, description=description)
        client.set_registered_model_alias(config.name, alias, version.version)

        decision = Decision(name=config.name, version=str(version.version),
                            model_uri=f"models:/{config.name}/{version.version}", source=source, run_id=run.run_id,
                            alias=alias, promoted=promoted,
                            previous_champion=str(champion.version) if champion is not None else None,
                            comparison=comparison, reason=reason, task_success_uri=task_success_uri,
                            selection=selection)
        run.set_tags({"medgym.stage": "register", "medgym.registry.model": config.name,
                      "medgym.registry.version": decision.version, "medgym.decision": alias})
        t = comparison.test if comparison else None
        run.log_metrics({"candidate_success": candidate.success,
                         **({"difference": t.difference, "difference_low": t.low, "difference_high": t.high,
                             "p_value": t.p_value, "alpha_spent": t.alpha, "look": t.look, "wins": t.wins,
                             "losses": t.losses, "ties": t.ties} if t else {}),
                         **({"test_reads": selection.test_reads} if selection is not None else {}),
                         **{f"valid.{c.stage}": c.valid.value for c in (selection.candidates if selection else ())}})
        _log_json(run, decision.model_dump(mode="json"), "decision.json")
    return decision
