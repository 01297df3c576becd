"""`medgym train sft|dpo|verifier|data` and `medgym eval`: thin calls into flows/training and components."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from components.profile.config import PipelineConfig

train_app = typer.Typer(help="Build training data from episodes and train SFT, DPO and the verifier.",
                        no_args_is_help=True)
ConfigOpt = Annotated[str, typer.Option("--config", help="a profile YAML (configs/demo.yaml) or a profile name")]


def _train_only_on_train_episodes(cfg: PipelineConfig, method: str) -> None:
    """Refuse a profile whose stage would train on valid or test episodes: one line, before a server starts."""
    from components.pipeline.plan import PlanError, check_training_episodes

    try:
        check_training_episodes(cfg, method)  # type: ignore[arg-type]
    except PlanError as exc:
        raise SystemExit(f"error: {exc}") from None


def _train(method: str, config: str, fresh: bool, build: bool, log_model: bool) -> None:
    from components.profile.config import load_config
    from flows.runtime import prefect_api
    from flows.training import train_flow

    _train_only_on_train_episodes(load_config(config), method)
    with prefect_api():
        result = train_flow(config=config, method=method, fresh=fresh, build=build, log_model=log_model)
    print(json.dumps(result, indent=2, default=str))


def _command(method: str, doc: str) -> None:
    def cmd(config: ConfigOpt = "demo",
            fresh: Annotated[bool, typer.Option(help="discard checkpoints instead of resuming")] = False,
            build: Annotated[bool, typer.Option(help="(re)build the dataset from the episodes first")] = True,
            log_model: Annotated[bool, typer.Option(help="log the merged model to MLflow")] = True) -> None:
        _train(method, config, fresh, build, log_model)

    cmd.__doc__ = doc
    train_app.command(method)(cmd)


_command("sft", "Supervised fine-tuning on the correct episodes (loss on the model's own tokens).")
_command("dpo", "DPO on within- and across-episode preference pairs.")
_command("verifier", "A verifier of finished episodes (generative YES/NO or a reward model).")


@train_app.command("data")
def data(method: Annotated[str, typer.Argument(help="sft | dpo | verifier")], config: ConfigOpt = "demo") -> None:
    """Build one stage's dataset (validated, content-hashed; a DVC output) without training."""
    from components.pipeline.paths import stage_dirs
    from components.profile.config import load_config
    from components.training.stage import build_dataset

    cfg = load_config(Path(config) if Path(config).suffix else config)
    _train_only_on_train_episodes(cfg, method)
    manifest = build_dataset(cfg, method, stage_dirs(cfg, method), stage_dirs(cfg, "verifier"))  # type: ignore[arg-type]
    print(json.dumps(manifest.model_dump(mode="json"), indent=2))


def eval_command(
    rollout: Annotated[list[str], typer.Option(
        help="a profile's rollout to evaluate (e.g. sft_test); repeat it to rank several on one leaderboard")],
    config: ConfigOpt = "demo",
    baseline: Annotated[str | None, typer.Option(help="a rollout of the same tasks to compare with (e.g. base)")] = None,
    verifier: Annotated[str | None, typer.Option(help="a verifier checkpoint folder: adds AUC and best@k")] = None,
    verifier_kind: Annotated[str, typer.Option(help="generative | reward")] = "generative",
    out: Annotated[str | None, typer.Option(help="report path (default reports/<profile>/<rollout>.json); with "
                                                 "several rollouts, the report folder "
                                                 "(default reports/<profile>/<name>/)")] = None,
    name: Annotated[str, typer.Option(help="with several rollouts: the leaderboard's name (its folder and "
                                           "MLflow run)")] = "leaderboard",
) -> None:
    """Success per domain with 95% intervals; against a baseline task by task; verifier accuracy, AUC, best@k.
    With several --rollout: one ranked leaderboard (markdown, JSON, PNG figures, an outcome taxonomy)."""
    from flows.evaluate import eval_flow, leaderboard_flow
    from flows.runtime import prefect_api

    rollouts = list(dict.fromkeys(rollout))
    with prefect_api():
        if len(rollouts) > 1:
            report = leaderboard_flow(config=config, rollouts=rollouts, baseline=baseline, verifier=verifier,
                                      name=name, verifier_kind=verifier_kind, out=out)
        else:
            report = eval_flow(config=config, rollout=rollouts[0], baseline=baseline, verifier=verifier,
                               verifier_kind=verifier_kind, out=out)
    print(json.dumps(report, indent=2, default=str))
