"""The `vllm` backend: exact token ids in, exact token ids and their log-probabilities out, from a vLLM server.

Each request is a plain completion over the episode's context as token ids (POST /v1/completions with `prompt`
a list of ints): the server never renders chat messages or tokenizes text, so what it conditions on is exactly
the context MedGym keeps (components.policies.tokens). It answers with `token_ids` (`return_token_ids`) and the
sampled tokens' log-probabilities (`logprobs: 0`: the chosen token only, from the raw distribution, see
VLLMServer's --logprobs-mode), and echoes `prompt_token_ids`, which is checked against what was sent. The text
is vLLM's own detokenization with special tokens skipped; an end-of-turn token stays in `token_ids`, as the
protocol wants (ChatTokens.close_response adds nothing after it).

A batch's requests go out concurrently (one thread pool), so vLLM's scheduler batches them itself. The policy
either owns a server (VLLMServer, started on construction, stopped by close()) or attaches to a running one
(`base_url`), whose served model and context it reads from /v1/models.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import Field, field_validator

from components.policies.fanout import all_or_first_error
from components.policies.models import resolve_model
from components.policies.protocol import CONTEXT_ERROR, FinishReason, Generation, GenerationRequest, context_exceeded
from components.policies.vllm_server import VLLMConfig, VLLMError, VLLMServer

_INT64_MAX = 2**63 - 1


class VLLMPolicyConfig(VLLMConfig):
    """VLLMConfig (how to start the server) plus how to talk to it. With `base_url` no server is started:
    `model` then only names the tokenizer's checkpoint (and the recorded model id)."""

    base_url: str | None = Field(default=None, description="attach to a running server, e.g. http://127.0.0.1:8000")
    tokenizer: str | None = Field(default=None, description="tokenizer checkpoint (None: model)")
    concurrency: int = Field(default=16, gt=0, description="requests in flight at most")
    request_timeout_s: float = Field(default=600.0, gt=0, description="one whole completion, CPU decoding included")

    @field_validator("base_url")
    @classmethod
    def _root_url(cls, value: str | None) -> str | None:
        # the command line's --base-url is shared with the openai backend, which wants .../v1: accept both
        if value is None:
            return None
        value = value.rstrip("/")
        return value.removesuffix("/v1")


class VLLMPolicy:
    backend = "vllm"
    uses_tokens = True

    def __init__(self, config: VLLMPolicyConfig | None = None, *, server: VLLMServer | None = None):
        """Attach to `config.base_url`, or use `server` (started if needed; the caller stops it), or start a
        server of our own from `config` (close() stops it)."""
        from transformers import AutoTokenizer

        self.config = config = config or VLLMPolicyConfig()
        self.model_id = config.model
        self._own_server = server is None and config.base_url is None
        self.server: VLLMServer | None = server
        if self._own_server:
            server_fields = VLLMConfig.model_fields.keys()
            self.server = VLLMServer(VLLMConfig(**{k: getattr(config, k) for k in server_fields}))
        self.tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.tokenizer or config.model))
        limits = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
        # our own server is on loopback: an HTTP(S)_PROXY from the environment must not sit in between
        self._client = httpx.Client(timeout=httpx.Timeout(config.request_timeout_s, connect=10.0), limits=limits,
                                    trust_env=self.server is None)
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="vllm-policy")
        self._closed = False
        try:
            if self.server is not None:
                self.server.start()
                self.base_url = self.server.base_url
                self.served_model_name = self.server.served_model_name
                self.max_context: int | None = self.server.config.max_model_len
            else:
                assert config.base_url is not None
                self.base_url = config.base_url
                self.served_model_name, self.max_context = self._served_model()
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_config(cls, **options: Any) -> VLLMPolicy:
        return cls(VLLMPolicyConfig(**options))

    def __repr__(self) -> str:
        return f"VLLMPolicy(model={self.model_id!r}, url={getattr(self, 'base_url', None)!r})"

    def __enter__(self) -> VLLMPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tracking_params(self) -> dict[str, str]:
        c = self.config
        return {"backend": self.backend, "model": self.model_id, "base_url": self.base_url,
                "max_model_len": str(self.max_context), "dtype": c.dtype, "enforce_eager": str(c.enforce_eager),
                "concurrency": str(c.concurrency), "attached": str(c.base_url is not None)}

    # ------------------------------------------------------------------ the protocol
    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        if self._closed:
            raise VLLMError("VLLMPolicy.generate after close()")
        return all_or_first_error(self._pool, self._one, requests)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()
        if self._own_server and self.server is not None:
            self.server.stop()

    def reload(self, checkpoint: str | Path) -> Literal["inplace", "restart"]:
        """Serve a new checkpoint (a training round's output) from now on; the recorded model id follows it."""
        if self.server is None:
            raise VLLMError("an attached policy (base_url) cannot reload: its server is not ours")
        how = self.server.reload(checkpoint)
        self.base_url = self.server.base_url  # a restart may have moved the port
        self.model_id = str(checkpoint)
        if how == "restart" and self.config.tokenizer is None:  # the new checkpoint's tokenizer may differ
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(self.server.model_dir)
        return how

    # ------------------------------------------------------------------ one request
    def _one(self, request: GenerationRequest) -> Generation:
        prompt = request.prompt_token_ids
        if not prompt:
            raise ValueError("the vllm backend needs prompt_token_ids on every request (see components.policies.tokens)")
        s = request.sampling
        budget = s.max_new_tokens if self.max_context is None else min(s.max_new_tokens, self.max_context - len(prompt))
        if budget <= 0:
            reason = f"prompt of {len(prompt)} tokens leaves no room in the context of {self.max_context}"
            return context_exceeded(reason)
        body = {
            "model": self.served_model_name, "prompt": list(prompt), "max_tokens": budget,
            "temperature": s.temperature, "top_p": s.top_p,
            "seed": request.turn_seed % _INT64_MAX,
            "logprobs": 0, "return_token_ids": True,
            "add_special_tokens": False,  # the ids are the whole context: no BOS in front of them
            "skip_special_tokens": True,  # the text without the end-of-turn token (token_ids keep it)
            "n": 1, "stream": False,
        }
        started = time.perf_counter()
        url = f"{self.base_url}/v1/completions"
        try:
            resp = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise VLLMError(f"POST {url}: {type(exc).__name__}: {exc}{self._server_hint()}") from None
        elapsed = time.perf_counter() - started
        if resp.status_code != 200:
            detail = _error_text(resp)
            if resp.status_code == 400 and CONTEXT_ERROR.search(detail):
                return context_exceeded(detail, elapsed)
            raise VLLMError(f"POST {url} returned {resp.status_code}: {detail}{self._server_hint()}")
        return _parse(resp, prompt, elapsed, url)

    def _served_model(self) -> tuple[str, int | None]:
        url = f"{self.base_url}/v1/models"
        try:
            data = self._client.get(url).raise_for_status().json()["data"]
            card = next(c for c in data if not c.get("parent"))  # the base model, not a LoRA adapter
            return str(card["id"]), card.get("max_model_len") or self.config.max_model_len
        except (httpx.HTTPError, ValueError, KeyError, TypeError, StopIteration) as exc:
            raise VLLMError(f"GET {url}: no served model ({type(exc).__name__}: {exc})") from None

    def _server_hint(self) -> str:
        if self.server is not None and not self.server.running():
            return f"; the server has exited, log {self.server.log_path}:\n{self.server.log_tail(2000)}"
        return ""


def _parse(resp: httpx.Response, prompt: list[int], elapsed: float, url: str) -> Generation:
    try:
        choice = resp.json()["choices"][0]
        text: str = choice["text"]
        token_ids = [int(t) for t in choice["token_ids"]]
        logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        echoed = choice.get("prompt_token_ids")
        raw_finish = choice.get("finish_reason")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise VLLMError(f"POST {url}: an answer without text, token_ids or logprobs ({type(exc).__name__}: {exc}): "
                        f"{resp.text[:300]!r}") from None
    if len(logprobs) != len(token_ids):
        raise VLLMError(f"POST {url}: {len(logprobs)} logprobs for {len(token_ids)} tokens")
    if echoed is not None and list(echoed) != list(prompt):
        # the whole point of this backend: a server that changed the context would poison training data
        raise VLLMError(f"POST {url}: the server's prompt_token_ids differ from the {len(prompt)} ids sent")
    metadata: dict[str, Any] = {}
    finish: FinishReason = "stop" if raw_finish == "stop" else "length" if raw_finish == "length" else "error"
    if finish == "error":  # abort, None, anything new: kept for the record
        metadata["finish_reason"] = raw_finish
    if choice.get("stop_reason") is not None:  # a stop string or token other than EOS
        metadata["stop_reason"] = choice["stop_reason"]
    return Generation(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=finish,
                      model_time_s=elapsed, metadata=metadata)


def _error_text(resp: httpx.Response) -> str:
    """vLLM's error message (error.message), else the body; one line, cut."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    text = resp.text
    if isinstance(body, dict):
        err = body.get("error")
        message = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else body.get("message")
        if isinstance(message, str):
            text = message
    return " ".join(text.split())[:300] or f"HTTP {resp.status_code}"
