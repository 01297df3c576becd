"""The GPU smoke's driver (bench/gpu_smoke.py, infra/gpu/smoke.sh) on this CPU: the whole path on the tiny shape
(ZeRO-3 launches of SFT and DPO, scoring, two GRPO steps), its figures printed; what it refuses before it starts;
and the wheel set `make gpu-wheels` downloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_smoke
from tests.conftest import ROOT, load_script


def _fetch_wheels():
    return load_script(ROOT / "infra" / "gpu" / "fetch_wheels.py")


@pytest.mark.slow
@pytest.mark.timeout(1800)  # under a minute on a quiet machine; the first ZeRO-3 launch here compiles DeepSpeed's CPU op
def test_the_cpu_tiny_smoke_runs_every_phase_and_prints_its_figures(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "infra" / "gpu" / "smoke.sh"), "--cpu-tiny", "--work", str(tmp_path),
                           "--phase-timeout", "900"], capture_output=True, text=True, timeout=1700,
                          env={**os.environ, "MEDGYM_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = {r["phase"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}
    assert results["sft"]["zero_stage"] == 3 and results["dpo"]["zero_stage"] == 3
    assert results["sft"]["steps"] == results["dpo"]["steps"] == 2 and results["grpo"]["steps"] == 2
    for phase, key in gpu_smoke.RATE.items():
        if phase != "vllm":
            assert results[phase][key] > 0 and results[phase]["peak_gib"] > 0, results[phase]
    assert results["score"]["episodes"] == gpu_smoke.SIZES["tiny"]["score"] and results["score"]["device"] == "cpu"
    assert "skipped" in results["vllm"]
    table = proc.stdout.splitlines()
    assert any(line.startswith("sft ") and "tokens/s" in line for line in table)
    assert "random tiny Qwen2 with vocabulary 151936" in proc.stderr
    config = json.loads((tmp_path / "init" / "config.json").read_text())
    assert config["vocab_size"] == 151936 and config["model_type"] == "qwen2"


def test_the_smoke_names_what_the_machine_must_bring(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_smoke, "BROUGHT", ("torch", "no_such_module_here"))
    with pytest.raises(SystemExit, match="no_such_module_here not importable: the GPU machine's Python must bring"):
        gpu_smoke.ensure_deps(tmp_path)
    monkeypatch.setattr(gpu_smoke, "BROUGHT", ("torch",))
    monkeypatch.setattr(gpu_smoke, "NEEDED", ("trl", "no_such_trainer"))
    with pytest.raises(SystemExit, match=r"no_such_trainer not importable and no wheel folder .*make gpu-wheels"):
        gpu_smoke.ensure_deps(tmp_path / "absent")


def test_the_0_5b_shape_is_qwen2_0_5b_and_the_gpu_run_refuses_a_cpu(tmp_path):
    assert gpu_smoke.SHAPES["0.5b"] == {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                                        "num_attention_heads": 14, "num_key_value_heads": 2}
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_smoke", "--work", str(tmp_path / "w"), "--phases", "score"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode != 0 and "no GPU visible to torch" in proc.stderr and "--cpu-tiny" in proc.stderr


def test_the_wheel_set_is_the_training_libraries_closure_without_torch_or_the_big_binaries():
    pins = _fetch_wheels().closure(gpu_smoke.NEEDED)
    assert set(gpu_smoke.NEEDED) <= set(pins) and {"tokenizers", "safetensors", "huggingface-hub"} <= set(pins)
    assert not {"torch", "triton", *gpu_smoke.BROUGHT} & set(pins)
    assert not any(n.startswith("nvidia-") for n in pins)
    from importlib.metadata import version

    assert pins["trl"] == version("trl") and pins["deepspeed"] == version("deepspeed")
    assert Path(ROOT / ".gitignore").read_text().count("/infra/gpu/wheels/") == 1
