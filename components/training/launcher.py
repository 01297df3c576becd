"""The `accelerate launch` command of a training run: which accelerate file, how many processes, which machines.

One node or several: the machines come from the profile's `training.distributed` section or from the environment,
each field on its own, first found wins:

  1. MEDGYM_NUM_MACHINES, MEDGYM_MACHINE_RANK, MEDGYM_MAIN_ADDR, MEDGYM_MAIN_PORT: set by hand per machine, so they
     override the profile (the rank differs per machine while every machine reads the same profile);
  2. the profile's training.distributed num_machines, machine_rank, main_addr, main_port;
  3. what a scheduler sets: SLURM_NNODES and SLURM_NODEID (slurm), or NNODES and NODE_RANK (the names torchrun's
     own multi-node launchers and the Kubeflow PyTorchJob export), with MASTER_ADDR and MASTER_PORT;
  4. one machine, rank 0, 127.0.0.1, port 29500.

`processes` is per machine (one per GPU); accelerate's `--num_processes` is the total over all machines.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from components.common.paths import PROJECT_ROOT
from components.training.config import DistributedSettings

ACCELERATE_DIR = PROJECT_ROOT / "infra" / "deepspeed" / "accelerate"
WORKER = "components.training.worker"
# per field: the environment names read, in order (the profile sits between the first and the rest)
OVERRIDE_ENV = {"num_machines": "MEDGYM_NUM_MACHINES", "machine_rank": "MEDGYM_MACHINE_RANK",
                "main_addr": "MEDGYM_MAIN_ADDR", "main_port": "MEDGYM_MAIN_PORT"}
SCHEDULER_ENV = {"num_machines": ("SLURM_NNODES", "NNODES"), "machine_rank": ("SLURM_NODEID", "NODE_RANK"),
                 "main_addr": ("MASTER_ADDR",), "main_port": ("MASTER_PORT",)}


class Machines(BaseModel):
    """The machines of one launch, resolved: what `accelerate launch` is told."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_machines: int = Field(default=1, ge=1)
    machine_rank: int = Field(default=0, ge=0)
    main_addr: str = "127.0.0.1"
    main_port: int = Field(default=29500, gt=0, lt=65536)
    # where each value came from (`MEDGYM_MACHINE_RANK`, `profile`, `SLURM_NODEID`, `default`): said in errors and logs
    sources: dict[str, str] = Field(default_factory=dict)

    @property
    def multi_node(self) -> bool:
        return self.num_machines > 1


def resolve_machines(settings: DistributedSettings, env: Mapping[str, str] | None = None) -> Machines:
    """The machines of a launch from `settings` and the environment, by the precedence in the module docstring."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    for name, override in OVERRIDE_ENV.items():
        candidates = [(override, env.get(override)), ("profile", getattr(settings, name)),
                      *((var, env.get(var)) for var in SCHEDULER_ENV[name])]
        for source, value in candidates:
            if value is not None and str(value).strip() != "":
                values[name], sources[name] = str(value).strip() if isinstance(value, str) else value, source
                break
        else:
            sources[name] = "default"
    try:
        machines = Machines(**values, sources=sources)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0])
        source = sources.get(field, "?")
        where = "training.distributed." + field if source == "profile" else f"environment variable {source}"
        raise ValueError(f"{where}={values.get(field)!r}: {err['msg']}") from None
    if machines.machine_rank >= machines.num_machines:
        raise ValueError(f"machine rank {machines.machine_rank} (from {sources['machine_rank']}) is not below the "
                         f"number of machines {machines.num_machines} (from {sources['num_machines']})")
    return machines


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def accelerate_config(deepspeed: str, gpus: int) -> Path:
    """The accelerate file of a launch: the DeepSpeed stage's where one is asked; else plain DDP, over the GPUs where
    there are any (multi_gpu.yaml) and over CPU processes only where there are none (multi_cpu.yaml says use_cpu)."""
    if deepspeed != "none":
        return ACCELERATE_DIR / f"{deepspeed}.yaml"
    return ACCELERATE_DIR / ("multi_gpu.yaml" if gpus > 0 else "multi_cpu.yaml")


def in_process(settings: DistributedSettings, machines: Machines) -> bool:
    """One process on one machine without DeepSpeed needs no launcher."""
    return settings.processes == 1 and settings.deepspeed == "none" and not machines.multi_node


def runs_here(settings: DistributedSettings, env: Mapping[str, str] | None = None) -> bool:
    """Whether a run trains in the calling process: one rank, no launcher, and no child process asked for."""
    return in_process(settings, resolve_machines(settings, env)) and not settings.child_process


def accelerate_command(python: str, job_file: str, settings: DistributedSettings, machines: Machines, gpus: int,
                       free_port: int | str | None = None, worker: str = WORKER) -> list[str]:
    """`python -m accelerate.commands.launch ...` for one machine of the launch. On a single machine whose port no one
    set (MEDGYM_MAIN_PORT, the profile), `free_port` replaces the default, so concurrent launches never collide."""
    config = accelerate_config(settings.deepspeed, gpus)
    chosen = machines.sources.get("main_port") in (OVERRIDE_ENV["main_port"], "profile")
    port = machines.main_port if machines.multi_node or chosen or free_port is None else free_port
    cmd = [python, "-m", "accelerate.commands.launch", "--config_file", str(config),
           "--num_processes", str(settings.processes * machines.num_machines),
           "--num_machines", str(machines.num_machines), "--machine_rank", str(machines.machine_rank),
           "--main_process_port", str(port)]
    if machines.multi_node:
        cmd += ["--main_process_ip", machines.main_addr]
    return [*cmd, "-m", worker, job_file]


def describe(settings: DistributedSettings, gpus: int | None = None, env: Mapping[str, str] | None = None,
             python: str = "python", relative_to: Path = PROJECT_ROOT,
             count: Callable[[], int] = gpu_count, worker: str = WORKER) -> str:
    """The launch as the dry run prints it: the command with the job file as `<job.json>`."""
    machines = resolve_machines(settings, env)
    if in_process(settings, machines):
        return "in process (one CPU or GPU)"
    cmd = accelerate_command(python, "<job.json>", settings, machines, count() if gpus is None else gpus,
                             free_port="<free port>", worker=worker)
    cmd[cmd.index("--config_file") + 1] = str(Path(cmd[cmd.index("--config_file") + 1]).relative_to(relative_to))
    return " ".join(cmd)
