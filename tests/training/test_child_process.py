"""`distributed.child_process`: a one-process training run in a child, so that what training allocated goes back
to the system when it ends instead of staying in the caller's heap (the demo pipeline's peak memory)."""

from __future__ import annotations

import json
import os

import pytest

from components.training.config import DistributedSettings, LoraSettings, Schedule, SFTSettings
from components.training.datasets import write_dataset
from components.training.stage import launch
from components.training.trainers import TrainJob
from tests.training.test_distributed import _rows


def _job(tiny_model, tmp_path, steps: int = 2) -> TrainJob:
    data = tmp_path / "data"
    write_dataset(data, "sft", _rows(8), sources=[], tokenizer=str(tiny_model), settings={})
    return TrainJob(method="sft", base_model=str(tiny_model), dataset_dir=data, out_dir=tmp_path / "run",
                    sft=SFTSettings(lora=LoraSettings(enabled=False),
                                    schedule=Schedule(max_steps=steps, batch_size=2, max_length=256, logging_steps=1,
                                                      save_steps=100, precision="fp32")))


def test_a_child_process_trains_the_steps_and_the_caller_reads_its_result(tiny_model, tmp_path):
    job = _job(tiny_model, tmp_path)
    result = launch(job, DistributedSettings(child_process=True))

    rank = json.loads((job.out_dir / "rank-0.json").read_text())
    assert rank["pid"] != os.getpid()  # it trained elsewhere
    assert result.global_step == rank["global_step"] == 2 and result.tokens > 0 and result.processes == 1
    assert (result.final_dir / "model.safetensors").is_file()
    assert not list(job.out_dir.glob(".job.*"))  # the job file is the launch's own, and gone


def test_a_failing_child_raises_here_and_leaves_no_job_file(tiny_model, tmp_path):
    job = _job(tiny_model, tmp_path)
    (job.dataset_dir / "rows.jsonl").write_text("{not json\n")
    with pytest.raises(RuntimeError, match="training launch exited"):
        launch(job, DistributedSettings(child_process=True))
    assert not list(job.out_dir.glob(".job.*"))
