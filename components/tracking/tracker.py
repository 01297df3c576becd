"""Experiment tracking behind a small protocol: a local MLflow sqlite store by default, an MLflow server in production."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict

# s3://<bucket>[/<prefix>]: a bucket name as S3 (and MinIO, moto) accept it, lower case, 3 to 63 characters
_S3_URI = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?P<prefix>/[^\s]*)?")


def _s3_uri(value: str) -> str:
    """An object store location MLflow writes artifacts to with boto3: `s3://bucket/prefix`, no trailing slash.
    Only s3:// is taken: it is the store the tests run against (a real S3 server) and the one whose client, boto3,
    is a dependency; a gs:// or wasbs:// location would fail at the first artifact, long after the run started."""
    if not _S3_URI.fullmatch(value):
        raise ValueError(f"{value!r}: not an s3://<bucket>[/<prefix>] URI (bucket: 3-63 of a-z 0-9 . -)")
    return value.rstrip("/")


S3Uri = Annotated[str, AfterValidator(_s3_uri)]


class TrackingConfig(BaseModel):
    """Where runs are tracked: a profile's `tracking` section."""

    model_config = ConfigDict(extra="forbid")

    # a local sqlite store by default: no server to start by hand
    mlflow_uri: str = "sqlite:///mlflow/mlruns.db"  # MEDGYM_MLFLOW_URI, where set, overrides it
    artifact_location: str = "mlflow/artifacts"
    # where set, new experiments keep their artifacts on this S3-compatible object store, with a sqlite store or a
    # server alike (the client then writes to the bucket itself). MLflow reads the endpoint and the credentials
    # from the environment, as for any MLflow client: MLFLOW_S3_ENDPOINT_URL (MinIO, any S3-compatible server; unset
    # for AWS), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION. Secrets stay out of the profile.
    artifact_uri: S3Uri | None = None
    experiment: str = "medgym"
    # how a training stage logs its merged model: a copy in the artifact store (loadable with mlflow.transformers), or
    # by reference, the folder's path and content digest only (a 7B model is 15 GB; see components/tracking/reference.py)
    log_model: Literal["copy", "reference"] = "copy"
    # set by the pipeline for the stages it runs: their runs nest under its run
    parent_run_id: str | None = None


# what MLflow takes in a metric, param or tag key on every platform (a colon only off Windows), and how long
_KEY_BAD = re.compile(r"[^\w\-. /]")
KEY_MAX = 250


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings or reports as MLflow keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{key}."))
        else:
            out[key] = v
    return out


def mlflow_key(key: str) -> str:
    """A name as an MLflow key, the one rule every run's keys follow: "pass@1" -> "pass_at_1",
    "code_error:KeyError" -> "code_error_KeyError", a path-like model name "lm:org/m" -> "lm_org/m"; cut at
    KEY_MAX characters."""
    return _KEY_BAD.sub("_", key.replace("@", "_at_"))[:KEY_MAX]


class Run(Protocol):
    def log(self, params: Mapping[str, Any] | None = None, metrics: Mapping[str, float] | None = None,
            tags: Mapping[str, str] | None = None, step: int | None = None) -> None: ...
    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...
    def log_artifact(self, path: Path) -> None: ...
    def log_artifacts(self, folder: Path) -> None: ...
    def set_tags(self, tags: Mapping[str, str]) -> None: ...


class Tracker(Protocol):
    def run(self, name: str) -> contextlib.AbstractContextManager[Run]: ...


# what one log_batch call of the tracking API takes: at most 100 params, 100 tags, 1000 entities in all
BATCH_PARAMS, BATCH_TAGS, BATCH_ENTITIES = 100, 100, 1000


class MlflowRun:
    def __init__(self, client: Any, run_id: str):
        self._client, self.run_id = client, run_id

    def log(self, params: Mapping[str, Any] | None = None, metrics: Mapping[str, float] | None = None,
            tags: Mapping[str, str] | None = None, step: int | None = None) -> None:
        """Params, metrics and tags in as few writes as the API takes: each write is a transaction of its own, and
        on sqlite a commit is the cost."""
        import time

        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        ps = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
        ms = [Metric(k, float(v), now, step or 0) for k, v in (metrics or {}).items()]
        ts = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        while ps or ms or ts:
            bp, ps = ps[:BATCH_PARAMS], ps[BATCH_PARAMS:]
            bt, ts = ts[:BATCH_TAGS], ts[BATCH_TAGS:]
            room = BATCH_ENTITIES - len(bp) - len(bt)
            bm, ms = ms[:room], ms[room:]
            self._client.log_batch(self.run_id, metrics=bm, params=bp, tags=bt)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.log(params=params)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.log(metrics=metrics, step=step)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.log(tags=tags)

    def log_artifact(self, path: Path) -> None:
        self._client.log_artifact(self.run_id, str(path))

    def log_artifacts(self, folder: Path) -> None:
        """Every file of `folder` at the run's artifact root, in one call."""
        self._client.log_artifacts(self.run_id, str(folder))


def parent_tags(config: TrackingConfig) -> dict[str, str]:
    """The tag MLflow nests a run under: the pipeline's run, when a pipeline runs the stage."""
    return {"mlflow.parentRunId": config.parent_run_id} if config.parent_run_id else {}


URI_ENV = "MEDGYM_MLFLOW_URI"


class MlflowTracker:
    """Tracks to `config.mlflow_uri`: `sqlite:///...` (embedded, the default) or `http://...` (a server)."""

    def __init__(self, config: TrackingConfig, project_root: Path | None = None):
        self.config = config
        # a deployment points every profile at its server (a container's MLflow is not the profile's 127.0.0.1)
        self.uri = os.environ.get(URI_ENV) or config.mlflow_uri
        self.artifacts = config.artifact_location
        if project_root is not None and self.uri.startswith("sqlite:///") and not self.uri.startswith("sqlite:////"):
            db = project_root / self.uri.removeprefix("sqlite:///")
            db.parent.mkdir(parents=True, exist_ok=True)
            self.uri = f"sqlite:///{db}"
            self.artifacts = str(project_root / config.artifact_location)

    def _client(self) -> Any:
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)

    def artifact_location(self) -> str | None:
        """Where a new experiment keeps its artifacts: `artifact_uri` where set; else, with a server, None (the
        server's own default, proxied or not); else the local folder."""
        if self.config.artifact_uri:
            return self.config.artifact_uri
        return None if self.uri.startswith("http") else Path(self.artifacts).resolve().as_uri()

    def experiment_id(self) -> str:
        client = self._client()
        exp = client.get_experiment_by_name(self.config.experiment)
        if exp is None:
            return client.create_experiment(self.config.experiment, artifact_location=self.artifact_location())
        # MLflow fixes an experiment's artifact location when it creates it: a profile that now names a bucket
        # would otherwise go on writing to the old place without a word
        want = self.config.artifact_uri
        if want and exp.artifact_location.rstrip("/") != want:
            raise ValueError(f"experiment {self.config.experiment!r} keeps its artifacts at {exp.artifact_location}, "
                             f"not at tracking.artifact_uri {want}: MLflow sets an experiment's artifact location "
                             "once, when it creates it; name a new tracking.experiment for the new location")
        return exp.experiment_id

    @contextlib.contextmanager
    def run(self, name: str, resume: str | None = None, tags: Mapping[str, str] | None = None) -> Iterator[Run]:
        """A new run named `name` with `tags` from its start, or, with `resume`, that earlier run reopened (an
        interrupted pipeline's; `tags` then set on it)."""
        client = self._client()
        tags = {k: str(v) for k, v in (tags or {}).items()}
        if resume:
            client.update_run(resume, status="RUNNING")
            run_id = resume
            if tags:
                MlflowRun(client, run_id).set_tags(tags)
        else:
            run_id = client.create_run(self.experiment_id(), run_name=name,
                                       tags={**tags, **parent_tags(self.config)}).info.run_id
        status = "FAILED"
        try:
            yield MlflowRun(client, run_id)
            status = "FINISHED"
        finally:
            client.set_terminated(run_id, status=status)
