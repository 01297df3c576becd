"""Scheduled retraining: the pipeline as the Prefect deployment `medgym-pipeline/<profile>` on a cron schedule.

Two routes, both against a real Prefect server (`PREFECT_API_URL`, e.g. `prefect server start`):

- served (`medgym serve --profile P`): this process registers the deployment and runs its flow runs itself,
  one at a time by default, until it is stopped (its schedule is then paused; the next start resumes it).
- work pool (`medgym serve --profile P`, the production route): the deployment is registered in the profile's
  process work pool (created when missing) and the command returns; runs are executed by
  `prefect worker start --pool <pool> --limit 1`, started where MedGym is installed. A profile whose training needs
  GPUs goes to `medgym-gpu`, any other to `medgym-process` (`work_pool_for`), so that a CPU worker never takes a
  GPU run; `--work-pool` names another.

Every deployment has a concurrency limit, 1 by default: a scheduled run that comes due while the previous one still
runs waits for it (Prefect's ENQUEUE strategy) instead of retraining beside it on the same data and GPUs.

`--run-now` triggers one flow run of the deployment at once and waits for it to finish (manual retraining,
tests): served, by this process; in a work pool, by a worker. Runs import the flow by module path
(`flows.pipeline.pipeline_flow`), so they need the project installed (`pip install -e .`), not a copy of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefect import Flow

    from components.profile.config import PipelineConfig

DEFAULT_CRON = "0 3 * * 1"  # weekly: Mondays, 03:00
DEFAULT_TIMEZONE = "UTC"
WORK_POOL = "medgym-process"
GPU_WORK_POOL = "medgym-gpu"
DEFAULT_CONCURRENCY = 1
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


class ServeError(RuntimeError):
    """The deployment cannot be served as asked (no Prefect server configured, a flow that cannot be imported)."""


def resolve_api_url(api_url: str | None = None) -> str:
    """--api-url, else PREFECT_API_URL (environment or Prefect profile). A schedule needs a server that outlives
    this command, so there is no temporary server here."""
    from prefect.settings import PREFECT_API_URL

    url = api_url or os.environ.get("PREFECT_API_URL") or PREFECT_API_URL.value()
    if not url:
        raise ServeError("no Prefect server: pass --api-url or set PREFECT_API_URL "
                         "(start one with `prefect server start`)")
    return url.rstrip("/")


def needs_gpu(cfg: PipelineConfig) -> bool:
    """Whether the profile's runs need a GPU node: `pipeline.gpu` when the profile says, else whether its training
    launches several processes or DeepSpeed (one rank per GPU: the paper profile's 8 under ZeRO-3). Generation says
    nothing: the vLLM backend runs on CPUs too (the demo's)."""
    if cfg.pipeline.gpu is not None:
        return cfg.pipeline.gpu
    distributed = cfg.training.distributed
    return distributed.processes > 1 or distributed.deepspeed != "none"


def work_pool_for(cfg: PipelineConfig) -> str:
    """The work pool a profile's deployment goes to when none is named: GPU runs apart from CPU ones."""
    return GPU_WORK_POOL if needs_gpu(cfg) else WORK_POOL


def serve_pipeline(profile: str = "demo", cron: str = DEFAULT_CRON, name: str | None = None, run_now: bool = False,
                   limit: int | None = 1, *, flow: Flow | None = None, api_url: str | None = None,
                   work_pool: str | None = None, timezone: str = DEFAULT_TIMEZONE,
                   timeout_s: float | None = None, concurrency_limit: int | None = DEFAULT_CONCURRENCY
                   ) -> dict[str, Any]:
    """Register `<flow name>/<name or profile>` with a cron schedule and parameters {profile}, then serve it here
    (until stopped, or for one run with `run_now`), or leave it to the workers of `work_pool`.

    `flow` defaults to the pipeline; tests pass a small flow to go through the same code. `limit` caps the runs
    this process executes at once (served route). `concurrency_limit` caps the deployment's runs at once wherever
    they run (None: no cap); a run beyond it waits for a slot. `timeout_s` bounds the wait of `run_now` in a work
    pool. Returns the deployment, and with `run_now` the flow run's id and final state."""
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from components.profile.config import load_config

    load_config(profile)  # a missing or invalid profile or schedule fails now, not at the first scheduled run
    if concurrency_limit is not None and concurrency_limit < 1:
        raise ServeError(f"concurrency limit {concurrency_limit}: at least 1 run at a time (or none, for no limit)")
    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValueError as exc:
        reason = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
        raise ServeError(f"invalid schedule {cron!r} ({timezone}): {reason}") from None
    if flow is None:
        from flows.pipeline import pipeline_flow as flow
    url = resolve_api_url(api_url)
    os.environ["PREFECT_API_URL"] = url  # the flow-run subprocesses report to the same server
    with temporary_settings(updates={PREFECT_API_URL: url}):
        # a profile given as a YAML path is named by its stem: Prefect refuses '/' in a deployment's name
        default = Path(profile).stem if profile.endswith((".yaml", ".yml")) else profile
        return asyncio.run(_serve(flow, profile, cron, name or default, run_now, limit, work_pool, timezone,
                                  timeout_s, concurrency_limit))


async def _serve(flow: Flow, profile: str, cron: str, name: str, run_now: bool, limit: int | None,
                 work_pool: str | None, timezone: str, timeout_s: float | None,
                 concurrency_limit: int | None) -> dict[str, Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.runner import Runner
    from prefect.schedules import Cron
    from prefect.types.entrypoint import EntrypointType

    if flow.__module__ in ("__main__", None):
        raise ServeError(f"flow {flow.name!r} is defined in a script; serve a flow importable by module path")
    deployment = await flow.ato_deployment(
        name=name, schedules=[Cron(cron, timezone=timezone)], parameters={"profile": profile},
        tags=["medgym", f"profile:{profile}"], work_pool_name=work_pool,
        description=f"MedGym retraining on configs/{profile}.yaml ({cron}, {timezone})",
        entrypoint_type=EntrypointType.MODULE_PATH,
        # ENQUEUE, not CANCEL_NEW: a run that comes due while the last one runs still happens, after it
        concurrency_limit=None if concurrency_limit is None else ConcurrencyLimitConfig(
            limit=concurrency_limit, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE))
    full_name = f"{flow.name}/{name}"
    result: dict[str, Any] = {"deployment": full_name, "cron": cron, "timezone": timezone,
                              "parameters": {"profile": profile}, "work_pool": work_pool,
                              "concurrency_limit": concurrency_limit}

    if work_pool is not None:
        async with get_client() as client:
            await ensure_work_pool(client, work_pool)
            result["deployment_id"] = str(await deployment.aapply(work_pool_name=work_pool))
            if not run_now:
                _say(f"deployment {full_name} registered in work pool {work_pool!r} ({cron}, {timezone}); "
                     f"its runs need a worker: prefect worker start --pool {work_pool}")
                return result
            run = await client.create_flow_run_from_deployment(result["deployment_id"])
            _say(f"flow run {run.name} ({run.id}) of {full_name} created; waiting for a {work_pool!r} worker")
            return {**result, **await _wait(client, run.id, timeout_s)}

    # a one-off run must not pause the schedule that a long-running `medgym serve` of the same deployment serves
    runner = Runner(name=f"medgym-{_slug(name)}", limit=limit, pause_on_shutdown=not run_now)
    result["deployment_id"] = str(await runner.aadd_deployment(deployment))
    if not run_now:
        _say(f"serving {full_name} ({cron}, {timezone}) at {os.environ['PREFECT_API_URL']}; Ctrl-C stops it "
             "and pauses its schedule")
        await runner.start()
        return result
    async with get_client() as client:
        run = await client.create_flow_run_from_deployment(result["deployment_id"])
        _say(f"flow run {run.name} ({run.id}) of {full_name} created; running it here")
        # one poll: picks up this run (and any run of the deployment already due) and returns once they finished
        await runner.start(run_once=True)
        return {**result, **await _wait(client, run.id, timeout_s=60)}


async def ensure_work_pool(client: Any, name: str = WORK_POOL) -> None:
    """A process work pool for `prefect worker start --pool <name>`; an existing one is left as it is. One pool per
    kind of node (WORK_POOL, GPU_WORK_POOL): a worker polls one pool, so runs never land on the wrong kind."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    try:
        await client.read_work_pool(name)
        return
    except ObjectNotFound:
        pass
    with contextlib.suppress(ObjectAlreadyExists):  # created meanwhile by another command
        await client.create_work_pool(WorkPoolCreate(
            name=name, type="process", description="MedGym flow runs as local processes (prefect worker start)"))


async def _wait(client: Any, flow_run_id: Any, timeout_s: float | None) -> dict[str, Any]:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        run = await client.read_flow_run(flow_run_id)
        state = run.state.type.value if run.state else "UNKNOWN"
        if state in TERMINAL:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"flow run {flow_run_id} still {state} after {timeout_s} s")
        await asyncio.sleep(2)
    _say(f"flow run {run.name} ended {run.state.name if run.state else state}")
    return {"flow_run_id": str(run.id), "flow_run": run.name, "state": state,
            "message": run.state.message if run.state else None}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _say(msg: str) -> None:
    sys.stderr.write(msg + "\n")
