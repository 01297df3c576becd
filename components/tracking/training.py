"""MLflow for training runs: per-step metrics from every launch, system metrics, dataset inputs, logged models.

The run is opened by the process that launches training (one process, or the parent of an accelerate launch)
with system metrics on; ranks log their step metrics into it by run id (rank 0 only). The model is logged from
its saved checkpoint folder with its tokenizer and chat template, so `mlflow.transformers.load_model` gives
back a pipeline that generates.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from components.tracking.tracker import MlflowRun, MlflowTracker, TrackingConfig, parent_tags

# what loading a logged checkpoint back (mlflow.transformers.load_model, the hf and vllm policies) imports, and what
# trained it: its versions decide whether a model loads and generates as it did here
MODEL_PACKAGES = ("mlflow", "torch", "transformers", "tokenizers", "safetensors", "accelerate", "peft", "trl")


def pinned_requirements(packages: tuple[str, ...] = MODEL_PACKAGES) -> list[str]:
    """`name==version` for each of `packages` installed here, the version as installed less its local label
    (torch `2.13.0+cpu` -> `2.13.0`): the same release is the CUDA build on a GPU node's index, and pip finds no
    `+cpu` there. An unpinned name would install whatever is newest when the model is loaded, years later."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    pins = []
    for name in packages:
        try:
            pins.append(f"{name}=={Version(version(name)).public}")
        except PackageNotFoundError:  # not part of this environment, so not part of what made the model
            continue
    return pins


def _mlflow_quiet() -> Any:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "true")
    import mlflow

    return mlflow


def _trainer_callback_base() -> type:
    from transformers import TrainerCallback

    return TrainerCallback


class MlflowStepLogger(_trainer_callback_base()):  # type: ignore[misc]
    """Logs the trainer's metrics at each logging step into an existing run (world process zero only)."""

    def __init__(self, tracking_uri: str, run_id: str):
        from mlflow.tracking import MlflowClient

        self.client, self.run_id = MlflowClient(tracking_uri=tracking_uri), run_id

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kw: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k.replace("/", "_"), float(v), now, state.global_step) for k, v in logs.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)


class TrainingRun:
    """An open MLflow run of one training stage, in the fluent API's active-run slot."""

    def __init__(self, mlflow: Any, run: Any, tracking_uri: str):
        self.mlflow, self.run, self.tracking_uri = mlflow, run, tracking_uri
        self.run_id: str = run.info.run_id

    def log(self, params: Mapping[str, Any] | None = None, metrics: Mapping[str, float] | None = None,
            tags: Mapping[str, str] | None = None, step: int | None = None) -> None:
        """Params, metrics and tags in as few writes as the tracking API takes (tracker.MlflowRun.log)."""
        from mlflow.tracking import MlflowClient

        MlflowRun(MlflowClient(tracking_uri=self.tracking_uri), self.run_id).log(params, metrics, tags, step)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)

    def log_dataset(self, dataset_dir: Path, manifest: Any, context: str = "training") -> None:
        """The dataset as an input of this run: its folder as source, its content hash as digest."""
        import warnings

        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        with warnings.catch_warnings():  # "can be interpreted in multiple ways": both are the local-file source
            warnings.simplefilter("ignore")
            source = resolve_dataset_source(str(dataset_dir.resolve()))
        ds = MetaDataset(source, name=f"{manifest.kind}:{dataset_dir.name}",
                         digest=manifest.content_hash[:36])
        self.mlflow.log_input(ds, context=context, tags={"rows": str(manifest.rows),
                                                         "content_hash": manifest.content_hash})

    def log_model(self, model_dir: Path, name: str = "model", task: str = "text-generation") -> str:
        info = self.mlflow.transformers.log_model(transformers_model=str(model_dir), name=name, task=task,
                                                  pip_requirements=pinned_requirements())
        return info.model_uri

    def log_model_reference(self, model_dir: Path, name: str = "model", task: str = "text-generation") -> str:
        """The model as an external LoggedModel of this run: its folder's path, digest and size, no weights
        (components/tracking/reference.py). Returns its `models:/<model_id>` URI."""
        from components.tracking.reference import reference

        ref = reference(model_dir)
        tags = ref.tags(task)
        model = self.mlflow.create_external_model(name=name, source_run_id=self.run_id, tags=tags,
                                                  model_type="reference")
        self.mlflow.set_tags(tags)
        return str(model.model_uri)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self.mlflow.log_artifact(str(path), artifact_path=artifact_path)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.mlflow.set_tags(dict(tags))


@contextlib.contextmanager
def training_run(config: TrackingConfig, name: str, project_root: Path | None = None,
                 system_metrics: bool = True, tags: Mapping[str, str] | None = None) -> Iterator[TrainingRun]:
    mlflow = _mlflow_quiet()
    tracker = MlflowTracker(config, project_root)
    mlflow.set_tracking_uri(tracker.uri)
    experiment_id = tracker.experiment_id()
    if system_metrics:
        mlflow.set_system_metrics_sampling_interval(2)
    with mlflow.start_run(experiment_id=experiment_id, run_name=name, log_system_metrics=system_metrics,
                          tags={**(tags or {}), **parent_tags(config)}) as run:
        yield TrainingRun(mlflow, run, tracker.uri)
