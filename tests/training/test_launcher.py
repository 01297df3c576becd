"""The accelerate command of a launch: machines from the profile or the environment, the accelerate file by device.

Each command is also parsed by accelerate's own argument parser, so a flag it does not know fails here."""

from __future__ import annotations

import sys

import pytest
import yaml

from components.training.config import DistributedSettings
from components.training.launcher import ACCELERATE_DIR, accelerate_command, accelerate_config, resolve_machines

PAPER = DistributedSettings(processes=8, deepspeed="zero3")


def flags(cmd: list[str]) -> dict[str, str]:
    """The launcher's flags of `cmd` (before `-m <worker>`), as accelerate parses them."""
    from accelerate.commands.launch import launch_command_parser

    args = launch_command_parser().parse_args(cmd[3:])
    return {"config_file": args.config_file, "num_processes": args.num_processes, "num_machines": args.num_machines,
            "machine_rank": args.machine_rank, "main_process_ip": args.main_process_ip,
            "main_process_port": args.main_process_port, "module": args.module,
            "script": args.training_script, "script_args": args.training_script_args}


def test_one_node_names_one_machine_rank_0_a_free_port_and_no_address():
    machines = resolve_machines(PAPER, env={})
    cmd = accelerate_command(sys.executable, "job.json", PAPER, machines, gpus=8, free_port=40123)
    got = flags(cmd)
    assert got == {"config_file": str(ACCELERATE_DIR / "zero3.yaml"), "num_processes": 8, "num_machines": 1,
                   "machine_rank": 0, "main_process_ip": None, "main_process_port": 40123, "module": True,
                   "script": "components.training.worker", "script_args": ["job.json"]}


def test_two_nodes_rank_1_from_medgym_variables():
    env = {"MEDGYM_NUM_MACHINES": "2", "MEDGYM_MACHINE_RANK": "1", "MEDGYM_MAIN_ADDR": "10.1.2.3",
           "MEDGYM_MAIN_PORT": "29611"}
    machines = resolve_machines(PAPER, env=env)
    got = flags(accelerate_command(sys.executable, "job.json", PAPER, machines, gpus=8, free_port=40123))
    # --num_processes is accelerate's total over machines; the profile's processes are per machine
    assert (got["num_processes"], got["num_machines"], got["machine_rank"]) == (16, 2, 1)
    assert (got["main_process_ip"], got["main_process_port"]) == ("10.1.2.3", 29611)


def test_medgym_variables_override_the_profile_which_overrides_the_scheduler():
    settings = DistributedSettings(processes=4, num_machines=4, main_addr="node-a", main_port=29700)
    env = {"MEDGYM_MACHINE_RANK": "2", "SLURM_NNODES": "9", "SLURM_NODEID": "3", "MASTER_ADDR": "node-z",
           "MASTER_PORT": "29999"}
    m = resolve_machines(settings, env=env)
    assert (m.num_machines, m.machine_rank, m.main_addr, m.main_port) == (4, 2, "node-a", 29700)
    assert m.sources == {"num_machines": "profile", "machine_rank": "MEDGYM_MACHINE_RANK", "main_addr": "profile",
                         "main_port": "profile"}


def test_slurm_and_torchrun_names_fill_what_neither_the_variables_nor_the_profile_set():
    slurm = resolve_machines(PAPER, env={"SLURM_NNODES": "3", "SLURM_NODEID": "2", "MASTER_ADDR": "n0",
                                         "MASTER_PORT": "29555"})
    assert (slurm.num_machines, slurm.machine_rank, slurm.main_addr, slurm.main_port) == (3, 2, "n0", 29555)
    torchrun = resolve_machines(PAPER, env={"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "n0"})
    assert (torchrun.num_machines, torchrun.machine_rank, torchrun.main_port) == (2, 1, 29500)
    assert torchrun.sources["main_port"] == "default"


def test_a_scheduler_port_on_one_machine_gives_way_to_a_free_port_and_a_chosen_one_does_not():
    ambient = resolve_machines(PAPER, env={"MASTER_PORT": "29500"})
    assert flags(accelerate_command("py", "j", PAPER, ambient, 8, free_port=41000))["main_process_port"] == 41000
    chosen = resolve_machines(PAPER, env={"MEDGYM_MAIN_PORT": "29800"})
    assert flags(accelerate_command("py", "j", PAPER, chosen, 8, free_port=41000))["main_process_port"] == 29800


@pytest.mark.parametrize(("env", "message"), [
    ({"MEDGYM_NUM_MACHINES": "two"}, "environment variable MEDGYM_NUM_MACHINES='two'"),
    ({"MEDGYM_MAIN_PORT": "70000"}, "environment variable MEDGYM_MAIN_PORT='70000'"),
    ({"SLURM_NNODES": "2", "MEDGYM_MACHINE_RANK": "2"}, "machine rank 2 (from MEDGYM_MACHINE_RANK) is not below the "
                                                        "number of machines 2 (from SLURM_NNODES)"),
])
def test_bad_machines_are_refused_naming_where_they_came_from(env, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_machines(PAPER, env=env)


def test_a_profile_rank_out_of_range_names_the_profile_field():
    with pytest.raises(ValueError, match=r"not below the number of machines 1 \(from default\)"):
        resolve_machines(DistributedSettings(machine_rank=1), env={})


def test_plain_ddp_on_gpus_never_picks_a_cpu_config():
    gpu = accelerate_config("none", gpus=8)
    cpu = accelerate_config("none", gpus=0)
    assert gpu.name == "multi_gpu.yaml" and cpu.name == "multi_cpu.yaml"
    assert yaml.safe_load(gpu.read_text())["use_cpu"] is False
    assert yaml.safe_load(cpu.read_text())["use_cpu"] is True
    for stage in ("zero2", "zero3", "zero3_offload"):  # DeepSpeed files serve both, as launched
        assert yaml.safe_load(accelerate_config(stage, gpus=8).read_text())["use_cpu"] is False
    settings = DistributedSettings(processes=8)
    cmd = accelerate_command("py", "j", settings, resolve_machines(settings, env={}), gpus=8, free_port=1234)
    assert flags(cmd)["config_file"] == str(ACCELERATE_DIR / "multi_gpu.yaml")


def test_the_dry_run_launch_line_shows_the_machines_of_this_environment(monkeypatch):
    from components.pipeline.kinds.train import launch_command

    for name in ("MEDGYM_NUM_MACHINES", "SLURM_NNODES", "NNODES", "SLURM_NODEID", "NODE_RANK", "MASTER_ADDR",
                 "MASTER_PORT", "MEDGYM_MACHINE_RANK", "MEDGYM_MAIN_ADDR", "MEDGYM_MAIN_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert launch_command(DistributedSettings()) == "in process (one CPU or GPU)"
    one = launch_command(PAPER, gpus=8)
    assert "--config_file infra/deepspeed/accelerate/zero3.yaml --num_processes 8 --num_machines 1" in one
    assert "--main_process_ip" not in one
    monkeypatch.setenv("MEDGYM_NUM_MACHINES", "2")
    monkeypatch.setenv("MEDGYM_MACHINE_RANK", "1")
    monkeypatch.setenv("MEDGYM_MAIN_ADDR", "10.0.0.7")
    two = launch_command(PAPER, gpus=8)
    assert ("--num_processes 16 --num_machines 2 --machine_rank 1 --main_process_port 29500 "
            "--main_process_ip 10.0.0.7 -m components.training.worker <job.json>") in two
    # several machines need the launcher even for one process each
    assert launch_command(DistributedSettings(), gpus=1).endswith("<job.json>")
