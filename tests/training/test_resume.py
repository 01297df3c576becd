"""Resume: a training process killed after a checkpoint, started again, carries on from it to the planned step."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.training.config import LoraSettings, Schedule, SFTSettings
from components.training.data import sft_examples
from components.training.datasets import write_dataset
from components.training.trainers import RESULT, TrainJob, last_checkpoint, read_result
from tests.training.conftest import text_episodes

ROOT = Path(__file__).resolve().parents[2]
STEPS, SAVE = 8, 2


def worker(job_file: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "ab") as fh:
        return subprocess.Popen([sys.executable, "-m", "components.training.worker", str(job_file)], cwd=ROOT,
                                env=env, stdout=fh, stderr=subprocess.STDOUT)


def completed_steps(out: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").is_file())


@pytest.mark.timeout(600)
def test_a_killed_worker_resumes_from_its_checkpoint_and_finishes_the_planned_steps(tiny_model, tiny_chat, tmp_path):
    data = tmp_path / "data"
    write_dataset(data, "sft", sft_examples(text_episodes(4), tiny_chat), sources=[], tokenizer=str(tiny_model),
                  settings={})
    out = tmp_path / "run"
    job = TrainJob(method="sft", base_model=str(tiny_model), dataset_dir=data, out_dir=out,
                   sft=SFTSettings(packing=False, lora=LoraSettings(r=4, alpha=8, dropout=0.0),
                                   schedule=Schedule(max_steps=STEPS, batch_size=1, max_length=512, logging_steps=1,
                                                     save_steps=SAVE, save_total_limit=2, precision="fp32")))
    job_file = tmp_path / "job.json"
    job_file.write_text(job.model_dump_json())

    first = worker(job_file, tmp_path / "first.log")
    try:
        deadline = time.monotonic() + 300
        while not completed_steps(out) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert completed_steps(out), f"no checkpoint came: {(tmp_path / 'first.log').read_text()[-3000:]}"
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == -signal.SIGKILL
    assert not (out / RESULT).exists(), "the first run finished before it was killed: nothing was resumed"
    resume_from = last_checkpoint(out)
    assert resume_from is not None
    saved_step = int(Path(resume_from).name.split("-")[1])
    assert 0 < saved_step < STEPS
    saved_state = json.loads((Path(resume_from) / "trainer_state.json").read_text())
    assert saved_state["global_step"] == saved_step

    # what a kill in the middle of saving leaves: a newer checkpoint folder without its trainer state (written last)
    torn = out / f"checkpoint-{STEPS - 1}"
    torn.mkdir(exist_ok=True)
    (torn / "adapter_model.safetensors").write_bytes(b"")
    assert last_checkpoint(out) == resume_from

    second = worker(job_file, tmp_path / "second.log")
    assert second.wait(timeout=400) == 0, (tmp_path / "second.log").read_text()[-3000:]

    result = read_result(out)
    assert result.global_step == STEPS
    assert result.resumed_from == resume_from
    assert json.loads((out / "rank-0.json").read_text())["global_step"] == STEPS
    # the second run trained only the steps after the checkpoint: the history it printed starts there
    printed = re.findall(r"\{'loss': ", (tmp_path / "second.log").read_text())  # one log dict per step
    assert len(printed) == STEPS - saved_step
    steps = [h["step"] for h in result.log_history if "loss" in h]
    assert steps == list(range(1, STEPS + 1))  # each step once: the checkpoint's history, then the resumed run's
    assert result.log_history[:saved_step] == saved_state["log_history"][:saved_step]
    assert (out / "final" / "adapter_model.safetensors").is_file()
