"""One training stage end to end: episodes → dataset on disk → launch → merged checkpoint, in one MLflow run.

`build_dataset` turns a stage's rollouts into its validated, content-hashed dataset folder (a DVC output);
`run_stage` trains on it in one process or through `accelerate launch` on N (DeepSpeed when configured),
merges a LoRA adapter into a plain checkpoint, and logs config, dataset input, step and system metrics and
the model to MLflow. Where a stage's files are is the caller's to say (`StageDirs`): the pipeline lays a
profile's stages out (components/pipeline/paths.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from components.common.io import RecordError, atomic_dir, atomic_write
from components.common.paths import PROJECT_ROOT
from components.envs.episode import Episode, Outcome
from components.policies.tokens import ChatTokens, episode_token_ids
from components.training import data
from components.training.config import DistributedSettings, DPOSettings, SFTSettings, TrainingConfig, VerifierSettings
from components.training.models import is_adapter, load_tokenizer, merge_and_save
from components.training.trainers import FINAL, Method, TrainJob, TrainResult, read_result
from components.training.verifier import NO, YES, VerifierScorer, answer_ids, question_ids

if TYPE_CHECKING:
    from components.tracking.tracker import TrackingConfig

DEEPSPEED_DIR = PROJECT_ROOT / "infra" / "deepspeed"
KINDS: dict[str, str] = {"sft": "sft", "dpo": "preference", "verifier": "verifier"}
# beside a stage's merged model: which run, dataset and starting model made it (the verifier's says what it saw)
STAGE_MARKER = "medgym_stage.json"
LOSS_SERIES = "train_loss.json"  # beside a stage's merged model: [{"step", "loss"}], the curve of its run
# in a stage's run folder: the dataset and starting model its checkpoints belong to
RUN_MARKER = "medgym_run.json"
log = logging.getLogger(__name__)


class TrainingProfile(Protocol):
    """What a training stage reads of its profile, and nothing more: the profile's name (it names runs and
    messages), its training section and where runs are tracked. The composition layer's profile is one; this
    engine never imports it."""

    profile: str
    training: TrainingConfig
    tracking: TrackingConfig


@dataclass(frozen=True)
class StageDirs:
    """Where one training stage keeps its files, as the composition layer lays them out (components/pipeline/paths.py,
    `stage_dirs`); the engine reads and writes where it is told."""

    name: str  # the stage: its method's name, or a self-improvement round's (`round1-sft`)
    dataset: Path  # its dataset folder (a DVC output)
    run: Path  # its checkpoints (its launch log is written beside it)
    merged: Path  # the plain checkpoint the policies load
    rollouts: dict[str, Path] = field(default_factory=dict)  # the folders of the rollouts its `episodes` name


class RunConflictError(ValueError):
    """A run folder holds checkpoints of another dataset or starting model."""


class HeldOutEpisodeError(RecordError):
    """A training stage's rollout holds an episode of a valid or test task, or one that records no split."""


@dataclass
class StageOutput:
    method: Method
    result: TrainResult
    model_dir: Path  # the merged (or fully trained) checkpoint the policies load
    run_id: str | None
    model_uri: str | None


# ---------------------------------------------------------------------- data
def rollout_episodes(folder: Path, name: str, profile: str, trains: str | None = None) -> list[Episode]:
    """The episodes of the profile's rollout `name`, collected into `folder`. `trains` names the training stage that
    reads them (`sft stage 'round1-sft'`): each episode must then be of a train task (evaluation reads any split)."""
    from components.rollout.store import load_episodes_dir

    if not folder.is_dir():
        raise FileNotFoundError(f"no episodes of rollout {name!r} at {folder}: run `medgym rollout --collection "
                                f"{name} --profile {profile}` first")
    loaded = load_episodes_dir(folder).episodes
    if trains is not None:
        refuse_held_out(loaded, folder, name, f"the {trains} of profile {profile}")
    return loaded


def refuse_held_out(episodes: list[Episode], folder: Path, rollout: str, stage: str) -> None:
    """Raise HeldOutEpisodeError unless every episode is of a train task. The profile's `split:` line says what a
    rollout was meant to play; this reads what its episodes did play, so a folder collected on another split, or
    with no split line, cannot put valid or test tasks into SFT, DPO or the verifier."""
    held = [e for e in episodes if e.split != "train"]
    if not held:
        return
    first, more = held[0], f" (and {len(held) - 1} more)" if len(held) > 1 else ""
    problem = (f"is from the {first.split!r} split" if first.split is not None else
               f"records no split: it predates split recording, so rollout {rollout!r} must be collected again")
    raise HeldOutEpisodeError(folder, None, "split", f"{stage} trains on train episodes only, and episode "
                                                     f"{first.episode_id!r} of task {first.task_id!r}{more} {problem}")


def shortest_per_task(episodes: list[Episode], chat: ChatTokens, n: int) -> list[Episode]:
    by_task: dict[str, list[tuple[int, str, Episode]]] = defaultdict(list)
    for ep in episodes:
        if ep.outcome == Outcome.CORRECT:
            by_task[ep.task_id].append((len(episode_token_ids(ep, chat).input_ids), ep.episode_id, ep))
    return [ep for task in sorted(by_task) for _, _, ep in sorted(by_task[task], key=lambda t: t[:2])[:n]]


def dataset_rows(method: Method, settings: SFTSettings | DPOSettings | VerifierSettings, episodes: list[Episode],
                 chat: ChatTokens, judged: Judged | None = None) -> list[Any]:
    if method == "sft":
        assert isinstance(settings, SFTSettings)
        if settings.min_verifier_score is not None:
            # rejection sampling: a correct episode the verifier doubts is left out. One it trained on has no honest
            # score (it was taught YES on that very input): it is kept on the checker's verdict alone rather than
            # dropped on no evidence (its inflated score would have kept it anyway); Judged.stats counts them
            assert judged is not None
            episodes = [e for e in episodes if e.episode_id in judged.trained_on
                        or judged.scores.get(e.episode_id, 0.0) >= settings.min_verifier_score]
        if settings.per_task:
            episodes = shortest_per_task(episodes, chat, settings.per_task)
        return data.sft_examples(episodes, chat, max_tokens=settings.schedule.max_length)
    if method == "dpo":
        assert isinstance(settings, DPOSettings)
        pairs = data.within_episode_pairs(episodes, chat) + data.across_episode_pairs(
            episodes, chat, settings.schedule.seed, settings.pairs_per_task)
        if judged is not None:
            # only scored episodes rank a pair, and an episode the verifier trained on is never scored
            pairs += data.verifier_ranked_pairs(episodes, chat, judged.scores)
        pairs = [p for p in pairs if len(p.prompt_ids) + max(len(p.chosen_ids), len(p.rejected_ids))
                 <= settings.schedule.max_length]
        if not pairs:
            correct = sum(e.outcome == Outcome.CORRECT for e in episodes)
            raise data.EmptyDatasetError(
                f"no preference pairs within {settings.schedule.max_length} tokens from {len(episodes)} episodes "
                f"({correct} correct): no correct episode recovered from a failed run, and no task has both a correct "
                "and an incorrect episode")
        return pairs
    assert isinstance(settings, VerifierSettings)
    return data.verifier_examples(episodes, chat, verifier_budget(settings, chat), settings.schedule.seed)


def build_dataset(cfg: TrainingProfile, method: Method, dirs: StageDirs, verifier: StageDirs | None = None) -> Any:
    """Build, validate and write the stage's dataset into `dirs.dataset`; returns its manifest. A stage that scores
    with the verifier (whose folders are `verifier`) records `verifier_scoring` in the manifest's settings: the
    verifier's dataset, how many episodes it scored, and how many it did not because it trained on them."""
    from components.training.datasets import source_ref, write_dataset

    settings = getattr(cfg.training, method)
    if not settings.episodes:
        raise data.EmptyDatasetError(f"training.{method}.episodes names no rollout in profile {cfg.profile}")
    tokenizer = load_tokenizer(cfg.training.base_model)  # every stage shares it; merged checkpoints carry the same
    chat = ChatTokens(tokenizer)
    trains = f"{method} stage {dirs.name!r}"
    rollouts = {name: rollout_episodes(dirs.rollouts[name], name, cfg.profile, trains=trains)
                for name in settings.episodes}
    judged, recorded = None, settings.model_dump(mode="json")
    if (method == "dpo" and settings.verifier_pairs) or (method == "sft" and settings.min_verifier_score is not None):
        if verifier is None:
            raise ValueError(f"{dirs.name} stage of profile {cfg.profile}: scoring with the verifier needs its folders")
        judged = judge_episodes(cfg, method, rollouts, chat, verifier)
        episodes = judged.episodes
        recorded["verifier_scoring"] = judged.stats()
        log.info("%s stage of profile %s: the verifier scored %d episodes; %d it trained on were not scored",
                 dirs.name, cfg.profile, len(judged.scores), judged.unscored)
    else:
        episodes = [e for eps in rollouts.values() for e in eps]
    try:
        rows = dataset_rows(method, settings, episodes, chat, judged)
    except data.EmptyDatasetError as exc:
        raise data.EmptyDatasetError(f"{dirs.name} stage of profile {cfg.profile}: {exc}") from None
    return write_dataset(dirs.dataset, KINDS[method], rows, sources=[source_ref(dirs.rollouts[n]) for n in rollouts],
                         tokenizer=cfg.training.base_model, settings=recorded)


def _mixed_tasks(episodes: list[Episode]) -> list[Episode]:
    """Finished episodes of tasks with both a correct and an incorrect one: only these can make a ranked pair."""
    done = [e for e in episodes if e.outcome is not None and e.outcome != Outcome.CONTEXT_LIMIT]
    kinds: dict[str, set[bool]] = defaultdict(set)
    for e in done:
        kinds[e.task_id].add(e.outcome == Outcome.CORRECT)
    return [e for e in done if len(kinds[e.task_id]) == 2]


# ---------------------------------------------------------------------- the verifier: its window, what it never saw
def verifier_budget(settings: VerifierSettings, chat: ChatTokens) -> int:
    """The most episode tokens the verifier reads, in training and in scoring alike: the trainer's window (the
    smaller of max_tokens and schedule.max_length) less what follows the episode in a generative row, the
    question and the longer answer, so that truncation never cuts the YES/NO the loss is on."""
    window = min(settings.max_tokens, settings.schedule.max_length)
    after = 0
    if settings.kind == "generative":
        after = len(question_ids(chat)) + max(len(answer_ids(chat, word)) for word in (YES, NO))
    if window - after < 1:
        raise ValueError(f"training.verifier: a window of {window} tokens (max_tokens {settings.max_tokens}, "
                         f"schedule.max_length {settings.schedule.max_length}) leaves no room for an episode before "
                         f"the question and answer ({after} tokens)")
    return window - after


def verifier_scorer(model_dir: Path, settings: VerifierSettings) -> VerifierScorer:
    """A scorer of `model_dir` that reads what the verifier trained on: an episode's last `verifier_budget` tokens
    (then, for the generative kind, the question, which the scorer appends within its max_tokens)."""
    chat = ChatTokens(load_tokenizer(model_dir))
    question = len(question_ids(chat)) if settings.kind == "generative" else 0
    return VerifierScorer(model_dir, settings.kind, max_tokens=verifier_budget(settings, chat) + question)


@dataclass
class Judged:
    """A stage's episodes as the verifier scores them. Ids name their rollout (`sft_train/<task>#0`): two rollouts
    of the same tasks share episode ids, and scores are keyed by id. An episode whose token ids are one of the
    verifier's training rows is in `trained_on` and never scored."""

    episodes: list[Episode]
    trained_on: set[str]  # episode ids
    scores: dict[str, float]  # the episodes the stage needed scored, less those the verifier trained on
    unscored: int  # those it trained on: left out of the ranking (DPO), kept unfiltered (SFT)
    dataset: str  # content hash of the verifier dataset that says what it trained on

    def stats(self) -> dict[str, Any]:
        return {"verifier_dataset": self.dataset, "scored": len(self.scores), "trained_on": self.unscored}


def judge_episodes(cfg: TrainingProfile, method: Method, rollouts: dict[str, list[Episode]], chat: ChatTokens,
                   verifier: StageDirs) -> Judged:
    """Score with the verifier stage's model (in `verifier`'s folders) the episodes the stage needs scored, for DPO
    those of tasks with both a correct and an incorrect episode (what a ranked pair needs), for SFT the correct
    ones, and of them only those it never trained on."""
    needed_by = "training.dpo.verifier_pairs" if method == "dpo" else "training.sft.min_verifier_score"
    seen, dataset = verifier_trained_on(cfg, verifier, needed_by)
    episodes = [e.model_copy(update={"episode_id": f"{name}/{e.episode_id}"})
                for name, eps in rollouts.items() for e in eps]
    trained = {e.episode_id for e in episodes if _ids_digest(episode_token_ids(e, chat).input_ids) in seen}

    def needed(eps: list[Episode]) -> list[Episode]:
        return _mixed_tasks(eps) if method == "dpo" else [e for e in eps if e.outcome == Outcome.CORRECT]

    unscored = sum(e.episode_id in trained for e in needed(episodes))
    scores = verifier_scores(cfg, verifier, needed([e for e in episodes if e.episode_id not in trained]), needed_by)
    return Judged(episodes, trained, scores, unscored, dataset)


def verifier_trained_on(cfg: TrainingProfile, verifier: StageDirs, needed_by: str) -> tuple[set[str], str]:
    """Digests of the token ids of every row the verifier stage's model trained on, and that dataset's content
    hash. Matched by content, not by episode id: ids repeat across rollouts of the same tasks."""
    from components.training.datasets import read_dataset

    marker = verifier_model(verifier, needed_by) / STAGE_MARKER
    if not marker.is_file():
        raise FileNotFoundError(f"{marker}: the verifier's model records no dataset, so which episodes it trained on "
                                "is unknown and none can be scored as unseen: train it with `medgym train verifier`")
    folder = verifier.dataset
    manifest, rows = read_dataset(folder)
    trained = str(json.loads(marker.read_text()).get("dataset"))
    if trained != manifest.content_hash:
        raise RecordError(marker, None, "dataset", f"the verifier trained on dataset {trained[:12]}…, and {folder} "
                          f"holds {manifest.content_hash[:12]}…: which episodes it trained on is unknown, so none can be "
                          "scored as unseen; train it again (`medgym train verifier --fresh`)")
    if manifest.tokenizer != cfg.training.base_model:
        raise RecordError(folder / "manifest.json", None, "tokenizer", f"{manifest.tokenizer}, and this stage "
                          f"tokenizes with {cfg.training.base_model}: its rows cannot be matched to episodes")
    return {_ids_digest(r["input_ids"]) for r in rows}, manifest.content_hash


def _ids_digest(ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


def verifier_scores(cfg: TrainingProfile, verifier: StageDirs, episodes: list[Episode],
                    needed_by: str = "verifier scores") -> dict[str, float]:
    path = verifier_model(verifier, needed_by)
    if not episodes:
        return {}
    return verifier_scorer(path, cfg.training.verifier).score(episodes)


def verifier_model(verifier: StageDirs, needed_by: str) -> Path:
    """The verifier stage's merged model; a stage that needs it before it is trained stops and says so."""
    path = verifier.merged
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{needed_by} needs the verifier stage's model, and {path} holds none: run "
                                "`medgym train verifier` first")
    return path


# ---------------------------------------------------------------------- launch
def launch(job: TrainJob, distributed: DistributedSettings | None = None, log_to: Path | None = None, *,
           gpus: int | None = None, env: Mapping[str, str] | None = None) -> TrainResult:
    """Train in this process, in one child process (`child_process`), or under `accelerate launch` on the
    settings' processes and machines (DeepSpeed if asked). `gpus` (default: the devices torch sees) picks the
    accelerate file; `env` (default: os.environ) is where the machines are read (components/training/launcher.py)."""
    from components.training import launcher

    distributed = distributed or DistributedSettings()
    if launcher.runs_here(distributed, env):
        from components.training.trainers import train

        return train(job)
    launch_worker(launcher.WORKER, job.model_dump_json(), job.out_dir, distributed, log_to, gpus=gpus, env=env)
    # every machine writes into the same run folder (shared storage on a multi-node launch): rank 0's result
    return read_result(job.out_dir)


def launch_worker(worker: str, job_json: str, out_dir: Path, distributed: DistributedSettings,
                  log_to: Path | None = None, *, gpus: int | None = None, env: Mapping[str, str] | None = None) -> None:
    """Run `python -m <worker> <job file>` in one child process, or under `accelerate launch` on the settings'
    processes and machines: the one launcher of every trainer (this module's, DiagGym's GRPO)."""
    from components.training import launcher

    env = os.environ if env is None else env
    machines = launcher.resolve_machines(distributed, env)
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, job_file = tempfile.mkstemp(prefix=".job.", suffix=".json", dir=out_dir)
    with os.fdopen(fd, "w") as fh:
        fh.write(job_json)
    if launcher.in_process(distributed, machines):  # one rank needs no launcher, and its progress bar stays here
        cmd, child_env, log_to = [sys.executable, "-m", worker, job_file], dict(env), None
    else:
        gpus = launcher.gpu_count() if gpus is None else gpus
        cmd = launcher.accelerate_command(sys.executable, job_file, distributed, machines, gpus,
                                          free_port=_free_port(), worker=worker)
        child_env = {**env, **launch_env(distributed.processes, gpus)}
        log.info("launching %s on machine %d of %d (%s)", worker, machines.machine_rank, machines.num_machines,
                 ", ".join(f"{k} from {v}" for k, v in machines.sources.items()))
    try:
        with open(log_to, "a") if log_to else contextlib.nullcontext() as log_file:
            output = {"stdout": log_file, "stderr": subprocess.STDOUT} if log_file else {}
            proc = subprocess.run(cmd, env=child_env, cwd=PROJECT_ROOT, check=False, **output)
        if proc.returncode != 0:
            raise RuntimeError(f"training launch exited {proc.returncode}: {' '.join(cmd)}"
                               + (f"; see {log_to}" if log_to else ""))
    finally:
        os.unlink(job_file)


def launch_rows(job: TrainJob, rows: list[dict[str, Any]], distributed: DistributedSettings | None = None,
                log_to: Path | None = None, callbacks: list[Any] | None = None) -> TrainResult:
    """Train rows a caller built in memory (DiagGym's world model and cold start) through the same launcher as the
    pipeline's stages. In this process they go to the trainer as they are; a launch writes them beside the run as
    JSON lines for its ranks to read, and `callbacks` (objects, not JSON) stay behind: a launched run's per-step
    metrics reach MLflow only where the job names a tracking_uri and run_id."""
    from components.training import launcher

    distributed = distributed or DistributedSettings()
    job = job.model_copy(update={"liger_kernels": distributed.liger_kernels})
    if launcher.runs_here(distributed):
        from components.training.trainers import train

        return train(job, rows, callbacks)
    path = job.out_dir / "rows.jsonl"
    job.out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as fh:
        fh.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    return launch(job.model_copy(update={"rows_file": path}), distributed, log_to)


def launch_env(processes: int, gpus: int | None = None) -> dict[str, str]:
    """CPU-only settings for a multi-process launch; a GPU node needs none of them."""
    if gpus is None:
        from components.training.launcher import gpu_count

        gpus = gpu_count()
    if gpus > 0:
        return {}
    threads = max(1, (os.cpu_count() or 1) // processes)
    return {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": str(threads), "ACCELERATE_USE_CPU": "true",
            "MASTER_PORT": str(_free_port())}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------- the stage
def run_stage(cfg: TrainingProfile, method: Method, dirs: StageDirs, init: str, *, log_model: bool = True,
              fresh: bool = False, project_root: Path | None = None, on_event: Any = None) -> StageOutput:
    """Dataset → training from the checkpoint `init` → merged checkpoint, tracked as one MLflow run named
    `<profile>-<stage>`."""
    from components.tracking.tracker import flatten
    from components.tracking.training import training_run
    from components.training.datasets import read_manifest

    settings = getattr(cfg.training, method)
    name, out, base, data_dir = dirs.name, dirs.run, init, dirs.dataset
    if fresh and out.exists():
        import shutil

        shutil.rmtree(out)
    manifest = read_manifest(data_dir)  # the rows are read, and their hash checked, by the trainer
    claim_run_dir(out, {"dataset": manifest.content_hash, "init": base}, "pass --fresh to start over")
    dist = cfg.training.distributed
    tags = {"medgym.stage": name, "medgym.method": method, "medgym.profile": cfg.profile, "medgym.init": base}
    with training_run(cfg.tracking, f"{cfg.profile}-{name}", project_root, tags=tags) as run:
        run.log(params=flatten({"method": method, "base_model": base, "processes": dist.processes,
                                "deepspeed": dist.deepspeed, **settings.model_dump(mode="json")}))
        run.log_dataset(data_dir, manifest)
        job = TrainJob(method=method, base_model=base, dataset_dir=data_dir, out_dir=out,
                       tracking_uri=run.tracking_uri, run_id=run.run_id, liger_kernels=dist.liger_kernels,
                       **{method: settings})
        result = launch(job, dist, log_to=out.parent / f"{name}.launch.log")
        run.log_metrics({"train_runtime_s": result.runtime_s, "train_tokens": result.tokens,
                         "train_tokens_per_s": result.tokens_per_s, "global_step": result.global_step,
                         **({"train_loss_final": result.train_loss} if result.train_loss is not None else {})})
        final = out / FINAL
        model_dir = dirs.merged
        if is_adapter(final):
            merge_and_save(final, model_dir)
        else:
            _copy_dir(final, model_dir)
        kind = "reward" if method == "verifier" and cfg.training.verifier.kind == "reward" else "causal"
        # the loss per optimizer step beside the model: a data series DVC plots and compares across experiments
        with atomic_write(model_dir / LOSS_SERIES) as fh:
            json.dump([{"step": e["step"], "loss": e["loss"]} for e in result.log_history
                       if "loss" in e and "step" in e], fh, indent=1)
        (model_dir / STAGE_MARKER).write_text(json.dumps(
            {"method": method, "stage": name, "kind": kind, "run_id": run.run_id, "dataset": manifest.content_hash,
             "init": base}, indent=1))
        uri = None
        task = "text-classification" if kind == "reward" else "text-generation"
        if log_model:
            by_reference = cfg.tracking.log_model == "reference"
            uri = (run.log_model_reference if by_reference else run.log_model)(model_dir, task=task)
        # the merged model is written and recorded: the checkpoints it came from are only for resuming this run
        pruned = prune_checkpoints(out, cfg.training.checkpoints.keep)
        run.log_metrics({"checkpoints_pruned": len(pruned)})
        return StageOutput(method, result, model_dir, run.run_id, uri)


def prune_checkpoints(run_dir: Path, keep: str) -> list[Path]:
    """Remove a run's intermediate `checkpoint-<step>` folders by the keep policy: `all` keeps them, `last` keeps the
    newest (a rerun asking more steps continues from it), `none` keeps none. Returns those removed."""
    import shutil

    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if keep == "all":
        return []
    steps = sorted((int(p.name.rsplit("-", 1)[1]), p) for p in run_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*")
                   if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit())
    doomed = [p for _, p in (steps[:-1] if keep == "last" else steps)]
    for p in doomed:
        shutil.rmtree(p)
    return doomed


def claim_run_dir(out: Path, identity: dict[str, str], start_over: str) -> None:
    """A run folder belongs to one run's inputs (`identity`: its data and starting model): resuming its checkpoints
    on others would train a mix of both without saying so. The first run writes them; a later one must match."""
    marker = out / RUN_MARKER
    if marker.is_file():
        have = json.loads(marker.read_text())
        if have != identity:
            def said(d: dict[str, Any]) -> str:  # hashes cut to 12 characters
                return ", ".join(f"{k} {str(v)[:12] + '…' if len(str(v)) == 64 else v}" for k, v in d.items())
            raise RunConflictError(f"{out} holds checkpoints of another run ({said(have)}); this one is "
                                   f"{said(identity)}: {start_over}")
        return
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(identity))


def _copy_dir(src: Path, dest: Path) -> None:
    import shutil

    with atomic_dir(dest) as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
